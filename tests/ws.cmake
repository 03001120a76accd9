# tests/ws/: herald's WebSocket and TLS server side (issue 23) against independent clients:
# Node's `ws` package, raw node:net / node:tls sockets for what `ws` will not send, and
# `openssl s_client`; frames encoded with protobufjs from proto/herald.proto. Each file starts
# the herald built here (HERALD_BIN) on loopback ports it picks and stops it by PID. Packages
# from tests/ws/package-lock.json (scripts/install-deps.sh runs npm ci). Like clients.cmake's
# node tests they run in the unsanitized build only (scripts/test.sh's release pass).
# Labels: integration, plus websocket or tls (ctest -L takes a regex: "ws" would match browser).
if(HERALD_SANITIZE OR NOT TARGET herald)
    return()
endif()

find_program(NODE node)
if(NOT NODE)
    set(NODE node-not-found-run-scripts-install-deps.sh)
endif()
find_program(OPENSSL_BIN openssl)
if(NOT OPENSSL_BIN)
    set(OPENSSL_BIN openssl-not-found-run-scripts-install-deps.sh)
endif()
set(ws_dir ${CMAKE_CURRENT_SOURCE_DIR}/ws)

# herald_ws_test(file LABEL websocket|tls [hostile] [TIMEOUT s])
function(herald_ws_test file)
    cmake_parse_arguments(W "" "TIMEOUT" "LABEL" ${ARGN})
    if(NOT W_TIMEOUT)
        set(W_TIMEOUT 120)
    endif()
    add_test(NAME ${file} COMMAND ${NODE} --test ${file}.test.js WORKING_DIRECTORY ${ws_dir})
    set_tests_properties(${file} PROPERTIES TIMEOUT ${W_TIMEOUT} LABELS "integration;${W_LABEL}"
        ENVIRONMENT "HERALD_BIN=$<TARGET_FILE:herald>;OPENSSL_BIN=${OPENSSL_BIN}")
endfunction()

herald_ws_test(ws_handshake LABEL websocket)
herald_ws_test(ws_frames LABEL websocket)
herald_ws_test(ws_close LABEL websocket)
herald_ws_test(ws_flood LABEL websocket)
herald_ws_test(tls_listeners LABEL tls)
herald_ws_test(tls_reload LABEL tls)
# Handshakes that never finish: what each costs until the connect timeout (RSS per connection).
herald_ws_test(hostile_pending LABEL tls websocket hostile)

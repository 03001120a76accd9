# clients/: the client libraries' own tests, each with its language's test runner. clients/js
# runs on node's built-in runner (node --test), one ctest case per test file; its packages come
# from clients/js/package-lock.json (scripts/install-deps.sh runs npm ci). The integration
# files start the herald built here (HERALD_BIN), and redis-server, on loopback ports they pick.
# They test the client, not herald's C code, so they run in the unsanitized build only
# (scripts/test.sh's release pass), like deploy.cmake's. Labels: js, plus unit or integration.
if(HERALD_SANITIZE OR NOT TARGET herald)
    return()
endif()

find_program(NODE node)
if(NOT NODE)
    # Declared all the same, failing with what to do (scripts/install-deps.sh installs node).
    set(NODE node-not-found-run-scripts-install-deps.sh)
endif()
set(js_dir ${PROJECT_SOURCE_DIR}/clients/js)

# herald_js_test(file LABEL unit|integration [TIMEOUT s])
function(herald_js_test file)
    cmake_parse_arguments(J "" "LABEL;TIMEOUT" "" ${ARGN})
    if(NOT J_TIMEOUT)
        set(J_TIMEOUT 60)
    endif()
    add_test(NAME js_${file} COMMAND ${NODE} --test test/${file}.test.js WORKING_DIRECTORY ${js_dir})
    set_tests_properties(js_${file} PROPERTIES TIMEOUT ${J_TIMEOUT} LABELS "js;${J_LABEL}"
                         ENVIRONMENT "HERALD_BIN=$<TARGET_FILE:herald>")
endfunction()

foreach(t codec framing backoff cursor emitter)
    herald_js_test(${t} LABEL unit)
endforeach()
# The WebSocket transport against a scripted ws peer; the browser test runs Debian's chromium.
herald_js_test(websocket LABEL unit)
herald_js_test(browser LABEL integration TIMEOUT 120)
herald_js_test(pubsub LABEL integration TIMEOUT 120)
herald_js_test(recovery LABEL integration TIMEOUT 120)

# clients/js in Debian's headless Chromium against real herald nodes over ws:// and wss:// (a
# test CA in the NSS database of the HOME the browser runs with), subscribing with recovery,
# through a SIGTERM drain and a node restarted on the same ports (tests/browser/
# check_js_client.js). Screenshots stay in the build tree (tests/artifacts/js_client_*.png).
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_browser_js_client.sh)
    add_test(NAME test_browser_js_client
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_browser_js_client.sh
                     $<TARGET_FILE:herald> ${CMAKE_CURRENT_SOURCE_DIR}/browser ${PROJECT_SOURCE_DIR}
                     ${CMAKE_CURRENT_BINARY_DIR}/artifacts)
    set_tests_properties(test_browser_js_client PROPERTIES TIMEOUT 180
                         LABELS "browser;integration")
endif()

# loadgen: the receive fast path (unit) and herald-loadgen against a real herald (integration).
# Included by tests/CMakeLists.txt after gateway/ and loadgen/ declared their targets.
if(TARGET herald-loadgen AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_lg_wire.c)
    herald_test(test_lg_wire SOURCES unit/test_lg_wire.c ${PROJECT_SOURCE_DIR}/loadgen/lg_wire.c
                LIBS proto LABELS unit)
    target_include_directories(test_lg_wire PRIVATE ${PROJECT_SOURCE_DIR}/loadgen)
    # The receive fast path against protobuf-c, differentially (tests/fuzz/fuzz_lg_wire.c).
    if(HERALD_FUZZ AND TARGET proto_fuzz)
        herald_fuzz(fuzz_lg_wire SOURCES fuzz/fuzz_lg_wire.c ${PROJECT_SOURCE_DIR}/loadgen/lg_wire.c
                    LIBS proto_fuzz INCLUDES ${PROJECT_SOURCE_DIR}/loadgen SECONDS 5)
    endif()
endif()

# The WebSocket client's frames (read back by libwslay), masking and handshake checks
# (loadgen/lg_ws.c, libhttp-parser under the latter; its transport half links lg_tls.c and
# lg_transport.c, run against a real herald by test_loadgen_transport.sh).
if(TARGET herald-loadgen AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_lg_ws.c)
    find_package(OpenSSL REQUIRED COMPONENTS Crypto SSL)
    herald_test(test_lg_ws SOURCES unit/test_lg_ws.c ${PROJECT_SOURCE_DIR}/loadgen/lg_ws.c
                ${PROJECT_SOURCE_DIR}/loadgen/lg_ws_upgrade.c
                ${PROJECT_SOURCE_DIR}/loadgen/lg_tls.c ${PROJECT_SOURCE_DIR}/loadgen/lg_transport.c
                LIBS netlib proto OpenSSL::SSL OpenSSL::Crypto ext_wslay ext_http_parser
                LABELS unit)
    target_include_directories(test_lg_ws PRIVATE ${PROJECT_SOURCE_DIR}/loadgen)
endif()

# loadgen's own HS256 signer against herald's verifier (gw_token_verify): two independent
# implementations of PROTOCOL.md section 8 that must agree. The gateway is linked only here;
# herald-loadgen itself does not link it.
if(TARGET herald-loadgen AND TARGET gw_auth
   AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_lg_token.c)
    find_package(OpenSSL REQUIRED COMPONENTS Crypto)
    herald_test(test_lg_token SOURCES unit/test_lg_token.c
                ${PROJECT_SOURCE_DIR}/loadgen/lg_token.c ${PROJECT_SOURCE_DIR}/loadgen/lg_config.c
                LIBS gw_auth netlib proto OpenSSL::Crypto m LABELS unit)
    target_include_directories(test_lg_token PRIVATE ${PROJECT_SOURCE_DIR}/loadgen)
endif()

# The integration test needs both programs; herald exists once gateway/main.c does.
if(TARGET herald AND TARGET herald-loadgen
   AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_loadgen.sh)
    add_test(NAME test_loadgen
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_loadgen.sh
                     $<TARGET_FILE:herald> $<TARGET_FILE:herald-loadgen>)
    # The sanitizer options herald_test gives every test, for herald and loadgen alike.
    set(lg_env "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1"
               "UBSAN_OPTIONS=print_stacktrace=1 halt_on_error=1" "ASAN_OPTIONS=detect_leaks=1")
    set_tests_properties(test_loadgen PROPERTIES TIMEOUT 120 LABELS "integration;threaded"
                         ENVIRONMENT "${lg_env}")

    # --transport ws, tls and wss against herald's WebSocket and TLS listeners, with a test CA
    # made by openssl(1); and the certificates loadgen must refuse.
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_loadgen_transport.sh)
        add_test(NAME test_loadgen_transport
                 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_loadgen_transport.sh
                         $<TARGET_FILE:herald> $<TARGET_FILE:herald-loadgen>)
        set_tests_properties(test_loadgen_transport PROPERTIES TIMEOUT 240
                             LABELS "integration;threaded" ENVIRONMENT "${lg_env}")
    endif()

    # The --report page in Debian's headless Chromium (tests/browser, puppeteer-core): its
    # charts must hold the run's numbers. The page and its screenshot stay in the build tree
    # (tests/artifacts/loadgen_report.{html,png}).
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_loadgen_report.sh)
        add_test(NAME test_loadgen_report
                 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_loadgen_report.sh
                         $<TARGET_FILE:herald> $<TARGET_FILE:herald-loadgen>
                         ${CMAKE_CURRENT_SOURCE_DIR}/browser ${CMAKE_CURRENT_BINARY_DIR}/artifacts)
        set_tests_properties(test_loadgen_report PROPERTIES TIMEOUT 120
                             LABELS "browser;integration" ENVIRONMENT "${lg_env}")
    endif()

    # The admin console (/console) in headless Chromium while a loadgen runs: the figures it
    # shows against /metrics, its lookups and test publish, a wrong key; then the cluster view
    # of two nodes on Redis. Screenshots stay in tests/artifacts/console*.png. Release only,
    # like the report's check: Chromium and node are not what the sanitizers look at.
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_console.sh AND NOT HERALD_SANITIZE)
        add_test(NAME test_console
                 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_console.sh
                         $<TARGET_FILE:herald> $<TARGET_FILE:herald-loadgen>
                         ${CMAKE_CURRENT_SOURCE_DIR}/browser ${PROJECT_SOURCE_DIR}/clients/js
                         ${CMAKE_CURRENT_BINARY_DIR}/artifacts)
        set_tests_properties(test_console PROPERTIES TIMEOUT 180
                             LABELS "browser;integration" ENVIRONMENT "${lg_env}")
    endif()
endif()

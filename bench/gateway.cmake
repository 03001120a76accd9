# Issue 5's gateway figures (bench/RESULTS-gateway.md): idle memory per connection, broadcast
# fan-out throughput (side by side with Redis pub/sub when redis-server is installed) and
# light-load latency; issue 23's transports side by side (bench_gw_transport). Programs that print
# figures, never ctest cases (STYLE.md §9). They
# start herald themselves through the integration tests' harness and client.
if(NOT TARGET herald OR NOT TARGET proto OR NOT TARGET gw_auth)
    return()
endif()

set(GW_BENCH_SUPPORT
    ${PROJECT_SOURCE_DIR}/tests/herald_harness.c
    ${PROJECT_SOURCE_DIR}/tests/herald_http.c
    ${PROJECT_SOURCE_DIR}/tests/herald_client.c
    ${PROJECT_SOURCE_DIR}/tests/herald_fleet.c)
foreach(b bench_gw_idle bench_gw_fanout bench_gw_recovery bench_gw_transport)
    if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/${b}.c)
        # A program split over files keeps its parts as <name>_*.c next to <name>.c.
        file(GLOB parts ${CMAKE_CURRENT_LIST_DIR}/${b}_*.c)
        add_executable(${b} ${CMAKE_CURRENT_LIST_DIR}/${b}.c ${parts} ${GW_BENCH_SUPPORT})
        target_include_directories(${b} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
        if(b STREQUAL "bench_gw_recovery")
            # Reads Pushes in place with the load generator's tested, fuzzed wire reader.
            target_sources(${b} PRIVATE ${PROJECT_SOURCE_DIR}/loadgen/lg_wire.c)
            target_include_directories(${b} PRIVATE ${PROJECT_SOURCE_DIR}/loadgen)
        endif()
        if(b STREQUAL "bench_gw_transport")
            # Its clients are herald-loadgen's own transports (client TLS, WebSocket).
            find_package(OpenSSL REQUIRED COMPONENTS Crypto SSL)
            target_sources(${b} PRIVATE ${PROJECT_SOURCE_DIR}/loadgen/lg_wire.c
                           ${PROJECT_SOURCE_DIR}/loadgen/lg_tls.c
                           ${PROJECT_SOURCE_DIR}/loadgen/lg_ws.c
                           ${PROJECT_SOURCE_DIR}/loadgen/lg_ws_upgrade.c
                           ${PROJECT_SOURCE_DIR}/loadgen/lg_transport.c)
            target_include_directories(${b} PRIVATE ${PROJECT_SOURCE_DIR}/loadgen)
            target_link_libraries(${b} PRIVATE OpenSSL::SSL OpenSSL::Crypto ext_wslay
                                  ext_http_parser)
            target_compile_definitions(${b} PRIVATE HERALD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
        endif()
        target_compile_definitions(${b} PRIVATE HERALD_BIN="$<TARGET_FILE:herald>")
        target_link_libraries(${b} PRIVATE herald_build proto netlib gw_auth
                              Threads::Threads)
        add_dependencies(${b} herald)
    endif()
endforeach()

# A Redis failover through Sentinel under load (issue 27): the failover test's scenario
# (tests/failover_run.c), run several times at a publish rate, as figures.
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/bench_gw_failover.c)
    pkg_check_modules(BENCH_FO_HIREDIS REQUIRED IMPORTED_TARGET hiredis)
    add_executable(bench_gw_failover ${CMAKE_CURRENT_LIST_DIR}/bench_gw_failover.c
                   ${PROJECT_SOURCE_DIR}/tests/failover_run.c
                   ${PROJECT_SOURCE_DIR}/tests/redis_harness.c ${GW_BENCH_SUPPORT})
    target_include_directories(bench_gw_failover PRIVATE ${PROJECT_SOURCE_DIR}/tests)
    target_compile_definitions(bench_gw_failover PRIVATE HERALD_BIN="$<TARGET_FILE:herald>")
    target_link_libraries(bench_gw_failover PRIVATE herald_build proto netlib gw_auth
                          PkgConfig::BENCH_FO_HIREDIS Threads::Threads)
    add_dependencies(bench_gw_failover herald)
endif()

# The channel table's lookup cost at up to a million channels (gw_chantab.c's slot tags).
add_executable(bench_chantab ${CMAKE_CURRENT_LIST_DIR}/bench_chantab.c)
target_link_libraries(bench_chantab PRIVATE herald_build gw_channel)

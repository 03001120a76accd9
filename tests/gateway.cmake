# gateway: one cmocka executable per gw_* module, linked to its room (gateway/<room>). A unit
# test may look inside the room it tests (gw_test_inside: the room's private headers); nothing
# else may. gateway/CMakeLists.txt defines its pkg-config targets in its own directory scope,
# so the tests find the ones they use here.
if(TARGET gw_core)
    pkg_check_modules(GW_TEST_JANSSON REQUIRED IMPORTED_TARGET jansson)
    pkg_check_modules(GW_TEST_HIREDIS REQUIRED IMPORTED_TARGET hiredis)
    find_package(OpenSSL REQUIRED COMPONENTS Crypto)

    macro(gw_test_inside test room)
        if(TARGET ${test})
            target_include_directories(${test} PRIVATE ${PROJECT_SOURCE_DIR}/gateway/${room})
        endif()
    endmacro()

    herald_unit(test_gw_channel_name LIBS gw_channel LABELS unit)
    herald_unit(test_gw_chantab LIBS gw_channel LABELS unit)
    herald_unit(test_gw_token LIBS gw_auth OpenSSL::Crypto PkgConfig::GW_TEST_JANSSON
                LABELS unit hostile)
    herald_unit(test_gw_sub LIBS gw_fanout LABELS unit)
    herald_unit(test_gw_online LIBS gw_state LABELS unit)
    herald_unit(test_gw_evgate LIBS gw_state LABELS unit)
    herald_unit(test_gw_history_rules LIBS gw_config LABELS unit)
    herald_unit(test_gw_history LIBS gw_state LABELS unit)
    herald_unit(test_gw_config LIBS gw_config LABELS unit hostile)
    herald_unit(test_gw_config_reload LIBS gw_config LABELS unit hostile)
    herald_unit(test_gw_recent LIBS gw_engine_memory LABELS unit)
    gw_test_inside(test_gw_recent engine/memory)
    herald_unit(test_gw_hashring LIBS gw_engine_redis LABELS unit)
    gw_test_inside(test_gw_hashring engine/redis)
    # The Redis link against real redis-server processes (tests/redis_harness.c).
    foreach(t test_gw_redis_link test_gw_redis_sub test_gw_redis_schema test_gw_redis_sentinel)
        herald_test(${t} SOURCES integration/${t}.c redis_harness.c LIBS gw_engine_redis
                    PkgConfig::GW_TEST_HIREDIS LABELS integration TIMEOUT 120)
        target_include_directories(${t} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
        gw_test_inside(${t} engine/redis)
    endforeach()
    herald_unit(test_gw_metrics LIBS gw_admin PkgConfig::GW_TEST_JANSSON LABELS unit)
    gw_test_inside(test_gw_metrics admin)
    herald_unit(test_gw_http LIBS gw_admin LABELS unit threaded TIMEOUT 60)
    gw_test_inside(test_gw_http admin)
    herald_unit(test_gw_ws_upgrade LIBS gw_transport LABELS unit websocket)
    gw_test_inside(test_gw_ws_upgrade transport)
endif()

# Fuzz targets for what clients and operators hand the gateway: tokens, channel names, the
# config file and HERALD_* variables. Each compiles the modules it tests into itself, so that
# they carry the fuzzer's coverage hooks (the room libraries do not); the headers come from
# the rooms' include folders.
if(HERALD_FUZZ AND TARGET gw_core AND CMAKE_C_COMPILER_ID MATCHES "Clang")
    pkg_check_modules(GW_FUZZ_INIH REQUIRED IMPORTED_TARGET inih)
    set(gw ${PROJECT_SOURCE_DIR}/gateway)
    set(gw_includes ${gw}/channel/include ${gw}/auth/include ${gw}/fanout/include
        ${gw}/transport/include
        ${gw}/state/include ${gw}/config/include)
    herald_fuzz(fuzz_gw_channel_name SOURCES fuzz/fuzz_gw_channel_name.c
                ${gw}/channel/gw_channel_name.c LIBS netlib INCLUDES ${gw_includes} SECONDS 5)
    herald_fuzz(fuzz_gw_token SOURCES fuzz/fuzz_gw_token.c ${gw}/auth/gw_token.c
                ${gw}/channel/gw_channel_name.c
                LIBS netlib OpenSSL::Crypto PkgConfig::GW_TEST_JANSSON INCLUDES ${gw_includes}
                DICT fuzz/fuzz_gw_token.dict SECONDS 5)
    herald_fuzz(fuzz_gw_config SOURCES fuzz/fuzz_gw_config.c ${gw}/config/gw_config.c
                ${gw}/config/gw_config_value.c ${gw}/config/gw_config_defaults.c
                ${gw}/channel/gw_channel_name.c ${gw}/config/gw_history_rules.c
                LIBS netlib proto PkgConfig::GW_FUZZ_INIH INCLUDES ${gw_includes} SECONDS 5)
endif()

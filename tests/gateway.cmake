# gateway: one cmocka executable per gw_* module. gateway/CMakeLists.txt defines its
# pkg-config targets in its own directory scope, so the tests find the ones they use here.
if(TARGET gateway_core)
    pkg_check_modules(GW_TEST_JANSSON REQUIRED IMPORTED_TARGET jansson)
    find_package(OpenSSL REQUIRED COMPONENTS Crypto)

    herald_unit(test_gw_channel_name LIBS gateway_core LABELS unit)
    herald_unit(test_gw_config LIBS gateway_core LABELS unit)
    herald_unit(test_gw_config_reload LIBS gateway_core LABELS unit)
    herald_unit(test_gw_token LIBS gateway_core OpenSSL::Crypto PkgConfig::GW_TEST_JANSSON
                LABELS unit)
    herald_unit(test_gw_metrics LIBS gateway_core PkgConfig::GW_TEST_JANSSON LABELS unit)
    herald_unit(test_gw_http LIBS gateway_core LABELS unit threaded TIMEOUT 60)
endif()
if(TARGET gateway_core)
    herald_unit(test_gw_sub LIBS gateway_core LABELS unit)
    herald_unit(test_gw_chantab LIBS gateway_core LABELS unit)
    herald_unit(test_gw_history_rules LIBS gateway_core LABELS unit)
    herald_unit(test_gw_history LIBS gateway_core LABELS unit)
    # The Redis link against real redis-server processes (tests/redis_harness.c).
    herald_unit(test_gw_hashring LIBS gateway_core LABELS unit)
    foreach(t test_gw_redis_link test_gw_redis_sub test_gw_redis_schema)
        herald_test(${t} SOURCES integration/${t}.c redis_harness.c LIBS gateway_core
                    LABELS integration TIMEOUT 120)
        target_include_directories(${t} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
    endforeach()
    herald_unit(test_gw_online LIBS gateway_core LABELS unit)
    herald_unit(test_gw_lastseen LIBS gateway_core LABELS unit)
endif()

# Fuzz targets for what clients and operators hand the gateway: tokens, channel names, the
# config file and HERALD_* variables. Each compiles the modules it tests into itself, so that
# they carry the fuzzer's coverage hooks (gateway_core does not).
if(HERALD_FUZZ AND TARGET gateway_core AND CMAKE_C_COMPILER_ID MATCHES "Clang")
    pkg_check_modules(GW_FUZZ_INIH REQUIRED IMPORTED_TARGET inih)
    set(gw_dir ${PROJECT_SOURCE_DIR}/gateway)
    herald_fuzz(fuzz_gw_channel_name SOURCES fuzz/fuzz_gw_channel_name.c
                ${gw_dir}/gw_channel_name.c LIBS netlib INCLUDES ${gw_dir} SECONDS 5)
    herald_fuzz(fuzz_gw_token SOURCES fuzz/fuzz_gw_token.c ${gw_dir}/gw_token.c
                ${gw_dir}/gw_channel_name.c
                LIBS netlib OpenSSL::Crypto PkgConfig::GW_TEST_JANSSON INCLUDES ${gw_dir}
                DICT fuzz/fuzz_gw_token.dict SECONDS 5)
    herald_fuzz(fuzz_gw_config SOURCES fuzz/fuzz_gw_config.c ${gw_dir}/gw_config.c
                ${gw_dir}/gw_config_value.c ${gw_dir}/gw_config_defaults.c
                ${gw_dir}/gw_channel_name.c ${gw_dir}/gw_history_rules.c
                LIBS netlib PkgConfig::GW_FUZZ_INIH INCLUDES ${gw_dir} SECONDS 5)
endif()

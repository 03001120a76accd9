# deploy/ and dashboards/ (issue 19): the files operators install, checked with the tools that
# will read them (systemd-analyze, systemd-sysusers, promtool, HAProxy, a YAML parser) and
# against a running herald. Scripts in tests/deploy/. They test files and scripts, not C code,
# so they run in the unsanitized build only (scripts/test.sh's release pass), like pool_model.
# Labels: deploy, plus unit (files only, seconds) or integration (starts processes).
if(HERALD_SANITIZE OR NOT TARGET herald)
    return()
endif()
find_program(PYTHON3 python3 REQUIRED)
set(deploy_dir ${CMAKE_CURRENT_SOURCE_DIR}/deploy)

# herald_deploy_test(name TIMEOUT s LABELS ... COMMAND ...)
function(herald_deploy_test name)
    cmake_parse_arguments(D "" "TIMEOUT" "LABELS;COMMAND" ${ARGN})
    add_test(NAME ${name} COMMAND ${D_COMMAND})
    set_tests_properties(${name} PROPERTIES TIMEOUT ${D_TIMEOUT} LABELS "deploy;${D_LABELS}")
endfunction()

# Every setting of herald --print-config is in gateway/herald.example.conf, with its default,
# a comment and its (R) mark.
herald_deploy_test(deploy_example_conf TIMEOUT 30 LABELS unit
    COMMAND ${PYTHON3} ${deploy_dir}/check_example_conf.py $<TARGET_FILE:herald>
            ${PROJECT_SOURCE_DIR}/gateway/herald.example.conf)
# The systemd unit (systemd-analyze verify and security), sysusers, sysctl and limits files.
herald_deploy_test(deploy_unit_files TIMEOUT 60 LABELS unit
    COMMAND ${PYTHON3} ${deploy_dir}/check_deploy_files.py $<TARGET_FILE:herald>
            ${PROJECT_SOURCE_DIR})

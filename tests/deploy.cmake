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

# dashboards/: promtool on the scrape config and every rules file; the dashboard's structure
# and rows; and a running herald exporting every metric a panel or an alert uses, its
# /metrics clean under promtool check metrics.
find_program(PROMTOOL promtool)
if(NOT PROMTOOL)
    # Without promtool (scripts/install-deps.sh installs Debian's prometheus) the tests that
    # need it are still declared, and fail saying so.
    set(PROMTOOL promtool-not-found-run-scripts-install-deps.sh)
endif()
herald_deploy_test(deploy_prometheus_files TIMEOUT 60 LABELS unit
    COMMAND bash ${deploy_dir}/check_prometheus.sh ${PROMTOOL} ${PROJECT_SOURCE_DIR})
herald_deploy_test(deploy_dashboard_json TIMEOUT 30 LABELS unit
    COMMAND ${PYTHON3} ${deploy_dir}/check_dashboard.py
            ${PROJECT_SOURCE_DIR}/dashboards/herald-grafana.json)
herald_deploy_test(deploy_metrics_live TIMEOUT 60 LABELS integration
    COMMAND ${PYTHON3} ${deploy_dir}/check_metrics.py $<TARGET_FILE:herald> ${PROMTOOL}
            ${PROJECT_SOURCE_DIR}/dashboards/herald-grafana.json
            ${PROJECT_SOURCE_DIR}/dashboards/herald-alerts.yml
            ${PROJECT_SOURCE_DIR}/dashboards/herald-alerts-redis.yml)

# deploy/local-cluster.sh up, herald-loadgen through its HAProxy, down: the run delivers, both
# nodes serve, Prometheus scrapes them and evaluates the alert rules, nothing is left running.
if(TARGET herald-loadgen)
    herald_deploy_test(deploy_local_cluster TIMEOUT 120 LABELS integration
        COMMAND bash ${deploy_dir}/test_local_cluster.sh ${PROJECT_SOURCE_DIR}
                $<TARGET_FILE:herald> $<TARGET_FILE:herald-loadgen>)
endif()

# deploy/Dockerfile and deploy/compose.yaml, statically (no container engine needed): the
# compose file parsed and cross-checked with the files it mounts (haproxy -c, herald
# --check-config, Grafana provisioning), the Dockerfile's stages, user and runtime libraries
# against the built herald, and the entrypoint run for real. The container tests below build
# and run them.
herald_deploy_test(deploy_compose_files TIMEOUT 60 LABELS unit
    COMMAND ${PYTHON3} ${deploy_dir}/check_compose.py $<TARGET_FILE:herald> ${PROJECT_SOURCE_DIR})

# The image and the stack built and run with Debian's podman, as root (label container;
# scripts/install-deps.sh installs podman, runc, podman-compose, debootstrap). The first run
# on a machine also makes the base image debian:12-slim (deploy/make-base-image.sh) and fills
# podman's build cache; later runs reuse both. One at a time (RESOURCE_LOCK), so a cold
# machine builds the image once. container_lib.sh says what they name and remove.
#   test_container.sh: deploy/Dockerfile built; the container through its published port
#     (loadgen delivers everything), as UID 10001, no secret in argv or podman inspect,
#     podman stop drains and exits 0, the HEALTHCHECK passes when ready and fails draining.
#   test_compose_stack.sh: compose.yaml + compose.debian.yaml with podman-compose, Redis and
#     the two nodes: a broadcast through one node reaches the clients of both; down drains
#     the nodes and leaves no container.
if(TARGET herald-loadgen AND TARGET proto_py)
    herald_deploy_test(deploy_container TIMEOUT 900 LABELS container integration
        COMMAND bash ${deploy_dir}/test_container.sh ${PROJECT_SOURCE_DIR}
                $<TARGET_FILE:herald-loadgen> ${proto_py_dir})
    herald_deploy_test(deploy_compose_stack TIMEOUT 900 LABELS container integration
        COMMAND bash ${deploy_dir}/test_compose_stack.sh ${PROJECT_SOURCE_DIR}
                $<TARGET_FILE:herald-loadgen> ${proto_py_dir})
    set_tests_properties(deploy_container deploy_compose_stack PROPERTIES RESOURCE_LOCK podman)
endif()

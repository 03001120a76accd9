# The pingpong benchmark (bench/pingpong.sh): netlib's echo server and client, and libevent's
# echo server as the reference. Programs only, never ctest cases (STYLE.md §9).
add_executable(pingpong_netlib ${CMAKE_CURRENT_LIST_DIR}/pingpong_netlib.c)
target_link_libraries(pingpong_netlib PRIVATE herald_build netlib)

# libevent-dev is installed by scripts/install-deps.sh: the reference is required, not optional.
pkg_check_modules(LIBEVENT_CORE REQUIRED IMPORTED_TARGET libevent_core)
add_executable(pingpong_libevent ${CMAKE_CURRENT_LIST_DIR}/pingpong_libevent.c)
target_link_libraries(pingpong_libevent PRIVATE herald_build PkgConfig::LIBEVENT_CORE)

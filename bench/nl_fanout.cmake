# bench_nl_fanout (bench/bench_nl_fanout.c): netlib's block fan-out on one loop, CPU time per
# delivery. A program only, never a ctest case (STYLE.md §9).
add_executable(bench_nl_fanout ${CMAKE_CURRENT_LIST_DIR}/bench_nl_fanout.c)
target_link_libraries(bench_nl_fanout PRIVATE herald_build netlib Threads::Threads)

# The worker-pool benchmark (bench/bench_pool.c): nl_pool against a mutex + condition variable
# + deque pool written inside the program. A program only, never a ctest case (STYLE.md §9).
add_executable(bench_pool ${CMAKE_CURRENT_LIST_DIR}/bench_pool.c ${CMAKE_CURRENT_LIST_DIR}/c2c.c)
target_link_libraries(bench_pool PRIVATE herald_build netlib Threads::Threads)

# bench_c2c: the machine's CPU-to-CPU cache-line round trip (bench/c2c.c), printed beside the
# pool and pingpong tables. A program only, never a ctest case (STYLE.md §9).
add_executable(bench_c2c ${CMAKE_CURRENT_LIST_DIR}/bench_c2c.c ${CMAKE_CURRENT_LIST_DIR}/c2c.c)
target_link_libraries(bench_c2c PRIVATE herald_build netlib Threads::Threads)

# Shared build settings: the warning set every target we write compiles with, and the
# sanitizer flags. Targets opt in with target_link_libraries(x PRIVATE herald_build).

add_library(herald_build INTERFACE)
target_compile_options(herald_build INTERFACE
    -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
    -Wwrite-strings -Wpointer-arith -Wformat=2)
target_compile_definitions(herald_build INTERFACE _GNU_SOURCE)
if(HERALD_DEBUG_LOG)
    target_compile_definitions(herald_build INTERFACE HERALD_DEBUG_LOG)
endif()

# Generated code (protobuf-c) builds with the feature macros and sanitizers but not -Werror.
add_library(herald_build_generated INTERFACE)
target_compile_definitions(herald_build_generated INTERFACE _GNU_SOURCE)

if(HERALD_SANITIZE)
    # Applied globally so that every object, generated code included, is instrumented alike.
    add_compile_options(-fsanitize=${HERALD_SANITIZE} -fno-omit-frame-pointer
                        -fno-sanitize-recover=all)
    add_link_options(-fsanitize=${HERALD_SANITIZE})
    if(HERALD_SANITIZE MATCHES "thread")
        set(HERALD_TSAN ON)
    endif()
endif()

# herald_test(NAME SOURCES src... [LIBS lib...] [LABELS l...] [TIMEOUT s])
# One cmocka executable per module, each its own ctest case (STYLE.md §9).
function(herald_test name)
    cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
    if(NOT T_TIMEOUT)
        set(T_TIMEOUT 60)
    endif()
    add_executable(${name} ${T_SOURCES})
    target_link_libraries(${name} PRIVATE herald_build ${T_LIBS} ${CMOCKA_LINK_LIBRARIES}
                          Threads::Threads)
    target_include_directories(${name} PRIVATE ${CMOCKA_INCLUDE_DIRS}
                               ${PROJECT_SOURCE_DIR}/tests)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}"
        ENVIRONMENT "HERALD_BUILD_DIR=${PROJECT_BINARY_DIR};HERALD_SOURCE_DIR=${PROJECT_SOURCE_DIR};TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1;UBSAN_OPTIONS=print_stacktrace=1 halt_on_error=1;ASAN_OPTIONS=detect_leaks=1")
endfunction()

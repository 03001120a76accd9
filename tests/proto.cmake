# proto: the frame codec's unit test, the interoperability test against Python's stock
# protobuf runtime, and the decoder's libFuzzer target. Included by tests/CMakeLists.txt.
if(NOT TARGET proto)
    return()
endif()

herald_unit(test_proto_frame LIBS proto LABELS unit)

# Interoperability: herald_pb2.py is generated into the build tree by Debian's protoc, and
# /usr/bin/python3 (Debian's python3-protobuf; the pyenv python on PATH lacks it) drives
# proto_tool both ways.
find_program(HERALD_PROTOC protoc)
if(HERALD_PROTOC AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/integration/proto_tool.c)
    set(proto_py_dir ${CMAKE_CURRENT_BINARY_DIR}/proto_py)
    add_custom_command(
        OUTPUT ${proto_py_dir}/herald_pb2.py
        COMMAND ${CMAKE_COMMAND} -E make_directory ${proto_py_dir}
        COMMAND ${HERALD_PROTOC} --python_out=${proto_py_dir}
                --proto_path=${PROJECT_SOURCE_DIR}/proto ${PROJECT_SOURCE_DIR}/proto/herald.proto
        DEPENDS ${PROJECT_SOURCE_DIR}/proto/herald.proto
        COMMENT "protoc --python_out herald.proto"
        VERBATIM)
    add_custom_target(proto_py ALL DEPENDS ${proto_py_dir}/herald_pb2.py)

    add_executable(proto_tool integration/proto_tool.c)
    target_link_libraries(proto_tool PRIVATE herald_build proto)
    add_dependencies(proto_tool proto_py)

    add_test(NAME test_proto_interop
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_proto_interop.py
                     --tool $<TARGET_FILE:proto_tool> --pydir ${proto_py_dir})
    set_tests_properties(test_proto_interop PROPERTIES TIMEOUT 120 LABELS integration
        ENVIRONMENT "UBSAN_OPTIONS=print_stacktrace=1 halt_on_error=1;ASAN_OPTIONS=detect_leaks=1")
endif()

# The decoder's fuzz target: clang only, with -DHERALD_FUZZ=ON (scripts/test.sh builds it in
# the ASan+UBSan configuration). Runs 60 s on a copy of the seed corpus so the source tree
# is never written; crash artifacts land in this build directory.
if(HERALD_FUZZ AND TARGET proto_fuzz)
    add_executable(fuzz_proto_frame fuzz/fuzz_proto_frame.c)
    target_compile_options(fuzz_proto_frame PRIVATE -fsanitize=fuzzer)
    target_link_options(fuzz_proto_frame PRIVATE -fsanitize=fuzzer)
    target_link_libraries(fuzz_proto_frame PRIVATE herald_build proto_fuzz)
    add_test(NAME fuzz_proto_frame
             COMMAND sh -c "d=$(mktemp -d) && cp \"$1\"/* \"$d\"/ && \"$2\" -max_total_time=60 -timeout=10 -artifact_prefix=\"$3\"/fuzz_proto_frame- \"$d\"; rc=$?; rm -rf \"$d\"; exit $rc"
                     fuzz_proto_frame ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus_proto_frame
                     $<TARGET_FILE:fuzz_proto_frame> ${CMAKE_CURRENT_BINARY_DIR})
    set_tests_properties(fuzz_proto_frame PROPERTIES TIMEOUT 120 LABELS fuzz
        ENVIRONMENT "UBSAN_OPTIONS=print_stacktrace=1 halt_on_error=1;ASAN_OPTIONS=detect_leaks=1")
endif()

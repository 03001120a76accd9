# proto: the frame codec's unit test, the interoperability test against Python's stock
# protobuf runtime, and the decoder's libFuzzer target. Included by tests/CMakeLists.txt.
if(NOT TARGET proto)
    return()
endif()

herald_unit(test_proto_frame LIBS proto LABELS unit)
# The WebSocket frame reader the server and loadgen share.
herald_unit(test_proto_ws LIBS proto LABELS unit)

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
# the ASan+UBSan configuration). It links proto_fuzz, the codec compiled with coverage hooks.
if(HERALD_FUZZ AND TARGET proto_fuzz)
    herald_fuzz(fuzz_proto_frame SOURCES fuzz/fuzz_proto_frame.c LIBS proto_fuzz SECONDS 60)
    # WebSocket frames off the network, read by the server and loadgen alike (proto_ws.c).
    herald_fuzz(fuzz_proto_ws SOURCES fuzz/fuzz_proto_ws.c LIBS proto_fuzz SECONDS 30)
endif()

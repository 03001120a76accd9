# embed_assets.cmake: turns the admin console's files (gateway/admin/console/) into one C
# source in the build tree, so herald serves them from its own binary: no files to install
# beside it, nothing fetched at run time. Run at build time by gateway/admin/CMakeLists.txt:
#
#   cmake -DDIR=<console folder> -DOUT=<file.c> -P embed_assets.cmake
#
# Every file of DIR becomes a byte array and a row of gw_console_assets[] (gw_console_assets.h):
# index.html is served at /console, any other file at /console/<name>, with a Content-Type
# from its extension (html, css, js, svg; any other extension is an error, so nothing is
# served with a guessed type). Rows are sorted by file name, so the output is reproducible.
if(NOT DIR OR NOT OUT)
    message(FATAL_ERROR "usage: cmake -DDIR=<folder> -DOUT=<file.c> -P embed_assets.cmake")
endif()

set(line16 "")
foreach(i RANGE 1 16)
    string(APPEND line16 "0x[0-9a-f][0-9a-f],")
endforeach()

file(GLOB files RELATIVE ${DIR} ${DIR}/*)
list(SORT files)
set(arrays "")
set(rows "")
set(index 0)
foreach(name IN LISTS files)
    if(IS_DIRECTORY ${DIR}/${name})
        continue()
    endif()
    if(name MATCHES "\\.html$")
        set(type "text/html; charset=utf-8")
    elseif(name MATCHES "\\.css$")
        set(type "text/css; charset=utf-8")
    elseif(name MATCHES "\\.js$")
        set(type "text/javascript; charset=utf-8")
    elseif(name MATCHES "\\.svg$")
        set(type "image/svg+xml")
    else()
        message(FATAL_ERROR "embed_assets: no Content-Type for ${name}")
    endif()
    if(name STREQUAL "index.html")
        set(path "/console")
    else()
        set(path "/console/${name}")
    endif()
    file(READ ${DIR}/${name} hex HEX)
    string(LENGTH "${hex}" hex_len)
    if(hex_len EQUAL 0)
        message(FATAL_ERROR "embed_assets: ${name} is empty")
    endif()
    # Two hex digits per byte, sixteen bytes per line (CMake's regex has no {16}).
    string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
    string(REGEX REPLACE "(${line16})" "\\1\n    " bytes "${bytes}")
    string(REGEX REPLACE "\n    $" "" bytes "${bytes}")
    string(APPEND arrays "/* ${name} */\nstatic const unsigned char asset_${index}[] = {\n    ${bytes}\n};\n\n")
    string(APPEND rows "    {\"${path}\", \"${type}\", asset_${index}, sizeof(asset_${index})},\n")
    math(EXPR index "${index} + 1")
endforeach()
if(index EQUAL 0)
    message(FATAL_ERROR "embed_assets: no files in ${DIR}")
endif()

file(WRITE ${OUT} "/* Generated at build time by cmake/embed_assets.cmake from the files of
 * gateway/admin/console/. Do not edit, do not commit. */
#include \"gw_console_assets.h\"

${arrays}const gw_console_asset_t gw_console_assets[] = {
${rows}};
const size_t gw_console_n_assets = ${index};
")

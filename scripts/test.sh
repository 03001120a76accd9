#!/usr/bin/env bash
# The whole test suite: installs what is missing, then builds and runs ctest three ways:
#   1. Release (gcc),                       every test, clients/js's node tests included
#   2. AddressSanitizer + UBSan (clang),    every test, plus the libFuzzer targets
#   3. ThreadSanitizer (clang),             the tests labelled "threaded"
# Fails if any build or test fails. Usage: scripts/test.sh [extra ctest args]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/install-deps.sh"

jobs=$(nproc)
# Integration tests hold thousands of sockets; the hard limit here is 20,000.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

run() { # name, ctest args..., -- cmake args...
    local name=$1; shift
    local ctest_args=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do ctest_args+=("$1"); shift; done
    shift
    local dir="$here/build/$name"
    echo "=== $name: configure and build" >&2
    cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
    cmake --build "$dir" -j "$jobs" >/dev/null
    echo "=== $name: ctest ${ctest_args[*]}" >&2
    (cd "$dir" && ctest --output-on-failure -j "$jobs" "${ctest_args[@]}" "${extra[@]}")
}

extra=("$@")
run release -- -DCMAKE_C_COMPILER=gcc
run asan -- -DCMAKE_C_COMPILER=clang -DHERALD_SANITIZE=address,undefined -DHERALD_FUZZ=ON
run tsan -L threaded -- -DCMAKE_C_COMPILER=clang -DHERALD_SANITIZE=thread
echo "=== all test builds passed" >&2

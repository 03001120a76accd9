#!/usr/bin/env bash
# The demo: installs what is missing, builds, runs the netlib echo server under the pingpong
# load for 10 s and prints a summary. Usage: scripts/demo.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/install-deps.sh"
dir="$here/build/release"
cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$dir" -j "$(nproc)" >/dev/null
exec "$here/bench/pingpong.sh" --demo

#!/usr/bin/env bash
# The demo: installs what is missing, builds, starts herald, runs a short `seed` load (2,000 idle
# + 200 active clients for 10 s, herald-loadgen) and prints its summary and herald's RSS and CPU.
# Usage: scripts/demo.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/install-deps.sh"
dir="$here/build/release"
cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$dir" -j "$(nproc)" >/dev/null
exec "$here/loadgen/scenarios/seed.sh" --short --build "$dir"

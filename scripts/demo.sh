#!/usr/bin/env bash
# The demo: installs what is missing, builds, starts herald, runs a short `seed` load (2,000 idle
# + 200 active clients for 10 s, herald-loadgen) and prints its summary and herald's RSS and CPU,
# then the path of the run's HTML report (charts of latency, throughput and connections over
# time, and the latency histogram: open it in any browser, it needs no network).
# Usage: scripts/demo.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/install-deps.sh"
dir="$here/build/release"
cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$dir" -j "$(nproc)" >/dev/null
report="$dir/demo-report.html"
rm -f "$report"
status=0
"$here/loadgen/scenarios/seed.sh" --short --build "$dir" -- --report "$report" || status=$?
if [ -f "$report" ]; then
    echo "demo: report: $report (file://$report)"
fi
exit "$status"

#!/usr/bin/env bash
# idle_matrix: bench_gw_idle's eight client patterns (Subscribe pipelined behind Connect or
# sent after ConnectOk, one user or distinct users, one or two IO loops) at 10,000 and 19,000
# connections, --repeat runs of each, every run on a fresh herald, round by round so the
# machine's drift spreads over all patterns. Prints every run's line, then one table per size
# (every run's bytes per idle connection, the worst, and whether it is within 512).
#
# Usage: bench/idle_matrix.sh [--herald PATH] [--repeat 3] [--conns "10000 19000"]
#                             [--settle-ms 3000] [--procs 2]
# A process may hold 20,000 descriptors here: herald holds every connection (19,000 fits),
# the clients are split over --procs processes. Each run takes a few seconds (a 19,000 one up
# to a minute when the connect ramp overflows the listen backlog); all of it is bounded by
# bench_gw_idle's own deadlines.
set -euo pipefail

herald="" repeat=3 sizes="10000 19000" settle=3000 procs=2
while [ $# -gt 0 ]; do
    case "$1" in
    --herald) herald=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --conns) sizes=$2; shift 2 ;;
    --settle-ms) settle=$2; shift 2 ;;
    --procs) procs=$2; shift 2 ;;
    *) echo "idle_matrix.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${HERALD_BENCH_DIR:-$here/build/release/bench}
[ -x "$bench/bench_gw_idle" ] || { echo "idle_matrix.sh: $bench/bench_gw_idle not built" >&2; exit 1; }
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
args=(--matrix --repeat "$repeat" --settle-ms "$settle" --procs "$procs")
[ -n "$herald" ] && args+=(--herald "$herald")
status=0
for n in $sizes; do
    "$bench/bench_gw_idle" "${args[@]}" --conns "$n" || status=1
    echo
done
exit "$status"

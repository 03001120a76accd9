#!/usr/bin/env bash
# Paired A/B of two herald builds with the gateway benchmarks, in one run, alternating A and B
# round after round so both see the same machine: broadcast throughput to --subs subscribers
# on one IO loop (bench_gw_fanout --mode throughput: herald pinned to CPU 0, the fleet to CPU
# 1) and idle RSS per connection (bench_gw_idle). The benchmark programs are B's; only the
# herald binary changes. Prints each run's line and, per figure, every value per side and the
# B/A ratio of the medians.
#
# Usage: bench/gw_ab.sh --a HERALD --b HERALD [--rounds 3] [--subs 10000] [--seconds 5]
#                       [--conns 19000] [--procs 2] [--io-threads "1"] [--only fanout|idle]
# Build A from an older commit with, e.g.:
#   git worktree add /tmp/herald-base 2e3720a && cmake -S /tmp/herald-base -B /tmp/herald-base/build \
#     && cmake --build /tmp/herald-base/build -j --target herald
set -euo pipefail

a="" b="" rounds=3 subs=10000 secs=5 conns=19000 procs=2 threads="1" only=""
while [ $# -gt 0 ]; do
    case "$1" in
    --a) a=$2; shift 2 ;;
    --b) b=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --subs) subs=$2; shift 2 ;;
    --seconds) secs=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --procs) procs=$2; shift 2 ;;
    --io-threads) threads=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "gw_ab.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -x "$a" ] && [ -x "$b" ] || { echo "usage: $0 --a HERALD --b HERALD [...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${HERALD_BENCH_DIR:-$here/build/release/bench}
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# Collects "<figure> <side> <value>" lines; summarised at the end.
results=$(mktemp "${TMPDIR:-/tmp}/gw_ab.XXXXXX")
trap 'rm -f "$results"' EXIT

run_fanout() { # side herald
    local out line cpu
    out=$("$bench/bench_gw_fanout" --mode throughput --subs "$subs" --seconds "$secs" \
        --herald "$2" 2>&1)
    line=$(echo "$out" | grep -E 'deliveries/s' | head -1)
    cpu=$(echo "$out" | grep -oE '[0-9.]+ ns per delivery' | head -1 | awk '{print $1}')
    echo "  fanout $1: $line; server CPU ${cpu:-?} ns/delivery"
    local v
    v=$(echo "$line" | grep -oE '[0-9]+ deliveries/s' | head -1 | awk '{print $1}')
    [ -n "$v" ] && echo "fanout_deliveries_per_s $1 $v" >>"$results"
    [ -n "$cpu" ] && echo "fanout_cpu_ns_per_delivery $1 $cpu" >>"$results"
    return 0
}

run_idle() { # side herald threads
    local line
    line=$("$bench/bench_gw_idle" --conns "$conns" --procs "$procs" --io-threads "$3" \
        --herald "$2" 2>&1 | grep -E 'per connection' | head -1)
    echo "  idle/$3 $1: $line"
    local v
    v=$(echo "$line" | grep -oE '[0-9]+(\.[0-9]+)? bytes per connection' | awk '{print $1}')
    [ -n "$v" ] && echo "idle_rss_bytes_per_conn/io$3 $1 $v" >>"$results"
    return 0
}

for r in $(seq 1 "$rounds"); do
    echo "round $r"
    # The order swaps every round: A B, B A, ...
    if [ $((r % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
    for side in $order; do
        h=$a
        [ "$side" = B ] && h=$b
        [ "$only" = idle ] || run_fanout "$side" "$h"
        if [ "$only" != fanout ]; then
            for t in $threads; do run_idle "$side" "$h" "$t"; done
        fi
    done
done

echo "summary (median [min-max]; B/A of the medians)"
for fig in $(awk '{print $1}' "$results" | sort -u); do
    line="  $fig:"
    declare -A med=()
    for side in A B; do
        vals=$(awk -v f="$fig" -v s="$side" '$1==f && $2==s {print $3}' "$results" | sort -g)
        n=$(echo "$vals" | grep -c . || true)
        [ "$n" -gt 0 ] || continue
        m=$(echo "$vals" | awk -v n="$n" 'NR==int((n+1)/2){print}')
        med[$side]=$m
        line="$line $side $m [$(echo "$vals" | head -1)-$(echo "$vals" | tail -1)] ($(echo $vals | tr '\n' ' '))"
    done
    if [ -n "${med[A]:-}" ] && [ -n "${med[B]:-}" ]; then
        line="$line  B/A $(awk -v a="${med[A]}" -v b="${med[B]}" 'BEGIN{printf "%.3f", b/a}')"
    fi
    echo "$line"
    unset med
done

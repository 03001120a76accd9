#!/usr/bin/env bash
# Paired A/B of two netlib builds' pingpong servers: the same client (build A's) drives server
# A, then server B, round after round, so both see the same machine state. Prints each pair and
# the median of the server's CPU ms per GiB echoed (schedstat), the figure that shows a change
# of a few percent on this shared VM where MiB/s moves by 10% from one minute to the next.
#
# Usage: bench/pingpong_ab.sh --a BUILD_DIR --b BUILD_DIR [--conns "1 10 100 1000"]
#                             [--blocks "16384 4096"] [--seconds 4] [--rounds 3]
# Server on CPU 0, client on CPU 1, as bench/pingpong.sh. Loopback only; every run is bounded
# by --seconds (and a timeout).
set -euo pipefail

a="" b="" conns="1 10 100 1000" blocks="16384 4096" secs=4 rounds=3
while [ $# -gt 0 ]; do
    case "$1" in
    --a) a=$(cd "$2" && pwd); shift 2 ;;
    --b) b=$(cd "$2" && pwd); shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --blocks) blocks=$2; shift 2 ;;
    --seconds) secs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "pingpong_ab.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$a" ] && [ -n "$b" ] || { echo "usage: $0 --a BUILD_DIR --b BUILD_DIR [...]" >&2; exit 2; }
for d in "$a" "$b"; do
    [ -x "$d/bench/pingpong_netlib" ] || { echo "pingpong_ab.sh: $d/bench/pingpong_netlib not built" >&2; exit 1; }
done
here=$(cd "$(dirname "$0")/.." && pwd)
client_bin="$a/bench/pingpong_netlib"
launch_server() { # A|B port log
    local dir=$a
    [ "$1" = B ] && dir=$b
    taskset -c "$server_cpu" "$dir/bench/pingpong_netlib" server --port "$2" --threads 1 2>"$3" &
}
# shellcheck source=bench/pingpong_lib.sh
. "$here/bench/pingpong_lib.sh"
tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/pingpong_ab.XXXXXX")
trap 'cleanup; rm -rf "$tmpdir"' EXIT

# one_run A|B conns block: sets res to "mib_per_s cpu_ms_per_gib"; a failed client ends the script.
one_run() {
    run_one "$1" "$2" "$3" "$secs"
    local m cpu
    read -r m _ _ _ cpu _ <<<"$res"
    [ "$m" != 0 ] || exit 1
    res="$m $cpu"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "A = $a"
echo "B = $b"
echo "| block | conns | A MiB/s per round | B MiB/s per round | A ms/GiB per round | B ms/GiB per round | B/A ms/GiB (median) |"
echo "|---:|---:|---|---|---|---|---:|"
for block in $blocks; do
    for c in $conns; do
        am="" bm="" ac="" bc=""
        for r in $(seq 1 "$rounds"); do
            one_run A "$c" "$block"; read -r m cpu <<<"$res"; am+="$m "; ac+="$cpu "
            one_run B "$c" "$block"; read -r m cpu <<<"$res"; bm+="$m "; bc+="$cpu "
        done
        amed=$(tr ' ' '\n' <<<"$ac" | grep . | median)
        bmed=$(tr ' ' '\n' <<<"$bc" | grep . | median)
        ratio=$(awk -v x="$bmed" -v y="$amed" 'BEGIN { printf "%.3f", x / y }')
        echo "| $block | $c | $am| $bm| $ac| $bc| $ratio |"
    done
done

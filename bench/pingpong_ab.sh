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
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
client="$a/bench/pingpong_netlib"

server_pid=""
cleanup() { [ -z "$server_pid" ] || { kill -KILL "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; }; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# one_run BUILD conns block: sets res to "mib_per_s cpu_ms_per_gib". Runs in this shell, so the
# EXIT trap can always stop the server it started.
one_run() {
    local port i n0 n1 out bytes mib
    port=$(free_port)
    taskset -c 0 "$1/bench/pingpong_netlib" server --port "$port" --threads 1 2>/dev/null &
    server_pid=$!
    for i in $(seq 1 100); do
        ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
        sleep 0.05
    done
    n0=$(awk '{ print $1 }' "/proc/$server_pid/schedstat")
    out=$(timeout $((secs + 40)) taskset -c 1 "$client" client --port "$port" --conns "$2" \
        --block "$3" --seconds "$secs" 2>/dev/null)
    n1=$(awk '{ print $1 }' "/proc/$server_pid/schedstat")
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    bytes=$(sed -n 's/.*total_bytes=\([0-9]*\).*/\1/p' <<<"$out")
    mib=$(sed -n 's/.*mib_per_s=\([0-9.]*\).*/\1/p' <<<"$out")
    [ -n "$bytes" ] && [ "$bytes" != 0 ] || { echo "pingpong_ab.sh: client failed ($1, $2 conns, $3 bytes)" >&2; exit 1; }
    res=$(awk -v m="$mib" -v b="$bytes" -v ns=$((n1 - n0)) 'BEGIN { printf "%s %.0f", m, ns / 1e6 / (b / 1073741824) }')
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
            one_run "$a" "$c" "$block"; read -r m cpu <<<"$res"; am+="$m "; ac+="$cpu "
            one_run "$b" "$c" "$block"; read -r m cpu <<<"$res"; bm+="$m "; bc+="$cpu "
        done
        amed=$(tr ' ' '\n' <<<"$ac" | grep . | median)
        bmed=$(tr ' ' '\n' <<<"$bc" | grep . | median)
        ratio=$(awk -v x="$bmed" -v y="$amed" 'BEGIN { printf "%.3f", x / y }')
        echo "| $block | $c | $am| $bm| $ac| $bc| $ratio |"
    done
done

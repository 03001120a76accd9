#!/usr/bin/env bash
# The pingpong benchmark: netlib's echo server against libevent's, both driven by the netlib
# pingpong client (bench/pingpong_netlib.c, bench/pingpong_libevent.c).
#
# Usage: bench/pingpong.sh [--quick] [--demo] [--build DIR]
#   default  the full matrix: 16 KiB and 4 KiB blocks x 1/10/100/1000 connections x 3 runs x
#            2 servers x 10 s (about 9 minutes; progress on stderr, the table on stdout at
#            the end, so it can run under nohup)
#   --quick  the same matrix with 3 s runs and 1 run each
#   --demo   netlib server and client only: 100 connections, 16 KiB, 10 s, one summary line
#   --build  the build directory holding bench/pingpong_* (default build/release)
#
# The server runs pinned to CPU 0 with one thread, the client pinned to CPU 1. For each run the
# server's CPU split is sampled over the client's lifetime: user and system time from
# /proc/<pid>/stat, and softirq time of CPU 0 from /proc/stat (loopback TCP does its receive
# processing in softirq on the sending CPU, which the process's stime may not include).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build="$here/build/release"
mode=full
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) mode=quick ;;
    --demo) mode=demo ;;
    --build)
        [ $# -ge 2 ] || { echo "pingpong.sh: --build needs a directory" >&2; exit 2; }
        build=$(cd "$2" && pwd)
        shift
        ;;
    -h | --help)
        sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *) echo "pingpong.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

netlib_bin="$build/bench/pingpong_netlib"
libevent_bin="$build/bench/pingpong_libevent"
[ -x "$netlib_bin" ] || { echo "pingpong.sh: $netlib_bin not built" >&2; exit 1; }
have_libevent=1
if [ ! -x "$libevent_bin" ]; then
    echo "pingpong.sh: $libevent_bin not built (libevent-dev missing?): netlib only" >&2
    have_libevent=0
fi

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
clk_tck=$(getconf CLK_TCK)
ncpu=$(nproc)
server_cpu=0
client_cpu=$((ncpu > 1 ? 1 : 0))
[ "$ncpu" -gt 1 ] || echo "pingpong.sh: one CPU only: server and client share it" >&2

server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill -KILL "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free loopback port: bind port 0 and read back what the kernel picked.
free_port() {
    local py=/usr/bin/python3
    [ -x "$py" ] || py=python3
    "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_listening() { # port pid: up to 5 s
    local i
    for i in $(seq 1 100); do
        kill -0 "$2" 2>/dev/null || return 1
        ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
        sleep 0.05
    done
    return 1
}

start_server() { # kind port
    local log="$tmpdir/server-$1.log"
    case "$1" in
    netlib) taskset -c "$server_cpu" "$netlib_bin" server --port "$2" --threads 1 2>"$log" & ;;
    libevent) taskset -c "$server_cpu" "$libevent_bin" --port "$2" 2>"$log" & ;;
    esac
    server_pid=$!
    if ! wait_listening "$2" "$server_pid"; then
        echo "pingpong.sh: $1 server did not start; its log:" >&2
        cat "$log" >&2
        exit 1
    fi
}

stop_server() {
    local i
    kill -TERM "$server_pid" 2>/dev/null || true
    for i in $(seq 1 50); do
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}

# utime+stime ticks of a process, as "user sys".
proc_ticks() { awk '{ print $14, $15 }' "/proc/$1/stat"; }
# softirq ticks of one CPU (8th field of its /proc/stat line).
softirq_ticks() { awk -v c="cpu$1" '$1 == c { print $8 }' /proc/stat; }
# Nanoseconds a process has run on a CPU, user and system (first field of schedstat).
run_ns() { awk '{ print $1 }' "/proc/$1/schedstat"; }

# run_one kind conns block secs: one run; sets res to "mib_per_s user% sys% softirq% cpu_ms"
# (mib 0 when the client failed), cpu_ms being the server's CPU milliseconds (schedstat, ns
# resolution) per GiB echoed over the client's whole run. On a shared or virtualised machine
# MiB/s depends on wake-up latency between the two CPUs and on other load; CPU per GiB
# hardly does. Runs in this shell, not a subshell, so the EXIT trap can always stop the
# server it started.
run_one() {
    local kind=$1 conns=$2 block=$3 secs=$4 port out s0 s1 w0 w1 n0 n1 mib total
    port=$(free_port)
    start_server "$kind" "$port"
    read -r u0 k0 < <(proc_ticks "$server_pid")
    s0=$(softirq_ticks "$server_cpu")
    n0=$(run_ns "$server_pid")
    w0=$(date +%s%N)
    if ! out=$(timeout $((secs + 40)) taskset -c "$client_cpu" "$netlib_bin" client \
        --port "$port" --conns "$conns" --block "$block" --seconds "$secs" 2>"$tmpdir/client.log"); then
        echo "pingpong.sh: client failed ($kind, $conns conns, $block bytes):" >&2
        cat "$tmpdir/client.log" >&2
        stop_server
        res="0 0 0 0 0"
        return
    fi
    w1=$(date +%s%N)
    read -r u1 k1 < <(proc_ticks "$server_pid")
    s1=$(softirq_ticks "$server_cpu")
    n1=$(run_ns "$server_pid")
    stop_server
    mib=${out##*mib_per_s=}
    total=${out##*total_bytes=}
    total=${total%% *}
    res=$(awk -v m="$mib" -v u=$((u1 - u0)) -v k=$((k1 - k0)) -v s=$((s1 - s0)) \
        -v w=$(((w1 - w0) / 1000000)) -v hz="$clk_tck" -v ns=$((n1 - n0)) -v b="$total" 'BEGIN {
        t = w / 1000 * hz / 100; if (t <= 0) t = 1
        gib = b / 1073741824; if (gib <= 0) gib = 1e-9
        printf "%s %.0f %.0f %.0f %.0f\n", m, u / t, k / t, s / t, ns / 1e6 / gib }')
}

tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/pingpong.XXXXXX")
trap 'cleanup; rm -rf "$tmpdir"' EXIT

if [ "$mode" = demo ]; then
    echo "pingpong demo: netlib echo server (1 thread, CPU $server_cpu) and netlib client" \
        "(CPU $client_cpu), 100 connections, 16 KiB blocks, 10 s..." >&2
    run_one netlib 100 16384 10
    read -r mib u k s c <<<"$res"
    [ "$mib" != 0 ] || exit 1
    printf 'pingpong demo: %s MiB/s echoed; server CPU: user %s%%, system %s%%, softirq (CPU %s) %s%%; %s ms of server CPU per GiB\n' \
        "$mib" "$u" "$k" "$server_cpu" "$s" "$c"
    exit 0
fi

secs=10
runs=3
if [ "$mode" = quick ]; then
    secs=3
    runs=1
fi
servers="netlib"
[ "$have_libevent" = 1 ] && servers="netlib libevent"
raw="$tmpdir/raw.tsv"
: >"$raw"
# Other work on the machine skews the figures: the load average goes in the table's header.
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "pingpong.sh: $mode matrix, $runs run(s) of $secs s per cell; server on CPU $server_cpu," \
    "client on CPU $client_cpu" >&2
for block in 16384 4096; do
    for conns in 1 10 100 1000; do
        for run in $(seq 1 "$runs"); do
            # Alternate which server goes first, so slow drift does not favour either.
            order=$servers
            [ $((run % 2)) = 0 ] && [ "$have_libevent" = 1 ] && order="libevent netlib"
            for kind in $order; do
                run_one "$kind" "$conns" "$block" "$secs"
                read -r mib u k s c <<<"$res"
                printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$block" "$conns" "$run" \
                    "$kind" "$mib" "$u" "$k" "$s" "$c" >>"$raw"
                echo "  block=$block conns=$conns run=$run $kind: $mib MiB/s (user $u%," \
                    "sys $k%, softirq $s%; $c ms CPU/GiB)" >&2
            done
        done
    done
done

echo
echo "pingpong, MiB/s: median [min-max] of $runs run(s) x $secs s; server 1 thread on CPU" \
    "$server_cpu, netlib client on CPU $client_cpu"
echo "CPU: server user% / sys% / CPU$server_cpu softirq% of wall time, and server CPU ms per GiB" \
    "echoed (medians; lower is better)"
echo "host: $ncpu CPUs, $(uname -r); load average at start $load_start," \
    "at end $(cut -d' ' -f1-3 /proc/loadavg)"
echo
awk -F'\t' -v runs="$runs" '
function sort3(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t } }
function med(a, n) { sort3(a, n); return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
$5 + 0 <= 0 { failed++; next }
{ key = $1 SUBSEP $2; v[key, $4, $3] = $5; cu[key, $4, $3] = $6; ck[key, $4, $3] = $7; cs[key, $4, $3] = $8; cg[key, $4, $3] = $9
  if (!(key in seen)) { seen[key] = 1; order[++nk] = key } }
END {
  printf "| block | conns | netlib MiB/s | libevent MiB/s | ratio | netlib CPU u/s/si | libevent CPU u/s/si | CPU ms/GiB netlib | CPU ms/GiB libevent |\n"
  printf "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
  for (i = 1; i <= nk; i++) {
    key = order[i]; split(key, kb, SUBSEP)
    line = sprintf("| %d KiB | %d |", kb[1] / 1024, kb[2])
    for (si = 1; si <= 2; si++) {
      kind = si == 1 ? "netlib" : "libevent"
      n = 0
      for (r = 1; r <= runs; r++) if ((key, kind, r) in v) { n++; x[n] = v[key, kind, r] + 0 }
      if (n == 0) { line = line " n/a |"; m[kind] = 0; continue }
      m[kind] = med(x, n)
      line = line sprintf(" %.0f [%.0f-%.0f] |", m[kind], x[1], x[n])
    }
    n = 0
    for (r = 1; r <= runs; r++) if ((key, "netlib", r) in v && (key, "libevent", r) in v) { n++; x[n] = v[key, "netlib", r] / v[key, "libevent", r] }
    if (n == 0) line = line " n/a |"
    else { rm = med(x, n); line = line sprintf(" %.2f [%.2f-%.2f] |", rm, x[1], x[n]) }
    for (si = 1; si <= 2; si++) {
      kind = si == 1 ? "netlib" : "libevent"
      n = 0
      for (r = 1; r <= runs; r++) if ((key, kind, r) in v) { n++; a1[n] = cu[key, kind, r]; a2[n] = ck[key, kind, r]; a3[n] = cs[key, kind, r] }
      if (n == 0) { line = line " n/a |"; continue }
      line = line sprintf(" %d/%d/%d |", med(a1, n), med(a2, n), med(a3, n))
    }
    for (si = 1; si <= 2; si++) {
      kind = si == 1 ? "netlib" : "libevent"
      n = 0
      for (r = 1; r <= runs; r++) if ((key, kind, r) in v) { n++; a1[n] = cg[key, kind, r] + 0 }
      if (n == 0) { line = line " n/a |"; continue }
      line = line sprintf(" %d |", med(a1, n))
    }
    print line
  }
  if (failed) printf "\n%d run(s) failed and are left out (see the messages above)\n", failed
}' "$raw"
echo
echo "ratio = netlib / libevent per run (run-paired), median [min-max]; target >= 1.00"

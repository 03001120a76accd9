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

client_bin=$netlib_bin
launch_server() { # kind port log
    case "$1" in
    netlib) taskset -c "$server_cpu" "$netlib_bin" server --port "$2" --threads 1 2>"$3" & ;;
    libevent) taskset -c "$server_cpu" "$libevent_bin" --port "$2" 2>"$3" & ;;
    esac
}
# shellcheck source=bench/pingpong_lib.sh
. "$here/bench/pingpong_lib.sh"

tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/pingpong.XXXXXX")
trap 'cleanup; rm -rf "$tmpdir"' EXIT

if [ "$mode" = demo ]; then
    echo "pingpong demo: netlib echo server (1 thread, CPU $server_cpu) and netlib client" \
        "(CPU $client_cpu), 100 connections, 16 KiB blocks, 10 s..." >&2
    run_one netlib 100 16384 10
    read -r mib u k s c _ <<<"$res"
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
# So does where the host puts the two vCPUs: the cache-line round trip between the server's and
# the client's CPU (bench_c2c, 0.2 s) moved between about 100 and 500 ns on the project's VM,
# and the figures with it. It goes in each run's line and in the table's header.
c2c_ns() {
    local out
    out=$("$build/bench/bench_c2c" "$server_cpu" "$client_cpu" 2>/dev/null) || { echo "?"; return; }
    out=${out##*: }
    echo "${out% ns}"
}
c2c_start=$(c2c_ns)
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
                read -r mib u k s c d <<<"$res"
                probe=$(c2c_ns)
                printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$block" "$conns" "$run" \
                    "$kind" "$mib" "$u" "$k" "$s" "$c" "$probe" "$d" >>"$raw"
                echo "  block=$block conns=$conns run=$run $kind: $mib MiB/s (user $u%," \
                    "sys $k%, softirq $s%; $c ms CPU/GiB; waited $d ms for CPU $server_cpu;" \
                    "c2c $probe ns)" >&2
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
    "at end $(cut -d' ' -f1-3 /proc/loadavg); cache-line round trip CPU $server_cpu <-> CPU" \
    "$client_cpu at start $c2c_start ns, at end $(c2c_ns) ns"
echo
awk -F'\t' -v runs="$runs" '
function sort3(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t } }
function med(a, n) { sort3(a, n); return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
$5 + 0 <= 0 { failed++; next }
{ key = $1 SUBSEP $2; v[key, $4, $3] = $5; cu[key, $4, $3] = $6; ck[key, $4, $3] = $7; cs[key, $4, $3] = $8; cg[key, $4, $3] = $9; dw[key, $4, $3] = $11
  if ($10 ~ /^[0-9]+$/) { if (!(key in pmin) || $10 + 0 < pmin[key]) pmin[key] = $10 + 0; if (!(key in pmax) || $10 + 0 > pmax[key]) pmax[key] = $10 + 0 }
  if (!(key in seen)) { seen[key] = 1; order[++nk] = key } }
END {
  printf "| block | conns | netlib MiB/s | libevent MiB/s | ratio | netlib CPU u/s/si | libevent CPU u/s/si | CPU ms/GiB netlib | CPU ms/GiB libevent | waited ms netlib / libevent | c2c (ns) |\n"
  printf "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
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
    wl = ""
    for (si = 1; si <= 2; si++) {
      kind = si == 1 ? "netlib" : "libevent"
      wmax = -1
      for (r = 1; r <= runs; r++) if ((key, kind, r) in v && dw[key, kind, r] + 0 > wmax) wmax = dw[key, kind, r] + 0
      wl = wl (si == 2 ? " / " : "") (wmax < 0 ? "n/a" : sprintf("%d", wmax))
    }
    line = line " " wl " |"
    line = line ((key in pmin) ? sprintf(" %d-%d |", pmin[key], pmax[key]) : " n/a |")
    print line
  }
  if (failed) printf "\n%d run(s) failed and are left out (see the messages above)\n", failed
}' "$raw"
echo
echo "ratio = netlib / libevent per run (run-paired), median [min-max]; target >= 1.00"
echo "waited = the longest time, over the cell's runs, that the server was runnable but CPU" \
    "$server_cpu was busy with other work (schedstat)"
echo "c2c = CPU $server_cpu <-> CPU $client_cpu cache-line round trip probed after each run of" \
    "the cell (bench_c2c), min-max: a cell spanning about 150 and 500 ns ran on two machines"

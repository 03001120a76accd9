# Shared by bench/pingpong.sh and bench/pingpong_ab.sh (sourced, not run): the server on CPU 0
# and the client on CPU 1, one run at a time, with the server's CPU figures.
# The sourcing script defines launch_server KIND PORT LOG (start that server in the background,
# stderr to LOG) and sets client_bin (the pingpong client), and creates $tmpdir before run_one.
pp_name=${0##*/}

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
clk_tck=$(getconf CLK_TCK)
ncpu=$(nproc)
server_cpu=0
client_cpu=$((ncpu > 1 ? 1 : 0))
[ "$ncpu" -gt 1 ] || echo "$pp_name: one CPU only: server and client share it" >&2

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

start_server() { # kind port: launch_server (the caller's) starts it in the background
    local log="$tmpdir/server-$1.log"
    launch_server "$1" "$2" "$log"
    server_pid=$!
    if ! wait_listening "$2" "$server_pid"; then
        echo "$pp_name: $1 server did not start; its log:" >&2
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
# Nanoseconds a process has run on a CPU, user and system, and has waited runnable for one
# (the first two fields of schedstat), as "run wait".
run_ns() { awk '{ print $1, $2 }' "/proc/$1/schedstat"; }

# run_one kind conns block secs: one run; sets res to "mib_per_s user% sys% softirq% cpu_ms
# wait_ms" (mib 0 when the client failed), cpu_ms being the server's CPU milliseconds
# (schedstat, ns resolution) per GiB echoed over the client's whole run, and wait_ms the time
# the server was runnable but not running (its pinned CPU busy with something else: the
# machine's other work, which a run-paired ratio cannot see otherwise). On a shared or
# virtualised machine MiB/s depends on wake-up latency between the two CPUs and on other load;
# CPU per GiB hardly does. Runs in this shell, not a subshell, so the EXIT trap can always stop
# the server it started.
run_one() {
    local kind=$1 conns=$2 block=$3 secs=$4 port out s0 s1 w0 w1 n0 n1 d0 d1 mib total
    port=$(free_port)
    start_server "$kind" "$port"
    read -r u0 k0 < <(proc_ticks "$server_pid")
    s0=$(softirq_ticks "$server_cpu")
    read -r n0 d0 < <(run_ns "$server_pid")
    w0=$(date +%s%N)
    if ! out=$(timeout $((secs + 40)) taskset -c "$client_cpu" "$client_bin" client \
        --port "$port" --conns "$conns" --block "$block" --seconds "$secs" 2>"$tmpdir/client.log"); then
        echo "$pp_name: client failed ($kind, $conns conns, $block bytes):" >&2
        cat "$tmpdir/client.log" >&2
        stop_server
        res="0 0 0 0 0 0"
        return
    fi
    w1=$(date +%s%N)
    read -r u1 k1 < <(proc_ticks "$server_pid")
    s1=$(softirq_ticks "$server_cpu")
    read -r n1 d1 < <(run_ns "$server_pid")
    stop_server
    mib=${out##*mib_per_s=}
    total=${out##*total_bytes=}
    total=${total%% *}
    res=$(awk -v m="$mib" -v u=$((u1 - u0)) -v k=$((k1 - k0)) -v s=$((s1 - s0)) \
        -v w=$(((w1 - w0) / 1000000)) -v hz="$clk_tck" -v ns=$((n1 - n0)) -v b="$total" \
        -v dl=$((d1 - d0)) 'BEGIN {
        t = w / 1000 * hz / 100; if (t <= 0) t = 1
        gib = b / 1073741824; if (gib <= 0) gib = 1e-9
        printf "%s %.0f %.0f %.0f %.0f %.0f\n", m, u / t, k / t, s / t, ns / 1e6 / gib, dl / 1e6 }')
}


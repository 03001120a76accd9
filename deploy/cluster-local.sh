#!/usr/bin/env bash
# A local herald cluster on 127.0.0.1: N herald nodes on consecutive ports plus one
# redis-server on a free port, for trying herald out and for multi-node tests by hand.
#
# Usage: deploy/cluster-local.sh start [OPTION]... [-- HERALD_FLAG...]
#        deploy/cluster-local.sh stop [--run-dir DIR]
#        deploy/cluster-local.sh status [--run-dir DIR]
#
# start options:
#   -n, --nodes N      herald nodes, 1..16 (default 2)
#   --base-port P      node i listens for clients on P+2i and serves admin on P+2i+1
#                      (default 7400: node 0 gets herald's default 7400/7401)
#   --engine E         memory (default) or redis. With memory, every node is independent:
#                      a message published on one node reaches only that node's clients,
#                      until the Redis engine lands. redis-server is started either way, and
#                      each node is given its port, ready for --engine redis.
#   --io-threads N     IO loops per node, 1..64 (default 1)
#   --insecure         accept clients without checking tokens (demos only)
#   --no-redis         do not start redis-server
#   --herald PATH      the herald binary (default: $HERALD_BIN, then build/release,
#                      build/dev in this repo, then herald on PATH)
#   --run-dir DIR      where PIDs, logs and keys go (default ${TMPDIR:-/tmp}/herald-cluster-$UID)
#   -- HERALD_FLAG...  passed to every node (later flags win), e.g. -- --drain 5s.
#                      Flags that move a listener off loopback are refused.
#
# Everything listens on 127.0.0.1 only. The admin API key and the token secret are random
# per start, kept in the run directory (mode 0600) and handed to the nodes through HERALD_*
# variables, not argv. The run directory's cluster.env lists the addresses; source it:
#   . "$run_dir/cluster.env"; curl -H "X-Api-Key: $CLUSTER_API_KEY" "http://$CLUSTER_ADMIN_0/readyz"
#   herald token --secret "$CLUSTER_TOKEN_SECRET" --user alice     (signs a client token)
# stop sends SIGTERM to each PID recorded by start (herald drains, default 2s here), waits
# up to 15 s, then SIGKILLs whatever is left. Nothing is killed by name.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
prog=cluster-local.sh
max_nodes=16
health_wait_s=10
stop_wait_s=15

usage() { sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "$prog: $*" >&2; exit 1; }
bad_usage() { echo "$prog: $* (see --help)" >&2; exit 2; }

is_uint() { [[ "$1" =~ ^[0-9]{1,6}$ ]]; }

# A free loopback port: bind port 0 and read back what the kernel picked.
free_port() {
    local py=/usr/bin/python3
    [ -x "$py" ] || py=python3
    "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

port_in_use() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

random_hex() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }

# True if PID is alive, not a zombie, runs a program whose name contains $2, and has $3
# (its loopback address) in its command line: a recycled PID is never mistaken for ours.
pid_is() {
    local pid=$1 name=$2 addr=$3 state cmdline
    is_uint "$pid" && [ -r "/proc/$pid/stat" ] || return 1
    state=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)
    [ "$state" != Z ] || return 1
    cmdline=$( (tr '\0' ' ' <"/proc/$pid/cmdline") 2>/dev/null) || return 1
    [[ "${cmdline%% *}" == *"$name"* ]] || return 1
    [[ " $cmdline " == *" 127.0.0.1:$addr "* || " $cmdline " == *" --port $addr "* ]]
}

find_herald() {
    local c
    if [ -n "${HERALD_BIN:-}" ]; then
        echo "$HERALD_BIN"
        return
    fi
    for c in "$here/build/release/gateway/herald" "$here/build/dev/gateway/herald"; do
        [ -x "$c" ] && { echo "$c"; return; }
    done
    command -v herald || true
}

# --- stop and status --------------------------------------------------------------------------

# Every PID file in the run directory, herald nodes first, then Redis, into pid_file_list.
list_pid_files() {
    local f
    pid_file_list=()
    for f in "$run_dir"/node-*.pid "$run_dir"/redis.pid; do
        [ -f "$f" ] && pid_file_list+=("$f")
    done
    return 0
}

expected_name() { case "$(basename "$1")" in redis.pid) echo redis-server ;; *) echo herald ;; esac; }

# The port in a process's command line: a node's admin port, Redis's port (Redis retitles
# itself "redis-server 127.0.0.1:PORT").
expected_port() {
    case "$(basename "$1")" in
    redis.pid) cat "$run_dir/redis.port" 2>/dev/null || true ;;
    *) cat "${1%.pid}.admin" 2>/dev/null || true ;;
    esac
}

# True if the PID file $1 names a live process of ours.
pid_file_live() { pid_is "$(cat "$1" 2>/dev/null)" "$(expected_name "$1")" "$(expected_port "$1")"; }

do_stop() {
    local f k left i
    local -a pids=() names=() ports=()
    [ -d "$run_dir" ] || { echo "$prog: nothing to stop in $run_dir"; return 0; }
    list_pid_files
    if [ ${#pid_file_list[@]} -eq 0 ]; then
        echo "$prog: nothing to stop in $run_dir"
        return 0
    fi
    for f in "${pid_file_list[@]}"; do
        if pid_file_live "$f"; then
            pids+=("$(cat "$f")")
            names+=("$(expected_name "$f")")
            ports+=("$(expected_port "$f")")
            kill -TERM "${pids[-1]}" 2>/dev/null || true
        fi
        rm -f "$f"
    done
    for ((i = 0; i < stop_wait_s * 10; i++)); do
        left=0
        for k in "${!pids[@]}"; do
            if pid_is "${pids[$k]}" "${names[$k]}" "${ports[$k]}"; then left=$((left + 1)); fi
        done
        [ "$left" -eq 0 ] && break
        sleep 0.1
    done
    for f in "${!pids[@]}"; do
        if pid_is "${pids[$f]}" "${names[$f]}" "${ports[$f]}"; then
            echo "$prog: ${names[$f]} pid ${pids[$f]} still running after ${stop_wait_s}s: SIGKILL" >&2
            kill -KILL "${pids[$f]}" 2>/dev/null || true
        fi
    done
    echo "$prog: stopped ${#pids[@]} process(es) from $run_dir"
}

do_status() {
    local f pid name port code running=0
    [ -f "$run_dir/cluster.env" ] || { echo "$prog: no cluster in $run_dir"; return 1; }
    # shellcheck disable=SC1091
    . "$run_dir/cluster.env"
    list_pid_files
    if [ ${#pid_file_list[@]} -eq 0 ]; then
        echo "$prog: no processes recorded in $run_dir (stopped)"
        return 1
    fi
    for f in "${pid_file_list[@]}"; do
        pid=$(cat "$f")
        name=$(expected_name "$f")
        if pid_file_live "$f"; then
            running=$((running + 1))
            printf '%-10s pid %-7s running' "$(basename "$f" .pid)" "$pid"
        else
            printf '%-10s pid %-7s NOT running' "$(basename "$f" .pid)" "$pid"
        fi
        if [ "$name" = herald ]; then
            port=$(cat "${f%.pid}.admin")
            code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 -H "X-Api-Key: $CLUSTER_API_KEY" \
                "http://127.0.0.1:$port/readyz" || true)
            printf '  clients 127.0.0.1:%s  admin 127.0.0.1:%s  readyz %s' \
                "$(cat "${f%.pid}.port")" "$port" "$code"
        fi
        echo
    done
    [ "$running" -gt 0 ]
}

# --- start ------------------------------------------------------------------------------------

check_extra_flag() {
    case "$1" in
    --listen | --listen=* | --listen-host* | --listen-port* | --admin | --admin=* | --admin-host* | \
        --admin-port* | --redis-host* | -c | --config | --config=*)
        bad_usage "flag $1 is set by the script (loopback only); it cannot be passed through"
        ;;
    esac
}

# Starts redis-server on a free loopback port and waits for PONG. Sets redis_port.
start_redis() {
    local i
    command -v redis-server >/dev/null || die "redis-server not found (apt-get install redis-server, or --no-redis)"
    redis_port=$(free_port)
    echo "$redis_port" >"$run_dir/redis.port"
    nohup redis-server --bind 127.0.0.1 --port "$redis_port" --protected-mode yes \
        --save '' --appendonly no --dir "$run_dir" --maxmemory 256mb \
        --maxmemory-policy noeviction --daemonize no >"$run_dir/redis.log" 2>&1 </dev/null &
    echo $! >"$run_dir/redis.pid"
    for ((i = 0; i < health_wait_s * 10; i++)); do
        pid_file_live "$run_dir/redis.pid" || break
        if [ "$(redis-cli -h 127.0.0.1 -p "$redis_port" ping 2>/dev/null)" = PONG ]; then
            echo "redis      127.0.0.1:$redis_port  pid $(cat "$run_dir/redis.pid")"
            return 0
        fi
        sleep 0.1
    done
    tail -n 20 "$run_dir/redis.log" >&2 || true
    return 1
}

# Starts node $1 and waits for /healthz. Uses the globals set by cmd_start.
start_node() {
    local i=$1 cport=$((base_port + 2 * $1)) aport=$((base_port + 2 * $1 + 1)) pid t
    local -a flags=(--listen "127.0.0.1:$cport" --admin "127.0.0.1:$aport"
        --node-id "local-$i" --io-threads "$io_threads" --engine "$engine" --drain 2s)
    [ -n "$redis_port" ] && flags+=(--redis-host 127.0.0.1 --redis-port "$redis_port")
    [ "$insecure" = 1 ] && flags+=(--insecure)
    # HERALD_BIN is this script's setting, not herald's: herald warns about unknown HERALD_*.
    nohup env -u HERALD_BIN HERALD_ADMIN_API_KEY="$api_key" HERALD_TOKEN_SECRET="$token_secret" \
        "$herald" "${flags[@]}" "${extra[@]}" >"$run_dir/node-$i.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$run_dir/node-$i.pid"
    echo "$cport" >"$run_dir/node-$i.port"
    echo "$aport" >"$run_dir/node-$i.admin"
    for ((t = 0; t < health_wait_s * 10; t++)); do
        pid_is "$pid" herald "$aport" || break
        if curl -fs -o /dev/null -m 1 "http://127.0.0.1:$aport/healthz"; then
            echo "node $i     clients 127.0.0.1:$cport  admin 127.0.0.1:$aport  pid $pid"
            check_engine "$i"
            return 0
        fi
        sleep 0.1
    done
    echo "$prog: node $i did not come up (log $run_dir/node-$i.log):" >&2
    tail -n 20 "$run_dir/node-$i.log" >&2 || true
    return 1
}

# Warns when node $1 logged a different engine than the one asked for (herald builds
# without the Redis engine run the memory engine).
check_engine() {
    local got
    got=$(grep -o 'ev=listening .*' "$run_dir/node-$1.log" | grep -o 'engine=[a-z]*' | head -n 1) || true
    if [ -n "$got" ] && [ "$got" != "engine=$engine" ]; then
        echo "warning: node $1 runs $got, not engine=$engine: this herald has no $engine engine yet" >&2
    fi
}

write_env() {
    local i
    {
        echo "# Written by $prog start at $(date -u +%Y-%m-%dT%H:%M:%SZ). Source it."
        echo "CLUSTER_NODES=$nodes"
        echo "CLUSTER_ENGINE=$engine"
        echo "CLUSTER_API_KEY=$api_key"
        echo "CLUSTER_TOKEN_SECRET=$token_secret"
        echo "CLUSTER_REDIS=${redis_port:+127.0.0.1:$redis_port}"
        for ((i = 0; i < nodes; i++)); do
            echo "CLUSTER_NODE_$i=127.0.0.1:$((base_port + 2 * i))"
            echo "CLUSTER_ADMIN_$i=127.0.0.1:$((base_port + 2 * i + 1))"
        done
    } >"$run_dir/cluster.env"
}

fail_start() {
    echo "$prog: start failed; stopping what started" >&2
    do_stop >&2
    exit 1
}

cmd_start() {
    local i p
    [ -n "$herald" ] || herald=$(find_herald)
    { [ -n "$herald" ] && [ -x "$herald" ]; } || die "herald binary not found: build it, or pass --herald PATH"
    command -v curl >/dev/null || die "curl is needed for the health checks"
    umask 077
    mkdir -p "$run_dir"
    chmod 700 "$run_dir"
    list_pid_files
    for p in "${pid_file_list[@]}"; do
        if pid_file_live "$p"; then
            die "a cluster is already running from $run_dir: run '$prog stop' first"
        fi
    done
    rm -f "$run_dir"/node-*.pid "$run_dir"/node-*.port "$run_dir"/node-*.admin "$run_dir"/redis.p*
    for ((p = base_port; p < base_port + 2 * nodes; p++)); do
        if port_in_use "$p"; then die "port $p is in use: pick another --base-port"; fi
    done
    api_key=$(random_hex)
    token_secret=$(random_hex)
    redis_port=""
    if [ "$with_redis" = 1 ]; then
        start_redis || fail_start
    fi
    for ((i = 0; i < nodes; i++)); do
        start_node "$i" || fail_start
    done
    write_env
    if [ "$engine" = memory ] && [ "$nodes" -gt 1 ]; then
        echo "note: engine memory: the nodes are independent (no cross-node delivery) until the Redis engine lands"
    fi
    echo "run dir $run_dir (logs, PIDs, cluster.env); stop with: $0 stop$run_dir_flag"
}

# --- arguments --------------------------------------------------------------------------------

[ $# -ge 1 ] || { usage >&2; exit 2; }
cmd=$1
shift
case "$cmd" in
start | stop | status) ;;
-h | --help | help) usage; exit 0 ;;
*) bad_usage "unknown command $cmd" ;;
esac

nodes=2
base_port=7400
engine=memory
io_threads=1
insecure=0
with_redis=1
herald=""
run_dir="${TMPDIR:-/tmp}/herald-cluster-$(id -u)"
run_dir_flag=""
extra=()
need() { [ $# -ge 2 ] || bad_usage "$1 needs a value"; }
start_only() { [ "$cmd" = start ] || bad_usage "$cmd takes --run-dir only, not $1"; }
while [ $# -gt 0 ]; do
    case "$1" in
    --run-dir) need "$@"; run_dir=$2; run_dir_flag=" --run-dir $2"; shift ;;
    -h | --help) usage; exit 0 ;;
    -n | --nodes) start_only "$1"; need "$@"; nodes=$2; shift ;;
    --base-port) start_only "$1"; need "$@"; base_port=$2; shift ;;
    --engine) start_only "$1"; need "$@"; engine=$2; shift ;;
    --io-threads) start_only "$1"; need "$@"; io_threads=$2; shift ;;
    --insecure) start_only "$1"; insecure=1 ;;
    --no-redis) start_only "$1"; with_redis=0 ;;
    --herald) start_only "$1"; need "$@"; herald=$2; shift ;;
    --)
        start_only "$1"
        shift
        for p in "$@"; do check_extra_flag "$p"; done
        extra=("$@")
        break
        ;;
    *) bad_usage "unknown option $1" ;;
    esac
    shift
done
if ! { is_uint "$nodes" && [ "$nodes" -ge 1 ] && [ "$nodes" -le "$max_nodes" ]; }; then
    bad_usage "--nodes must be 1..$max_nodes"
fi
if ! { is_uint "$base_port" && [ "$base_port" -ge 1024 ] && [ $((base_port + 2 * nodes)) -le 65536 ]; }; then
    bad_usage "--base-port: ports P..P+$((2 * nodes - 1)) must lie within 1024..65535"
fi
if ! { is_uint "$io_threads" && [ "$io_threads" -ge 1 ] && [ "$io_threads" -le 64 ]; }; then
    bad_usage "--io-threads must be 1..64"
fi
case "$engine" in memory | redis) ;; *) bad_usage "--engine must be memory or redis" ;; esac
if [ "$engine" = redis ] && [ "$with_redis" = 0 ]; then
    bad_usage "--engine redis needs Redis: drop --no-redis"
fi

case "$cmd" in
start) cmd_start ;;
stop) do_stop ;;
status) do_status ;;
esac

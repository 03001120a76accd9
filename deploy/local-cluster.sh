#!/usr/bin/env bash
# A local herald cluster on 127.0.0.1, without containers: the topology of deploy/compose.yaml
# from Debian's packages. redis-server, N herald nodes, HAProxy in front of them (TCP, least
# connections, health-checked on /readyz) and Prometheus scraping the nodes with the alert
# rules loaded. Grafana is not packaged by Debian: import dashboards/herald-grafana.json into
# any Grafana, with the Prometheus printed by `up` as its data source.
#
# Usage: deploy/local-cluster.sh up [OPTION]... [-- HERALD_FLAG...]
#        deploy/local-cluster.sh down [--run-dir DIR]
#        deploy/local-cluster.sh status [--run-dir DIR]
#
# up options:
#   -n, --nodes N      herald nodes, 1..16 (default 2)
#   --base-port P      fixed ports: HAProxy (clients) P, HAProxy stats P+1, Prometheus P+2,
#                      Redis P+3, node i clients P+10+2i and admin P+11+2i. Default: ports
#                      the kernel picks free, printed by up and kept in cluster.env.
#   --engine E         redis (default) or memory; see "The engine" below
#   --io-threads N     IO loops per node, 1..64 (default 1)
#   --insecure         nodes accept clients without checking tokens (demos only)
#   --no-redis         do not start redis-server (with --engine memory only)
#   --herald PATH      the herald binary (default: $HERALD_BIN, then build/release,
#                      build/dev in this repo, then herald on PATH)
#   --run-dir DIR      where PIDs, logs, configs and keys go
#                      (default ${TMPDIR:-/tmp}/herald-cluster-$UID)
#   -- HERALD_FLAG...  passed to every node (later flags win), e.g. -- --drain 5s.
#                      Flags that move a listener or the config are refused.
#
# Everything listens on 127.0.0.1 only. The admin API key and the token secret are random
# per `up`, written to each node's config file and to the run directory (mode 0700), never to
# a command line. cluster.env in the run directory has the addresses and keys; source it:
#   . "$run_dir/cluster.env"
#   herald-loadgen --port "$CLUSTER_LB_PORT" --secret "$CLUSTER_TOKEN_SECRET" ...
#   curl -H "Authorization: Bearer $CLUSTER_API_KEY" "http://$CLUSTER_ADMIN_0/metrics"
# down sends SIGTERM to each process recorded by up (PID and start time, so a recycled PID is
# never taken for ours; herald drains for 2 s), waits up to 15 s, then SIGKILLs what is left.
# Nothing is found or killed by name.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
prog=local-cluster.sh
max_nodes=16
wait_s=30
stop_wait_s=15
scrape_interval=5s

usage() { sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "$prog: $*" >&2; exit 1; }
bad_usage() { echo "$prog: $* (see --help)" >&2; exit 2; }
is_uint() { [[ "$1" =~ ^[0-9]{1,6}$ ]]; }

# --- The engine ------------------------------------------------------------------------------
# redis (the default): the nodes share channels, offsets, history and presence through the
# cluster's redis-server, so a message published on any node reaches every subscriber behind
# HAProxy. memory: independent nodes, a message reaching only its own node's clients.
engine_section() {
    if [ "$engine" = redis ]; then
        printf '[engine]\ntype = redis\nredis = 127.0.0.1:%s\n' "$redis_port"
    else
        printf '[engine]\ntype = memory\n'
    fi
}
# ---------------------------------------------------------------------------------------------

# A free loopback port: bind port 0 and read back what the kernel picked.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port_in_use() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
random_hex() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }

# Field 22 of /proc/PID/stat: the process's start time in clock ticks since boot. Fails for
# a process that is gone or a zombie. The command name may hold spaces and parentheses, so
# the fields are counted after the last ')'.
start_time() {
    local stat rest
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    rest=${stat##*) }
    set -- $rest
    [ "$1" != Z ] || return 1
    echo "${20}"
}

# Records PID $2 as process $1 (node-0, haproxy...): its PID and start time.
record() {
    local t
    t=$(start_time "$2") || return 1
    echo "$2 $t" >"$run_dir/pids/$1.pid"
}

# True if the process recorded in PID file $1 still runs: same PID, same start time.
recorded_alive() {
    local pid t now
    read -r pid t <"$1" 2>/dev/null || return 1
    is_uint "$pid" || return 1
    now=$(start_time "$pid") || return 1
    [ "$now" = "$t" ]
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

# Polls "$@" every 0.1 s until it succeeds, for at most wait_s seconds; fails if process $1
# (a PID file name) dies meanwhile. The poll awaits a condition the process reports (a port
# answering, a health check passing); it never stands in for one.
await() {
    local name=$1 i
    shift
    for ((i = 0; i < wait_s * 10; i++)); do
        recorded_alive "$run_dir/pids/$name.pid" || return 1
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

# --- down and status --------------------------------------------------------------------------

# The PID files, in stopping order: the load balancer first (no new clients), then the
# nodes (they drain), then Prometheus and Redis.
pid_files() {
    local f
    pid_file_list=()
    for f in "$run_dir/pids/haproxy.pid" "$run_dir"/pids/node-*.pid \
        "$run_dir/pids/prometheus.pid" "$run_dir/pids/redis.pid"; do
        [ -f "$f" ] && pid_file_list+=("$f")
    done
    return 0
}

do_down() {
    local f i left pid t
    local -a pids=() files=()
    pid_files
    if [ ${#pid_file_list[@]} -eq 0 ]; then
        echo "$prog: nothing to stop in $run_dir"
        return 0
    fi
    for f in "${pid_file_list[@]}"; do
        if recorded_alive "$f"; then
            read -r pid t <"$f"
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
            files+=("$f")
        else
            rm -f "$f"
        fi
    done
    for ((i = 0; i < stop_wait_s * 10; i++)); do
        left=0
        for f in "${files[@]}"; do
            if recorded_alive "$f"; then left=$((left + 1)); fi
        done
        [ "$left" -eq 0 ] && break
        sleep 0.1
    done
    for f in "${files[@]}"; do
        if recorded_alive "$f"; then
            read -r pid t <"$f"
            echo "$prog: $(basename "$f" .pid) (pid $pid) still running after ${stop_wait_s}s: SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$f"
    done
    echo "$prog: stopped ${#pids[@]} process(es) from $run_dir"
}

# HAProxy's view of each node: "node-0 UP" lines, from its stats page as CSV.
haproxy_servers() {
    curl -fsS -m 2 "http://127.0.0.1:$CLUSTER_LB_STATS_PORT/;csv" |
        awk -F, '$1 == "herald" && $2 ~ /^node-/ { print $2, $18 }'
}

# Prometheus's view of the herald targets: "up" or "down" per target.
prometheus_targets() {
    curl -fsS -m 2 "http://$CLUSTER_PROMETHEUS/api/v1/targets?state=active" | python3 -c '
import json, sys
for t in json.load(sys.stdin)["data"]["activeTargets"]:
    if t["labels"].get("job") == "herald":
        print(t["labels"]["instance"], t["health"])'
}

do_status() {
    local f name pid t running=0 total=0 code
    [ -f "$run_dir/cluster.env" ] || { echo "$prog: no cluster in $run_dir"; return 1; }
    # shellcheck disable=SC1091
    . "$run_dir/cluster.env"
    pid_files
    if [ ${#pid_file_list[@]} -eq 0 ]; then
        echo "$prog: no processes recorded in $run_dir (stopped)"
        return 1
    fi
    for f in "${pid_file_list[@]}"; do
        name=$(basename "$f" .pid)
        read -r pid t <"$f"
        total=$((total + 1))
        if recorded_alive "$f"; then
            running=$((running + 1))
            printf '%-11s pid %-7s running' "$name" "$pid"
        else
            printf '%-11s pid %-7s NOT running' "$name" "$pid"
        fi
        case "$name" in
        node-*)
            local admin_var=CLUSTER_ADMIN_${name#node-} client_var=CLUSTER_NODE_${name#node-}
            code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://${!admin_var}/readyz" || true)
            printf '  clients %s  admin %s  readyz %s' "${!client_var}" "${!admin_var}" "$code"
            ;;
        haproxy) printf '  clients 127.0.0.1:%s  stats http://127.0.0.1:%s/' \
            "$CLUSTER_LB_PORT" "$CLUSTER_LB_STATS_PORT" ;;
        prometheus) printf '  http://%s/' "$CLUSTER_PROMETHEUS" ;;
        redis) printf '  %s' "$CLUSTER_REDIS" ;;
        esac
        echo
    done
    if [ -f "$run_dir/pids/haproxy.pid" ] && recorded_alive "$run_dir/pids/haproxy.pid"; then
        echo "HAProxy backends: $(haproxy_servers 2>/dev/null | tr '\n' ' ')"
    fi
    if [ -f "$run_dir/pids/prometheus.pid" ] && recorded_alive "$run_dir/pids/prometheus.pid"; then
        echo "Prometheus targets: $(prometheus_targets 2>/dev/null | tr '\n' ' ')"
    fi
    [ "$running" -eq "$total" ]
}

# --- up -----------------------------------------------------------------------------------------

check_extra_flag() {
    case "$1" in
    --listen | --listen=* | --listen-host* | --listen-port* | --admin | --admin=* | --admin-host* | \
        --admin-port* | --engine* | --redis* | -c | --config | --config=*)
        bad_usage "flag $1 is set by the script (loopback only); it cannot be passed through"
        ;;
    esac
}

start_redis() {
    command -v redis-server >/dev/null || die "redis-server not found (apt-get install redis-server, or --no-redis)"
    nohup redis-server --bind 127.0.0.1 --port "$redis_port" --protected-mode yes \
        --save '' --appendonly no --dir "$run_dir" --maxmemory 256mb \
        --maxmemory-policy noeviction --daemonize no >"$run_dir/logs/redis.log" 2>&1 </dev/null &
    record redis $! || return 1
    await redis sh -c "[ \"\$(redis-cli -h 127.0.0.1 -p $redis_port ping)\" = PONG ]"
}

# Writes node $1's config (its secrets included, mode 0600), starts it, and reads the ports
# it listens on from its ev=listening line (port 0: the kernel picks them).
start_node() {
    local i=$1 cport=0 aport=0 line
    if [ -n "$base_port" ]; then
        cport=$((base_port + 10 + 2 * i))
        aport=$((base_port + 11 + 2 * i))
    fi
    {
        printf '[server]\nhost = 127.0.0.1\nport = %s\nnode_id = local-%s\n' "$cport" "$i"
        printf 'io_threads = %s\ndrain = 2s\n\n' "$io_threads"
        printf '[admin]\nhost = 127.0.0.1\nport = %s\napi_key = %s\n\n' "$aport" "$api_key"
        printf '[auth]\nsecret = %s\ninsecure = %s\n\n' "$token_secret" "$insecure"
        engine_section
    } >"$run_dir/node-$i.conf"
    # HERALD_BIN is this script's setting, not herald's: herald warns about unknown HERALD_*.
    nohup env -u HERALD_BIN "$herald" --config "$run_dir/node-$i.conf" "${extra[@]}" \
        >"$run_dir/logs/node-$i.log" 2>&1 </dev/null &
    record "node-$i" $! || return 1
    await "node-$i" grep -q 'ev=listening' "$run_dir/logs/node-$i.log" || return 1
    line=$(grep -m1 'ev=listening' "$run_dir/logs/node-$i.log")
    [[ $line =~ [[:space:]]port=([0-9]+)[[:space:]]admin_port=([0-9]+) ]] || return 1
    node_port[i]=${BASH_REMATCH[1]}
    admin_port[i]=${BASH_REMATCH[2]}
    await "node-$i" curl -fs -m 1 "http://127.0.0.1:${admin_port[i]}/readyz"
}

# HAProxy 2.2+: TCP to the nodes, least connections (clients are long-lived), each node
# checked with GET /readyz on its admin port, so a draining node leaves the rotation at once.
start_haproxy() {
    local i
    command -v haproxy >/dev/null || die "haproxy not found (apt-get install haproxy)"
    {
        cat <<EOF
# Written by $prog up. HAProxy in front of the local herald nodes.
# No maxconn: HAProxy derives it from the descriptor limit it runs with (ulimit -n), two
# descriptors per proxied client.
defaults
    mode tcp
    timeout connect 2s
    # Above herald's idle_timeout (1m): herald, not HAProxy, closes silent clients.
    timeout client 90s
    timeout server 90s
frontend herald_clients
    bind 127.0.0.1:$lb_port
    default_backend herald
backend herald
    balance leastconn
    option httpchk
    http-check send meth GET uri /readyz
    http-check expect status 200
    default-server check inter 1s fall 2 rise 1
EOF
        for ((i = 0; i < nodes; i++)); do
            echo "    server node-$i 127.0.0.1:${node_port[i]} check port ${admin_port[i]}"
        done
        cat <<EOF
frontend stats
    mode http
    bind 127.0.0.1:$lb_stats_port
    stats enable
    stats uri /
    stats refresh 5s
EOF
    } >"$run_dir/haproxy.cfg"
    haproxy -c -q -f "$run_dir/haproxy.cfg" >"$run_dir/logs/haproxy.log" 2>&1 ||
        { cat "$run_dir/logs/haproxy.log" >&2; return 1; }
    nohup haproxy -db -f "$run_dir/haproxy.cfg" >>"$run_dir/logs/haproxy.log" 2>&1 </dev/null &
    record haproxy $! || return 1
    # Up once every node passes its health check.
    await haproxy sh -c "[ \"\$(curl -fsS -m 1 'http://127.0.0.1:$lb_stats_port/;csv' |
        awk -F, '\$1 == \"herald\" && \$2 ~ /^node-/ && \$18 == \"UP\"' | wc -l)\" -eq $nodes ]"
}

# Prometheus scraping every node's /metrics with the admin key (Bearer, from a file) and
# evaluating dashboards/herald-alerts*.yml, the same rules operators install.
start_prometheus() {
    local i targets=""
    command -v prometheus >/dev/null || die "prometheus not found (apt-get install prometheus)"
    for ((i = 0; i < nodes; i++)); do targets+="${targets:+, }\"127.0.0.1:${admin_port[i]}\""; done
    printf '%s\n' "$api_key" >"$run_dir/admin-api-key"
    cat >"$run_dir/prometheus.yml" <<EOF
# Written by $prog up: dashboards/prometheus-scrape.yml for the local nodes.
global:
  scrape_interval: $scrape_interval
  evaluation_interval: $scrape_interval
rule_files:
  - $here/dashboards/herald-alerts.yml
  - $here/dashboards/herald-alerts-redis.yml
scrape_configs:
  - job_name: herald
    metrics_path: /metrics
    authorization:
      type: Bearer
      credentials_file: $run_dir/admin-api-key
    static_configs:
      - targets: [$targets]
        labels:
          cluster: herald-local
EOF
    mkdir -p "$run_dir/prometheus-data"
    nohup prometheus --config.file="$run_dir/prometheus.yml" \
        --storage.tsdb.path="$run_dir/prometheus-data" --storage.tsdb.retention.time=1d \
        --web.listen-address="127.0.0.1:$prometheus_port" \
        >"$run_dir/logs/prometheus.log" 2>&1 </dev/null &
    record prometheus $! || return 1
    await prometheus curl -fs -m 1 "http://127.0.0.1:$prometheus_port/-/ready"
}

write_env() {
    local i
    {
        echo "# Written by $prog up at $(date -u +%Y-%m-%dT%H:%M:%SZ). Source it."
        echo "CLUSTER_NODES=$nodes"
        echo "CLUSTER_ENGINE=$engine"
        echo "CLUSTER_API_KEY=$api_key"
        echo "CLUSTER_TOKEN_SECRET=$token_secret"
        echo "CLUSTER_LB=127.0.0.1:$lb_port"
        echo "CLUSTER_LB_PORT=$lb_port"
        echo "CLUSTER_LB_STATS_PORT=$lb_stats_port"
        echo "CLUSTER_PROMETHEUS=127.0.0.1:$prometheus_port"
        echo "CLUSTER_REDIS=${redis_port:+127.0.0.1:$redis_port}"
        for ((i = 0; i < nodes; i++)); do
            echo "CLUSTER_NODE_$i=127.0.0.1:${node_port[i]}"
            echo "CLUSTER_ADMIN_$i=127.0.0.1:${admin_port[i]}"
        done
    } >"$run_dir/cluster.env"
}

print_up() {
    local i lg
    lg=$here/build/release/loadgen/herald-loadgen
    [ -x "$lg" ] || lg="herald-loadgen"
    echo "herald cluster up: $nodes node(s), engine $engine, run dir $run_dir"
    echo "  clients (HAProxy, TCP):  127.0.0.1:$lb_port          <- point clients here"
    for ((i = 0; i < nodes; i++)); do
        echo "  node $i:  clients 127.0.0.1:${node_port[i]}  admin http://127.0.0.1:${admin_port[i]}/"
    done
    echo "  HAProxy stats:           http://127.0.0.1:$lb_stats_port/"
    echo "  Prometheus:              http://127.0.0.1:$prometheus_port/  (alerts: /alerts, targets: /targets)"
    [ -n "$redis_port" ] && echo "  Redis:                   127.0.0.1:$redis_port"
    echo "  Grafana:                 not in Debian; import dashboards/herald-grafana.json into a Grafana"
    echo "                           whose Prometheus data source is http://127.0.0.1:$prometheus_port"
    echo "Keys (and these addresses) for your shell:  . $run_dir/cluster.env"
    local auth="--secret \"\$CLUSTER_TOKEN_SECRET\"" load="--pattern broadcast --idle-shared"
    [ "$insecure" = true ] && auth="--insecure"
    # Independent memory-engine nodes: each publisher needs its subscribers on its own node.
    [ "$engine" = memory ] && [ "$nodes" -gt 1 ] && load="--pattern groups:10"
    echo "Load through HAProxy (30 s, 1000 idle + 10 publishing clients):"
    echo "  $lg --port $lb_port \\"
    echo "      $auth --idle 1000 --active 10 $load --total-rate 100 --duration 30"
    if [ "$engine" = memory ] && [ "$nodes" -gt 1 ]; then
        echo "  (engine memory: the nodes are independent, so each publisher must have its"
        echo "   subscribers on its own node: groups:K with K = --active and no --idle-shared.)"
    fi
    echo "Stop: $0 down${run_dir_flag}"
}

fail_up() {
    echo "$prog: up failed ($1); logs in $run_dir/logs; stopping what started" >&2
    tail -n 20 "$run_dir/logs/$1.log" >&2 2>/dev/null || true
    do_down >&2
    exit 1
}

cmd_up() {
    local i p
    [ -n "$herald" ] || herald=$(find_herald)
    { [ -n "$herald" ] && [ -x "$herald" ]; } || die "herald binary not found: build it, or pass --herald PATH"
    for p in curl python3 haproxy prometheus; do
        command -v "$p" >/dev/null || die "$p not found: scripts/install-deps.sh installs it"
    done
    umask 077
    mkdir -p "$run_dir/pids" "$run_dir/logs"
    chmod 700 "$run_dir"
    pid_files
    for p in "${pid_file_list[@]}"; do
        recorded_alive "$p" && die "a cluster is already running from $run_dir: run '$prog down' first"
        rm -f "$p"
    done
    if [ -n "$base_port" ]; then
        lb_port=$base_port
        lb_stats_port=$((base_port + 1))
        prometheus_port=$((base_port + 2))
        redis_port=$((base_port + 3))
        for ((p = base_port; p < base_port + 4; p++)); do
            if port_in_use "$p"; then die "port $p is in use: pick another --base-port"; fi
        done
        for ((p = base_port + 10; p < base_port + 10 + 2 * nodes; p++)); do
            if port_in_use "$p"; then die "port $p is in use: pick another --base-port"; fi
        done
    else
        lb_port=$(free_port)
        lb_stats_port=$(free_port)
        prometheus_port=$(free_port)
        redis_port=$(free_port)
    fi
    [ "$with_redis" = 1 ] || redis_port=""
    api_key=$(random_hex)
    token_secret=$(random_hex)
    node_port=()
    admin_port=()
    if [ "$with_redis" = 1 ]; then start_redis || fail_up redis; fi
    for ((i = 0; i < nodes; i++)); do
        start_node "$i" || fail_up "node-$i"
    done
    write_env
    start_haproxy || fail_up haproxy
    start_prometheus || fail_up prometheus
    print_up
}

# --- arguments --------------------------------------------------------------------------------

[ $# -ge 1 ] || { usage >&2; exit 2; }
cmd=$1
shift
case "$cmd" in
up | down | status) ;;
-h | --help | help) usage; exit 0 ;;
*) bad_usage "unknown command $cmd (up, down or status)" ;;
esac

nodes=2
base_port=""
engine=redis
io_threads=1
insecure=false
with_redis=1
herald=""
run_dir="${TMPDIR:-/tmp}/herald-cluster-$(id -u)"
run_dir_flag=""
extra=()
need() { [ $# -ge 2 ] || bad_usage "$1 needs a value"; }
up_only() { [ "$cmd" = up ] || bad_usage "$cmd takes --run-dir only, not $1"; }
while [ $# -gt 0 ]; do
    case "$1" in
    --run-dir) need "$@"; run_dir=$2; run_dir_flag=" --run-dir $2"; shift ;;
    -h | --help) usage; exit 0 ;;
    -n | --nodes) up_only "$1"; need "$@"; nodes=$2; shift ;;
    --base-port) up_only "$1"; need "$@"; base_port=$2; shift ;;
    --engine) up_only "$1"; need "$@"; engine=$2; shift ;;
    --io-threads) up_only "$1"; need "$@"; io_threads=$2; shift ;;
    --insecure) up_only "$1"; insecure=true ;;
    --no-redis) up_only "$1"; with_redis=0 ;;
    --herald) up_only "$1"; need "$@"; herald=$2; shift ;;
    --)
        up_only "$1"
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
if [ -n "$base_port" ] && ! { is_uint "$base_port" && [ "$base_port" -ge 1024 ] &&
    [ $((base_port + 10 + 2 * nodes)) -le 65536 ]; }; then
    bad_usage "--base-port: ports P..P+$((9 + 2 * nodes)) must lie within 1024..65535"
fi
if ! { is_uint "$io_threads" && [ "$io_threads" -ge 1 ] && [ "$io_threads" -le 64 ]; }; then
    bad_usage "--io-threads must be 1..64"
fi
case "$engine" in memory | redis) ;; *) bad_usage "--engine must be memory or redis" ;; esac
if [ "$engine" = redis ] && [ "$with_redis" = 0 ]; then
    bad_usage "--engine redis needs Redis: drop --no-redis"
fi

case "$cmd" in
up) cmd_up ;;
down) do_down ;;
status) do_status ;;
esac

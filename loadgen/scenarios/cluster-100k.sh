#!/usr/bin/env bash
# cluster-100k: 100,000 connections spread over several herald nodes that share channels
# through one redis-server (the Redis engine), and a broadcast published on one node that must
# reach every subscriber on every node, without loss.
#
# One herald process may hold at most ~19,000 connections here (the 20,000-descriptor hard
# limit), so 100k needs the cluster: --nodes herald processes (default 6, --io-threads 1 each),
# each loaded by its own herald-loadgen process of idle clients (count / nodes, with their own
# source addresses and --id-base range). The idle clients subscribe to the shared broadcast
# channel too (--idle-shared). Once every one is ready, one more loadgen process puts --active
# publishers on node 0, which broadcast at --rate publishes/s in total for --hold seconds.
#
# Only the publishing process knows how many messages were sent, so the script does the
# cluster's accounting: expected = publishes acknowledged x subscribers (every client of every
# process, all connected throughout), received = the unique deliveries summed over every
# process's JSON. The idle processes run with a long --duration and are ended by SIGTERM once
# herald has queued every Push and their progress lines show no more deliveries arriving.
# Any loss, duplicate or disconnect, or a client that never became ready, fails the run
# (exit 1); a setup failure (redis-server or a node not starting) exits 2.
#
# Usage: loadgen/scenarios/cluster-100k.sh [--count N] [--nodes K] [--hold S] [--rate R]
#            [--active M] [--connect-rate R] [--transport tcp|ws|tls|wss] [--build DIR]
#            [--pin]
source "$(dirname "$0")/lib.sh"
# Some fourteen processes share the two CPUs, so nothing is pinned by default (--pin puts herald
# and redis-server on CPU 0, the loadgens on CPU 1).
PIN=0
scenario_init "$@"

count=100000 nodes=6 hold=30 rate=1 active=10 connect_rate=6000
set -- "${ARGS[@]+"${ARGS[@]}"}"
while [ $# -gt 0 ]; do
    case "$1" in
    --count) count=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --hold) hold=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --active) active=$2; shift 2 ;;
    --connect-rate) connect_rate=$2; shift 2 ;;
    *) die "unknown option $1" ;;
    esac
done

# Clients per loadgen process and connections per node stay under what one process may hold.
max_per_proc=19000
idle=$((count - active))
per_node=$(((idle + nodes - 1) / nodes))
[ "$idle" -gt 0 ] || die "--count must exceed --active"
if [ "$nodes" -lt 1 ] || [ "$nodes" -gt 60 ]; then die "--nodes must be 1..60"; fi
[ $((per_node + active)) -le "$max_per_proc" ] ||
    die "$per_node clients per node exceed $max_per_proc (one process's descriptors): add --nodes"
ramp_timeout=$((count / (connect_rate > 0 ? connect_rate : 1000) + 60))
# Every process started here runs under `timeout` with this bound, however the script ends.
bound_s=$((ramp_timeout + hold + 240))
API_KEY=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
export HERALD_ADMIN_API_KEY=$API_KEY # through the environment: it stays out of `ps`

fail() {
    echo "cluster-100k: FAILED: $*" >&2
    exit 1
}

REDIS_PID="" REDIS_WRAP=""
NODE_PIDS=() NODE_WRAPS=() NODE_PORTS=() NODE_ADMIN=()

# The one child of a process just started (timeout's command), waiting briefly for the fork.
child_pid() { # pid
    local c
    for _ in $(seq 50); do
        c=$(cat "/proc/$1/task/$1/children" 2>/dev/null || true)
        if [ -n "$c" ]; then
            echo "${c%% *}"
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# SIGTERM to each PID, then up to 20 s for all of them to go, then SIGKILL.
# shellcheck disable=SC2317 # called from the exit trap
pids_stop() { # pid...
    local pid
    for pid in "$@"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for _ in $(seq 200); do
        local alive=0
        for pid in "$@"; do
            kill -0 "$pid" 2>/dev/null && alive=1
        done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for pid in "$@"; do
        kill -KILL "$pid" 2>/dev/null || true
    done
}

# Run by lib.sh's exit trap once the loadgens are signalled: the nodes first (they would only
# reconnect to a vanished Redis), then redis-server.
# shellcheck disable=SC2317
scenario_on_exit() {
    local pid
    for pid in "${LOADGEN_PIDS[@]+"${LOADGEN_PIDS[@]}"}"; do
        wait "$pid" 2>/dev/null || true
    done
    if [ ${#NODE_PIDS[@]} -gt 0 ]; then
        pids_stop "${NODE_PIDS[@]}"
        for pid in "${NODE_WRAPS[@]}"; do
            wait "$pid" 2>/dev/null || true
        done
    fi
    if [ -n "$REDIS_PID" ]; then
        pids_stop "$REDIS_PID"
        wait "$REDIS_WRAP" 2>/dev/null || true
    fi
}

free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts redis-server on a free port (a few tries: the port may be taken between the probe and
# the bind) and waits until it answers as the process started. Sets REDIS_PORT, REDIS_PID and
# REDIS_WRAP.
redis_start() {
    for _ in 1 2 3; do
        REDIS_PORT=$(free_port)
        # shellcheck disable=SC2046
        timeout -k 5 "$bound_s" $(pin 0) redis-server --port "$REDIS_PORT" --bind 127.0.0.1 \
            --save "" --appendonly no >"$WORK/redis.log" 2>&1 &
        REDIS_WRAP=$!
        REDIS_PID=$(child_pid "$REDIS_WRAP") || die "redis-server did not start"
        for _ in $(seq 100); do
            kill -0 "$REDIS_PID" 2>/dev/null || break
            # Ours, not another user's Redis that took the port between the probe and the bind
            # (ours then exits; a PONG alone would send the cluster to the other one).
            if [ "$(timeout 2 redis-cli -p "$REDIS_PORT" info server 2>/dev/null |
                tr -d '\r' | sed -n 's/^process_id://p')" = "$REDIS_PID" ]; then
                return 0
            fi
            sleep 0.1
        done
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_WRAP" 2>/dev/null || true
        REDIS_PID=""
    done
    cat "$WORK/redis.log" >&2
    die "redis-server did not answer PING on a free port"
}

# Starts node k with the Redis engine and waits until its /readyz says 200 (Redis link up).
node_start() { # k
    local k=$1 code="" pid
    SCN_HERALD_PREFIX="timeout -k 10 $bound_s $(pin 0)" herald_spawn "node$k" \
        --engine redis --redis "127.0.0.1:$REDIS_PORT" --node-id "n$k" --io-threads 1 \
        --max-connections $((per_node + active + 100))
    NODE_WRAPS+=("$SPAWN_PID")
    pid=$(child_pid "$SPAWN_PID") || die "node $k: no herald process under timeout"
    NODE_PIDS+=("$pid")
    NODE_PORTS+=("$SPAWN_PORT")
    NODE_ADMIN+=("$SPAWN_ADMIN_PORT")
    for _ in $(seq 100); do
        code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 \
            "http://127.0.0.1:$SPAWN_ADMIN_PORT/readyz" || true)
        [ "$code" = 200 ] && return 0
        sleep 0.1
    done
    cat "$WORK/node$k.log" >&2
    die "node $k: /readyz answered $code, not 200, within 10 s"
}

# Saves each node's /metrics, plus its RSS and CPU ticks from /proc, and redis-server's RSS and
# CPU, as $WORK/STAGE-nodeK.prom and $WORK/STAGE-redis.prom (Prometheus text lines).
snapshot() { # stage
    local k
    for k in $(seq 0 $((nodes - 1))); do
        {
            curl -s -m 5 -H "X-Api-Key: $API_KEY" "http://127.0.0.1:${NODE_ADMIN[k]}/metrics" ||
                die "node $k: GET /metrics failed"
            echo "rss_kb $(proc_rss_kb "${NODE_PIDS[k]}")"
            echo "cpu_ticks $(proc_cpu_ticks "${NODE_PIDS[k]}")"
        } >"$WORK/$1-node$k.prom"
    done
    printf 'rss_kb %s\ncpu_ticks %s\n' "$(proc_rss_kb "$REDIS_PID")" \
        "$(proc_cpu_ticks "$REDIS_PID")" >"$WORK/$1-redis.prom"
}

# One metric summed over its labels and the given snapshot files.
metric_sum() { # name file...
    local name=$1
    shift
    awk -v m="$name" '$1 == m || index($1, m "{") == 1 { s += $2 } END { printf "%.0f\n", s }' "$@"
}

ns_to_s() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'; }

# Runs a loadgen against node k's port under `timeout`; the rest are loadgen flags.
loadgen_start() { # name k flags...
    local name=$1 k=$2
    shift 2
    # shellcheck disable=SC2046
    timeout -k 10 "$bound_s" $(pin 1) "$LOADGEN" "${LG_TRANSPORT[@]}" \
        --port "${NODE_PORTS[$k]}" --insecure --pattern broadcast --progress plain --quiet --json "$WORK/$name.json" "$@" \
        2>"$WORK/$name.log" &
    LOADGEN_PIDS+=($!)
}

# True once the log's last two progress lines show no delivery arriving.
loadgen_quiet() { # log
    [ "$(grep '^\[' "$1" | tail -n 2 | grep -c 'dlv/s 0 |')" = 2 ]
}

# Waits (at most S seconds) until every log has a line matching the pattern.
wait_logs() { # seconds pattern log...
    local deadline=$(($(date +%s) + $1)) pattern=$2 log n
    shift 2
    while :; do
        n=0
        for log in "$@"; do
            grep -q "$pattern" "$log" 2>/dev/null && n=$((n + 1))
        done
        [ "$n" -eq $# ] && return 0
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.5
    done
}

# --- Cluster up. ----------------------------------------------------------------------------

redis_start
for k in $(seq 0 $((nodes - 1))); do
    node_start "$k"
done
echo "cluster-100k: $count connections over $nodes herald nodes (Redis engine, redis-server" \
    "on 127.0.0.1:$REDIS_PORT); broadcast $rate/s for ${hold}s from $active clients on node 0" >&2
snapshot before

# --- Idle clients: one loadgen per node, own sources and ids. -------------------------------

idle_logs=()
ramp_ns0=$(now_ns)
for k in $(seq 0 $((nodes - 1))); do
    n=$((idle / nodes + (k < idle % nodes ? 1 : 0)))
    loadgen_start "idle-$k" "$k" --idle "$n" --idle-shared --id-base $((k * max_per_proc)) \
        --sources "127.0.0.$((2 + 4 * k))-127.0.0.$((5 + 4 * k))" \
        --connect-rate $((connect_rate / nodes)) --ramp-timeout "$ramp_timeout" \
        --duration "$bound_s"
    idle_logs+=("$WORK/idle-$k.log")
done
# Each process notes "ramp: R of N clients ready" (or "ramp timed out") when its holding phase
# begins.
wait_logs $((ramp_timeout + 30)) '^ramp' "${idle_logs[@]}" ||
    fail "the idle loadgens did not finish their ramp in $((ramp_timeout + 30)) s"
ramp_ns1=$(now_ns)
idle_ready=$(sed -n 's/^ramp: \([0-9]*\) of .*/\1/p' "${idle_logs[@]}" | awk '{ s += $1 } END { print s + 0 }')
if [ "$idle_ready" -ne "$idle" ]; then
    grep -h '^ramp' "${idle_logs[@]}" >&2
    fail "only $idle_ready of $idle idle clients became ready"
fi
echo "cluster-100k: $idle_ready idle clients ready in $(ns_to_s "$ramp_ns0" "$ramp_ns1") s" >&2

# --- The broadcast: one publishing process on node 0. ---------------------------------------

snapshot loaded
pub_ns0=$(now_ns)
loadgen_start pub 0 --active "$active" --total-rate "$rate" --duration "$hold" --drain 10 \
    --id-base $((nodes * max_per_proc)) --sources "127.0.0.$((2 + 4 * nodes))" --ramp-timeout 30
pub_wrap=${LOADGEN_PIDS[-1]}
wait_logs 35 '^ramp' "$WORK/pub.log" || { cat "$WORK/pub.log" >&2; fail "the publishing loadgen did not connect"; }
# Every connection is open now (the publisher's ramp takes milliseconds).
snapshot publishing
# The cluster's own view of who is online (users and connections over every node, from Redis),
# while every client is connected: the publishers leave when their loadgen ends. Each node
# reports its connections once per [presence] refresh_interval (5 s), so the count may take
# that long to include the publishers: polled for up to 3 intervals (or the hold, if shorter).
pub_ready_now=$(sed -n 's/^ramp: \([0-9]*\) of .*/\1/p' "$WORK/pub.log" | head -n 1)
online_want=$((idle_ready + ${pub_ready_now:-0}))
online_ns0=$(now_ns)
online_deadline=$(($(date +%s) + (hold < 15 ? hold : 15)))
while :; do
    curl -s -m 10 -H "X-Api-Key: $API_KEY" "http://127.0.0.1:${NODE_ADMIN[0]}/api/online" \
        >"$WORK/online.json" || echo '{}' >"$WORK/online.json"
    json_get "$WORK/online.json" '"%s %s" % (d.get("users"), d.get("connections"))' \
        >"$WORK/online.txt" 2>/dev/null || echo "? ?" >"$WORK/online.txt"
    [ "$(cat "$WORK/online.txt")" = "$online_want $online_want" ] && break
    [ "$(date +%s)" -lt "$online_deadline" ] || break
    sleep 0.5
done
echo "$online_want $(ns_to_s "$online_ns0" "$(now_ns)")" >"$WORK/online-want.txt"
status=0
wait "$pub_wrap" || status=$?
pub_ns1=$(now_ns)
snapshot published
if [ ! -s "$WORK/pub.json" ]; then
    cat "$WORK/pub.log" >&2
    die "the publishing loadgen wrote no results (status $status)"
fi
read -r pub_ok pub_ready < <(json_get "$WORK/pub.json" \
    '"%d %d" % (d["publish"]["ok"], d["clients"]["ready_at_start"])')
expected=$((pub_ok * (idle_ready + pub_ready)))

# herald's side first: the nodes together queued every Push (at most 30 s) ...
pushes0=$(metric_sum herald_deliveries_total "$WORK"/loaded-*.prom)
deadline=$(($(date +%s) + 30))
while :; do
    snapshot drained
    pushes=$(($(metric_sum herald_deliveries_total "$WORK"/drained-*.prom) - pushes0))
    [ "$pushes" -ge "$expected" ] && break
    [ "$(date +%s)" -lt "$deadline" ] || break
    sleep 0.5
done
# ... then the clients' side: no delivery arriving for two progress lines (at most 30 s).
deadline=$(($(date +%s) + 30))
sleep 2
while :; do
    quiet=0
    for log in "${idle_logs[@]}"; do
        loadgen_quiet "$log" && quiet=$((quiet + 1))
    done
    [ "$quiet" -eq "$nodes" ] && break
    [ "$(date +%s)" -lt "$deadline" ] || break
    sleep 0.5
done
# Where Redis's time went (calls and microseconds per command), for the figures.
timeout 5 redis-cli -p "$REDIS_PORT" INFO commandstats >"$WORK/redis-commandstats.txt" 2>/dev/null ||
    true
for pid in "${LOADGEN_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
done
for pid in "${LOADGEN_PIDS[@]}"; do
    wait "$pid" || status=$?
done
LOADGEN_PIDS=()
for k in $(seq 0 $((nodes - 1))); do
    [ -s "$WORK/idle-$k.json" ] || { cat "$WORK/idle-$k.log" >&2; die "loadgen idle-$k wrote no results"; }
done

# --- Figures. -------------------------------------------------------------------------------

# Accounting over every process's JSON and the nodes' snapshots; exits 1 on any loss.
report_status=0
/usr/bin/python3 - "$WORK" "$nodes" "$count" "$active" "$rate" "$hold" \
    "$(ns_to_s "$ramp_ns0" "$ramp_ns1")" "$(ns_to_s "$pub_ns0" "$pub_ns1")" "$CLK_TCK" \
    <<'PY' || report_status=$?
import json, os, sys

work, nodes, count, active = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rate, hold, ramp_s, pub_s, hz = sys.argv[5], sys.argv[6], float(sys.argv[7]), float(sys.argv[8]), int(sys.argv[9])

def prom(stage, name):
    """A node snapshot's /metrics as {metric: sum over its labels}, plus the /proc figures."""
    out = {}
    for line in open(os.path.join(work, "%s-%s.prom" % (stage, name))):
        if line.startswith("#") or not line.strip():
            continue
        key, value = line.rsplit(None, 1)
        key = key.split("{", 1)[0]
        out[key] = out.get(key, 0.0) + float(value)
    return out

def load(name):
    return json.load(open(os.path.join(work, name + ".json")))

idle = [load("idle-%d" % k) for k in range(nodes)]
pub = load("pub")
procs = idle + [pub]
unique = lambda d: d["delivery"]["deliveries"] - d["delivery"]["duplicates"]
total = lambda key: sum(key(d) for d in procs)

ready = total(lambda d: d["clients"]["ready_at_start"])
clients = total(lambda d: d["clients"]["total"])
pub_ok = pub["publish"]["ok"]
expected = pub_ok * ready
received = total(unique)
dups = total(lambda d: d["delivery"]["duplicates"])
gaps = total(lambda d: d["delivery"]["missing"])
disc = total(lambda d: d["disconnects"]["total"])
# Connect attempts that failed, by reason, and the Error frames the idle clients got (they
# publish nothing, so these answered their Connect or Subscribe).
fails, refusals = {}, {}
for d in procs:
    for why, n in d["connect"]["failures_by_reason"].items():
        fails[why] = fails.get(why, 0) + n
for d in idle:
    for code, n in d["errors"]["by_code"].items():
        refusals[code] = refusals.get(code, 0) + n
count_list = lambda m: ", ".join("%s %d" % kv for kv in sorted(m.items())) or "none"

def pct(t0, t1, secs):
    return 100.0 * (t1 - t0) / hz / secs if secs > 0 else 0.0

print("cluster-100k results: %d connections on %d herald nodes (--engine redis), one redis-server"
      % (count, nodes))
print("  %-5s %7s %9s %8s %6s %9s %10s %8s %8s %8s"
      % ("node", "conns", "RSS KiB", "B/conn", "cpu%", "flush ms", "received", "p50 ms", "p99 ms",
         "arr p99"))
node_sum = {"conns": 0, "rss0": 0, "rss1": 0, "flush_s": 0.0, "flush_n": 0}
worst_p99 = worst_arr = 0.0
for k, d in enumerate(idle):
    n = "node%d" % k
    before, loaded, during, after = (prom(s, n) for s in ("before", "loaded", "publishing", "published"))
    conns = int(during["herald_connections"])
    per_conn = (loaded["rss_kb"] - before["rss_kb"]) * 1024 / max(conns, 1)
    flush_n = after["herald_publish_to_flush_seconds_count"] - loaded["herald_publish_to_flush_seconds_count"]
    flush_s = after["herald_publish_to_flush_seconds_sum"] - loaded["herald_publish_to_flush_seconds_sum"]
    node_sum["conns"] += conns
    node_sum["rss0"] += before["rss_kb"]
    node_sum["rss1"] += loaded["rss_kb"]
    node_sum["flush_s"] += flush_s
    node_sum["flush_n"] += flush_n
    lat, arr = d["latency_ms"], d["latency_arrival_ms"]
    worst_p99, worst_arr = max(worst_p99, lat["p99"]), max(worst_arr, arr["p99"])
    print("  %-5s %7d %9d %8.0f %6.0f %9.1f %10d %8.1f %8.1f %8.1f"
          % ("n%d" % k, conns, loaded["rss_kb"], per_conn,
             pct(loaded["cpu_ticks"], after["cpu_ticks"], pub_s),
             1e3 * flush_s / flush_n if flush_n else 0, unique(d), lat["p50"], lat["p99"], arr["p99"]))
print("  %-5s %7s %9s %8s %6s %9s %10d %8.1f %8.1f %8.1f"
      % ("pub", "(%d)" % pub["clients"]["total"], "", "", "", "", unique(pub),
         pub["latency_ms"]["p50"], pub["latency_ms"]["p99"], pub["latency_arrival_ms"]["p99"]))

r0, r1, r2 = prom("before", "redis"), prom("loaded", "redis"), prom("published", "redis")
after = {key: sum(prom("drained", "node%d" % k).get(key, 0) for k in range(nodes))
         for key in ("herald_redis_busy_publishes_total", "herald_redis_join_timeouts_total",
                     "herald_redis_lost_messages_total", "herald_slow_consumer_drops_total",
                     "herald_redis_refused_commands_total", "herald_redis_presence_dropped_total",
                     "herald_redis_reconnects_total")}
row = "  %-24s "
print(row % "connections" + "%d open on the nodes during the broadcast (herald_connections), %d of %d clients ready"
      % (node_sum["conns"], ready, clients))
idle_ready = ready - pub["clients"]["ready_at_start"]
print(row % "ramp" + "%.1f s for %d idle clients, %.0f connects/s; failed attempts (retried): %s;"
      " Error frames: %s" % (ramp_s, idle_ready, idle_ready / ramp_s if ramp_s else 0,
                             count_list(fails), count_list(refusals)))
print(row % "herald RSS" + "%d KiB -> %d KiB over the nodes: %.0f bytes per connection"
      % (node_sum["rss0"], node_sum["rss1"],
         (node_sum["rss1"] - node_sum["rss0"]) * 1024 / max(node_sum["conns"], 1)))
print(row % "redis-server" + "RSS %d KiB -> %d KiB; %.0f%% of a core during the ramp, %.0f%%"
      " during the broadcast" % (r0["rss_kb"], r1["rss_kb"],
                                 pct(r0["cpu_ticks"], r1["cpu_ticks"], ramp_s),
                                 pct(r1["cpu_ticks"], r2["cpu_ticks"], pub_s)))
stats = []
for line in open(os.path.join(work, "redis-commandstats.txt")):
    if line.startswith("cmdstat_"):
        name, rest = line.strip()[8:].split(":", 1)
        f = dict(kv.split("=") for kv in rest.split(","))
        stats.append((int(f["usec"]), int(f["calls"]), name))
stats.sort(reverse=True)
print(row % "redis time by command" + ", ".join(
    "%s %d calls %.1f s" % (name, calls, usec / 1e6) for usec, calls, name in stats[:6]))
print(row % "publishes" + "%d ok at %s/s for %s s from %d clients on n0; refused %d, unanswered %d"
      % (pub_ok, rate, hold, active, pub["publish"]["errors"], pub["publish"]["unacked"]))
print(row % "deliveries" + "expected %d (%d publishes x %d subscribers), received %d"
      % (expected, pub_ok, ready, received))
print(row % "loss" + "%d lost, %d duplicates, %d offset gaps, %d disconnects"
      % (expected - received, dups, gaps, disc))
print(row % "herald" + "flush %.1f ms per message and node (mean); Redis busy publishes %d, join"
      " timeouts %d, lost messages %d, refused commands %d, presence writes dropped %d,"
      " reconnects %d; slow-consumer drops %d"
      % (1e3 * node_sum["flush_s"] / node_sum["flush_n"] if node_sum["flush_n"] else 0,
         after["herald_redis_busy_publishes_total"], after["herald_redis_join_timeouts_total"],
         after["herald_redis_lost_messages_total"], after["herald_redis_refused_commands_total"],
         after["herald_redis_presence_dropped_total"], after["herald_redis_reconnects_total"],
         after["herald_slow_consumer_drops_total"]))
try:
    online = json.load(open(os.path.join(work, "online.json")))
except ValueError:
    online = {}
online_want, online_s = open(os.path.join(work, "online-want.txt")).read().split()
online_want = int(online_want)
print(row % "online (GET /api/online)" + "%s users, %s connections; %d clients connected (%s s after"
      " the publishers connected)" % (online.get("users", "?"), online.get("connections", "?"),
                                      online_want, online_s))
print(row % "latency" + "p99 %.1f ms processed, %.1f ms arrival (worst node's subscribers)"
      % (worst_p99, worst_arr))
if any(d["cpu"]["generator_bound"] for d in procs):
    print("  warning: a loadgen thread was saturated; latency is partly the generator's")
# A refused publish is herald's back-pressure, answered to the publisher, not a lost delivery:
# expected counts only acknowledged publishes. It is shown, not failed.
if pub["publish"]["errors"]:
    print("  warning: herald refused %d publishes (%s)" % (pub["publish"]["errors"],
          ", ".join("%s %d" % kv for kv in sorted(pub["errors"]["by_code"].items()))))

why = []
if ready != clients:
    why.append("only %d of %d clients were ready" % (ready, clients))
if pub_ok == 0:
    why.append("no publish was acknowledged")
if pub["publish"]["unacked"]:
    why.append("%d publishes unanswered" % pub["publish"]["unacked"])
if disc:
    why.append("%d clients disconnected while ready" % disc)
if received != expected:
    why.append("received %d of %d deliveries" % (received, expected))
if dups or gaps:
    why.append("%d duplicates, %d offset gaps" % (dups, gaps))
# Every connected client is a distinct user: while all were connected (the publishers
# included), the cluster must count each one online within a few refresh intervals (the
# README's note on cluster-100k.sh: presence writes once crowded out the link).
if online.get("users") != online_want or online.get("connections") != online_want:
    why.append("GET /api/online counts %s users and %s connections, not %d"
               % (online.get("users", "?"), online.get("connections", "?"), online_want))
if why:
    print("cluster-100k: FAILED: " + "; ".join(why), file=sys.stderr)
    sys.exit(1)
print("cluster-100k: ok: all %d broadcasts reached all %d subscribers on %d nodes"
      % (pub_ok, ready, nodes))
PY
if [ "$status" -ne 0 ]; then
    tail -n 3 "$WORK"/*.log >&2
    fail "a loadgen process exited with status $status"
fi
exit "$report_status"

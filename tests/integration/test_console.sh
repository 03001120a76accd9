#!/usr/bin/env bash
# test_console: herald's admin console (/console) in a real browser, under real load.
#
#   A real herald (memory engine, two IO loops, a 64 KiB output high-water mark) and a real
#   herald-loadgen run against it (50 idle + 10 active clients on one broadcast channel, 200
#   publishes/s, ended by SIGTERM once the check is done). tests/browser/check_console.js
#   then adds two subscribers of its own (clients/js: a probe and a slow consumer that stops
#   reading) and drives the console in Debian's headless Chromium (puppeteer-core): a wrong
#   key is refused; with the right one the figures the page shows match /metrics, the charts
#   have points, presence and online lookups find the probe, a test publish reaches it, and
#   the page logs no error. Then the same against a cluster when redis-server is here: two
#   herald nodes on the Redis engine, the console of one listing both, the probe on the other.
#   Screenshots stay in ARTIFACTS (console.png, console_cluster.png).
#
# Needs node, tests/browser/node_modules and clients/js/node_modules (scripts/install-deps.sh
# runs npm ci in both) and /usr/bin/chromium. Every process runs on free loopback ports and is
# stopped by PID.
# Usage: test_console.sh HERALD LOADGEN BROWSER_DIR CLIENTS_JS_DIR ARTIFACTS
set -euo pipefail
herald=$1
loadgen=$2
browser_dir=$3
clients_js=$4
artifacts=$5
work=$(mktemp -d "${TMPDIR:-/tmp}/test_console.XXXXXX")
source "$(dirname "$0")/lg_herald.sh"
key=console-test-key
lg_pid=""
peer_pid=""
redis_pid=""

cleanup() {
    [ -n "$lg_pid" ] && kill -TERM "$lg_pid" 2>/dev/null && wait "$lg_pid" 2>/dev/null
    [ -n "$peer_pid" ] && kill -TERM "$peer_pid" 2>/dev/null && wait "$peer_pid" 2>/dev/null
    reap_herald
    [ -n "$redis_pid" ] && kill -TERM "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    for f in herald.log peer.log lg.err; do
        [ -f "$work/$f" ] && { echo "--- $f" >&2; tail -40 "$work/$f" >&2; }
    done
    exit 1
}

command -v node >/dev/null || fail "no node on PATH: run scripts/install-deps.sh"
[ -d "$browser_dir/node_modules/puppeteer-core" ] ||
    fail "$browser_dir/node_modules is missing: run scripts/install-deps.sh (npm ci there)"
[ -d "$clients_js/node_modules/protobufjs" ] ||
    fail "$clients_js/node_modules is missing: run scripts/install-deps.sh (npm ci there)"
mkdir -p "$artifacts"

# Flags both herald runs share: the key, a mark the slow consumer passes quickly, heartbeats
# slow enough that the paused subscriber keeps its session through the test, no drain.
common=(--insecure --api-key "$key" --output-high-water 64KiB --ping-interval 60s
        --idle-timeout 120s --drain 0)
idle=50
active=10
rate=200

# Runs loadgen against port $1 in the background for at most a minute; sets lg_pid.
start_loadgen() {
    "$loadgen" --port "$1" --insecure --idle "$idle" --active "$active" --idle-shared \
        --pattern broadcast --total-rate "$rate" --duration 60 --threads 1 --progress none \
        --quiet >"$work/lg.out" 2>"$work/lg.err" &
    lg_pid=$!
}

# Ends the loadgen run (SIGTERM: it stops measuring and reports) and checks that it was a
# clean run.
stop_loadgen() {
    kill -TERM "$lg_pid"
    local rc=0
    wait "$lg_pid" || rc=$?
    lg_pid=""
    [ "$rc" -eq 0 ] || fail "loadgen exited $rc"
}

# --- one node, memory engine ---
rm -f "$artifacts/console.png"
start_herald "${common[@]}"
start_loadgen "$port"
node "$browser_dir/check_console.js" --admin-port "$admin_port" --port "$port" --key "$key" \
    --clients $((idle + active)) --rate "$rate" --clients-js "$clients_js" \
    --screenshot "$artifacts/console.png" || fail "the console does not show this herald"
stop_loadgen
stop_herald

# --- two nodes on Redis ---
if ! command -v redis-server >/dev/null; then
    echo "no redis-server: the cluster part is skipped"
    echo "artifacts: $artifacts/console.png"
    exit 0
fi
rm -f "$artifacts/console_cluster.png"
# A free port for Redis: bind 0 in Python, hand the number over (Redis has no port 0 line).
redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 100); do
    redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG && break
    kill -0 "$redis_pid" 2>/dev/null || fail "redis-server did not start"
    sleep 0.1
done
redis-cli -p "$redis_port" ping | grep -q PONG || fail "redis-server does not answer"

# The peer first (node b), by hand: lg_herald.sh keeps one herald.
rm -f "$work/peer.fifo"
mkfifo "$work/peer.fifo"
"$herald" --listen 127.0.0.1:0 --admin 127.0.0.1:0 --io-threads 2 "${common[@]}" \
    --engine redis --redis "127.0.0.1:$redis_port" --node-id console-b 2>"$work/peer.fifo" &
peer_pid=$!
exec 4<"$work/peer.fifo"
peer_port=""
while IFS= read -r -t 20 line <&4; do
    echo "$line" >>"$work/peer.log"
    if [[ $line =~ ev=listening.*[[:space:]]port=([0-9]+)[[:space:]]admin_port=([0-9]+) ]]; then
        peer_port=${BASH_REMATCH[1]}
        peer_admin=${BASH_REMATCH[2]}
        break
    fi
done
cat <&4 >>"$work/peer.log" &
exec 4<&-
[ -n "$peer_port" ] || fail "the peer herald did not start"

start_herald "${common[@]}" --engine redis --redis "127.0.0.1:$redis_port" --node-id console-a
start_loadgen "$port"
node "$browser_dir/check_console.js" --admin-port "$admin_port" --port "$port" --key "$key" \
    --clients $((idle + active)) --rate "$rate" --clients-js "$clients_js" \
    --screenshot "$artifacts/console_cluster.png" --cluster --peer-port "$peer_port" \
    --peer-admin-port "$peer_admin" --peer-node console-b ||
    fail "the console does not show this cluster"
stop_loadgen
stop_herald
kill -TERM "$peer_pid"
st=0
wait "$peer_pid" || st=$?
peer_pid=""
[ "$st" -eq 0 ] || fail "the peer herald exited $st after SIGTERM"
echo "artifacts: $artifacts/console.png $artifacts/console_cluster.png"

#!/usr/bin/env bash
# test_local_cluster: deploy/local-cluster.sh up, load through HAProxy, down.
#
#   1. up (two Redis-engine nodes, Redis, HAProxy, Prometheus, every port picked free by the
#      kernel, a run directory of its own) exits 0, prints the HAProxy address and the
#      herald-loadgen command, and records five live processes; status says all run.
#   2. herald-loadgen through HAProxy: 40 idle + 10 active clients all on one broadcast
#      channel (HAProxy puts them on both nodes, so most deliveries cross nodes through
#      Redis), 100 publishes/s for 2 s: every client ready, every publish delivered to all 50,
#      nothing lost or duplicated, exit status 0.
#   3. HAProxy spread the clients: each node's herald_accepted_total (scraped with the
#      cluster's key as Authorization: Bearer) is above 0 and they add up to 50.
#   4. Prometheus scrapes both nodes (targets up) and has evaluated every alert rule of
#      dashboards/herald-alerts.yml without error (health ok).
#   5. down exits 0, and no process is left behind: every recorded PID is gone (or is another
#      process, by its start time) and no process's command line names the run directory.
#
# Every wait is bounded and awaits a condition (Prometheus's own API), never a fixed sleep.
# Usage: test_local_cluster.sh SOURCE_DIR HERALD LOADGEN
set -euo pipefail
src=$1
herald=$2
loadgen=$3
script=$src/deploy/local-cluster.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/test_local_cluster.XXXXXX")
run_dir=$work/cluster
is_up=false

cleanup() {
    if $is_up; then "$script" down --run-dir "$run_dir" >/dev/null 2>&1 || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    for f in "$run_dir"/logs/*.log; do
        [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
    done
    exit 1
}

# PID and start time from each PID file; a process counts as ours while both match. A zombie
# (exited, not yet reaped by its parent, which for the script's processes is init) has gone.
start_time() {
    local stat rest
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    rest=${stat##*) }
    # shellcheck disable=SC2086
    set -- $rest
    [ "$1" != Z ] || return 1
    echo "${20}"
}

# Polls the python condition $2 on Prometheus's API path $1 until it holds, for at most 40 s.
await_prometheus() {
    local path=$1 cond=$2 what=$3 i
    for ((i = 0; i < 400; i++)); do
        if curl -fsS -m 2 "http://$CLUSTER_PROMETHEUS$path" 2>/dev/null |
            python3 -c "import json, sys; d = json.load(sys.stdin)['data']; sys.exit(0 if ($cond) else 1)" \
                2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    fail "Prometheus: $what within 40 s"
}

# 1. up
rc=0
"$script" up --run-dir "$run_dir" --herald "$herald" >"$work/up.txt" 2>&1 || rc=$?
is_up=true
[ "$rc" -eq 0 ] || { cat "$work/up.txt" >&2; fail "up exited $rc"; }
# shellcheck disable=SC1091
. "$run_dir/cluster.env"
grep -q "clients (HAProxy, TCP):  $CLUSTER_LB " "$work/up.txt" || fail "up did not print the HAProxy address"
grep -q -- "--port $CLUSTER_LB_PORT" "$work/up.txt" || fail "up did not print the loadgen command"
grep -q "http://$CLUSTER_PROMETHEUS/" "$work/up.txt" || fail "up did not print Prometheus's URL"
grep -q "engine redis" "$work/up.txt" || fail "up did not start the nodes with the Redis engine"
declare -A pids=() starts=()
for f in "$run_dir"/pids/*.pid; do
    read -r pid t <"$f"
    name=$(basename "$f" .pid)
    [ "$(start_time "$pid")" = "$t" ] || fail "$name (pid $pid) is not running after up"
    pids[$name]=$pid
    starts[$name]=$t
done
[ "${#pids[@]}" -eq 5 ] || fail "up recorded ${#pids[@]} processes, want 5 (redis, 2 nodes, haproxy, prometheus): ${!pids[*]}"
"$script" status --run-dir "$run_dir" >"$work/status.txt" || { cat "$work/status.txt" >&2; fail "status exited non-zero"; }
[ "$(grep -c ' running' "$work/status.txt")" -eq 5 ] || { cat "$work/status.txt" >&2; fail "status does not show 5 running"; }
grep -q 'HAProxy backends: node-0 UP node-1 UP' "$work/status.txt" || fail "status does not show both backends UP"
echo "ok 1 up: ${!pids[*]} running; HAProxy on $CLUSTER_LB"

# 2. load through HAProxy
rc=0
timeout 60 "$loadgen" --port "$CLUSTER_LB_PORT" --secret "$CLUSTER_TOKEN_SECRET" --idle 40 \
    --active 10 --pattern broadcast --idle-shared --total-rate 100 --duration 2 --ramp-timeout 10 \
    --progress none --quiet --json "$work/run.json" 2>"$work/run.err" || rc=$?
[ "$rc" -eq 0 ] || { cat "$work/run.err" >&2; fail "herald-loadgen through HAProxy exited $rc"; }
python3 - "$work/run.json" <<'EOF' || fail "loadgen results"
import json, sys
d = json.load(open(sys.argv[1]))
c, p, dl = d["clients"], d["publish"], d["delivery"]
assert c["total"] == 50 and c["ready_at_start"] == 50, c
assert p["scheduled"] == 200 and p["ok"] == p["sent"] > 0 and p["errors"] == 0, p
assert dl["expected"] == 50 * p["ok"] and dl["deliveries"] == dl["expected"], dl
assert dl["lost"] == 0 and dl["missing"] == 0 and dl["duplicates"] == 0, dl
assert not d["failed"], d
print(f"ok 2 loadgen through HAProxy: {p['ok']} publishes, {dl['deliveries']} deliveries, none lost")
EOF

# 3. both nodes served clients
total=0
for ((i = 0; i < CLUSTER_NODES; i++)); do
    var=CLUSTER_ADMIN_$i
    n=$(curl -fsS -m 5 -H "Authorization: Bearer $CLUSTER_API_KEY" "http://${!var}/metrics" |
        awk '$1 == "herald_accepted_total" { print $2 }')
    [ -n "$n" ] && [ "$n" -gt 0 ] || fail "node $i accepted no client through HAProxy (${n:-no metric})"
    total=$((total + n))
done
[ "$total" -eq 50 ] || fail "the nodes accepted $total clients, want 50"
echo "ok 3 HAProxy spread the 50 clients over both nodes"

# 4. Prometheus scrapes the nodes and evaluates the alert rules
await_prometheus "/api/v1/targets?state=active" \
    'sum(t["health"] == "up" for t in d["activeTargets"] if t["labels"]["job"] == "herald") == 2' \
    "both herald targets up"
await_prometheus "/api/v1/rules" \
    'len([r for g in d["groups"] for r in g["rules"]]) > 0 and all(r["health"] == "ok" for g in d["groups"] for r in g["rules"])' \
    "every alert rule evaluated with health ok"
echo "ok 4 Prometheus scrapes both nodes (Bearer key) and evaluates every alert rule"

# 5. down, and nothing left behind
rc=0
"$script" down --run-dir "$run_dir" >"$work/down.txt" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { cat "$work/down.txt" >&2; fail "down exited $rc"; }
is_up=false
grep -q 'stopped 5 process(es)' "$work/down.txt" || { cat "$work/down.txt" >&2; fail "down did not stop 5 processes"; }
for name in "${!pids[@]}"; do
    now=$(start_time "${pids[$name]}" || true)
    [ "$now" != "${starts[$name]}" ] || fail "$name (pid ${pids[$name]}) still runs after down"
done
left=$(python3 - "$run_dir" <<'EOF'
import os, sys
me = {os.getpid(), os.getppid()}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        continue
    if int(pid) not in me and sys.argv[1] in cmd:
        print(pid, cmd)
EOF
)
[ -z "$left" ] || fail "processes naming the run directory are left: $left"
rc=0
"$script" status --run-dir "$run_dir" >/dev/null 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "status exits 0 after down"
echo "ok 5 down: every recorded process gone, none left naming the run directory"

#!/usr/bin/env bash
# test_compose_stack: deploy/compose.yaml started with Debian's podman-compose, for the
# services whose images can be made here: Redis (Debian's redis-server package, through
# deploy/compose.debian.yaml) and the two herald nodes (deploy/Dockerfile). ctest label
# container.
#
#   1. podman-compose up -d redis herald-1 herald-2, with compose.yaml, compose.debian.yaml
#      and a third file this test writes (below), builds both images and starts the three
#      containers; both nodes become healthy (their HEALTHCHECK, /readyz: which includes
#      the Redis engine's link) and report engine=redis.
#   2. A broadcast through one node reaches the clients of both: six clients
#      (herald_probe.py), three connected to each node (ConnectOk names herald-1 or
#      herald-2), subscribe to one channel; 20 messages published through herald-1's admin
#      API arrive at all six, in order, offsets 1..20 with no gap or duplicate.
#   3. herald-loadgen with its 50 clients on herald-2, publishing through herald-1's admin
#      API (--publish-via http): every publish delivered to all 50, nothing lost.
#   4. podman-compose down -t 40 (podman-compose 1.0.3 ignores stop_grace_period: without -t
#      it stops each container with a 1 s timeout, then SIGKILL) drains each node: a client
#      on each is told Disconnect{SHUTDOWN, reconnect}; down exits 0 and leaves nothing
#      running, no container of the project. (It leaves the project's network; the test
#      says so, and its cleanup removes it.)
#
# The third compose file holds what only this machine and this test need: images named
# from the test's id, the secrets as files in the test's folder, each node's ports 7400 and
# 7401 published on 127.0.0.1 (ports the kernel picks), and descriptor and process limits
# within this machine's hard limits (container_lib.sh says why compose.yaml's 1048576 cannot
# be set here). podman-compose gets --podman-args for runc and cgroupfs and builds with
# --isolation=chroot --format docker, as test_container.sh does.
#
# Every wait is bounded and awaits a condition. Everything is named from one id
# (container_lib.sh) and removed on exit, failure included.
# Usage: test_compose_stack.sh SOURCE_DIR LOADGEN PROTO_PY_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
loadgen=$2
ct_pydir=$3
ct_probe_py=$src/tests/deploy/herald_probe.py
work=$(mktemp -d "${TMPDIR:-/tmp}/test_compose_stack.XXXXXX")
# shellcheck source=tests/deploy/container_lib.sh
. "$src/tests/deploy/container_lib.sh"
trap ct_cleanup EXIT
project=$ct_id
nodes=(herald-1 herald-2)
is_up=false

compose() {
    timeout 600 podman-compose --podman-args "--runtime runc --cgroup-manager cgroupfs" \
        --podman-build-args "--isolation=chroot --format docker" -p "$project" \
        -f "$src/deploy/compose.yaml" -f "$src/deploy/compose.debian.yaml" \
        -f "$work/compose.test.yaml" "$@"
}

ct_on_fail() {
    local c
    for c in $(ct_list containers "$ct_id"); do
        echo "--- podman logs $c (last 15 lines)" >&2
        pm logs "$c" 2>&1 | tail -n 15 >&2
    done
    [ -s "$work/probe.out" ] && { echo "--- probe" >&2; cat "$work/probe.out" >&2; }
    if $is_up; then compose down -t 5 >/dev/null 2>&1 || true; fi
    return 0
}

command -v podman-compose >/dev/null || ct_fail "podman-compose missing: run scripts/install-deps.sh"
t_all=$(ct_now)
ct_prepare "$src"

# The test's own compose file.
install -d -m 0700 "$work/secrets"
openssl rand -hex 32 >"$work/secrets/token_secret"
openssl rand -hex 24 >"$work/secrets/admin_api_key"
openssl rand -hex 16 >"$work/secrets/grafana_admin_password"
chmod 0644 "$work/secrets"/*
api_key=$(cat "$work/secrets/admin_api_key")
cat >"$work/compose.test.yaml" <<EOF
x-limits: &limits
  nofile: {soft: 20000, hard: 20000}
  nproc: {soft: 32768, hard: 32768}
services:
  redis:
    image: localhost/$ct_id-redis:test
    ulimits: *limits
  herald-1:
    image: localhost/$ct_id-herald:test
    ulimits: *limits
    ports: ["127.0.0.1::7400", "127.0.0.1::7401"]
  herald-2:
    image: localhost/$ct_id-herald:test
    ulimits: *limits
    ports: ["127.0.0.1::7400", "127.0.0.1::7401"]
secrets:
  herald_token_secret: {file: $work/secrets/token_secret}
  herald_admin_api_key: {file: $work/secrets/admin_api_key}
  grafana_admin_password: {file: $work/secrets/grafana_admin_password}
EOF

# 1. up
t_up=$(ct_now)
is_up=true
compose up -d redis herald-1 herald-2 >"$work/up.log" 2>&1 ||
    { tail -n 40 "$work/up.log" >&2; ct_fail "podman-compose up exited non-zero"; }
up_s=$(ct_since "$t_up")
running=$(pm ps --filter "label=io.podman.compose.project=$project" --format '{{.Names}}' | sort | tr '\n' ' ')
[ "$running" = "${project}_herald-1_1 ${project}_herald-2_1 ${project}_redis_1 " ] ||
    ct_fail "running after up: '$running', want redis, herald-1 and herald-2"
ct_await_health "${project}_redis_1" 0 30 || ct_fail "redis's healthcheck (compose.yaml: redis-cli ping) did not pass within 30 s"
declare -A port admin
for n in "${nodes[@]}"; do
    c=${project}_${n}_1
    ct_await_health "$c" 0 60 || ct_fail "$n did not become healthy (ready, Redis linked) within 60 s"
    pm logs "$c" >"$work/$n.log" 2>&1
    grep -q "ev=listening .*engine=redis node=$n" "$work/$n.log" ||
        ct_fail "$n did not start with the Redis engine and its node id"
    port[$n]=$(ct_port "$c" 7400)
    admin[$n]=$(ct_port "$c" 7401)
done
echo "ok 1 up in $up_s s (images built, base image ${ct_base_s} s): redis, herald-1 (127.0.0.1:${port[herald-1]}), herald-2 (127.0.0.1:${port[herald-2]}), both healthy on the Redis engine"

# 2. a broadcast through herald-1 reaches the clients of both nodes
n1=127.0.0.1:${port[herald-1]}
n2=127.0.0.1:${port[herald-2]}
ct_probe_start --secret-file "$work/secrets/token_secret" --channel news --pushes 20 \
    --timeout 60 "$n1" "$n1" "$n1" "$n2" "$n2" "$n2"
ct_probe_expect '^all_ready$' 20
for i in 0 1 2; do grep -q "^ready $i node=herald-1$" "$work/probe.out" || ct_fail "client $i is not on herald-1"; done
for i in 3 4 5; do grep -q "^ready $i node=herald-2$" "$work/probe.out" || ct_fail "client $i is not on herald-2"; done
for ((m = 1; m <= 20; m++)); do
    out=$(curl -fsS -m 5 -H "X-Api-Key: $api_key" -X POST --data-binary "message-$m" \
        "http://127.0.0.1:${admin[herald-1]}/api/publish?channel=news") ||
        ct_fail "POST /api/publish to herald-1 failed"
    [[ $out == *"\"offset\":$m,"* ]] || ct_fail "publish $m answered $out"
done
ct_probe_expect '^done$' 20
ct_probe_wait || ct_fail "the probe exited non-zero"
for i in 0 1 2 3 4 5; do
    got=$(awk -v i="$i" '$1 == "push" && $2 == i { printf "%s:%s ", $3, $4 }' "$work/probe.out")
    want=$(for ((m = 1; m <= 20; m++)); do printf '%d:message-%d ' "$m" "$m"; done)
    [ "$got" = "$want" ] || ct_fail "client $i received '$got'"
done
echo "ok 2 20 messages published through herald-1 reached all 6 clients, 3 on each node, in order"

# 3. loadgen: clients on herald-2, publishes through herald-1
rc=0
timeout 60 "$loadgen" --host 127.0.0.1 --port "${port[herald-2]}" \
    --secret "$(cat "$work/secrets/token_secret")" --idle 40 --active 10 --pattern broadcast \
    --idle-shared --total-rate 100 --duration 2 --ramp-timeout 10 --publish-via http \
    --admin-port "${admin[herald-1]}" --api-key "$api_key" --progress none --quiet \
    --json "$work/run.json" 2>"$work/loadgen.err" || rc=$?
[ "$rc" -eq 0 ] || { cat "$work/loadgen.err" >&2; ct_fail "herald-loadgen exited $rc"; }
python3 - "$work/run.json" <<'EOF' || ct_fail "loadgen results"
import json, sys
d = json.load(open(sys.argv[1]))
c, p, dl = d["clients"], d["publish"], d["delivery"]
assert c["total"] == 50 and c["ready_at_start"] == 50, c
assert p["scheduled"] == 200 and p["ok"] == p["sent"] > 0 and p["errors"] == 0, p
assert dl["expected"] == 50 * p["ok"] and dl["deliveries"] == dl["expected"], dl
assert dl["lost"] == 0 and dl["missing"] == 0 and dl["duplicates"] == 0, dl
assert not d["failed"], d
print(f"ok 3 loadgen, clients on herald-2, publishing through herald-1: {p['ok']} publishes, "
      f"{dl['deliveries']} deliveries, none lost")
EOF

# 4. down, each node draining its client first
ct_probe_start --secret-file "$work/secrets/token_secret" --channel news --until-closed \
    --timeout 90 "$n1" "$n2"
ct_probe_expect '^all_ready$' 20
t_down=$(ct_now)
compose down -t 40 >"$work/down.log" 2>&1 || { tail -n 20 "$work/down.log" >&2; ct_fail "podman-compose down exited non-zero"; }
is_up=false
down_s=$(ct_since "$t_down")
ct_probe_expect '^done$' 10
for i in 0 1; do
    grep -qx "disconnect $i SHUTDOWN reconnect=true" "$work/probe.out" ||
        ct_fail "client $i was not told Disconnect{SHUTDOWN, reconnect}"
done
ct_probe_wait || ct_fail "the probe exited non-zero"
left=$(pm ps -a --filter "label=io.podman.compose.project=$project" --format '{{.Names}}')
[ -z "$left" ] || ct_fail "containers left after down: $left"
left=$(ct_list containers "$ct_id")
[ -z "$left" ] || ct_fail "containers named from the test's id left after down: $left"
echo "ok 4 down -t 40 in $down_s s: each node drained (its client told SHUTDOWN), no container of the project left"
left=$(ct_list networks "$ct_id")
[ -z "$left" ] || echo "# podman-compose down left the network $left (the cleanup removes it)"
echo "# compose test: $(ct_since "$t_all") s in all"

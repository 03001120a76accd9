#!/usr/bin/env bash
# test_container: deploy/Dockerfile built and run with podman, as deploy/README.md section 10
# says. ctest label container.
#
#   1. The image builds (podman build --isolation=chroot --format docker; the base image
#      debian:12-slim is made first by deploy/make-base-image.sh if missing), and its config
#      says USER 10001:10001 and has the HEALTHCHECK.
#   2. It runs with the secrets as files (HERALD_*_FILE, bind-mounted read-only at
#      /run/secrets/ as compose does), both ports published on 127.0.0.1 only, and the
#      HEALTHCHECK command passes once the node is ready.
#   3. herald is PID 1 of the container (the entrypoint exec'd it) and runs as UID and GID
#      10001 (the host's /proc). Neither secret appears in any process's argv in the
#      container, in `podman inspect` of the container, in the image's inspect or history, or
#      in herald's log; the admin key took effect (/metrics: 401 without it, 200 with it).
#   4. herald-loadgen through the published client port: 40 idle + 10 active clients on one
#      broadcast channel, 100 publishes/s for 2 s: every client ready, every publish
#      delivered to all 50, nothing lost or duplicated; herald counted 50 accepted clients.
#   5. `podman stop` drains: two connected clients (herald_probe.py) are told
#      Disconnect{SHUTDOWN, reconnect} and closed, herald logs drain_end forced=false, and
#      the container exits 0 (not the 137 of SIGKILL at the stop timeout).
#   6. The HEALTHCHECK fails on a draining node: restarted (`podman start`) and healthy
#      again, with two clients, then SIGTERM (`podman kill --signal TERM`, which leaves the
#      container "running" to podman, as an orchestrator's probe sees it): the HEALTHCHECK
#      reports unhealthy while the container still runs, /readyz answers 503 and /healthz
#      200 inside it, the clients get Disconnect{SHUTDOWN}, and herald exits 0 by itself.
#
# Every wait is bounded and awaits a condition. The container and the image are named from
# one id (container_lib.sh) and removed on exit, failure included.
# Usage: test_container.sh SOURCE_DIR LOADGEN PROTO_PY_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
loadgen=$2
ct_pydir=$3
ct_probe_py=$src/tests/deploy/herald_probe.py
work=$(mktemp -d "${TMPDIR:-/tmp}/test_container.XXXXXX")
# shellcheck source=tests/deploy/container_lib.sh
. "$src/tests/deploy/container_lib.sh"
trap ct_cleanup EXIT
image=localhost/$ct_id-herald:test
name=$ct_id-node

ct_on_fail() {
    if pm container exists "$name" 2>/dev/null; then
        echo "--- podman logs $name (last 20 lines)" >&2
        pm logs "$name" 2>&1 | tail -n 20 >&2
    fi
    [ -s "$work/probe.out" ] && { echo "--- probe" >&2; cat "$work/probe.out" >&2; }
    return 0
}

# 1. build
t_all=$(ct_now)
ct_prepare "$src"
ct_build_image "$src" "$image"
config=$(pm image inspect --format '{{.Config.User}}|{{json .Config.Healthcheck}}' "$image")
[ "${config%%|*}" = 10001:10001 ] || ct_fail "image user is ${config%%|*}, want 10001:10001"
[[ ${config#*|} == *'/readyz'* ]] || ct_fail "image has no /readyz HEALTHCHECK: ${config#*|}"
base_note="base image present"
[ "$ct_base_s" = 0 ] || base_note="base image made in $ct_base_s s"
echo "ok 1 image built in $ct_build_s s ($base_note); USER 10001:10001, HEALTHCHECK on /readyz"

# 2. run, with file secrets
install -d -m 0700 "$work/secrets"
openssl rand -hex 32 >"$work/secrets/token_secret"
openssl rand -hex 24 >"$work/secrets/admin_api_key"
chmod 0644 "$work/secrets"/*
token_secret=$(cat "$work/secrets/token_secret")
api_key=$(cat "$work/secrets/admin_api_key")
t_run=$(ct_now)
pm run -d --name "$name" "${CT_ULIMITS[@]}" \
    -p 127.0.0.1::7400 -p 127.0.0.1::7401 \
    -v "$work/secrets/token_secret:/run/secrets/herald_token_secret:ro" \
    -v "$work/secrets/admin_api_key:/run/secrets/herald_admin_api_key:ro" \
    -e HERALD_TOKEN_SECRET_FILE=/run/secrets/herald_token_secret \
    -e HERALD_ADMIN_API_KEY_FILE=/run/secrets/herald_admin_api_key \
    "$image" >"$work/run.out" 2>"$work/run.err" ||
    { cat "$work/run.err" >&2; ct_fail "podman run failed"; }
ct_await_health "$name" 0 30 || ct_fail "the HEALTHCHECK did not pass within 30 s"
port=$(ct_port "$name" 7400)
admin_port=$(ct_port "$name" 7401)
for p in 7400 7401; do
    published=$(pm port "$name" "$p/tcp")
    [[ $published =~ ^127\.0\.0\.1:[0-9]+$ ]] || ct_fail "port $p is published as '$published', want 127.0.0.1 only"
done
echo "ok 2 running, healthy after $(ct_since "$t_run") s; clients on 127.0.0.1:$port, admin on 127.0.0.1:$admin_port"

# 3. identity, and where the secrets are not
pid=$(pm inspect --format '{{.State.Pid}}' "$name")
[ "$(cat "/proc/$pid/comm")" = herald ] || ct_fail "PID 1 of the container is $(cat "/proc/$pid/comm"), not herald"
uid=$(awk '$1 == "Uid:" { print $2, $3, $4, $5 }' "/proc/$pid/status")
gid=$(awk '$1 == "Gid:" { print $2, $3, $4, $5 }' "/proc/$pid/status")
[ "$uid" = "10001 10001 10001 10001" ] || ct_fail "herald runs with UIDs $uid, want 10001"
[ "$gid" = "10001 10001 10001 10001" ] || ct_fail "herald runs with GIDs $gid, want 10001"
pm top "$name" hpid args >"$work/top.txt"
tr '\0' ' ' <"/proc/$pid/cmdline" >"$work/argv.txt"
pm inspect "$name" >"$work/inspect.json"
pm image inspect "$image" >"$work/image.json"
pm history --no-trunc "$image" >"$work/history.txt"
pm logs "$name" >"$work/logs.txt" 2>&1
for f in top.txt argv.txt inspect.json image.json history.txt logs.txt; do
    for s in "$token_secret" "$api_key"; do
        if grep -qF -- "$s" "$work/$f"; then ct_fail "a secret appears in $f"; fi
    done
done
grep -q '"HERALD_TOKEN_SECRET_FILE=/run/secrets/herald_token_secret"' "$work/inspect.json" ||
    ct_fail "podman inspect does not show HERALD_TOKEN_SECRET_FILE"
code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$admin_port/metrics")
[ "$code" = 401 ] || ct_fail "/metrics without the key answered $code, want 401"
code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 -H "X-Api-Key: $api_key" "http://127.0.0.1:$admin_port/metrics")
[ "$code" = 200 ] || ct_fail "/metrics with the key answered $code, want 200"
echo "ok 3 herald is PID 1 as UID/GID 10001; no secret in argv, inspect, image, history or log; the admin key works"

# 4. loadgen through the published port
rc=0
timeout 60 "$loadgen" --host 127.0.0.1 --port "$port" --secret "$token_secret" --idle 40 \
    --active 10 --pattern broadcast --idle-shared --total-rate 100 --duration 2 \
    --ramp-timeout 10 --progress none --quiet --json "$work/run.json" 2>"$work/loadgen.err" || rc=$?
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
print(f"ok 4 loadgen through 127.0.0.1 into the container: {p['ok']} publishes, "
      f"{dl['deliveries']} deliveries, none lost")
EOF
accepted=$(curl -fsS -m 5 -H "X-Api-Key: $api_key" "http://127.0.0.1:$admin_port/metrics" |
    awk '$1 == "herald_accepted_total" { print $2 }')
[ "$accepted" = 50 ] || ct_fail "herald counted ${accepted:-no} accepted clients, want 50"

# 5. podman stop drains
ct_probe_start --secret-file "$work/secrets/token_secret" --channel news --until-closed \
    --timeout 60 "127.0.0.1:$port" "127.0.0.1:$port"
ct_probe_expect '^all_ready$' 15
t_stop=$(ct_now)
pm stop -t 40 "$name" >/dev/null 2>"$work/stop.err" || { cat "$work/stop.err" >&2; ct_fail "podman stop failed"; }
stop_s=$(ct_since "$t_stop")
ct_probe_expect '^done$' 10
for i in 0 1; do
    grep -qx "disconnect $i SHUTDOWN reconnect=true" "$work/probe.out" ||
        ct_fail "client $i was not told Disconnect{SHUTDOWN, reconnect}"
done
ct_probe_wait || ct_fail "the probe exited non-zero"
state=$(pm inspect --format '{{.State.Status}} {{.State.ExitCode}}' "$name")
[ "$state" = "exited 0" ] || ct_fail "after podman stop the container is '$state', want 'exited 0'"
# Into a file first: grep -q stops reading at its match, and podman logs' SIGPIPE would
# fail the pipeline (pipefail).
pm logs "$name" >"$work/logs.txt" 2>&1
grep -q 'ev=drain_begin signal=SIGTERM.* sessions=2' "$work/logs.txt" ||
    ct_fail "herald logged no drain_begin for SIGTERM with 2 sessions"
grep -q 'ev=drain_end .*forced=false sessions_left=0' "$work/logs.txt" ||
    ct_fail "herald's drain did not end cleanly"
for s in "$token_secret" "$api_key"; do
    if grep -qF -- "$s" "$work/logs.txt"; then ct_fail "a secret appears in herald's log"; fi
done
echo "ok 5 podman stop: both clients told Disconnect{SHUTDOWN, reconnect}, drained in $stop_s s, exit 0"

# 6. the HEALTHCHECK fails while the node drains
pm start "$name" >/dev/null 2>"$work/start.err" || { cat "$work/start.err" >&2; ct_fail "podman start failed"; }
ct_await_health "$name" 0 30 || ct_fail "the HEALTHCHECK did not pass within 30 s of podman start"
port=$(ct_port "$name" 7400)
ct_probe_start --secret-file "$work/secrets/token_secret" --channel news --until-closed \
    --timeout 60 "127.0.0.1:$port" "127.0.0.1:$port"
ct_probe_expect '^all_ready$' 15
pm kill --signal TERM "$name" >/dev/null
# herald tells the two clients (one per IO loop, or both on one) from 2.5 s into its 10 s
# window, and exits only once they have gone: the checks below run inside that time, and the
# container is checked to be running after them.
ct_await_health "$name" 1 5 || ct_fail "the HEALTHCHECK still passes 5 s after SIGTERM"
readyz=$(pm exec "$name" bash -c 'exec 3<>/dev/tcp/127.0.0.1/7401; printf "GET /readyz HTTP/1.0\r\n\r\n" >&3; head -n1 <&3' | tr -d '\r')
healthz=$(pm exec "$name" bash -c 'exec 3<>/dev/tcp/127.0.0.1/7401; printf "GET /healthz HTTP/1.0\r\n\r\n" >&3; head -n1 <&3' | tr -d '\r')
running=$(pm inspect --format '{{.State.Running}}' "$name")
[ "$running" = true ] || ct_fail "the container stopped before the checks ran: the unhealthy result proves nothing"
[[ $readyz == *" 503 "* ]] || ct_fail "/readyz during the drain: '$readyz', want 503"
[[ $healthz == *" 200 "* ]] || ct_fail "/healthz during the drain: '$healthz', want 200"
ct_probe_expect '^done$' 20
for i in 0 1; do
    grep -qx "disconnect $i SHUTDOWN reconnect=true" "$work/probe.out" ||
        ct_fail "client $i was not told Disconnect{SHUTDOWN, reconnect}"
done
ct_probe_wait || ct_fail "the probe exited non-zero"
rc=$(timeout 30 "${CT_PODMAN[@]}" wait "$name") || ct_fail "podman wait failed or timed out"
[ "$rc" = 0 ] || ct_fail "herald exited $rc after the drain, want 0"
echo "ok 6 draining node: HEALTHCHECK unhealthy, /readyz $readyz, /healthz 200; clients told SHUTDOWN; exit 0"
echo "# container test: $(ct_since "$t_all") s in all (build $ct_build_s s, base image ${ct_base_s} s)"

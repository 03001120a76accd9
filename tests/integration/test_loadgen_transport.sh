#!/usr/bin/env bash
# test_loadgen_transport: herald-loadgen --transport ws|tls|wss against a real herald, with a
# test CA this test makes (test_ca.sh: openssl, P-256).
#
#   1. ws: herald's WebSocket listener (--ws-listen), 50 idle + 10 active clients on one
#      broadcast channel, 100 publishes/s for 2 s over two loadgen threads: every publish
#      acknowledged and delivered to all 60 subscribers, no loss, no duplicate; the JSON names
#      the transport and the summary says "over ws".
#   2. ws with 30 KiB payloads at 25/s (frames in the 16-bit length form over several reads;
#      writes that the socket takes in part): every delivery made.
#   3. tls and wss: herald with --tls-cert/--tls-key (its TCP listener speaks TLS, its
#      WebSocket listener wss), loadgen verifying against --tls-ca: as 1, every delivery made;
#      herald counted the handshakes on both listeners.
#   4. tls and wss with 30 KiB payloads at 25/s, larger than a TLS record: every delivery made
#      (a write that stopped after one record once stalled herald's output).
#   5. a certificate loadgen does not trust (--tls-ca with another CA): no client connects,
#      exit status 3, every failed attempt counted as TLS_CERT_UNTRUSTED, a message on stderr
#      that says what to do, herald counted failed handshakes (tls_error); a name the
#      certificate does not carry (--tls-server-name): TLS_CERT_NAME_MISMATCH; --tls-insecure
#      connects to the same server all the same.
#   6. wss against the plain ws listener: TLS_HANDSHAKE_FAILED, with "does the server speak
#      TLS" on stderr; --tls-ca without a TLS transport: refused, exit status 2.
#
# herald runs on free loopback ports (port 0; the ev=listening line names them) and is stopped
# by PID. Usage: test_loadgen_transport.sh HERALD LOADGEN
set -euo pipefail
herald=$1
loadgen=$2
py=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/test_loadgen_transport.XXXXXX")
here=$(dirname "$0")
source "$here/lg_herald.sh"
source "$here/test_ca.sh"

cleanup() {
    reap_herald
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    if [ -f "$work/herald.log" ]; then
        echo "--- herald.log" >&2
        if grep -q 'Sanitizer' "$work/herald.log"; then
            sed -n '/^WARNING: \|^ERROR: \|runtime error/,$p' "$work/herald.log" | head -200 >&2
        else
            tail -20 "$work/herald.log" >&2
        fi
    fi
    [ -f "$work/run.err" ] && { echo "--- run.err" >&2; head -100 "$work/run.err" >&2; }
    [ -f "$work/run.txt" ] && { echo "--- run.txt" >&2; cat "$work/run.txt" >&2; }
    exit 1
}

check_json() { # file, python statements using d
    "$py" - "$1" "$2" <<'EOF' || fail "JSON check failed for $1"
import json, sys
d = json.load(open(sys.argv[1]))
try:
    exec(sys.argv[2], {"d": d})
except AssertionError as e:
    print("assertion failed:", e, file=sys.stderr)
    print(json.dumps(d, indent=1), file=sys.stderr)
    sys.exit(1)
EOF
}

# Runs a broadcast over transport t on port p at rate publishes/s (extra flags after) and
# checks that every publish reached every subscriber. 50 idle + 10 active for 2 s, two threads;
# the drain may take up to 20 s (a sanitizer build is slow), and ends when all has arrived.
broadcast() { # name transport port rate [flags...]
    local name=$1 t=$2 p=$3 rate=$4
    shift 4
    local rc=0
    "$loadgen" --transport "$t" --port "$p" --insecure --idle 50 --active 10 --idle-shared \
        --total-rate "$rate" --duration 2 --drain 20 --threads 2 --progress none \
        --json "$work/$name.json" "$@" >"$work/run.txt" 2>"$work/run.err" || rc=$?
    [ "$rc" -eq 0 ] || fail "$name: loadgen exited $rc"
    grep -q "^  target .* over $t," "$work/run.txt" || fail "$name: the summary does not say over $t"
    check_json "$work/$name.json" '
c, p, dl = d["clients"], d["publish"], d["delivery"]
assert d["config"]["transport"] == "'"$t"'", d["config"]
assert c["total"] == 60 and c["ready_at_start"] == 60, c
assert d["connect"]["failures"] == 0 and d["disconnects"]["total"] == 0, d["connect"]
assert d["errors"]["total"] == 0, d["errors"]
assert p["scheduled"] == 2 * '"$rate"' and p["sent"] + p["skipped"] == p["scheduled"], p
assert p["sent"] > 0, p
assert p["ok"] == p["sent"] and p["errors"] == 0 and p["unready"] == 0, p
assert dl["deliveries"] == p["ok"] * 60 == dl["expected"], dl
assert dl["expected_exact"] and dl["drained"], dl
assert dl["missing"] == 0 and dl["duplicates"] == 0 and dl["lost"] == 0, dl
assert dl["foreign"] == 0 and d["latency_ms"]["count"] == dl["deliveries"], dl
'
}

# A run that must fail to connect at all: exit status 3, every failure under reason.
refused() { # name reason transport port [flags...]
    local name=$1 reason=$2 t=$3 p=$4
    shift 4
    local rc=0
    "$loadgen" --transport "$t" --port "$p" --insecure --idle 3 --ramp-timeout 1 --progress none \
        --quiet --json "$work/$name.json" "$@" >"$work/run.txt" 2>"$work/run.err" || rc=$?
    [ "$rc" -eq 3 ] || fail "$name: loadgen exited $rc, want 3"
    check_json "$work/$name.json" '
why = d["connect"]["failures_by_reason"]
assert d["failed"] is True and d["connect"]["handshakes"] == 0, d["connect"]
assert d["connect"]["failures"] >= 3 and why == {"'"$reason"'": d["connect"]["failures"]}, why
'
}

make_test_ca "$work/ca" || fail "openssl could not make the test CA"
ca=$work/ca

# 1, 2. WebSocket.
start_herald --insecure --ws-listen 127.0.0.1:0
[ -n "$ws_port" ] || fail "herald did not print ws_port=N"
broadcast ws ws "$ws_port" 100
echo "ok 1 ws: 200 publishes x 60 subscribers, every delivery made"
broadcast ws_big ws "$ws_port" 25 --size 30k
echo "ok 2 ws with 30 KiB payloads: every delivery made"
plain_ws_port=$ws_port
refused wss_on_ws TLS_HANDSHAKE_FAILED wss "$plain_ws_port" --tls-insecure
grep -q 'does the server speak TLS on this port' "$work/run.err" ||
    fail "no hint that the port does not speak TLS"
stop_herald
echo "ok 6 wss on a plain ws port: TLS_HANDSHAKE_FAILED with a hint"

# 3, 4, 5. TLS and wss.
api_key="loadgen-transport-test-key-0123"
start_herald --insecure --api-key "$api_key" --ws-listen 127.0.0.1:0 \
    --tls-cert "$ca/server.pem" --tls-key "$ca/server.key"
grep -q 'ev=listening .*tls=on' "$work/herald.log" || fail "herald did not say tls=on"
broadcast tls tls "$port" 100 --tls-ca "$ca/ca.pem"
broadcast wss wss "$ws_port" 100 --tls-ca "$ca/ca.pem"
metrics=$(curl -sf -H "X-Api-Key: $api_key" "http://127.0.0.1:$admin_port/metrics") ||
    fail "no /metrics"
for l in tcp ws; do
    n=$(awk -v l="$l" '$1 == "herald_transport_handshakes_total{listener=\"" l "\"}" { print $2 }' \
        <<<"$metrics")
    [ "${n:-0}" -ge 60 ] || fail "herald counted ${n:-no} handshakes on its $l listener, want >= 60"
done
echo "ok 3 tls and wss, verified against the test CA: every delivery made"
broadcast tls_big tls "$port" 25 --tls-ca "$ca/ca.pem" --size 30k
broadcast wss_big wss "$ws_port" 25 --tls-ca "$ca/ca.pem" --size 30k
echo "ok 4 tls and wss with 30 KiB payloads (over a TLS record): every delivery made"

refused untrusted TLS_CERT_UNTRUSTED tls "$port" --tls-ca "$ca/rogue.pem"
grep -q "the server's certificate failed verification: .*give --tls-ca FILE" "$work/run.err" ||
    fail "no message saying the certificate is not trusted and what to do"
refused untrusted_wss TLS_CERT_UNTRUSTED wss "$ws_port" --tls-ca "$ca/rogue.pem"
refused wrong_name TLS_CERT_NAME_MISMATCH tls "$port" --tls-ca "$ca/ca.pem" \
    --tls-server-name not-herald.example
metrics=$(curl -sf -H "X-Api-Key: $api_key" "http://127.0.0.1:$admin_port/metrics") ||
    fail "no /metrics"
n=$(awk '$1 == "herald_transport_handshake_failures_total{listener=\"tcp\",reason=\"tls_error\"}" { print $2 }' <<<"$metrics")
[ "${n:-0}" -ge 3 ] || fail "herald counted ${n:-no} failed TLS handshakes, want >= 3"
rc=0
"$loadgen" --transport tls --port "$port" --insecure --tls-insecure --idle 3 --active 1 \
    --duration 1 --progress none --quiet --json "$work/insecure.json" 2>"$work/run.err" || rc=$?
[ "$rc" -eq 0 ] || fail "--tls-insecure run exited $rc"
check_json "$work/insecure.json" '
assert d["connect"]["failures"] == 0 and d["clients"]["ready_at_start"] == 4, d["connect"]
'
stop_herald
echo "ok 5 an untrusted certificate fails every connect (TLS_CERT_UNTRUSTED, exit 3), so does a" \
    "wrong name (TLS_CERT_NAME_MISMATCH); --tls-insecure connects"

rc=0
"$loadgen" --transport tcp --tls-ca "$ca/ca.pem" --insecure --idle 1 2>"$work/run.err" || rc=$?
[ "$rc" -eq 2 ] || fail "--tls-ca with --transport tcp exited $rc, want 2"
grep -q -- '--tls-ca, --tls-server-name and --tls-insecure go with --transport tls or wss' \
    "$work/run.err" || fail "no message for --tls-ca without TLS"
echo "ok 7 --tls-ca without a TLS transport: refused, exit status 2"

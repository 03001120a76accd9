#!/usr/bin/env bash
# test_loadgen: herald-loadgen against a real herald for a few seconds with a small fleet.
#
#   1. 50 idle + 10 active clients, all on one broadcast channel, 100 publishes/s in total for
#      3 s: exactly 300 publishes, each delivered to all 60 subscribers (18,000 deliveries), no
#      loss, no duplicate, ordered and plausible percentiles, JSON that parses, exit status 0;
#      every delivery has a kernel arrival stamp, and arrival comes no later than processing;
#      the --report page's intervals add up to the same totals and latency samples.
#   2. per-user pattern for 1 s: every publish reaches exactly one client.
#   3. --max-p99 0.001ms, --max-arrival-p99 0.001ms and --max-loss 0: the SLO checks trip,
#      exit status 1.
#   4. --publish-via http (POST /api/publish with the API key): the same exact counts.
#   5. herald stopped: the same port refuses; exit status 3 with ECONNREFUSED counted.
#   6. a non-loopback --host is refused before anything is sent: exit status 2.
#   7. herald checking tokens: loadgen's signed tokens pass with the right --secret; with a
#      wrong one every handshake is refused (UNAUTHORIZED) and the run fails with status 3.
#   8. herald stopped in the middle of the measured phase: the run ends long before its
#      --duration with status 3, failed in the JSON, every client's disconnect counted.
#   9. loadgen speaks only the wire protocol: none of the gateway's libraries (hiredis,
#      libmicrohttpd, jansson, inih) is among its shared-library dependencies.
#  10. progress: on a terminal (a pty from script(1)) one live line, redrawn in place with a
#      carriage return at most 4 times a second, with the time left, never wider than the
#      terminal; with stderr a file the default (auto) keeps the plain per-second lines and
#      writes no carriage return.
#  11. one active client publishing 400/s against herald's default per-connection limit
#      (100/s after a burst of 200): a warning before the run names the limit and the way
#      out, publishes past the burst are answered RATE_LIMITED, and the summary says why.
#
# herald runs on free loopback ports (port 0; the ev=listening line names them)
# and is stopped by PID. Usage: test_loadgen.sh HERALD LOADGEN
set -euo pipefail
herald=$1
loadgen=$2
py=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/test_loadgen.XXXXXX")
source "$(dirname "$0")/lg_herald.sh"

cleanup() {
    reap_herald
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    # A sanitizer report is long: show all of loadgen's stderr, and herald's report if it made
    # one (from its first line), else the end of its log.
    if [ -f "$work/herald.log" ]; then
        echo "--- herald.log" >&2
        if grep -q 'Sanitizer' "$work/herald.log"; then
            sed -n '/^WARNING: \|^ERROR: \|runtime error/,$p' "$work/herald.log" | head -200 >&2
        else
            tail -20 "$work/herald.log" >&2
        fi
    fi
    [ -f "$work/run.err" ] && { echo "--- run.err" >&2; head -300 "$work/run.err" >&2; }
    exit 1
}

# 9 (first: it needs no herald). The tokens are loadgen's own (lg_token.c), not the gateway's.
needed=$(readelf -d "$loadgen" | grep NEEDED) || fail "readelf found no NEEDED entries"
grep -q 'libcrypto' <<<"$needed" || fail "herald-loadgen does not link libcrypto: $needed"
if grep -E 'hiredis|microhttpd|jansson|inih' <<<"$needed" >&2; then
    fail "herald-loadgen links a gateway library (above)"
fi
echo "ok 9 herald-loadgen links no gateway library"

api_key="loadgen-test-api-key-0123456789"
start_herald --insecure --api-key "$api_key"
echo "herald pid $pid on 127.0.0.1:$port"

# Checks a JSON result with Python assertions; prints the first broken one.
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

# 1. Exact broadcast counts.
rc=0
"$loadgen" --port "$port" --insecure --idle 50 --active 10 --idle-shared --pattern broadcast \
    --total-rate 100 --duration 3 --threads 2 --progress plain --json "$work/run.json" \
    --report "$work/run.html" >"$work/run.txt" 2>"$work/run.err" || rc=$?
[ "$rc" -eq 0 ] || fail "broadcast run exited $rc"
grep -q '^herald-loadgen summary' "$work/run.txt" || fail "no summary table on stdout"
[ "$(grep -c '^\[' "$work/run.err")" -ge 2 ] || fail "fewer than 2 progress lines"
check_json "$work/run.json" '
c, p, dl, lat = d["clients"], d["publish"], d["delivery"], d["latency_ms"]
assert c["total"] == 60 and c["ready_at_start"] == 60, c
assert d["connect"]["failures"] == 0, d["connect"]
assert d["disconnects"]["total"] == 0, d["disconnects"]
assert d["errors"]["total"] == 0, d["errors"]
# A loop stalled for over a second skips publishes (counted): the sum stays exact.
assert p["scheduled"] == 300 and p["sent"] + p["skipped"] == 300, p
assert p["ok"] == p["sent"] and p["errors"] == 0 and p["unready"] == 0, p
assert dl["deliveries"] == p["ok"] * 60 and dl["expected"] == p["ok"] * 60, dl
assert dl["expected_exact"] and dl["drained"], dl
assert dl["missing"] == 0 and dl["duplicates"] == 0 and dl["lost"] == 0, dl
assert dl["loss_pct"] == 0 and dl["foreign"] == 0, dl
assert lat["count"] == dl["deliveries"], lat
assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"] <= lat["max"] < 1000, lat
arr = d["latency_arrival_ms"]
assert arr["count"] == dl["deliveries"], arr
assert 0 < arr["min"] <= arr["p50"] <= arr["p90"] <= arr["p99"] <= arr["p999"] <= arr["max"], arr
# Each Push arrives before it is processed; the quantiles (bucket midpoints) keep that order.
for q in ("min", "p50", "p90", "p99", "p999", "max"):
    assert arr[q] <= lat[q], (q, arr, lat)
assert d["slo"]["max_arrival_p99_ms"] is None, d["slo"]
assert d["slo"]["ok"] and not d["failed"] and not d["interrupted"], d["slo"]
'
# The --report page (its rendering is test_loadgen_report's): its intervals add up to the
# totals, and the latency slices that two loop threads hand over hold every sample.
"$py" - "$work/run.html" "$work/run.json" <<'EOF' || fail "the --report page does not match the run"
import json, re, sys
page, d = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
def series(name):
    return [(m.group(1), float(m.group(2))) for m in re.finditer(
        r'data-series="%s" data-phase="(\w+)"[^>]* data-value="([0-9.]+)"' % name, page)]
dl = series("deliveries")
assert sum(v for _, v in dl) == d["delivery"]["deliveries"], dl
assert sum(v for _, v in series("publishes")) == d["publish"]["sent"], series("publishes")
assert [p for p, _ in dl].count("measure") == 3, dl
counts = [int(c) for c in re.findall(r'data-series="p99"[^>]* data-count="(\d+)"', page)]
assert sum(counts) == d["latency_ms"]["count"], (counts, d["latency_ms"])
m = re.search(r'data-chart="latency-histogram"[^>]* data-count="(\d+)"[^>]* data-p99-ms="([0-9.]+)"', page)
assert m and int(m.group(1)) == d["latency_ms"]["count"], m
assert abs(float(m.group(2)) - d["latency_ms"]["p99"]) < 1e-6, (m.group(2), d["latency_ms"])
EOF
echo "ok 1 broadcast: 300 publishes x 60 subscribers, every delivery made, no loss"

# 2. per-user: one recipient per publish.
rc=0
"$loadgen" --port "$port" --insecure --idle 20 --active 5 --pattern per-user --total-rate 50 \
    --duration 1 --progress none --quiet --json "$work/user.json" 2>"$work/run.err" || rc=$?
[ "$rc" -eq 0 ] || fail "per-user run exited $rc"
check_json "$work/user.json" '
p, dl = d["publish"], d["delivery"]
assert p["scheduled"] == 50 and p["ok"] + p["skipped"] == 50 and p["ok"] == p["sent"], p
assert dl["deliveries"] == p["ok"] and dl["expected"] == p["ok"] and dl["lost"] == 0, dl
assert dl["missing"] == 0 and dl["duplicates"] == 0, dl
'
echo "ok 2 per-user: one delivery per publish"

# 3. Thresholds below what any run measures trip the exit status.
rc=0
"$loadgen" --port "$port" --insecure --idle 10 --active 5 --idle-shared --total-rate 50 \
    --duration 1 --progress none --quiet --max-p99 0.001ms --max-arrival-p99 0.001ms \
    --max-loss 0 --json "$work/slo.json" 2>"$work/run.err" || rc=$?
[ "$rc" -eq 1 ] || fail "SLO run exited $rc, want 1"
grep -q 'SLO broken: p99 latency' "$work/run.err" || fail "no 'SLO broken' line"
grep -q 'SLO broken: p99 arrival latency .* > --max-arrival-p99 0.001 ms' "$work/run.err" ||
    fail "no 'SLO broken' line for --max-arrival-p99"
check_json "$work/slo.json" '
assert d["slo"]["ok"] is False and d["slo"]["max_p99_ms"] == 0.001, d["slo"]
assert d["slo"]["max_arrival_p99_ms"] == 0.001, d["slo"]
assert d["delivery"]["lost"] == 0 and d["latency_ms"]["p99"] > 0.001, d["delivery"]
'
echo "ok 3 --max-p99 0.001ms, --max-arrival-p99 0.001ms: exit status 1"

# 4. --publish-via http: the same exact counts through POST /api/publish.
rc=0
"$loadgen" --port "$port" --insecure --publish-via http --admin-port "$admin_port" \
    --api-key "$api_key" --idle 20 --active 4 --idle-shared --total-rate 50 --duration 1 \
    --progress none --quiet --json "$work/http.json" 2>"$work/run.err" || rc=$?
[ "$rc" -eq 0 ] || fail "http run exited $rc"
check_json "$work/http.json" '
p, dl = d["publish"], d["delivery"]
assert d["config"]["publish_via"] == "http", d["config"]
assert p["scheduled"] == 50 and p["sent"] + p["skipped"] == 50 and p["ok"] == p["sent"], p
assert dl["deliveries"] == p["ok"] * 24 and dl["expected"] == dl["deliveries"] > 0, dl
assert dl["lost"] == 0 and dl["missing"] == 0 and dl["duplicates"] == 0, dl
'
echo "ok 4 --publish-via http: every delivery made"

# 11. Faster than herald's default publish limit lets one connection: said, not silent.
rc=0
"$loadgen" --port "$port" --insecure --active 1 --rate 400 --duration 1 --progress none \
    --json "$work/limited.json" >"$work/limited.txt" 2>"$work/run.err" || rc=$?
[ "$rc" -eq 0 ] || fail "rate-limited run exited $rc"
grep -q 'warning: 400 publishes/s per active client is above herald.s default per-connection limit (100/s after a burst of 200' \
    "$work/run.err" || fail "no warning about the publish limit before the run"
grep -q 'publishes were refused RATE_LIMITED: herald.s per-connection publish limit' \
    "$work/limited.txt" || fail "the summary does not say why publishes failed"
check_json "$work/limited.json" '
p, e = d["publish"], d["errors"]["by_code"]
# The bucket lets the first 200 through at once, then 100 a second: at most about 300 of 400.
assert 200 <= p["ok"] <= 320 and p["errors"] == e.get("RATE_LIMITED", 0) > 0, (p, e)
'
echo "ok 11 400 publishes/s on one connection: warned, RATE_LIMITED counted and explained"

# 5. Nothing listens any more: every connect is refused, the run fails with status 3.
stop_herald
rc=0
"$loadgen" --port "$port" --insecure --idle 5 --ramp-timeout 1 --progress none --quiet \
    --json "$work/dead.json" 2>"$work/run.err" || rc=$?
[ "$rc" -eq 3 ] || fail "run against a stopped herald exited $rc, want 3"
check_json "$work/dead.json" '
assert d["failed"] is True and d["clients"]["ready_at_start"] == 0, d
assert d["connect"]["failures_by_reason"].get("ECONNREFUSED", 0) >= 5, d["connect"]
'
echo "ok 5 stopped herald: exit status 3, ECONNREFUSED counted"

# 6. Only loopback targets.
rc=0
"$loadgen" --host 192.0.2.1 --insecure --idle 1 --progress none 2>"$work/run.err" || rc=$?
[ "$rc" -eq 2 ] || fail "non-loopback host exited $rc, want 2"
grep -q 'not a loopback address' "$work/run.err" || fail "no loopback refusal message"
echo "ok 6 non-loopback --host refused: exit status 2"

# 7. Signed tokens against a herald that verifies them.
secret="loadgen-test-secret-0123456789"
start_herald --secret "$secret"
rc=0
"$loadgen" --port "$port" --secret "$secret" --idle 5 --active 2 --total-rate 20 --duration 1 \
    --progress none --quiet --json "$work/signed.json" 2>"$work/run.err" || rc=$?
[ "$rc" -eq 0 ] || fail "signed-token run exited $rc"
check_json "$work/signed.json" '
assert d["clients"]["ready_at_start"] == 7 and d["connect"]["failures"] == 0, d["connect"]
assert d["delivery"]["deliveries"] == d["publish"]["ok"] * 2 > 0, d["delivery"]
'
rc=0
"$loadgen" --port "$port" --secret wrong-secret-0123456789 --idle 3 --ramp-timeout 1 \
    --progress none --quiet --json "$work/bad.json" 2>"$work/run.err" || rc=$?
[ "$rc" -eq 3 ] || fail "wrong-secret run exited $rc, want 3"
check_json "$work/bad.json" '
why = d["connect"]["failures_by_reason"]
assert d["connect"]["handshakes"] == 0 and why.get("UNAUTHORIZED", 0) >= 3, d["connect"]
assert sum(why.values()) == d["connect"]["failures"], d["connect"]
'
stop_herald
echo "ok 7 signed tokens accepted; a wrong secret is refused (UNAUTHORIZED), exit status 3"

# 8. herald goes away mid-run. loadgen's stderr comes through a FIFO: herald is stopped once the
#    "ramp:" note says the measured phase began, and loadgen must then end within 20 s (its
#    --duration is 60 s) with status 3.
start_herald --insecure
rm -f "$work/lg.fifo"
mkfifo "$work/lg.fifo"
"$loadgen" --port "$port" --insecure --idle 4 --active 2 --total-rate 20 --duration 60 \
    --ramp-timeout 1 --progress plain --quiet --json "$work/lost.json" 2>"$work/lg.fifo" &
lg_pid=$!
exec 4<"$work/lg.fifo"
is_measuring=false
while IFS= read -r -t 20 line <&4; do
    echo "$line" >>"$work/run.err"
    if [[ $line == ramp:* ]]; then
        is_measuring=true
        break
    fi
done
$is_measuring || { kill "$lg_pid"; fail "loadgen did not reach its measured phase"; }
lost_at=$SECONDS
stop_herald
# Progress lines come every second, so the read's own timeout never ends this loop: the clock does.
while [ $((SECONDS - lost_at)) -lt 20 ] && IFS= read -r -t 5 line <&4; do
    echo "$line" >>"$work/run.err"
done
exec 4<&-
# The FIFO's end of file is loadgen's exit; the loop ending on the clock means it is still up.
if [ $((SECONDS - lost_at)) -ge 20 ]; then
    kill -KILL "$lg_pid"
    fail "loadgen still running 20 s after herald stopped"
fi
rc=0
wait "$lg_pid" || rc=$?
[ "$rc" -eq 3 ] || fail "run whose herald went away exited $rc, want 3"
grep -q 'every client lost' "$work/run.err" || fail "no note saying every client was lost"
check_json "$work/lost.json" '
assert d["failed"] is True and d["clients"]["ready_at_start"] == 6, d["clients"]
assert d["disconnects"]["total"] >= 6, d["disconnects"]
'
echo "ok 8 herald gone mid-run: loadgen fails (status 3) without waiting out --duration"

# 10. The live progress line on a terminal, and the plain lines when stderr is a file.
start_herald --insecure
rc=0
# An 80-column terminal: the live line must be cut to 79 columns so that it never wraps.
# A connect rate that makes the ramp last about a second, so that it is drawn too.
script -qefc "stty cols 80 && $(printf '%q ' "$loadgen" --port "$port" --insecure --idle 20 \
    --active 4 --connect-rate 20 --total-rate 40 --duration 2 --quiet)" "$work/tty.out" \
    >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { cat "$work/tty.out" >&2; fail "run on a pty exited $rc"; }
tr '\r' '\n' <"$work/tty.out" >"$work/tty.lines"
measure_draws=$(grep -c '^measure .* left |' "$work/tty.lines" || true)
# 2 s at most every 250 ms: at most 9 draws, plus one after a note; a stalled machine may skip
# some, never most.
[ "$measure_draws" -ge 4 ] && [ "$measure_draws" -le 10 ] ||
    { cat -A "$work/tty.out" >&2; fail "$measure_draws live measure lines for 2 s, want 4..10"; }
grep -q '^ramp .*timeout in' "$work/tty.lines" || fail "no live ramp line with the time left"
grep -q '^\[' "$work/tty.lines" && fail "plain progress lines on a terminal"
longest=$(grep -E '^(ramp|measure|drain) ' "$work/tty.lines" | sed 's/\x1b\[K//g' |
    awk '{ if (length($0) > n) n = length($0) } END { print n + 0 }')
[ "$longest" -ge 60 ] && [ "$longest" -le 79 ] ||
    fail "the longest live line has $longest columns: it must fill but fit 80"

rc=0
"$loadgen" --port "$port" --insecure --idle 20 --active 4 --total-rate 40 --duration 2 --quiet \
    2>"$work/run.err" || rc=$?
[ "$rc" -eq 0 ] || fail "run with stderr to a file exited $rc"
grep -q $'\r' "$work/run.err" && fail "carriage returns in progress written to a file"
[ "$(grep -c '^\[' "$work/run.err")" -ge 2 ] || fail "fewer than 2 plain progress lines in a file"
stop_herald
echo "ok 10 progress: a live line on a terminal ($measure_draws redraws in 2 s), plain lines in a file"

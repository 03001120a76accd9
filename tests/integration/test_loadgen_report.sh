#!/usr/bin/env bash
# test_loadgen_report: herald-loadgen's --report page, rendered in a real browser.
#
#   A short real run (50 idle + 10 active clients on one broadcast channel, 100 publishes/s
#   for 3 s) against a real herald writes the summary, the --json document and the --report
#   page. tests/browser/check_loadgen_report.js then opens the page in Debian's headless
#   Chromium (puppeteer-core) and checks that its charts hold the run's numbers: deliveries,
#   publishes and connects add up to loadgen's totals, the histogram's count and p99 are the
#   summary's, there is one point per measured second; that the page is self-contained and
#   logs no error. The page and a full-page screenshot stay in ARTIFACTS
#   (loadgen_report.html, loadgen_report.png) for a person to look at.
#
# Needs node and tests/browser/node_modules (scripts/install-deps.sh runs npm ci there) and
# /usr/bin/chromium. herald runs on free loopback ports and is stopped by PID.
# Usage: test_loadgen_report.sh HERALD LOADGEN BROWSER_DIR ARTIFACTS
set -euo pipefail
herald=$1
loadgen=$2
browser_dir=$3
artifacts=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/test_loadgen_report.XXXXXX")
source "$(dirname "$0")/lg_herald.sh"

cleanup() {
    reap_herald
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    [ -f "$work/herald.log" ] && { echo "--- herald.log" >&2; tail -40 "$work/herald.log" >&2; }
    [ -f "$work/run.err" ] && { echo "--- run.err" >&2; head -200 "$work/run.err" >&2; }
    exit 1
}

command -v node >/dev/null || fail "no node on PATH: run scripts/install-deps.sh"
[ -d "$browser_dir/node_modules/puppeteer-core" ] ||
    fail "$browser_dir/node_modules is missing: run scripts/install-deps.sh (npm ci there)"

start_herald --insecure
duration=3
rc=0
"$loadgen" --port "$port" --insecure --idle 50 --active 10 --idle-shared --pattern broadcast \
    --total-rate 100 --duration "$duration" --threads 2 --progress none \
    --json "$work/run.json" --report "$work/report.html" >"$work/run.txt" 2>"$work/run.err" ||
    rc=$?
[ "$rc" -eq 0 ] || fail "loadgen exited $rc"
stop_herald
grep -q "report written to $work/report.html" "$work/run.err" || fail "no 'report written' line"
[ ! -e "$work/report.html.tmp" ] || fail "the temporary report file was left behind"

mkdir -p "$artifacts"
cp "$work/report.html" "$artifacts/loadgen_report.html"
rm -f "$artifacts/loadgen_report.png"
node "$browser_dir/check_loadgen_report.js" --report "$artifacts/loadgen_report.html" \
    --summary "$work/run.txt" --json "$work/run.json" --duration "$duration" \
    --screenshot "$artifacts/loadgen_report.png" || fail "the rendered report does not match the run"
echo "artifacts: $artifacts/loadgen_report.html $artifacts/loadgen_report.png"

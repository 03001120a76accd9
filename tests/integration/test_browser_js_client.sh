#!/usr/bin/env bash
# test_browser_js_client: clients/js in Debian's headless Chromium over ws:// and wss://
# against real herald nodes (issue 23's browser test; tests/browser/check_js_client.js says
# what it checks: subscribe with recovery on a history channel, pushes from the admin API, a
# SIGTERM drain with Disconnect{SHUTDOWN}, recovery with no gap on the node restarted on the
# same ports).
#
# The wss:// half needs the browser to trust herald's certificate for real: this script makes
# a test CA (test_ca.sh) and a fresh HOME whose NSS database (~/.pki/nssdb, where Chromium on
# Linux takes certificate trust from) trusts it as a CA, with certutil (Debian's
# libnss3-tools). No --ignore-certificate-errors. The screenshots stay in ARTIFACTS
# (js_client_ws.png, js_client_wss.png).
#
# Usage: test_browser_js_client.sh HERALD BROWSER_DIR REPO ARTIFACTS
set -euo pipefail
herald=$1
browser_dir=$2
repo=$3
artifacts=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/test_browser_js_client.XXXXXX")
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/test_ca.sh"

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

command -v node >/dev/null || fail "no node on PATH: run scripts/install-deps.sh"
command -v certutil >/dev/null || fail "no certutil: run scripts/install-deps.sh (libnss3-tools)"
command -v redis-server >/dev/null || fail "no redis-server: run scripts/install-deps.sh"
[ -d "$browser_dir/node_modules/puppeteer-core" ] ||
    fail "$browser_dir/node_modules is missing: run scripts/install-deps.sh (npm ci there)"
[ -d "$repo/clients/js/node_modules/protobufjs" ] ||
    fail "$repo/clients/js/node_modules is missing: run scripts/install-deps.sh (npm ci there)"

make_test_ca "$work/ca" || fail "openssl could not make the test CA"
home=$work/home
mkdir -p "$home/.pki/nssdb"
certutil -d "sql:$home/.pki/nssdb" -N --empty-password || fail "certutil could not make the NSS database"
certutil -d "sql:$home/.pki/nssdb" -A -t "C,," -n herald-test -i "$work/ca/ca.pem" ||
    fail "certutil could not add the test CA"
certutil -d "sql:$home/.pki/nssdb" -L | grep -q '^herald-test  *C,,' ||
    fail "the NSS database does not list the test CA as trusted"

mkdir -p "$artifacts"
rm -f "$artifacts"/js_client_ws.png "$artifacts"/js_client_wss.png
node "$browser_dir/check_js_client.js" --herald "$herald" --ca "$work/ca" --home "$home" \
    --repo "$repo" --artifacts "$artifacts" || fail "the page's report does not show what it must"
echo "artifacts: $artifacts/js_client_ws.png $artifacts/js_client_wss.png"

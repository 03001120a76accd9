#!/usr/bin/env bash
# check_prometheus: promtool accepts the Prometheus files in dashboards/ and deploy/.
#
#   1. `promtool check rules` on every rules file, the Redis engine's included.
#   2. `promtool check config` on dashboards/prometheus-scrape.yml and on the compose
#      stack's deploy/compose/prometheus.yml. promtool insists that the rule files and the
#      key file they name exist, at their installed paths; the check runs on copies whose
#      /etc/prometheus/rules/ points at dashboards/ and whose key file is a scratch one.
#      Nothing else is changed, and check config checks the rules it loads as well.
#
# Usage: check_prometheus.sh PROMTOOL SOURCE_DIR
set -euo pipefail
promtool=$1
src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/check_prometheus.XXXXXX")
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

for rules in "$src"/dashboards/herald-alerts*.yml; do
    "$promtool" check rules "$rules" >"$work/out" 2>&1 || { cat "$work/out" >&2; fail "promtool check rules $rules"; }
    echo "ok promtool check rules $(basename "$rules"): $(grep -o '[0-9]* rules found' "$work/out")"
done

echo "scratch-key" >"$work/key"
for config in "$src/dashboards/prometheus-scrape.yml" "$src/deploy/compose/prometheus.yml"; do
    [ -f "$config" ] || fail "$config is missing"
    sed -e "s#/etc/prometheus/rules/#$src/dashboards/#g" \
        -e "s#/etc/prometheus/secrets/herald-admin-key#$work/key#g" \
        -e "s#/run/secrets/herald_admin_api_key#$work/key#g" "$config" >"$work/prometheus.yml"
    "$promtool" check config "$work/prometheus.yml" >"$work/out" 2>&1 ||
        { cat "$work/out" >&2; fail "promtool check config $config"; }
    echo "ok promtool check config $config: $(grep -c 'rules found' "$work/out") rules file(s) loaded"
done

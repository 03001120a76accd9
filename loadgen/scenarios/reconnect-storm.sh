#!/usr/bin/env bash
# reconnect-storm: 10,000 idle and 100 active clients (1 publish/s each, broadcast to the
# active ones); 5 s into the measured phase half of them drop their connections at once and
# reconnect immediately (back-off jitter up to 50 ms). Figures: time until every client is
# subscribed again, connect failures during the storm, and messages lost on history channels:
# "history not yet available" until herald keeps channel history (a later issue).
#
# Usage: loadgen/scenarios/reconnect-storm.sh [--clients N] [--fraction F] [--build DIR]
#                                             [--transport tcp|ws|tls|wss] [--no-pin]
source "$(dirname "$0")/lib.sh"
scenario_init "$@"

clients=10000 fraction=0.5
set -- "${ARGS[@]+"${ARGS[@]}"}"
while [ $# -gt 0 ]; do
    case "$1" in
    --clients) clients=$2; shift 2 ;;
    --fraction) fraction=$2; shift 2 ;;
    *) die "unknown option $1" ;;
    esac
done

# shellcheck disable=SC2119 # herald_start takes no arguments here
SCN_HERALD_PREFIX=$(pin 0) herald_start
rss0=$(herald_rss_kb) ticks0=$(herald_cpu_ticks) ns0=$(now_ns)
echo "reconnect-storm: $clients idle + 100 active clients, $fraction of them drop at 5 s;" \
    "herald pid $HERALD_PID on 127.0.0.1:$HERALD_PORT" >&2
status=0
# shellcheck disable=SC2046
$(pin 1) "$LOADGEN" "${LG_TRANSPORT[@]}" --port "$HERALD_PORT" --insecure --idle "$clients" \
    --active 100 --rate 1 --pattern broadcast --duration 15 --drop-at 5 \
    --drop-fraction "$fraction" \
    --connect-rate 5000 --threads 1 --json "$WORK/storm.json" || status=$?
json_get "$WORK/storm.json" '"reconnect-storm: %d dropped; all back in %s ms; %d connect failures; messages lost on history channels: history %s" % (d["storm"]["dropped"], d["storm"]["recover_ms"] if d["storm"]["recover_ms"] is not None else "(never)", d["storm"]["connect_failures"], d["storm"]["history"])'
herald_report "$rss0" "$ticks0" "$ns0"
exit "$status"

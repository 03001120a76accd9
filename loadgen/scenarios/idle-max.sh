#!/usr/bin/env bash
# idle-max: as many idle connections as one herald process may hold here (19,000 under the
# 20,000-descriptor hard limit), and herald's memory per connection: RSS once all are
# connected minus RSS before, divided by the count.
#
# One herald-loadgen process is itself capped at 20,000 descriptors, so the clients are split
# over several processes (at most 9,500 each), with disjoint --id-base ranges and their own
# source addresses (127.0.0.2-9 for the first, 127.0.0.10-17 for the second, ...), which also
# spreads the ephemeral ports. The connections are held for --hold seconds (heartbeating at the
# interval herald announces).
#
# Usage: loadgen/scenarios/idle-max.sh [--count N] [--hold S] [--transport tcp|ws|tls|wss]
#                                      [--build DIR] [--no-pin]
source "$(dirname "$0")/lib.sh"
scenario_init "$@"

count=19000 hold=20 per_proc=9500
set -- "${ARGS[@]+"${ARGS[@]}"}"
while [ $# -gt 0 ]; do
    case "$1" in
    --count) count=$2; shift 2 ;;
    --hold) hold=$2; shift 2 ;;
    *) die "unknown option $1" ;;
    esac
done
procs=$(((count + per_proc - 1) / per_proc))

# shellcheck disable=SC2119 # herald_start takes no arguments here
SCN_HERALD_PREFIX=$(pin 0) herald_start
rss0=$(herald_rss_kb) ticks0=$(herald_cpu_ticks) ns0=$(now_ns)
echo "idle-max: $count idle connections from $procs loadgen process(es), held ${hold}s;" \
    "herald pid $HERALD_PID, RSS before ${rss0} KiB" >&2

for k in $(seq 0 $((procs - 1))); do
    n=$((count / procs + (k < count % procs ? 1 : 0)))
    src="127.0.0.$((2 + 8 * k))-127.0.0.$((9 + 8 * k))"
    # shellcheck disable=SC2046
    $(pin 1) "$LOADGEN" "${LG_TRANSPORT[@]}" --port "$HERALD_PORT" --insecure --idle "$n" \
        --id-base $((k * per_proc)) --sources "$src" --connect-rate 3000 --ramp-timeout 120 \
        --duration "$hold" \
        --progress plain --quiet --json "$WORK/idle-$k.json" 2>"$WORK/idle-$k.log" &
    LOADGEN_PIDS+=($!)
done

# Every process notes "ramp: R of N clients ready" when its measured (holding) phase begins;
# read herald's RSS once all have, i.e. with every connection open.
deadline=$(($(date +%s) + 180))
while :; do
    ready=0
    for k in $(seq 0 $((procs - 1))); do
        grep -q '^ramp' "$WORK/idle-$k.log" 2>/dev/null && ready=$((ready + 1))
    done
    [ "$ready" -eq "$procs" ] && break
    [ "$(date +%s)" -lt "$deadline" ] || die "loadgen ramp did not finish in 180 s"
    sleep 0.5
done
rss1=$(herald_rss_kb)

status=0
for pid in "${LOADGEN_PIDS[@]}"; do
    wait "$pid" || status=$?
done
LOADGEN_PIDS=()
for k in $(seq 0 $((procs - 1))); do
    [ -s "$WORK/idle-$k.json" ] || { cat "$WORK/idle-$k.log" >&2; die "loadgen $k wrote no results"; }
done
# Sums over the processes' JSON: held connections, connect failures (by reason), disconnects.
read -r held failures disconnects reasons < <(/usr/bin/python3 - "$WORK"/idle-*.json <<'PY'
import json, sys
held = fails = disc = 0
why = {}
for path in sys.argv[1:]:
    d = json.load(open(path))
    held += d["clients"]["ready_at_start"]
    fails += d["connect"]["failures"]
    disc += d["disconnects"]["total"]
    for k, v in d["connect"]["failures_by_reason"].items():
        why[k] = why.get(k, 0) + v
print(held, fails, disc, ",".join("%s=%d" % kv for kv in sorted(why.items())) or "-")
PY
)

echo "idle-max results"
printf '  %-26s %s of %s\n' "connections held" "$held" "$count"
printf '  %-26s %s (%s)\n' "connect failures" "$failures" "$reasons"
printf '  %-26s %s\n' "disconnects while held" "$disconnects"
printf '  %-26s %s KiB -> %s KiB\n' "herald RSS" "$rss0" "$rss1"
if [ "$held" -gt 0 ]; then
    awk -v a="$rss0" -v b="$rss1" -v n="$held" \
        'BEGIN { printf "  %-26s %.2f KiB (%.0f bytes)\n", "herald RSS per connection", (b - a) / n, (b - a) * 1024 / n }'
fi
herald_report "$rss0" "$ticks0" "$ns0"
exit "$status"

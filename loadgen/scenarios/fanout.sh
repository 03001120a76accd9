#!/usr/bin/env bash
# fanout: one broadcast channel with 10,000 subscribers; the publish rate climbs until herald
# can no longer deliver every message: the figure is the highest deliveries/s with zero loss.
#
# herald runs with --io-threads 1 pinned to CPU 0 and herald-loadgen on CPU 1, so the figure
# is what one herald core delivers. Each step is a fresh herald-loadgen run (the subscribers
# reconnect) of --step seconds; publishers are added so that none exceeds 50 publishes/s
# (under herald's default per-connection publish limit). A step fails on any lost or
# duplicate delivery, or when herald-loadgen's own thread was the bottleneck (the figure then
# says more about the generator than about herald).
#
# Usage: loadgen/scenarios/fanout.sh [--subscribers N] [--step S] [--rates "10 20 50 ..."]
#                                    [--transport tcp|ws|tls|wss] [--build DIR] [--no-pin]
source "$(dirname "$0")/lib.sh"
scenario_init "$@"

subs=10000 step=5 rates="5 10 20 50 100 200 500 1000 2000"
set -- "${ARGS[@]+"${ARGS[@]}"}"
while [ $# -gt 0 ]; do
    case "$1" in
    --subscribers) subs=$2; shift 2 ;;
    --step) step=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    *) die "unknown option $1" ;;
    esac
done

io_threads=()
[ "$PIN" = 1 ] && [ "$NPROC" -ge 2 ] && io_threads=(--io-threads 1)
SCN_HERALD_PREFIX=$(pin 0) herald_start "${io_threads[@]+"${io_threads[@]}"}"
rss0=$(herald_rss_kb) ticks_start=$(herald_cpu_ticks) ns_start=$(now_ns)
echo "fanout: broadcast to $subs subscribers, herald pid $HERALD_PID on 127.0.0.1:$HERALD_PORT" >&2

printf '%10s %12s %10s %10s %10s %8s %8s %9s %9s\n' "pub/s" "deliveries/s" "p50 ms" "p99 ms" \
    "max ms" "lost" "dups" "lg cpu%" "herald%"
best_rate="" best_dps=""
for rate in $rates; do
    publishers=$(((rate + 49) / 50))
    json="$WORK/fanout-$rate.json"
    t0=$(herald_cpu_ticks) n0=$(now_ns)
    status=0
    # shellcheck disable=SC2046
    $(pin 1) "$LOADGEN" "${LG_TRANSPORT[@]}" --port "$HERALD_PORT" --insecure --idle "$subs" \
        --idle-shared --active "$publishers" --pattern broadcast --total-rate "$rate" \
        --duration "$step" --connect-rate 10000 --threads 1 --drain 5 --progress none --quiet --json "$json" \
        2>>"$WORK/loadgen.log" || status=$?
    t1=$(herald_cpu_ticks) n1=$(now_ns)
    [ -s "$json" ] || { cat "$WORK/loadgen.log" >&2; die "loadgen failed (status $status)"; }
    read -r dps p50 p99 max lost dups lgcpu bound exact < <(json_get "$json" \
        '"%.0f %.3f %.3f %.3f %d %d %.0f %s %s" % (d["delivery"]["per_s"], d["latency_ms"]["p50"], d["latency_ms"]["p99"], d["latency_ms"]["max"], d["delivery"]["lost"], d["delivery"]["duplicates"], d["cpu"]["max_thread_pct"], d["cpu"]["generator_bound"], d["delivery"]["expected_exact"])')
    printf '%10s %12s %10s %10s %10s %8s %8s %9s %9s\n' "$rate" "$dps" "$p50" "$p99" "$max" \
        "$lost" "$dups" "$lgcpu" "$(cpu_pct "$t0" "$t1" "$n0" "$n1")"
    if [ "$lost" != 0 ] || [ "$dups" != 0 ] || [ "$exact" != True ]; then
        echo "fanout: step $rate pub/s lost deliveries (or clients disconnected): stopping" >&2
        break
    fi
    if [ "$bound" = True ]; then
        echo "fanout: herald-loadgen was the bottleneck at $rate pub/s: stopping" >&2
        break
    fi
    best_rate=$rate best_dps=$dps
done

if [ -n "$best_rate" ]; then
    echo "fanout: highest zero-loss step: $best_rate publishes/s -> $best_dps deliveries/s" \
        "to $subs subscribers (one herald IO thread)"
else
    echo "fanout: no step ran without loss"
fi
herald_report "$rss0" "$ticks_start" "$ns_start"

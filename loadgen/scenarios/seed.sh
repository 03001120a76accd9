#!/usr/bin/env bash
# seed: the workload herald was founded on (the gateway article): 10,000 idle clients that only
# heartbeat, and 2,000 active clients that publish 20,000 messages/s in total (10/s each) to
# one another (pattern per-user: each message goes to one random client), 64-byte payloads,
# 30 s. Issue 5's target for this load is p99 publish-to-deliver latency under 5 ms.
#
# --short is the README demo: 2,000 idle + 200 active, 2,000 publishes/s, 10 s.
# By default nothing is pinned: herald runs its default IO loops (one per core) and the
# scheduler places both processes. --pin puts herald (one IO thread) on CPU 0 and
# herald-loadgen on CPU 1. On this project's 2-vCPU VM that layout lengthens the tail several
# times: the sandbox's agent (PID 1, nice -10) takes a CPU for up to ~25 ms about once a
# second, more the more sockets the machine holds, and a pinned process cannot move away from
# it (bench/RESULTS-gateway.md, "Seed: pinning"). Prints loadgen's summary, then herald's RSS
# and CPU from /proc.
#
# Usage: loadgen/scenarios/seed.sh [--short] [--build DIR] [--pin] [--duration S]
#                                  [--transport tcp|ws|tls|wss]
#                                  [-- extra herald-loadgen flags, e.g. --max-p99 5ms]
# Exit status: herald-loadgen's (1 when a threshold given after -- was broken).
source "$(dirname "$0")/lib.sh"
PIN=0 # not pinned unless --pin: see above
scenario_init "$@"

idle=10000 active=2000 rate=20000 duration=30 connect_rate=5000
extra=()
set -- "${ARGS[@]+"${ARGS[@]}"}"
while [ $# -gt 0 ]; do
    case "$1" in
    --short) idle=2000 active=200 rate=2000 duration=10; shift ;;
    --duration) duration=$2; shift 2 ;;
    --) shift; extra+=("$@"); break ;;
    *) extra+=("$1"); shift ;;
    esac
done

io_threads=()
[ "$PIN" = 1 ] && [ "$NPROC" -ge 2 ] && io_threads=(--io-threads 1)
SCN_HERALD_PREFIX=$(pin 0) herald_start "${io_threads[@]+"${io_threads[@]}"}"
rss0=$(herald_rss_kb) ticks0=$(herald_cpu_ticks) ns0=$(now_ns)

echo "seed: $idle idle + $active active clients, $rate publishes/s (per-user), ${duration}s," \
    "herald pid $HERALD_PID on 127.0.0.1:$HERALD_PORT" >&2
status=0
# shellcheck disable=SC2046
$(pin 1) "$LOADGEN" "${LG_TRANSPORT[@]}" --port "$HERALD_PORT" --insecure --idle "$idle" \
    --active "$active" --total-rate "$rate" --pattern per-user --size 64 --duration "$duration" \
    --connect-rate "$connect_rate" --threads 1 --drain 10 --json "$WORK/seed.json" \
    "${extra[@]+"${extra[@]}"}" || status=$?
herald_report "$rss0" "$ticks0" "$ns0"
exit "$status"

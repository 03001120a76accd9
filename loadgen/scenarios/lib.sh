# shellcheck shell=bash
# Shared by the scenario scripts (sourced, not run): finds the binaries, starts and stops
# herald on free loopback ports, reads its RSS and CPU from /proc, pins processes to CPUs.
#
# After `scenario_init "$@"` the caller has: $BUILD (build directory), $HERALD and $LOADGEN
# (binaries), $WORK (a temporary directory removed on exit), ARGS (the arguments the library
# did not take), $TRANSPORT (--transport tcp|ws|tls|wss, default tcp) and LG_TRANSPORT (the
# herald-loadgen flags for it, to put in every loadgen command: "${LG_TRANSPORT[@]}").
# `herald_start [flags...]` sets $HERALD_PID, $HERALD_PORT (the port the clients use: the
# WebSocket listener's for ws and wss) and $HERALD_ADMIN_PORT. A script that starts more processes of its own (several nodes, a
# redis-server) defines scenario_on_exit, which the exit trap runs after stopping the loadgens.

set -euo pipefail

SCENARIO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCENARIO_DIR/../.." && pwd)
CLK_TCK=$(getconf CLK_TCK)
NPROC=$(nproc)
HERALD_PID=""
LOADGEN_PIDS=()
# A script that should not pin by default sets PIN=0 after sourcing this file and before
# scenario_init (which reads --pin and --no-pin).
PIN=1

die() {
    echo "$(basename "$0"): $*" >&2
    exit 2
}

# Parses --build DIR, --no-pin, --pin and --transport T; leaves the rest in ARGS.
scenario_init() {
    BUILD="$REPO/build/release"
    TRANSPORT=tcp
    ARGS=()
    while [ $# -gt 0 ]; do
        case "$1" in
        --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
        --build=*) BUILD=$(cd "${1#--build=}" && pwd); shift ;;
        --no-pin) PIN=0; shift ;;
        --pin) PIN=1; shift ;;
        --transport) TRANSPORT=$2; shift 2 ;;
        --transport=*) TRANSPORT=${1#--transport=}; shift ;;
        *) ARGS+=("$1"); shift ;;
        esac
    done
    case "$TRANSPORT" in
    tcp | ws | tls | wss) ;;
    *) die "--transport $TRANSPORT: tcp, ws, tls or wss" ;;
    esac
    HERALD="$BUILD/gateway/herald"
    LOADGEN="$BUILD/loadgen/herald-loadgen"
    [ -x "$HERALD" ] || die "no herald at $HERALD: build first (cmake -S . -B $BUILD && cmake --build $BUILD) or give --build DIR"
    [ -x "$LOADGEN" ] || die "no herald-loadgen at $LOADGEN: build first or give --build DIR"
    [ -x /usr/bin/python3 ] || die "needs /usr/bin/python3 to read loadgen's JSON"
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/herald-scenario.XXXXXX")
    trap scenario_cleanup EXIT
    trap 'exit 130' INT TERM
    # Both herald and loadgen hold one descriptor per connection; take the whole hard limit.
    ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
    transport_init
}

# herald's flags and loadgen's for $TRANSPORT: a WebSocket listener for ws and wss; for tls
# and wss a test CA made here (tests/integration/test_ca.sh), herald serving its certificate
# and loadgen verifying against it.
transport_init() {
    HERALD_TRANSPORT=()
    LG_TRANSPORT=(--transport "$TRANSPORT")
    case "$TRANSPORT" in
    ws | wss) HERALD_TRANSPORT+=(--ws-listen 127.0.0.1:0) ;;
    esac
    case "$TRANSPORT" in
    tls | wss)
        # shellcheck source=../../tests/integration/test_ca.sh
        source "$REPO/tests/integration/test_ca.sh"
        make_test_ca "$WORK/ca" || die "openssl could not make a test CA"
        HERALD_TRANSPORT+=(--tls-cert "$WORK/ca/server.pem" --tls-key "$WORK/ca/server.key")
        LG_TRANSPORT+=(--tls-ca "$WORK/ca/ca.pem")
        ;;
    esac
}

scenario_cleanup() {
    local pid
    for pid in "${LOADGEN_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    if declare -F scenario_on_exit >/dev/null; then
        scenario_on_exit
    fi
    herald_stop
    rm -rf "$WORK"
}

# Prefix for a command pinned to one CPU (when pinning is on and the CPU exists).
pin() { # cpu
    if [ "$PIN" = 1 ] && [ "$1" -lt "$NPROC" ] && command -v taskset >/dev/null; then
        echo "taskset -c $1"
    fi
}

# Starts herald in insecure mode on free loopback ports with the given extra flags, prefixed
# by $SCN_HERALD_PREFIX (e.g. a taskset), and waits for its ev=listening line; its log goes to
# $WORK/NAME.log; with the listeners $TRANSPORT needs (transport_init). Sets SPAWN_PID (the
# process started: herald, or the prefix's command when that runs herald as a child),
# SPAWN_PORT (the clients' port: the WebSocket listener's for ws and wss) and
# SPAWN_ADMIN_PORT.
herald_spawn() { # name [flags...]
    local name=$1 line
    shift
    mkfifo "$WORK/$name.fifo"
    # shellcheck disable=SC2086
    ${SCN_HERALD_PREFIX:-} "$HERALD" --listen 127.0.0.1:0 --admin 127.0.0.1:0 --insecure \
        "${HERALD_TRANSPORT[@]+"${HERALD_TRANSPORT[@]}"}" "$@" 2>"$WORK/$name.fifo" &
    SPAWN_PID=$!
    exec 7<"$WORK/$name.fifo"
    SPAWN_PORT="" SPAWN_ADMIN_PORT=""
    while IFS= read -r -t 15 line <&7; do
        echo "$line" >>"$WORK/$name.log"
        if [[ $line =~ ev=listening.*[[:space:]]port=([0-9]+) ]]; then
            SPAWN_PORT=${BASH_REMATCH[1]}
            [[ $line =~ admin_port=([0-9]+) ]] && SPAWN_ADMIN_PORT=${BASH_REMATCH[1]}
            if [[ $TRANSPORT == ws* ]]; then
                SPAWN_PORT=""
                [[ $line =~ ws_port=([0-9]+) ]] && SPAWN_PORT=${BASH_REMATCH[1]}
            fi
            break
        fi
    done
    # Keep draining herald's log so it never blocks on a full pipe.
    cat <&7 >>"$WORK/$name.log" &
    exec 7<&-
    if [ -z "$SPAWN_PORT" ]; then
        cat "$WORK/$name.log" >&2
        die "herald ($name) did not report ev=listening"
    fi
}

# Starts the scenario's one herald (see herald_spawn); sets $HERALD_PID, $HERALD_PORT and
# $HERALD_ADMIN_PORT.
herald_start() {
    herald_spawn herald "$@"
    # shellcheck disable=SC2034 # read by the sourcing script
    HERALD_PID=$SPAWN_PID HERALD_PORT=$SPAWN_PORT HERALD_ADMIN_PORT=$SPAWN_ADMIN_PORT
}

# Stops herald by PID: SIGTERM (its graceful drain), SIGKILL after 15 s.
herald_stop() {
    if [ -n "$HERALD_PID" ]; then
        kill -TERM "$HERALD_PID" 2>/dev/null || true
        for _ in $(seq 150); do
            kill -0 "$HERALD_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$HERALD_PID" 2>/dev/null || true
        wait "$HERALD_PID" 2>/dev/null || true
        HERALD_PID=""
    fi
}

# A process's resident set in KiB.
proc_rss_kb() { # pid
    awk '/^VmRSS:/ {print $2}' "/proc/$1/status"
}

# A process's user + system CPU time in clock ticks.
proc_cpu_ticks() { # pid
    # Field 2 (comm) may hold spaces; count from after its closing parenthesis.
    sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

herald_rss_kb() { proc_rss_kb "$HERALD_PID"; }
herald_cpu_ticks() { proc_cpu_ticks "$HERALD_PID"; }

now_ns() {
    date +%s%N
}

# CPU share (percent of one core) between two tick counts over two now_ns stamps.
cpu_pct() { # ticks0 ticks1 ns0 ns1
    awk -v t0="$1" -v t1="$2" -v n0="$3" -v n1="$4" -v hz="$CLK_TCK" \
        'BEGIN { w = (n1 - n0) / 1e9; printf "%.0f", (w > 0 ? 100 * (t1 - t0) / hz / w : 0) }'
}

# Reads one value from a loadgen JSON document: json_get FILE 'd["delivery"]["per_s"]'.
json_get() {
    /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}

# Prints the herald figures of a run: RSS before and after, CPU over the run.
herald_report() { # rss0_kb ticks0 ns0
    local rss1 ticks1 ns1
    rss1=$(herald_rss_kb)
    ticks1=$(herald_cpu_ticks)
    ns1=$(now_ns)
    printf 'herald            pid %s, RSS %s KiB before, %s KiB after; CPU %s%% of a core during the run\n' \
        "$HERALD_PID" "$1" "$rss1" "$(cpu_pct "$2" "$ticks1" "$3" "$ns1")"
}

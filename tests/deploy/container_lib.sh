# shellcheck shell=bash disable=SC2034,SC2154
# container_lib.sh: what test_container.sh and test_compose_stack.sh share. Sourced, not run.
# (SC2034, SC2154: the variables it sets and reads are the callers'.)
#
# Podman as this machine needs it: rootful, runc as the OCI runtime, cgroupfs (no systemd),
# and every container given explicit descriptor and process limits. Podman's defaults
# (nofile 1048576, nproc above podman's own 32768) exceed the hard limits here, and root on
# this machine lacks CAP_SYS_RESOURCE to raise them, so runc would fail to start anything.
#
# Everything a test creates is named from one id, herald-ct-<epoch>-<pid>: containers,
# images (localhost/<id>-...), the compose project and its network and volumes. ct_cleanup
# (the EXIT trap) removes this run's, in that order; ct_sweep_stale removes those of an
# earlier run that was killed before its trap ran (ctest's TIMEOUT kills with SIGKILL),
# recognised by the prefix and an epoch older than any test's TIMEOUT. Nothing else on the
# machine is touched: other containers and images, the base image and podman's build cache
# (intermediate layers, reused by the next build) stay.
#
# Requires: bash, set -euo pipefail in the caller, and $work (the caller's temporary folder).

CT_PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
CT_ULIMITS=(--ulimit nofile=20000:20000 --ulimit nproc=32768:32768)
CT_PREFIX=herald-ct-
CT_STALE_S=1800
ct_id=$CT_PREFIX$(date +%s)-$$

pm() { "${CT_PODMAN[@]}" "$@"; }

ct_now() { date +%s.%N | cut -c1-14; }
ct_since() { awk -v a="$1" -v b="$(ct_now)" 'BEGIN { printf "%.1f", b - a }'; }

ct_fail() {
    echo "FAIL: $*" >&2
    if declare -F ct_on_fail >/dev/null; then ct_on_fail || true; fi
    exit 1
}

# Names on one line each, from podman's listing of kind $1 (containers, images, networks,
# volumes), that belong to the run with id $2 (a prefix match), or with no $2, to any run
# older than CT_STALE_S.
ct_list() {
    local kind=$1 id=${2:-} now
    now=$(date +%s)
    case $kind in
    containers) pm ps -a --format '{{.Names}}' ;;
    images) pm images --format '{{.Repository}}:{{.Tag}}' | sed 's#^localhost/##' ;;
    networks) pm network ls --format '{{.Name}}' ;;
    volumes) pm volume ls --format '{{.Name}}' ;;
    esac | awk -v id="$id" -v prefix="$CT_PREFIX" -v now="$now" -v stale="$CT_STALE_S" '
        id != "" { if (index($0, id) == 1) print; next }
        index($0, prefix) == 1 {
            rest = substr($0, length(prefix) + 1)
            split(rest, f, "-")
            if (f[1] ~ /^[0-9]+$/ && now - f[1] > stale) print
        }'
}

# Removes what ct_list finds for id $1 (or the stale runs'): containers first (at once, no
# drain), then images, networks and volumes.
ct_remove() {
    local id=${1:-} name
    for name in $(ct_list containers "$id"); do pm rm -f -t 0 "$name" >/dev/null 2>&1 || true; done
    for name in $(ct_list images "$id"); do pm rmi "localhost/$name" >/dev/null 2>&1 || true; done
    for name in $(ct_list networks "$id"); do pm network rm "$name" >/dev/null 2>&1 || true; done
    for name in $(ct_list volumes "$id"); do pm volume rm "$name" >/dev/null 2>&1 || true; done
}

ct_sweep_stale() {
    local left
    left=$(for k in containers images networks volumes; do ct_list "$k"; done)
    if [ -n "$left" ]; then
        echo "# removing what killed earlier runs left: ${left//$'\n'/ }" >&2
        ct_remove ""
    fi
}

ct_cleanup() {
    if [ -n "${probe_pid:-}" ]; then kill "$probe_pid" 2>/dev/null || true; fi
    ct_remove "$ct_id"
    if [ -n "${HERALD_TEST_KEEP:-}" ]; then
        echo "# HERALD_TEST_KEEP: logs kept in $work" >&2
    else
        rm -rf "$work"
    fi
}

# Checks for podman and runc, makes the base image if missing (deploy/make-base-image.sh),
# sweeps stale runs. $1: the source tree. Sets ct_base_s (seconds spent on the base image,
# 0 if it was there).
ct_prepare() {
    local src=$1 t0
    local tool
    for tool in podman runc; do
        command -v "$tool" >/dev/null || ct_fail "$tool missing: run scripts/install-deps.sh"
    done
    [ "$(id -u)" -eq 0 ] || ct_fail "the container tests run podman as root"
    ct_sweep_stale
    ct_base_s=0
    if ! pm image exists debian:12-slim; then
        t0=$(ct_now)
        "$src/deploy/make-base-image.sh" >"$work/base-image.log" 2>&1 ||
            { cat "$work/base-image.log" >&2; ct_fail "deploy/make-base-image.sh failed"; }
        ct_base_s=$(ct_since "$t0")
    fi
}

# Builds deploy/Dockerfile from source tree $1 as image $2, as the README says: chroot
# isolation, Docker image format (an OCI image would drop the HEALTHCHECK). Sets ct_build_s.
ct_build_image() {
    local src=$1 image=$2 t0
    t0=$(ct_now)
    nice "${CT_PODMAN[@]}" build --isolation=chroot --format docker -f "$src/deploy/Dockerfile" -t "$image" \
        "$src" >"$work/build.log" 2>&1 ||
        { tail -n 40 "$work/build.log" >&2; ct_fail "podman build of deploy/Dockerfile failed"; }
    ct_build_s=$(ct_since "$t0")
}

# The host port that container $1's port $2/tcp is published on.
ct_port() {
    pm port "$1" "$2/tcp" | sed -n '1s/.*://p'
}

# Runs `podman healthcheck run $1` until it gives status $2 (0 healthy, 1 unhealthy), at
# most $3 seconds. Each run executes the image's HEALTHCHECK command in the container.
ct_await_health() {
    local name=$1 want=$2 limit_s=$3 t0 rc
    t0=$(date +%s)
    while :; do
        rc=0
        pm healthcheck run "$name" >/dev/null 2>&1 || rc=$?
        [ "$rc" -eq "$want" ] && return 0
        [ $(($(date +%s) - t0)) -lt "$limit_s" ] || return 1
    done
}

# Starts herald_probe.py in the background, its output through a FIFO on fd $probe_fd
# (which keeps what the probe wrote after it exits); arguments as the probe's. Needs
# $ct_probe_py and $ct_pydir. ct_probe_expect reads its lines.
ct_probe_start() {
    local fifo=$work/probe.fifo
    rm -f "$fifo"
    mkfifo "$fifo"
    /usr/bin/python3 "$ct_probe_py" --pydir "$ct_pydir" "$@" >"$fifo" 2>&1 &
    probe_pid=$!
    exec {probe_fd}<"$fifo"
    : >"$work/probe.out"
}

# Waits for the probe to exit; returns its status.
ct_probe_wait() {
    local rc=0
    wait "$probe_pid" || rc=$?
    probe_pid=""
    exec {probe_fd}<&-
    return "$rc"
}

# Reads probe lines (each appended to $work/probe.out) until one matches $1 or $2 seconds
# pass; fails on an "error" line.
ct_probe_expect() {
    local want=$1 limit_s=$2 line t0
    t0=$(date +%s)
    while :; do
        local left=$((limit_s - ($(date +%s) - t0)))
        [ "$left" -gt 0 ] || ct_fail "probe: no line matching '$want' within ${limit_s} s"
        if ! IFS= read -r -t "$left" -u "$probe_fd" line; then
            ct_fail "probe: no line matching '$want' within ${limit_s} s (output ended)"
        fi
        echo "$line" >>"$work/probe.out"
        case $line in error*) ct_fail "probe: $line" ;; esac
        [[ $line =~ $want ]] && return 0
    done
}

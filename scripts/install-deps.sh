#!/usr/bin/env bash
# Installs whatever herald needs from Debian's packages and is not yet installed, then the
# JavaScript client's npm packages (clients/js, pinned by its package-lock.json).
# Idempotent and silent when everything is present. Usage: scripts/install-deps.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

packages=(
    build-essential cmake pkg-config clang libclang-rt-14-dev # toolchain; clang for libFuzzer
    libhiredis-dev libprotobuf-c-dev protobuf-c-compiler      # Redis engine, wire protocol
    libcmocka-dev libssl-dev libinih-dev libmicrohttpd-dev    # tests, HMAC, config, admin API
    libjansson-dev                                            # JWT claims (gateway)
    redis-server                                              # integration tests
    libevent-dev                                              # the pingpong benchmark's reference
    python3 python3-protobuf protobuf-compiler                # protocol interoperability test
    util-linux procps                                         # taskset, ps for benchmarks
    systemd                                                   # systemd-analyze, -sysusers (deploy tests)
    prometheus python3-yaml                                   # promtool; rules and compose files (deploy tests)
    haproxy                                                   # deploy/local-cluster.sh's load balancer
    chromium                                                  # clients/js's browser test (headless)
)
# clients/js: node (18 or later) and npm. Debian's nodejs and npm, unless a node with its npm
# is installed already (e.g. a newer one from another source, which Debian's npm would clash with).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "install-deps: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# clients/js's packages, exactly as package-lock.json pins them. npm writes
# node_modules/.package-lock.json on every install: when it is missing or older than the lock
# file (a fresh clone, a changed lock), install again.
js="$here/clients/js"
if [ -f "$js/package-lock.json" ] &&
    { [ ! -f "$js/node_modules/.package-lock.json" ] ||
        [ "$js/package-lock.json" -nt "$js/node_modules/.package-lock.json" ]; }; then
    echo "install-deps: npm ci in clients/js" >&2
    (cd "$js" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

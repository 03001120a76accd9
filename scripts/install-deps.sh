#!/usr/bin/env bash
# Installs whatever herald needs from Debian's packages and is not yet installed, then the
# npm packages of the JavaScript client (clients/js), the browser tests (tests/browser) and the
# WebSocket/TLS tests (tests/ws), each pinned by its package-lock.json and installed with npm ci.
# Idempotent and silent when everything is present. Usage: scripts/install-deps.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

packages=(
    build-essential cmake pkg-config clang libclang-rt-14-dev # toolchain; clang for libFuzzer
    libhiredis-dev libprotobuf-c-dev protobuf-c-compiler      # Redis engine, wire protocol
    libcmocka-dev libssl-dev libinih-dev libmicrohttpd-dev    # tests, HMAC, config, admin API
    liburing-dev                                              # netlib's batched sends (io_uring)
    libjansson-dev                                            # JWT claims (gateway)
    libwslay-dev libhttp-parser-dev                           # WebSocket frames, upgrade (both sides)
    redis-server redis-sentinel                               # integration tests (Sentinel failover)
    libevent-dev                                              # the pingpong benchmark's reference
    python3 python3-protobuf protobuf-compiler                # protocol interoperability test
    util-linux procps                                         # taskset, ps for benchmarks
    systemd                                                   # systemd-analyze, -sysusers (deploy tests)
    prometheus python3-yaml                                   # promtool; rules and compose files (deploy tests)
    haproxy                                                   # deploy/local-cluster.sh's load balancer
    chromium                                                  # browser tests, headless (clients/js, tests/browser)
    libnss3-tools                                             # certutil: a test CA Chromium trusts (wss:// browser test)
    podman runc podman-compose                                # container tests: the image and compose stack
    golang-github-containernetworking-plugin-dnsname          # compose service names resolve (CNI backend)
    debootstrap debian-archive-keyring                        # deploy/make-base-image.sh: debian:12-slim
    curl openssl                                              # deploy tests: probes, secrets
)
# Node.js and npm: the JavaScript client and the browser tests (puppeteer-core). Debian 12's
# nodejs (18) and npm (9) do; a node that already brings its own npm (NodeSource's nodejs
# package, which conflicts with Debian's npm package) is used as it is.
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

# Each npm package exactly as its package-lock.json pins it. npm writes
# node_modules/.package-lock.json on every install: when it is missing or older than the lock
# file (a fresh clone, a changed lock), install again.
for dir in clients/js tests/browser tests/ws; do
    pkg="$here/$dir"
    if [ -f "$pkg/package-lock.json" ] &&
        { [ ! -f "$pkg/node_modules/.package-lock.json" ] ||
            [ "$pkg/package-lock.json" -nt "$pkg/node_modules/.package-lock.json" ]; }; then
        echo "install-deps: npm ci in $dir" >&2
        (cd "$pkg" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    fi
done

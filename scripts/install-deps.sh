#!/usr/bin/env bash
# Installs whatever herald needs from Debian's packages and is not yet installed.
# Idempotent and silent when everything is present. Usage: scripts/install-deps.sh
set -euo pipefail

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
)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

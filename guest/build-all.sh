#!/usr/bin/env bash
# Builds every guest program into <repo>/target/guests/<name>.wasm, and the
# example apps' components into <repo>/target/examples/<name>.wasm.
#
# Usage: bash guest/build-all.sh [NAME...]      (from any directory)
#
# With no NAME, builds everything. A NAME is either a Rust guest (a crate in
# guest/ whose directory and package name are NAME and which has a binary or
# a cdylib, e.g. rust-conformance, embed-plugin) or a directory guest/NAME
# holding a build.sh (a non-Rust guest).
#
# Rust guests: one `cargo build --release --target wasm32-wasip2` of the guest
# workspace into <repo>/target/guest-build, then copied to target/guests.
# Non-Rust guests: `bash guest/<dir>/build.sh <repo>/target/guests`; each such
# script writes its own <name>.wasm files there.
#
# tests/build.rs runs this script from inside a cargo build, so the
# environment cargo gives build scripts is cleared first (see below).
set -euo pipefail

guest_dir="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd -- "$guest_dir/.." && pwd)"
out="$repo/target/guests"
# Example apps' components (the root spin.toml's kv-counter): their own
# directory, because every file in target/guests must have a test in
# tests/tests/guests.rs (foreach_guest!), and an example is tested where
# its app is served (host/lockd/tests/spin_kv.rs).
examples_out="$repo/target/examples"
example_guests=(kv-counter kv-counter-p3)
target=wasm32-wasip2

# --- Environment -----------------------------------------------------------
# tests/build.rs runs this script from inside a cargo build: see lib.sh.
source "$guest_dir/lib.sh"
clear_cargo_env
export CARGO_TARGET_DIR="$repo/target/guest-build"

# --- What to build -----------------------------------------------------------
# Rust guests: workspace members that produce a component (a bin or a cdylib).
# The plain libraries (the SDK guest/lockd-guest, guest/lockd-client-core)
# are skipped.
rust_guests=()
for manifest in "$guest_dir"/*/Cargo.toml; do
    dir="$(basename -- "$(dirname -- "$manifest")")"
    if [[ -f "$guest_dir/$dir/src/main.rs" ]] || grep -q '"cdylib"' "$manifest"; then
        rust_guests+=("$dir")
    fi
done
# Non-Rust guests: directories with a build.sh.
script_guests=()
for script in "$guest_dir"/*/build.sh; do
    if [[ -f "$script" ]]; then
        script_guests+=("$(basename -- "$(dirname -- "$script")")")
    fi
done

contains() {
    local needle="$1"
    shift
    local item
    for item in "$@"; do
        if [[ "$item" == "$needle" ]]; then return 0; fi
    done
    return 1
}

want_rust=()
want_script=()
if (($# == 0)); then
    want_rust=("${rust_guests[@]}")
    want_script=("${script_guests[@]}")
else
    for name in "$@"; do
        if contains "$name" "${rust_guests[@]}"; then
            want_rust+=("$name")
        elif contains "$name" "${script_guests[@]}"; then
            want_script+=("$name")
        else
            echo "build-all.sh: unknown guest '$name'" >&2
            echo "  Rust guests: ${rust_guests[*]}" >&2
            echo "  script guests: ${script_guests[*]:-(none)}" >&2
            exit 2
        fi
    done
fi

mkdir -p "$out" "$examples_out"

report() {
    local file="$1"
    printf '%-40s %9d bytes\n' "${file#"$repo"/}" "$(stat -c %s -- "$file")"
}

# --- Rust guests -------------------------------------------------------------
if ((${#want_rust[@]} > 0)); then
    # Add the target only when it is missing, so an offline machine that has
    # it already never calls out.
    sysroot="$(rustc --print sysroot)"
    if [[ ! -d "$sysroot/lib/rustlib/$target" ]]; then
        if command -v rustup > /dev/null; then
            rustup target add "$target" >&2
        else
            echo "build-all.sh: Rust target $target is not installed and rustup is missing" >&2
            exit 1
        fi
    fi

    packages=()
    for name in "${want_rust[@]}"; do packages+=(--package "$name"); done
    (cd -- "$guest_dir" && cargo build --release --target "$target" "${packages[@]}")

    built="$CARGO_TARGET_DIR/$target/release"
    for name in "${want_rust[@]}"; do
        # Binaries keep their dashes; a cdylib's file name uses underscores.
        src="$built/$name.wasm"
        [[ -f "$src" ]] || src="$built/${name//-/_}.wasm"
        if [[ ! -f "$src" ]]; then
            echo "build-all.sh: cargo produced no wasm for $name in $built" >&2
            exit 1
        fi
        dest="$out"
        if contains "$name" "${example_guests[@]}"; then dest="$examples_out"; fi
        # A new file renamed into place: a test reading the old one never
        # sees half a component, and a hard link to it is not written through.
        cp -- "$src" "$dest/$name.wasm.tmp"
        mv -f -- "$dest/$name.wasm.tmp" "$dest/$name.wasm"
        report "$dest/$name.wasm"
    done
fi

# --- Non-Rust guests ---------------------------------------------------------
for dir in "${want_script[@]}"; do
    marker="$(mktemp)"
    bash "$guest_dir/$dir/build.sh" "$out"
    # Report what this script wrote (anything newer than the marker). A
    # script that found its output up to date writes nothing and says so.
    while IFS= read -r -d '' file; do
        report "$file"
    done < <(find "$out" -maxdepth 1 -name '*.wasm' -newer "$marker" -print0 | sort -z)
    rm -f -- "$marker"
done

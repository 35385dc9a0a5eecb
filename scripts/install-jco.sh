#!/usr/bin/env bash
# Installs jco (npm @bytecodealliance/jco, pinned by tests/jco/package.json
# and package-lock.json) into <repo>/target/node-jco, for the portable tests
# (tests/tests/portable.rs runs a lockd-plugged component with `jco run`).
# Idempotent: does nothing when the installed tree came from the same lock
# file. Installs Node.js and npm from Debian first if they are missing (as the
# JavaScript guests' build scripts do). Prints the path of the jco executable
# on its last line. Runs from any cwd.
#
# Usage: bash scripts/install-jco.sh
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/guest/lib.sh"
clear_cargo_env

pins="$repo/tests/jco"
tools="$repo/target/node-jco"
jco="$tools/node_modules/.bin/jco"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt_install nodejs npm
fi

# Two test processes may install at once: one installs, the other waits.
mkdir -p "$repo/target"
exec 9>"$repo/target/.node-jco.lock"
flock 9

# `npm install` with our lock file, not `npm ci`: npm ci rejects a lock file
# that leaves out the optional packages of other platforms.
# pins.installed records which package.json and lock file the installed tree
# came from.
pins_now() { cat "$pins/package.json" "$pins/package-lock.json" 2>/dev/null; }
if [[ ! -x "$jco" ]] || ! cmp -s <(pins_now) "$tools/pins.installed"; then
    echo "install-jco: npm install @bytecodealliance/jco in $tools" >&2
    rm -rf "$tools"
    mkdir -p "$tools"
    cp "$pins/package.json" "$tools/"
    [[ -f "$pins/package-lock.json" ]] && cp "$pins/package-lock.json" "$tools/"
    (cd "$tools" && npm install --no-audit --no-fund --loglevel=error >&2)
    if [[ ! -f "$pins/package-lock.json" ]]; then
        # First install of a new pin: keep the lock file it produced.
        cp "$tools/package-lock.json" "$pins/package-lock.json"
    fi
    pins_now >"$tools/pins.installed"
fi
"$jco" --version >/dev/null
echo "$jco"

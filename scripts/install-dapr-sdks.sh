#!/usr/bin/env bash
# Installs Dapr's real SDKs for host/lockd/tests/dapr.rs, pinned:
#   - npm @dapr/dapr (tests/dapr/package.json and package-lock.json) into
#     <repo>/target/node-dapr
#   - PyPI dapr (tests/dapr/requirements.txt) into a venv, <repo>/target/venv-dapr
# Idempotent: does nothing when the installed trees came from the same pins.
# Installs Node.js, npm and python3-venv from Debian first if they are
# missing. Prints the node_modules directory and the venv's python, one a
# line, last. Runs from any cwd.
#
# Usage: bash scripts/install-dapr-sdks.sh
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/guest/lib.sh"
clear_cargo_env

pins="$repo/tests/dapr"
node_dir="$repo/target/node-dapr"
venv="$repo/target/venv-dapr"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt_install nodejs npm
fi
if ! command -v python3 >/dev/null; then
    apt_install python3 python3-venv
fi

# Two test processes may install at once: one installs, the other waits.
mkdir -p "$repo/target"
exec 9>"$repo/target/.dapr-sdks.lock"
flock 9

# npm: `npm install` with our lock file (npm ci rejects a lock file that
# leaves out other platforms' optional packages).
npm_pins() { cat "$pins/package.json" "$pins/package-lock.json" 2>/dev/null; }
if [[ ! -d "$node_dir/node_modules/@dapr/dapr" ]] || ! cmp -s <(npm_pins) "$node_dir/pins.installed"; then
    echo "install-dapr-sdks: npm install @dapr/dapr in $node_dir" >&2
    rm -rf "$node_dir"
    mkdir -p "$node_dir"
    cp "$pins/package.json" "$node_dir/"
    [[ -f "$pins/package-lock.json" ]] && cp "$pins/package-lock.json" "$node_dir/"
    (cd "$node_dir" && npm install --no-audit --no-fund --loglevel=error >&2)
    if [[ ! -f "$pins/package-lock.json" ]]; then
        # First install of a new pin: keep the lock file it produced.
        cp "$node_dir/package-lock.json" "$pins/package-lock.json"
    fi
    npm_pins >"$node_dir/pins.installed"
fi

# PyPI: a venv of its own.
if ! cmp -s "$pins/requirements.txt" "$venv/pins.installed" 2>/dev/null; then
    echo "install-dapr-sdks: pip install -r tests/dapr/requirements.txt in $venv" >&2
    rm -rf "$venv"
    if ! python3 -m venv "$venv" 2>/dev/null; then
        apt_install python3-venv
        rm -rf "$venv"
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$pins/requirements.txt" >&2
    cp "$pins/requirements.txt" "$venv/pins.installed"
fi
"$venv/bin/python" -c 'import dapr.clients' >/dev/null
echo "$node_dir/node_modules"
echo "$venv/bin/python"

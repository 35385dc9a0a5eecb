#!/usr/bin/env bash
# Usage: guest/python-conformance/build.sh OUT_DIR
#
# Builds the Python conformance guest with componentize-py into
# OUT_DIR/python-conformance.wasm (a wasi:cli command component, about 18 MB).
# Installs componentize-py into <repo>/target/venv-guests when it is missing.
# Does nothing when the output is newer than every input. Runs from any cwd.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
clear_cargo_env

NAME=python-conformance
COMPONENTIZE_PY_VERSION=0.25.1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_dir="${1:?usage: $0 OUT_DIR}"
mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"
out="$out_dir/$NAME.wasm"

inputs=(
    "$here/conformance.py"
    "$here/build.sh"
    "$repo/wit/lock.wit"
    "$repo/wit/deps/io/poll.wit"
    "$repo/guest/wit-command/command.wit"
    "$repo/guest/wit-command/deps/wasi-cli/cli.wit"
    "$repo/guest/wit-command/stage.sh"
)
exit_if_up_to_date "$NAME" "$repo/target/guest-build" "$out" "${inputs[@]}"

# --- tools -------------------------------------------------------------------

venv="$repo/target/venv-guests"
cpy="$venv/bin/componentize-py"
if ! "$cpy" --version 2>/dev/null | grep -qx "componentize-py $COMPONENTIZE_PY_VERSION"; then
    if ! command -v python3 >/dev/null; then
        apt_install python3 python3-venv
    fi
    python3 -c 'import sys; assert sys.version_info >= (3, 10), "componentize-py needs Python >= 3.10"'
    if [[ ! -x "$venv/bin/pip" ]]; then
        rm -rf "$venv"
        if ! python3 -m venv "$venv" 2>/dev/null; then
            apt_install python3-venv
            rm -rf "$venv"
            python3 -m venv "$venv"
        fi
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY_VERSION"
fi

# --- build -------------------------------------------------------------------
# Work in a scratch dir so that componentize-py sees only our module (it
# bundles the python path) and writes no __pycache__ into the source tree.
work="$repo/target/guest-build/$NAME"
rm -rf "$work"
mkdir -p "$work/src"
"$repo/guest/wit-command/stage.sh" "$work/wit"
cp "$here/conformance.py" "$work/src/"

echo "$NAME: componentize-py -> $out"
cd "$work"
# VIRTUAL_ENV would add the venv's site-packages (componentize-py itself) to
# the bundled python path.
env -u VIRTUAL_ENV "$cpy" -q -d "$work/wit" -w command \
    componentize conformance -p "$work/src" -o "$work/$NAME.wasm"
mv -f "$work/$NAME.wasm" "$out"
echo "$NAME: built $out ($(stat -c %s "$out") bytes)"

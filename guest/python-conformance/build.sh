#!/usr/bin/env bash
# Usage: guest/python-conformance/build.sh OUT_DIR
#
# Builds the Python conformance guest with componentize-py into
# OUT_DIR/python-conformance.wasm (a wasi:cli command component, about 18 MB).
# Installs componentize-py into <repo>/target/venv-guests when it is missing.
# Does nothing when the output is newer than every input. Runs from any cwd.
set -euo pipefail

# A cargo build script (tests/build.rs, through guest/build-all.sh) may call
# us: clear the environment cargo gives build scripts, as build-all.sh does,
# so that none of it leaks into the tools we start. Kept: CARGO_HOME, the
# registry/network settings and CARGO_MAKEFLAGS (the outer jobserver).
for var in $(compgen -e); do
    case "$var" in
        CARGO_HOME | CARGO_MAKEFLAGS | CARGO_NET_* | CARGO_HTTP_* | CARGO_REGISTRIES_* | CARGO_REGISTRY_*) ;;
        CARGO | CARGO_* | __CARGO_* | RUSTC | RUSTC_* | RUSTDOC | RUSTDOC_* | RUSTFLAGS | RUSTDOCFLAGS) unset "$var" ;;
        TARGET | HOST | OUT_DIR | OPT_LEVEL | PROFILE | DEBUG | NUM_JOBS) unset "$var" ;;
    esac
done

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
    "$repo/guest/wit-command/command.wit"
    "$repo/guest/wit-command/deps/wasi-cli/cli.wit"
    "$repo/guest/wit-command/stage.sh"
)
up_to_date() {
    [[ -f "$out" ]] || return 1
    local f
    for f in "${inputs[@]}"; do
        [[ "$f" -nt "$out" ]] && return 1
    done
    return 0
}
if up_to_date; then
    echo "$NAME: up to date ($out)"
    exit 0
fi
# One build of this guest at a time (two cargo builds may run build-all.sh at
# once); whoever waited finds the output up to date.
mkdir -p "$repo/target/guest-build"
exec 9>"$repo/target/guest-build/.$NAME.lock"
flock 9
if up_to_date; then
    echo "$NAME: up to date ($out)"
    exit 0
fi

# --- tools -------------------------------------------------------------------
apt_install() { # apt_install PKG...: installs the packages dpkg does not know
    local missing=() p
    for p in "$@"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "$NAME: apt-get install ${missing[*]}"
        # A fresh machine may have no package lists yet: update once, then retry.
        DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"; }
    fi
}

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

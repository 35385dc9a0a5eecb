#!/usr/bin/env bash
# Usage: guest/js-conformance/build.sh OUT_DIR
#
# Builds the JavaScript conformance guest with componentize-js into
# OUT_DIR/js-conformance.wasm (a wasi:cli command component, about 12 MB).
# Installs componentize-js (pinned by package.json / package-lock.json here)
# into <repo>/target/node-guests when it is missing. Does nothing when the
# output is newer than every input. Runs from any cwd.
#
# Never pass --aot to componentize-js: it downloads a binary from outside.
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

NAME=js-conformance

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_dir="${1:?usage: $0 OUT_DIR}"
mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"
out="$out_dir/$NAME.wasm"

inputs=(
    "$here/conformance.js"
    "$here/package.json"
    "$here/package-lock.json"
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
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt_install nodejs npm
fi

tools="$repo/target/node-guests"
cjs="$tools/node_modules/.bin/componentize-js"
# `npm install` with our lock file, not `npm ci`: npm ci rejects this lock
# because npm leaves the optional packages of other platforms out of it.
# lock.installed records which lock file the installed tree came from.
if [[ ! -x "$cjs" ]] || ! cmp -s "$here/package-lock.json" "$tools/lock.installed"; then
    echo "$NAME: npm install in $tools"
    rm -rf "$tools"
    mkdir -p "$tools"
    cp "$here/package.json" "$here/package-lock.json" "$tools/"
    (cd "$tools" && npm install --no-audit --no-fund --loglevel=error)
    cp "$here/package-lock.json" "$tools/lock.installed"
fi

# --- build -------------------------------------------------------------------
work="$repo/target/guest-build/$NAME"
rm -rf "$work"
mkdir -p "$work"
"$repo/guest/wit-command/stage.sh" "$work/wit"

echo "$NAME: componentize-js -> $out"
# -d http -d fetch-event: the lockd host links no wasi:http, so keep the
# engine from importing it.
# componentize-js mangles an absolute source path ("/work/x.js" is looked up
# as "ork/x.js"), so give it a path relative to the cwd.
cp "$here/conformance.js" "$work/"
cd "$work"
"$cjs" conformance.js --wit wit --world-name command \
    -d http -d fetch-event -o "$NAME.wasm"
mv -f "$work/$NAME.wasm" "$out"
echo "$NAME: built $out ($(stat -c %s "$out") bytes)"

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

source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
clear_cargo_env

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
    "$repo/wit/deps/io/poll.wit"
    "$repo/guest/wit-command/command.wit"
    "$repo/guest/wit-command/deps/wasi-cli/cli.wit"
    "$repo/guest/wit-command/stage.sh"
)
exit_if_up_to_date "$NAME" "$repo/target/guest-build" "$out" "${inputs[@]}"

# --- tools -------------------------------------------------------------------
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

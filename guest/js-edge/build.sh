#!/usr/bin/env bash
# Usage: guest/js-edge/build.sh OUT_DIR
#
# Builds the JavaScript edge function (edge.js) with componentize-js into
# OUT_DIR/js-edge.wasm: a wasi:http component (about 12 MB) that exports
# wasi:http/incoming-handler@0.2.10 through componentize-js's fetch-event
# support and imports lockd:lock. Uses the same node tools as
# guest/js-conformance (pinned by the package.json / package-lock.json
# there, installed once into <repo>/target/node-guests). Does nothing when
# the output is newer than every input. Runs from any cwd.
#
# Unlike js-conformance this keeps componentize-js's default features: no
# `-d http -d fetch-event`, because the fetch-event handler is the export.
# Never pass --aot to componentize-js: it downloads a binary from outside.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
clear_cargo_env

NAME=js-edge

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# The node tools are pinned in one place for every JavaScript guest.
pins="$repo/guest/js-conformance"
out_dir="${1:?usage: $0 OUT_DIR}"
mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"
out="$out_dir/$NAME.wasm"

inputs=(
    "$here/edge.js"
    "$here/build.sh"
    "$here/wit/edge.wit"
    "$here/wit/deps/wasi-http/http.wit"
    "$here/wit/deps/wasi-io/io.wit"
    "$here/wit/deps/wasi-clocks/clocks.wit"
    "$repo/wit/lock.wit"
    "$repo/wit/deps/io/poll.wit"
    "$pins/package.json"
    "$pins/package-lock.json"
)
exit_if_up_to_date "$NAME" "$repo/target/guest-build" "$out" "${inputs[@]}"

# --- tools -------------------------------------------------------------------
# The same steps as guest/js-conformance/build.sh, with the same
# package-lock.json into the same directory, so whichever script runs first
# installs the tools for both and the other finds them installed.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt_install nodejs npm
fi

tools="$repo/target/node-guests"
cjs="$tools/node_modules/.bin/componentize-js"
# `npm install` with the lock file, not `npm ci` (see js-conformance/build.sh).
# lock.installed records which lock file the installed tree came from.
if [[ ! -x "$cjs" ]] || ! cmp -s "$pins/package-lock.json" "$tools/lock.installed"; then
    echo "$NAME: npm install in $tools"
    rm -rf "$tools"
    mkdir -p "$tools"
    cp "$pins/package.json" "$pins/package-lock.json" "$tools/"
    (cd "$tools" && npm install --no-audit --no-fund --loglevel=error)
    cp "$pins/package-lock.json" "$tools/lock.installed"
fi

# The world exports wasi:http/incoming-handler@0.2.10 because that is what
# the engine implements; a newer componentize-js may move to another 0.2.x.
engine="$tools/node_modules/@bytecodealliance/componentize-js/lib/starlingmonkey_embedding.wasm"
if ! grep -qaF 'wasi:http/incoming-handler@0.2.10#handle' "$engine"; then
    echo "$NAME: the componentize-js engine no longer exports wasi:http/incoming-handler@0.2.10;" >&2
    echo "  re-extract guest/js-edge/wit/deps from $engine and update wit/edge.wit" >&2
    exit 1
fi

# --- build -------------------------------------------------------------------
work="$repo/target/guest-build/$NAME"
rm -rf "$work"
mkdir -p "$work"
# Stage a self-contained WIT directory: this guest's world and WASI packages
# plus a copy of the lockd:lock contract.
cp -R "$here/wit" "$work/wit"
mkdir -p "$work/wit/deps/lockd-lock" "$work/wit/deps/lockd-wasi-io"
cp "$repo/wit/lock.wit" "$work/wit/deps/lockd-lock/"
cp "$repo"/wit/deps/io/*.wit "$work/wit/deps/lockd-wasi-io/"

echo "$NAME: componentize-js -> $out"
# componentize-js mangles an absolute source path ("/work/x.js" is looked up
# as "ork/x.js"), so give it a path relative to the cwd.
cp "$here/edge.js" "$work/"
cd "$work"
"$cjs" edge.js --wit wit --world-name edge -o "$NAME.wasm"
mv -f "$work/$NAME.wasm" "$out"
echo "$NAME: built $out ($(stat -c %s "$out") bytes)"

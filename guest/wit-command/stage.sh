#!/usr/bin/env bash
# Usage: stage.sh DEST
#
# Assembles a self-contained WIT directory for the `lockd:conformance/command`
# world in DEST: command.wit, deps/wasi-cli/, deps/lockd-lock/lock.wit (a
# copy of the contract in wit/, which guests must not edit or duplicate by
# hand) and deps/lockd-wasi-io/ (the `wasi:io` release lock.wit uses, from
# wit/deps/io). Used by the Python and JavaScript conformance guests' build.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dest="$1"
rm -rf "$dest"
mkdir -p "$dest/deps/wasi-cli" "$dest/deps/lockd-lock" "$dest/deps/lockd-wasi-io"
cp "$here/command.wit" "$dest/"
cp "$here/deps/wasi-cli/cli.wit" "$dest/deps/wasi-cli/"
cp "$repo/wit/lock.wit" "$dest/deps/lockd-lock/"
cp "$repo"/wit/deps/io/*.wit "$dest/deps/lockd-wasi-io/"

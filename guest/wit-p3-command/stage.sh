#!/usr/bin/env bash
# Usage: stage.sh DEST
#
# Assembles a self-contained WIT directory for the `lockd:p3-command/command`
# world in DEST: command.wit, deps/wasi-cli/ and deps/wasi-clocks/ (subsets of
# WASI 0.3.0) and deps/lockd-lock/lock.wit (a copy of wit/p3/lock.wit, which
# guests must not edit or duplicate by hand). Used by guest/python-p3/build.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dest="$1"
rm -rf "$dest"
mkdir -p "$dest/deps/wasi-cli" "$dest/deps/wasi-clocks" "$dest/deps/lockd-lock"
cp "$here/command.wit" "$dest/"
cp "$here/deps/wasi-cli/cli.wit" "$dest/deps/wasi-cli/"
cp "$here/deps/wasi-clocks/clocks.wit" "$dest/deps/wasi-clocks/"
cp "$repo/wit/p3/lock.wit" "$dest/deps/lockd-lock/"

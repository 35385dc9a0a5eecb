#!/usr/bin/env bash
# Usage: guest/python-conformance/build.sh OUT_DIR
#
# Builds the Python conformance guest with componentize-py into
# OUT_DIR/python-conformance.wasm (a wasi:cli command component, about 18 MB).
# Installs componentize-py (lib.sh) into <repo>/target/venv-guests when it is missing.
# Does nothing when the output is newer than every input. Runs from any cwd.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
clear_cargo_env

NAME=python-conformance

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

componentize_py_build "$NAME" conformance "$here/conformance.py" "$repo/guest/wit-command/stage.sh" "$out"

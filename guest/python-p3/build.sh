#!/usr/bin/env bash
# Usage: guest/python-p3/build.sh OUT_DIR
#
# Builds the Python WASI 0.3 command guest with componentize-py into
# OUT_DIR/python-p3.wasm (a command exporting wasi:cli/run@0.3.0 on
# lockd:lock@0.2.0, about 21 MB).
# Installs componentize-py (lib.sh) into <repo>/target/venv-guests when it is missing.
# Does nothing when the output is newer than every input. Runs from any cwd.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
clear_cargo_env

NAME=python-p3

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_dir="${1:?usage: $0 OUT_DIR}"
mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"
out="$out_dir/$NAME.wasm"

inputs=(
    "$here/app.py"
    "$here/build.sh"
    "$repo/wit/p3/lock.wit"
    "$repo/guest/wit-p3-command/command.wit"
    "$repo/guest/wit-p3-command/deps/wasi-cli/cli.wit"
    "$repo/guest/wit-p3-command/deps/wasi-clocks/clocks.wit"
    "$repo/guest/wit-p3-command/stage.sh"
)
exit_if_up_to_date "$NAME" "$repo/target/guest-build" "$out" "${inputs[@]}"

componentize_py_build "$NAME" app "$here/app.py" "$repo/guest/wit-p3-command/stage.sh" "$out"

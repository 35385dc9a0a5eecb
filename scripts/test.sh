#!/usr/bin/env bash
# Runs every test: installs what is missing, then the whole workspace's tests,
# then REST fuzzing of a live server. The host tests compile every guest
# program first (tests/build.rs runs guest/build-all.sh), so this also proves
# each guest builds from source.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --workspace --no-fail-fast
bash scripts/rest-fuzz.sh

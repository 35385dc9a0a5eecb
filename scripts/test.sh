#!/usr/bin/env bash
# Runs every test: installs what is missing, then the whole workspace's tests,
# then REST fuzzing of a live server. The host tests compile every guest
# program first (tests/build.rs runs guest/build-all.sh), so this also proves
# each guest builds from source.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --workspace --no-fail-fast
# 50 examples per operation: about 2,200 cases in under seven minutes over the
# 24 operations (100 took eleven, and CI has fifty minutes for everything).
REST_FUZZ_EXAMPLES="${REST_FUZZ_EXAMPLES:-50}" bash scripts/rest-fuzz.sh

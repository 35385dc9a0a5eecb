#!/usr/bin/env bash
# Keeps the crates publishable (issue 39): the public API documents every
# item and its docs build without a warning, and every crate meant for users
# packages for crates.io.
#
# Usage: bash scripts/check-package.sh [--verify] [--allow-dirty]
#
#   --verify       also build each packaged crate from its .crate file, as
#                  `cargo publish` does. That compiles the whole dependency
#                  tree again, once per crate and with crates.io's default
#                  profile, so CI leaves it out; run it before a release.
#   --allow-dirty  package uncommitted changes (for a local run).
#
# Without --verify nothing is compiled from the packages, so a build input
# that a package would miss is caught elsewhere: the crates that build from
# files kept outside their directory (the WIT, docs/openapi.json) read
# copies of their own, and host/test-support/tests/packaged_copies.rs fails
# when a copy drifts.
set -euo pipefail
cd "$(dirname "$0")/.."

verify=--no-verify
package_flags=()
for arg in "$@"; do
    case "$arg" in
        --verify) verify= ;;
        --allow-dirty) package_flags+=(--allow-dirty) ;;
        *)
            echo "usage: bash scripts/check-package.sh [--verify] [--allow-dirty]" >&2
            exit 2
            ;;
    esac
done

start=$(date +%s)
# The crates meant for users. `cargo package --workspace` packages
# `publish = false` crates too (and fails on their path-only dependencies),
# so the test-only crates (the tests, the test support, the example, the
# benchmarks) are excluded by name, as cargo metadata lists them; their docs
# are nobody's API, so they are not built either.
unpublished=$(cargo metadata --no-deps --format-version 1 --locked | python3 -c '
import json, sys
for package in json.load(sys.stdin)["packages"]:
    if package["publish"] == []:
        print("--exclude", package["name"])
')
# Every library's public items are documented (each crate denies or warns
# on missing_docs), and no doc link is broken.
# shellcheck disable=SC2086 # one word per flag and name
RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc --workspace $unpublished --no-deps --locked
# The guest SDK, in the guest workspace (wasm32-wasip2), with its `p3` API.
(cd guest && RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc -p lockd-guest --no-deps --all-features --locked)
echo "check-package: cargo doc took $(( $(date +%s) - start )) s"

step=$(date +%s)
# shellcheck disable=SC2086 # one word per flag and name
cargo package --workspace $unpublished --locked ${verify:+"$verify"} "${package_flags[@]}"
# The guest SDK lives in the guest workspace (it builds for wasm32-wasip2
# only, which guest/.cargo/config.toml selects); the other guest crates are
# test programs and the lockd-client components, which are not published.
(cd guest && cargo package -p lockd-guest --locked ${verify:+"$verify"} "${package_flags[@]}")
echo "check-package: cargo package ${verify:-with verification} took $(( $(date +%s) - step )) s"

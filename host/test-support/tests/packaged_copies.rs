//! A crate published to crates.io carries only the files inside its own
//! directory, so the crates that build from files kept elsewhere in the
//! repository read a copy of their own instead: lockd-wasm and the guest SDK
//! (lockd-guest) compile the WIT from their `wit/`, and lockd-server serves
//! its `openapi.json`. These tests fail when a copy drifts from the
//! repository's file, naming the command that brings it up to date.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every file under `dir`, by its path relative to `dir`, with its bytes.
fn files_under(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let entries =
            fs::read_dir(&current).unwrap_or_else(|e| panic!("read {}: {e}", current.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes =
                    fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                let relative = path.strip_prefix(dir).expect("under dir").to_path_buf();
                files.insert(relative, bytes);
            }
        }
    }
    files
}

/// How the tree at `copy` differs from the one at `original`: one line per
/// file missing, extra or different. Empty when they are equal.
fn differences(original: &Path, copy: &Path) -> Vec<String> {
    let originals = files_under(original);
    let copies = files_under(copy);
    let mut found = Vec::new();
    for (path, bytes) in &originals {
        match copies.get(path) {
            None => found.push(format!("missing from the copy: {}", path.display())),
            Some(copied) if copied != bytes => found.push(format!("differs: {}", path.display())),
            Some(_) => {}
        }
    }
    for path in copies.keys().filter(|path| !originals.contains_key(*path)) {
        found.push(format!("only in the copy: {}", path.display()));
    }
    found
}

fn assert_same_tree(original: &str, copy: &str) {
    let repo = repo();
    let found = differences(&repo.join(original), &repo.join(copy));
    assert!(
        found.is_empty(),
        "{copy} is not a copy of {original}:\n  {}\nUpdate it from the repository root with: \
         rm -r {copy} && cp -r {original} {copy}",
        found.join("\n  ")
    );
}

#[test]
fn lockd_wasm_compiles_the_repository_wit() {
    assert_same_tree("wit", "host/wasm/wit");
}

#[test]
fn the_guest_sdk_compiles_the_repository_wit() {
    assert_same_tree("wit", "guest/lockd-guest/wit");
}

#[test]
fn lockd_server_serves_the_documented_openapi() {
    let repo = repo();
    let documented = fs::read(repo.join("docs/openapi.json")).expect("read docs/openapi.json");
    let served =
        fs::read(repo.join("host/server/openapi.json")).expect("read host/server/openapi.json");
    assert!(
        documented == served,
        "host/server/openapi.json is not a copy of docs/openapi.json. Update it from the \
         repository root with: cp docs/openapi.json host/server/openapi.json"
    );
}

/// The negative control: a changed, a missing and an extra file are each
/// reported, so a comparison that stopped seeing differences fails here.
#[test]
fn differences_are_found() {
    let original = tempfile::tempdir().expect("a temporary directory");
    let copy = tempfile::tempdir().expect("a temporary directory");
    for dir in [original.path(), copy.path()] {
        fs::create_dir(dir.join("deps")).expect("mkdir deps");
        fs::write(dir.join("same.wit"), "package a:b;").expect("write same.wit");
    }
    assert!(differences(original.path(), copy.path()).is_empty());

    fs::write(original.path().join("deps/changed.wit"), "one").expect("write");
    fs::write(copy.path().join("deps/changed.wit"), "two").expect("write");
    fs::write(original.path().join("deps/missing.wit"), "x").expect("write");
    fs::write(copy.path().join("extra.wit"), "x").expect("write");
    let mut found = differences(original.path(), copy.path());
    found.sort();
    assert_eq!(
        found,
        [
            "differs: deps/changed.wit",
            "missing from the copy: deps/missing.wit",
            "only in the copy: extra.wit",
        ]
    );
}

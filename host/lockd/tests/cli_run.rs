//! `lockd run` as a user runs it: exit codes and messages.

use std::process::Command;

fn lockd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lockd"))
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn success_exits_zero() {
    let out = lockd(&[
        "run",
        "--store",
        "memory",
        lockd_tests::RUST_CONFORMANCE,
        "--",
        "cli",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("ok 12"));
}

#[test]
fn guest_failure_is_propagated() {
    // Without its prefix argument the conformance guest calls exit(2); Rust's
    // std on wasip2 reports any non-zero exit as `exit(err)`, which is 1.
    let out = lockd(&["run", "--store", "memory", lockd_tests::RUST_CONFORMANCE]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("usage"), "{}", text(&out.stderr));
}

#[test]
fn trap_is_reported_with_nonzero_exit() {
    let out = lockd(&[
        "run",
        "--store",
        "memory",
        lockd_tests::RUST_GUARD_TRAP,
        "--",
        "g",
    ]);
    assert_eq!(out.status.code(), Some(lockd::run::TRAP_EXIT_CODE));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("error: the component trapped"), "{stderr}");
}

#[test]
fn missing_component_is_a_clear_error() {
    let out = lockd(&["run", "--store", "memory", "/nonexistent/x.wasm"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("loading component /nonexistent/x.wasm"),
        "{stderr}"
    );
}

#[test]
fn bad_store_spec_is_a_usage_error() {
    let out = lockd(&["run", "--store", "nosuch:x", lockd_tests::RUST_CONFORMANCE]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("redb:PATH"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn store_in_use_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.redb");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _held = rt.block_on(async { lockd_redb::open(&path).unwrap() });
    let spec = format!("redb:{}", path.display());
    let out = lockd(&[
        "run",
        "--store",
        &spec,
        lockd_tests::RUST_CONFORMANCE,
        "--",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("in use by another lockd process"),
        "{}",
        text(&out.stderr)
    );
}

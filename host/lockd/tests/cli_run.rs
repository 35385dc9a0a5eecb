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
        lockd_guest_tests::RUST_CONFORMANCE,
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
    let out = lockd(&[
        "run",
        "--store",
        "memory",
        lockd_guest_tests::RUST_CONFORMANCE,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("usage"), "{}", text(&out.stderr));
}

#[test]
fn trap_is_reported_with_nonzero_exit() {
    let out = lockd(&[
        "run",
        "--store",
        "memory",
        lockd_guest_tests::RUST_GUARD_TRAP,
        "--",
        "g",
    ]);
    assert_eq!(
        out.status.code(),
        Some(::lockd_components::run::TRAP_EXIT_CODE)
    );
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
    let out = lockd(&[
        "run",
        "--store",
        "nosuch:x",
        lockd_guest_tests::RUST_CONFORMANCE,
    ]);
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
        lockd_guest_tests::RUST_CONFORMANCE,
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

/// `lockd run` opens its service as `serve` and `up` do: lockd.toml's quotas
/// and store apply to it too (it used to ignore the file).
#[test]
fn run_honours_lockd_toml() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("from-config.redb");
    let config = dir.path().join("lockd.toml");
    std::fs::write(
        &config,
        format!(
            "store = \"redb:{}\"\n[namespaces]\ndefault_quota = 0\n",
            store.display()
        ),
    )
    .unwrap();
    let out = lockd(&[
        "run",
        "--config",
        config.to_str().unwrap(),
        lockd_guest_tests::RUST_CONFORMANCE,
        "--",
        "cli",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("FAIL 1: Denied"), "{stdout}");
    assert!(store.exists(), "the store named in lockd.toml was not used");
    // A quota refusal is logged for the operator.
    let stderr = text(&out.stderr);
    assert!(stderr.contains("lock refused by policy"), "{stderr}");
}

/// Logs: `--log-format json` writes one JSON object per line on stderr, and
/// a guest's trap is logged with the component's namespace.
#[test]
fn logs_are_json_lines_on_request() {
    let out = Command::new(env!("CARGO_BIN_EXE_lockd"))
        .args([
            "--log-format",
            "json",
            "run",
            "--store",
            "memory",
            "--namespace",
            "trapping",
            lockd_guest_tests::RUST_GUARD_TRAP,
            "--",
            "g",
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(::lockd_components::run::TRAP_EXIT_CODE)
    );
    let stderr = text(&out.stderr);
    let trap = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["message"] == "component trapped")
        .unwrap_or_else(|| panic!("no JSON trap line in:\n{stderr}"));
    assert_eq!(trap["level"], "ERROR", "{trap}");
    assert_eq!(trap["namespace"], "trapping", "{trap}");
    assert!(
        trap["trap"].as_str().is_some_and(|t| !t.is_empty()),
        "{trap}"
    );
}

/// A WASI 0.3 command (`wasi:cli/run@0.3.0`) on `lockd:lock@0.2.0`: `lockd
/// run` picks the engine with component-model async for it and calls its
/// `async` run.
#[test]
fn a_wasi_0_3_command_runs() {
    let out = lockd(&[
        "run",
        "--store",
        "memory",
        lockd_guest_tests::RUST_P3_CLI,
        "--",
        "p3-name",
        "async",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("granted "), "{stdout}");
}

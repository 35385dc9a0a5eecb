//! The example application runs as a program of its own, loading the plugin
//! built from guest/embed-plugin.

use std::process::Command;

#[test]
fn example_binary_runs_a_job_through_the_plugin() {
    let out = Command::new(env!("CARGO_BIN_EXE_lockd-example-embed"))
        .args([lockd_guest_tests::EMBED_PLUGIN, "42", "w1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("job 42 done with fencing token "),
        "{stdout}"
    );
}

#[test]
fn example_binary_explains_usage() {
    let out = Command::new(env!("CARGO_BIN_EXE_lockd-example-embed"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage"));
}

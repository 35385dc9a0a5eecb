//! `lockd lease grant | refresh | revoke | get` and `lockd lock --lease`
//! against a real `lockd serve`: a round trip in text and JSON, exit codes,
//! one-line errors, auth.

mod lockd_server;

use crate::lockd_server::{lockd, Run, Server};
use serde_json::{json, Value};

/// `lockd ARGS --server URL`.
fn cli(server: &Server, args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.extend(["--server", &server.url]);
    lockd(&all, &[])
}

fn assert_ok(run: &Run) {
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stderr.is_empty(), "{run:?}");
}

fn assert_fails(run: &Run, code: i32, needles: &[&str]) {
    assert_eq!(run.code, Some(code), "{run:?}");
    let line = run.one_stderr_line();
    assert!(line.starts_with("lockd: "), "{line}");
    for needle in needles {
        assert!(line.contains(needle), "{needle:?} not in {line:?}");
    }
}

#[test]
fn lease_round_trip() {
    let server = Server::start(&[]);
    let run = cli(&server, &["lease", "grant", "--ttl", "30s"]);
    assert_ok(&run);
    let id = run.stdout.trim().to_string();
    assert!(id.starts_with("lease-") && id.len() == 38, "{run:?}");
    assert_eq!(run.stdout.lines().count(), 1);

    for name in ["db", "cache"] {
        let run = cli(&server, &["lock", name, "--lease", &id]);
        assert_ok(&run);
        assert!(run.stdout.starts_with(&format!("acquired {name} token ")));
    }
    // The lease id owns the locks.
    let run = cli(&server, &["get", "db"]);
    assert_ok(&run);
    assert!(
        run.stdout.starts_with(&format!("db held by {id} ")),
        "{run:?}"
    );

    let run = cli(&server, &["lease", "get", &id]);
    assert_ok(&run);
    assert!(
        run.stdout.starts_with(&format!("{id} expires in "))
            && run
                .stdout
                .trim_end()
                .ends_with("(ttl 30.0s, persistent), locks: cache, db"),
        "{run:?}"
    );
    let before: Value = serde_json::from_str(
        cli(&server, &["lease", "get", &id, "--format", "json"])
            .stdout
            .trim(),
    )
    .unwrap();
    assert_eq!(before["locks"], json!(["cache", "db"]));
    assert_eq!(before["ttl_ms"], 30_000);

    std::thread::sleep(std::time::Duration::from_millis(20));
    let run = cli(&server, &["lease", "refresh", &id, "--format", "json"]);
    assert_ok(&run);
    let refreshed: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(refreshed["status"], "refreshed");
    assert!(refreshed["expires_at_ms"].as_u64() > before["expires_at_ms"].as_u64());
    let run = cli(&server, &["lease", "refresh", &id]);
    assert_ok(&run);
    assert!(
        run.stdout.starts_with(&format!("refreshed {id} expires ")),
        "{run:?}"
    );

    let run = cli(&server, &["lease", "revoke", &id]);
    assert_ok(&run);
    assert_eq!(run.stdout.trim(), format!("revoked {id}, released 2 locks"));
    let run = cli(&server, &["get", "db"]);
    assert_eq!((run.code, run.stdout.trim()), (Some(1), "db is free"));

    // The lease is gone: exit 1 and one line, from every lease command.
    for args in [
        vec!["lease", "get", &id],
        vec!["lease", "refresh", &id],
        vec!["lease", "revoke", &id],
        vec!["lock", "db", "--lease", &id],
    ] {
        let run = cli(&server, &args);
        assert_fails(&run, 1, &[&id, "is not live", "lockd lease grant"]);
    }
    // JSON shows the server's body, failures included.
    let run = cli(&server, &["lease", "get", &id, "--format", "json"]);
    assert_eq!(run.code, Some(1));
    let body: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(body["status"], "not_held");
}

#[test]
fn lease_namespaces_durability_and_usage() {
    let server = Server::start(&[]);
    let run = cli(
        &server,
        &[
            "lease",
            "grant",
            "--ttl",
            "1m",
            "--ephemeral",
            "--namespace",
            "ns",
            "--format",
            "json",
        ],
    );
    assert_ok(&run);
    let granted: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(granted["status"], "granted");
    let id = granted["lease_id"].as_str().unwrap();
    let run = cli(&server, &["lease", "get", id, "--namespace", "ns"]);
    assert_ok(&run);
    assert!(
        run.stdout.contains("(ttl 60.0s, ephemeral), no locks"),
        "{run:?}"
    );
    // Another namespace does not see it.
    assert_fails(&cli(&server, &["lease", "get", id]), 1, &["is not live"]);

    // Usage errors are clap's: exit 2.
    for args in [
        vec!["lease", "grant"],
        vec!["lease", "grant", "--ttl", "soon"],
        vec!["lock", "a", "--lease", id, "--ttl", "1s"],
        vec!["lock", "a", "--lease", id, "--owner", "o"],
        vec!["lock", "a", "--owner", "o"],
    ] {
        let run = cli(&server, &args);
        assert_eq!(run.code, Some(2), "{args:?}: {run:?}");
    }
    // A TTL over the server's limit: invalid_argument, exit 2.
    let run = cli(&server, &["lease", "grant", "--ttl", "30d"]);
    assert_fails(&run, 2, &["fix the arguments"]);
}

#[test]
fn lease_commands_send_the_token() {
    let server = Server::with_token("sesame");
    let run = cli(&server, &["lease", "grant", "--ttl", "30s"]);
    assert_fails(&run, 2, &["401 unauthorized"]);
    let run = lockd(
        &["lease", "grant", "--ttl", "30s", "--server", &server.url],
        &[("LOCKD_AUTH_TOKEN", "sesame")],
    );
    assert_ok(&run);
    let id = run.stdout.trim();
    let run = cli(&server, &["lease", "revoke", id, "--auth-token", "sesame"]);
    assert_ok(&run);
    assert_eq!(run.stdout.trim(), format!("revoked {id}, released 0 locks"));
}

//! The CLI of shared locks and semaphores against a real `lockd serve`:
//! `lockd lock --shared`, `lockd get` and `lockd ls` of a shared name,
//! `lockd sem acquire | release | extend | get`, `lockd exec --shared`, and
//! `lockd get` and `lockd lock` during a lock-delay, with their exit codes
//! (docs/reference.md#the-cli-client).

mod lockd_server;

use crate::lockd_server::{lockd, Run, Server};
use serde_json::Value;

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

/// Asserts exit `code` and one stderr line containing every needle.
fn assert_fails(run: &Run, code: i32, needles: &[&str]) {
    assert_eq!(run.code, Some(code), "{run:?}");
    let line = run.one_stderr_line();
    for needle in needles {
        assert!(line.contains(needle), "{needle:?} not in {line:?}");
    }
}

#[test]
fn shared_locks_in_lock_get_and_ls() {
    let server = Server::start(&[]);
    for owner in ["a", "b"] {
        let run = cli(
            &server,
            &["lock", "doc", "--shared", "--owner", owner, "--ttl", "30s"],
        );
        assert_ok(&run);
        assert!(
            run.stdout.starts_with("acquired doc shared token "),
            "{}",
            run.stdout
        );
    }
    let busy = cli(&server, &["lock", "doc", "--owner", "w", "--ttl", "30s"]);
    assert_fails(&busy, 1, &["doc is busy: held by \"b\""]);
    let under_lease = cli(&server, &["lock", "doc", "--shared", "--lease", "x"]);
    assert_eq!(under_lease.code, Some(2), "{under_lease:?}");

    let get = cli(&server, &["get", "doc"]);
    assert_ok(&get);
    let lines: Vec<&str> = get.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", get.stdout);
    assert!(
        lines[0].starts_with("doc held shared by a token "),
        "{}",
        get.stdout
    );
    assert!(
        lines[1].starts_with("doc held shared by b token "),
        "{}",
        get.stdout
    );
    assert!(lines[1].ends_with("s (persistent)"), "{}", get.stdout);
    let json: Value = serde_json::from_str(
        cli(&server, &["get", "doc", "--format", "json"])
            .stdout
            .trim(),
    )
    .unwrap();
    assert_eq!(json["mode"], "shared");
    assert_eq!(json["holders"].as_array().unwrap().len(), 2);

    assert_ok(&cli(
        &server,
        &["lock", "solo", "--owner", "s", "--ttl", "30s"],
    ));
    let ls = cli(&server, &["ls"]);
    assert_ok(&ls);
    let rows: Vec<Vec<&str>> = ls
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0][..4],
        ["NAME", "OWNER", "TOKEN", "MODE"],
        "{}",
        ls.stdout
    );
    assert_eq!(
        (rows[1][0], rows[1][3]),
        ("doc", "shared(2)"),
        "{}",
        ls.stdout
    );
    assert_eq!(
        (rows[2][0], rows[2][3]),
        ("solo", "exclusive"),
        "{}",
        ls.stdout
    );
}

#[test]
fn sem_commands_end_to_end() {
    let server = Server::start(&[]);
    let acquire = |owner: &str, permits: &str| {
        cli(
            &server,
            &[
                "sem",
                "acquire",
                "pool",
                "--permits",
                permits,
                "--owner",
                owner,
                "--ttl",
                "30s",
            ],
        )
    };
    let a = acquire("a", "2");
    assert_ok(&a);
    assert!(
        a.stdout
            .starts_with("acquired a permit of pool (2 permits) token "),
        "{}",
        a.stdout
    );
    assert_ok(&acquire("b", "2"));
    assert_fails(&acquire("c", "2"), 1, &["pool is busy"]);
    assert_fails(&acquire("c", "3"), 2, &["invalid argument"]);
    assert_fails(&acquire("c", "0"), 2, &["permits is 0"]);
    assert_fails(&acquire("c", "65537"), 2, &["permits is 65537"]);

    let get = cli(&server, &["sem", "get", "pool"]);
    assert_ok(&get);
    let lines: Vec<&str> = get.stdout.lines().collect();
    assert_eq!(
        lines[0], "pool: 2 of 2 permits held, 0 waiting",
        "{}",
        get.stdout
    );
    assert!(lines[1].starts_with("  a token "), "{}", get.stdout);
    assert!(lines[2].starts_with("  b token "), "{}", get.stdout);
    assert_eq!(lines.len(), 3);
    let plain = cli(&server, &["get", "pool"]);
    assert!(
        plain
            .stdout
            .starts_with("pool held a permit (of 2) by a token "),
        "{}",
        plain.stdout
    );

    let extend = cli(
        &server,
        &["sem", "extend", "pool", "--owner", "a", "--ttl", "1m"],
    );
    assert_ok(&extend);
    assert!(extend
        .stdout
        .starts_with("extended a permit of pool token "));
    assert_fails(
        &cli(&server, &["sem", "release", "pool", "--owner", "z"]),
        1,
        &["held by another owner"],
    );
    let release = cli(&server, &["sem", "release", "pool", "--owner", "a"]);
    assert_ok(&release);
    assert_eq!(release.stdout.trim(), "released a permit of pool");
    assert_ok(&acquire("c", "2"));

    // A name that is no semaphore, and one nobody holds.
    assert_ok(&cli(
        &server,
        &["lock", "solo", "--owner", "s", "--ttl", "30s"],
    ));
    assert_fails(
        &cli(&server, &["sem", "get", "solo"]),
        1,
        &["solo is not a semaphore: it is held exclusive by \"s\""],
    );
    let free = cli(&server, &["sem", "get", "none"]);
    assert_eq!(free.code, Some(1), "{free:?}");
    assert_eq!(free.stdout.trim(), "none: no permit held");
}

#[cfg(unix)]
#[test]
fn exec_shared_runs_beside_shared_holders_only() {
    let server = Server::start(&[]);
    assert_ok(&cli(
        &server,
        &[
            "lock", "doc", "--shared", "--owner", "reader", "--ttl", "30s",
        ],
    ));
    // `--server` before the `--` that starts CMD.
    let exec = |mode: &[&str]| {
        let mut args = vec!["exec", "doc", "--server", &server.url, "--wait", "0"];
        args.extend_from_slice(mode);
        args.extend(["--", "sh", "-c", "exit 7"]);
        lockd(&args, &[])
    };
    let shared = exec(&["--shared"]);
    assert_eq!(shared.code, Some(7), "{shared:?}");
    let exclusive = exec(&[]);
    assert_eq!(exclusive.code, Some(75), "{exclusive:?}");
    assert!(exclusive.stderr.contains("doc is busy"), "{exclusive:?}");
}

/// A second of delay: room for the three commands that must run inside it on
/// a busy machine.
#[test]
fn get_and_lock_during_a_lock_delay() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("lockd.toml"),
        "[namespaces]\ndefault_lock_delay_ms = 1000\n",
    )
    .unwrap();
    let server = Server::start_in(Some(dir.path()), &["--store", "memory"], &[]);
    assert_ok(&cli(
        &server,
        &["lock", "x", "--owner", "a", "--ttl", "30s"],
    ));
    assert_ok(&cli(&server, &["force-unlock", "x"]));
    let get = cli(&server, &["get", "x"]);
    assert_eq!(get.code, Some(1), "{get:?}");
    assert!(
        get.stdout
            .starts_with("x is free, held back by a lock-delay until "),
        "{}",
        get.stdout
    );
    assert!(get.stdout.trim_end().ends_with("s)"), "{}", get.stdout);
    assert_fails(
        &cli(&server, &["lock", "x", "--owner", "b", "--ttl", "30s"]),
        1,
        &["x is busy"],
    );
    // Waiting through the delay gets it.
    assert_ok(&cli(
        &server,
        &["lock", "x", "--owner", "b", "--ttl", "30s", "--wait", "5s"],
    ));
}

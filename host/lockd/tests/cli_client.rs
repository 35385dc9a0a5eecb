//! The client subcommands (`lockd lock | unlock | extend | get | ls`) against
//! a real `lockd serve`, and `serve` / `up` as a user starts them: output in
//! both formats, exit codes 0/1/2/3, one-line errors.

mod lockd_server;

use std::time::{Duration, Instant};

use crate::lockd_server::{closed_port, lockd, Run, Server};
use ::lockd_server::auth::{digest, to_hex};
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

/// Asserts exit `code` and one stderr line containing every needle; returns
/// the line.
fn assert_fails(run: &Run, code: i32, needles: &[&str]) -> String {
    assert_eq!(run.code, Some(code), "{run:?}");
    let line = run.one_stderr_line();
    assert!(line.starts_with("lockd: "), "{line}");
    for needle in needles {
        assert!(line.contains(needle), "{needle:?} not in {line:?}");
    }
    line.to_string()
}

fn json(run: &Run) -> Value {
    serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {run:?}"))
}

#[test]
fn text_output_of_every_subcommand() {
    let server = Server::start(&[]);

    let run = cli(&server, &["lock", "job/1", "--owner", "w1", "--ttl", "10s"]);
    assert_ok(&run);
    let words: Vec<&str> = run.stdout.split_whitespace().collect();
    assert_eq!(
        &words[..3],
        ["acquired", "job/1", "token"],
        "{}",
        run.stdout
    );
    let token: u64 = words[3].parse().unwrap();
    assert_eq!(words[4], "expires");
    // RFC 3339, UTC, milliseconds.
    let expires = words[5];
    assert!(
        expires.len() == 24 && expires.ends_with('Z') && expires.as_bytes()[10] == b'T',
        "{expires}"
    );
    assert_eq!(run.stdout.lines().count(), 1);

    let run = cli(&server, &["get", "job/1"]);
    assert_ok(&run);
    let line = run.stdout.trim_end();
    assert!(
        line.starts_with(&format!("job/1 held by w1 token {token} expires in ")),
        "{line}"
    );
    assert!(line.ends_with("s (persistent)"), "{line}");
    let secs: f64 = line
        .rsplit(" expires in ")
        .next()
        .unwrap()
        .split('s')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((5.0..=10.0).contains(&secs), "{line}");

    let run = cli(
        &server,
        &["extend", "job/1", "--owner", "w1", "--ttl", "1h30m"],
    );
    assert_ok(&run);
    assert!(
        run.stdout
            .starts_with(&format!("extended job/1 token {token} expires ")),
        "{}",
        run.stdout
    );
    let run = cli(&server, &["get", "job/1"]);
    assert!(run.stdout.contains("expires in 539"), "{}", run.stdout);

    let run = cli(
        &server,
        &[
            "lock",
            "job/2",
            "--owner",
            "w2",
            "--ttl",
            "60000",
            "--ephemeral",
        ],
    );
    assert_ok(&run);
    let run = cli(&server, &["get", "job/2"]);
    assert!(
        run.stdout.trim_end().ends_with("(ephemeral)"),
        "{}",
        run.stdout
    );

    let run = cli(&server, &["ls"]);
    assert_ok(&run);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", run.stdout);
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "OWNER",
            "TOKEN",
            "MODE",
            "HELD",
            "EXPIRES",
            "WAITERS",
            "DURABILITY"
        ]
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(row[..3], ["job/1", "w1", token.to_string().as_str()]);
    assert_eq!(row[3], "exclusive");
    assert!(row[4].ends_with('s'), "held for: {}", row[4]);
    assert_eq!(row[5], "in");
    assert_eq!(row[7], "0", "waiters");
    assert_eq!(row[8], "persistent");
    assert!(lines[2].starts_with("job/2 "), "{}", run.stdout);

    let run = cli(
        &server,
        &[
            "unlock",
            "job/1",
            "--owner",
            "w1",
            "--token",
            &token.to_string(),
        ],
    );
    assert_ok(&run);
    assert_eq!(run.stdout, "unlocked job/1\n");

    let run = cli(&server, &["get", "job/1"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.stdout, "job/1 is free\n");
    assert!(run.stderr.is_empty(), "{run:?}");
}

#[test]
fn json_output_is_the_server_body() {
    let server = Server::start(&[]);
    let j = |args: &[&str], code: i32| {
        let mut all = args.to_vec();
        all.extend(["--format", "json"]);
        let run = cli(&server, &all);
        assert_eq!(run.code, Some(code), "{run:?}");
        assert_eq!(run.stdout.lines().count(), 1, "{run:?}");
        json(&run)
    };
    let acquired = j(&["lock", "a", "--owner", "o", "--ttl", "1m"], 0);
    assert_eq!(acquired["status"], "acquired");
    let token = acquired["fencing_token"].as_u64().unwrap();
    assert!(acquired["expires_at_ms"].as_u64().unwrap() > 0);

    let busy = j(&["lock", "a", "--owner", "x", "--ttl", "1m"], 1);
    assert_eq!(busy["status"], "busy");
    assert_eq!(busy["owner"], "o");

    let found = j(&["get", "a"], 0);
    assert_eq!(found["status"], "found");
    assert_eq!(found["fencing_token"].as_u64(), Some(token));
    assert_eq!(found["durability"], "persistent");

    let extended = j(&["extend", "a", "--owner", "o", "--ttl", "2m"], 0);
    assert_eq!(extended["status"], "extended");
    assert_eq!(extended["fencing_token"].as_u64(), Some(token));

    let listed = j(&["ls", "--prefix", "a"], 0);
    assert_eq!(listed["status"], "found");
    assert_eq!(listed["locks"][0]["name"], "a");

    let not_owner = j(&["unlock", "a", "--owner", "x"], 1);
    assert_eq!(not_owner["status"], "not_owner");
    assert_eq!(j(&["unlock", "a", "--owner", "o"], 0)["status"], "unlocked");
    assert_eq!(j(&["unlock", "a", "--owner", "o"], 1)["status"], "not_held");
    assert_eq!(j(&["get", "a"], 1)["status"], "not_found");
    assert_eq!(j(&["ls"], 0)["locks"], serde_json::json!([]));
}

#[test]
fn lock_level_failures_exit_1() {
    let server = Server::start(&[]);
    assert_ok(&cli(&server, &["lock", "x", "--owner", "a", "--ttl", "1m"]));

    let run = cli(&server, &["lock", "x", "--owner", "b", "--ttl", "1m"]);
    assert_fails(&run, 1, &["x is busy", "\"a\"", "--wait"]);
    assert!(run.stdout.is_empty());

    let run = cli(&server, &["unlock", "x", "--owner", "b"]);
    assert_fails(&run, 1, &["another owner", "--owner"]);
    let run = cli(&server, &["unlock", "x", "--owner", "a", "--token", "1"]);
    assert_fails(&run, 1, &["another fencing token"]);
    let run = cli(&server, &["extend", "x", "--owner", "b", "--ttl", "1s"]);
    assert_fails(&run, 1, &["another owner"]);
    let run = cli(&server, &["extend", "free", "--owner", "a", "--ttl", "1s"]);
    assert_fails(&run, 1, &["free is not held", "lockd lock"]);
    let run = cli(&server, &["unlock", "free", "--owner", "a"]);
    assert_fails(&run, 1, &["not held"]);
}

#[test]
fn wait_flag_queues_and_times_out() {
    let server = Server::start(&[]);
    // Long enough for the next command to start and queue before the
    // expiry, on a busy machine too.
    assert_ok(&cli(&server, &["lock", "w", "--owner", "a", "--ttl", "2s"]));
    // Granted when the lease runs out.
    let started = Instant::now();
    let run = cli(
        &server,
        &["lock", "w", "--owner", "b", "--ttl", "1m", "--wait", "10s"],
    );
    assert_ok(&run);
    assert!(started.elapsed() < Duration::from_secs(9));
    // Refused after the wait.
    let started = Instant::now();
    let run = cli(
        &server,
        &[
            "lock", "w", "--owner", "c", "--ttl", "1m", "--wait", "250ms",
        ],
    );
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_fails(&run, 1, &["busy", "\"b\""]);
}

#[test]
fn namespaces_and_prefixes() {
    let server = Server::start(&[]);
    for (ns, name) in [
        ("a", "job/1"),
        ("a", "job/2"),
        ("a", "other"),
        ("b", "job/1"),
    ] {
        assert_ok(&cli(
            &server,
            &[
                "lock",
                name,
                "--owner",
                ns,
                "--ttl",
                "1m",
                "--namespace",
                ns,
            ],
        ));
    }
    let run = cli(&server, &["ls", "--namespace", "a", "--prefix", "job/"]);
    assert_ok(&run);
    let names: Vec<&str> = run
        .stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(names, ["job/1", "job/2"]);
    let run = cli(&server, &["get", "job/1", "--namespace", "b"]);
    assert!(run.stdout.contains("held by b "), "{run:?}");
    let run = cli(&server, &["get", "job/1"]);
    assert_eq!(run.code, Some(1));
    let run = cli(&server, &["ls"]);
    assert_ok(&run);
    assert_eq!(run.stdout, "no locks held in namespace \"default\"\n");
    let run = cli(
        &server,
        &["ls", "--namespace", "a b/é", "--prefix", "x&y=z"],
    );
    assert_ok(&run);
}

#[test]
fn usage_and_invalid_arguments_exit_2() {
    let server = Server::start(&[]);
    for bad in ["10x", "1.5s", "", "30m1h", "-1s"] {
        let ttl = format!("--ttl={bad}");
        let run = cli(&server, &["lock", "x", "--owner", "o", &ttl]);
        assert_eq!(run.code, Some(2), "{bad}: {run:?}");
        assert!(run.stderr.contains("invalid duration"), "{bad}: {run:?}");
    }
    let run = cli(
        &server,
        &["lock", "x", "--owner", "o", "--ttl", "1s", "--wait", "soon"],
    );
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stderr.contains("500ms"), "{run:?}");

    // clap usage errors.
    for args in [
        &["lock", "x", "--ttl", "1s"][..],
        &["lock", "x", "--owner", "o"],
        &["unlock", "x"],
        &["get"],
        &["ls", "--format", "yaml"],
        &["unlock", "x", "--owner", "o", "--token", "-3"],
        &["nosuch"],
    ] {
        let run = cli(&server, args);
        assert_eq!(run.code, Some(2), "{args:?}: {run:?}");
    }

    // Refused by the server's limits.
    let long = "n".repeat(513);
    let run = cli(&server, &["lock", &long, "--owner", "o", "--ttl", "1s"]);
    assert_fails(&run, 2, &["name is 513 bytes, over the limit of 512 bytes"]);
    let run = cli(&server, &["lock", "x", "--owner", "o", "--ttl", "0"]);
    assert_fails(&run, 2, &["ttl must be at least 1 ms"]);
    let run = cli(&server, &["lock", "x", "--owner", "o", "--ttl", "25h"]);
    assert_fails(&run, 2, &["over the maximum"]);
    let run = cli(&server, &["get", "x", "--namespace", ""]);
    assert_fails(&run, 2, &["namespace must not be empty"]);
    // The JSON body is printed even so.
    let run = cli(
        &server,
        &[
            "lock", "x", "--owner", "o", "--ttl", "0", "--format", "json",
        ],
    );
    assert_eq!(run.code, Some(2));
    assert_eq!(json(&run)["status"], "invalid_argument");

    // A server URL the client cannot use.
    let run = lockd(&["get", "x", "--server", "ftp://127.0.0.1:1"], &[]);
    assert_fails(
        &run,
        2,
        &[
            "--server",
            "\"ftp://127.0.0.1:1\", is not an http:// or https:// URL",
        ],
    );
}

#[test]
fn denied_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("quota.toml"),
        "[namespaces]\ndefault_quota = 1\n",
    )
    .unwrap();
    let server = Server::start_in(
        Some(dir.path()),
        &["--store", "memory", "--config", "quota.toml"],
        &[],
    );
    assert_ok(&cli(&server, &["lock", "a", "--owner", "o", "--ttl", "1m"]));
    let run = cli(&server, &["lock", "b", "--owner", "o", "--ttl", "1m"]);
    assert_fails(&run, 2, &["denied", "quota"]);
}

#[test]
fn auth_failures_exit_2_and_the_token_comes_from_flag_or_env() {
    let server = Server::start(&["--auth-token", "tok"]);
    let run = cli(&server, &["get", "x"]);
    assert_fails(&run, 2, &["401", "--auth-token", "LOCKD_AUTH_TOKEN"]);
    let run = cli(&server, &["ls", "--auth-token", "nope"]);
    assert_fails(&run, 2, &["401", "wrong"]);

    let run = cli(
        &server,
        &[
            "lock",
            "x",
            "--owner",
            "o",
            "--ttl",
            "1m",
            "--auth-token",
            "tok",
        ],
    );
    assert_ok(&run);
    let with_env = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--server", &server.url]);
        lockd(&all, &[("LOCKD_AUTH_TOKEN", "tok")])
    };
    assert_ok(&with_env(&["get", "x"]));
    assert_ok(&with_env(&["ls"]));
    assert_ok(&with_env(&["extend", "x", "--owner", "o", "--ttl", "1m"]));
    assert_ok(&with_env(&["unlock", "x", "--owner", "o"]));
    // The flag wins over the environment.
    let mut args = vec!["get", "x", "--auth-token", "bad", "--server", &server.url];
    let run = lockd(&args, &[("LOCKD_AUTH_TOKEN", "tok")]);
    assert_fails(&run, 2, &["401"]);
    args[3] = "tok";
    assert_eq!(lockd(&args, &[("LOCKD_AUTH_TOKEN", "bad")]).code, Some(1));
}

#[test]
fn unreachable_server_exits_3() {
    let port = closed_port();
    let url = format!("http://127.0.0.1:{port}");
    for args in [
        &["lock", "x", "--owner", "o", "--ttl", "1s"][..],
        &["unlock", "x", "--owner", "o"],
        &["extend", "x", "--owner", "o", "--ttl", "1s"],
        &["get", "x"],
        &["ls"],
        &["get", "x", "--format", "json"],
    ] {
        let mut all = args.to_vec();
        all.extend(["--server", &url]);
        let run = lockd(&all, &[]);
        let line = assert_fails(&run, 3, &[]);
        assert_eq!(
            line,
            format!(
                "lockd: cannot reach the server at {url} (connection refused); \
                 start it with 'lockd serve' or set --server / LOCKD_SERVER"
            )
        );
        assert!(run.stdout.is_empty());
    }
    // The same through LOCKD_SERVER, given without a scheme.
    let run = lockd(
        &["get", "x"],
        &[("LOCKD_SERVER", &format!("127.0.0.1:{port}"))],
    );
    assert_fails(&run, 3, &[&url, "connection refused"]);
}

#[test]
fn a_server_that_is_not_lockd_exits_3() {
    // Something answering HTTP without lockd's JSON.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let responder = std::thread::spawn(move || {
        use std::io::{Read as _, Write as _};
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let _ = s.write_all(
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 7\r\nConnection: close\r\n\r\nupstream",
        );
    });
    let run = lockd(&["get", "x", "--server", &format!("http://{addr}")], &[]);
    assert_fails(&run, 3, &["502", "LOCKD_SERVER"]);
    responder.join().unwrap();
}

#[test]
fn lockd_server_env_selects_the_server() {
    let server = Server::start(&[]);
    let env = [("LOCKD_SERVER", server.url.as_str())];
    assert_ok(&lockd(&["lock", "e", "--owner", "o", "--ttl", "1m"], &env));
    let run = lockd(&["get", "e"], &env);
    assert_ok(&run);
    assert!(run.stdout.starts_with("e held by o "), "{run:?}");
    // --server wins over the environment.
    let closed = format!("http://127.0.0.1:{}", closed_port());
    let run = lockd(
        &["get", "e", "--server", &server.url],
        &[("LOCKD_SERVER", &closed)],
    );
    assert_ok(&run);
    let run = lockd(&["get", "e", "--server", &closed], &env);
    assert_eq!(run.code, Some(3));
}

#[test]
fn serve_takes_its_store_from_flag_config_or_default() {
    let dir = tempfile::tempdir().unwrap();
    // The default: .lockd/locks.redb under the working directory.
    let server = Server::start_in(Some(dir.path()), &[], &[]);
    assert_ok(&cli(&server, &["lock", "d", "--owner", "o", "--ttl", "1m"]));
    drop(server);
    assert!(dir.path().join(".lockd/locks.redb").exists());

    // `store` in ./lockd.toml.
    std::fs::write(
        dir.path().join("lockd.toml"),
        "store = \"redb:from-config.redb\"\n",
    )
    .unwrap();
    let server = Server::start_in(Some(dir.path()), &[], &[]);
    drop(server);
    assert!(dir.path().join("from-config.redb").exists());

    // The flag wins over the config.
    let server = Server::start_in(Some(dir.path()), &["--store", "redb:from-flag.redb"], &[]);
    drop(server);
    assert!(dir.path().join("from-flag.redb").exists());

    // A bad store in the config is a clear error.
    std::fs::write(dir.path().join("lockd.toml"), "store = \"bogus\"\n").unwrap();
    let run = lockd_in(dir.path(), &["serve", "--listen", "127.0.0.1:0"]);
    assert_fails(&run, 2, &["`store` in lockd.toml", "redb:PATH"]);
    // So is a missing config, and a bad flag.
    let run = lockd_in(dir.path(), &["serve", "--config", "missing.toml"]);
    assert_fails(&run, 2, &["missing.toml"]);
    let run = lockd_in(dir.path(), &["serve", "--store", "bogus"]);
    assert_eq!(run.code, Some(2));
    assert!(run.stderr.contains("redb:PATH"), "{run:?}");
}

fn lockd_in(dir: &std::path::Path, args: &[&str]) -> Run {
    lockd_server::lockd_in_dir(Some(dir), args, &[])
}

#[test]
fn serve_stops_on_sigterm() {
    let mut server = Server::start(&[]);
    let status = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = server.wait_exit();
    assert_eq!(status.code(), Some(0), "{status}");
}

#[test]
fn up_with_a_failing_build_exits_2() {
    let run = lockd(&["up", "--build", "-f", "/nonexistent/spin.toml"], &[]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stderr.starts_with("lockd: "), "{run:?}");
}

#[test]
fn a_rate_limited_call_exits_5_with_retry_after() {
    const TOKEN: &str = "ci-7d3f1b9a5c2e4d6f8a0b";
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[[auth.tokens]]\nname = \"ci\"\nsha256 = {:?}\nnamespaces = [\"*\"]\nrole = \"locker\"\n\
         rate_per_sec = 0.05\nburst = 1\n",
        to_hex(&digest(TOKEN))
    );
    std::fs::write(dir.path().join("lockd.toml"), config).unwrap();
    let server = Server::start_in(Some(dir.path()), &["--store", "memory"], &[]);
    let get = ["get", "x", "--auth-token", TOKEN];
    // The burst of one: answered (x is free: exit 1).
    assert_eq!(cli(&server, &get).code, Some(1));
    let run = cli(&server, &get);
    let line = assert_fails(
        &run,
        5,
        &[
            "rate limiting this token (429)",
            "nothing was done, retry in",
        ],
    );
    // A refill every 20 s: Retry-After says so, in whole seconds.
    let seconds: u64 = line
        .split("retry in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After in {line}"));
    assert!((1..=20).contains(&seconds), "{line}");
    // The token never reaches the message.
    assert!(!line.contains(TOKEN), "{line}");
}

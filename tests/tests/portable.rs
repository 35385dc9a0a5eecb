//! Guests composed with `lockd plug` on hosts that know nothing of lockd
//! (issue 13, docs/guests.md#other-hosts), against a live `lockd serve` on the redb
//! store:
//!
//! - `stock-host run` (this package's `src/bin/stock-host.rs`, wasmtime with
//!   stock WASI 0.2 and wasi:http only, the equivalent of
//!   `wasmtime run -S http`): the Rust, Python, JavaScript and C conformance
//!   guests pass their 12 steps, and the server's REST API shows what each
//!   left held, in the namespace given by `LOCKD_NAMESPACE`; `rust-claims`
//!   passes its shared-lock, semaphore, hold and election steps, and REST
//!   shows the holders, permits and leader its `leave` mode left;
//! - `stock-host serve` (`wasmtime serve -Scli`): the composed `edge-jobs`
//!   as a `wasi:http/proxy` component, 20 simultaneous `POST /jobs/1`, one
//!   200 and 19 409s, and `lockd ls` shows the job lock while it runs;
//! - `jco run` in Node.js (jco installed by `scripts/install-jco.sh`): the
//!   composed Rust conformance guest passes.
//!
//! The `lockd` binary (server, `plug` and `ls`) is built by
//! `cargo build -p lockd --bin lockd` once per test process: this package
//! cannot name another package's binary, and a binary left over from an
//! earlier build could be stale.

mod portable_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use portable_support::*;
use serde_json::Value;

/// A conformance guest composed by `lockd plug`, run by `stock-host run`.
fn conformance_on_stock_host(app: &str, language: &str) {
    let dir = tempfile::tempdir().unwrap();
    let component = plug(dir.path(), app, &format!("{language}-plugged"));
    let server = Server::start();
    let namespace = format!("portable-{language}");
    let out = stock_run(&component, &server, &namespace, &["P"]);
    check_conformance(&out, &server, &namespace, language);
}

/// The host links stock wasmtime only: no lockd crate's symbols in the
/// binary, and a guest that imports `lockd:lock` (not plugged) cannot even
/// be instantiated there.
#[test]
fn stock_host_has_no_lock_capability() {
    let binary = std::fs::read(STOCK_HOST).unwrap();
    for krate in ["lockd_core", "lockd_wasm", "lockd_redb", "lockd_etcd"] {
        assert!(
            !binary.windows(krate.len()).any(|w| w == krate.as_bytes()),
            "stock-host contains {krate}"
        );
    }
    // A sanity check of the scan: wasmtime's own crates are there.
    assert!(binary.windows(8).any(|w| w == b"wasmtime"));

    let server = Server::start();
    let out = stock_run(
        Path::new(lockd_guest_tests::RUST_CONFORMANCE),
        &server,
        "unplugged",
        &["P"],
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("lockd:lock/"), "{stderr}");
    assert!(text(&out.stdout).is_empty());
    assert!(server.list("unplugged", "").is_empty());
}

#[test]
fn rust_conformance_plugged_on_stock_host() {
    conformance_on_stock_host(lockd_guest_tests::RUST_CONFORMANCE, "rust");
}

/// The composed client speaks TLS where the host's outgoing HTTP does:
/// `LOCKD_URL=https://...`, the stock host trusting the test CA.
#[test]
fn rust_conformance_plugged_on_stock_host_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let component = plug(
        dir.path(),
        lockd_guest_tests::RUST_CONFORMANCE,
        "rust-plugged",
    );
    let server = Server::start_tls();
    assert!(server.url.starts_with("https://"), "{}", server.url);
    let namespace = "portable-https";
    let out = stock_run(&component, &server, namespace, &["P"]);
    check_conformance(&out, &server, namespace, "rust");

    // Without trusting the CA, the host's TLS refuses the server: the guest
    // fails, and nothing is locked.
    let untrusted = Server {
        cacert: None,
        ..Server::start_tls()
    };
    let mut cmd = command(STOCK_HOST);
    cmd.arg("run")
        .arg(&component)
        .args(["--env", &format!("LOCKD_URL={}", untrusted.url)])
        .args(["--env", "LOCKD_NAMESPACE=untrusted", "--", "P"]);
    let out = run_bounded(cmd, "stock-host run");
    assert!(!out.status.success(), "{}", text(&out.stdout));
}

#[test]
fn python_conformance_plugged_on_stock_host() {
    conformance_on_stock_host(lockd_guest_tests::PYTHON_CONFORMANCE, "python");
}

#[test]
fn js_conformance_plugged_on_stock_host() {
    conformance_on_stock_host(lockd_guest_tests::JS_CONFORMANCE, "js");
}

#[test]
fn c_conformance_plugged_on_stock_host() {
    conformance_on_stock_host(lockd_guest_tests::C_CONFORMANCE, "c");
}

/// `rust-claims`, plugged, on the stock host: its five steps (shared locks,
/// a semaphore, holds, an election with a leader watch, names keeping to
/// their kind) pass over REST with nothing left held; then what its `leave`
/// mode left held is what the server's REST API shows: two shared holders,
/// one permit of 3, and the leader with its value and token.
#[test]
fn rust_claims_plugged_on_stock_host() {
    let dir = tempfile::tempdir().unwrap();
    let component = plug(dir.path(), lockd_guest_tests::RUST_CLAIMS, "claims-plugged");
    let server = Server::start();
    let namespace = "portable-claims";
    let out = stock_run(&component, &server, namespace, &["steps", "C", "composed"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(!stdout.contains("FAIL"), "{stdout}");
    for step in 1..=5 {
        assert!(
            stdout.lines().any(|l| l == format!("ok {step}")),
            "{stdout}"
        );
    }
    assert_eq!(server.list(namespace, "C/"), Vec::<Value>::new());

    let out = stock_run(&component, &server, namespace, &["leave", "L"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let printed = |prefix: &str| -> Vec<String> {
        let line = stdout.lines().find_map(|l| l.strip_prefix(prefix));
        let line = line.unwrap_or_else(|| panic!("no {prefix:?} line: {stdout}"));
        line.split(' ').map(str::to_string).collect()
    };
    let (shared, permit, leader) = (printed("shared "), printed("permit "), printed("leader "));
    let locks = server.list(namespace, "L/");
    let names: Vec<&str> = locks.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["L/election", "L/rw", "L/sem"], "{locks:?}");
    let holders = |lock: &Value| -> Vec<(String, String, String)> {
        let holders = lock["holders"].as_array().unwrap().iter();
        holders
            .map(|h| {
                let field = |key: &str| h[key].to_string().trim_matches('"').to_string();
                (field("owner"), field("fencing_token"), field("mode"))
            })
            .collect()
    };
    let (rw, sem) = (&locks[1], &locks[2]);
    let shared_holders = [("reader-1", &shared[0]), ("reader-2", &shared[1])]
        .map(|(owner, token)| (owner.to_string(), token.clone(), "shared".to_string()));
    assert_eq!(holders(rw), shared_holders, "{rw}");
    assert_eq!(sem["permits"], 3, "{sem}");
    let permit_holder = ("p1".to_string(), permit[0].clone(), "permit".to_string());
    assert_eq!(holders(sem), [permit_holder], "{sem}");
    assert_eq!(locks[0]["mode"], "leader", "{}", locks[0]);

    let ask = serde_json::json!({"namespace": namespace, "name": "L/election"});
    let (code, found) = post_json(server.addr, "/v1/elections/leader", &ask);
    assert_eq!(
        (code, &found["status"]),
        (200, &Value::from("found")),
        "{found}"
    );
    assert_eq!(found["candidate"], leader[0].as_str(), "{found}");
    assert!(leader[0].starts_with("candidate-"), "{found}");
    assert_eq!(found["value"], "addr:1", "{found}");
    assert_eq!(found["fencing_token"].to_string(), leader[1], "{found}");
}

/// `lockd ls --namespace NS` against `server`: (name, owner, token) rows.
fn lockd_ls(server: &Server, namespace: &str) -> Vec<(String, String, u64)> {
    let o = lockd(&["ls", "--server", &server.url, "--namespace", namespace]);
    assert!(o.status.success(), "lockd ls: {}", text(&o.stderr));
    let stdout = text(&o.stdout);
    if stdout.trim() == format!("no locks held in namespace {namespace:?}") {
        return Vec::new();
    }
    let mut lines = stdout.lines();
    let header = lines.next().unwrap_or_default();
    assert!(header.starts_with("NAME"), "{stdout}");
    lines
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            assert!(cols.len() >= 3, "{stdout}");
            (
                cols[0].to_string(),
                cols[1].to_string(),
                cols[2].parse().unwrap(),
            )
        })
        .collect()
}

/// `edge-jobs` composed and served by `stock-host serve` (a
/// `wasi:http/proxy` component, one instance per request): of 20 simultaneous
/// `POST /jobs/1`, one runs its 200 ms job under `job/1` and 19 are told who
/// holds it; `lockd ls` lists the lock while the job runs, and nothing after.
#[test]
fn edge_jobs_plugged_under_stock_host_serve() {
    let dir = tempfile::tempdir().unwrap();
    let component = plug(
        dir.path(),
        lockd_guest_tests::EDGE_JOBS,
        "edge-jobs-plugged",
    );
    let server = Server::start();
    let namespace = "portable-edge";
    let mut child = command(STOCK_HOST)
        .arg("serve")
        .arg(&component)
        .args(["--listen", "127.0.0.1:0"])
        .args(["--env", &format!("LOCKD_URL={}", server.url)])
        .args(["--env", &format!("LOCKD_NAMESPACE={namespace}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let app = wait_for_line(
        &mut child,
        "stock-host listening on http://",
        "stock-host serve",
    );
    let _app_process = Killed(child);
    let app: SocketAddr = app.parse().unwrap();

    // The component answers (a path that is no job is its 404).
    let (code, body) = http(app, "GET", "/nothing");
    assert_eq!(code, 404, "{body}");

    // `lockd ls` in a loop while the 20 requests run; it stops once it has
    // seen job/1 or the requests are done.
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let done = done.clone();
        let url = server.url.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + DEADLINE;
            let mut listings = 0;
            while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
                let o = lockd(&["ls", "--server", &url, "--namespace", namespace]);
                assert!(o.status.success(), "lockd ls: {}", text(&o.stderr));
                listings += 1;
                let stdout = text(&o.stdout);
                if let Some(row) = stdout.lines().find(|l| l.starts_with("job/1 ")) {
                    return (Some(row.to_string()), listings);
                }
            }
            (None, listings)
        })
    };

    let n = 20;
    let barrier = Arc::new(Barrier::new(n));
    let posts: Vec<_> = (0..n)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                http(app, "POST", "/jobs/1")
            })
        })
        .collect();
    let results: Vec<(u16, String)> = posts.into_iter().map(|t| t.join().unwrap()).collect();
    done.store(true, Ordering::SeqCst);
    let (row, listings) = watcher.join().unwrap();

    let ok: Vec<_> = results.iter().filter(|(c, _)| *c == 200).collect();
    let busy: Vec<_> = results.iter().filter(|(c, _)| *c == 409).collect();
    assert_eq!((ok.len(), busy.len()), (1, n - 1), "{results:?}");
    let done_body = json(&ok[0].1);
    assert_eq!(done_body["status"], "done", "{done_body}");
    let token = done_body["fencing_token"].as_u64().unwrap();
    let mut holders: Vec<String> = busy
        .iter()
        .map(|(_, b)| {
            let b = json(b);
            assert_eq!(b["status"], "busy", "{b}");
            b["holder"].as_str().unwrap().to_string()
        })
        .collect();
    holders.dedup();
    assert_eq!(holders.len(), 1, "one holder: {holders:?}");
    assert!(holders[0].starts_with("edge-"), "{holders:?}");

    // What `lockd ls` showed while the job ran: the winner's lock.
    let row = row.unwrap_or_else(|| {
        panic!("lockd ls never showed job/1 while the job ran ({listings} listings)")
    });
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1], holders[0], "{row}");
    assert_eq!(cols[2].parse::<u64>().unwrap(), token, "{row}");
    assert!(row.ends_with("persistent"), "{row}");

    // The job unlocked when it finished: free for the component and the CLI.
    let (code, body) = http(app, "GET", "/jobs/1");
    assert_eq!((code, json(&body)["status"].as_str()), (200, Some("free")));
    assert!(lockd_ls(&server, namespace).is_empty());
    assert!(server.list(namespace, "").is_empty());
    // The next job gets a higher token.
    let (code, body) = http(app, "POST", "/jobs/1");
    assert_eq!(code, 200, "{body}");
    assert!(json(&body)["fencing_token"].as_u64().unwrap() > token);

    // A lock held from outside (the CLI) is what the component reports.
    let o = lockd(&[
        "lock",
        "job/2",
        "--owner",
        "cli-user",
        "--ttl",
        "30s",
        "--server",
        &server.url,
        "--namespace",
        namespace,
    ]);
    assert!(o.status.success(), "lockd lock: {}", text(&o.stderr));
    let (code, body) = http(app, "POST", "/jobs/2");
    assert_eq!(
        (code, json(&body)["holder"].as_str()),
        (409, Some("cli-user")),
        "{body}"
    );
    let rows = lockd_ls(&server, namespace);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].0.as_str(), rows[0].1.as_str()),
        ("job/2", "cli-user")
    );
}

/// jco, installed into target/node-jco by `scripts/install-jco.sh` (which
/// installs Node.js first if it is missing): its path. The test runs the
/// script itself, so a missing jco is installed or fails the test, never
/// skips it.
fn jco() -> PathBuf {
    let script = repo().join("scripts/install-jco.sh");
    let mut cmd = command("bash");
    cmd.arg(&script);
    let o = run_bounded(cmd, "scripts/install-jco.sh");
    assert!(
        o.status.success(),
        "scripts/install-jco.sh failed:\n{}",
        text(&o.stderr)
    );
    let path = PathBuf::from(text(&o.stdout).lines().last().unwrap_or_default().trim());
    assert!(path.is_file(), "no jco at {}", path.display());
    path
}

/// The composed Rust conformance guest under `jco run` in Node.js: it gets
/// the server's address from the process environment, as any command does
/// there.
#[test]
fn rust_conformance_plugged_under_jco_run() {
    let jco = jco();
    let dir = tempfile::tempdir().unwrap();
    let component = plug(
        dir.path(),
        lockd_guest_tests::RUST_CONFORMANCE,
        "rust-plugged",
    );
    let server = Server::start();
    let namespace = "portable-jco";
    let mut cmd = command(&jco);
    cmd.arg("run")
        .arg(&component)
        .arg("P")
        .current_dir(dir.path())
        .env("LOCKD_URL", &server.url)
        .env("LOCKD_NAMESPACE", namespace);
    let out = run_bounded(cmd, "jco run");
    check_conformance(&out, &server, namespace, "rust");
}

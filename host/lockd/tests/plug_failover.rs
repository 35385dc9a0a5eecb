//! The composed clients with several hosts (`LOCKD_URL=A,B`): two
//! `lockd serve --store etcd:...` processes on one etcd member, and guests
//! plugged by `lockd plug` run on a stock wasmtime host (nothing of lockd
//! linked: `lockd_guest_tests::stock_host*`).
//!
//! - `guest/rust-p3`'s `hold-until-lost` (a WASI 0.3 guard with keep-alive,
//!   through `lockd-client-p3`) holds a name while A is SIGKILLed: its
//!   renewals go on through B, the guest never sees the guard lost, and a
//!   `lock` through B by anyone else answers `busy` with the guard's token
//!   for three TTLs; it sees `ended-elsewhere` only once the test releases
//!   the grant through B. Run five times, each with a fresh A killed at
//!   another point of the renewal cycle; the time from the kill to the first
//!   renewal seen through B is printed (median and all five) with the TTL.
//! - `guest/rust-conformance` (WASI 0.2, through `lockd-client`) passes its
//!   scenarios with `LOCKD_URL` naming the dead A first, and with one host
//!   on the embedded store (redb).
//!
//! The probe's guards are ephemeral, which on etcd live on the granting
//! host's session (docs/contract.md#c10-durability): the hosts are given a
//! 30 s `session_ttl_ms`, longer than the test holds after a kill, so what
//! is measured is the client's failover, not the session's end.
//!
//! Cost: one etcd member, six lockd hosts started (five A, one B), one
//! redb host, two plugs; about 15 s.

mod lockd_server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lockd_guest_tests::stock_host::{self, CommandEnd, StockState};
use lockd_guest_tests::stock_host_p3::{self, Invocation};
use lockd_server::Server;
use lockd_test_support::etcd::EtcdCluster;
use serde_json::{json, Value};
use wasmtime::component::Component;
use wasmtime::Engine;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::WasiCtxBuilder;

const NAMESPACE: &str = "plug-failover";

/// The guard's TTL: keep-alive renews it every third of it.
const TTL_MS: u64 = 1_500;

/// How long the first run holds after the kill, checking through B.
const HOLD_AFTER_KILL: Duration = Duration::from_millis(3 * TTL_MS);

/// Runs measured (the median is printed).
const RUNS: usize = 5;

/// The longest any awaited step may take.
const DEADLINE: Duration = Duration::from_secs(20);

/// Each host's `lockd.toml`: ephemeral grants outlive a dead host for 30 s
/// (see the module's documentation).
const LOCKD_TOML: &str = "[etcd]\nsession_ttl_ms = 30000\n";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `lockd plug APP -o DIR/NAME --client CLIENT...`.
fn plug(dir: &Path, app: &str, name: &str, clients: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let o = Command::new(env!("CARGO_BIN_EXE_lockd"))
        .args(["plug", app, "-o", out.to_str().unwrap()])
        .args(clients.iter().flat_map(|client| ["--client", client]))
        .env_remove("LOCKD_CLIENT_WASM")
        .env_remove("LOCKD_CLIENT_P3_WASM")
        .output()
        .unwrap();
    assert!(o.status.success(), "lockd plug: {}", text(&o.stderr));
    out
}

/// A `lockd serve` on `store`, in its own directory with [`LOCKD_TOML`].
fn host(store: &str) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lockd.toml"), LOCKD_TOML).unwrap();
    let server = Server::start_in(Some(dir.path()), &["--store", store], &[]);
    (server, dir)
}

/// `POST /v1/locks/ROUTE` in [`NAMESPACE`] through `server`.
fn rest(server: &Server, route: &str, mut body: Value) -> (u16, Value) {
    body["namespace"] = json!(NAMESPACE);
    let reply = server.post_json(&format!("/v1/locks/{route}"), &body);
    (reply.code, reply.json)
}

/// The holder of `name` as `server` shows it, once there is one.
fn holder(server: &Server, name: &str) -> Value {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (code, found) = rest(server, "get", json!({"name": name}));
        if code == 200 {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "nobody came to hold {name}: {found}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `invocation` on the plugged `component` in a stock WASI 0.3 host on
/// its own thread, with `LOCKD_URL=lockd_url`; its one result arrives on
/// the channel.
fn invoke(
    engine: &Engine,
    component: &Component,
    lockd_url: &str,
    invocation: &str,
) -> mpsc::Receiver<String> {
    let invocation: Invocation = invocation.parse().unwrap();
    let (engine, component) = (engine.clone(), component.clone());
    let lockd_url = lockd_url.to_owned();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let wasi = WasiCtxBuilder::new()
            .env("LOCKD_URL", &lockd_url)
            .env("LOCKD_NAMESPACE", NAMESPACE)
            .inherit_stderr()
            .build();
        let ran = runtime.block_on(stock_host_p3::invoke_concurrently(
            &engine,
            &component,
            StockState::new(wasi),
            &[invocation],
            |_, result| {
                let _ = tx.send(result.unwrap_or_else(|e| format!("trap: {e}")));
            },
        ));
        if let Err(e) = ran {
            let _ = tx.send(format!("cannot run: {e}"));
        }
    });
    rx
}

/// One run: a fresh A and the shared B, a guard taken through `A,B`, A
/// killed `kill_after` later. Returns the time from the kill to the first
/// renewal seen through B. With `hold`, it then checks the guard for
/// [`HOLD_AFTER_KILL`] (see the module's documentation).
fn run_once(
    engine: &Engine,
    component: &Component,
    store: &str,
    b: &Server,
    name: &str,
    kill_after: Duration,
    hold: bool,
) -> Duration {
    let (mut a, _a_dir) = host(store);
    let result = invoke(
        engine,
        component,
        &format!("{},{}", a.url, b.url),
        &format!(r#"lockd:p3-probe/probe#hold-until-lost("{name}", {TTL_MS}, true)"#),
    );
    let guard = holder(b, name);
    let owner = guard["owner"].as_str().unwrap().to_owned();
    let token = guard["fencing_token"].as_u64().unwrap();
    assert!(owner.starts_with("guard-"), "{guard}");

    thread::sleep(kill_after);
    a.kill();
    let killed = Instant::now();
    // Anything that moves the expiry from here on went through B.
    let seen_at_kill = holder(b, name)["expires_at_ms"].as_u64().unwrap();
    let renewed = loop {
        let now = holder(b, name);
        assert_eq!(
            (now["owner"].as_str(), now["fencing_token"].as_u64()),
            (Some(owner.as_str()), Some(token)),
            "{now}"
        );
        if now["expires_at_ms"].as_u64().unwrap() > seen_at_kill {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_millis(2 * TTL_MS),
            "no renewal through B within two TTLs of the kill: {now}"
        );
        thread::sleep(Duration::from_millis(5));
    };

    if hold {
        let mut busy_answers = 0;
        while killed.elapsed() < HOLD_AFTER_KILL {
            let (code, busy) = rest(
                b,
                "lock",
                json!({"name": name, "owner": "intruder", "ttl_ms": 60_000, "wait_ms": 0}),
            );
            assert_eq!(
                (code, busy["status"].as_str()),
                (409, Some("busy")),
                "{busy}"
            );
            assert_eq!(busy["fencing_token"].as_u64(), Some(token), "{busy}");
            busy_answers += 1;
            assert!(
                result.try_recv().is_err(),
                "the guest saw its guard end while B renewed it"
            );
            thread::sleep(Duration::from_millis(100));
        }
        assert!(busy_answers >= 10, "{busy_answers}");
        // Three TTLs after the kill, only renewals through B can have kept it.
        let now = holder(b, name);
        assert_eq!(now["fencing_token"].as_u64(), Some(token), "{now}");
    }

    // Released through B: the guest's watcher sees it ended elsewhere.
    let (code, reply) = rest(
        b,
        "unlock",
        json!({"name": name, "owner": owner, "fencing_token": token}),
    );
    assert_eq!(code, 200, "{reply}");
    let ended = result
        .recv_timeout(DEADLINE)
        .expect("the guest never saw the end");
    assert_eq!(ended, format!("ok(({token}, ended-elsewhere))"));
    renewed
}

/// Runs the plugged `rust-conformance` with `LOCKD_URL=lockd_url` on a
/// stock WASI 0.2 host; returns its stdout, asserting it passed.
fn conformance(engine: &Engine, component: &Component, lockd_url: &str, prefix: &str) -> String {
    let stdout = MemoryOutputPipe::new(1 << 20);
    let wasi = WasiCtxBuilder::new()
        .args(&["rust-conformance", prefix])
        .env("LOCKD_URL", lockd_url)
        .env("LOCKD_NAMESPACE", NAMESPACE)
        .stdout(stdout.clone())
        .inherit_stderr()
        .build();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let end = runtime
        .block_on(stock_host::run_command(
            engine,
            component,
            StockState::new(wasi),
        ))
        .unwrap();
    let out = text(&stdout.contents());
    assert!(matches!(end, CommandEnd::Ok), "{end:?}: {out}");
    assert!(out.contains("ok 12"), "{out}");
    out
}

#[test]
fn plugged_guests_fail_over_to_the_next_host() {
    let dir = tempfile::tempdir().unwrap();
    // rust-p3 imports lockd:lock@0.2.0 and, for a contrast, 0.1.0's locks.
    let p3 = plug(
        dir.path(),
        lockd_guest_tests::RUST_P3,
        "rust-p3-plugged.wasm",
        &[
            lockd_guest_tests::LOCKD_CLIENT_P3,
            lockd_guest_tests::LOCKD_CLIENT,
        ],
    );
    let p2 = plug(
        dir.path(),
        lockd_guest_tests::RUST_CONFORMANCE,
        "rust-conformance-plugged.wasm",
        &[lockd_guest_tests::LOCKD_CLIENT],
    );
    let engine = stock_host_p3::engine().unwrap();
    let p3 = stock_host::load(&engine, &p3).unwrap();
    let p2_engine = stock_host::engine().unwrap();
    let p2 = stock_host::load(&p2_engine, &p2).unwrap();

    let etcd = EtcdCluster::start().expect("etcd did not start");
    let store = format!("etcd:{}", etcd.endpoints().join(","));
    let (b, _b_dir) = host(&store);

    let times: Vec<Duration> = (0..RUNS)
        .map(|run| {
            // Kills spread over the renewal cycle (a third of the TTL).
            let kill_after = Duration::from_millis(200 + 170 * run as u64);
            let name = format!("held-{run}");
            run_once(&engine, &p3, &store, &b, &name, kill_after, run == 0)
        })
        .collect();
    let mut sorted = times.clone();
    sorted.sort();
    println!(
        "failover of a keep-alive guard (lockd-client-p3, TTL {TTL_MS} ms, renewed every {} ms): \
         kill -> first renewal through B, median {} ms of {RUNS} runs {:?}",
        TTL_MS / 3,
        sorted[RUNS / 2].as_millis(),
        times.iter().map(Duration::as_millis).collect::<Vec<_>>()
    );

    // The p2 client: a host that is down first in the list.
    let (mut a, _a_dir) = host(&store);
    a.kill();
    let started = Instant::now();
    conformance(
        &p2_engine,
        &p2,
        &format!("{},{}", a.url, b.url),
        "dead-first",
    );
    println!(
        "rust-conformance (lockd-client) with the first host dead: {} ms",
        started.elapsed().as_millis()
    );

    // One host on the embedded store: as before.
    let redb_dir = tempfile::tempdir().unwrap();
    let redb = Server::start_in(Some(redb_dir.path()), &["--store", "redb:lockd.redb"], &[]);
    conformance(&p2_engine, &p2, &redb.url, "redb-one-host");
}

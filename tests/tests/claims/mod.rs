//! Read-write locks, semaphores, holds and leader election through the wasm
//! capability (docs/contract.md#c21-shared to #c24-elections), with
//! `guest/rust-claims` run through the path `lockd run` uses; and a guest
//! built against the WIT before these interfaces, run unchanged.

use std::time::{Duration, Instant};

use lockd_core::metrics::Op;
use lockd_core::{Claim, Engine, Limits, LockOptions, LockService};

use crate::common::{run_guest, text};

fn redb_service(dir: &tempfile::TempDir) -> LockService {
    LockService::new(
        lockd_redb::open(dir.path().join("locks.redb")).unwrap(),
        Limits::default(),
    )
}

fn succeeded(out: &lockd_components::run::RunOutcome) -> String {
    let stdout = text(&out.stdout);
    assert_eq!(
        out.exit_code,
        0,
        "rust-claims failed:\n{stdout}\n{}\n{:?}",
        text(&out.stderr),
        out.trap
    );
    assert!(!stdout.contains("FAIL"), "{stdout}");
    stdout
}

/// Runs `rust-claims` with `args` in a task of its own.
fn spawn_guest(
    service: &LockService,
    args: Vec<String>,
) -> tokio::task::JoinHandle<lockd_components::run::RunOutcome> {
    let service = service.clone();
    tokio::spawn(async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_guest(lockd_guest_tests::RUST_CLAIMS, &service, "claims", &args).await
    })
}

/// Waits (bounded) until `ready` holds.
async fn until(what: &str, mut ready: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The guest's five steps (a read-write lock, a semaphore of 2, holds
/// released on drop, an election with a leader watch, names keeping to
/// their kind), then the store: nothing left held or led.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn rust_claims() {
    let dir = tempfile::tempdir().unwrap();
    let service = redb_service(&dir);
    let out = run_guest(
        lockd_guest_tests::RUST_CLAIMS,
        &service,
        "claims",
        &["steps", "C"],
    )
    .await;
    let stdout = succeeded(&out);
    for step in 1..=5 {
        assert!(
            stdout.lines().any(|l| l == format!("ok {step}")),
            "step {step} missing:\n{stdout}"
        );
    }
    assert_eq!(service.list("claims", "C/").await.unwrap(), vec![]);
    assert_eq!(service.leader("claims", "C/election").await.unwrap(), None);
    // The guest's calls reached the store as the modes they name.
    let metrics = service.metrics();
    assert!(metrics.count(Op::Campaign, "ok") >= 3);
    assert!(metrics.count(Op::Proclaim, "ok") == 1);
}

/// A writer waiting in the guest is granted once the host's reader leaves,
/// with a token above the reader's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_is_granted_when_the_reader_leaves() {
    let service = LockService::new(Engine::memory(), Limits::default());
    let shared = LockOptions {
        claim: Claim::Shared,
        ..LockOptions::default()
    };
    let reader = service
        .lock("claims", "W/rw", "reader", 60_000, shared)
        .await
        .unwrap();
    let guest = spawn_guest(
        &service,
        ["wait-exclusive", "W/rw", "30000"]
            .map(String::from)
            .to_vec(),
    );
    until("the writer waits", async || {
        service.describe("claims", "W/rw").await.unwrap().waiters == 1
    })
    .await;
    service
        .unlock("claims", "W/rw", "reader", Some(reader.fencing_token))
        .await
        .unwrap();
    let stdout = succeeded(&guest.await.unwrap());
    let token: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("granted "))
        .expect(&stdout)
        .parse()
        .unwrap();
    assert!(token > reader.fencing_token);
}

/// A guest's leader watch hears a leader elected outside it (by the host's
/// service, as the REST API or another guest would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_watch_hears_a_leader_elected_elsewhere() {
    let service = LockService::new(Engine::memory(), Limits::default());
    let guest = spawn_guest(
        &service,
        ["watch", "E/el", "30000"].map(String::from).to_vec(),
    );
    // `open` and the first `current` each read the leader.
    until("the guest watches", async || {
        service.metrics().count(Op::Leader, "ok") >= 2
    })
    .await;
    service
        .campaign(
            "claims",
            "E/el",
            "host",
            "h:1",
            60_000,
            LockOptions::default(),
        )
        .await
        .unwrap();
    let stdout = succeeded(&guest.await.unwrap());
    assert!(stdout.contains("leader none"), "{stdout}");
    assert!(stdout.contains("changed h:1"), "{stdout}");
}

/// `rust-conformance` as built against the WIT before shared locks,
/// semaphores, holds and elections (`tests/fixtures`, built from commit
/// a645a4c's `wit/`) runs unchanged on today's host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_built_before_claims_runs_unchanged() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/rust-conformance-before-claims.wasm"
    );
    let dir = tempfile::tempdir().unwrap();
    let service = redb_service(&dir);
    let out = run_guest(path, &service, "old", &["P"]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.exit_code, 0, "{stdout}\n{}", text(&out.stderr));
    assert!(!stdout.contains("FAIL"), "{stdout}");
    for step in 1..=12 {
        assert!(
            stdout.lines().any(|l| l == format!("ok {step}")),
            "{stdout}"
        );
    }
    let held = service.get("old", "P/held").await.unwrap().unwrap();
    assert_eq!(held.owner, "rust");
}

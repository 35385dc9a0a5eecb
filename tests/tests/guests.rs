//! Every guest program, run by the host through the path `lockd run` uses,
//! with the store checked afterwards.

mod c_claims;
#[allow(unused_imports)]
use c_claims::c_claims;
mod claims;
#[allow(unused_imports)]
use claims::rust_claims;
mod common;
mod fencing;
#[allow(unused_imports)]
use fencing::rust_fenced;
mod http_guests;
#[allow(unused_imports)]
use http_guests::{edge_bench, edge_guard_p3, edge_jobs, edge_wait_p3, http_hostile, js_edge};
mod hostile;
#[allow(unused_imports)]
use hostile::rust_hostile;
mod leases;
#[allow(unused_imports)]
use leases::rust_lease;
mod lockd_client;
#[allow(unused_imports)]
use lockd_client::lockd_client;
mod lockd_client_p3;
#[allow(unused_imports)]
use lockd_client_p3::lockd_client_p3;
mod p3;
#[allow(unused_imports)]
use p3::{python_p3, rust_p3, rust_p3_claims, rust_p3_cli};

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{run_guest, text};
use lockd_core::metrics::Op;
use lockd_core::{Durability, Journal, JournalOp, Limits, LockOptions, LockService};
use lockd_guest_tests::foreach_guest;

// Fails to compile when a program under guest/ has no test here.
macro_rules! assert_test_exists {
    ($name:ident) => {
        #[allow(unused_imports)]
        use self::$name as _;
    };
}
foreach_guest!(assert_test_exists);

/// 2^53: above it, a language that turned u64 into a double would lose
/// precision. Stores in these tests issue tokens from 2^53 + 1 on.
const ABOVE_DOUBLES: u64 = 1 << 53;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A fresh redb store whose token counter starts at 2^53 + 1.
async fn store_above_doubles(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let path = dir.path().join("locks.redb");
    let (journal, _) = lockd_redb::RedbJournal::open(&path).unwrap();
    journal
        .submit(JournalOp::ReserveTokens {
            up_to: ABOVE_DOUBLES,
        })
        .wait()
        .await
        .unwrap();
    path
}

fn open(path: &std::path::Path) -> LockService {
    LockService::new(lockd_redb::open(path).unwrap(), Limits::default())
}

/// Opens the store again after its last `LockService` was dropped. The
/// store closes when the last handle on it goes, and the tasks of the
/// guest's leases (keep-alive and lost monitors, aborted with the instance)
/// hold one until the runtime drops them, a moment later; until then the
/// file is rightly `InUse`. Seen in CI: the C guest's lease step, reopened
/// at once.
async fn reopen(path: &std::path::Path) -> LockService {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match lockd_redb::open(path) {
            Ok(engine) => return LockService::new(engine, Limits::default()),
            Err(lockd_redb::OpenError::InUse { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            Err(e) => panic!("reopening {}: {e}", path.display()),
        }
    }
}

/// The conformance scenario of a guest (`steps` of them: 12, or 13 with the
/// lease step), then the store: `P/held` held by the guest's language, with
/// exact u64 tokens above 2^53, and still held after the store is closed and
/// reopened. With step 13, the guest granted, refreshed and revoked one
/// lease (the store counted each once), whose id it printed: that lease is
/// gone, before and after the reopen, and none of its `P/lease/` locks is
/// held.
async fn conformance(path: &str, language: &str, steps: u32) {
    let dir = tempfile::tempdir().unwrap();
    let store = store_above_doubles(&dir).await;
    let service = open(&store);
    let out = run_guest(path, &service, language, &["P"]).await;
    let stdout = text(&out.stdout);
    assert_eq!(
        out.exit_code,
        0,
        "{language} guest failed:\n{stdout}\n{}\n{:?}",
        text(&out.stderr),
        out.trap
    );
    for step in 1..=steps {
        assert!(
            stdout.lines().any(|l| l == format!("ok {step}")),
            "step {step} missing:\n{stdout}"
        );
    }
    assert!(
        !stdout.lines().any(|l| l == format!("ok {}", steps + 1)),
        "a step past {steps}: update the step count\n{stdout}"
    );
    assert!(!stdout.contains("FAIL"), "{stdout}");
    let printed: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("held "))
        .expect("no `held <token>` line")
        .parse()
        .unwrap();
    let lease_id = stdout.lines().find_map(|l| l.strip_prefix("lease "));
    if steps >= 13 {
        let lease_id = lease_id.expect("no `lease <id>` line");
        assert!(
            lease_id.starts_with("lease-") && lease_id.len() == 38,
            "{lease_id}"
        );
        assert_eq!(
            service.get_lease(language, lease_id).await.unwrap(),
            None,
            "the revoked lease is still live"
        );
        let metrics = service.metrics();
        for op in [Op::LeaseGrant, Op::LeaseRefresh, Op::LeaseRevoke] {
            assert_eq!(metrics.count(op, "ok"), 1, "{op:?}");
        }
        // The lock under the revoked lease.
        assert_eq!(metrics.count(Op::Lock, "not_held"), 1);
        assert_eq!(service.list(language, "P/lease/").await.unwrap(), vec![]);
    } else {
        assert_eq!(lease_id, None, "{stdout}");
    }

    let held = service
        .get(language, "P/held")
        .await
        .unwrap()
        .expect("P/held not held");
    assert_eq!(held.owner, language);
    assert_eq!(
        held.fencing_token, printed,
        "token lost precision on its way out"
    );
    assert_eq!(held.durability, Durability::Persistent);
    // Steps 1-11 took at least 5 grants before this one.
    assert!(
        held.fencing_token > ABOVE_DOUBLES + 5,
        "{}",
        held.fencing_token
    );
    let remaining = held.expires_at_ms.saturating_sub(now_ms());
    assert!(
        (30_000..=60_000).contains(&remaining),
        "expires in {remaining} ms"
    );
    // The scenario leaves nothing else held.
    let listed = service.list(language, "P/").await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    // Another namespace sees none of it.
    assert_eq!(service.get("elsewhere", "P/held").await.unwrap(), None);

    drop(service);
    let service = reopen(&store).await;
    let after = service
        .get(language, "P/held")
        .await
        .unwrap()
        .expect("lost in restart");
    assert_eq!(
        (after.owner.as_str(), after.fencing_token),
        (language, printed)
    );
    if let Some(lease_id) = lease_id {
        // A revoke is on disk: the persistent lease and its locks stay gone.
        assert_eq!(service.get_lease(language, lease_id).await.unwrap(), None);
        assert_eq!(service.list(language, "P/").await.unwrap().len(), 1);
    }
    let next = service
        .lock(language, "P/next", "test", 1_000, LockOptions::default())
        .await
        .unwrap();
    assert!(next.fencing_token > printed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_conformance() {
    conformance(lockd_guest_tests::RUST_CONFORMANCE, "rust", 12).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_conformance() {
    conformance(lockd_guest_tests::PYTHON_CONFORMANCE, "python", 13).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_conformance() {
    conformance(lockd_guest_tests::JS_CONFORMANCE, "js", 13).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_conformance() {
    conformance(lockd_guest_tests::C_CONFORMANCE, "c", 13).await;
}

/// A trap ends the instance, and the guard it held is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_guard_trap() {
    let dir = tempfile::tempdir().unwrap();
    let service = open(&dir.path().join("locks.redb"));
    let out = run_guest(
        lockd_guest_tests::RUST_GUARD_TRAP,
        &service,
        "trap",
        &["T/g"],
    )
    .await;
    assert_eq!(out.exit_code, lockd_components::run::TRAP_EXIT_CODE);
    assert!(out.trap.is_some());
    let stdout = text(&out.stdout);
    let mut words = stdout
        .strip_prefix("guard ")
        .expect(&stdout)
        .split_whitespace();
    let owner = words.next().unwrap().to_string();
    let token: u64 = words.next().unwrap().parse().unwrap();
    assert!(owner.starts_with("guard-") && owner.len() > 30, "{owner}");
    assert!(token > 0);
    assert_eq!(
        service.get("trap", "T/g").await.unwrap(),
        None,
        "the trap left the guard's lock held"
    );
    // Someone else can take it at once.
    let g = service
        .lock("trap", "T/g", "next", 1_000, LockOptions::default())
        .await
        .unwrap();
    assert!(g.fencing_token > token);
}

/// The B1 benchmark guest: it runs its pairs through the capability (the
/// tokens it was given rose by one grant per pair), prints the figures the
/// benchmark parses, and leaves nothing held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_pairs() {
    let service = LockService::new(lockd_core::Engine::memory(), Limits::default());
    let before = service
        .lock("bench", "probe", "p", 1_000, LockOptions::default())
        .await
        .unwrap()
        .fencing_token;
    let outcome = run_guest(
        lockd_guest_tests::BENCH_PAIRS,
        &service,
        "bench",
        &["500", "timed"],
    )
    .await;
    assert_eq!(outcome.exit_code, 0, "{}", text(&outcome.stderr));
    let line = text(&outcome.stdout);
    let field = |key: &str| -> u64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {key} in {line:?}"))
            .parse()
            .unwrap()
    };
    assert_eq!(field("pairs"), 500);
    assert!(field("elapsed_ns") > 0);
    assert!(field("p50_ns") <= field("p99_ns") && field("p99_ns") <= field("max_ns"));
    assert_eq!(service.list("bench", "p/").await.unwrap(), vec![]);
    let after = service
        .lock("bench", "probe2", "p", 1_000, LockOptions::default())
        .await
        .unwrap()
        .fencing_token;
    assert!(after > before + 500, "{before} -> {after}");
}

/// The holder guest, in process: its persistent locks stay held after its
/// instance is cancelled mid-sleep (they are plain locks, not guards), with
/// the tokens it printed. The SIGKILL variant with a real `lockd run`
/// process is `host/lockd/tests/kill.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_hold() {
    let dir = tempfile::tempdir().unwrap();
    let service = open(&dir.path().join("locks.redb"));
    let running = {
        let service = service.clone();
        tokio::spawn(async move {
            run_guest(
                lockd_guest_tests::RUST_HOLD,
                &service,
                "hold",
                &["h/a", "h/b"],
            )
            .await
        })
    };
    // The guest sleeps forever once it holds both locks. Wait for both
    // grants to be acknowledged (counted as ok), not merely visible: a grant
    // whose call is dropped before its commit is rolled back, by design.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while service.metrics().count(lockd_core::metrics::Op::Lock, "ok") < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "rust-hold never took its locks"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    let held = service.list("hold", "h/").await.unwrap();
    assert_eq!(held.len(), 2);
    assert!(held
        .iter()
        .all(|l| l.info.owner == "holder" && l.info.durability == Durability::Persistent));
    assert!(held[1].info.fencing_token > held[0].info.fencing_token);
}

/// The embedding example's plugin runs jobs under a lock in the namespace
/// its host chose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embed_plugin() {
    let service = LockService::new(lockd_core::Engine::memory(), Limits::default());
    let runner = lockd_example_embed::JobRunner::new(
        lockd_guest_tests::EMBED_PLUGIN.as_ref(),
        service.clone(),
        "plugins",
    )
    .unwrap();
    let t1 = runner.run_job("1", "w").await.unwrap().unwrap();
    let t2 = runner.run_job("1", "w").await.unwrap().unwrap();
    assert!(t2 > t1);
    assert_eq!(
        service.get("plugins", "job/1").await.unwrap(),
        None,
        "plugin left its lock held"
    );
    service
        .lock(
            "plugins",
            "job/7",
            "someone-else",
            10_000,
            LockOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        runner.run_job("7", "w").await.unwrap(),
        Err("busy: held by someone-else".to_string())
    );
    // Same name, other namespace: no conflict.
    service
        .lock(
            "other",
            "job/8",
            "someone-else",
            10_000,
            LockOptions::default(),
        )
        .await
        .unwrap();
    assert!(runner.run_job("8", "w").await.unwrap().is_ok());
}

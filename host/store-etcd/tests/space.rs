//! lockd on etcd must not fill etcd: etcd keeps every revision until its
//! history is compacted, so lock churn through a host that never compacted
//! grew etcd's database until etcd reached its quota, raised its NOSPACE
//! alarm and refused every write (`etcdserver: mvcc: database space
//! exceeded`), and every lock call failed from then on.
//!
//! Each test starts its own etcd with a small quota. The churn is lock and
//! unlock pairs with long owners (2,000 bytes, so a pair writes about
//! 4 kB and the quota is reached in seconds), on as many names as callers:
//!
//! - with the host's compaction on (a short window), three quotas' worth
//!   of churn is served and etcd's database stays under the quota: the
//!   pages compaction frees are reused, with no defragmentation;
//! - with compaction off (the negative control), the same churn fills
//!   etcd: a call fails with `database space exceeded`, and the backend
//!   reports the NOSPACE alarm (`check_space`, `health`);
//! - waiters queued before many compactions (the host's own, and another
//!   client's compaction up to the current revision) are still woken in
//!   FIFO order, and an events stream opened before them still reports
//!   every grant.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::Client;
use lockd_core::{EventKind, Key, LockBackend, LockError, LockEvent, LockOptions, SystemClock};
use lockd_etcd::{Compaction, EtcdBackend, EtcdOptions};
use lockd_test_support::etcd::EtcdCluster;

/// etcd's `--quota-backend-bytes` in the churn tests.
const QUOTA: u64 = 16 << 20;
/// Lock and unlock pairs in a churn: about 49 MB written, three quotas.
const PAIRS: u64 = 12_000;
/// Concurrent callers, each on a name of its own.
const CALLERS: u64 = 16;
/// The length of every owner: makes each pair write about 4 kB.
const OWNER_LEN: usize = 2_000;

fn etcd_with_quota() -> EtcdCluster {
    let quota = format!("--quota-backend-bytes={QUOTA}");
    EtcdCluster::start_with_flags(1, &[&quota]).expect("start etcd")
}

/// A short window, so that the churn is compacted while it runs: etcd
/// keeps about half a second of history, or 2,000 revisions (1,000 pairs,
/// 4 MB) if that is more, however fast the machine.
fn quick_compaction() -> Compaction {
    Compaction {
        interval: Duration::from_millis(250),
        retention: Duration::from_millis(250),
        min_revisions: 2_000,
    }
}

async fn connect(etcd: &EtcdCluster, compaction: Option<Compaction>) -> Arc<EtcdBackend> {
    let mut options = EtcdOptions::new(etcd.endpoints());
    options.compaction = compaction;
    options.quota_backend_bytes = QUOTA;
    options.request_timeout = Duration::from_secs(5);
    Arc::new(
        EtcdBackend::connect(options, Arc::new(SystemClock))
            .await
            .expect("connect"),
    )
}

/// How a churn went.
#[derive(Debug)]
struct Churn {
    /// Pairs completed.
    pairs: u64,
    /// The first failure, if any (the churn stops at it).
    failure: Option<LockError>,
    /// The largest database size etcd reported while it ran.
    max_db_size: u64,
    took: Duration,
}

/// Up to `PAIRS` lock and unlock pairs by `CALLERS` callers, stopping at
/// the first failure, while etcd's database size is sampled every 100 ms
/// by a client of its own.
async fn churn(backend: &Arc<EtcdBackend>, etcd: &EtcdCluster) -> Churn {
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut callers = tokio::task::JoinSet::new();
    for c in 0..CALLERS {
        let (backend, next, done, stop) =
            (backend.clone(), next.clone(), done.clone(), stop.clone());
        callers.spawn(async move {
            let key = Key::new("churn", format!("name-{c}"));
            let owner = format!("{c:0>OWNER_LEN$}");
            while !stop.load(Ordering::Relaxed) && next.fetch_add(1, Ordering::Relaxed) < PAIRS {
                let pair = async {
                    let g = backend
                        .lock(&key, &owner, 30_000, LockOptions::default())
                        .await?;
                    backend.unlock(&key, &owner, Some(g.fencing_token)).await
                };
                if let Err(e) = pair.await {
                    stop.store(true, Ordering::Relaxed);
                    return Some(e);
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            None
        });
    }
    let mut status = Client::connect(etcd.endpoints(), None)
        .await
        .unwrap()
        .maintenance_client();
    let mut max_db_size = 0;
    let mut failure = None;
    let mut last_report = Instant::now();
    while !callers.is_empty() {
        tokio::select! {
            ended = callers.join_next() => {
                if let Some(e) = ended.and_then(|r| r.expect("a caller panicked")) {
                    failure.get_or_insert(e);
                }
            }
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                if let Ok(s) = status.status().await {
                    max_db_size = max_db_size.max(s.db_size() as u64);
                    if last_report.elapsed() >= Duration::from_secs(2) {
                        last_report = Instant::now();
                        eprintln!(
                            "{:>5.1} s: {} pairs, revision {}, db {} B ({} B in use)",
                            started.elapsed().as_secs_f64(),
                            done.load(Ordering::Relaxed),
                            s.header().map_or(0, |h| h.revision()),
                            s.db_size(),
                            s.raft_used_db_size()
                        );
                    }
                }
            }
        }
    }
    if let Ok(s) = status.status().await {
        max_db_size = max_db_size.max(s.db_size() as u64);
    }
    let churn = Churn {
        pairs: done.load(Ordering::Relaxed),
        failure,
        max_db_size,
        took: started.elapsed(),
    };
    eprintln!(
        "churn: {} pairs in {:.1} s ({:.0} pairs/s), largest db {} B (quota {QUOTA} B), \
         failure: {:?}",
        churn.pairs,
        churn.took.as_secs_f64(),
        churn.pairs as f64 / churn.took.as_secs_f64(),
        churn.max_db_size,
        churn.failure
    );
    churn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_keeps_a_churning_etcd_under_its_quota() {
    let etcd = etcd_with_quota();
    let backend = connect(&etcd, Some(quick_compaction())).await;
    let churn = churn(&backend, &etcd).await;
    assert!(churn.failure.is_none(), "{churn:?}");
    assert_eq!(churn.pairs, PAIRS);
    assert!(churn.max_db_size < QUOTA, "{churn:?}");
    let space = backend.check_space().await.expect("etcd's space");
    eprintln!("space: {space:?}");
    assert!(!space.out_of_space, "{space:?}");
    assert_eq!(space.quota_bytes, QUOTA);
    assert!(
        space.db_size_bytes > 0 && space.db_size_bytes < QUOTA,
        "{space:?}"
    );
    assert!(space.compactions >= 3, "{space:?}");
    assert_eq!(space.failed_compactions, 0, "{space:?}");
    assert!(space.compacted_revision > PAIRS, "{space:?}");
    backend.health().await.expect("healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_compaction_the_same_churn_fills_etcd() {
    let etcd = etcd_with_quota();
    let backend = connect(&etcd, None).await;
    let churn = churn(&backend, &etcd).await;
    let failure = churn.failure.as_ref().expect("the churn never failed");
    assert!(
        failure.to_string().contains("database space exceeded"),
        "{failure}"
    );
    assert!(churn.pairs < PAIRS, "{churn:?}");
    let space = backend.check_space().await.expect("etcd's space");
    eprintln!("space: {space:?}");
    assert!(space.out_of_space, "{space:?}");
    assert_eq!(space.compactions, 0);
    // A full etcd is not ill health (a restart would not help): readiness
    // reports it (LockBackend::check_space, above); space_alarm says what
    // to do.
    backend.health().await.expect("NOSPACE is not ill health");
    let alarm = backend.space_alarm().await.expect_err("the NOSPACE alarm");
    assert!(alarm.to_string().contains("NOSPACE"), "{alarm}");
    let checked = LockBackend::check_space(&*backend).await.unwrap().unwrap();
    assert!(checked.out_of_space, "{checked:?}");
    // Every write now fails, whatever the name.
    let refused = backend
        .lock(
            &Key::new("churn", "another"),
            "o",
            1_000,
            LockOptions::default(),
        )
        .await
        .expect_err("etcd refuses writes");
    assert!(
        refused.to_string().contains("database space exceeded"),
        "{refused}"
    );
}

/// The next event about `name` in namespace `queue` (bounded wait).
async fn next_on(
    events: &mut tokio::sync::broadcast::Receiver<LockEvent>,
    name: &str,
) -> LockEvent {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("no event within 10 s")
            .expect("the event stream ended or lagged");
        if &*event.namespace == "queue" && &*event.name == name {
            return event;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_and_events_survive_compactions() {
    let etcd = EtcdCluster::start().expect("start etcd");
    let compaction = Compaction {
        interval: Duration::from_millis(100),
        retention: Duration::from_millis(200),
        min_revisions: 0,
    };
    let a = connect(&etcd, Some(compaction)).await;
    let b = connect(&etcd, Some(compaction)).await;
    let mut events = b.events().expect("an events stream");
    let key = Key::new("queue", "x");
    let held = a
        .lock(&key, "holder", 60_000, LockOptions::default())
        .await
        .unwrap();
    assert_eq!(next_on(&mut events, "x").await.owner.as_ref(), "holder");
    // Three waiters, on both hosts, queued in this order.
    let wait = LockOptions {
        wait_ms: 60_000,
        ..LockOptions::default()
    };
    let mut raw = Client::connect(etcd.endpoints(), None).await.unwrap();
    let mut waiters = Vec::new();
    for (i, host) in [&b, &a, &b].into_iter().enumerate() {
        let (host, key) = (host.clone(), key.clone());
        let owner = format!("w{i}");
        waiters.push(tokio::spawn(async move {
            host.lock(&key, &owner, 60_000, wait).await
        }));
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let queued = raw
                .get(
                    "/lockd/.queue/queue/x/",
                    Some(
                        etcd_client::GetOptions::new()
                            .with_prefix()
                            .with_count_only(),
                    ),
                )
                .await
                .unwrap()
                .count();
            if queued == i as i64 + 1 {
                break;
            }
            assert!(Instant::now() < until, "waiter {i} never queued");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // Churn elsewhere, with compactions by both hosts and by another
    // client straight to the current revision (what no host does, but an
    // operator might).
    let churner = Key::new("elsewhere", "y");
    let started = Instant::now();
    for round in 0..20 {
        for _ in 0..50 {
            let g = a
                .lock(&churner, "churn", 10_000, LockOptions::default())
                .await
                .unwrap();
            a.unlock(&churner, "churn", Some(g.fencing_token))
                .await
                .unwrap();
        }
        if round % 5 == 4 {
            let revision = raw
                .get("/lockd/", None)
                .await
                .unwrap()
                .header()
                .unwrap()
                .revision();
            raw.compact(revision, None).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (space_a, space_b) = (a.space(), b.space());
    eprintln!(
        "2,000 churn writes in {:.1} s; host a compacted {} times (to {}), host b {} times",
        started.elapsed().as_secs_f64(),
        space_a.compactions,
        space_a.compacted_revision,
        space_b.compactions
    );
    assert!(
        space_a.compactions + space_b.compactions >= 5,
        "{space_a:?} {space_b:?}"
    );
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "a waiter ended early"
    );
    // Released: each waiter in turn, in the order they queued.
    a.unlock(&key, "holder", Some(held.fencing_token))
        .await
        .unwrap();
    let mut last_token = held.fencing_token;
    for (i, waiter) in waiters.into_iter().enumerate() {
        let owner = format!("w{i}");
        let grant = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .unwrap_or_else(|_| panic!("waiter {i} was never woken"))
            .unwrap()
            .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
        assert!(grant.fencing_token > last_token);
        last_token = grant.fencing_token;
        // Host b's events stream, opened before every compaction, reports
        // the release and the hand-off.
        let released = next_on(&mut events, "x").await;
        assert_eq!(released.kind, EventKind::Released, "{released:?}");
        let handed = next_on(&mut events, "x").await;
        assert_eq!(
            (handed.kind, handed.owner.as_ref(), handed.fencing_token),
            (EventKind::HandedOff, owner.as_str(), grant.fencing_token)
        );
        let host = if i == 1 { &a } else { &b };
        host.unlock(&key, &owner, Some(grant.fencing_token))
            .await
            .unwrap();
    }
    assert_eq!(next_on(&mut events, "x").await.kind, EventKind::Released);
}

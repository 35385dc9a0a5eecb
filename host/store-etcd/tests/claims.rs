//! Shared locks, semaphores and lock-delays on etcd, shared by several hosts
//! (docs/contract.md#c21-shared, #c22-semaphores, #c23-lock-delay): two
//! lockd "hosts" (two backends, each with its own client and session) on
//! one etcd, one etcd per test. The cases that need time to pass drive one
//! `ManualClock` both hosts read, so they take no real waiting.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions};
use lockd_core::{
    Claim, Clock, Durability, EventKind, Grant, Limits, LockDelays, LockError, LockOptions,
    LockService, ManualClock, SystemClock,
};
use lockd_etcd::{EtcdBackend, EtcdOptions};
use lockd_test_support::etcd::EtcdCluster;
use tokio::task::JoinHandle;

const NS: &str = "test";

fn claim(claim: Claim, wait_ms: u64) -> LockOptions {
    LockOptions {
        wait_ms,
        durability: Durability::Persistent,
        claim,
        ..LockOptions::default()
    }
}

const SHARED: Claim = Claim::Shared;
const EXCLUSIVE: Claim = Claim::Exclusive;

/// A lockd "host" on `etcd` reading `clock`, with `delays`.
async fn host(etcd: &EtcdCluster, clock: Arc<dyn Clock>, delays: LockDelays) -> LockService {
    let mut options = EtcdOptions::new(etcd.endpoints());
    // etcd's leases run on real time: long enough that none runs out while
    // a manual clock stands still.
    options.lease_slack = Duration::from_secs(600);
    options.request_timeout = Duration::from_secs(5);
    let backend = EtcdBackend::connect(options, clock).await.unwrap();
    LockService::new(Arc::new(backend), Limits::default()).with_lock_delays(delays)
}

async fn queue_len(client: &mut Client) -> usize {
    let resp = client
        .get(
            "/lockd/.queue/",
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .unwrap();
    resp.count() as usize
}

/// Waits (real time) until `n` waiters are queued in etcd.
async fn until_queued(client: &mut Client, n: usize) {
    let until = Instant::now() + Duration::from_secs(10);
    while queue_len(client).await != n {
        assert!(Instant::now() < until, "never saw {n} waiters queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `owner` asks `host` for `test/<name>` with `options` in a task of its own.
fn spawn_lock(
    host: &LockService,
    name: &'static str,
    owner: &'static str,
    options: LockOptions,
) -> JoinHandle<Result<Grant, LockError>> {
    let host = host.clone();
    tokio::spawn(async move { host.lock(NS, name, owner, 60_000, options).await })
}

/// Whether `task` is done within a moment (real time).
async fn done_soon(task: &JoinHandle<Result<Grant, LockError>>) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while !task.is_finished() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    task.is_finished()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_share_a_read_write_lock_first_in_first_out() {
    let etcd = EtcdCluster::start().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let a = host(&etcd, clock.clone(), LockDelays::default()).await;
    let b = host(&etcd, clock, LockDelays::default()).await;
    let mut client = Client::connect(etcd.endpoints(), None).await.unwrap();

    // Readers on both hosts hold it together, each with its own token.
    let r1 = a
        .lock(NS, "rw", "r1", 60_000, claim(SHARED, 0))
        .await
        .unwrap();
    let r2 = b
        .lock(NS, "rw", "r2", 60_000, claim(SHARED, 0))
        .await
        .unwrap();
    assert!(r2.fencing_token > r1.fencing_token);
    // A re-lock keeps the token; asking the other mode is no upgrade.
    let again = a
        .lock(NS, "rw", "r1", 60_000, claim(SHARED, 0))
        .await
        .unwrap();
    assert_eq!(again.fencing_token, r1.fencing_token);
    assert!(matches!(
        b.lock(NS, "rw", "r1", 60_000, claim(EXCLUSIVE, 0)).await,
        Err(LockError::InvalidArgument(m)) if m.contains("upgraded")
    ));
    // A writer is busy with the most recent reader; then it queues.
    match a.lock(NS, "rw", "w", 60_000, claim(EXCLUSIVE, 0)).await {
        Err(LockError::Busy(info)) => assert_eq!(info.fencing_token, r2.fencing_token),
        other => panic!("expected busy, got {other:?}"),
    }
    let w = spawn_lock(&b, "rw", "w", claim(EXCLUSIVE, 30_000));
    until_queued(&mut client, 1).await;
    // A reader arriving after the writer waits behind it (no writer
    // starvation), on either host, though the lock is held shared.
    assert!(matches!(
        a.lock(NS, "rw", "r3", 60_000, claim(SHARED, 0)).await,
        Err(LockError::Busy(_))
    ));
    let r3 = spawn_lock(&a, "rw", "r3", claim(SHARED, 30_000));
    until_queued(&mut client, 2).await;
    let r4 = spawn_lock(&b, "rw", "r4", claim(SHARED, 30_000));
    until_queued(&mut client, 3).await;
    let state = b.describe(NS, "rw").await.unwrap();
    let holders: Vec<(&str, Claim)> = state
        .holders
        .iter()
        .map(|h| (h.info.owner.as_str(), h.claim))
        .collect();
    assert_eq!(holders, [("r1", SHARED), ("r2", SHARED)]);
    assert_eq!(state.waiters, 3);
    assert_eq!(a.get(NS, "rw").await.unwrap().unwrap().owner, "r2");

    // The writer gets it once both readers are gone.
    a.unlock(NS, "rw", "r1", Some(r1.fencing_token))
        .await
        .unwrap();
    assert!(
        !done_soon_ms(&w, 200).await,
        "the writer came in beside a reader"
    );
    b.unlock(NS, "rw", "r2", None).await.unwrap();
    let wg = w.await.unwrap().unwrap();
    assert!(wg.fencing_token > r2.fencing_token);
    assert!(!r3.is_finished() && !r4.is_finished());
    // Then both readers behind it, together, in queue order.
    b.unlock(NS, "rw", "w", Some(wg.fencing_token))
        .await
        .unwrap();
    let (g3, g4) = (r3.await.unwrap().unwrap(), r4.await.unwrap().unwrap());
    assert!(wg.fencing_token < g3.fencing_token && g3.fencing_token < g4.fencing_token);
    let state = a.describe(NS, "rw").await.unwrap();
    assert_eq!(state.holders.len(), 2);
    assert_eq!(state.waiters, 0);

    // A force-unlock releases every holder in one step, one event each.
    let mut events = a.events().unwrap();
    let forced = b.force_unlock(NS, "rw").await.unwrap();
    assert_eq!(
        (forced.owner.as_str(), forced.fencing_token),
        ("r4", g4.fencing_token)
    );
    assert_eq!(a.get(NS, "rw").await.unwrap(), None);
    let mut released = Vec::new();
    while released.len() < 2 {
        let e = tokio::time::timeout(Duration::from_secs(5), events.recv())
            .await
            .expect("a force_released event per holder")
            .unwrap();
        if e.kind == EventKind::ForceReleased {
            assert_eq!(e.claim, SHARED);
            released.push(e.fencing_token);
        }
    }
    released.sort_unstable();
    assert_eq!(released, [g3.fencing_token, g4.fencing_token]);
}

/// Whether `task` finishes within `ms` of real time.
async fn done_soon_ms(task: &JoinHandle<Result<Grant, LockError>>, ms: u64) -> bool {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    task.is_finished()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_never_has_more_holders_than_permits_across_hosts() {
    let etcd = EtcdCluster::start().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let hosts = [
        host(&etcd, clock.clone(), LockDelays::default()).await,
        host(&etcd, clock, LockDelays::default()).await,
    ];
    let permit = Claim::Permit { permits: 3 };
    // Three permits on two hosts; a fourth is busy, on either.
    let mut held = Vec::new();
    for (i, owner) in ["s0", "s1", "s2"].into_iter().enumerate() {
        let g = hosts[i % 2]
            .lock(NS, "sem", owner, 60_000, claim(permit, 0))
            .await
            .unwrap();
        held.push((owner, g.fencing_token));
    }
    for h in &hosts {
        match h.lock(NS, "sem", "s3", 60_000, claim(permit, 0)).await {
            Err(LockError::Busy(info)) => assert_eq!(info.fencing_token, held[2].1),
            other => panic!("a fourth permit of three: {other:?}"),
        }
    }
    assert_eq!(hosts[1].describe(NS, "sem").await.unwrap().holders.len(), 3);
    for (i, (owner, token)) in held.into_iter().enumerate() {
        hosts[i % 2]
            .unlock(NS, "sem", owner, Some(token))
            .await
            .unwrap();
    }
    // Contenders on both hosts: never more than three at once.
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let host = hosts[i % 2].clone();
        let (holding, most) = (holding.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let owner = format!("p{i}");
            let mut tokens = Vec::new();
            for _ in 0..3 {
                let g = host
                    .lock(NS, "sem", &owner, 60_000, claim(permit, 30_000))
                    .await
                    .unwrap();
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                host.unlock(NS, "sem", &owner, Some(g.fencing_token))
                    .await
                    .unwrap();
                tokens.push(g.fencing_token);
            }
            tokens
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} holders of a semaphore of 3 permits");
    assert!(most >= 2, "the permits were never held together ({most})");
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 30, "every grant has a token of its own");

    // Held: another count, or a lock of the name, changes nothing.
    let [a, b] = &hosts;
    let g = a
        .lock(NS, "sem", "p0", 60_000, claim(permit, 0))
        .await
        .unwrap();
    let again = b
        .lock(NS, "sem", "p0", 60_000, claim(permit, 0))
        .await
        .unwrap();
    assert_eq!(again.fencing_token, g.fencing_token);
    for (c, says) in [
        (Claim::Permit { permits: 4 }, "3 permits"),
        (EXCLUSIVE, "semaphore"),
        (SHARED, "semaphore"),
    ] {
        match b.lock(NS, "sem", "x", 60_000, claim(c, 0)).await {
            Err(LockError::InvalidArgument(m)) => assert!(m.contains(says), "{m}"),
            other => panic!("{c:?}: expected invalid_argument, got {other:?}"),
        }
    }
    match a.lock(NS, "rw", "x", 60_000, claim(SHARED, 0)).await {
        Ok(_) => {}
        other => panic!("expected a grant, got {other:?}"),
    }
    assert!(matches!(
        b.lock(NS, "rw", "y", 60_000, claim(permit, 0)).await,
        Err(LockError::InvalidArgument(m)) if m.contains("as a lock")
    ));
    assert_eq!(b.describe(NS, "sem").await.unwrap().holders.len(), 1);
    // Idle once the last permit is gone: the next acquire sets the count.
    a.unlock(NS, "sem", "p0", None).await.unwrap();
    b.lock(
        NS,
        "sem",
        "q",
        60_000,
        claim(Claim::Permit { permits: 5 }, 0),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_holds_the_name_back_on_every_host() {
    let etcd = EtcdCluster::start().unwrap();
    let manual = ManualClock::new(1_000_000);
    let clock: Arc<dyn Clock> = Arc::new(manual.clone());
    let delays = LockDelays {
        default_ms: 0,
        per_namespace: HashMap::from([(NS.to_string(), 5_000)]),
    };
    // Host `a` has the delay; `b` has none, and honours `a`'s grants'.
    let a = host(&etcd, clock.clone(), delays).await;
    let b = host(&etcd, clock, LockDelays::default()).await;
    let mut client = Client::connect(etcd.endpoints(), None).await.unwrap();

    let g = a
        .lock(NS, "d", "old", 1_000, claim(EXCLUSIVE, 0))
        .await
        .unwrap();
    manual.advance(1_000);
    // Expired: nobody holds it, but its place stays taken until 5 s later.
    assert_eq!(b.get(NS, "d").await.unwrap(), None);
    match b.lock(NS, "d", "new", 60_000, claim(SHARED, 0)).await {
        Err(LockError::Busy(info)) => {
            assert_eq!(
                (info.owner.as_str(), info.fencing_token),
                ("old", g.fencing_token)
            );
            assert_eq!(info.expires_at_ms, g.expires_at_ms + 5_000);
        }
        other => panic!("expected busy during the delay, got {other:?}"),
    }
    let state = b.describe(NS, "d").await.unwrap();
    assert!(state.holders.is_empty());
    assert_eq!(state.delay_until_ms, Some(g.expires_at_ms + 5_000));
    // A waiter waits through it and is served when it ends; nobody polls.
    let waiter = spawn_lock(&b, "d", "new", claim(EXCLUSIVE, 60_000));
    until_queued(&mut client, 1).await;
    manual.advance(4_999);
    assert!(
        !done_soon_ms(&waiter, 200).await,
        "granted during the delay"
    );
    manual.advance(1);
    assert!(
        done_soon(&waiter).await,
        "the delay ended, the waiter was not served"
    );
    let next = waiter.await.unwrap().unwrap();
    assert!(next.fencing_token > g.fencing_token);
    // `b` has no delay: its grant, force-released, frees the name at once.
    b.force_unlock(NS, "d").await.unwrap();
    let h = a
        .lock(NS, "d", "a1", 60_000, claim(EXCLUSIVE, 0))
        .await
        .unwrap();
    // `a`'s grant, force-released, holds it back from now on; its own
    // unlock would not have.
    b.force_unlock(NS, "d").await.unwrap();
    assert!(matches!(
        b.lock(NS, "d", "b1", 60_000, claim(EXCLUSIVE, 0)).await,
        Err(LockError::Busy(info)) if info.fencing_token == h.fencing_token
            && info.expires_at_ms == manual.now_ms() + 5_000
    ));
    manual.advance(5_000);
    let i = b
        .lock(NS, "d", "b1", 60_000, claim(EXCLUSIVE, 0))
        .await
        .unwrap();
    b.unlock(NS, "d", "b1", Some(i.fencing_token))
        .await
        .unwrap();
    let j = a
        .lock(NS, "d", "a2", 60_000, claim(EXCLUSIVE, 0))
        .await
        .unwrap();
    a.unlock(NS, "d", "a2", Some(j.fencing_token))
        .await
        .unwrap();
    b.lock(NS, "d", "b2", 60_000, claim(EXCLUSIVE, 0))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_written_before_claims_still_reads() {
    let etcd = EtcdCluster::start().unwrap();
    let a = host(&etcd, Arc::new(SystemClock), LockDelays::default()).await;
    let mut client = Client::connect(etcd.endpoints(), None).await.unwrap();
    let expires = SystemClock.now_ms() + 60_000;
    // A fresh grant as lockd wrote it before claims: its token is the
    // key's revision.
    let old = format!(
        r#"{{"v":1,"owner":"old","expires_at_ms":{expires},"durability":"persistent","acquired_at_ms":1}}"#
    );
    let put = client.put("/lockd/test/legacy", old, None).await.unwrap();
    let token = put.header().unwrap().revision() as u64;
    let info = a.get(NS, "legacy").await.unwrap().unwrap();
    assert_eq!((info.owner.as_str(), info.fencing_token), ("old", token));
    let state = a.describe(NS, "legacy").await.unwrap();
    assert_eq!(state.holders[0].claim, EXCLUSIVE);
    assert_eq!(state.holders[0].info.fencing_token, token);
    assert!(matches!(
        a.lock(NS, "legacy", "r", 60_000, claim(SHARED, 0)).await,
        Err(LockError::Busy(info)) if info.fencing_token == token
    ));
    // Its re-lock keeps the token (written into the record now).
    let again = a
        .lock(NS, "legacy", "old", 60_000, claim(EXCLUSIVE, 0))
        .await
        .unwrap();
    assert_eq!(again.fencing_token, token);
    a.unlock(NS, "legacy", "old", Some(token)).await.unwrap();
    let r = a
        .lock(NS, "legacy", "r", 60_000, claim(SHARED, 0))
        .await
        .unwrap();
    assert!(r.fencing_token > token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_shared_holder_goes_with_its_host() {
    let etcd = EtcdCluster::start().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let a = host(&etcd, clock.clone(), LockDelays::default()).await;
    let b = host(&etcd, clock, LockDelays::default()).await;
    let ephemeral = LockOptions {
        durability: Durability::Ephemeral,
        ..claim(SHARED, 0)
    };
    a.lock(NS, "e", "ea", 60_000, ephemeral).await.unwrap();
    let kept = b
        .lock(NS, "e", "pb", 60_000, claim(SHARED, 0))
        .await
        .unwrap();
    assert_eq!(b.describe(NS, "e").await.unwrap().holders.len(), 2);
    drop(a); // host A ends: its session is revoked.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let owners: Vec<String> = b
            .list(NS, "e")
            .await
            .unwrap()
            .into_iter()
            .flat_map(|l| l.holders.into_iter().map(|h| h.info.owner))
            .collect();
        if owners == ["pb"] {
            break;
        }
        assert!(
            Instant::now() < until,
            "the dead host's reader stayed: {owners:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let state = b.describe(NS, "e").await.unwrap();
    assert_eq!(state.holders.len(), 1);
    assert_eq!(state.holders[0].info.fencing_token, kept.fencing_token);
    // The writer now waits for `pb` alone.
    b.unlock(NS, "e", "pb", None).await.unwrap();
    b.lock(NS, "e", "w", 60_000, claim(EXCLUSIVE, 0))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_on_two_hosts_never_overlap() {
    let etcd = EtcdCluster::start().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let hosts = [
        host(&etcd, clock.clone(), LockDelays::default()).await,
        host(&etcd, clock, LockDelays::default()).await,
    ];
    // Readers and writers at once, counted while they hold: a writer is
    // alone, and readers do hold together.
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let host = hosts[i % 2].clone();
        let (readers, writers, most_readers) =
            (readers.clone(), writers.clone(), most_readers.clone());
        tasks.push(tokio::spawn(async move {
            let owner = format!("c{i}");
            let mode = if i % 4 == 0 { EXCLUSIVE } else { SHARED };
            for _ in 0..3 {
                let g = host
                    .lock(NS, "rw", &owner, 60_000, claim(mode, 30_000))
                    .await
                    .unwrap();
                if mode == EXCLUSIVE {
                    assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer beside readers");
                } else {
                    let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    most_readers.fetch_max(now, Ordering::SeqCst);
                    assert_eq!(
                        writers.load(Ordering::SeqCst),
                        0,
                        "a reader beside a writer"
                    );
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                if mode == EXCLUSIVE {
                    writers.fetch_sub(1, Ordering::SeqCst);
                } else {
                    readers.fetch_sub(1, Ordering::SeqCst);
                }
                host.unlock(NS, "rw", &owner, Some(g.fencing_token))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        most_readers.load(Ordering::SeqCst) >= 2,
        "readers never held together"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_is_led_from_either_host() {
    let etcd = EtcdCluster::start().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let a = host(&etcd, clock.clone(), LockDelays::default()).await;
    let b = host(&etcd, clock, LockDelays::default()).await;
    let mut client = Client::connect(etcd.endpoints(), None).await.unwrap();
    let options = claim(EXCLUSIVE, 30_000);
    let ga = a
        .campaign(NS, "boss", "a", "10.0.0.1:80", 60_000, options)
        .await
        .unwrap();
    let follower = {
        let b = b.clone();
        tokio::spawn(async move {
            b.campaign(NS, "boss", "b", "10.0.0.2:80", 60_000, options)
                .await
        })
    };
    until_queued(&mut client, 1).await;
    // Host B learns who leads, and the value A proclaims.
    a.proclaim(NS, "boss", "a", ga.fencing_token, "10.0.0.1:81")
        .await
        .unwrap();
    let leader = b.leader(NS, "boss").await.unwrap().unwrap();
    assert_eq!(
        (
            leader.info.owner.as_str(),
            leader.value.as_str(),
            leader.info.fencing_token
        ),
        ("a", "10.0.0.1:81", ga.fencing_token)
    );
    assert!(matches!(
        b.lock(NS, "boss", "x", 60_000, claim(EXCLUSIVE, 0)).await,
        Err(LockError::InvalidArgument(m)) if m.contains("election")
    ));
    // A resigns: B leads with its own value and a higher token.
    a.unlock(NS, "boss", "a", Some(ga.fencing_token))
        .await
        .unwrap();
    let gb = follower.await.unwrap().unwrap();
    assert!(gb.fencing_token > ga.fencing_token);
    let leader = a.leader(NS, "boss").await.unwrap().unwrap();
    assert_eq!(
        (leader.info.owner.as_str(), leader.value.as_str()),
        ("b", "10.0.0.2:80")
    );
}

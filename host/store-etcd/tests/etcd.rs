//! What the etcd store adds to the shared contract: several hosts on one
//! etcd, lease expiry inside etcd, sessions, and etcd failures. These run on
//! real time (`SystemClock`) where etcd's leases must act.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions, PutOptions};
use lockd_core::{
    Clock, Durability, Limits, LockError, LockOptions, LockService, ManualClock, SystemClock,
};
use lockd_etcd::{EtcdBackend, EtcdOptions};
use lockd_test_support::etcd::EtcdCluster;

const NS: &str = "test";

fn opts(wait_ms: u64, durability: Durability) -> LockOptions {
    LockOptions {
        wait_ms,
        durability,
        ..LockOptions::default()
    }
}

fn options(etcd: &EtcdCluster) -> EtcdOptions {
    let mut o = EtcdOptions::new(etcd.endpoints());
    o.lease_slack = Duration::from_secs(1);
    o.request_timeout = Duration::from_secs(2);
    o.dial_timeout = Duration::from_secs(2);
    o
}

/// A lockd "host": its own client and session on the shared etcd.
async fn host(etcd: &EtcdCluster) -> LockService {
    let backend = EtcdBackend::connect(options(etcd), Arc::new(SystemClock))
        .await
        .unwrap();
    LockService::new(Arc::new(backend), Limits::default())
}

async fn raw(etcd: &EtcdCluster) -> Client {
    Client::connect(etcd.endpoints(), None).await.unwrap()
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

/// Queues a waiter for `test/x` (owner `slow`) as a host would, on a lease
/// of its own, for a host that never claims by itself. Returns the lease.
async fn queue_slow_waiter(client: &mut Client, durability: &str) -> i64 {
    let lease = client.lease_grant(60, None).await.unwrap().id();
    let waiter = format!(
        r#"{{"v":1,"id":"slow-1","owner":"slow","ttl_ms":30000,"durability":"{durability}","session":{lease}}}"#
    );
    client
        .put(
            "/lockd/.queue/test/x/slow-1",
            waiter,
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .unwrap();
    lease
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_shared_by_hosts_and_queues_fifo_across_them() {
    let etcd = EtcdCluster::start().unwrap();
    let (a, b) = (host(&etcd).await, host(&etcd).await);
    let mut client = raw(&etcd).await;
    let g0 = a
        .lock(NS, "q", "holder", 60_000, opts(0, Durability::Persistent))
        .await
        .unwrap();
    match b
        .lock(NS, "q", "other", 60_000, opts(0, Durability::Persistent))
        .await
    {
        Err(LockError::Busy(info)) => {
            assert_eq!(
                (info.owner.as_str(), info.fencing_token),
                ("holder", g0.fencing_token)
            );
        }
        other => panic!("expected busy, got {other:?}"),
    }
    // Waiters alternate between hosts; each is queued before the next comes.
    let mut tasks = Vec::new();
    for (i, (s, w)) in [(&b, "w1"), (&a, "w2"), (&b, "w3")].into_iter().enumerate() {
        let s = s.clone();
        tasks.push((
            w,
            tokio::spawn(async move {
                s.lock(NS, "q", w, 60_000, opts(30_000, Durability::Persistent))
                    .await
            }),
        ));
        until_queued(&mut client, i + 1).await;
    }
    let mut previous = ("holder", g0.fencing_token);
    for (i, (w, task)) in tasks.into_iter().enumerate() {
        // Unlock from the host that did not grant it, to show it is shared.
        let s = if i % 2 == 0 { &b } else { &a };
        s.unlock(NS, "q", previous.0, Some(previous.1))
            .await
            .unwrap();
        let g = task.await.unwrap().unwrap();
        assert!(g.fencing_token > previous.1);
        let info = a.get(NS, "q").await.unwrap().unwrap();
        assert_eq!(
            (info.owner.as_str(), info.fencing_token),
            (w, g.fencing_token)
        );
        previous = (w, g.fencing_token);
    }
    assert_eq!(queue_len(&mut client).await, 0);
}

#[tokio::test]
async fn a_dead_hosts_persistent_lock_expires_inside_etcd() {
    let etcd = EtcdCluster::start().unwrap();
    let mut client = raw(&etcd).await;
    let g1 = {
        let a = host(&etcd).await;
        a.lock(NS, "job", "a", 1_000, opts(0, Durability::Persistent))
            .await
            .unwrap()
        // Host A goes away without unlocking.
    };
    let b = host(&etcd).await;
    let started = Instant::now();
    // B waits in the queue; the holder's expiry wakes it (no polling).
    let g2 = b
        .lock(NS, "job", "b", 10_000, opts(10_000, Durability::Persistent))
        .await
        .unwrap();
    assert!(g2.fencing_token > g1.fencing_token);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    b.unlock(NS, "job", "b", None).await.unwrap();
    // A lock nobody touches again is removed by its lease (TTL + 1 s slack).
    let g3 = b
        .lock(NS, "left", "b", 500, opts(0, Durability::Persistent))
        .await
        .unwrap();
    assert!(g3.fencing_token > g2.fencing_token);
    drop(b);
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let left = client.get("/lockd/test/left", None).await.unwrap();
        if left.kvs().is_empty() {
            break;
        }
        assert!(Instant::now() < until, "etcd never expired the lease");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn ephemeral_locks_end_with_their_hosts_session_and_wake_waiters() {
    let etcd = EtcdCluster::start().unwrap();
    let a = host(&etcd).await;
    let b = host(&etcd).await;
    let g = a
        .lock(NS, "e", "a", 600_000, opts(0, Durability::Ephemeral))
        .await
        .unwrap();
    let persistent = a
        .lock(NS, "p", "a", 600_000, opts(0, Durability::Persistent))
        .await
        .unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.lock(NS, "e", "b", 60_000, opts(20_000, Durability::Persistent))
                .await
        })
    };
    let mut client = raw(&etcd).await;
    until_queued(&mut client, 1).await;
    drop(a); // host A ends: its session is revoked.
    let handed = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was never woken")
        .unwrap()
        .unwrap();
    assert!(handed.fencing_token > g.fencing_token);
    let p = b
        .get(NS, "p")
        .await
        .unwrap()
        .expect("persistent lock outlives its host");
    assert_eq!(p.fencing_token, persistent.fencing_token);
}

#[tokio::test]
async fn nobody_takes_a_free_lock_past_a_queued_waiter() {
    // A waiter from a host that is alive but slow to claim: any caller that
    // finds the lock free first hands it to that waiter.
    let etcd = EtcdCluster::start().unwrap();
    let s = host(&etcd).await;
    let mut client = raw(&etcd).await;
    let lease = queue_slow_waiter(&mut client, "ephemeral").await;
    match s
        .lock(NS, "x", "barger", 1_000, opts(0, Durability::Persistent))
        .await
    {
        Err(LockError::Busy(info)) => assert_eq!(info.owner, "slow"),
        other => panic!("expected busy with the queued waiter holding, got {other:?}"),
    }
    assert_eq!(queue_len(&mut client).await, 0);
    let info = s.get(NS, "x").await.unwrap().unwrap();
    assert_eq!(info.durability, Durability::Ephemeral);
    // Its host's session ends: the handed-over ephemeral lock goes with it.
    client.lease_revoke(lease).await.unwrap();
    assert_eq!(s.get(NS, "x").await.unwrap(), None);
}

/// Regression (found by the history checker in `host/lockd/tests/scale_out.rs`
/// after an etcd leader kill, when a waiter's retry delayed its own claim by
/// 145 ms): `get` answered `not_found` for a lock that had expired while a
/// waiter queued. Like every other path, it hands the lock over first.
#[tokio::test]
async fn get_hands_an_expired_lock_to_the_waiter_first() {
    let etcd = EtcdCluster::start().unwrap();
    let s = host(&etcd).await;
    let mut client = raw(&etcd).await;
    let held = s
        .lock(NS, "x", "holder", 300, opts(0, Durability::Persistent))
        .await
        .unwrap();
    // A waiter of a host that never claims by itself.
    queue_slow_waiter(&mut client, "persistent").await;
    tokio::time::sleep(Duration::from_millis(400)).await;

    let info = s.get(NS, "x").await.unwrap().expect("handed to the waiter");
    assert_eq!(info.owner, "slow");
    assert!(info.fencing_token > held.fencing_token);
    assert_eq!(queue_len(&mut client).await, 0);
}

/// Regression (found by the history checker in `host/lockd/tests/scale_out.rs`):
/// unlock deleted the lock and then handed it to the queue's head in a
/// second transaction, so for a few milliseconds any host's `get` answered
/// `not_found` while a waiter queued. Release and hand-off must be one
/// revision: at no revision in between is the lock key absent.
#[tokio::test]
async fn an_unlock_hands_off_without_a_free_moment() {
    let etcd = EtcdCluster::start().unwrap();
    let s = host(&etcd).await;
    let mut client = raw(&etcd).await;
    let held = s
        .lock(NS, "x", "holder", 60_000, opts(0, Durability::Persistent))
        .await
        .unwrap();
    // A waiter of a host that never claims by itself, so only the unlock
    // can hand the lock over.
    queue_slow_waiter(&mut client, "persistent").await;
    let before = client.get("/lockd/test/x", None).await.unwrap();
    let from = before.header().unwrap().revision();

    s.unlock(NS, "x", "holder", Some(held.fencing_token))
        .await
        .unwrap();
    let info = s.get(NS, "x").await.unwrap().expect("handed to the waiter");
    assert_eq!(info.owner, "slow");
    assert!(info.fencing_token > held.fencing_token);
    let to = client
        .get("/lockd/test/x", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    for revision in from..=to {
        let at = client
            .get(
                "/lockd/test/x",
                Some(GetOptions::new().with_revision(revision)),
            )
            .await
            .unwrap();
        assert_eq!(
            at.kvs().len(),
            1,
            "the lock was free at revision {revision}"
        );
    }
    assert_eq!(queue_len(&mut client).await, 0);
}

/// tonic keeps a member that refuses connections in the client's rotation,
/// so after a member died every call had a chance to be sent there, refused
/// and retried with a pause. The backend takes it out at the first refusal
/// and puts it back once it accepts again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_leaves_the_rotation_and_comes_back() {
    let mut etcd = EtcdCluster::start_members(3).unwrap();
    let backend = Arc::new(
        EtcdBackend::connect(options(&etcd), Arc::new(SystemClock))
            .await
            .unwrap(),
    );
    let s = LockService::new(backend.clone(), Limits::default());
    assert_eq!(backend.endpoints_in_use(), etcd.endpoints());
    let leader = etcd.wait_for_leader(Duration::from_secs(5)).unwrap();
    let dead = (leader + 1) % 3;
    etcd.kill_member(dead);

    // The quorum stands, so every call succeeds; the first one sent to the
    // dead member is refused, retried, and takes it out of rotation.
    let until = Instant::now() + Duration::from_secs(10);
    let mut calls = 0;
    while backend.endpoints_in_use().contains(&etcd.endpoint(dead)) {
        assert!(
            Instant::now() < until,
            "still in rotation after {calls} calls and {} refusals",
            backend.refused_requests()
        );
        s.get(NS, &format!("probe-{calls}")).await.unwrap();
        calls += 1;
    }
    assert_eq!(backend.endpoints_in_use().len(), 2);
    // Out of rotation, it refuses nothing more.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let refused = backend.refused_requests();
    for i in 0..100 {
        let name = format!("after-{i}");
        let g = s
            .lock(NS, &name, "o", 60_000, opts(0, Durability::Persistent))
            .await
            .unwrap();
        s.unlock(NS, &name, "o", Some(g.fencing_token))
            .await
            .unwrap();
    }
    assert_eq!(backend.refused_requests(), refused);

    etcd.restart_member(dead).unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while backend.endpoints_in_use().len() < 3 {
        assert!(Instant::now() < until, "never put back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.get(NS, "x").await.unwrap();
}

/// A clock that moves `step` ms each time it is read, so that time passes
/// between an operation's check and its commit, as over a slow network.
#[derive(Debug)]
struct TickingClock {
    now: AtomicU64,
    step: u64,
}

impl Clock for TickingClock {
    fn now_ms(&self) -> u64 {
        self.now.fetch_add(self.step, Ordering::SeqCst) + self.step
    }

    fn sleep_until(&self, _deadline_ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(std::future::ready(()))
    }
}

/// An extend reads the holder as live, but etcd cannot compare times, so
/// its write may commit after the expiry it checked, when others had
/// rightly seen the lock free. Such a refresh is taken back and answers
/// `not_held`. With a clock that moves at every read, some TTL between one
/// and a dozen reads ends exactly between the extend's check and its
/// commit.
#[tokio::test]
async fn an_extend_that_lands_after_the_expiry_is_taken_back() {
    let etcd = EtcdCluster::start().unwrap();
    let clock = Arc::new(TickingClock {
        now: AtomicU64::new(1_700_000_000_000),
        step: 10,
    });
    let mut o = options(&etcd);
    // The test clock runs at its own pace while etcd's leases run in real
    // time.
    o.lease_slack = Duration::from_secs(600);
    let s = LockService::new(
        Arc::new(EtcdBackend::connect(o, clock).await.unwrap()),
        Limits::default(),
    );
    let mut client = raw(&etcd).await;
    let (mut in_time, mut expired, mut taken_back) = (0, 0, 0);
    for reads in 1..=12 {
        let name = format!("t{reads}");
        let key = format!("/lockd/test/{name}");
        let g = s
            .lock(NS, &name, "o", reads * 10, opts(0, Durability::Persistent))
            .await
            .unwrap();
        match s.extend(NS, &name, "o", 600_000).await {
            Ok(e) => {
                assert_eq!(e.fencing_token, g.fencing_token);
                in_time += 1;
                continue;
            }
            Err(LockError::NotHeld) => {}
            other => panic!("{other:?}"),
        }
        // The extend's write (live for minutes, so nothing would remove
        // it) must not have stayed: the key is the expired grant or gone
        // (a sweeper or a read removes expired keys).
        let end = client.get(key.as_str(), None).await.unwrap();
        if let Some(kv) = end.kvs().first() {
            assert_eq!(
                kv.mod_revision(),
                g.fencing_token as i64,
                "an extend answered not_held but its write stayed"
            );
        }
        // Whether it wrote at all, and so was taken back: the key's history.
        let to = end.header().unwrap().revision();
        let mut wrote = false;
        for revision in g.fencing_token as i64 + 1..=to {
            let at = client
                .get(
                    key.as_str(),
                    Some(GetOptions::new().with_revision(revision)),
                )
                .await
                .unwrap();
            wrote |= at
                .kvs()
                .first()
                .is_some_and(|kv| kv.mod_revision() != g.fencing_token as i64);
        }
        if wrote {
            taken_back += 1;
        } else {
            expired += 1;
        }
        assert_eq!(s.get(NS, &name).await.unwrap(), None);
        // Free: the next grant is fresh, with a new token.
        let again = s
            .lock(NS, &name, "o", 60_000, opts(0, Durability::Persistent))
            .await
            .unwrap();
        assert!(again.fencing_token > g.fencing_token);
    }
    println!("extends in time {in_time}, after the expiry {expired}, taken back {taken_back}");
    assert!(taken_back >= 1, "no TTL ended between check and commit");
}

#[tokio::test]
async fn tokens_rise_across_an_etcd_restart() {
    let mut etcd = EtcdCluster::start().unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let connect = |etcd: &EtcdCluster| {
        let mut o = options(etcd);
        o.lease_slack = Duration::from_secs(600);
        EtcdBackend::connect(o, Arc::new(clock.clone()))
    };
    let s = LockService::new(Arc::new(connect(&etcd).await.unwrap()), Limits::default());
    let g1 = s
        .lock(NS, "t", "o1", 60_000, opts(0, Durability::Persistent))
        .await
        .unwrap();
    drop(s);
    etcd.restart_member(0).unwrap();
    let s = LockService::new(Arc::new(connect(&etcd).await.unwrap()), Limits::default());
    let info = s
        .get(NS, "t")
        .await
        .unwrap()
        .expect("held across the etcd restart");
    assert_eq!(info.fencing_token, g1.fencing_token);
    s.unlock(NS, "t", "o1", Some(g1.fencing_token))
        .await
        .unwrap();
    let g2 = s
        .lock(NS, "t", "o2", 60_000, opts(0, Durability::Persistent))
        .await
        .unwrap();
    assert!(g2.fencing_token > g1.fencing_token);
}

#[tokio::test]
async fn etcd_failures_answer_unavailable() {
    // Nothing listens: connecting fails with a message naming the endpoint.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let mut o = EtcdOptions::new([dead.clone()]);
    o.dial_timeout = Duration::from_millis(500);
    o.request_timeout = Duration::from_millis(500);
    let started = Instant::now();
    match EtcdBackend::connect(o, Arc::new(SystemClock)).await {
        Err(LockError::Unavailable(m)) => assert!(m.contains(&dead), "{m}"),
        other => panic!("expected unavailable, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));

    // etcd dies under a connected backend: every operation says so.
    let mut etcd = EtcdCluster::start().unwrap();
    let mut o = options(&etcd);
    o.request_timeout = Duration::from_millis(500);
    let backend = EtcdBackend::connect(o, Arc::new(SystemClock))
        .await
        .unwrap();
    let s = LockService::new(Arc::new(backend), Limits::default());
    s.lock(NS, "a", "o1", 60_000, opts(0, Durability::Persistent))
        .await
        .unwrap();
    let waiter = {
        let s = s.clone();
        tokio::spawn(async move {
            s.lock(NS, "a", "o2", 60_000, opts(60_000, Durability::Persistent))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    etcd.kill_member(0);
    let started = Instant::now();
    for result in [
        s.lock(NS, "b", "o1", 1_000, LockOptions::default())
            .await
            .map(drop),
        s.unlock(NS, "a", "o1", None).await,
        s.extend(NS, "a", "o1", 1_000).await.map(drop),
        s.get(NS, "a").await.map(drop),
        s.list(NS, "").await.map(drop),
    ] {
        assert!(
            matches!(result, Err(LockError::Unavailable(ref m)) if m.contains("etcd")),
            "{result:?}"
        );
    }
    let waited = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(waited, Err(LockError::Unavailable(_))),
        "{waited:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // The metrics path never blocks or panics either.
    let _ = s.render_metrics();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_survive_losing_the_leader() {
    let mut etcd = EtcdCluster::start_members(3).unwrap();
    let s = host(&etcd).await;
    let g1 = s
        .lock(NS, "l", "o1", 60_000, opts(0, Durability::Persistent))
        .await
        .unwrap();
    let mut leader = None;
    for i in 0..3 {
        let mut c = Client::connect([etcd.endpoint(i)], None).await.unwrap();
        let status = c.status().await.unwrap();
        if status.header().map(|h| h.member_id()) == Some(status.leader()) {
            leader = Some(i);
        }
    }
    etcd.kill_member(leader.expect("a leader"));
    // Some calls may answer `unavailable` during the election; none may be
    // a wrong answer.
    let until = Instant::now() + Duration::from_secs(20);
    let g2 = loop {
        match s.unlock(NS, "l", "o1", Some(g1.fencing_token)).await {
            Ok(()) | Err(LockError::NotHeld) => {}
            Err(LockError::Unavailable(_)) if Instant::now() < until => continue,
            other => panic!("{other:?}"),
        }
        match s
            .lock(NS, "l", "o2", 60_000, opts(0, Durability::Persistent))
            .await
        {
            Ok(g) => break g,
            Err(LockError::Unavailable(_)) if Instant::now() < until => continue,
            other => panic!("{other:?}"),
        }
    };
    assert!(g2.fencing_token > g1.fencing_token);
    assert_eq!(s.get(NS, "l").await.unwrap().unwrap().owner, "o2");
}

/// A host releases a grant it made itself in one transaction that holds
/// only while the key is exactly as that host wrote it. Whatever another
/// host changed since (a refresh, a release and a newer grant, a grant
/// after the expiry) sends the unlock down the general path, which answers
/// as it always does and never touches the newer grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_one_step_unlock_never_releases_what_another_host_changed() {
    let etcd = EtcdCluster::start().unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let connect = || {
        let mut o = options(&etcd);
        // The test clock stands still while etcd's leases run in real time.
        o.lease_slack = Duration::from_secs(600);
        EtcdBackend::connect(o, Arc::new(clock.clone()))
    };
    let a = LockService::new(Arc::new(connect().await.unwrap()), Limits::default());
    let b = LockService::new(Arc::new(connect().await.unwrap()), Limits::default());
    let persistent = opts(0, Durability::Persistent);

    // Refreshed on B: on A, the token alone does not make another owner the
    // holder, and the owner's own unlock still works.
    let g = a.lock(NS, "x", "alice", 10_000, persistent).await.unwrap();
    b.extend(NS, "x", "alice", 20_000).await.unwrap();
    let stolen = a.unlock(NS, "x", "mallory", Some(g.fencing_token)).await;
    assert_eq!(stolen, Err(LockError::NotOwner));
    a.unlock(NS, "x", "alice", Some(g.fencing_token))
        .await
        .unwrap();
    assert_eq!(b.get(NS, "x").await.unwrap(), None);

    // Released through B and granted to bob before alice's lease would have
    // ended: alice's unlock on A must leave bob's grant alone.
    let g = a.lock(NS, "y", "alice", 10_000, persistent).await.unwrap();
    b.unlock(NS, "y", "alice", None).await.unwrap();
    let bob = b.lock(NS, "y", "bob", 10_000, persistent).await.unwrap();
    let late = a.unlock(NS, "y", "alice", Some(g.fencing_token)).await;
    assert_eq!(late, Err(LockError::NotOwner));
    assert_eq!(
        b.get(NS, "y")
            .await
            .unwrap()
            .map(|i| (i.owner, i.fencing_token)),
        Some(("bob".to_string(), bob.fencing_token))
    );

    // Expired and granted to bob on B: the same.
    let g = a.lock(NS, "z", "alice", 1_000, persistent).await.unwrap();
    clock.advance(1_001);
    let bob = b.lock(NS, "z", "bob", 10_000, persistent).await.unwrap();
    let late = a.unlock(NS, "z", "alice", Some(g.fencing_token)).await;
    assert_eq!(late, Err(LockError::NotOwner));
    assert_eq!(
        a.get(NS, "z")
            .await
            .unwrap()
            .map(|i| (i.owner, i.fencing_token)),
        Some(("bob".to_string(), bob.fencing_token))
    );
}

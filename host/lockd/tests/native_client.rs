//! The native async client (`lockd-native-client`) against real `lockd serve`
//! processes on loopback:
//! - its transport fails over past a dead host and, when the host in use is
//!   killed, to the next one (memory stores);
//! - guards renew, refuse others with a typed `busy`, release on drop and
//!   report their loss on a force-unlock and at expiry (redb);
//! - leases, shared locks, semaphores and elections round trip (redb);
//! - two hosts on one etcd: a kept-alive guard survives the SIGKILL of the
//!   host it renews through, nobody else gets its lock meanwhile, and the
//!   failover time is printed.

mod lockd_server;

use std::time::{Duration, Instant};

use lockd_api::{GetRequest, GrantReply, LockRequest, Route, Status};
use lockd_native_client::{
    Client, Error, GetReply, HeldMode, LostReason, Request, Retry, Servers, Transport,
};
use lockd_test_support::etcd::EtcdCluster;

use crate::lockd_server::{closed_port, Server};

fn transport(urls: &[&str]) -> Transport {
    Transport::builder(Servers::from_urls(urls).unwrap())
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

fn lock(name: &str, owner: &str) -> Request {
    Request::route(Route::Lock)
        .json(&LockRequest {
            name: name.to_string(),
            owner: Some(owner.to_string()),
            ttl_ms: Some(30_000),
            ..LockRequest::default()
        })
        .unwrap()
        .timeout(Duration::from_secs(10))
        .retry(Retry::Safe)
}

fn get(name: &str) -> Request {
    Request::route(Route::Get)
        .json(&GetRequest {
            namespace: None,
            name: name.to_string(),
        })
        .unwrap()
        .timeout(Duration::from_secs(10))
        .retry(Retry::Safe)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transport_fails_over_past_a_dead_host_and_a_killed_one() {
    let mut first = Server::start(&[]);
    let second = Server::start(&[]);
    let dead = format!("http://127.0.0.1:{}", closed_port());
    let transport = transport(&[&dead, &first.url, &second.url]);

    // The dead host is skipped; the first live one answers and is kept.
    let answer = transport.send(lock("a", "w1")).await.unwrap();
    assert_eq!(answer.server, first.url);
    let grant: GrantReply = answer.expect(Route::Lock, Status::Acquired).unwrap();
    assert_eq!(transport.preferred_server(), first.url);
    let again = transport.send(lock("a", "w1")).await.unwrap();
    assert_eq!(again.server, first.url);
    let relock: GrantReply = again.expect(Route::Lock, Status::Acquired).unwrap();
    assert_eq!(relock.fencing_token, grant.fencing_token);
    // A refusal comes back typed, from the host in use.
    let busy = transport
        .send(lock("a", "w2"))
        .await
        .unwrap()
        .expect::<GrantReply>(Route::Lock, Status::Acquired)
        .unwrap_err();
    assert_eq!(busy.busy_holder().unwrap().owner, "w1");

    // Kill the host in use: the next call goes to the other (whose memory
    // store has never seen the lock), and stays there.
    first.kill();
    let answer = transport.send(get("a")).await.unwrap();
    assert_eq!(answer.server, second.url);
    assert_eq!(
        (answer.status, answer.reply(Route::Get).unwrap().status()),
        (404, Status::NotFound)
    );
    assert_eq!(transport.preferred_server(), second.url);

    // With no host left, the error names each one.
    drop(second);
    let error = transport.send(get("a")).await.unwrap_err();
    let Error::Unreachable { failures } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(failures.len(), 3, "{error}");
    assert!(error.to_string().contains(&dead), "{error}");
}

/// Per-host settings on etcd (as scale_out.rs): etcd calls cut short
/// within the client's own timeouts.
const ETCD_LOCKD_TOML: &str = "[etcd]\ndial_timeout_ms = 2000\nrequest_timeout_ms = 2000\n";

/// `lockd serve --store redb:lockd.redb` in a fresh directory.
fn redb_server() -> Server {
    Server::start_in(None, &["--store", "redb:lockd.redb"], &[])
}

fn client(urls: &[&str]) -> Client {
    Client::builder()
        .servers(urls)
        .connect_timeout(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Polls `done` every 10 ms until it holds or `limit` passes; answers how
/// long it took, or `None`.
async fn within<F, Fut>(limit: Duration, mut done: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while started.elapsed() < limit {
        if done().await {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_renew_refuse_others_release_and_report_their_loss() {
    let server = redb_server();
    let client = client(&[&server.url]);
    let ttl = Duration::from_millis(1500);

    let guard = client.lock("job").ttl(ttl).keep_alive().await.unwrap();
    assert!(guard.owner().starts_with("guard-") && guard.owner().len() == 6 + 32);
    let busy = client.lock("job").owner("other").await.unwrap_err();
    let holder = busy.busy_holder().unwrap_or_else(|| panic!("{busy:?}"));
    assert_eq!(
        (holder.owner.as_str(), holder.fencing_token),
        (guard.owner(), guard.fencing_token())
    );

    // Keep-alive renews before the TTL would end it.
    let first_expiry = guard.expires_at_ms();
    let renewed = within(ttl, || async { guard.expires_at_ms() > first_expiry }).await;
    assert!(renewed.is_some(), "no renewal within the TTL");
    assert!(guard.is_held().await && !guard.is_lost());

    // A force-unlock is heard at the next renewal: about TTL/3.
    let lost = guard.lost();
    let forced_at = Instant::now();
    let released = client.force_unlock("job").await.unwrap();
    assert_eq!(released.owner, guard.owner());
    let reason = tokio::time::timeout(ttl, lost)
        .await
        .expect("lost() did not fire");
    let heard_after = forced_at.elapsed();
    println!(
        "lost() after force-unlock: {} ms (TTL {} ms, renewal every {} ms)",
        heard_after.as_millis(),
        ttl.as_millis(),
        ttl.as_millis() / 3
    );
    assert!(
        matches!(
            reason,
            LostReason::Revoked(Error::NotHeld { .. } | Error::NotOwner { .. })
        ),
        "{reason:?}"
    );
    assert!(
        heard_after < ttl / 3 + Duration::from_millis(500),
        "{heard_after:?}"
    );
    assert!(guard.is_lost());
    drop(guard);

    // A dropped guard releases: the name is free right after.
    let dropped = client
        .lock("dropped")
        .ttl(Duration::from_secs(60))
        .await
        .unwrap();
    let owner = dropped.owner().to_string();
    drop(dropped);
    let freed = within(Duration::from_secs(2), || async {
        client.get("dropped").await.unwrap().is_none()
    })
    .await;
    println!("dropped guard of {owner} released after {freed:?}");
    assert!(
        freed.is_some_and(|d| d < Duration::from_secs(1)),
        "{freed:?}"
    );
    client
        .lock("dropped")
        .owner("next")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // Release answers, and a second holder's release by token touches
    // nothing of the next grant.
    let released = client.lock("released").await.unwrap();
    released.release().await.unwrap();
    assert!(client.get("released").await.unwrap().is_none());

    // Without keep-alive the TTL ends it, and lost() says so.
    let short = client
        .lock("short")
        .ttl(Duration::from_millis(300))
        .await
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(3), short.lost())
        .await
        .unwrap();
    assert!(matches!(reason, LostReason::Expired), "{reason:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_shared_locks_semaphores_and_elections_round_trip() {
    let server = redb_server();
    let client = client(&[&server.url]);

    // Leases: two locks under one id, refreshed and revoked together.
    let lease = client
        .lease(Duration::from_secs(5))
        .keep_alive()
        .await
        .unwrap();
    assert!(lease.id().starts_with("lease-"));
    let s1 = lease.lock("shard-1", Duration::ZERO).await.unwrap();
    let s2 = lease.lock("shard-2", Duration::ZERO).await.unwrap();
    assert!(s2.fencing_token > s1.fencing_token);
    assert_eq!(
        client.get("shard-1").await.unwrap().unwrap().owner,
        lease.id()
    );
    let mut names = lease.locks().await.unwrap();
    names.sort();
    assert_eq!(names, ["shard-1", "shard-2"]);
    let before = lease.expires_at_ms();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(lease.refresh().await.unwrap() > before);
    assert!(lease.is_alive().await);
    assert_eq!(lease.revoke().await.unwrap(), 2);
    assert!(client.get("shard-1").await.unwrap().is_none());

    // Shared locks: two readers together, a writer refused.
    let reader1 = client.read_lock("doc").await.unwrap();
    let reader2 = client.read_lock("doc").await.unwrap();
    assert_ne!(reader1.fencing_token(), reader2.fencing_token());
    assert_eq!(reader1.mode(), HeldMode::Shared);
    let busy = client.lock("doc").await.unwrap_err();
    assert!(busy.busy_holder().is_some(), "{busy:?}");
    let GetReply::Found(state) = client.describe("doc").await.unwrap() else {
        panic!("doc is free");
    };
    assert_eq!(state.holders.len(), 2);
    reader1.release().await.unwrap();
    reader2.release().await.unwrap();
    client.lock("doc").await.unwrap().release().await.unwrap();

    // Semaphores: two permits of two, the third busy until one is back.
    let p1 = client.semaphore("pool", 2).await.unwrap();
    let _p2 = client.semaphore("pool", 2).await.unwrap();
    let full = client.semaphore("pool", 2).await.unwrap_err();
    assert!(full.busy_holder().is_some(), "{full:?}");
    assert_eq!(p1.mode(), HeldMode::Permit);
    p1.release().await.unwrap();
    let _p3 = client.semaphore("pool", 2).await.unwrap();

    // Elections: lead, proclaim, hand over to the next in the queue.
    let leader = client
        .campaign("scheduler", "10.0.0.5:8080")
        .keep_alive()
        .await
        .unwrap();
    let seen = client.leader("scheduler").await.unwrap().unwrap();
    assert_eq!(
        (seen.candidate.as_str(), seen.value.as_str()),
        (leader.candidate(), "10.0.0.5:8080")
    );
    let mut watch = client
        .watch_leader("scheduler", Duration::from_millis(20))
        .await
        .unwrap();
    leader.proclaim("10.0.0.5:8081").await.unwrap();
    let changed = watch.changed().await.unwrap().unwrap();
    assert_eq!(changed.value, "10.0.0.5:8081");
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .campaign("scheduler", "10.0.0.6:8080")
                .wait(Duration::from_secs(5))
                .await
        })
    };
    let busy = client.campaign("scheduler", "x").await.unwrap_err();
    assert_eq!(busy.busy_holder().unwrap().owner, leader.candidate());
    // Give the waiter time to queue, then resign: it leads next.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let old_token = leader.fencing_token();
    leader.resign().await.unwrap();
    let next = waiting.await.unwrap().unwrap();
    assert!(next.fencing_token() > old_token);
    let changed = watch.changed().await.unwrap().unwrap();
    assert_eq!(changed.candidate, next.candidate());
    next.resign().await.unwrap();
    assert!(client.leader("scheduler").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_guard_survives_the_kill_of_its_host() {
    let etcd = EtcdCluster::start().expect("etcd did not start");
    let store = format!("etcd:{}", etcd.endpoints().join(","));
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut hosts: Vec<Server> = dirs
        .iter()
        .map(|dir| {
            std::fs::write(dir.path().join("lockd.toml"), ETCD_LOCKD_TOML).unwrap();
            Server::start_in(Some(dir.path()), &["--store", &store], &[])
        })
        .collect();
    let (a, b) = (hosts[0].url.clone(), hosts[1].url.clone());
    let client = client(&[&a, &b]);
    let other = self::client(&[&b]);
    let ttl = Duration::from_millis(2000);

    let guard = client.lock("job").ttl(ttl).keep_alive().await.unwrap();
    assert_eq!(client.transport().preferred_server(), a);
    let lost = guard.lost();
    let expiry_before = guard.expires_at_ms();

    // SIGKILL the host in use: renewals go to the other.
    let killed_at = Instant::now();
    hosts[0].kill();
    let failover = within(ttl, || async {
        guard.expires_at_ms() > expiry_before && client.transport().preferred_server() == b
    })
    .await
    .expect("no renewal through the other host within the TTL");
    println!(
        "native client failover: {} ms from SIGKILL to the first renewal through the other host (TTL {} ms)",
        failover.as_millis(),
        ttl.as_millis()
    );
    assert!(killed_at.elapsed() < ttl);

    // Nobody else gets it meanwhile, for longer than a TTL, and it is not
    // lost.
    let watch_until = Instant::now() + ttl + ttl / 2;
    while Instant::now() < watch_until {
        let busy = other.lock("job").owner("intruder").await.unwrap_err();
        let holder = busy.busy_holder().unwrap_or_else(|| panic!("{busy:?}"));
        assert_eq!(
            (holder.owner.as_str(), holder.fencing_token),
            (guard.owner(), guard.fencing_token())
        );
        assert!(!guard.is_lost());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A force-unlock through the other host ends it within a renewal.
    other.force_unlock("job").await.unwrap();
    let reason = tokio::time::timeout(ttl, lost)
        .await
        .expect("lost() did not fire");
    assert!(matches!(reason, LostReason::Revoked(_)), "{reason:?}");

    // A dropped guard releases on etcd too.
    let dropped = client.lock("dropped").await.unwrap();
    drop(dropped);
    let freed = within(Duration::from_secs(2), || async {
        other.get("dropped").await.unwrap().is_none()
    })
    .await;
    assert!(freed.is_some(), "the dropped guard's lock is still held");
    drop(hosts);
    drop(etcd);
}

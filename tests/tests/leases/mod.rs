//! Leases, keep-alive and the lost signal through the wasm capability
//! (docs/contract.md#c16-leases, #c17-keep-alive, #c18-lost), with
//! `guest/rust-lease` run through the path `lockd run` uses; and a guest
//! built against the WIT before leases, run unchanged.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockd_core::{
    BackendStats, BoxFuture, Durability, Engine, Grant, Key, LeaseInfo, Limits, ListedLock,
    LockBackend, LockError, LockInfo, LockOptions, LockService,
};

use crate::common::{run_guest, text};

fn redb_service(dir: &tempfile::TempDir) -> LockService {
    LockService::new(
        lockd_redb::open(dir.path().join("locks.redb")).unwrap(),
        Limits::default(),
    )
}

/// Runs `rust-lease` with `args` in a task of its own.
fn spawn_guest(
    service: &LockService,
    namespace: &'static str,
    args: Vec<String>,
) -> tokio::task::JoinHandle<lockd_components::run::RunOutcome> {
    let service = service.clone();
    tokio::spawn(async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_guest(lockd_guest_tests::RUST_LEASE, &service, namespace, &args).await
    })
}

/// Waits (bounded) until `name` is held, and answers its holder.
async fn held(service: &LockService, namespace: &str, name: &str) -> LockInfo {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(info) = service.get(namespace, name).await.unwrap() {
            return info;
        }
        assert!(Instant::now() < deadline, "{name} was never taken");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn succeeded(out: &lockd_components::run::RunOutcome) -> String {
    let stdout = text(&out.stdout);
    assert_eq!(
        out.exit_code,
        0,
        "rust-lease failed:\n{stdout}\n{}\n{:?}",
        text(&out.stderr),
        out.trap
    );
    assert!(!stdout.contains("FAIL"), "{stdout}");
    stdout
}

/// The lease API end to end from a guest: grant, lock several, refresh
/// moves them all, unlock one, revoke releases the rest and readies the
/// lost pollable; the store agrees afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn rust_lease() {
    let dir = tempfile::tempdir().unwrap();
    let service = redb_service(&dir);
    let out = run_guest(
        lockd_guest_tests::RUST_LEASE,
        &service,
        "lease",
        &["lease-steps", "L/a", "L/b", "L/c"],
    )
    .await;
    let stdout = succeeded(&out);
    for step in 1..=5 {
        assert!(stdout.contains(&format!("ok {step}")), "{stdout}");
    }
    assert_eq!(service.list("lease", "L/").await.unwrap(), vec![]);
}

/// A kept-alive guard with a 1 s TTL stays held through 4 s of guest work;
/// once the instance ends it is free (at once here, and in any case within
/// its TTL: renewal stops with the instance).
///
/// The host renews a third of the TTL after the last renewal, so a renewal
/// has two thirds of the TTL to land: 200 ms with the 300 ms this test once
/// used, too little on a busy machine. What it proves does not depend on
/// the TTL's size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_guard_outlives_its_ttl() {
    const TTL_MS: u64 = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let service = redb_service(&dir);
    let guest = spawn_guest(
        &service,
        "ka",
        ["keep-alive", "K/g", TTL_MS.to_string().as_str(), "4000"]
            .map(String::from)
            .to_vec(),
    );
    let first = held(&service, "ka", "K/g").await;
    let started = Instant::now();
    // Watch it while the guest works: held by the same grant throughout.
    // The host frees it as the instance ends, a moment before the guest's
    // task reports finished; a lapse is that end only if the guest then
    // finishes at once and the lock was seen held for three TTLs first.
    while !guest.is_finished() {
        let Some(now) = service.get("ka", "K/g").await.unwrap() else {
            let lapsed = started.elapsed();
            tokio::time::timeout(Duration::from_secs(2), async {
                while !guest.is_finished() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("the kept-alive guard lapsed after {lapsed:?}"));
            assert!(
                lapsed >= Duration::from_millis(3 * TTL_MS),
                "the guard was freed after {lapsed:?}, before three TTLs"
            );
            break;
        };
        assert_eq!(
            (now.owner.as_str(), now.fencing_token),
            (first.owner.as_str(), first.fencing_token)
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let stdout = succeeded(&guest.await.unwrap());
    assert!(stdout.contains("held-after-work true"), "{stdout}");
    // Watched for three TTLs at least.
    assert!(started.elapsed() >= Duration::from_millis(3 * TTL_MS));
    tokio::time::sleep(Duration::from_millis(TTL_MS)).await;
    assert_eq!(service.get("ka", "K/g").await.unwrap(), None);
    // Renewal stopped with the instance: the lock stays free past another
    // renewal's time.
    tokio::time::sleep(Duration::from_millis(TTL_MS / 3 + 100)).await;
    assert_eq!(service.get("ka", "K/g").await.unwrap(), None);
}

/// A lease revoked from outside the guest (here by the host's service, as
/// the REST API or another host would): the guest's `subscribe-lost`
/// pollable becomes ready at once, its locks are free, and the guest sees
/// the lease dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_the_lease_is_revoked_from_outside() {
    let dir = tempfile::tempdir().unwrap();
    let service = redb_service(&dir);
    let guest = spawn_guest(
        &service,
        "rv",
        ["lease-lost", "60000", "yes", "R/a", "R/b"]
            .map(String::from)
            .to_vec(),
    );
    let a = held(&service, "rv", "R/a").await;
    let b = held(&service, "rv", "R/b").await;
    assert!(a.owner.starts_with("lease-"));
    assert_eq!(a.owner, b.owner);
    // Give the guest time to block on its pollable, and its monitor task
    // time to start listening (nothing outside shows either).
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(!guest.is_finished());
    let revoked = Instant::now();
    assert_eq!(service.revoke_lease("rv", &a.owner).await.unwrap(), 2);
    let out = tokio::time::timeout(Duration::from_secs(10), guest)
        .await
        .expect("the lost pollable never became ready")
        .unwrap();
    let stdout = succeeded(&out);
    assert!(stdout.contains("lost alive=false"), "{stdout}");
    assert!(
        revoked.elapsed() < Duration::from_secs(2),
        "lost took {:?}",
        revoked.elapsed()
    );
    assert_eq!(service.list("rv", "R/").await.unwrap(), vec![]);
}

/// A plain guard (no keep-alive): its lost pollable becomes ready at its
/// expiry, not before. (The TTL leaves this test ample time to see the
/// guard held before it expires.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_lost_fires_at_its_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let service = redb_service(&dir);
    let guest = spawn_guest(
        &service,
        "gl",
        ["guard-lost", "G/g", "2000"].map(String::from).to_vec(),
    );
    let info = held(&service, "gl", "G/g").await;
    let out = tokio::time::timeout(Duration::from_secs(20), guest)
        .await
        .expect("the guard's lost pollable never became ready")
        .unwrap();
    let stdout = succeeded(&out);
    assert!(stdout.contains("lost held=false"), "{stdout}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        now >= info.expires_at_ms,
        "lost {} ms before the expiry",
        info.expires_at_ms - now
    );
}

/// The store goes away while a kept-alive lease lives: renewals fail, and
/// once the expiry passes without one, the lease is lost: the pollable is
/// ready, no sooner than the expiry and soon after it. The store here
/// cannot say that the lease ended (its `lease_ended` never completes), so
/// only keep-alive can tell.
///
/// The TTL gives a renewal, due a third of it after the last, two thirds
/// of it to land while the store answers: 400 ms with the 600 ms this test
/// once used, too little on a busy machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_the_store_is_unavailable_past_the_expiry() {
    const TTL_MS: u64 = 1_500;
    let store = Arc::new(Flaky {
        inner: Engine::memory(),
        down: AtomicBool::new(false),
    });
    let service = LockService::new(store.clone(), Limits::default());
    let guest = spawn_guest(
        &service,
        "un",
        ["lease-lost", TTL_MS.to_string().as_str(), "yes", "U/a"]
            .map(String::from)
            .to_vec(),
    );
    let a = held(&service, "un", "U/a").await;
    // Kept alive past a few TTLs while the store answers.
    tokio::time::sleep(Duration::from_millis(8 * TTL_MS / 3)).await;
    assert!(!guest.is_finished(), "lost while the store answered");
    let lease = service.get_lease("un", &a.owner).await.unwrap().unwrap();
    assert!(
        lease.expires_at_ms > a.expires_at_ms,
        "keep-alive never refreshed"
    );
    store.down.store(true, Ordering::SeqCst);
    let down_at = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(10), guest)
        .await
        .expect("the lost pollable never became ready")
        .unwrap();
    let lost_after = down_at.elapsed();
    let stdout = succeeded(&out);
    assert!(stdout.contains("lost alive=false"), "{stdout}");
    // The last refresh before the outage gave it at most the TTL (and at
    // least two thirds of it, renewals coming a third of the TTL apart); it
    // is lost when that runs out, not at the first failed renewal.
    assert!(
        lost_after >= Duration::from_millis(TTL_MS / 4),
        "lost {lost_after:?} after the outage: before the expiry"
    );
    assert!(
        lost_after <= Duration::from_millis(TTL_MS + 500),
        "lost only {lost_after:?} after the outage"
    );
}

/// `rust-conformance` as built against the WIT before leases were added
/// (`tests/fixtures`, built from commit 651a763's `wit/`) runs unchanged on
/// today's host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_built_before_leases_runs_unchanged() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/rust-conformance-before-leases.wasm"
    );
    let dir = tempfile::tempdir().unwrap();
    let service = redb_service(&dir);
    let out = run_guest(path, &service, "old", &["P"]).await;
    let stdout = succeeded(&out);
    for step in 1..=12 {
        assert!(
            stdout.lines().any(|l| l == format!("ok {step}")),
            "{stdout}"
        );
    }
    let held = service.get("old", "P/held").await.unwrap().unwrap();
    assert_eq!(held.owner, "rust");
}

/// A store that can be made unavailable, and that never tells of a lease's
/// end by itself.
struct Flaky {
    inner: Arc<Engine>,
    down: AtomicBool,
}

impl Flaky {
    fn check(&self) -> Result<(), LockError> {
        if self.down.load(Ordering::SeqCst) {
            Err(LockError::Unavailable(
                "the test took the store down".into(),
            ))
        } else {
            Ok(())
        }
    }
}

impl LockBackend for Flaky {
    fn lock<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.lock(key, owner, ttl_ms, options).await
        })
    }

    fn unlock<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        token: Option<u64>,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.unlock(key, owner, token).await
        })
    }

    fn extend<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.extend(key, owner, ttl_ms).await
        })
    }

    fn get<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<LockInfo>, LockError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.get(key).await
        })
    }

    fn list<'a>(
        &'a self,
        namespace: &'a str,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ListedLock>, LockError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.list(namespace, prefix).await
        })
    }

    fn release_detached(&self, key: Key, owner: String, token: u64) {
        self.inner.release_detached(key, owner, token);
    }

    fn stats(&self) -> BackendStats {
        self.inner.stats()
    }

    fn grant_lease<'a>(
        &'a self,
        lease: &'a Key,
        ttl_ms: u64,
        durability: Durability,
    ) -> BoxFuture<'a, Result<u64, LockError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.grant_lease(lease, ttl_ms, durability).await
        })
    }

    fn refresh_lease<'a>(&'a self, lease: &'a Key) -> BoxFuture<'a, Result<u64, LockError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.refresh_lease(lease).await
        })
    }

    fn revoke_lease<'a>(&'a self, lease: &'a Key) -> BoxFuture<'a, Result<u64, LockError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.revoke_lease(lease).await
        })
    }

    fn get_lease<'a>(
        &'a self,
        lease: &'a Key,
    ) -> BoxFuture<'a, Result<Option<LeaseInfo>, LockError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.get_lease(lease).await
        })
    }

    fn lock_in_lease<'a>(
        &'a self,
        key: &'a Key,
        lease_id: &'a str,
        options: LockOptions,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.lock_in_lease(key, lease_id, options).await
        })
    }

    fn lease_ended(&self, _lease: &Key) -> BoxFuture<'static, ()> {
        Box::pin(std::future::pending())
    }
}

/// An operator's force-unlock of a guard's lock: the guest's lost pollable
/// is ready at once, long before the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_the_lock_is_force_released() {
    let dir = tempfile::tempdir().unwrap();
    let service = redb_service(&dir);
    let guest = spawn_guest(
        &service,
        "fr",
        ["guard-lost", "F/g", "60000"].map(String::from).to_vec(),
    );
    let info = held(&service, "fr", "F/g").await;
    // Give the guest time to block on its pollable, and its guard's monitor
    // task time to start listening for a force-release (nothing outside
    // shows either; one that missed it would hear of it only at the expiry,
    // a minute away).
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(!guest.is_finished());
    let forced = Instant::now();
    assert_eq!(service.force_unlock("fr", "F/g").await.unwrap(), info);
    let out = tokio::time::timeout(Duration::from_secs(10), guest)
        .await
        .expect("the lost pollable never became ready")
        .unwrap();
    let stdout = succeeded(&out);
    assert!(stdout.contains("lost held=false"), "{stdout}");
    assert!(
        forced.elapsed() < Duration::from_secs(2),
        "lost took {:?}",
        forced.elapsed()
    );
}

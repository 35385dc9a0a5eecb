//! The service's own work around a store: hold times, and following the
//! store's events only while someone needs them.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;

use super::*;
use crate::clock::ManualClock;
use crate::journal::{NullJournal, Recovered};
use crate::{Engine, EngineOptions};

/// An engine on a clock the test moves.
fn engine(clock: &ManualClock) -> Arc<Engine> {
    Engine::new(
        Arc::new(NullJournal),
        Recovered::in_memory(),
        Arc::new(clock.clone()),
        EngineOptions::default(),
    )
}

fn ephemeral() -> LockOptions {
    LockOptions {
        durability: Durability::Ephemeral,
        ..LockOptions::default()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn hold_times_are_the_engines_own() {
    let clock = ManualClock::new(1_000_000);
    let service = LockService::new(engine(&clock), Limits::default());
    let grant = service
        .lock("ns", "a", "o", 60_000, ephemeral())
        .await
        .unwrap();
    clock.advance(250);
    service
        .unlock("ns", "a", "o", Some(grant.fencing_token))
        .await
        .unwrap();
    service
        .lock("ns", "b", "o", 1_000, LockOptions::default())
        .await
        .unwrap();
    // Expired, found so by the next call on it.
    clock.advance(1_000);
    assert_eq!(service.get("ns", "b").await.unwrap(), None);
    let out = service.render_metrics();
    assert!(
        out.contains("lockd_hold_seconds_count{namespace=\"ns\"} 2"),
        "{out}"
    );
    assert!(
        out.contains("lockd_hold_seconds_sum{namespace=\"ns\"} 1.25"),
        "{out}"
    );
    assert!(
        out.contains("lockd_hold_seconds_bucket{namespace=\"ns\",le=\"0.25\"} 1"),
        "{out}"
    );
}

/// The engine, with its events passed on through a channel of the test's
/// own, whose subscribers the test can count; and whether it says it
/// measures hold times (as the engine does) or not (as etcd does not).
struct Counted {
    engine: Arc<Engine>,
    events: broadcast::Sender<LockEvent>,
    measures_holds: bool,
}

impl Counted {
    fn new(engine: Arc<Engine>, measures_holds: bool) -> Arc<Counted> {
        let events = broadcast::Sender::new(64);
        let mut from_engine = engine.events().expect("the engine has events");
        let to_service = events.clone();
        tokio::spawn(async move {
            while let Ok(event) = from_engine.recv().await {
                let _ = to_service.send(event);
            }
        });
        Arc::new(Counted {
            engine,
            events,
            measures_holds,
        })
    }

    fn listeners(&self) -> usize {
        self.events.receiver_count()
    }
}

impl LockBackend for Counted {
    fn lock<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        self.engine.lock(key, owner, ttl_ms, options)
    }
    fn unlock<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        token: Option<u64>,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        self.engine.unlock(key, owner, token)
    }
    fn extend<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        self.engine.extend(key, owner, ttl_ms)
    }
    fn get<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<LockInfo>, LockError>> {
        self.engine.get(key)
    }
    fn list<'a>(
        &'a self,
        namespace: &'a str,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ListedLock>, LockError>> {
        self.engine.list(namespace, prefix)
    }
    fn release_detached(&self, key: Key, owner: String, token: u64) {
        self.engine.release_detached(key, owner, token);
    }
    fn force_unlock<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<LockInfo, LockError>> {
        self.engine.force_unlock(key)
    }
    fn events(&self) -> Option<broadcast::Receiver<LockEvent>> {
        Some(self.events.subscribe())
    }
    fn hold_times(&self) -> Option<crate::metrics::HoldTimes> {
        self.measures_holds
            .then(|| self.engine.hold_times())
            .flatten()
    }
    fn stats(&self) -> BackendStats {
        self.engine.stats()
    }
}

/// Lets the runtime's other tasks run until `done` holds (at most a
/// thousand turns: the tasks here need a few).
async fn settle(done: impl Fn() -> bool) -> bool {
    for _ in 0..1_000 {
        if done() {
            return true;
        }
        tokio::task::yield_now().await;
    }
    done()
}

#[tokio::test(flavor = "current_thread")]
async fn events_are_followed_only_while_a_holder_waits_for_a_force_release() {
    let store = Counted::new(Engine::memory(), true);
    let service = LockService::new(store.clone(), Limits::default());
    // Nobody listens: the store builds no event.
    assert_eq!(store.listeners(), 0);
    service
        .lock("ns", "a", "holder", 60_000, ephemeral())
        .await
        .unwrap();
    for round in 0..2 {
        let released = service.force_released("ns", "holder");
        assert_eq!(store.listeners(), 1, "round {round}");
        service.force_unlock("ns", "a").await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), released)
            .await
            .expect("the holder hears of the force-release");
        assert!(
            settle(|| store.listeners() == 0).await,
            "round {round}: the follower stops with its last watcher"
        );
        service
            .lock("ns", "a", "holder", 60_000, ephemeral())
            .await
            .unwrap();
    }
    // A watcher whose holder went away without a word stops it too, at
    // the follower's next look.
    drop(service.force_released("ns", "gone"));
    assert_eq!(store.listeners(), 1);
    for i in 0..64 {
        let name = format!("n{i}");
        service
            .lock("ns", &name, "o", 60_000, ephemeral())
            .await
            .unwrap();
    }
    assert!(settle(|| store.listeners() == 0).await);
}

/// The negative control: a store that does not measure hold times is
/// followed from the start, and its hold times come from its events.
#[tokio::test(flavor = "current_thread")]
async fn a_store_without_hold_times_is_followed_from_the_start() {
    let store = Counted::new(Engine::memory(), false);
    let service = LockService::new(store.clone(), Limits::default());
    assert_eq!(store.listeners(), 1);
    let grant = service
        .lock("ns", "a", "o", 60_000, ephemeral())
        .await
        .unwrap();
    service
        .unlock("ns", "a", "o", Some(grant.fencing_token))
        .await
        .unwrap();
    let counted = || {
        service
            .render_metrics()
            .contains("lockd_hold_seconds_count{namespace=\"ns\"} 1")
    };
    assert!(settle(counted).await, "{}", service.render_metrics());
    assert_eq!(store.listeners(), 1);
}

/// A lock call that waits, spawned, and how to see it queued.
fn spawn_waiter(
    service: &LockService,
    name: &'static str,
    owner: &'static str,
) -> tokio::task::JoinHandle<Result<Grant, LockError>> {
    let service = service.clone();
    tokio::spawn(async move {
        let options = LockOptions {
            wait_ms: 3_600_000,
            ..LockOptions::default()
        };
        service.lock("ns", name, owner, 60_000, options).await
    })
}

async fn queued(service: &LockService, n: u64) {
    assert!(
        settle(|| service.stats().waiters == n).await,
        "expected {n} waiters, saw {}",
        service.stats().waiters
    );
}

/// Shutdown answers every queued waiter `unavailable` with its reason, at
/// once (not after its wait of an hour), and refuses new waits; calls that
/// do not wait, and the locks held, are untouched.
#[tokio::test(flavor = "current_thread")]
async fn shutdown_answers_queued_waiters_and_refuses_new_waits() {
    let service = LockService::new(Engine::memory(), Limits::default());
    let held = service
        .lock("ns", "a", "holder", 60_000, LockOptions::default())
        .await
        .unwrap();
    let waiters = [
        spawn_waiter(&service, "a", "w1"),
        spawn_waiter(&service, "a", "w2"),
    ];
    queued(&service, 2).await;
    let closed = service.closed();
    assert_eq!(service.shutting_down(), None);
    assert_eq!(service.shutdown(REASON), 2);
    let reason = LockError::Unavailable(REASON.into());
    for waiter in waiters {
        let answer = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("answered at once")
            .unwrap();
        assert_eq!(answer.unwrap_err(), reason);
    }
    tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .expect("closed() completes");
    assert_eq!(service.waits_answered(), 2);
    // They left the queue; the holder still holds, under its token.
    assert_eq!(service.stats().waiters, 0);
    let holder = service.get("ns", "a").await.unwrap().unwrap();
    assert_eq!(
        (holder.owner.as_str(), holder.fencing_token),
        ("holder", held.fencing_token)
    );
    // A new wait is refused at once, without queueing; a second shutdown
    // keeps the first reason.
    assert_eq!(service.shutdown("again"), 0);
    let late = spawn_waiter(&service, "a", "w3").await.unwrap();
    assert_eq!(late.unwrap_err(), reason);
    assert_eq!(service.shutting_down().as_deref(), Some(REASON));
    // Calls that do not wait go on.
    let busy = service
        .lock("ns", "a", "w4", 60_000, LockOptions::default())
        .await;
    assert!(matches!(busy, Err(LockError::Busy(_))), "{busy:?}");
    service
        .unlock("ns", "a", "holder", Some(held.fencing_token))
        .await
        .unwrap();
    service.sync().await.unwrap();
    assert_eq!(service.waits_answered(), 2);
}

const REASON: &str = "server shutting down; retry elsewhere";

/// The negative control: without a shutdown, the same waiter is still
/// waiting (the test above is not passing because waits end anyway), and
/// is granted when the holder lets go.
#[tokio::test(flavor = "current_thread")]
async fn without_shutdown_a_waiter_keeps_waiting() {
    let service = LockService::new(Engine::memory(), Limits::default());
    let held = service
        .lock("ns", "a", "holder", 60_000, LockOptions::default())
        .await
        .unwrap();
    let waiter = spawn_waiter(&service, "a", "w1");
    queued(&service, 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished());
    service
        .unlock("ns", "a", "holder", Some(held.fencing_token))
        .await
        .unwrap();
    let grant = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("granted")
        .unwrap()
        .unwrap();
    assert!(grant.fencing_token > held.fencing_token);
    assert_eq!(service.waits_answered(), 0);
}

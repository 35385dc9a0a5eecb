//! The trait a lock store implements.

use std::future::Future;
use std::pin::Pin;

use crate::error::LockError;
use crate::limits::LockDelays;
use crate::metrics::{BackendStats, HoldTimes, NamespaceStats, StoreSpace};
use crate::types::{
    Claim, Durability, Grant, Holding, Key, Leader, LeaseInfo, ListedLock, LockEvent, LockInfo,
    LockOptions, NameState,
};

/// A boxed, sendable future, so that [`LockBackend`] stays object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a store answers to an operation it does not support (the trait's
/// default for leases and force-unlock), so that a store can add them
/// later.
///
/// `denied`, not `unavailable`: `unavailable` means the outcome is unknown
/// and invites a retry (docs/contract.md#c13-unavailable), while this is a
/// definite refusal that changed nothing and that no retry will change.
/// `denied` is the refusal of a well-formed call by what the store allows
/// (C12); `invalid_argument` would blame the caller's arguments.
fn not_supported<'a, T: Send + 'a>(what: &str) -> BoxFuture<'a, Result<T, LockError>> {
    Box::pin(std::future::ready(Err(LockError::Denied(format!(
        "this lock store does not support {what}"
    )))))
}

/// A lock store. Arguments reach it already validated by
/// [`LockService`](crate::LockService); it owns the semantics of docs/contract.md:
/// idempotent re-lock, owner- and token-checked unlock and extend, expiry on
/// every read, a FIFO wait queue, and fencing tokens that never go backwards.
pub trait LockBackend: Send + Sync + 'static {
    /// Grants `key` to `owner` for `ttl_ms`, waiting up to `options.wait_ms`.
    fn lock<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> BoxFuture<'a, Result<Grant, LockError>>;

    /// Releases `key` if `owner` holds it under `token` (when given).
    fn unlock<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        token: Option<u64>,
    ) -> BoxFuture<'a, Result<(), LockError>>;

    /// Moves the expiry of a lock held by `owner` to now + `ttl_ms`.
    fn extend<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<Grant, LockError>>;

    /// The live holder of `key`, if any.
    fn get<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<LockInfo>, LockError>>;

    /// Live locks of `namespace` whose name starts with `prefix`, by name.
    fn list<'a>(
        &'a self,
        namespace: &'a str,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ListedLock>, LockError>>;

    /// Everything about `key`: every live holder with its claim, the queue's
    /// length and a lock-delay in force (docs/contract.md#c21-shared).
    /// The default, for a store of exclusive locks only, answers the holder
    /// `get` answers (without queue length or acquisition time).
    fn describe<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<NameState, LockError>> {
        Box::pin(async move {
            let holder = self.get(key).await?;
            Ok(NameState {
                holders: holder
                    .into_iter()
                    .map(|info| Holding {
                        info,
                        claim: Claim::Exclusive,
                        acquired_at_ms: None,
                    })
                    .collect(),
                ..NameState::default()
            })
        })
    }

    /// Campaigns for the election `key` as `candidate` with `value`: waits
    /// up to `options.wait_ms` in the name's FIFO queue, then leads for
    /// `ttl_ms` like an exclusive lock (extend, unlock and force-unlock act
    /// on the leadership). `options.claim` is ignored. See
    /// docs/contract.md#c24-elections.
    fn campaign<'a>(
        &'a self,
        key: &'a Key,
        candidate: &'a str,
        value: &'a str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        let _ = (key, candidate, value, ttl_ms, options);
        not_supported("elections")
    }

    /// Sets the value of the leadership `candidate` holds under `token`.
    fn proclaim<'a>(
        &'a self,
        key: &'a Key,
        candidate: &'a str,
        token: u64,
        value: &'a str,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        let _ = (key, candidate, token, value);
        not_supported("elections")
    }

    /// The leader of the election `key`, if it has one.
    fn leader<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Leader>, LockError>> {
        let _ = key;
        not_supported("elections")
    }

    /// The lock-delays in force (docs/contract.md#c23-lock-delay), given
    /// once by [`LockService::with_lock_delays`](crate::LockService::with_lock_delays):
    /// a store that keeps grants across restarts applies them to grants it
    /// recovered too, before any call brings the namespace's delay. Calls
    /// also carry the delay ([`LockOptions::lock_delay_ms`]). The default
    /// does nothing.
    fn set_lock_delays(&self, delays: &LockDelays) {
        let _ = delays;
    }

    /// Whether `lock` takes shared locks and semaphore permits
    /// ([`LockOptions::claim`]) and honours a lock-delay
    /// ([`LockOptions::lock_delay_ms`]). A store that answers `false` (the
    /// default) is never asked: [`LockService`](crate::LockService) refuses
    /// such calls with `denied`.
    fn supports_claims(&self) -> bool {
        false
    }

    /// Releases `key` if `owner` still holds it under `token`, without
    /// waiting for the outcome. Drop paths use it (a guard dropped with its
    /// instance), where nothing can await. Best effort: the TTL is the
    /// safety net.
    fn release_detached(&self, key: Key, owner: String, token: u64);

    /// Grants the lease `lease` (namespace and the id the service generated)
    /// for `ttl_ms`. See docs/contract.md#leases.
    fn grant_lease<'a>(
        &'a self,
        lease: &'a Key,
        ttl_ms: u64,
        durability: Durability,
    ) -> BoxFuture<'a, Result<u64, LockError>> {
        let _ = (lease, ttl_ms, durability);
        not_supported("leases")
    }

    /// Moves the expiry of a live lease, and so of every lock under it, to
    /// now + its TTL, in one step. Answers the new expiry, or `not_held` if
    /// the lease is unknown, revoked or expired.
    fn refresh_lease<'a>(&'a self, lease: &'a Key) -> BoxFuture<'a, Result<u64, LockError>> {
        let _ = lease;
        not_supported("leases")
    }

    /// Ends a live lease and releases all its locks in one atomic step (each
    /// passes to the head of its queue). Answers how many locks it released,
    /// or `not_held` if the lease is unknown, revoked or expired.
    fn revoke_lease<'a>(&'a self, lease: &'a Key) -> BoxFuture<'a, Result<u64, LockError>> {
        let _ = lease;
        not_supported("leases")
    }

    /// The state of a live lease, or `None`.
    fn get_lease<'a>(
        &'a self,
        lease: &'a Key,
    ) -> BoxFuture<'a, Result<Option<LeaseInfo>, LockError>> {
        let _ = lease;
        not_supported("leases")
    }

    /// Takes `key` under the live lease `lease_id` of the key's namespace:
    /// the lock's owner is the lease id and its expiry the lease's. Waits up
    /// to `options.wait_ms` like `lock`; `options.durability` is ignored
    /// (the lease's applies). `not_held` if the lease is not live.
    fn lock_in_lease<'a>(
        &'a self,
        key: &'a Key,
        lease_id: &'a str,
        options: LockOptions,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        let _ = (key, lease_id, options);
        not_supported("leases")
    }

    /// Completes once the lease has ended (revoked, or expired) as far as
    /// this store can tell, or at once if it is not live. The holder's host
    /// uses it to learn of a loss without polling.
    fn lease_ended(&self, lease: &Key) -> BoxFuture<'static, ()> {
        let _ = lease;
        Box::pin(std::future::ready(()))
    }

    /// Releases `key` whoever holds it (an operator's `force-unlock`): the
    /// head of its queue gets it next, and a `force_released` event is
    /// published. Answers the holder it released; `not_held` if free.
    fn force_unlock<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<LockInfo, LockError>> {
        let _ = key;
        not_supported("force-unlock")
    }

    /// A subscription to the store's events (docs/reference.md#events), or
    /// `None` for a store that publishes none.
    fn events(&self) -> Option<tokio::sync::broadcast::Receiver<LockEvent>> {
        None
    }

    /// The store's shared history of events, from which a stream resumes
    /// on another host (docs/reference.md#events), or `None` (the default)
    /// for a store whose events no other host can replay.
    fn event_history(&self) -> Option<std::sync::Arc<dyn crate::EventHistory>> {
        None
    }

    /// How long grants were held, per namespace (`lockd_hold_seconds`), for
    /// a store that measures it as it ends them; called at scrape time.
    /// `None` (the default): the store does not, and
    /// [`LockService`](crate::LockService) measures it from the store's
    /// events, which the store then builds for every change. A store that
    /// answers `Some` (even empty) is asked once at the service's start and
    /// builds events only while someone listens.
    fn hold_times(&self) -> Option<HoldTimes> {
        None
    }

    /// Held locks and waiters per namespace, for the per-namespace gauges.
    /// Called at scrape time. A store that cannot count cheaply answers
    /// nothing (the default).
    fn namespace_stats(&self) -> Vec<NamespaceStats> {
        Vec::new()
    }

    /// Every namespace that has a live held lock or a waiter, with its
    /// counts, sorted by name (`GET /v1/namespaces`). Unlike
    /// [`namespace_stats`](LockBackend::namespace_stats), an answer on
    /// request that may ask the store, so a store that cannot tell refuses
    /// (the default) rather than answering nothing.
    fn namespaces(&self) -> BoxFuture<'_, Result<Vec<NamespaceStats>, LockError>> {
        not_supported("listing namespaces")
    }

    /// Gauges and counters for metrics. Called at scrape time, not on any
    /// hot path.
    fn stats(&self) -> BackendStats;

    /// Whether the store can serve, for `/healthz`: an error (`unavailable`,
    /// with the reason) when it knows it cannot until an operator acts,
    /// such as an etcd store whose credentials etcd now refuses. Cheap when
    /// nothing is known to be wrong. The default: always healthy.
    fn health(&self) -> BoxFuture<'_, Result<(), LockError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// How full the store's database is, as last checked, for a store whose
    /// database has a size limit (etcd); called at scrape time, never
    /// waits. `None` (the default): the store has no such limit.
    fn space(&self) -> Option<StoreSpace> {
        None
    }

    /// [`space`](LockBackend::space) asked of the store now, for a
    /// readiness check: an error (`unavailable`) when the store cannot be
    /// asked (etcd unreachable, or refusing lockd), and whether it refuses
    /// writes for lack of space. The default answers `space()` at once.
    fn check_space(&self) -> BoxFuture<'_, Result<Option<StoreSpace>, LockError>> {
        Box::pin(std::future::ready(Ok(self.space())))
    }

    /// Completes once every change the store accepted so far is durable
    /// (a server that shuts down waits for it before it exits). Calls were
    /// acknowledged durable already; this covers the changes nobody waits
    /// for (a release after a caller went away). The default, for a store
    /// that keeps nothing or writes through: at once.
    fn sync(&self) -> BoxFuture<'_, Result<(), LockError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store with locks only: every required method, no optional one.
    struct LocksOnly;

    impl LockBackend for LocksOnly {
        fn lock<'a>(
            &'a self,
            _: &'a Key,
            _: &'a str,
            _: u64,
            _: LockOptions,
        ) -> BoxFuture<'a, Result<Grant, LockError>> {
            unimplemented!("not called")
        }
        fn unlock<'a>(
            &'a self,
            _: &'a Key,
            _: &'a str,
            _: Option<u64>,
        ) -> BoxFuture<'a, Result<(), LockError>> {
            unimplemented!("not called")
        }
        fn extend<'a>(
            &'a self,
            _: &'a Key,
            _: &'a str,
            _: u64,
        ) -> BoxFuture<'a, Result<Grant, LockError>> {
            unimplemented!("not called")
        }
        fn get<'a>(&'a self, _: &'a Key) -> BoxFuture<'a, Result<Option<LockInfo>, LockError>> {
            unimplemented!("not called")
        }
        fn list<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Vec<ListedLock>, LockError>> {
            unimplemented!("not called")
        }
        fn release_detached(&self, _: Key, _: String, _: u64) {}
        fn stats(&self) -> BackendStats {
            BackendStats::default()
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn unsupported_operations_are_refused_not_unknown() {
        let store = LocksOnly;
        let lease = Key::new("ns", "lease-1");
        let refused = |e: LockError, what: &str| {
            assert_eq!(
                e,
                LockError::Denied(format!("this lock store does not support {what}"))
            );
        };
        let options = LockOptions::default();
        refused(
            store
                .grant_lease(&lease, 1_000, Durability::Persistent)
                .await
                .unwrap_err(),
            "leases",
        );
        refused(store.refresh_lease(&lease).await.unwrap_err(), "leases");
        refused(store.revoke_lease(&lease).await.unwrap_err(), "leases");
        refused(store.get_lease(&lease).await.unwrap_err(), "leases");
        refused(
            store
                .lock_in_lease(&lease, "lease-1", options)
                .await
                .unwrap_err(),
            "leases",
        );
        refused(
            store.force_unlock(&lease).await.unwrap_err(),
            "force-unlock",
        );
        refused(store.namespaces().await.unwrap_err(), "listing namespaces");
    }
}

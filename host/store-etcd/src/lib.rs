//! The distributed lock store of lockd: lock state, leases, fencing tokens
//! and FIFO wait queues in etcd, so many lockd hosts share one set of locks.
//!
//! [`EtcdBackend`] implements [`LockBackend`] and passes the same conformance
//! suite as the memory and redb stores (`tests/conformance.rs`, against a real
//! etcd started by `lockd_test_support::etcd::EtcdCluster`).
//!
//! # Layout
//!
//! ```text
//! <prefix>/<ns>/<name>                {"v":1,"owner":..,"expires_at_ms":..,"durability":..[,"token":..][,"waiter":..]}
//! <prefix>/.queue/<ns>/<name>/<id>    {"v":1,"id":..,"owner":..,"ttl_ms":..,"durability":..,"session":..[,"lease":..]}
//! <prefix>/.leases/<ns>/<id>          {"v":1,"ttl_ms":..,"expires_at_ms":..,"durability":..[,"session":..],"locks":[..]}
//! <prefix>/.why                       released | expired | force_released
//! ```
//!
//! A lock record also carries `acquired_at_ms` (when the grant was made)
//! once written by a lockd that keeps it. `.why` is the events marker (see
//! Events below).
//!
//! The prefix defaults to `/lockd`. Namespaces and names are percent-encoded
//! (every byte outside `[A-Za-z0-9_-]`), so they never contain `/` or start
//! with `.`: two locks never share a key, and the queue and lease trees never
//! overlap a namespace.
//!
//! # Semantics, and how etcd provides them
//!
//! - **Expiry.** The record's `expires_at_ms`, compared with the injected
//!   [`Clock`], is the authority: a lock whose expiry passed is free even if
//!   its key is still in etcd. A grant over such a key replaces it in a
//!   transaction that compares the key's `mod_revision`.
//! - **etcd leases** remove what nobody cleans up. A persistent grant goes on a
//!   lease that ends no sooner than `ceil((ttl + lease_slack) / 1 s)` seconds
//!   after it, so etcd deletes the key of a lock whose host died, a little
//!   after the lock expired. Grants share leases: a host grants a lease a
//!   quarter (at least 5 s) longer than needed and puts every grant it fits
//!   on it while it does, so a grant costs no lease round trip and a release
//!   no revoke; a dead host's key may stay that much longer (it is free all
//!   the same). The slack keeps the lease from ending before the expiry when
//!   clocks differ; under a [`lockd_core::ManualClock`] (tests), a generous
//!   slack keeps leases from running out in real time while the test clock
//!   stands still. See `etcd_lease.rs`.
//! - **Transactions.** Every write is one etcd transaction guarded by a
//!   compare on what was read (the lock key's `mod_revision`, or its absence;
//!   the head waiter's `mod_revision`), so a decision made on stale data is
//!   never applied: an unlock or extend never touches a newer grant.
//! - **One round trip in the common case.** A `lock` first tries the
//!   transaction "write the grant if the key is absent and nobody is queued"
//!   without reading; only if that fails does it read and decide. A host
//!   remembers the grants it wrote (owner, token, `mod_revision`, expiry), so
//!   their owner's `unlock` is one transaction "delete if the key is still at
//!   that `mod_revision` and nobody is queued": an unchanged revision means
//!   the key holds exactly that grant. Anything else (a refresh or a new
//!   grant by another host, a waiter) fails the compare and takes the
//!   general path.
//! - **Fencing tokens** are etcd revisions. A fresh grant's token is the
//!   `mod_revision` of the transaction that wrote it (etcd revisions rise
//!   strictly, across leader changes and restarts of etcd or lockd). A
//!   refresh (idempotent re-lock, extend) writes the same record with the
//!   token stored in it, since the refresh moves `mod_revision`. A refresh
//!   whose answer arrives after the expiry it checked may have landed after
//!   it, so it is taken back (see `Grants::refresh` in `store/grant.rs`).
//! - **Dead members** leave the client's rotation at their first refused
//!   request and come back once they accept connections (`endpoints.rs`).
//! - **TLS and users.** `https://` endpoints are reached over rustls (ring)
//!   with [`EtcdOptions::ca_file`] and an optional client certificate, as
//!   etcd user [`EtcdOptions::user`] if given. The connect probes every
//!   endpoint first, then checks the user may read and write the whole
//!   prefix, so a refused way in fails it naming the endpoint and the cause
//!   (`probe.rs`, `access.rs`). Expired auth tokens are renewed and the
//!   refused request resent (`access.rs`).
//! - **Waiting.** A caller that must wait puts a waiter key under the lock's
//!   queue prefix, on this backend's *session lease*; etcd's `create_revision`
//!   orders the queue. A waiter watches only the waiter just ahead of it (and
//!   its own key); the head also watches the lock key and sleeps until the
//!   holder's expiry. No polling. Whoever finds the lock free while someone
//!   waits (the unlocker, the head itself, a `wait = 0` caller, `get`,
//!   `extend`) first hands it to the head, in one transaction that writes
//!   the lock (marked with the waiter's id) and deletes the waiter key. So
//!   the queue is FIFO across all hosts, nobody barges past it, and no read
//!   shows a free moment nobody could use. A waiter that times out or whose caller
//!   goes away deletes its key (if a grant reached it first, that grant is
//!   kept on timeout and released when nobody is left to receive it). See
//!   `store/queue.rs`.
//! - **Ordering within one process.** `lock` calls on one name make their
//!   first attempt and join the queue one at a time, in call order, so two
//!   waiters of one host queue in the order they called (`local.rs`).
//! - **Durability.** etcd commits every write to a quorum's disk before it
//!   answers, so a persistent grant, extend or unlock is durable on return. An
//!   *ephemeral* lock uses the same key but lives on the session lease of the
//!   host that granted (or last refreshed) it: it is revoked when that
//!   backend is dropped, and expires `session_ttl` after the host dies. Unlike
//!   the embedded store's ephemeral locks, it is still written to etcd's disk
//!   (etcd has no memory-only keys, so it is no cheaper) and it survives a
//!   restart of etcd itself.
//! - **Leases** (docs/contract.md#c16-leases; not etcd's leases) are keys of
//!   their own whose record lists the locks they hold. Every transaction
//!   that changes what a lease holds rewrites that record too, guarded by
//!   the lease key's `mod_revision`, so a refresh or a revoke is one
//!   transaction over the lease and its listed locks (and, for a revoke,
//!   their queue heads), guarded by all their revisions. The lease and its
//!   locks share one `expires_at_ms`. See `store/lockd_lease.rs`.
//! - **Events** (docs/reference.md#events) come from one etcd watch per backend
//!   on the whole prefix, with previous values, from the revision read at
//!   connect (and, after a failure, from the last revision seen). Each
//!   change of a lock or lease key is compared with the previous record
//!   (`events.rs`); a transaction that removes a holder writes the marker
//!   key `.why` in the same revision, so every host reports the same
//!   `released`, `expired` or `force_released`. The same watch keeps an
//!   index of expiries, from which a sweeper deletes expired locks and
//!   leases (marked expired) without waiting for a read, and a `get` that
//!   finds an expired lock deletes it. See `store/observe.rs`.
//! - **etcd's history** is compacted by every host: each compacts, every
//!   [`Compaction::interval`], to the revision etcd was at
//!   [`Compaction::retention`] ago, never past a revision its own watches
//!   may still resume from, so no watch of a healthy host is compacted
//!   away and etcd's database stops growing under churn. A watch cancelled
//!   as compacted reads its state again. [`EtcdBackend::space`] reports the
//!   database's size, the quota and etcd's NOSPACE alarm. See `space.rs`.
//! - **Force-unlock** is the unlock path without the owner check: one
//!   transaction that removes the holder (compared on the key's revision),
//!   hands the lock to the queue's head, takes it out of its lease's record
//!   and writes the `force_released` marker.
//!
//! See `docs/internals.md` ("The etcd store") for what is and is not guaranteed,
//! and `docs/operating.md#etcd` ("lockd leases on etcd").
#![deny(missing_docs)]

mod access;
pub mod connection;
mod deadlines;
mod endpoints;
mod etcd_lease;
mod events;
mod floors;
mod keys;
mod local;
mod name;
mod options;
mod probe;
mod recent;
mod record;
mod rpc;
mod space;
mod stats;
mod store;

use std::sync::Arc;

pub use lockd_core::metrics::StoreSpace;
use lockd_core::{
    BackendStats, BoxFuture, Claim, Clock, Durability, Grant, Key, Leader, LeaseInfo, ListedLock,
    LockBackend, LockError, LockEvent, LockInfo, LockOptions, NameState, NamespaceStats,
};

pub use crate::options::{
    ClientCert, Compaction, ConfigError, EtcdOptions, EtcdUser, DEFAULT_QUOTA_BACKEND_BYTES,
};
use crate::store::Inner;

/// A [`LockBackend`] on etcd. Open it with [`EtcdBackend::connect`]; drop
/// it to end its session (its ephemeral locks and waiter keys go too).
pub struct EtcdBackend {
    inner: Arc<Inner>,
    /// The session's keep-alive, the task that keeps members that refuse
    /// connections out of the client's rotation, the events watch, the
    /// sweeper of expired keys and (unless compaction is off) the
    /// compactor of etcd's history.
    background: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("options", self.inner.options())
            .field("session", &self.inner.session())
            .finish_non_exhaustive()
    }
}

impl EtcdBackend {
    /// Connects to etcd and opens a session (a lease kept alive in the
    /// background). Must be called within a tokio runtime, which the
    /// backend's background work then runs on. Fails with `unavailable` if
    /// etcd cannot be reached within the timeouts.
    pub async fn connect(options: EtcdOptions, clock: Arc<dyn Clock>) -> Result<Self, LockError> {
        if options.endpoints.is_empty() {
            return Err(LockError::InvalidArgument(
                "an etcd store needs at least one endpoint".into(),
            ));
        }
        etcd_lease::wait_for_retired(options.request_timeout).await;
        let inner = Inner::connect(options, clock).await.inspect_err(|e| {
            tracing::warn!(error = %e, "cannot connect to the etcd store");
        })?;
        // Every change after this read reaches the events watch.
        let revision = inner.scan().await.inspect_err(|e| {
            tracing::warn!(error = %e, "cannot read the etcd store's locks");
        })?;
        let background = inner.spawn_background(revision);
        Ok(EtcdBackend { inner, background })
    }

    /// The options in force.
    pub fn options(&self) -> &EtcdOptions {
        self.inner.options()
    }

    /// The endpoints requests go to now: the configured ones less those
    /// taken out of rotation because they refused connections (they are
    /// probed every second and put back once they accept).
    pub fn endpoints_in_use(&self) -> Vec<String> {
        self.inner.endpoints_in_use()
    }

    /// How many requests an endpoint refused (each was sent again).
    pub fn refused_requests(&self) -> u64 {
        self.inner.refused_requests()
    }

    /// The current session lease id (for diagnostics).
    pub fn session_lease(&self) -> i64 {
        self.inner.session()
    }

    /// etcd's space as last checked (its database size, the part in use,
    /// the quota, whether its NOSPACE alarm is raised) and this host's
    /// compactions of its history, for `/metrics`
    /// ([`StoreSpace::render`]). Never waits: it answers the previous
    /// check and starts another in the background (the compactor also
    /// checks at each interval). All zeros but the quota before the first
    /// check.
    ///
    /// The size is one member's (the one asked); members' sizes differ
    /// only by the compactions and defragmentations each one ran.
    pub fn space(&self) -> StoreSpace {
        self.inner.space()
    }

    /// etcd's space asked now (one member's status and the cluster's
    /// alarms). `out_of_space` says whether etcd's NOSPACE alarm is raised:
    /// then etcd refuses every write, so every lock call fails, until an
    /// operator acts; a readiness check reports not ready
    /// ([`LockBackend::check_space`] answers this). An error when etcd
    /// cannot be asked (unreachable, or refusing lockd).
    pub async fn check_space(&self) -> Result<StoreSpace, LockError> {
        self.inner.check_space().await
    }

    /// `unavailable`, saying what an operator must do, while etcd's NOSPACE
    /// alarm is raised; cheap otherwise (etcd is asked only once the last
    /// check found the alarm, or a write failed for lack of space). Not
    /// part of [`LockBackend::health`]: a full etcd is not a reason to
    /// restart lockd, only to send its clients elsewhere.
    pub async fn space_alarm(&self) -> Result<(), LockError> {
        self.inner.space_alarm().await
    }
}

impl Drop for EtcdBackend {
    fn drop(&mut self) {
        for task in &self.background {
            task.abort();
        }
        self.inner.retire();
    }
}

impl LockBackend for EtcdBackend {
    fn lock<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        Box::pin(async move {
            // Taken before the first await: call order is queue order.
            let answer = self.inner.start_lock(key, owner, ttl_ms, options, None);
            answer.await.unwrap_or_else(|_| {
                Err(LockError::Unavailable(
                    "the lock task ended without an answer (is the runtime shutting down?)".into(),
                ))
            })
        })
    }

    fn unlock<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        token: Option<u64>,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(self.inner.unlock(key, owner, token))
    }

    fn extend<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        Box::pin(self.inner.extend(key, owner, ttl_ms))
    }

    fn get<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<LockInfo>, LockError>> {
        Box::pin(self.inner.get(key))
    }

    fn describe<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<NameState, LockError>> {
        Box::pin(self.inner.describe(key))
    }

    /// An election is a name held by one leader, with a value, in the same
    /// record and queue as a lock (docs/operating.md#etcd).
    fn campaign<'a>(
        &'a self,
        key: &'a Key,
        candidate: &'a str,
        value: &'a str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        let options = LockOptions {
            claim: Claim::Leader,
            ..options
        };
        Box::pin(async move {
            // Taken before the first await: call order is queue order.
            let answer = self
                .inner
                .start_lock(key, candidate, ttl_ms, options, Some(value));
            answer.await.unwrap_or_else(|_| {
                Err(LockError::Unavailable(
                    "the campaign task ended without an answer (is the runtime shutting down?)"
                        .into(),
                ))
            })
        })
    }

    fn proclaim<'a>(
        &'a self,
        key: &'a Key,
        candidate: &'a str,
        token: u64,
        value: &'a str,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(self.inner.proclaim(key, candidate, token, value))
    }

    fn leader<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Leader>, LockError>> {
        Box::pin(self.inner.leader(key))
    }

    /// Shared locks, semaphores and lock-delays, kept in each name's one
    /// record for every host (docs/operating.md#etcd).
    fn supports_claims(&self) -> bool {
        true
    }

    fn list<'a>(
        &'a self,
        namespace: &'a str,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ListedLock>, LockError>> {
        Box::pin(self.inner.list(namespace, prefix))
    }

    fn release_detached(&self, key: Key, owner: String, token: u64) {
        self.inner.release_detached(key, owner, token);
    }

    fn grant_lease<'a>(
        &'a self,
        lease: &'a Key,
        ttl_ms: u64,
        durability: Durability,
    ) -> BoxFuture<'a, Result<u64, LockError>> {
        Box::pin(self.inner.grant_lease(lease, ttl_ms, durability))
    }

    fn refresh_lease<'a>(&'a self, lease: &'a Key) -> BoxFuture<'a, Result<u64, LockError>> {
        Box::pin(self.inner.refresh_lease(lease))
    }

    fn revoke_lease<'a>(&'a self, lease: &'a Key) -> BoxFuture<'a, Result<u64, LockError>> {
        Box::pin(self.inner.revoke_lease(lease))
    }

    fn get_lease<'a>(
        &'a self,
        lease: &'a Key,
    ) -> BoxFuture<'a, Result<Option<LeaseInfo>, LockError>> {
        Box::pin(self.inner.get_lease(lease))
    }

    fn lock_in_lease<'a>(
        &'a self,
        key: &'a Key,
        lease_id: &'a str,
        options: LockOptions,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        Box::pin(async move {
            // Taken before the first await: call order is queue order.
            let answer = self.inner.start_lease_lock(key, lease_id, options);
            answer.await.unwrap_or_else(|_| {
                Err(LockError::Unavailable(
                    "the lock task ended without an answer (is the runtime shutting down?)".into(),
                ))
            })
        })
    }

    /// Watches the lease's key in etcd (a revoke through any host deletes
    /// it) and sleeps until its expiry, reading it again after either
    /// (a refresh moves the expiry). Also completes once etcd stayed
    /// unreachable past the expiry last read.
    fn lease_ended(&self, lease: &Key) -> BoxFuture<'static, ()> {
        self.inner.lease_ended(lease)
    }

    /// Releases `key` whoever holds it, in one transaction that hands it to
    /// the head of its queue (as an unlock does) and is marked
    /// force-released, so that every host's event stream says so.
    fn force_unlock<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<LockInfo, LockError>> {
        Box::pin(self.inner.force_unlock(key))
    }

    /// Events from the backend's etcd watch: changes made through any host
    /// on the same etcd and prefix.
    fn events(&self) -> Option<tokio::sync::broadcast::Receiver<LockEvent>> {
        Some(self.inner.subscribe())
    }

    /// The events' etcd revisions, shared by every host on the same etcd
    /// and prefix, from which a stream resumes on any of them.
    fn event_history(&self) -> Option<Arc<dyn lockd_core::EventHistory>> {
        Some(self.inner.history())
    }

    fn namespaces(&self) -> BoxFuture<'_, Result<Vec<NamespaceStats>, LockError>> {
        Box::pin(self.inner.namespaces())
    }

    /// Cluster-wide counts as of the previous call (the first call answers
    /// zeros): `locks_held` counts lock keys in etcd, including expired ones
    /// no lease or grant has removed yet; `waiters` counts waiter keys of all
    /// hosts. etcd's commits are not counted (0).
    fn stats(&self) -> BackendStats {
        self.inner.stats()
    }

    /// Unhealthy while etcd refuses this backend's credentials or its
    /// permission on the prefix (a password changed, a role revoked), with
    /// the cause; checked against etcd only after a request was refused.
    /// A NOSPACE alarm is not ill health: readiness reports it
    /// ([`LockBackend::check_space`]).
    fn health(&self) -> BoxFuture<'_, Result<(), LockError>> {
        Box::pin(self.inner.health())
    }

    /// [`EtcdBackend::space`], for `/metrics`.
    fn space(&self) -> Option<StoreSpace> {
        Some(self.inner.space())
    }

    /// [`EtcdBackend::check_space`], for readiness: an error while etcd
    /// cannot be asked; `out_of_space` while its NOSPACE alarm is raised.
    fn check_space(&self) -> BoxFuture<'_, Result<Option<StoreSpace>, LockError>> {
        Box::pin(async move { self.inner.check_space().await.map(Some) })
    }
}

//! The one dispatch layer in front of a backend: every surface (wasm, REST,
//! CLI) calls this, so limits, quotas and metrics are handled once.

use quanta::Instant;
use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::{BoxFuture, LockBackend};
use crate::background;
use crate::error::LockError;
use crate::ids::random_id;
use crate::limits::{Limits, LockDelays};
use crate::metrics::{BackendStats, Metrics, NamespaceStats, Op, StoreSpace};
use crate::types::{
    Claim, Durability, Grant, Key, Leader, LeaseGrant, LeaseInfo, ListedLock, LockEvent, LockInfo,
    LockOptions, NameState,
};

/// How many locks each namespace may hold at once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Quotas {
    /// For namespaces not listed in `per_namespace`; `None` is unlimited.
    pub default: Option<u64>,
    /// Quotas of named namespaces.
    pub per_namespace: HashMap<String, u64>,
}

impl Quotas {
    /// The quota of `namespace`, if it has one.
    pub fn of(&self, namespace: &str) -> Option<u64> {
        self.per_namespace.get(namespace).copied().or(self.default)
    }
}

/// The most permits a semaphore may have (docs/contract.md#c22-semaphores).
pub const MAX_PERMITS: u32 = 65_536;

/// The longest value an election's leader may proclaim, in bytes
/// (docs/contract.md#c24-elections).
pub const MAX_VALUE_BYTES: usize = 4_096;

/// Validates arguments against [`Limits`], applies [`Quotas`], calls the
/// backend, and records [`Metrics`]. Cheap to clone; clones share metrics.
#[derive(Clone)]
pub struct LockService {
    backend: Arc<dyn LockBackend>,
    limits: Arc<Limits>,
    quotas: Arc<Quotas>,
    lock_delays: Arc<LockDelays>,
    metrics: Arc<Metrics>,
    force_watchers: Arc<ForceWatchers>,
    /// Whether the store measures hold times itself
    /// ([`LockBackend::hold_times`]); if not, a task follows its events for
    /// them from the start.
    store_measures_holds: bool,
    /// Where the task that follows the store's events runs.
    runtime: tokio::runtime::Handle,
    /// Whether the service shuts down ([`LockService::shutdown`]).
    closing: Arc<closing::Closing>,
}

/// Holders waiting for news of a force-release, by namespace and owner.
type Waiting = HashMap<(String, String), Vec<tokio::sync::oneshot::Sender<()>>>;

/// Who waits to hear that an owner's lock was force-released, by namespace
/// and owner. One task reads the store's events for all of them.
#[derive(Default)]
struct ForceWatchers {
    state: std::sync::Mutex<WatchState>,
    registered: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct WatchState {
    waiting: Waiting,
    /// Whether a task follows the store's events for these watchers.
    following: bool,
}

impl WatchState {
    /// Drops the watchers whose holder went away.
    fn prune(&mut self) {
        self.waiting.retain(|_, senders| {
            senders.retain(|s| !s.is_closed());
            !senders.is_empty()
        });
    }
}

impl ForceWatchers {
    fn state(&self) -> std::sync::MutexGuard<'_, WatchState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A receiver told when `owner` in `namespace` is force-released.
    /// `follow` starts a task reading the store's events if none does; it
    /// subscribes before this returns, so no later event is missed.
    fn register(
        &self,
        namespace: &str,
        owner: &str,
        follow: impl FnOnce(),
    ) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut state = self.state();
        // Watchers whose holder went away are dropped now and then, so the
        // map stays the size of the live watchers.
        let n = self
            .registered
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n % 1024 == 1023 {
            state.prune();
        }
        state
            .waiting
            .entry((namespace.to_string(), owner.to_string()))
            .or_default()
            .push(tx);
        if !state.following {
            state.following = true;
            follow();
        }
        rx
    }

    fn fire(&self, namespace: &str, owner: &str) {
        let senders = self
            .state()
            .waiting
            .remove(&(namespace.to_string(), owner.to_string()));
        for tx in senders.into_iter().flatten() {
            let _ = tx.send(());
        }
    }

    /// Whether nobody waits any more; if so the follower stops (a later
    /// watcher starts another).
    fn stop_if_idle(&self) -> bool {
        let mut state = self.state();
        state.prune();
        if state.waiting.is_empty() {
            state.following = false;
        }
        !state.following
    }
}

impl std::fmt::Debug for LockService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockService")
            .field("limits", &self.limits)
            .field("quotas", &self.quotas)
            .finish_non_exhaustive()
    }
}

impl LockService {
    /// A service over `backend`, with no quotas.
    ///
    /// It follows the store's events on the current tokio runtime, to
    /// measure hold times (`lockd_hold_seconds`) and to tell holders of a
    /// force-release: from the start for a store that does not measure
    /// hold times itself, otherwise only while a holder waits to hear of a
    /// force-release ([`LockService::force_released`]), since a store
    /// builds no event while nobody listens. The task ends with the store
    /// or the service.
    ///
    /// # Panics
    /// Outside a tokio runtime, saying so, whether or not the store
    /// publishes events: one rule for every constructor that starts a task,
    /// [`Engine::new`](crate::Engine::new)'s too.
    pub fn new(backend: Arc<dyn LockBackend>, limits: Limits) -> Self {
        let runtime = background::runtime(
            "lockd_core::LockService",
            "the task that follows its store's events",
        );
        let store_measures_holds = backend.hold_times().is_some();
        let service = LockService {
            backend,
            limits: Arc::new(limits),
            quotas: Arc::new(Quotas::default()),
            lock_delays: Arc::new(LockDelays::default()),
            metrics: Arc::new(Metrics::default()),
            force_watchers: Arc::new(ForceWatchers::default()),
            store_measures_holds,
            runtime,
            closing: Arc::default(),
        };
        if !store_measures_holds {
            service.force_watchers.state().following = true;
            service.follow_events();
        }
        service
    }

    /// Starts the task that follows the store's events, subscribed before
    /// this returns. For a store without events there is nothing to follow.
    fn follow_events(&self) {
        if let Some(events) = self.backend.events() {
            self.runtime.spawn(follow_events(
                events,
                Arc::downgrade(&self.metrics),
                Arc::downgrade(&self.force_watchers),
                !self.store_measures_holds,
            ));
        }
    }

    /// The same service with `quotas` in force.
    pub fn with_quotas(mut self, quotas: Quotas) -> Self {
        self.quotas = Arc::new(quotas);
        self
    }

    /// The same service with `delays` in force
    /// (docs/contract.md#c23-lock-delay).
    pub fn with_lock_delays(mut self, delays: LockDelays) -> Self {
        // The store applies a delay when a grant expires, which may be a
        // grant it recovered before any call brought the namespace's delay.
        self.backend.set_lock_delays(&delays);
        self.lock_delays = Arc::new(delays);
        self
    }

    /// Counters and latencies of every call through this service.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The backend's gauges and counters (locks held, waiters, commits): a
    /// read that changes nothing.
    pub fn stats(&self) -> BackendStats {
        self.backend.stats()
    }

    /// Whether the store can serve (see [`LockBackend::health`]).
    pub async fn health(&self) -> Result<(), LockError> {
        self.backend.health().await
    }

    /// Everything `/metrics` shows, in Prometheus text format: with the
    /// store's space for a store that has a size limit (etcd).
    pub fn render_metrics(&self) -> String {
        let mut out = String::new();
        let store_holds = self.backend.hold_times();
        self.metrics
            .render_with_holds(store_holds.as_ref(), &mut out);
        self.backend.stats().render(&mut out);
        self.metrics
            .render_namespaces(&self.backend.namespace_stats(), &mut out);
        if let Some(space) = self.backend.space() {
            space.render(&mut out);
        }
        out
    }

    /// How full the store's database is, as last checked (see
    /// [`LockBackend::space`]).
    pub fn space(&self) -> Option<StoreSpace> {
        self.backend.space()
    }

    /// The store's space asked now; an error if the store cannot be asked
    /// (see [`LockBackend::check_space`]).
    pub async fn check_space(&self) -> Result<Option<StoreSpace>, LockError> {
        self.backend.check_space().await
    }

    /// Completes once every change the store accepted is durable (see
    /// [`LockBackend::sync`]).
    pub async fn sync(&self) -> Result<(), LockError> {
        self.backend.sync().await
    }

    /// Begins shutting the service down: every `lock`, `lock_in_lease` and
    /// campaign waiting in a queue (through this service or a clone) is
    /// answered `unavailable` with `reason` at once, leaving its queue (a
    /// grant handed to it meanwhile is released, never acknowledged); from
    /// now on such a call that may wait is refused so at once. Calls that
    /// do not wait go on as before, and held locks stay held. Answers how
    /// many calls were waiting. A second call changes nothing.
    pub fn shutdown(&self, reason: &str) -> u64 {
        let waiting = self.closing.begin(reason);
        tracing::debug!(waiting, reason, "lock service shutting down");
        waiting
    }

    /// The shutdown's reason, once [`LockService::shutdown`] was called.
    pub fn shutting_down(&self) -> Option<Arc<str>> {
        self.closing.reason()
    }

    /// Completes once [`LockService::shutdown`] is called (at once if it
    /// was), for work that must end then (an event stream).
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.closing.closed()
    }

    /// How many waiting calls the shutdown answered `unavailable`.
    pub fn waits_answered(&self) -> u64 {
        self.closing.answered()
    }

    /// `call`, a store call that waits up to `wait_ms`: answered
    /// `unavailable` when the service shuts down meanwhile (see
    /// [`LockService::shutdown`]).
    async fn waiting<T>(
        &self,
        wait_ms: u64,
        call: BoxFuture<'_, Result<T, LockError>>,
    ) -> Result<T, LockError> {
        if wait_ms == 0 {
            return call.await;
        }
        self.closing.unless_closing(call).await
    }

    /// `invalid_argument` if `namespace` is not one this service takes;
    /// the store is not asked. (Dapr's lock API answers a bad store name
    /// before anything else.)
    pub fn check_namespace(&self, namespace: &str) -> Result<(), LockError> {
        self.limits.check_namespace(namespace)
    }

    fn key(&self, namespace: &str, name: &str) -> Result<Key, LockError> {
        self.limits.check_namespace(namespace)?;
        self.limits.check_name(name)?;
        Ok(Key::new(namespace, name))
    }

    /// Records the call's metrics, and logs the outcomes an operator must
    /// hear about: a store failure (callers only see `unavailable`) and a
    /// quota refusal.
    fn measured<T>(
        &self,
        op: Op,
        (namespace, name): (&str, &str),
        started: Instant,
        result: Result<T, LockError>,
    ) -> Result<T, LockError> {
        self.metrics.record(op, started.elapsed(), &result);
        // A waiter the shutdown answered is counted by the server's drain.
        let shutdown = self.closing.reason();
        match &result {
            Err(LockError::Unavailable(why)) if shutdown.as_deref() != Some(why.as_str()) => {
                tracing::warn!(op = op.as_str(), namespace, name, %why, "lock store unavailable");
            }
            Err(LockError::Denied(why)) => {
                tracing::warn!(op = op.as_str(), namespace, name, %why, "lock refused by policy");
            }
            _ => {}
        }
        result
    }

    /// Takes `name` for `owner`; see docs/contract.md#c1-grant.
    pub async fn lock(
        &self,
        namespace: &str,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> Result<Grant, LockError> {
        let started = Instant::now();
        let result = async {
            let key = self.key(namespace, name)?;
            self.limits.check_owner(owner)?;
            self.limits.check_ttl(ttl_ms)?;
            self.limits.check_wait(options.wait_ms)?;
            if options.refuse_relock && options.wait_ms > 0 {
                // A refused re-lock would queue the owner behind itself.
                return Err(LockError::InvalidArgument(
                    "a lock that refuses a re-lock cannot wait: give wait 0".to_string(),
                ));
            }
            self.check_claim(options.claim)?;
            let options = self.with_policy(namespace, options)?;
            let call = self.backend.lock(&key, owner, ttl_ms, options);
            self.waiting(options.wait_ms, call).await
        }
        .await;
        self.measured_waiting(
            Op::Lock,
            (namespace, name),
            started,
            options.wait_ms,
            result,
        )
    }

    /// `options` with what the service decides for `namespace`: its quota
    /// and its lock-delay.
    fn with_policy(&self, namespace: &str, options: LockOptions) -> Result<LockOptions, LockError> {
        Ok(LockOptions {
            quota: self.quotas.of(namespace),
            lock_delay_ms: self.lock_delay(namespace)?,
            ..options
        })
    }

    /// [`LockService::measured`] for a call that may have waited up to
    /// `wait_ms`: its wait counts in the namespace's wait times too.
    fn measured_waiting<T>(
        &self,
        op: Op,
        (namespace, name): (&str, &str),
        started: Instant,
        wait_ms: u64,
        result: Result<T, LockError>,
    ) -> Result<T, LockError> {
        if wait_ms > 0 {
            self.metrics
                .record_wait(namespace, started.elapsed(), &result);
        }
        self.measured(op, (namespace, name), started, result)
    }

    /// Releases `name` if `owner` holds it (under `token`, if given).
    pub async fn unlock(
        &self,
        namespace: &str,
        name: &str,
        owner: &str,
        token: Option<u64>,
    ) -> Result<(), LockError> {
        let started = Instant::now();
        let result = async {
            let key = self.key(namespace, name)?;
            self.limits.check_owner(owner)?;
            self.backend.unlock(&key, owner, token).await
        }
        .await;
        self.measured(Op::Unlock, (namespace, name), started, result)
    }

    /// Moves the expiry of `name`, held by `owner`, to now + `ttl_ms`.
    pub async fn extend(
        &self,
        namespace: &str,
        name: &str,
        owner: &str,
        ttl_ms: u64,
    ) -> Result<Grant, LockError> {
        let started = Instant::now();
        let result = async {
            let key = self.key(namespace, name)?;
            self.limits.check_owner(owner)?;
            self.limits.check_ttl(ttl_ms)?;
            self.backend.extend(&key, owner, ttl_ms).await
        }
        .await;
        self.measured(Op::Extend, (namespace, name), started, result)
    }

    /// The live holder of `name`.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<LockInfo>, LockError> {
        let started = Instant::now();
        let result = async {
            let key = self.key(namespace, name)?;
            self.backend.get(&key).await
        }
        .await;
        self.measured(Op::Get, (namespace, name), started, result)
    }

    /// Everything about `name`: every holder, the queue's length, a
    /// lock-delay in force (docs/contract.md#c21-shared).
    pub async fn describe(&self, namespace: &str, name: &str) -> Result<NameState, LockError> {
        let started = Instant::now();
        let result = async {
            let key = self.key(namespace, name)?;
            self.backend.describe(&key).await
        }
        .await;
        self.measured(Op::Get, (namespace, name), started, result)
    }

    /// The lock-delay of `namespace`; `denied` if it has one and the store
    /// cannot keep it (better refused than a delay silently not kept).
    fn lock_delay(&self, namespace: &str) -> Result<u64, LockError> {
        let delay_ms = self.lock_delays.of(namespace);
        if delay_ms > 0 && !self.backend.supports_claims() {
            return Err(LockError::Denied(format!(
                "namespace {namespace:?} has a lock-delay, which this lock store does not support"
            )));
        }
        Ok(delay_ms)
    }

    /// `invalid_argument` for a permit count out of bounds; `denied` for a
    /// shared lock or a permit on a store without them.
    fn check_claim(&self, claim: Claim) -> Result<(), LockError> {
        if claim == Claim::Leader {
            return Err(LockError::InvalidArgument(
                "an election's leadership is taken by campaigning, not by lock".to_string(),
            ));
        }
        if let Claim::Permit { permits } = claim {
            if !(1..=MAX_PERMITS).contains(&permits) {
                return Err(LockError::InvalidArgument(format!(
                    "permits is {permits}; a semaphore has 1 to {MAX_PERMITS}"
                )));
            }
        }
        if claim != Claim::Exclusive && !self.backend.supports_claims() {
            return Err(LockError::Denied(
                "this lock store does not support shared locks and semaphores".to_string(),
            ));
        }
        Ok(())
    }

    /// Campaigns for the election `name` as `candidate`, proclaiming
    /// `value` once it leads: waits up to `options.wait_ms` in the name's
    /// queue, then leads for `ttl_ms` (docs/contract.md#c24-elections).
    /// The leadership is resigned with [`LockService::unlock`] and kept with
    /// [`LockService::extend`], like a lock. `options.claim` is ignored.
    pub async fn campaign(
        &self,
        namespace: &str,
        name: &str,
        candidate: &str,
        value: &str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> Result<Grant, LockError> {
        let started = Instant::now();
        let result = async {
            let key = self.key(namespace, name)?;
            self.limits.check_owner(candidate)?;
            self.limits.check_ttl(ttl_ms)?;
            self.limits.check_wait(options.wait_ms)?;
            check_value(value)?;
            self.check_elections()?;
            let options = LockOptions {
                refuse_relock: false,
                ..self.with_policy(namespace, options)?
            };
            let call = self
                .backend
                .campaign(&key, candidate, value, ttl_ms, options);
            self.waiting(options.wait_ms, call).await
        }
        .await;
        self.measured_waiting(
            Op::Campaign,
            (namespace, name),
            started,
            options.wait_ms,
            result,
        )
    }

    /// Sets the value the leader of `name` proclaims; `candidate` must lead
    /// under `token`.
    pub async fn proclaim(
        &self,
        namespace: &str,
        name: &str,
        candidate: &str,
        token: u64,
        value: &str,
    ) -> Result<(), LockError> {
        let started = Instant::now();
        let result = async {
            let key = self.key(namespace, name)?;
            self.limits.check_owner(candidate)?;
            check_value(value)?;
            self.check_elections()?;
            self.backend.proclaim(&key, candidate, token, value).await
        }
        .await;
        self.measured(Op::Proclaim, (namespace, name), started, result)
    }

    /// The leader of the election `name`, if it has one.
    pub async fn leader(&self, namespace: &str, name: &str) -> Result<Option<Leader>, LockError> {
        let started = Instant::now();
        let result = async {
            let key = self.key(namespace, name)?;
            self.check_elections()?;
            self.backend.leader(&key).await
        }
        .await;
        self.measured(Op::Leader, (namespace, name), started, result)
    }

    /// `candidate` stops leading the election `name` (under `token`, if
    /// given): its grant is released and the head of the queue leads next.
    /// A name held or awaited as a lock or a semaphore is
    /// `invalid-argument`, where a plain `unlock` would release a lock of
    /// the same owner.
    pub async fn resign(
        &self,
        namespace: &str,
        name: &str,
        candidate: &str,
        token: Option<u64>,
    ) -> Result<(), LockError> {
        self.leader(namespace, name).await?;
        self.unlock(namespace, name, candidate, token).await
    }

    /// `denied` on a store without elections.
    fn check_elections(&self) -> Result<(), LockError> {
        if self.backend.supports_claims() {
            Ok(())
        } else {
            Err(LockError::Denied(
                "this lock store does not support elections".to_string(),
            ))
        }
    }

    /// Live locks in `namespace` whose names start with `prefix`.
    pub async fn list(&self, namespace: &str, prefix: &str) -> Result<Vec<ListedLock>, LockError> {
        let started = Instant::now();
        let result = async {
            self.limits.check_namespace(namespace)?;
            if prefix.len() > self.limits.max_name_bytes {
                return Err(LockError::InvalidArgument(format!(
                    "prefix is {} bytes, over the limit of {} bytes",
                    prefix.len(),
                    self.limits.max_name_bytes
                )));
            }
            self.backend.list(namespace, prefix).await
        }
        .await;
        self.measured(Op::List, (namespace, prefix), started, result)
    }

    /// Every namespace with a live held lock or a waiter, with its counts,
    /// sorted by name; see [`LockBackend::namespaces`].
    pub async fn namespaces(&self) -> Result<Vec<NamespaceStats>, LockError> {
        self.backend.namespaces().await
    }

    /// Best-effort release for drop paths; see
    /// [`LockBackend::release_detached`].
    pub fn release_detached(&self, namespace: &str, name: &str, owner: &str, token: u64) {
        self.backend
            .release_detached(Key::new(namespace, name), owner.to_string(), token);
    }

    fn lease_key(&self, namespace: &str, lease_id: &str) -> Result<Key, LockError> {
        self.limits.check_namespace(namespace)?;
        self.limits.check_owner(lease_id)?;
        Ok(Key::new(namespace, lease_id))
    }

    /// Grants a lease of `ttl_ms` in `namespace`, with a fresh id; see
    /// docs/contract.md#c16-leases.
    pub async fn grant_lease(
        &self,
        namespace: &str,
        ttl_ms: u64,
        durability: Durability,
    ) -> Result<LeaseGrant, LockError> {
        let started = Instant::now();
        let result = async {
            self.limits.check_namespace(namespace)?;
            self.limits.check_ttl(ttl_ms)?;
            let id = random_id("lease")?;
            let lease = Key::new(namespace, id.as_str());
            let expires_at_ms = self.backend.grant_lease(&lease, ttl_ms, durability).await?;
            Ok(LeaseGrant { id, expires_at_ms })
        }
        .await;
        self.measured(Op::LeaseGrant, (namespace, ""), started, result)
    }

    /// Moves the expiry of the lease and of all its locks to now + its TTL.
    pub async fn refresh_lease(&self, namespace: &str, lease_id: &str) -> Result<u64, LockError> {
        let started = Instant::now();
        let result = async {
            let lease = self.lease_key(namespace, lease_id)?;
            self.backend.refresh_lease(&lease).await
        }
        .await;
        self.measured(Op::LeaseRefresh, (namespace, lease_id), started, result)
    }

    /// Ends the lease and releases all its locks at once; answers how many.
    pub async fn revoke_lease(&self, namespace: &str, lease_id: &str) -> Result<u64, LockError> {
        let started = Instant::now();
        let result = async {
            let lease = self.lease_key(namespace, lease_id)?;
            self.backend.revoke_lease(&lease).await
        }
        .await;
        self.measured(Op::LeaseRevoke, (namespace, lease_id), started, result)
    }

    /// The state of a live lease.
    pub async fn get_lease(
        &self,
        namespace: &str,
        lease_id: &str,
    ) -> Result<Option<LeaseInfo>, LockError> {
        let started = Instant::now();
        let result = async {
            let lease = self.lease_key(namespace, lease_id)?;
            self.backend.get_lease(&lease).await
        }
        .await;
        self.measured(Op::LeaseGet, (namespace, lease_id), started, result)
    }

    /// Takes `name` under the live lease `lease_id`, waiting up to `wait_ms`.
    pub async fn lock_in_lease(
        &self,
        namespace: &str,
        name: &str,
        lease_id: &str,
        wait_ms: u64,
    ) -> Result<Grant, LockError> {
        let started = Instant::now();
        let result = async {
            let key = self.key(namespace, name)?;
            self.limits.check_owner(lease_id)?;
            self.limits.check_wait(wait_ms)?;
            let options = LockOptions {
                wait_ms,
                ..LockOptions::default()
            };
            let options = self.with_policy(namespace, options)?;
            let call = self.backend.lock_in_lease(&key, lease_id, options);
            self.waiting(wait_ms, call).await
        }
        .await;
        self.measured_waiting(Op::Lock, (namespace, name), started, wait_ms, result)
    }

    /// Completes once the lease has ended (or at once if it is not live);
    /// see [`LockBackend::lease_ended`]. An invalid id is never live.
    pub fn lease_ended(&self, namespace: &str, lease_id: &str) -> BoxFuture<'static, ()> {
        match self.lease_key(namespace, lease_id) {
            Ok(lease) => self.backend.lease_ended(&lease),
            Err(_) => Box::pin(std::future::ready(())),
        }
    }

    /// Releases `name` whoever holds it (an operator's force-unlock); the
    /// head of its queue gets it next. Answers the holder it released.
    pub async fn force_unlock(&self, namespace: &str, name: &str) -> Result<LockInfo, LockError> {
        let started = Instant::now();
        let result = async {
            let key = self.key(namespace, name)?;
            self.backend.force_unlock(&key).await
        }
        .await;
        self.measured(Op::ForceUnlock, (namespace, name), started, result)
    }

    /// Completes once a lock held by `owner` in `namespace` is
    /// force-released (for a lease, `owner` is its id): how a holder hears
    /// of it at once. Never completes for a store without events.
    pub fn force_released(&self, namespace: &str, owner: &str) -> BoxFuture<'static, ()> {
        let rx = self
            .force_watchers
            .register(namespace, owner, || self.follow_events());
        Box::pin(async move {
            if rx.await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }

    /// A subscription to the store's events, or `None` if it publishes
    /// none; see [`LockBackend::events`].
    pub fn events(&self) -> Option<tokio::sync::broadcast::Receiver<LockEvent>> {
        self.backend.events()
    }

    /// The store's shared history of events, if it has one; see
    /// [`LockBackend::event_history`].
    pub fn event_history(&self) -> Option<Arc<dyn crate::EventHistory>> {
        self.backend.event_history()
    }
}

/// Follows a store's events: records how long each grant was held (if
/// `holds`), and tells force-release watchers. Ends when the store (the
/// channel) or the service is gone, or, when it does not record holds,
/// once no watcher is left. A lag loses some samples, never the store's
/// time.
async fn follow_events(
    mut events: tokio::sync::broadcast::Receiver<LockEvent>,
    metrics: std::sync::Weak<Metrics>,
    watchers: std::sync::Weak<ForceWatchers>,
    holds: bool,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut seen: u64 = 0;
    loop {
        match events.recv().await {
            Ok(event) => {
                let (Some(metrics), Some(watchers)) = (metrics.upgrade(), watchers.upgrade())
                else {
                    return;
                };
                if let (true, true, Some(acquired)) =
                    (holds, event.kind.ends_a_grant(), event.acquired_at_ms)
                {
                    let held =
                        std::time::Duration::from_millis(event.at_ms.saturating_sub(acquired));
                    metrics.record_hold(&event.namespace, held);
                }
                let forced = event.kind == crate::types::EventKind::ForceReleased;
                if forced {
                    watchers.fire(&event.namespace, &event.owner);
                }
                seen += 1;
                // Watchers go away without a word (their holder is gone):
                // look now and then, and at once after a notice.
                if !holds && (forced || seen.is_multiple_of(64)) && watchers.stop_if_idle() {
                    return;
                }
            }
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "the service fell behind its store's events: hold-time samples (and a force-release notice) may be lost");
            }
            Err(RecvError::Closed) => return,
        }
    }
}

mod closing;
#[cfg(test)]
mod tests;

/// `invalid_argument` for a proclaimed value over [`MAX_VALUE_BYTES`].
fn check_value(value: &str) -> Result<(), LockError> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(LockError::InvalidArgument(format!(
            "value is {} bytes, over the limit of {MAX_VALUE_BYTES} bytes",
            value.len()
        )));
    }
    Ok(())
}

//! The lock store, as etcd transactions. See the crate docs for the design;
//! every write here is a transaction guarded by a compare on the revision
//! it read, so a decision made on stale data is never applied.
//!
//! The parts, each built on those listed before it:
//!
//! - `txn`: the shared pieces of a guarded transaction: the compares, and
//!   [`txn::LeaseEdits`], what one transaction does to lease records;
//! - `keyspace`: [`Keyspace`], the cluster, the key layout, the clock, the
//!   etcd leases keys live on, and the writes several parts make;
//! - `queue`: [`Queue`], a lock's FIFO wait queue: a consistent read of a
//!   lock and its queue that first serves the head, the hand-off to the
//!   head, joining, waiting and leaving;
//! - `grant`: [`Grants`], a holder's grant, refresh and release (in one
//!   round trip when it can be), and the reads of who holds what;
//! - `lockd_lease`: [`LockdLeases`], lockd's leases: their records, refresh,
//!   revoke, a lock attempt under one, and the watch of a lease's end;
//! - `lock`: [`LockCalls`], the `lock` and `lock_in_lease` calls that may
//!   wait in the queue;
//! - `observe`: [`Observer`], the events watch and the sweeper of expired
//!   keys.
//! - `replay`: the shared history of events, from which a client's stream
//!   resumes on another host.
//!
//! [`Inner`] owns the parts and answers the backend's calls: it keeps this
//! process's order of calls on a name (`local.rs`), logs store failures,
//! and runs the background work.

mod grant;
mod keyspace;
mod lock;
mod lockd_lease;
mod namespaces;
mod observe;
mod queue;
mod replay;
#[cfg(test)]
mod tests;
mod txn;

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, DeleteOptions, Txn, TxnOp};
use lockd_core::metrics::StoreSpace;
use lockd_core::{
    BackendStats, BoxFuture, Clock, Durability, Grant, Key, Leader, LeaseInfo, ListedLock,
    LockError, LockEvent, LockInfo, LockOptions, NameState, NamespaceStats,
};
use tokio::runtime::Handle;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

use self::grant::Grants;
use self::keyspace::Keyspace;
use self::lock::LockCalls;
use self::lockd_lease::LockdLeases;
use self::observe::Observer;
use self::queue::{Caller, Queue};
use crate::access::Access;
use crate::etcd_lease::EtcdLeases;
use crate::floors::Floors;
use crate::keys::Layout;
use crate::local::{Pending, Turns};
use crate::options::EtcdOptions;
use crate::probe::{health, ProbeError};
use crate::rpc::Etcd;
use crate::space::Space;
use crate::stats::StatsCache;

/// The store: its parts, and what the backend's calls share. Spawned tasks
/// hold it through an `Arc`.
pub(crate) struct Inner {
    /// What every part stands on: the cluster, the layout, the clock, the
    /// etcd leases.
    ks: Arc<Keyspace>,
    /// `unlock`, `extend`, `get`, `list`, force-unlock.
    grants: Arc<Grants>,
    /// The lease calls.
    leases: Arc<LockdLeases>,
    /// `lock` and `lock_in_lease`.
    calls: LockCalls,
    /// The events and the sweeper.
    observer: Arc<Observer>,
    /// This process's `lock` calls on each name, in call order.
    turns: Turns,
    /// This process's detached releases in flight.
    pending: Arc<Pending>,
    stats: StatsCache,
    /// etcd's space, and this backend's compactions of its history.
    space: Arc<Space>,
    options: EtcdOptions,
    handle: Handle,
}

/// Checks `options` and connects a client to its endpoints, as they say
/// (TLS, user), after a probe that names what is wrong if etcd cannot be
/// reached. What the lock store and [`crate::connection::EtcdConnection`]
/// each stand on.
pub(crate) async fn connect_etcd(options: &EtcdOptions) -> Result<Etcd, LockError> {
    options
        .check()
        .map_err(|e| LockError::InvalidArgument(e.to_string()))?;
    let endpoints = options.endpoints.join(",");
    let (access, connect_options) = Access::load(
        options,
        ConnectOptions::new()
            .with_connect_timeout(options.dial_timeout)
            .with_timeout(options.request_timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(false),
    )?;
    preflight(options, &access).await?;
    let client = match tokio::time::timeout(
        options.dial_timeout,
        Client::connect(&options.endpoints, Some(connect_options)),
    )
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            return Err(LockError::Unavailable(format!(
                "etcd {endpoints}: {}",
                access.describe(&e)
            )))
        }
        Err(_) => {
            return Err(LockError::Unavailable(format!(
                "etcd {endpoints}: no answer within {:?}",
                options.dial_timeout
            )))
        }
    };
    let etcd = Etcd::new(
        client,
        access,
        options.endpoints.clone(),
        options.request_timeout,
    );
    Ok(etcd)
}

impl Inner {
    /// Connects to `options.endpoints` and opens a session. Must be called
    /// within a tokio runtime, which the backend's background work then
    /// runs on.
    pub(crate) async fn connect(
        options: EtcdOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Inner>, LockError> {
        let etcd = connect_etcd(&options).await?;
        let layout = Layout::new(&options.prefix);
        check_permission(&etcd, &layout).await?;
        check_format(&etcd, &layout).await?;
        let etcd_leases = EtcdLeases::open(
            &etcd,
            options.session_ttl_secs(),
            options.lease_slack,
            layout.all_sessions(),
        )
        .await?;
        let ks = Arc::new(Keyspace {
            etcd,
            layout,
            clock,
            etcd_leases,
            floors: Floors::default(),
        });
        let max_locks_per_lease = options.max_locks_per_lease;
        let queue = Arc::new(Queue::new(ks.clone(), max_locks_per_lease));
        let grants = Arc::new(Grants::new(ks.clone(), queue.clone()));
        let leases = Arc::new(LockdLeases::new(
            ks.clone(),
            queue.clone(),
            max_locks_per_lease,
        ));
        let pending = Arc::new(Pending::default());
        let calls = LockCalls::new(
            ks.clone(),
            queue.clone(),
            grants.clone(),
            leases.clone(),
            pending.clone(),
        );
        let observer = Arc::new(Observer::new(ks.clone(), queue));
        Ok(Arc::new(Inner {
            ks,
            grants,
            leases,
            calls,
            observer,
            turns: Turns::default(),
            pending,
            stats: StatsCache::default(),
            space: Arc::new(Space::new(options.quota_backend_bytes)),
            options,
            handle: Handle::current(),
        }))
    }

    /// Reads every lock and lease key into the sweeper's index, and answers
    /// the revision read (see [`Inner::spawn_background`]).
    pub(crate) async fn scan(&self) -> Result<i64, LockError> {
        self.observer.scan().await
    }

    /// Starts the work that runs for the backend's life: the session's
    /// keep-alive, the endpoint rotation, the events watch (from
    /// `revision` + 1, see [`Inner::scan`]), the sweeper and, unless
    /// compaction is off, the compactor (`space.rs`). Abort them all when
    /// it ends.
    pub(crate) fn spawn_background(self: &Arc<Self>, revision: i64) -> Vec<JoinHandle<()>> {
        let ks = self.ks.clone();
        let keepalive = self
            .handle
            .spawn(async move { ks.etcd_leases.keep_alive(&ks.etcd).await });
        let ks = self.ks.clone();
        let rotation = self
            .handle
            .spawn(async move { ks.etcd.rotation().keep(ks.etcd.client()).await });
        let watch = self.handle.spawn(self.observer.clone().watch(revision));
        let sweeper = self.handle.spawn(self.observer.clone().sweep());
        let mut tasks = vec![keepalive, rotation, watch, sweeper];
        if let Some(settings) = self.options.compaction {
            let (ks, space) = (self.ks.clone(), self.space.clone());
            tasks.push(self.handle.spawn(async move {
                space.compact_forever(&ks.etcd, &ks.floors, settings).await;
            }));
        }
        tasks
    }

    /// Ends the session in the background (see [`EtcdLeases::retire`]).
    pub(crate) fn retire(&self) {
        self.ks.etcd_leases.retire(&self.ks.etcd, &self.handle);
    }

    pub(crate) fn options(&self) -> &EtcdOptions {
        &self.options
    }

    /// Unhealthy while etcd refuses lockd's credentials or permissions: a
    /// refusal noted by a failed request is checked again (the permission
    /// check of the start) and reported if it stands. No request when none
    /// was noted. (etcd's NOSPACE alarm is a matter of readiness, not of
    /// health: see [`Inner::check_space`].)
    pub(crate) async fn health(&self) -> Result<(), LockError> {
        if self.ks.etcd.refused().is_some() {
            check_permission(&self.ks.etcd, &self.ks.layout).await?;
        }
        Ok(())
    }

    /// `unavailable` while etcd's NOSPACE alarm is raised, asking etcd
    /// only if the compactor's last check found it or a write failed for
    /// lack of space since (see `Space::health`).
    pub(crate) async fn space_alarm(&self) -> Result<(), LockError> {
        self.space.health(&self.ks.etcd).await
    }

    /// etcd's space as last checked, and this backend's compactions; starts
    /// another check in the background (as `stats` does).
    pub(crate) fn space(self: &Arc<Self>) -> StoreSpace {
        if self.space.start_refresh() {
            let inner = self.clone();
            self.handle.spawn(async move {
                if let Err(e) = inner.space.check(&inner.ks.etcd).await {
                    tracing::debug!(error = %e, "etcd store: reading etcd's space failed");
                }
                inner.space.end_refresh();
            });
        }
        self.space.last()
    }

    /// etcd's space, asked now.
    pub(crate) async fn check_space(&self) -> Result<StoreSpace, LockError> {
        self.space.check(&self.ks.etcd).await.map(|(s, _)| s)
    }

    /// The current session lease id.
    pub(crate) fn session(&self) -> i64 {
        self.ks.etcd_leases.session()
    }

    pub(crate) fn endpoints_in_use(&self) -> Vec<String> {
        self.ks.etcd.rotation().in_use()
    }

    pub(crate) fn refused_requests(&self) -> u64 {
        self.ks.etcd.rotation().refused_total()
    }

    /// Waits for this backend's `lock` calls on `key` made so far to queue
    /// or end (see `local.rs`).
    async fn settle_turns(&self, key: &Key) {
        self.turns.settle(key, self.options.request_timeout).await;
    }

    /// Waits for this backend's detached releases of names that match
    /// `filter` (read-your-writes within the process).
    async fn settle_pending(&self, filter: impl Fn(&Key) -> bool) {
        self.pending
            .settle(filter, self.options.request_timeout)
            .await;
    }

    /// Starts a `lock` call in a task of its own and returns where its
    /// answer will arrive. Takes the caller's turn on the name at once
    /// (before any await), so call order is queue order.
    pub(crate) fn start_lock(
        self: &Arc<Self>,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
        value: Option<&str>,
    ) -> oneshot::Receiver<Result<Grant, LockError>> {
        let turn = self.turns.take(key);
        let (mut caller, rx) = oneshot::channel();
        let inner = self.clone();
        let (key, owner) = (key.clone(), owner.to_string());
        let value = value.map(str::to_string);
        self.handle.spawn(async move {
            let result = inner
                .calls
                .lock(
                    &key,
                    &owner,
                    ttl_ms,
                    options,
                    value.as_deref(),
                    turn,
                    &mut caller,
                )
                .await;
            inner.answer_lock(&key, &owner, result, caller).await;
        });
        rx
    }

    /// Starts `lock_in_lease` in a task of its own, as `start_lock` does.
    pub(crate) fn start_lease_lock(
        self: &Arc<Self>,
        key: &Key,
        lease_id: &str,
        options: LockOptions,
    ) -> oneshot::Receiver<Result<Grant, LockError>> {
        let turn = self.turns.take(key);
        let (mut caller, rx) = oneshot::channel();
        let inner = self.clone();
        let (key, lease_id) = (key.clone(), lease_id.to_string());
        self.handle.spawn(async move {
            let result = inner
                .calls
                .lock_in_lease(&key, &lease_id, options, turn, &mut caller)
                .await;
            inner.answer_lock(&key, &lease_id, result, caller).await;
        });
        rx
    }

    /// Answers a `lock` (or `lock_in_lease`) caller, or undoes a fresh
    /// grant nobody is left to receive.
    async fn answer_lock(
        &self,
        key: &Key,
        owner: &str,
        result: Result<(Grant, bool), LockError>,
        caller: Caller,
    ) {
        match result {
            Ok((grant, fresh)) => {
                if caller.send(Ok(grant)).is_err() && fresh {
                    let undone = self
                        .grants
                        .unlock(key, owner, Some(grant.fencing_token))
                        .await;
                    // Nobody waits for this answer; a failure leaves the
                    // lock to expire.
                    let _ = log_unavailable("undo of an unreceived grant", key, undone);
                }
            }
            // Nobody is left to see the failure: not a store failure to
            // report (it may be "the caller went away").
            Err(e) if caller.is_closed() => {
                tracing::debug!(error = %e, "lock call ended after its caller went away");
            }
            Err(e) => {
                let _ = caller.send(log_unavailable("lock", key, Err(e)));
            }
        }
    }

    pub(crate) async fn unlock(
        &self,
        key: &Key,
        owner: &str,
        token: Option<u64>,
    ) -> Result<(), LockError> {
        self.settle_turns(key).await;
        self.settle_pending(|k| k == key).await;
        let result = self.grants.unlock(key, owner, token).await;
        log_unavailable("unlock", key, result)
    }

    pub(crate) async fn extend(
        &self,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
    ) -> Result<Grant, LockError> {
        self.settle_pending(|k| k == key).await;
        let result = self.grants.extend(key, owner, ttl_ms).await;
        log_unavailable("extend", key, result)
    }

    pub(crate) async fn get(&self, key: &Key) -> Result<Option<LockInfo>, LockError> {
        self.settle_pending(|k| k == key).await;
        let result = self.grants.get(key).await;
        log_unavailable("get", key, result)
    }

    pub(crate) async fn proclaim(
        &self,
        key: &Key,
        candidate: &str,
        token: u64,
        value: &str,
    ) -> Result<(), LockError> {
        self.settle_turns(key).await;
        self.settle_pending(|k| k == key).await;
        let result = self.grants.proclaim(key, candidate, token, value).await;
        log_unavailable("proclaim", key, result)
    }

    pub(crate) async fn leader(&self, key: &Key) -> Result<Option<Leader>, LockError> {
        self.settle_pending(|k| k == key).await;
        let result = self.grants.leader(key).await;
        log_unavailable("leader", key, result)
    }

    /// Everything about `key`; this backend's `lock` calls on it made so
    /// far are queued (or ended) first, so their waiters count.
    pub(crate) async fn describe(&self, key: &Key) -> Result<NameState, LockError> {
        self.settle_turns(key).await;
        self.settle_pending(|k| k == key).await;
        let result = self.grants.describe(key).await;
        log_unavailable("describe", key, result)
    }

    pub(crate) async fn list(
        &self,
        namespace: &str,
        prefix: &str,
    ) -> Result<Vec<ListedLock>, LockError> {
        self.settle_pending(|k| *k.namespace == *namespace && k.name.starts_with(prefix))
            .await;
        let result = self.grants.list(namespace, prefix).await;
        if let Err(LockError::Unavailable(cause)) = &result {
            tracing::warn!(
                op = "list",
                namespace = ?namespace,
                prefix = ?prefix,
                cause = %cause,
                "etcd store failed: the caller gets unavailable"
            );
        }
        result
    }

    /// Every namespace with a live holder or a waiter, cluster-wide.
    pub(crate) async fn namespaces(&self) -> Result<Vec<NamespaceStats>, LockError> {
        // Releases this backend started are in, as in `list`.
        self.settle_pending(|_| true).await;
        let result = namespaces::namespaces(&self.ks).await;
        if let Err(LockError::Unavailable(cause)) = &result {
            tracing::warn!(
                op = "namespaces",
                cause = %cause,
                "etcd store failed: the caller gets unavailable"
            );
        }
        result
    }

    /// Releases `key` whoever holds it, to the head of its queue if anyone
    /// waits, in one transaction marked force-released (a lock under a
    /// lease leaves the lease's record in it too). Answers the holder it
    /// released; `NotHeld` if the lock is free.
    pub(crate) async fn force_unlock(&self, key: &Key) -> Result<LockInfo, LockError> {
        self.settle_turns(key).await;
        self.settle_pending(|k| k == key).await;
        let result = self.grants.force_release(key).await;
        let info = log_unavailable("force-unlock", key, result)?.info();
        tracing::warn!(
            namespace = &*key.namespace,
            name = &*key.name,
            owner = %info.owner,
            token = info.fencing_token,
            "lock force-released"
        );
        Ok(info)
    }

    /// Releases `owner`'s grant `token` in the background; later calls on
    /// the name through this backend wait for it.
    pub(crate) fn release_detached(self: &Arc<Self>, key: Key, owner: String, token: u64) {
        let pending = self.pending.begin(&key);
        let grants = self.grants.clone();
        self.handle.spawn(async move {
            // Nobody waits for the answer; a failure leaves the lock to
            // expire.
            let result = grants.unlock(&key, &owner, Some(token)).await;
            let _ = log_unavailable("detached release", &key, result);
            drop(pending);
        });
    }

    pub(crate) async fn grant_lease(
        &self,
        lease: &Key,
        ttl_ms: u64,
        durability: Durability,
    ) -> Result<u64, LockError> {
        let result = self.leases.grant(lease, ttl_ms, durability).await;
        log_unavailable("lease grant", lease, result)
    }

    pub(crate) async fn refresh_lease(&self, lease: &Key) -> Result<u64, LockError> {
        let result = self.leases.refresh(lease).await;
        log_unavailable("lease refresh", lease, result)
    }

    pub(crate) async fn revoke_lease(&self, lease: &Key) -> Result<u64, LockError> {
        let result = self.leases.revoke(lease).await;
        log_unavailable("lease revoke", lease, result)
    }

    pub(crate) async fn get_lease(&self, lease: &Key) -> Result<Option<LeaseInfo>, LockError> {
        let result = self.leases.get(lease).await;
        log_unavailable("lease get", lease, result)
    }

    /// A future that completes once the lease has ended: see
    /// [`LockdLeases::watch_end`].
    pub(crate) fn lease_ended(&self, lease: &Key) -> BoxFuture<'static, ()> {
        let leases = self.leases.clone();
        let lease_key = leases.lease_key(lease);
        Box::pin(async move { leases.watch_end(lease_key).await })
    }

    /// A new subscriber to the backend's events.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<LockEvent> {
        self.observer.subscribe()
    }

    /// The backend's shared history of events (`replay.rs`).
    pub(crate) fn history(&self) -> Arc<dyn lockd_core::EventHistory> {
        self.observer.clone()
    }

    /// The counts of the previous refresh; starts another in the background.
    pub(crate) fn stats(self: &Arc<Self>) -> BackendStats {
        if self.stats.start_refresh() {
            let inner = self.clone();
            self.handle.spawn(async move {
                inner.stats.refresh(&inner.ks.etcd, &inner.ks.layout).await;
            });
        }
        self.stats.last()
    }
}

/// Logs a store failure that the caller sees as `unavailable` (callers
/// only see the message), and passes the result on.
fn log_unavailable<T>(
    op: &'static str,
    key: &Key,
    result: Result<T, LockError>,
) -> Result<T, LockError> {
    if let Err(LockError::Unavailable(cause)) = &result {
        tracing::warn!(
            op,
            namespace = ?key.namespace,
            name = ?key.name,
            cause = %cause,
            "etcd store failed: the caller gets unavailable"
        );
    }
    result
}

/// Probes the endpoints (`GET /health`, over TLS for `https://`), each
/// within the dial timeout, before the client's first request: a refused
/// certificate then fails the start naming the endpoint and the cause,
/// instead of surfacing as a bare transport error or a wait until the
/// request deadline. The first member that answers lets the start go on
/// (the others are the rotation's business); if none does, the error names
/// every endpoint and its cause.
async fn preflight(options: &EtcdOptions, access: &Access) -> Result<(), LockError> {
    let mut probes = tokio::task::JoinSet::new();
    for (i, endpoint) in options.endpoints.iter().enumerate() {
        let (endpoint, tls, limit) = (
            endpoint.clone(),
            access.tls().cloned(),
            options.dial_timeout,
        );
        probes.spawn(async move { (i, health(&endpoint, tls.as_ref(), limit).await) });
    }
    let mut failures: Vec<(usize, ProbeError)> = Vec::new();
    while let Some(done) = probes.join_next().await {
        match done {
            Ok((_, Ok(_))) => return Ok(()),
            Ok((i, Err(e))) => failures.push((i, e)),
            // A probe cannot panic short of a bug; count it as no answer.
            Err(e) => tracing::debug!(error = %e, "etcd endpoint probe ended"),
        }
    }
    failures.sort_by_key(|(i, _)| *i);
    let refused = failures
        .iter()
        .any(|(_, e)| matches!(e, ProbeError::Refused(_)));
    let message = failures
        .iter()
        .map(|(i, e)| format!("etcd {}: {e}", options.endpoints[*i]))
        .collect::<Vec<_>>()
        .join("; ");
    Err(if refused {
        LockError::InvalidArgument(message)
    } else {
        LockError::Unavailable(message)
    })
}

/// Reads the prefix's format key, writing this version's where there is
/// none (a new prefix, or one written before lockd kept the key: its
/// records are format 1, which this version reads), and refuses a prefix of
/// a newer format, naming both versions, before anything is written there.
async fn check_format(etcd: &Etcd, layout: &Layout) -> Result<(), LockError> {
    let key = layout.format_key();
    let ours = crate::record::FormatRecord {
        v: crate::record::VERSION,
    };
    let txn = Txn::new()
        .when(vec![Compare::version(key.clone(), CompareOp::Equal, 0)])
        .and_then(vec![TxnOp::put(
            key.clone(),
            crate::record::to_json(&ours),
            None,
        )])
        .or_else(vec![TxnOp::get(key.clone(), None)]);
    // Idempotent: it writes only where the key is absent.
    let resp = etcd.read_txn("format check", txn).await?;
    if resp.succeeded() {
        return Ok(());
    }
    let found = crate::rpc::gets(&resp)
        .first()
        .and_then(|get| get.kvs().first())
        .map(|kv| crate::record::from_json::<crate::record::FormatRecord>(&key, kv.value()))
        .transpose()?;
    match found {
        Some(theirs) if theirs.v > ours.v => Err(LockError::InvalidArgument(format!(
            "etcd key {} says lockd's records there have format version {}; this lockd reads \
             up to {}: run the lockd that wrote them, or a newer one",
            String::from_utf8_lossy(&key),
            theirs.v,
            ours.v
        ))),
        _ => Ok(()),
    }
}

/// Checks that lockd may read and write every key under its prefix, so a
/// user granted too little fails the start, not some later call. The
/// transaction deletes the whole prefix only if `.why`'s version is
/// negative, which no key's ever is: etcd checks the permissions of both
/// branches, and applies neither.
async fn check_permission(etcd: &Etcd, layout: &Layout) -> Result<(), LockError> {
    let all = layout.all();
    let txn = Txn::new()
        .when(vec![Compare::version(
            layout.marker_key(),
            CompareOp::Less,
            0,
        )])
        .and_then(vec![TxnOp::delete(
            all,
            Some(DeleteOptions::new().with_prefix()),
        )]);
    // Never applied (see above), so it is sent again like a read.
    let resp = etcd.read_txn("permission check", txn).await?;
    if resp.succeeded() {
        // Unreachable by etcd's semantics; say so loudly if it ever is not.
        tracing::error!("etcd permission check: a key's version compared below 0");
    }
    Ok(())
}

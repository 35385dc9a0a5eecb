//! The lock operations, as etcd transactions. See the crate docs for the
//! design; every write here is a transaction guarded by a compare on the
//! revision it read, so a decision made on stale data is never applied.
//!
//! [`Inner`] holds what the operations share and answers the backend's
//! calls; the flows live in the submodule of their concern:
//!
//! - `read`: one consistent read of a lock and its queue (handing an
//!   expired lock to the queue's head first), `get` and `list`;
//! - `grant`: writing a holder: a fresh grant, a hand-off to the head of
//!   the queue, a refresh (`extend`, an idempotent `lock`), the quota;
//! - `queue`: a waiter's key, its watch, and leaving the queue;
//! - `lock`: the whole `lock` call, in a task of its own;
//! - `release`: `unlock`, in one round trip when it can be;
//! - `lease`: leases, their locks, refresh, revoke and the end watch;
//! - `observe`: the events watch, and the sweeper of expired keys.

mod grant;
mod lease;
mod lock;
mod observe;
mod queue;
mod read;
mod release;

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions};
use lockd_core::{BackendStats, Clock, EventSender, Grant, Key, ListedLock, LockError, LockInfo};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::deadlines::Deadlines;
use crate::etcd_lease::{Session, SharedLeases};
use crate::keys::Layout;
use crate::local::{Pending, Turns};
use crate::options::EtcdOptions;
use crate::recent::RecentGrants;
use crate::record::Held;
use crate::rpc::Etcd;
use crate::stats::StatsCache;

/// Everything the operations share. Spawned tasks hold it through an `Arc`.
pub(crate) struct Inner {
    /// The cluster: requests, resends, the endpoints in rotation.
    etcd: Etcd,
    layout: Layout,
    clock: Arc<dyn Clock>,
    options: EtcdOptions,
    /// The lease of this backend's waiter keys and ephemeral locks.
    session: Session,
    /// Leases shared by this backend's persistent grants.
    leases: SharedLeases,
    /// Grants this backend made and may release in one round trip.
    recent: RecentGrants,
    turns: Turns,
    pending: Pending,
    stats: StatsCache,
    /// Every change the watch reports, for whoever subscribed.
    events: EventSender,
    /// Expiries of the lock and lease keys, for the sweeper.
    deadlines: Deadlines,
    handle: Handle,
}

impl Inner {
    /// Connects to `options.endpoints` and opens a session. Must be called
    /// within a tokio runtime, which the backend's background work then
    /// runs on.
    pub(crate) async fn connect(
        options: EtcdOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Inner>, LockError> {
        let connect_options = ConnectOptions::new()
            .with_connect_timeout(options.dial_timeout)
            .with_timeout(options.request_timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(false);
        let unreachable = |e: &dyn std::fmt::Display| {
            LockError::Unavailable(format!(
                "cannot reach etcd at {}: {e}",
                options.endpoints.join(",")
            ))
        };
        let client = match tokio::time::timeout(
            options.dial_timeout,
            Client::connect(&options.endpoints, Some(connect_options)),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(unreachable(&e)),
            Err(_) => return Err(unreachable(&"timed out")),
        };
        let etcd = Etcd::new(client, options.endpoints.clone(), options.request_timeout);
        let session = Session::open(&etcd, options.session_ttl_secs()).await?;
        Ok(Arc::new(Inner {
            etcd,
            layout: Layout::new(&options.prefix),
            clock,
            session,
            leases: SharedLeases::new(options.lease_slack),
            options,
            recent: RecentGrants::default(),
            turns: Turns::default(),
            pending: Pending::default(),
            stats: StatsCache::default(),
            events: EventSender::default(),
            deadlines: Deadlines::default(),
            handle: Handle::current(),
        }))
    }

    /// Starts the work that runs for the backend's life: the session's
    /// keep-alive, the endpoint rotation, the events watch (from
    /// `revision` + 1, see [`Inner::scan`]) and the sweeper. Abort them all
    /// when it ends.
    pub(crate) fn spawn_background(self: &Arc<Self>, revision: i64) -> [JoinHandle<()>; 4] {
        let inner = self.clone();
        let keepalive = self
            .handle
            .spawn(async move { inner.session.keep_alive(&inner.etcd).await });
        let inner = self.clone();
        let rotation = self
            .handle
            .spawn(async move { inner.etcd.rotation().keep(inner.etcd.client()).await });
        let watch = self.handle.spawn(self.clone().observe(revision));
        let sweeper = self.handle.spawn(self.clone().sweep());
        [keepalive, rotation, watch, sweeper]
    }

    /// Ends the session in the background (see [`Session::retire`]).
    pub(crate) fn retire(&self) {
        self.session.retire(&self.etcd, &self.handle);
    }

    pub(crate) fn options(&self) -> &EtcdOptions {
        &self.options
    }

    /// The current session lease id.
    pub(crate) fn session(&self) -> i64 {
        self.session.id()
    }

    pub(crate) fn endpoints_in_use(&self) -> Vec<String> {
        self.etcd.rotation().in_use()
    }

    pub(crate) fn refused_requests(&self) -> u64 {
        self.etcd.rotation().refused_total()
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

    pub(crate) async fn unlock(
        &self,
        key: &Key,
        owner: &str,
        token: Option<u64>,
    ) -> Result<(), LockError> {
        self.settle_turns(key).await;
        self.settle_pending(|k| k == key).await;
        let result = self.unlock_flow(key, owner, token).await;
        log_unavailable("unlock", key, result)
    }

    pub(crate) async fn extend(
        &self,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
    ) -> Result<Grant, LockError> {
        self.settle_pending(|k| k == key).await;
        let result = self.extend_flow(key, owner, ttl_ms).await;
        log_unavailable("extend", key, result)
    }

    pub(crate) async fn get(&self, key: &Key) -> Result<Option<LockInfo>, LockError> {
        self.settle_pending(|k| k == key).await;
        let result = self.get_flow(key).await;
        log_unavailable("get", key, result)
    }

    pub(crate) async fn list(
        &self,
        namespace: &str,
        prefix: &str,
    ) -> Result<Vec<ListedLock>, LockError> {
        self.settle_pending(|k| *k.namespace == *namespace && k.name.starts_with(prefix))
            .await;
        let result = self.list_flow(namespace, prefix).await;
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

    /// Runs the lease operation `op` on `lease`, logging a failure the
    /// caller sees as `unavailable`.
    pub(crate) async fn lease_op<'a, T, F, Fut>(
        &'a self,
        op: &'static str,
        lease: &Key,
        call: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(&'a Inner) -> Fut,
        Fut: std::future::Future<Output = Result<T, LockError>>,
    {
        let result = call(self).await;
        log_unavailable(op, lease, result)
    }

    /// Releases `owner`'s grant `token` in the background; later calls on
    /// the name through this backend wait for it.
    pub(crate) fn release_detached(self: &Arc<Self>, key: Key, owner: String, token: u64) {
        let pending = self.pending.begin(&key);
        let inner = self.clone();
        self.handle.spawn(async move {
            // Nobody waits for the answer; a failure leaves the lock to
            // expire.
            let result = inner.unlock_flow(&key, &owner, Some(token)).await;
            let _ = log_unavailable("detached release", &key, result);
            drop(pending);
        });
    }

    /// The counts of the previous refresh; starts another in the background.
    pub(crate) fn stats(self: &Arc<Self>) -> BackendStats {
        if self.stats.start_refresh() {
            let inner = self.clone();
            self.handle.spawn(async move {
                inner.stats.refresh(&inner.etcd, &inner.layout).await;
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

/// The compare that holds while the lock key is as read: absent, or at the
/// revision read.
fn unchanged(lock_key: &[u8], current: Option<&Held>) -> Compare {
    match current {
        None => Compare::version(lock_key.to_vec(), CompareOp::Equal, 0),
        Some(h) => Compare::mod_revision(lock_key.to_vec(), CompareOp::Equal, h.mod_revision),
    }
}

/// The compare that holds while nobody is queued for the lock.
fn nobody_queued(queue: &[u8]) -> Compare {
    Compare::version(queue.to_vec(), CompareOp::Equal, 0).with_prefix()
}

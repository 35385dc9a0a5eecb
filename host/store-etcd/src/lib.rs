//! The distributed lock store of lockd: lock state, leases, fencing tokens
//! and FIFO wait queues in etcd, so many lockd hosts share one set of locks.
//!
//! [`EtcdBackend`] implements [`LockBackend`] and passes the same conformance
//! suite as the memory and redb stores (`tests/conformance.rs`, against a real
//! etcd started by `testing::EtcdCluster`, behind the `testing` feature).
//!
//! # Layout
//!
//! ```text
//! <prefix>/<ns>/<name>                {"v":1,"owner":..,"expires_at_ms":..,"durability":..[,"token":..][,"waiter":..]}
//! <prefix>/.queue/<ns>/<name>/<id>    {"v":1,"id":..,"owner":..,"ttl_ms":..,"durability":..,"session":..}
//! ```
//!
//! The prefix defaults to `/lockd`. Namespaces and names are percent-encoded
//! (every byte outside `[A-Za-z0-9_-]`), so they never contain `/` or start
//! with `.`: two locks never share a key, and the queue tree never overlaps a
//! namespace.
//!
//! # Semantics, and how etcd provides them
//!
//! - **Expiry.** The record's `expires_at_ms`, compared with the injected
//!   [`Clock`], is the authority: a lock whose expiry passed is free even if
//!   its key is still in etcd. A grant over such a key replaces it in a
//!   transaction that compares the key's `mod_revision`.
//! - **Leases** remove what nobody cleans up. A persistent grant goes on a
//!   lease that ends no sooner than `ceil((ttl + lease_slack) / 1 s)` seconds
//!   after it, so etcd deletes the key of a lock whose host died, a little
//!   after the lock expired. Grants share leases: a host grants a lease a
//!   quarter (at least 5 s) longer than needed and puts every grant it fits
//!   on it while it does, so a grant costs no lease round trip and a release
//!   no revoke; a dead host's key may stay that much longer (it is free all
//!   the same). The slack keeps the lease from ending before the expiry when
//!   clocks differ; under a [`lockd_core::ManualClock`] (tests), a generous
//!   slack keeps leases from running out in real time while the test clock
//!   stands still.
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
//!   it, so it is taken back (see `Inner::refresh`).
//! - **Dead members** leave the client's rotation at their first refused
//!   request and come back once they accept connections (`endpoints.rs`).
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
//!   kept on timeout and released when nobody is left to receive it).
//! - **Ordering within one process.** `lock` calls on one name make their
//!   first attempt and join the queue one at a time, in call order, so two
//!   waiters of one host queue in the order they called.
//! - **Durability.** etcd commits every write to a quorum's disk before it
//!   answers, so a persistent grant, extend or unlock is durable on return. An
//!   *ephemeral* lock uses the same key but lives on the session lease of the
//!   host that granted (or last refreshed) it: it is revoked when that
//!   backend is dropped, and expires `session_ttl` after the host dies. Unlike
//!   the embedded store's ephemeral locks, it is still written to etcd's disk
//!   (etcd has no memory-only keys, so it is no cheaper) and it survives a
//!   restart of etcd itself.
//!
//! See `docs/design.md` ("The etcd store") for what is and is not guaranteed.
#![deny(missing_docs)]

mod endpoints;
mod keys;
mod local;
mod record;
mod store;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use lockd_core::{
    BackendStats, BoxFuture, Clock, Grant, Key, ListedLock, LockBackend, LockError, LockInfo,
    LockOptions,
};
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};

use crate::keys::Layout;
use crate::store::{Inner, StatsCache};

/// How to reach etcd and how to use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdOptions {
    /// Client URLs of the cluster's members, such as `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// Every key lockd writes starts with this (default `/lockd`). Hosts
    /// that share locks must use the same prefix.
    pub prefix: String,
    /// How long to wait for a connection to an endpoint.
    pub dial_timeout: Duration,
    /// How long any one etcd request may take before the operation answers
    /// `unavailable`.
    pub request_timeout: Duration,
    /// Added to a grant's TTL to size its etcd lease (rounded up to whole
    /// seconds). Must exceed the clock skew between lockd hosts and etcd.
    pub lease_slack: Duration,
    /// TTL of the session lease that carries this backend's waiter keys and
    /// ephemeral locks: how long they outlive a host that died (whole
    /// seconds, at least 2).
    pub session_ttl: Duration,
}

impl EtcdOptions {
    /// Options for `endpoints` with the defaults: prefix `/lockd`, dial 5 s,
    /// requests 5 s, lease slack 5 s, session 10 s.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdOptions {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: "/lockd".to_string(),
            dial_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            lease_slack: Duration::from_secs(5),
            session_ttl: Duration::from_secs(10),
        }
    }

    /// Options from a comma-separated endpoint list, as in
    /// `--store etcd:http://a:2379,http://b:2379` (the part after `etcd:`).
    /// Every endpoint must be `http://HOST:PORT`: the client is built
    /// without TLS, so an `https://` endpoint could never connect, and a
    /// bare `HOST:PORT` is refused rather than guessed at.
    pub fn from_endpoint_list(list: &str) -> Result<Self, LockError> {
        let endpoints: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if endpoints.is_empty() {
            return Err(LockError::InvalidArgument(
                "an etcd store needs at least one endpoint, as in etcd:http://127.0.0.1:2379"
                    .into(),
            ));
        }
        for endpoint in &endpoints {
            check_endpoint(endpoint).map_err(|why| {
                LockError::InvalidArgument(format!(
                    "etcd endpoint {endpoint:?} {why}; expected http://HOST:PORT, \
                     as in etcd:http://127.0.0.1:2379"
                ))
            })?;
        }
        Ok(EtcdOptions::new(endpoints))
    }

    pub(crate) fn session_ttl_secs(&self) -> i64 {
        (self.session_ttl.as_secs().max(2)).min(i64::MAX as u64) as i64
    }
}

/// Why `endpoint` is not `http://HOST:PORT`, if it is not.
fn check_endpoint(endpoint: &str) -> Result<(), &'static str> {
    let Some(authority) = endpoint.strip_prefix("http://") else {
        return Err(if endpoint.starts_with("https://") {
            "uses https, which this build does not support"
        } else {
            "is not an http:// URL"
        });
    };
    // A trailing `/` is harmless; any other path is a mistake.
    let authority = authority.strip_suffix('/').unwrap_or(authority);
    if authority.contains(['/', '?', '#', '@']) || authority.contains(char::is_whitespace) {
        return Err("has a path, query, user or spaces after the host");
    }
    let Some((host, port)) = authority.rsplit_once(':') else {
        return Err("has no port");
    };
    if host.is_empty() || host == "[]" {
        return Err("has no host");
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err("has no valid port"),
    }
}

/// Backends dropped in this process whose session is still being revoked.
/// A new backend waits for them, so a restart within one process sees the
/// ephemeral locks of its predecessor gone.
static RETIRING: Mutex<Vec<watch::Receiver<bool>>> = Mutex::new(Vec::new());

async fn wait_for_retired(limit: Duration) {
    let pending: Vec<watch::Receiver<bool>> = {
        let mut all = RETIRING.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|rx| !*rx.borrow() && rx.has_changed().is_ok());
        all.clone()
    };
    let all = async {
        for mut rx in pending {
            // An error means the revoking task is gone: nothing to wait for.
            let _ = rx.wait_for(|done| *done).await;
        }
    };
    let _ = tokio::time::timeout(limit, all).await;
}

/// A [`LockBackend`] on etcd. Open it with [`EtcdBackend::connect`]; drop
/// it to end its session (its ephemeral locks and waiter keys go too).
pub struct EtcdBackend {
    inner: Arc<Inner>,
    keepalive: tokio::task::JoinHandle<()>,
    /// Keeps members that refuse connections out of the client's rotation.
    rotation: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("options", &self.inner.options)
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
        wait_for_retired(options.request_timeout).await;
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
        let inner = Arc::new(Inner {
            client,
            layout: Layout::new(&options.prefix),
            clock,
            rotation: endpoints::Rotation::new(options.endpoints.len()),
            options,
            session: AtomicI64::new(0),
            handle: Handle::current(),
            turns: Default::default(),
            pending: Default::default(),
            next_waiter: AtomicU64::new(0),
            stats: StatsCache::default(),
            leases: Default::default(),
            recent: Default::default(),
            refused: Default::default(),
            refused_total: AtomicU64::new(0),
        });
        let session = inner
            .grant_lease(inner.options.session_ttl_secs())
            .await
            .map_err(|e| match e {
                LockError::Unavailable(m) => {
                    LockError::Unavailable(format!("cannot open a session on etcd: {m}"))
                }
                other => other,
            })?;
        inner
            .session
            .store(session, std::sync::atomic::Ordering::Relaxed);
        let keepalive = inner.handle.spawn(inner.clone().keep_session());
        let rotation = inner.handle.spawn(inner.clone().keep_endpoints());
        Ok(EtcdBackend {
            inner,
            keepalive,
            rotation,
        })
    }

    /// The options in force.
    pub fn options(&self) -> &EtcdOptions {
        &self.inner.options
    }

    /// The endpoints requests go to now: the configured ones less those
    /// taken out of rotation because they refused connections (they are
    /// probed every second and put back once they accept).
    pub fn endpoints_in_use(&self) -> Vec<String> {
        self.inner.rotation.in_use(&self.inner.options.endpoints)
    }

    /// How many requests an endpoint refused (each was sent again).
    pub fn refused_requests(&self) -> u64 {
        self.inner
            .refused_total
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The current session lease id (for diagnostics).
    pub fn session_lease(&self) -> i64 {
        self.inner.session()
    }
}

impl Drop for EtcdBackend {
    fn drop(&mut self) {
        self.keepalive.abort();
        self.rotation.abort();
        let (done, rx) = watch::channel(false);
        RETIRING.lock().unwrap_or_else(|e| e.into_inner()).push(rx);
        let client = self.inner.client.clone();
        let session = self.inner.session();
        let limit = self.inner.options.request_timeout;
        // If the runtime is gone, the task never runs, `done` is dropped,
        // and nobody waits for it; the lease then expires on its own.
        self.inner.handle.spawn(async move {
            let _ = store::revoke(&client, session, limit).await;
            let _ = done.send(true);
        });
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
            let ticket = self.inner.turns.ticket(key);
            let (tx, rx) = oneshot::channel();
            let task = self.inner.clone().lock_task(
                key.clone(),
                owner.to_string(),
                ttl_ms,
                options,
                ticket,
                tx,
            );
            self.inner.handle.spawn(task);
            rx.await.unwrap_or_else(|_| {
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
        Box::pin(async move {
            self.inner
                .pending
                .settle(|k| k == key, self.inner.options.request_timeout)
                .await;
            self.inner.unlock_flow(key, owner, token).await
        })
    }

    fn extend<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        Box::pin(async move {
            self.inner
                .pending
                .settle(|k| k == key, self.inner.options.request_timeout)
                .await;
            self.inner.extend_flow(key, owner, ttl_ms).await
        })
    }

    fn get<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<LockInfo>, LockError>> {
        Box::pin(async move {
            self.inner
                .pending
                .settle(|k| k == key, self.inner.options.request_timeout)
                .await;
            self.inner.get_flow(key).await
        })
    }

    fn list<'a>(
        &'a self,
        namespace: &'a str,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ListedLock>, LockError>> {
        Box::pin(async move {
            self.inner
                .pending
                .settle(
                    |k| *k.namespace == *namespace && k.name.starts_with(prefix),
                    self.inner.options.request_timeout,
                )
                .await;
            self.inner.list_flow(namespace, prefix).await
        })
    }

    fn release_detached(&self, key: Key, owner: String, token: u64) {
        let pending = self.inner.pending.begin(&key);
        let inner = self.inner.clone();
        self.inner.handle.spawn(async move {
            let _ = inner.unlock_flow(&key, &owner, Some(token)).await;
            drop(pending);
        });
    }

    /// Cluster-wide counts as of the previous call (the first call answers
    /// zeros): `locks_held` counts lock keys in etcd, including expired ones
    /// no lease or grant has removed yet; `waiters` counts waiter keys of all
    /// hosts. etcd's commits are not counted (0).
    fn stats(&self) -> BackendStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(list: &str) -> String {
        match EtcdOptions::from_endpoint_list(list) {
            Err(LockError::InvalidArgument(m)) => m,
            other => panic!("{list:?} was accepted: {other:?}"),
        }
    }

    #[test]
    fn endpoint_lists_parse_with_defaults() {
        let o =
            EtcdOptions::from_endpoint_list("http://127.0.0.1:2379, http://[::1]:2380/,").unwrap();
        assert_eq!(o.endpoints, ["http://127.0.0.1:2379", "http://[::1]:2380/"]);
        assert_eq!(o, EtcdOptions::new(o.endpoints.clone()));
        assert_eq!(o.prefix, "/lockd");
    }

    #[test]
    fn bad_endpoints_say_what_is_wrong() {
        assert!(refusal("").contains("at least one endpoint"));
        assert!(refusal(" , ").contains("at least one endpoint"));
        assert!(refusal("https://e:2379").contains("https"));
        assert!(refusal("127.0.0.1:2379").contains("not an http:// URL"));
        assert!(refusal("http://e").contains("no port"));
        assert!(refusal("http://:2379").contains("no host"));
        assert!(refusal("http://e:0").contains("no valid port"));
        assert!(refusal("http://e:99999").contains("no valid port"));
        assert!(refusal("http://e:2379/v3").contains("path"));
        // The good endpoint does not excuse the bad one, which is named.
        let m = refusal("http://a:2379,ftp://b:2379");
        assert!(
            m.contains("\"ftp://b:2379\"") && m.contains("http://HOST:PORT"),
            "{m}"
        );
    }
}

//! etcd's own leases: the ones this backend's keys live on, so that etcd
//! removes what nobody cleans up. Leases shared by persistent grants, and
//! the session lease that carries waiter keys and ephemeral locks.
//!
//! Not lockd's leases (docs/contract.md#c16-leases), which are records of
//! their own in etcd: see `store/lockd_lease.rs`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use lockd_core::{Durability, LockError};
use tokio::runtime::Handle;
use tokio::sync::watch;

use etcd_client::{PutOptions, Txn, TxnOp};

use crate::rpc::{revoke, Etcd};

/// The etcd leases of one backend: its session lease, and the leases its
/// persistent keys share.
#[derive(Debug)]
pub(crate) struct EtcdLeases {
    session: Session,
    shared: SharedLeases,
}

impl EtcdLeases {
    /// Grants the session lease of a new backend (`session_ttl_secs`
    /// long); shared leases end `lease_slack` after the keys they carry.
    ///
    /// While the session lives, the key `<sessions><id in hex>` does (on
    /// the session lease), so any host can tell whether an ephemeral
    /// grant's session is alive (see `name.rs`).
    pub(crate) async fn open(
        etcd: &Etcd,
        session_ttl_secs: i64,
        lease_slack: Duration,
        sessions: Vec<u8>,
    ) -> Result<EtcdLeases, LockError> {
        Ok(EtcdLeases {
            session: Session::open(etcd, session_ttl_secs, sessions).await?,
            shared: SharedLeases::new(lease_slack),
        })
    }

    /// The current session lease id.
    pub(crate) fn session(&self) -> i64 {
        self.session.id()
    }

    /// The etcd lease for a key that must last `ttl_ms` from now: a shared
    /// one if `durability` is persistent; if ephemeral, the session lease
    /// of the host the key belongs to (`session`; `None`: this backend).
    pub(crate) async fn for_key(
        &self,
        etcd: &Etcd,
        durability: Durability,
        ttl_ms: u64,
        session: Option<i64>,
    ) -> Result<i64, LockError> {
        match durability {
            Durability::Persistent => self.shared.lease_for(etcd, ttl_ms).await,
            Durability::Ephemeral => Ok(session.unwrap_or_else(|| self.session())),
        }
    }

    /// Keeps the session lease alive for the backend's life (see
    /// [`Session::keep_alive`]).
    pub(crate) async fn keep_alive(&self, etcd: &Etcd) {
        self.session.keep_alive(etcd).await;
    }

    /// Revokes the session lease in the background (see [`Session::retire`]).
    pub(crate) fn retire(&self, etcd: &Etcd, handle: &Handle) {
        self.session.retire(etcd, handle);
    }
}

/// Grants a lease of `secs` seconds.
async fn grant_lease(etcd: &Etcd, secs: i64) -> Result<i64, LockError> {
    let granted = etcd
        .rpc("lease grant", || {
            let mut lc = etcd.client().lease_client();
            async move { lc.grant(secs, None).await }
        })
        .await?;
    Ok(granted.id())
}

/// The leases shared by this backend's persistent grants.
///
/// A grant's lease only removes what nobody cleans up (the record's expiry
/// decides whether a lock is held), so one lease can carry every grant
/// whose expiry plus slack falls before the lease ends, instead of a lease
/// granted (one more round trip) and revoked per grant.
#[derive(Debug)]
struct SharedLeases {
    /// `EtcdOptions::lease_slack`, in milliseconds.
    slack_ms: u64,
    leases: Mutex<Vec<SharedLease>>,
}

/// A lease that persistent grants share.
#[derive(Debug)]
struct SharedLease {
    id: i64,
    /// No later than etcd's end of the lease: counted from before the
    /// grant request left.
    ends: Instant,
}

impl SharedLeases {
    fn new(slack: Duration) -> SharedLeases {
        SharedLeases {
            slack_ms: slack.as_millis().min(u128::from(u64::MAX)) as u64,
            leases: Mutex::new(Vec::new()),
        }
    }

    /// Seconds of a grant's lease: the TTL rounded up, plus the slack, so
    /// the lease never ends before the lock's own expiry.
    fn lease_secs(&self, ttl_ms: u64) -> i64 {
        let secs = ttl_ms.saturating_add(self.slack_ms).div_ceil(1000).max(1);
        secs.min(i64::MAX as u64) as i64
    }

    /// A lease that ends no sooner than `ttl_ms` plus the slack from now,
    /// and not much later: reused if one is cached, granted otherwise. A
    /// lease is granted a quarter (at least 5 s) longer than needed, and
    /// serves every grant it fits for that long; so a dead host's key
    /// stays in etcd at most that much past its lease of old, and a busy
    /// host grants a lease every few seconds instead of one per lock.
    async fn lease_for(&self, etcd: &Etcd, ttl_ms: u64) -> Result<i64, LockError> {
        let need = self.lease_secs(ttl_ms);
        let spare = (need / 4).max(5);
        let fits = |ends: Instant, now: Instant| {
            let left = ends.saturating_duration_since(now);
            left >= Duration::from_secs(need as u64)
                && left <= Duration::from_secs((need + spare) as u64)
        };
        {
            let now = Instant::now();
            let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
            leases.retain(|l| l.ends > now);
            if let Some(l) = leases.iter().find(|l| fits(l.ends, now)) {
                return Ok(l.id);
            }
        }
        let sent = Instant::now();
        let secs = need.saturating_add(spare);
        let id = grant_lease(etcd, secs).await?;
        self.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(SharedLease {
                id,
                ends: sent + Duration::from_secs(secs as u64),
            });
        Ok(id)
    }
}

/// The session lease: the lease of this backend's waiter keys and
/// ephemeral locks. Replaced if it is ever lost.
#[derive(Debug)]
struct Session {
    id: AtomicI64,
    /// `EtcdOptions::session_ttl`, in whole seconds.
    ttl_secs: i64,
    /// The prefix of the keys that say which sessions are alive.
    sessions: Vec<u8>,
}

/// The key that lives as long as the session `id`, under `sessions`.
fn session_key(sessions: &[u8], id: i64) -> Vec<u8> {
    let mut key = sessions.to_vec();
    key.extend_from_slice(format!("{id:x}").as_bytes());
    key
}

/// Grants a session lease of `ttl_secs` and writes its key on it.
async fn begin_session(etcd: &Etcd, ttl_secs: i64, sessions: &[u8]) -> Result<i64, LockError> {
    let id = grant_lease(etcd, ttl_secs).await?;
    let put = TxnOp::put(
        session_key(sessions, id),
        "",
        Some(PutOptions::new().with_lease(id)),
    );
    etcd.txn("session key", Txn::new().and_then(vec![put]))
        .await?;
    Ok(id)
}

impl Session {
    /// Grants the session lease of a new backend, and writes its key.
    async fn open(etcd: &Etcd, ttl_secs: i64, sessions: Vec<u8>) -> Result<Session, LockError> {
        let id = begin_session(etcd, ttl_secs, &sessions)
            .await
            .map_err(|e| match e {
                LockError::Unavailable(m) => {
                    LockError::Unavailable(format!("cannot open a session on etcd: {m}"))
                }
                other => other,
            })?;
        Ok(Session {
            id: AtomicI64::new(id),
            ttl_secs,
            sessions,
        })
    }

    /// The current session lease id.
    fn id(&self) -> i64 {
        self.id.load(Ordering::Relaxed)
    }

    /// Keeps the session lease alive; if it was lost (etcd unreachable for
    /// longer than its TTL), starts a new one. Waiters and ephemeral locks
    /// of the lost session are gone with it. Runs for the backend's life
    /// (aborted when it is dropped).
    async fn keep_alive(&self, etcd: &Etcd) {
        let ttl = self.ttl_secs;
        let period = Duration::from_millis((ttl as u64 * 1000 / 3).max(500));
        loop {
            tokio::time::sleep(period).await;
            let mut lc = etcd.client().lease_client();
            let id = self.id();
            match tokio::time::timeout(etcd.request_timeout(), lc.keep_alive(id)).await {
                Ok(Ok(_)) => {}
                Ok(Err(etcd_client::Error::LeaseKeepAliveError(e))) => {
                    tracing::warn!(
                        lease = id,
                        error = %e,
                        "etcd session lease lost: its waiters and ephemeral locks are gone"
                    );
                    match begin_session(etcd, ttl, &self.sessions).await {
                        Ok(new) => {
                            self.id.store(new, Ordering::Relaxed);
                            tracing::warn!(lease = new, lost = id, "etcd session lease replaced");
                        }
                        Err(e) => tracing::warn!(
                            lost = id,
                            error = %e,
                            "cannot replace the lost etcd session lease; trying again next period"
                        ),
                    }
                }
                // Unreachable for now: try again next period.
                Ok(Err(e)) => tracing::warn!(
                    lease = id,
                    error = %e,
                    "etcd session keep-alive failed; trying again next period"
                ),
                Err(_) => tracing::warn!(
                    lease = id,
                    timeout = ?etcd.request_timeout(),
                    "etcd session keep-alive timed out; trying again next period"
                ),
            }
        }
    }

    /// Revokes the session lease in the background, so its ephemeral locks
    /// and waiter keys go now; a backend connected later in this process
    /// waits for that first ([`wait_for_retired`]).
    fn retire(&self, etcd: &Etcd, handle: &Handle) {
        let (done, rx) = watch::channel(false);
        RETIRING.lock().unwrap_or_else(|e| e.into_inner()).push(rx);
        let client = etcd.client().clone();
        let session = self.id();
        let limit = etcd.request_timeout();
        // If the runtime is gone, the task never runs, `done` is dropped,
        // and nobody waits for it; the lease then expires on its own.
        handle.spawn(async move {
            if let Err(e) = revoke(&client, session, limit).await {
                tracing::debug!(lease = session, error = %e, "etcd session lease not revoked; it will expire");
            }
            let _ = done.send(true);
        });
    }
}

/// Backends dropped in this process whose session is still being revoked.
/// A new backend waits for them, so a restart within one process sees the
/// ephemeral locks of its predecessor gone.
static RETIRING: Mutex<Vec<watch::Receiver<bool>>> = Mutex::new(Vec::new());

/// Waits (at most `limit`) until the sessions of backends dropped in this
/// process are revoked.
pub(crate) async fn wait_for_retired(limit: Duration) {
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

//! The lock operations, as etcd transactions. See the crate docs for the
//! design; every write here is a transaction guarded by a compare on the
//! revision it read, so a decision made on stale data is never applied.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, GetResponse, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, TxnResponse, WatchOptions,
};
use lockd_core::{
    BackendStats, Clock, Durability, Grant, Key, ListedLock, LockError, LockInfo, LockOptions,
};
use tokio::runtime::Handle;
use tokio::sync::{oneshot, Notify};

use crate::endpoints::Rotation;
use crate::keys::Layout;
use crate::local::{Pending, Ticket, Turns};
use crate::record::{to_json, Held, LockRecord, Queued, WaiterRecord};
use crate::EtcdOptions;

/// Pause after a watch fails (a leader change, a dropped connection) before
/// reading again: error backoff, not polling.
const WATCH_RETRY: Duration = Duration::from_millis(200);

/// Everything the operations share. Spawned tasks hold it through an `Arc`.
pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) layout: Layout,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) options: EtcdOptions,
    /// The session lease: the lease of this backend's waiter keys and
    /// ephemeral locks. Replaced if it is ever lost.
    pub(crate) session: AtomicI64,
    pub(crate) handle: Handle,
    pub(crate) turns: Turns,
    pub(crate) pending: Pending,
    pub(crate) next_waiter: AtomicU64,
    pub(crate) stats: StatsCache,
    /// Leases shared by this backend's persistent grants.
    pub(crate) leases: std::sync::Mutex<Vec<SharedLease>>,
    /// Grants this backend made and may release in one round trip.
    pub(crate) recent: std::sync::Mutex<HashMap<Vec<u8>, RecentGrant>>,
    /// The endpoints in the client's rotation (see `endpoints.rs`).
    pub(crate) rotation: Rotation,
    /// Woken when a request was refused by the endpoint it was sent to.
    pub(crate) refused: Notify,
    /// How many requests were refused so far (diagnostics).
    pub(crate) refused_total: AtomicU64,
}

/// A lease that persistent grants share. A grant's lease only removes what
/// nobody cleans up (the record's expiry decides whether a lock is held),
/// so one lease can carry every grant whose expiry plus slack falls before
/// the lease ends, instead of a lease granted (one more round trip) and
/// revoked per grant.
#[derive(Debug)]
pub(crate) struct SharedLease {
    id: i64,
    /// No later than etcd's end of the lease: counted from before the
    /// grant request left.
    ends: Instant,
}

/// A grant this backend wrote, as written: while the lock key's
/// `mod_revision` is still `mod_revision`, the key holds exactly this
/// holder, so its owner's unlock can be one conditional delete.
#[derive(Debug)]
pub(crate) struct RecentGrant {
    owner: String,
    token: u64,
    mod_revision: i64,
    expires_at_ms: u64,
}

/// At most this many remembered grants; past it, expired ones are dropped,
/// and if that is not enough, all (they are only a shortcut).
const MAX_RECENT: usize = 65_536;

/// Counts from the previous scrape (`stats` cannot wait for etcd).
#[derive(Default)]
pub(crate) struct StatsCache {
    locks: AtomicU64,
    waiters: AtomicU64,
    refreshing: AtomicBool,
}

/// This backend's place in a wait queue.
#[derive(Debug)]
struct Waiter {
    key: Vec<u8>,
    id: String,
    create_revision: i64,
}

/// One consistent read of a lock and its queue.
struct Snap {
    revision: i64,
    lock: Option<Held>,
    /// The first waiter (lowest create revision).
    head: Option<Queued>,
    /// For a waiter: whether its own key still exists.
    own_present: bool,
    /// For a waiter: the waiter just ahead of it.
    ahead: Option<Queued>,
}

/// How a [`Inner::refresh`] ended.
enum Refresh {
    Done(Grant),
    /// The lock changed since it was read: read again.
    Changed,
    /// The write may have landed after the old expiry, and was taken back.
    Lapsed,
}

enum Attempt {
    /// Granted; `true` for a fresh grant, `false` for a holder's refresh.
    Granted(Grant, bool),
    Busy(LockInfo),
}

enum WaitEnd {
    Granted(Grant),
    /// Our waiter key vanished without a grant (its session was lost).
    Lost,
    TimedOut,
    Cancelled,
}

fn unavailable(what: &str, endpoints: &[String], e: impl std::fmt::Display) -> LockError {
    LockError::Unavailable(format!(
        "etcd {what} failed (endpoints {}): {e}",
        endpoints.join(",")
    ))
}

/// The compare that holds while the lock key is as read: absent, or at the
/// revision read.
fn unchanged(lock_key: &[u8], current: Option<&Held>) -> Compare {
    match current {
        None => Compare::version(lock_key.to_vec(), CompareOp::Equal, 0),
        Some(h) => Compare::mod_revision(lock_key.to_vec(), CompareOp::Equal, h.mod_revision),
    }
}

fn gets(resp: &TxnResponse) -> Vec<GetResponse> {
    resp.op_responses()
        .into_iter()
        .filter_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g),
            _ => None,
        })
        .collect()
}

fn deadline(now_ms: u64, ttl_ms: u64) -> Result<u64, LockError> {
    now_ms.checked_add(ttl_ms).ok_or_else(|| {
        LockError::InvalidArgument(format!("ttl of {ttl_ms} ms overflows the deadline"))
    })
}

/// Whether `e` says the request never reached etcd (the connection to the
/// endpoint picked was refused), so sending it again cannot apply it twice.
/// etcd-client balances over all endpoints and may pick a dead one.
fn never_sent(e: &etcd_client::Error) -> bool {
    let etcd_client::Error::GRpcStatus(status) = e else {
        return false;
    };
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::ConnectionRefused;
        }
        source = err.source();
    }
    false
}

/// Whether `e` is a failure of the connection or of the cluster's
/// availability (a broken stream, no leader), as opposed to an answer.
fn transient(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) => true,
        etcd_client::Error::GRpcStatus(status) => {
            // Cancelled, Unknown (tonic's transport errors), Unavailable.
            matches!(i32::from(status.code()), 1 | 2 | 14)
        }
        _ => false,
    }
}

/// Which failed calls [`call_etcd`] sends again.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Resend {
    /// Only those that [`never_sent`]: a write that reached a member may
    /// have been applied, so sending it again could apply it twice.
    IfNeverSent,
    /// Also those that failed [`transient`]ly: a read has no effect, so a
    /// read cut off by a member's death is simply read elsewhere.
    Reads,
}

/// Runs `call` until it answers, sending it again (with a short backoff)
/// as `resend` allows, all within `limit`, and calling `on_refused` for
/// each call an endpoint refused. The error says what went wrong.
pub(crate) async fn call_etcd<T, F, Fut>(
    limit: Duration,
    resend: Resend,
    on_refused: impl Fn(),
    mut call: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let mut last = None;
    let attempts = async {
        let mut pause = Duration::from_millis(10);
        loop {
            match call().await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let refused = never_sent(&e);
                    let resent_read = resend == Resend::Reads && transient(&e);
                    if !refused && !resent_read {
                        return Err(e.to_string());
                    }
                    if refused {
                        on_refused();
                    }
                    last = Some(e.to_string());
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(250));
                }
            }
        }
    };
    let outcome = tokio::time::timeout(limit, attempts).await;
    match outcome {
        Ok(result) => result,
        Err(_) => Err(match last {
            Some(e) => format!("no answer within {limit:?} (last error: {e})"),
            None => format!("no answer within {limit:?}"),
        }),
    }
}

/// Revokes `lease`. Cleanup: a failure only leaves it to expire.
pub(crate) async fn revoke(client: &Client, lease: i64, limit: Duration) -> Result<(), String> {
    call_etcd(
        limit,
        Resend::IfNeverSent,
        || {},
        || {
            let mut lc = client.lease_client();
            async move { lc.revoke(lease).await }
        },
    )
    .await
    .map(drop)
}

impl Inner {
    pub(crate) fn session(&self) -> i64 {
        self.session.load(Ordering::Relaxed)
    }

    /// Runs an etcd call under the request timeout (see [`call_etcd`]),
    /// mapping every failure to `unavailable`.
    async fn rpc<T, F, Fut>(&self, what: &str, call: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.rpc_with(what, Resend::IfNeverSent, call).await
    }

    async fn rpc_with<T, F, Fut>(&self, what: &str, resend: Resend, call: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        call_etcd(
            self.options.request_timeout,
            resend,
            || {
                self.refused_total.fetch_add(1, Ordering::Relaxed);
                self.refused.notify_one();
            },
            call,
        )
        .await
        .map_err(|e| unavailable(what, &self.options.endpoints, e))
    }

    async fn txn(&self, what: &str, txn: Txn) -> Result<TxnResponse, LockError> {
        self.txn_with(what, Resend::IfNeverSent, txn).await
    }

    /// A transaction of reads only, sent again after any transient failure.
    async fn read_txn(&self, what: &str, txn: Txn) -> Result<TxnResponse, LockError> {
        self.txn_with(what, Resend::Reads, txn).await
    }

    async fn txn_with(
        &self,
        what: &str,
        resend: Resend,
        txn: Txn,
    ) -> Result<TxnResponse, LockError> {
        self.rpc_with(what, resend, || {
            let mut kv = self.client.kv_client();
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await
    }

    async fn range(
        &self,
        what: &str,
        key: Vec<u8>,
        options: Option<GetOptions>,
    ) -> Result<GetResponse, LockError> {
        self.rpc_with(what, Resend::Reads, || {
            let mut kv = self.client.kv_client();
            let (key, options) = (key.clone(), options.clone());
            async move { kv.get(key, options).await }
        })
        .await
    }

    /// Seconds of a grant's lease: the TTL rounded up, plus the slack, so
    /// the lease never ends before the lock's own expiry.
    fn lease_secs(&self, ttl_ms: u64) -> i64 {
        let slack_ms = self
            .options
            .lease_slack
            .as_millis()
            .min(u128::from(u64::MAX)) as u64;
        let secs = ttl_ms.saturating_add(slack_ms).div_ceil(1000).max(1);
        secs.min(i64::MAX as u64) as i64
    }

    pub(crate) async fn grant_lease(&self, secs: i64) -> Result<i64, LockError> {
        let granted = self
            .rpc("lease grant", || {
                let mut lc = self.client.lease_client();
                async move { lc.grant(secs, None).await }
            })
            .await?;
        Ok(granted.id())
    }

    /// The lease a grant of `durability` goes on: a shared one for a
    /// persistent lock, this backend's session for an ephemeral one.
    async fn lease_for(&self, durability: Durability, ttl_ms: u64) -> Result<i64, LockError> {
        match durability {
            Durability::Persistent => self.persistent_lease(ttl_ms).await,
            Durability::Ephemeral => Ok(self.session()),
        }
    }

    /// A lease that ends no sooner than `ttl_ms` plus the slack from now,
    /// and not much later: reused if one is cached, granted otherwise. A
    /// lease is granted a quarter (at least 5 s) longer than needed, and
    /// serves every grant it fits for that long; so a dead host's key
    /// stays in etcd at most that much past its lease of old, and a busy
    /// host grants a lease every few seconds instead of one per lock.
    async fn persistent_lease(&self, ttl_ms: u64) -> Result<i64, LockError> {
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
        let id = self.grant_lease(secs).await?;
        self.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(SharedLease {
                id,
                ends: sent + Duration::from_secs(secs as u64),
            });
        Ok(id)
    }

    /// Remembers a grant this backend just wrote (see [`RecentGrant`]).
    fn remember(&self, lock_key: &[u8], h: &Held) {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.len() >= MAX_RECENT {
            let now = self.clock.now_ms();
            recent.retain(|_, g| g.expires_at_ms > now);
            if recent.len() >= MAX_RECENT {
                recent.clear();
            }
        }
        recent.insert(
            lock_key.to_vec(),
            RecentGrant {
                owner: h.rec.owner.clone(),
                token: h.token,
                mod_revision: h.mod_revision,
                expires_at_ms: h.rec.expires_at_ms,
            },
        );
    }

    /// The unlock of a grant this backend wrote and nobody changed since,
    /// by its owner, with nobody queued: one transaction that deletes the
    /// key only if it is still at the revision written, so it cannot
    /// touch anything else. `false` means: take the general path.
    async fn unlock_recent(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        owner: &str,
        token: Option<u64>,
    ) -> Result<bool, LockError> {
        let now = self.clock.now_ms();
        let mod_revision = {
            let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
            match recent.get(lock_key) {
                Some(g)
                    if g.owner == owner
                        && token.is_none_or(|t| t == g.token)
                        && g.expires_at_ms > now =>
                {
                    let m = g.mod_revision;
                    recent.remove(lock_key);
                    m
                }
                _ => return Ok(false),
            }
        };
        let txn = Txn::new()
            .when(vec![
                Compare::mod_revision(lock_key.to_vec(), CompareOp::Equal, mod_revision),
                Compare::version(queue.to_vec(), CompareOp::Equal, 0).with_prefix(),
            ])
            .and_then(vec![TxnOp::delete(lock_key.to_vec(), None)]);
        Ok(self.txn("unlock", txn).await?.succeeded())
    }

    /// Reads the lock key, its queue head and, for a waiter, its own key and
    /// the waiter ahead of it, all at one revision.
    async fn snapshot(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        me: Option<&Waiter>,
    ) -> Result<Snap, LockError> {
        let first_waiter = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let mut ops = vec![
            TxnOp::get(lock_key.to_vec(), None),
            TxnOp::get(queue.to_vec(), Some(first_waiter)),
        ];
        if let Some(w) = me {
            ops.push(TxnOp::get(
                w.key.clone(),
                Some(GetOptions::new().with_keys_only()),
            ));
            let ahead = GetOptions::new()
                .with_prefix()
                .with_max_create_revision((w.create_revision - 1).max(1))
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(1);
            ops.push(TxnOp::get(queue.to_vec(), Some(ahead)));
        }
        let resp = self.read_txn("read", Txn::new().and_then(ops)).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let gets = gets(&resp);
        let first = |i: usize| gets.get(i).and_then(|g| g.kvs().first());
        let lock = first(0).map(Held::from_kv).transpose()?;
        let head = first(1).map(Queued::from_kv).transpose()?;
        let (own_present, ahead) = match me {
            Some(w) => {
                let ahead = first(3)
                    .filter(|kv| {
                        kv.key() != w.key.as_slice() && kv.create_revision() < w.create_revision
                    })
                    .map(Queued::from_kv)
                    .transpose()?;
                (first(2).is_some(), ahead)
            }
            None => (false, None),
        };
        Ok(Snap {
            revision,
            lock,
            head,
            own_present,
            ahead,
        })
    }

    /// A snapshot in which the lock is not free while someone waits: if it
    /// is, the lock is first handed to the head of the queue. Every path
    /// (a waiter, a `wait = 0` caller, an unlock) goes through here, so
    /// nobody can take a lock past the queue.
    async fn settled(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        me: Option<&Waiter>,
    ) -> Result<Snap, LockError> {
        loop {
            let snap = self.snapshot(lock_key, queue, me).await?;
            let now = self.clock.now_ms();
            let free = snap.lock.as_ref().is_none_or(|h| !h.live(now));
            match &snap.head {
                Some(head) if free => {
                    // Either way, read again: handed off, or raced.
                    self.hand_off(lock_key, snap.lock.as_ref(), head, now)
                        .await?;
                }
                _ => return Ok(snap),
            }
        }
    }

    /// Grants the lock to the waiter `head`, taking it out of the queue, in
    /// one transaction that holds only if neither changed since the read.
    /// Returns whether it held; `current` (expired, or being unlocked) is
    /// replaced then.
    async fn hand_off(
        &self,
        lock_key: &[u8],
        current: Option<&Held>,
        head: &Queued,
        now: u64,
    ) -> Result<bool, LockError> {
        let w = &head.rec;
        let durability: Durability = w.durability.into();
        let lease = match durability {
            Durability::Persistent => self.persistent_lease(w.ttl_ms).await?,
            // The waiter's own session: an ephemeral lock belongs to the
            // host whose caller holds it.
            Durability::Ephemeral => w.session,
        };
        let rec = LockRecord::fresh(
            &w.owner,
            now.saturating_add(w.ttl_ms),
            durability,
            Some(w.id.clone()),
        );
        let when = vec![
            unchanged(lock_key, current),
            Compare::mod_revision(head.key.clone(), CompareOp::Equal, head.mod_revision),
        ];
        let extra = vec![TxnOp::delete(head.key.clone(), None)];
        Ok(self
            .put_holder(lock_key, when, &rec, lease, extra)
            .await?
            .is_some())
    }

    /// Writes `rec` at the lock key if `when` holds, with `extra` ops in the
    /// same transaction, and returns the lock as written.
    async fn put_holder(
        &self,
        lock_key: &[u8],
        when: Vec<Compare>,
        rec: &LockRecord,
        lease: i64,
        extra: Vec<TxnOp>,
    ) -> Result<Option<Held>, LockError> {
        let mut ops = vec![TxnOp::put(
            lock_key.to_vec(),
            to_json(rec),
            Some(PutOptions::new().with_lease(lease)),
        )];
        ops.extend(extra);
        ops.push(TxnOp::get(lock_key.to_vec(), None));
        let resp = self
            .txn("grant", Txn::new().when(when).and_then(ops))
            .await?;
        if !resp.succeeded() {
            return Ok(None);
        }
        let gets = gets(&resp);
        let kv = gets
            .last()
            .and_then(|g| g.kvs().first())
            .ok_or_else(|| LockError::Unavailable("etcd lost a lock it just wrote".into()))?;
        Held::from_kv(kv).map(Some)
    }

    /// Moves a live holder's expiry to `expires_at_ms`, keeping its token,
    /// owner and durability.
    ///
    /// The holder was live when read, but etcd cannot compare times, so the
    /// write may land after the old expiry: the lock would have been free
    /// for a moment (a `get` may have said so) and then held again under the
    /// same token. Such a refresh is taken back (the lock is released, to
    /// the queue's head if any) and reported as [`Refresh::Lapsed`], exactly
    /// as if it had come after the expiry.
    async fn refresh(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        h: &Held,
        expires_at_ms: u64,
        ttl_ms: u64,
    ) -> Result<Refresh, LockError> {
        let mut rec = h.rec.clone();
        rec.expires_at_ms = expires_at_ms;
        rec.token = Some(h.token);
        let lease = self.lease_for(rec.durability.into(), ttl_ms).await?;
        let when = vec![unchanged(lock_key, Some(h))];
        let Some(new) = self
            .put_holder(lock_key, when, &rec, lease, Vec::new())
            .await?
        else {
            return Ok(Refresh::Changed);
        };
        if self.clock.now_ms() >= h.rec.expires_at_ms {
            self.release(lock_key, queue, &h.rec.owner, Some(h.token))
                .await
                .or_else(|e| match e {
                    // Changed again meanwhile: not ours to release.
                    LockError::NotHeld | LockError::NotOwner => Ok(()),
                    e => Err(e),
                })?;
            return Ok(Refresh::Lapsed);
        }
        self.remember(lock_key, &new);
        Ok(Refresh::Done(new.grant()))
    }

    async fn check_quota(&self, namespace: &str, quota: u64, now: u64) -> Result<(), LockError> {
        let resp = self
            .range(
                "quota count",
                self.layout.list_prefix(namespace, ""),
                Some(GetOptions::new().with_prefix()),
            )
            .await?;
        let held = resp
            .kvs()
            .iter()
            .filter_map(|kv| Held::from_kv(kv).ok())
            .filter(|h| h.live(now))
            .count() as u64;
        if held >= quota {
            return Err(LockError::Denied(format!(
                "namespace {namespace:?} already holds {quota} locks, its quota"
            )));
        }
        Ok(())
    }

    /// One attempt: grant, refresh, or report the holder.
    async fn try_acquire(
        &self,
        key: &Key,
        lock_key: &[u8],
        queue: &[u8],
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> Result<Attempt, LockError> {
        // The common case first: nobody holds the lock and nobody waits.
        // One transaction that writes the grant only if so; otherwise read
        // and decide below. (A quota needs a count first.)
        if options.quota.is_none() {
            let expires_at_ms = deadline(self.clock.now_ms(), ttl_ms)?;
            let absent = unchanged(lock_key, None);
            if let Some(g) = self
                .grant_fresh(
                    lock_key,
                    queue,
                    absent,
                    owner,
                    ttl_ms,
                    expires_at_ms,
                    options,
                )
                .await?
            {
                return Ok(Attempt::Granted(g, true));
            }
        }
        loop {
            let snap = self.settled(lock_key, queue, None).await?;
            let now = self.clock.now_ms();
            let expires_at_ms = deadline(now, ttl_ms)?;
            match snap.lock.as_ref().filter(|h| h.live(now)) {
                Some(h) if h.rec.owner == owner => {
                    // Lapsed: read again, and grant afresh (a new token) if
                    // nobody queued.
                    if let Refresh::Done(g) = self
                        .refresh(lock_key, queue, h, expires_at_ms, ttl_ms)
                        .await?
                    {
                        return Ok(Attempt::Granted(g, false));
                    }
                }
                Some(h) => return Ok(Attempt::Busy(h.info())),
                None => {
                    if let Some(quota) = options.quota {
                        self.check_quota(&key.namespace, quota, now).await?;
                    }
                    // Nobody queued: settled() served any head first.
                    let as_read = unchanged(lock_key, snap.lock.as_ref());
                    if let Some(g) = self
                        .grant_fresh(
                            lock_key,
                            queue,
                            as_read,
                            owner,
                            ttl_ms,
                            expires_at_ms,
                            options,
                        )
                        .await?
                    {
                        return Ok(Attempt::Granted(g, true));
                    }
                }
            }
        }
    }

    /// Writes a fresh grant to `owner` if the lock key passes `key_as_seen`
    /// and nobody is queued, and remembers it. `None` if either changed.
    #[allow(clippy::too_many_arguments)]
    async fn grant_fresh(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        key_as_seen: Compare,
        owner: &str,
        ttl_ms: u64,
        expires_at_ms: u64,
        options: LockOptions,
    ) -> Result<Option<Grant>, LockError> {
        let lease = self.lease_for(options.durability, ttl_ms).await?;
        let rec = LockRecord::fresh(owner, expires_at_ms, options.durability, None);
        let when = vec![
            key_as_seen,
            Compare::version(queue.to_vec(), CompareOp::Equal, 0).with_prefix(),
        ];
        let written = self
            .put_holder(lock_key, when, &rec, lease, Vec::new())
            .await?;
        Ok(written.map(|h| {
            self.remember(lock_key, &h);
            h.grant()
        }))
    }

    /// Puts a waiter key (on the session lease) at the back of the queue.
    async fn enqueue(
        &self,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
        durability: Durability,
    ) -> Result<Waiter, LockError> {
        let session = self.session();
        let id = format!(
            "{session:x}-{}",
            self.next_waiter.fetch_add(1, Ordering::Relaxed)
        );
        let wkey = self.layout.waiter_key(key, &id);
        let rec = WaiterRecord::new(id.clone(), owner, ttl_ms, durability, session);
        let txn = Txn::new()
            .when(vec![Compare::version(wkey.clone(), CompareOp::Equal, 0)])
            .and_then(vec![
                TxnOp::put(
                    wkey.clone(),
                    to_json(&rec),
                    Some(PutOptions::new().with_lease(session)),
                ),
                TxnOp::get(wkey.clone(), Some(GetOptions::new().with_keys_only())),
            ]);
        let resp = self.txn("enqueue", txn).await?;
        let create_revision = gets(&resp)
            .first()
            .and_then(|g| g.kvs().first())
            .map(|kv| kv.create_revision())
            .filter(|_| resp.succeeded())
            .ok_or_else(|| LockError::Unavailable(format!("waiter key {id} already existed")))?;
        Ok(Waiter {
            key: wkey,
            id,
            create_revision,
        })
    }

    /// Takes `w` out of the queue. If a grant was handed to it first,
    /// returns that grant's holder.
    async fn leave_queue(&self, lock_key: &[u8], w: &Waiter) -> Result<Option<Held>, LockError> {
        let txn = Txn::new()
            .when(vec![Compare::version(w.key.clone(), CompareOp::Greater, 0)])
            .and_then(vec![TxnOp::delete(w.key.clone(), None)])
            .or_else(vec![TxnOp::get(lock_key.to_vec(), None)]);
        let resp = self.txn("leave queue", txn).await?;
        if resp.succeeded() {
            return Ok(None);
        }
        let gets = gets(&resp);
        let Some(kv) = gets.first().and_then(|g| g.kvs().first()) else {
            return Ok(None);
        };
        let h = Held::from_kv(kv)?;
        Ok((h.rec.waiter.as_deref() == Some(w.id.as_str())).then_some(h))
    }

    /// Waits for any event on `keys` from `revision` on.
    async fn watch_any(&self, keys: &[Vec<u8>], revision: i64) -> Result<(), LockError> {
        let options = || Some(WatchOptions::new().with_start_revision(revision));
        let Some((first, rest)) = keys.split_first() else {
            return Ok(());
        };
        let mut stream = self
            .rpc("watch", || {
                let mut wc = self.client.watch_client();
                let (key, options) = (first.clone(), options());
                async move { wc.watch(key, options).await }
            })
            .await?;
        for k in rest {
            // A request on the stream just opened: a local send, no retry.
            let limit = self.options.request_timeout;
            match tokio::time::timeout(limit, stream.watch(k.clone(), options())).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(unavailable("watch", &self.options.endpoints, e)),
                Err(_) => return Err(unavailable("watch", &self.options.endpoints, "timed out")),
            }
        }
        loop {
            match stream.message().await {
                // Cancelled (say, compacted past `revision`): read again.
                Ok(Some(resp)) if resp.canceled() || !resp.events().is_empty() => return Ok(()),
                Ok(Some(_)) => {}
                Ok(None) => {
                    return Err(unavailable(
                        "watch",
                        &self.options.endpoints,
                        "the stream closed",
                    ))
                }
                Err(e) => return Err(unavailable("watch", &self.options.endpoints, e)),
            }
        }
    }

    /// Waits in the queue until the lock is handed to `w`, the deadline
    /// passes, or the caller goes away. Only the predecessor's deletion
    /// wakes a waiter (etcd's lock recipe), and the head also watches the
    /// lock key and sleeps until the holder's expiry.
    async fn wait_in_queue(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        w: &Waiter,
        wait_until: u64,
        caller: &mut oneshot::Sender<Result<Grant, LockError>>,
    ) -> Result<WaitEnd, LockError> {
        loop {
            let snap = self.settled(lock_key, queue, Some(w)).await?;
            if let Some(h) = &snap.lock {
                if h.rec.waiter.as_deref() == Some(w.id.as_str()) {
                    return Ok(WaitEnd::Granted(h.grant()));
                }
            }
            if !snap.own_present {
                return Ok(WaitEnd::Lost);
            }
            if self.clock.now_ms() >= wait_until {
                return Ok(match self.leave_queue(lock_key, w).await? {
                    Some(h) => WaitEnd::Granted(h.grant()),
                    None => WaitEnd::TimedOut,
                });
            }
            let mut keys = vec![w.key.clone()];
            let mut wake_at = wait_until;
            match &snap.ahead {
                Some(ahead) => keys.push(ahead.key.clone()),
                None => {
                    keys.push(lock_key.to_vec());
                    if let Some(h) = &snap.lock {
                        wake_at = wake_at.min(h.rec.expires_at_ms);
                    }
                }
            }
            let watch_failed = tokio::select! {
                watched = self.watch_any(&keys, snap.revision + 1) => watched.is_err(),
                () = self.clock.sleep_until(wake_at) => false,
                () = caller.closed() => return Ok(self.cancel_wait(lock_key, w).await),
            };
            if watch_failed {
                // Say, a watch sent to a member that just died. Try again
                // soon, but never past the holder's expiry or the deadline:
                // the head must take over an expired lock at once.
                tokio::select! {
                    () = tokio::time::sleep(WATCH_RETRY) => {}
                    () = self.clock.sleep_until(wake_at) => {}
                    () = caller.closed() => return Ok(self.cancel_wait(lock_key, w).await),
                }
            }
        }
    }

    /// The caller of a waiting `lock` went away: leaves the queue, keeping a
    /// grant that reached the waiter first (released by the caller's task).
    async fn cancel_wait(&self, lock_key: &[u8], w: &Waiter) -> WaitEnd {
        match self.leave_queue(lock_key, w).await {
            Ok(Some(h)) => WaitEnd::Granted(h.grant()),
            _ => WaitEnd::Cancelled,
        }
    }

    /// The whole `lock` call, run in its own task so that it finishes (and
    /// cleans up) even if the caller goes away. Returns the grant and
    /// whether it is fresh (a refresh is not undone when the caller left).
    async fn lock_flow(
        &self,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
        mut ticket: Ticket,
        caller: &mut oneshot::Sender<Result<Grant, LockError>>,
    ) -> Result<(Grant, bool), LockError> {
        let wait_until = self.clock.now_ms().saturating_add(options.wait_ms);
        let lock_key = self.layout.lock_key(key);
        let queue = self.layout.queue_prefix(key);
        self.pending
            .settle(|k| k == key, self.options.request_timeout)
            .await;
        ticket.wait().await;
        if caller.is_closed() {
            return Err(LockError::Unavailable("the caller went away".into()));
        }
        let mut ticket = Some(ticket);
        loop {
            let holder = match self
                .try_acquire(key, &lock_key, &queue, owner, ttl_ms, options)
                .await?
            {
                Attempt::Granted(g, fresh) => return Ok((g, fresh)),
                Attempt::Busy(info) => info,
            };
            if options.wait_ms == 0 || self.clock.now_ms() >= wait_until || caller.is_closed() {
                return Err(LockError::Busy(holder));
            }
            let w = self.enqueue(key, owner, ttl_ms, options.durability).await?;
            // In the queue: the next local caller may go.
            drop(ticket.take());
            match self
                .wait_in_queue(&lock_key, &queue, &w, wait_until, caller)
                .await
            {
                Ok(WaitEnd::Granted(g)) => return Ok((g, true)),
                Ok(WaitEnd::Lost) => continue,
                Ok(WaitEnd::TimedOut) => {
                    // Out of the queue; free with nobody ahead means ours.
                    return match self
                        .try_acquire(key, &lock_key, &queue, owner, ttl_ms, options)
                        .await?
                    {
                        Attempt::Granted(g, fresh) => Ok((g, fresh)),
                        Attempt::Busy(info) => Err(LockError::Busy(info)),
                    };
                }
                Ok(WaitEnd::Cancelled) => {
                    return Err(LockError::Unavailable("the caller went away".into()))
                }
                Err(e) => {
                    // Best effort: leave the queue, and release a grant
                    // handed over meanwhile. The session lease is the net.
                    if let Ok(Some(h)) = self.leave_queue(&lock_key, &w).await {
                        let _ = self.unlock_flow(key, owner, Some(h.token)).await;
                    }
                    return Err(e);
                }
            }
        }
    }

    /// The task behind `lock`: answers the caller, or undoes a fresh grant
    /// nobody is left to receive.
    pub(crate) async fn lock_task(
        self: Arc<Self>,
        key: Key,
        owner: String,
        ttl_ms: u64,
        options: LockOptions,
        ticket: Ticket,
        mut caller: oneshot::Sender<Result<Grant, LockError>>,
    ) {
        let result = self
            .lock_flow(&key, &owner, ttl_ms, options, ticket, &mut caller)
            .await;
        match result {
            Ok((grant, fresh)) => {
                if caller.send(Ok(grant)).is_err() && fresh {
                    let _ = self
                        .unlock_flow(&key, &owner, Some(grant.fencing_token))
                        .await;
                }
            }
            Err(e) => {
                let _ = caller.send(Err(e));
            }
        }
    }

    pub(crate) async fn unlock_flow(
        &self,
        key: &Key,
        owner: &str,
        token: Option<u64>,
    ) -> Result<(), LockError> {
        let lock_key = self.layout.lock_key(key);
        let queue = self.layout.queue_prefix(key);
        if self.unlock_recent(&lock_key, &queue, owner, token).await? {
            return Ok(());
        }
        self.release(&lock_key, &queue, owner, token).await
    }

    /// Releases `owner`'s live lock (with `token`, if given), handing it to
    /// the queue's head if anyone waits. A lock found expired with someone
    /// waiting is handed over first, so the answer is then `NotOwner`.
    async fn release(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        owner: &str,
        token: Option<u64>,
    ) -> Result<(), LockError> {
        loop {
            let snap = self.settled(lock_key, queue, None).await?;
            let now = self.clock.now_ms();
            let Some(h) = snap.lock.as_ref().filter(|h| h.live(now)) else {
                return Err(LockError::NotHeld);
            };
            if h.rec.owner != owner || token.is_some_and(|t| t != h.token) {
                return Err(LockError::NotOwner);
            }
            let released = match &snap.head {
                // Release and hand-off are one transaction, so no caller on
                // any host sees the lock free while someone waits (as in
                // the engine), and the next holder is in place when unlock
                // returns.
                Some(head) => self.hand_off(lock_key, Some(h), head, now).await?,
                None => {
                    // The queue must still be empty: a waiter that joined
                    // since the read makes this a hand-off instead.
                    let txn = Txn::new()
                        .when(vec![
                            unchanged(lock_key, Some(h)),
                            Compare::version(queue.to_vec(), CompareOp::Equal, 0).with_prefix(),
                        ])
                        .and_then(vec![TxnOp::delete(lock_key.to_vec(), None)]);
                    self.txn("unlock", txn).await?.succeeded()
                }
            };
            if released {
                return Ok(());
            }
        }
    }

    pub(crate) async fn extend_flow(
        &self,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
    ) -> Result<Grant, LockError> {
        let lock_key = self.layout.lock_key(key);
        let queue = self.layout.queue_prefix(key);
        loop {
            // Settled: a lock that expired while someone waits is that
            // waiter's (`NotOwner`), not free (`NotHeld`).
            let snap = self.settled(&lock_key, &queue, None).await?;
            let now = self.clock.now_ms();
            let expires_at_ms = deadline(now, ttl_ms)?;
            let Some(h) = snap.lock.filter(|h| h.live(now)) else {
                return Err(LockError::NotHeld);
            };
            if h.rec.owner != owner {
                return Err(LockError::NotOwner);
            }
            match self
                .refresh(&lock_key, &queue, &h, expires_at_ms, ttl_ms)
                .await?
            {
                Refresh::Done(g) => return Ok(g),
                Refresh::Changed => {}
                Refresh::Lapsed => return Err(LockError::NotHeld),
            }
        }
    }

    /// The live holder. A lock found expired while someone waits is first
    /// handed to the head of the queue (as every other path does), so `get`
    /// never reports a lock free that a waiter is about to take: between
    /// the expiry and the head's own hand-off, that would show a free
    /// moment no caller could use.
    pub(crate) async fn get_flow(&self, key: &Key) -> Result<Option<LockInfo>, LockError> {
        let lock_key = self.layout.lock_key(key);
        let queue = self.layout.queue_prefix(key);
        let snap = self.settled(&lock_key, &queue, None).await?;
        let now = self.clock.now_ms();
        Ok(snap.lock.filter(|h| h.live(now)).map(|h| h.info()))
    }

    /// Live locks under a name prefix, from one read. Unlike `get`, it does
    /// not hand over expired locks that have waiters: such a lock is left
    /// out until its head claims it, a round trip after the expiry.
    pub(crate) async fn list_flow(
        &self,
        namespace: &str,
        prefix: &str,
    ) -> Result<Vec<ListedLock>, LockError> {
        let resp = self
            .range(
                "list",
                self.layout.list_prefix(namespace, prefix),
                Some(GetOptions::new().with_prefix()),
            )
            .await?;
        let now = self.clock.now_ms();
        let mut out = Vec::new();
        for kv in resp.kvs() {
            let h = Held::from_kv(kv)?;
            if !h.live(now) {
                continue;
            }
            let Some(name) = self.layout.name_of(namespace, kv.key()) else {
                continue;
            };
            out.push(ListedLock {
                name,
                info: h.info(),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The counts of the previous refresh; starts another in the background.
    pub(crate) fn stats(self: &Arc<Self>) -> BackendStats {
        if !self.stats.refreshing.swap(true, Ordering::AcqRel) {
            let inner = self.clone();
            self.handle.spawn(async move {
                let count = |k: Vec<u8>| {
                    TxnOp::get(k, Some(GetOptions::new().with_prefix().with_count_only()))
                };
                let txn = Txn::new().and_then(vec![
                    count(inner.layout.all()),
                    count(inner.layout.all_waiters()),
                ]);
                if let Ok(resp) = inner.txn("stats", txn).await {
                    let counts: Vec<u64> = gets(&resp).iter().map(|g| g.count() as u64).collect();
                    if let [all, waiters] = counts[..] {
                        inner
                            .stats
                            .locks
                            .store(all.saturating_sub(waiters), Ordering::Relaxed);
                        inner.stats.waiters.store(waiters, Ordering::Relaxed);
                    }
                }
                inner.stats.refreshing.store(false, Ordering::Release);
            });
        }
        BackendStats {
            locks_held: self.stats.locks.load(Ordering::Relaxed),
            waiters: self.stats.waiters.load(Ordering::Relaxed),
            commits: 0,
            committed_ops: 0,
            failed_commits: 0,
        }
    }

    /// Keeps the session lease alive; if it was lost (etcd unreachable for
    /// longer than its TTL), starts a new one. Waiters and ephemeral locks
    /// of the lost session are gone with it.
    pub(crate) async fn keep_session(self: Arc<Self>) {
        let ttl = self.options.session_ttl_secs();
        let period = Duration::from_millis((ttl as u64 * 1000 / 3).max(500));
        loop {
            tokio::time::sleep(period).await;
            let mut lc = self.client.lease_client();
            let id = self.session();
            match tokio::time::timeout(self.options.request_timeout, lc.keep_alive(id)).await {
                Ok(Ok(_)) => {}
                Ok(Err(etcd_client::Error::LeaseKeepAliveError(_))) => {
                    if let Ok(id) = self.grant_lease(ttl).await {
                        self.session.store(id, Ordering::Relaxed);
                    }
                }
                // Unreachable for now: try again next period.
                _ => {}
            }
        }
    }
}

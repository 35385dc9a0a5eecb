//! A reference model of the lock contract (docs/contract.md), and random
//! operation sequences to check a real store against it.
//!
//! [`Model`] is a deliberately naive, sequential restatement of the
//! contract: a map from name to holder, a clock, and the highest fencing
//! token seen. [`run`] drives a store (through [`LockService`], so limits are
//! checked as every surface checks them) and the model side by side, and
//! fails at the first reply the model does not allow. [`ops`] generates the
//! sequences for proptest; the cargo-fuzz target in `fuzz/` builds the same
//! [`Op`]s from `Arbitrary` bytes.
//!
//! # The rules
//!
//! Each rule is marked `Rule N` where the code states it (mostly in the
//! private `Model::transition`, one arm per call). `now` is the model's
//! clock, moved exactly as the store's [`ManualClock`].
//!
//! 1. **Live.** A holder is live while `now < expires_at`; an expired holder
//!    is free whether or not the store has purged it.
//! 2. **Invalid input.** An empty or over-long name (> 512 bytes) or owner
//!    (> 256 bytes), or a ttl of 0 or above the maximum (24 h), answers
//!    `invalid_argument` with a message, and nothing changes.
//! 3. **Fresh grant.** `lock` on a free name grants it: expiry `now + ttl`,
//!    the durability asked for, and a token the model cannot predict, so it
//!    checks relations: the token is above every token seen for that name
//!    (the contract), and above every token seen at all, before or after any
//!    restart (lockd's one global counter, resumed above its reservation).
//! 4. **Idempotent re-lock.** `lock` by the live holder answers the *same*
//!    token with expiry `now + ttl`; the durability stays what it was.
//! 5. **Busy.** `lock` by another owner (wait 0) answers `busy` with the
//!    holder's owner, token, expiry and durability; nothing changes.
//! 6. **Unlock.** Free: `not_held`. Another owner, or a token that is given
//!    and is not the current one: `not_owner`. Otherwise the name is free.
//! 7. **Extend.** Free: `not_held`. Another owner: `not_owner` (extend takes
//!    no token). Otherwise expiry `now + ttl`, the token unchanged.
//! 8. **Get / list.** The live holder(s), exactly; expired ones are absent.
//! 9. **Guards.** `acquire` is a `lock` under a fresh owner never used
//!    before; `release` is an `unlock` with the guard's token; `drop` is a
//!    `release_detached` with it (frees the name only if the guard still
//!    holds it); `is_held` is true iff the live holder has the guard's owner
//!    *and* token.
//! 10. **Restart** (crash and reopen, persistent stores only). Persistent
//!     live holders survive with owner, token and expiry; ephemeral ones
//!     vanish. A store that keeps nothing loses every holder. Persistent
//!     live leases survive with their latest (refreshed) expiry, and their
//!     locks with them; ephemeral leases and their locks are gone.
//! 11. **Leases** (docs/contract.md#c16-leases). `grant_lease` answers an id
//!     the model cannot predict (`lease-` and 32 lowercase hex digits, never
//!     one seen before; the model maps its handle to it) and expiry
//!     `now + ttl`. A lease is live while not revoked and `now < expiry`.
//!     `lock_in_lease` under a lease that is not live answers `not_held`;
//!     otherwise it is a `lock` whose owner is the lease id, whose expiry and
//!     durability are the lease's (a fresh grant, rule 3), and a lock the
//!     lease already holds answers its grant unchanged. A plain `lock` whose
//!     owner is a live lease's id is the same call (its ttl and durability
//!     are ignored); by a dead lease's id it is an ordinary `lock`. Refresh
//!     of a live lease moves it and every lock under it to `now + ttl`;
//!     revoke frees all its locks and answers how many; both answer
//!     `not_held` otherwise. `get_lease` answers ttl, expiry, durability and
//!     the sorted names of its locks, or nothing. `unlock` by the lease id
//!     frees one lock (rule 6); `extend` of a lock held under a lease answers
//!     `invalid_argument` (after rule 7's `not_held` and `not_owner`).
//!     A lease's locks expire with it (rule 1, one shared expiry).
//!
//! Waiting (`wait > 0`) needs concurrency and is left to the conformance
//! suite's FIFO tests; every generated `lock` uses wait 0.

use std::collections::BTreeMap;
use std::fmt;

use proptest::prelude::*;

use lockd_core::{
    Durability, Grant, LeaseGrant, LeaseInfo, Limits, ListedLock, LockError, LockInfo, LockOptions,
    LockService, ManualClock,
};

use crate::conformance::{StoreFactory, START_MS};

/// The one namespace sequences use (isolation is the conformance suite's).
pub const NAMESPACE: &str = "model";

/// Longest generated sequence.
pub const MAX_OPS: usize = 40;

/// Longest ttl generated for valid calls, in milliseconds.
pub const MAX_GEN_TTL_MS: u64 = 2_000;

/// Longest single clock advance generated, in milliseconds; longer than
/// [`MAX_GEN_TTL_MS`], so one step can expire any lock.
pub const MAX_GEN_ADVANCE_MS: u64 = 3_000;

/// The lock names: a short one, one with a slash, and one of exactly the
/// 512-byte limit in two-byte characters.
pub fn names() -> [String; 3] {
    ["a".to_string(), "job/b".to_string(), "ä".repeat(256)]
}

/// The owners: two short ones and one of exactly the 256-byte limit.
pub fn owners() -> [String; 3] {
    ["o1".to_string(), "o2".to_string(), "ö".repeat(128)]
}

/// The owner index of [`Op::Lock`], [`Op::Unlock`] and [`Op::Extend`] that
/// picks the name's latest holder (live or expired; the first owner if the
/// name was never held).
pub const HOLDER: usize = 3;

/// The lease index of the lease ops that picks an id never granted (a
/// well-formed `lease-` id nobody holds). Any other index picks among the
/// leases granted so far, live or not, the latest first (modulo their
/// number); with none granted yet, the unknown id.
pub const UNKNOWN_LEASE: usize = 7;

/// The id [`UNKNOWN_LEASE`] picks: well formed, and (128 random bits aside)
/// never granted.
pub const UNKNOWN_LEASE_ID: &str = "lease-00000000000000000000000000000000";

/// Which token an [`Op::Unlock`] passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenArg {
    /// No token: any grant of the owner may be released.
    None,
    /// The current holder's token, or the name's latest token if it is free.
    Current,
    /// The token of the grant before the latest one (a stale client).
    Stale,
    /// One above the latest token (a token from the future).
    Future,
}

/// The argument an [`Op::Invalid`] breaks. A call without that argument
/// (`get` has no owner; `unlock` and `get` have no ttl) gets a bad name of
/// the same kind instead: empty for empty or zero, over-long otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadArg {
    /// `""` as the name.
    EmptyName,
    /// A name one byte over the limit.
    LongName,
    /// `""` as the owner.
    EmptyOwner,
    /// An owner one byte over the limit.
    LongOwner,
    /// A ttl of 0.
    ZeroTtl,
    /// A ttl one millisecond over the maximum.
    LongTtl,
    /// A ttl of `u64::MAX`.
    HugeTtl,
}

/// Which call an [`Op::Invalid`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidCall {
    /// `lock`
    Lock,
    /// `unlock`
    Unlock,
    /// `extend`
    Extend,
    /// `get`
    Get,
    /// `grant_lease`: every bad argument becomes a bad ttl (empty-kind ones
    /// 0, long-kind ones one over the maximum, `HugeTtl` `u64::MAX`).
    GrantLease,
    /// `lock_in_lease`: a bad owner is a bad lease id; a bad ttl a bad name.
    LockInLease,
    /// `refresh_lease`: every bad argument becomes a bad lease id (empty or
    /// over-long).
    RefreshLease,
}

/// One step of a sequence. Indices pick from [`names`] and [`owners`]
/// (modulo their length; for `lock`, `unlock` and `extend`, the owner index
/// one past the end, [`HOLDER`], picks the name's latest holder, so the
/// holder's own calls are common), and guards from the live ones (modulo
/// their number; nothing happens when there is none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `lock` with wait 0.
    Lock {
        /// Index into [`names`].
        name: usize,
        /// Index into [`owners`].
        owner: usize,
        /// Lease length.
        ttl_ms: u64,
        /// Durability asked for.
        durability: Durability,
    },
    /// `unlock`.
    Unlock {
        /// Index into [`names`].
        name: usize,
        /// Index into [`owners`].
        owner: usize,
        /// Which token to pass.
        token: TokenArg,
    },
    /// `extend`.
    Extend {
        /// Index into [`names`].
        name: usize,
        /// Index into [`owners`].
        owner: usize,
        /// New lease length from now.
        ttl_ms: u64,
    },
    /// `get`.
    Get {
        /// Index into [`names`].
        name: usize,
    },
    /// `list` of the whole namespace.
    List,
    /// A guard's `acquire`: `lock` under a fresh owner `guard-N`.
    GuardAcquire {
        /// Index into [`names`].
        name: usize,
        /// Lease length.
        ttl_ms: u64,
        /// Durability asked for.
        durability: Durability,
    },
    /// A guard's `release`: `unlock` with its owner and token.
    GuardRelease {
        /// Index into the live guards.
        guard: usize,
    },
    /// A guard's `is_held`: `get`, compared with its owner and token.
    GuardIsHeld {
        /// Index into the live guards.
        guard: usize,
    },
    /// A guard dropped: `release_detached` with its owner and token.
    GuardDrop {
        /// Index into the live guards.
        guard: usize,
    },
    /// Moves the clock forward.
    Advance {
        /// How far.
        ms: u64,
    },
    /// Drops every handle on the store and reopens it (same file, same clock).
    Restart,
    /// `grant_lease`; the model maps its next handle to the id granted.
    LeaseGrant {
        /// The lease's ttl.
        ttl_ms: u64,
        /// Its durability.
        durability: Durability,
    },
    /// `lock_in_lease` with wait 0.
    LeaseLock {
        /// Index into [`names`].
        name: usize,
        /// Which lease (see [`UNKNOWN_LEASE`]).
        lease: usize,
    },
    /// `refresh_lease`.
    LeaseRefresh {
        /// Which lease.
        lease: usize,
    },
    /// `revoke_lease`.
    LeaseRevoke {
        /// Which lease.
        lease: usize,
    },
    /// `get_lease`.
    LeaseGet {
        /// Which lease.
        lease: usize,
    },
    /// `unlock` of one lock by a lease's id.
    LeaseUnlock {
        /// Index into [`names`].
        name: usize,
        /// Which lease.
        lease: usize,
        /// Which token to pass.
        token: TokenArg,
    },
    /// A plain `extend` by a lease's id (of a lock held under the lease:
    /// `invalid_argument`).
    LeaseExtend {
        /// Index into [`names`].
        name: usize,
        /// Which lease.
        lease: usize,
        /// New lease length from now.
        ttl_ms: u64,
    },
    /// A call with one argument out of limits.
    Invalid {
        /// Which call.
        call: InvalidCall,
        /// Which argument is bad.
        bad: BadArg,
        /// Index into [`names`], for the arguments that are not bad.
        name: usize,
        /// Index into [`owners`], for the arguments that are not bad.
        owner: usize,
    },
}

/// A concrete call on a [`LockService`], as resolved from an [`Op`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// [`LockService::lock`] with wait 0.
    Lock {
        /// Name.
        name: String,
        /// Owner.
        owner: String,
        /// Lease length.
        ttl_ms: u64,
        /// Durability asked for.
        durability: Durability,
    },
    /// [`LockService::unlock`].
    Unlock {
        /// Name.
        name: String,
        /// Owner.
        owner: String,
        /// Token, if any.
        token: Option<u64>,
    },
    /// [`LockService::extend`].
    Extend {
        /// Name.
        name: String,
        /// Owner.
        owner: String,
        /// New lease length from now.
        ttl_ms: u64,
    },
    /// [`LockService::get`].
    Get {
        /// Name.
        name: String,
    },
    /// [`LockService::list`] of the whole namespace.
    List,
    /// [`LockService::release_detached`].
    ReleaseDetached {
        /// Name.
        name: String,
        /// Owner.
        owner: String,
        /// Token.
        token: u64,
    },
    /// [`LockService::grant_lease`].
    GrantLease {
        /// The lease's ttl.
        ttl_ms: u64,
        /// Its durability.
        durability: Durability,
    },
    /// [`LockService::lock_in_lease`] with wait 0.
    LockInLease {
        /// Name.
        name: String,
        /// The lease id.
        lease_id: String,
    },
    /// [`LockService::refresh_lease`].
    RefreshLease {
        /// The lease id.
        lease_id: String,
    },
    /// [`LockService::revoke_lease`].
    RevokeLease {
        /// The lease id.
        lease_id: String,
    },
    /// [`LockService::get_lease`].
    GetLease {
        /// The lease id.
        lease_id: String,
    },
}

/// A successful reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// From `lock` or `extend`.
    Granted(Grant),
    /// From `unlock`.
    Unlocked,
    /// From `get`.
    Found(Option<LockInfo>),
    /// From `list`.
    Listed(Vec<ListedLock>),
    /// From `release_detached`, which answers nothing.
    Sent,
    /// From `grant_lease`.
    LeaseGranted(LeaseGrant),
    /// From `refresh_lease`: the new expiry.
    LeaseRefreshed(u64),
    /// From `revoke_lease`: how many locks it released.
    LeaseRevoked(u64),
    /// From `get_lease`.
    LeaseFound(Option<LeaseInfo>),
}

/// What a store answered to a [`Call`].
pub type Outcome = Result<Reply, LockError>;

/// Makes `call` on `service`.
pub async fn execute(service: &LockService, call: &Call) -> Outcome {
    match call {
        Call::Lock {
            name,
            owner,
            ttl_ms,
            durability,
        } => {
            let options = LockOptions {
                wait_ms: 0,
                durability: *durability,
                quota: None,
            };
            service
                .lock(NAMESPACE, name, owner, *ttl_ms, options)
                .await
                .map(Reply::Granted)
        }
        Call::Unlock { name, owner, token } => service
            .unlock(NAMESPACE, name, owner, *token)
            .await
            .map(|()| Reply::Unlocked),
        Call::Extend {
            name,
            owner,
            ttl_ms,
        } => service
            .extend(NAMESPACE, name, owner, *ttl_ms)
            .await
            .map(Reply::Granted),
        Call::Get { name } => service.get(NAMESPACE, name).await.map(Reply::Found),
        Call::List => service.list(NAMESPACE, "").await.map(Reply::Listed),
        Call::ReleaseDetached { name, owner, token } => {
            service.release_detached(NAMESPACE, name, owner, *token);
            Ok(Reply::Sent)
        }
        Call::GrantLease { ttl_ms, durability } => service
            .grant_lease(NAMESPACE, *ttl_ms, *durability)
            .await
            .map(Reply::LeaseGranted),
        Call::LockInLease { name, lease_id } => service
            .lock_in_lease(NAMESPACE, name, lease_id, 0)
            .await
            .map(Reply::Granted),
        Call::RefreshLease { lease_id } => service
            .refresh_lease(NAMESPACE, lease_id)
            .await
            .map(Reply::LeaseRefreshed),
        Call::RevokeLease { lease_id } => service
            .revoke_lease(NAMESPACE, lease_id)
            .await
            .map(Reply::LeaseRevoked),
        Call::GetLease { lease_id } => service
            .get_lease(NAMESPACE, lease_id)
            .await
            .map(Reply::LeaseFound),
    }
}

/// A holder as the model knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Holder {
    owner: String,
    token: u64,
    /// Under a lease, always the lease's expiry (rule 11).
    expires_at_ms: u64,
    durability: Durability,
    /// The model's handle of the lease it is held under.
    lease: Option<usize>,
    /// When this grant was made; a restart's time for a recovered lock.
    acquired_at_ms: u64,
}

impl Holder {
    fn info(&self) -> LockInfo {
        LockInfo {
            owner: self.owner.clone(),
            fencing_token: self.token,
            expires_at_ms: self.expires_at_ms,
            durability: self.durability,
        }
    }
}

/// A lease as the model knows it: every lease ever granted, by handle.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Lease {
    /// The id the store generated.
    id: String,
    ttl_ms: u64,
    expires_at_ms: u64,
    durability: Durability,
    /// Revoked, or lost in a restart.
    ended: bool,
}

/// Whether `owner` has the form of a lease id (docs/contract.md#c16-leases).
fn is_lease_id(owner: &str) -> bool {
    owner.starts_with("lease-")
}

/// A guard acquired and not yet released or dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Guard {
    name: String,
    owner: String,
    token: u64,
}

/// What the model allows as the reply to one call.
#[derive(Clone, Debug)]
enum Expect {
    /// Exactly this.
    Exactly(Outcome),
    /// `invalid_argument` with a non-empty message.
    Invalid,
    /// A fresh grant (rule 3): this expiry, and a token checked by relation.
    Fresh {
        name: String,
        owner: String,
        expires_at_ms: u64,
        durability: Durability,
        lease: Option<usize>,
    },
    /// A new lease (rule 11): this expiry, and an id checked by form and
    /// novelty.
    FreshLease {
        ttl_ms: u64,
        expires_at_ms: u64,
        durability: Durability,
    },
}

/// Counts of what a run saw, to show the generator reaches every rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Operations executed (including clock moves and restarts).
    pub ops: u64,
    /// Fresh grants (rule 3).
    pub fresh: u64,
    /// Idempotent re-locks (rule 4).
    pub relocks: u64,
    /// `busy` answers.
    pub busy: u64,
    /// Successful unlocks and guard releases.
    pub unlocked: u64,
    /// Successful extends.
    pub extended: u64,
    /// `not_owner` answers.
    pub not_owner: u64,
    /// `not_held` answers.
    pub not_held: u64,
    /// `invalid_argument` answers.
    pub invalid: u64,
    /// Reads (`get`, `list`, `is_held`) that found a holder.
    pub reads_held: u64,
    /// Reads that found nothing.
    pub reads_free: u64,
    /// Restarts.
    pub restarts: u64,
    /// Locks that were live across a restart and checked after it.
    pub survived_restart: u64,
    /// Leases granted.
    pub leases_granted: u64,
    /// Fresh grants under a lease (`lock_in_lease`, or a plain `lock` by a
    /// live lease's id); also counted in `fresh`.
    pub lease_locks: u64,
    /// Successful lease refreshes, and how many locks they moved.
    pub lease_refreshes: u64,
    /// Locks moved by those refreshes.
    pub lease_refreshed_locks: u64,
    /// Successful revokes.
    pub lease_revokes: u64,
    /// Locks released by those revokes.
    pub lease_revoked_locks: u64,
    /// `get_lease` answers that found a live lease.
    pub lease_reads_live: u64,
    /// Unlocks by a lease id that freed one of its locks.
    pub lease_unlocks: u64,
    /// `extend` of a lock held under a lease, refused `invalid_argument`.
    pub lease_extend_refused: u64,
    /// Lease calls (lock, refresh, revoke) under a lease that was not live.
    pub lease_not_live: u64,
    /// Leases that expired with locks under them (a clock move).
    pub leases_expired_holding: u64,
    /// Leases that were live across a restart.
    pub leases_survived_restart: u64,
}

impl Tally {
    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &Tally) {
        self.ops += other.ops;
        self.fresh += other.fresh;
        self.relocks += other.relocks;
        self.busy += other.busy;
        self.unlocked += other.unlocked;
        self.extended += other.extended;
        self.not_owner += other.not_owner;
        self.not_held += other.not_held;
        self.invalid += other.invalid;
        self.reads_held += other.reads_held;
        self.reads_free += other.reads_free;
        self.restarts += other.restarts;
        self.survived_restart += other.survived_restart;
        self.leases_granted += other.leases_granted;
        self.lease_locks += other.lease_locks;
        self.lease_refreshes += other.lease_refreshes;
        self.lease_refreshed_locks += other.lease_refreshed_locks;
        self.lease_revokes += other.lease_revokes;
        self.lease_revoked_locks += other.lease_revoked_locks;
        self.lease_reads_live += other.lease_reads_live;
        self.lease_unlocks += other.lease_unlocks;
        self.lease_extend_refused += other.lease_extend_refused;
        self.lease_not_live += other.lease_not_live;
        self.leases_expired_holding += other.leases_expired_holding;
        self.leases_survived_restart += other.leases_survived_restart;
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ops: {} fresh grants, {} re-locks, {} busy, {} unlocked, {} extended, \
             {} not_owner, {} not_held, {} invalid, {} reads held / {} free, \
             {} restarts ({} locks carried across); leases: {} granted, {} locks taken under one, \
             {} refreshes ({} locks moved), {} revokes ({} locks released), {} live reads, \
             {} unlocks by lease id, {} extends refused, {} calls on a dead lease, \
             {} expired holding locks, {} carried across a restart",
            self.ops,
            self.fresh,
            self.relocks,
            self.busy,
            self.unlocked,
            self.extended,
            self.not_owner,
            self.not_held,
            self.invalid,
            self.reads_held,
            self.reads_free,
            self.restarts,
            self.survived_restart,
            self.leases_granted,
            self.lease_locks,
            self.lease_refreshes,
            self.lease_refreshed_locks,
            self.lease_revokes,
            self.lease_revoked_locks,
            self.lease_reads_live,
            self.lease_unlocks,
            self.lease_extend_refused,
            self.lease_not_live,
            self.leases_expired_holding,
            self.leases_survived_restart
        )
    }
}

/// The reference model. See the module docs for its rules.
#[derive(Clone, Debug)]
pub struct Model {
    now_ms: u64,
    /// Whether persistent holders survive [`Model::restart`].
    keeps_persistent: bool,
    limits: Limits,
    /// By name. May hold expired holders; [`Model::live`] filters them.
    holders: BTreeMap<String, Holder>,
    /// Every token granted per name, oldest first.
    tokens: BTreeMap<String, Vec<u64>>,
    /// The highest token seen, ever (restarts included).
    highest_token: u64,
    /// Live guards, oldest first.
    guards: Vec<Guard>,
    /// Guards ever acquired, to make fresh owners.
    guards_made: u64,
    /// Every lease granted, by handle (its index), live or not.
    leases: Vec<Lease>,
    tally: Tally,
}

impl Model {
    /// A model at `now_ms`, for a store that keeps persistent locks across
    /// restarts or not.
    pub fn new(now_ms: u64, keeps_persistent: bool) -> Self {
        Model {
            now_ms,
            keeps_persistent,
            limits: Limits::default(),
            holders: BTreeMap::new(),
            tokens: BTreeMap::new(),
            highest_token: 0,
            guards: Vec::new(),
            guards_made: 0,
            leases: Vec::new(),
            tally: Tally::default(),
        }
    }

    /// What the run has seen so far.
    pub fn tally(&self) -> Tally {
        self.tally
    }

    /// Rule 1: the holder of `name`, if live.
    fn live(&self, name: &str) -> Option<&Holder> {
        self.holders
            .get(name)
            .filter(|h| self.now_ms < h.expires_at_ms)
    }

    fn live_mut(&mut self, name: &str) -> Option<&mut Holder> {
        let now = self.now_ms;
        self.holders.get_mut(name).filter(|h| now < h.expires_at_ms)
    }

    /// Rule 11: whether lease `handle` is live.
    fn lease_live(&self, handle: usize) -> bool {
        let lease = &self.leases[handle];
        !lease.ended && self.now_ms < lease.expires_at_ms
    }

    /// The handle of the live lease whose id is `id`, if any.
    fn live_lease_by_id(&self, id: &str) -> Option<usize> {
        (0..self.leases.len()).find(|&i| self.leases[i].id == id && self.lease_live(i))
    }

    /// The names of the live locks held under lease `handle`, sorted.
    fn lease_locks(&self, handle: usize) -> Vec<String> {
        self.holders
            .iter()
            .filter(|(_, h)| h.lease == Some(handle) && self.now_ms < h.expires_at_ms)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The clock moved by `ms`.
    pub fn advance(&mut self, ms: u64) {
        let expiring = (0..self.leases.len())
            .filter(|&i| self.lease_live(i) && !self.lease_locks(i).is_empty())
            .collect::<Vec<_>>();
        self.now_ms = self.now_ms.saturating_add(ms);
        self.tally.leases_expired_holding +=
            expiring.iter().filter(|&&i| !self.lease_live(i)).count() as u64;
        self.tally.ops += 1;
    }

    /// Rule 10: the store was dropped and reopened.
    pub fn restart(&mut self) {
        let now = self.now_ms;
        let keeps = self.keeps_persistent;
        self.holders.retain(|_, h| {
            keeps && h.durability == Durability::Persistent && now < h.expires_at_ms
        });
        // A recovered lock's grant time is the restart's.
        for h in self.holders.values_mut() {
            h.acquired_at_ms = now;
        }
        for lease in &mut self.leases {
            if !(keeps && lease.durability == Durability::Persistent && now < lease.expires_at_ms) {
                lease.ended = true;
            }
        }
        self.tally.ops += 1;
        self.tally.restarts += 1;
        self.tally.survived_restart += self.holders.len() as u64;
        self.tally.leases_survived_restart += (0..self.leases.len())
            .filter(|&i| self.lease_live(i))
            .count() as u64;
    }

    fn guard_index(&self, guard: usize) -> Option<usize> {
        (!self.guards.is_empty()).then(|| guard % self.guards.len())
    }

    /// The id a lease index picks (see [`UNKNOWN_LEASE`]).
    fn lease_id(&self, lease: usize) -> String {
        let n = self.leases.len();
        if lease == UNKNOWN_LEASE || n == 0 {
            return UNKNOWN_LEASE_ID.to_string();
        }
        self.leases[n - 1 - lease % n].id.clone()
    }

    /// The concrete call `op` makes in the current state, or `None` for an
    /// op that makes no call (clock, restart, a guard op with no guard).
    pub fn resolve(&self, op: &Op) -> Option<Call> {
        let names = names();
        let owners = owners();
        let name = |i: usize| names[i % names.len()].clone();
        let owner = |i: usize| owners[i % owners.len()].clone();
        // For the calls a holder makes: HOLDER picks the latest holder.
        let caller = |n: usize, o: usize| match o % (owners.len() + 1) {
            HOLDER => self
                .holders
                .get(&name(n))
                .map_or_else(|| owner(0), |h| h.owner.clone()),
            o => owner(o),
        };
        Some(match *op {
            Op::Lock {
                name: n,
                owner: o,
                ttl_ms,
                durability,
            } => Call::Lock {
                name: name(n),
                owner: caller(n, o),
                ttl_ms,
                durability,
            },
            Op::Unlock {
                name: n,
                owner: o,
                token,
            } => {
                let token = self.token_arg(&name(n), token);
                Call::Unlock {
                    name: name(n),
                    owner: caller(n, o),
                    token,
                }
            }
            Op::Extend {
                name: n,
                owner: o,
                ttl_ms,
            } => Call::Extend {
                name: name(n),
                owner: caller(n, o),
                ttl_ms,
            },
            Op::Get { name: n } => Call::Get { name: name(n) },
            Op::List => Call::List,
            Op::GuardAcquire {
                name: n,
                ttl_ms,
                durability,
            } => Call::Lock {
                name: name(n),
                owner: format!("guard-{}", self.guards_made),
                ttl_ms,
                durability,
            },
            Op::GuardRelease { guard } => {
                let g = &self.guards[self.guard_index(guard)?];
                Call::Unlock {
                    name: g.name.clone(),
                    owner: g.owner.clone(),
                    token: Some(g.token),
                }
            }
            Op::GuardIsHeld { guard } => Call::Get {
                name: self.guards[self.guard_index(guard)?].name.clone(),
            },
            Op::GuardDrop { guard } => {
                let g = &self.guards[self.guard_index(guard)?];
                Call::ReleaseDetached {
                    name: g.name.clone(),
                    owner: g.owner.clone(),
                    token: g.token,
                }
            }
            Op::LeaseGrant { ttl_ms, durability } => Call::GrantLease { ttl_ms, durability },
            Op::LeaseLock { name: n, lease } => Call::LockInLease {
                name: name(n),
                lease_id: self.lease_id(lease),
            },
            Op::LeaseRefresh { lease } => Call::RefreshLease {
                lease_id: self.lease_id(lease),
            },
            Op::LeaseRevoke { lease } => Call::RevokeLease {
                lease_id: self.lease_id(lease),
            },
            Op::LeaseGet { lease } => Call::GetLease {
                lease_id: self.lease_id(lease),
            },
            Op::LeaseUnlock {
                name: n,
                lease,
                token,
            } => Call::Unlock {
                name: name(n),
                owner: self.lease_id(lease),
                token: self.token_arg(&name(n), token),
            },
            Op::LeaseExtend {
                name: n,
                lease,
                ttl_ms,
            } => Call::Extend {
                name: name(n),
                owner: self.lease_id(lease),
                ttl_ms,
            },
            Op::Advance { .. } | Op::Restart => return None,
            Op::Invalid {
                call,
                bad,
                name: n,
                owner: o,
            } => self.invalid_call(call, bad, name(n), owner(o)),
        })
    }

    fn token_arg(&self, name: &str, arg: TokenArg) -> Option<u64> {
        let history = self.tokens.get(name).map(Vec::as_slice).unwrap_or(&[]);
        let latest = history.last().copied().unwrap_or(1);
        match arg {
            TokenArg::None => None,
            TokenArg::Current => Some(self.live(name).map_or(latest, |h| h.token)),
            TokenArg::Stale => Some(match history {
                [.., before, _] => *before,
                _ => latest.saturating_sub(1),
            }),
            TokenArg::Future => Some(latest.saturating_add(1)),
        }
    }

    fn invalid_call(&self, call: InvalidCall, bad: BadArg, name: String, owner: String) -> Call {
        let long_name = "ä".repeat(256) + "x";
        let long_owner = "ö".repeat(128) + "x";
        match call {
            InvalidCall::GrantLease => {
                return Call::GrantLease {
                    ttl_ms: match bad {
                        BadArg::EmptyName | BadArg::EmptyOwner | BadArg::ZeroTtl => 0,
                        BadArg::LongName | BadArg::LongOwner | BadArg::LongTtl => {
                            self.limits.max_ttl_ms + 1
                        }
                        BadArg::HugeTtl => u64::MAX,
                    },
                    durability: Durability::Persistent,
                }
            }
            InvalidCall::LockInLease => {
                return match bad {
                    BadArg::EmptyOwner => Call::LockInLease {
                        name: name.clone(),
                        lease_id: String::new(),
                    },
                    BadArg::LongOwner => Call::LockInLease {
                        name: name.clone(),
                        lease_id: long_owner.clone(),
                    },
                    BadArg::EmptyName | BadArg::ZeroTtl => Call::LockInLease {
                        name: String::new(),
                        lease_id: self.lease_id(0),
                    },
                    BadArg::LongName | BadArg::LongTtl | BadArg::HugeTtl => Call::LockInLease {
                        name: long_name.clone(),
                        lease_id: self.lease_id(0),
                    },
                }
            }
            InvalidCall::RefreshLease => {
                return Call::RefreshLease {
                    lease_id: match bad {
                        BadArg::EmptyName | BadArg::EmptyOwner | BadArg::ZeroTtl => String::new(),
                        _ => long_owner.clone(),
                    },
                }
            }
            _ => {}
        }
        let ttl_ms = 1_000;
        // Arguments the call does not take become a bad name (see BadArg).
        let (name, owner, ttl_ms) = match (call, bad) {
            (_, BadArg::EmptyName) => (String::new(), owner, ttl_ms),
            (_, BadArg::LongName) => (long_name, owner, ttl_ms),
            (InvalidCall::Get, BadArg::EmptyOwner) => (String::new(), owner, ttl_ms),
            (_, BadArg::EmptyOwner) => (name, String::new(), ttl_ms),
            (InvalidCall::Get, BadArg::LongOwner) => (long_name, owner, ttl_ms),
            (_, BadArg::LongOwner) => (name, long_owner, ttl_ms),
            (InvalidCall::Get | InvalidCall::Unlock, BadArg::ZeroTtl) => {
                (String::new(), owner, ttl_ms)
            }
            (InvalidCall::Get | InvalidCall::Unlock, BadArg::LongTtl | BadArg::HugeTtl) => {
                (long_name, owner, ttl_ms)
            }
            (_, BadArg::ZeroTtl) => (name, owner, 0),
            (_, BadArg::LongTtl) => (name, owner, self.limits.max_ttl_ms + 1),
            (_, BadArg::HugeTtl) => (name, owner, u64::MAX),
        };
        match call {
            InvalidCall::Lock => Call::Lock {
                name,
                owner,
                ttl_ms,
                durability: Durability::Persistent,
            },
            InvalidCall::Unlock => Call::Unlock {
                name,
                owner,
                token: None,
            },
            InvalidCall::Extend => Call::Extend {
                name,
                owner,
                ttl_ms,
            },
            InvalidCall::Get => Call::Get { name },
            InvalidCall::GrantLease | InvalidCall::LockInLease | InvalidCall::RefreshLease => {
                unreachable!("lease calls are made above")
            }
        }
    }

    /// Rule 2, checked independently of [`Limits`]' own code.
    fn valid(&self, name: &str, owner: Option<&str>, ttl_ms: Option<u64>) -> bool {
        let name_ok = !name.is_empty() && name.len() <= self.limits.max_name_bytes;
        let owner_ok =
            owner.is_none_or(|o| !o.is_empty() && o.len() <= self.limits.max_owner_bytes);
        let ttl_ok = ttl_ms.is_none_or(|t| t >= 1 && t <= self.limits.max_ttl_ms);
        name_ok && owner_ok && ttl_ok
    }

    /// Rules 2–9: what the store must answer to `call`, with the model's
    /// state changed accordingly — except a fresh grant, whose token only
    /// the reply can tell; [`Model::check`] installs it.
    fn transition(&mut self, call: &Call) -> Expect {
        let now = self.now_ms;
        match call {
            Call::Lock {
                name,
                owner,
                ttl_ms,
                durability,
            } => {
                if !self.valid(name, Some(owner), Some(*ttl_ms)) {
                    return Expect::Invalid;
                }
                // Rule 11: by a live lease's id, a lock under that lease.
                if let Some(lease) = self.live_lease_by_id(owner) {
                    return self.lock_in_lease(name, lease);
                }
                let expires_at_ms = now + ttl_ms;
                match self.live_mut(name) {
                    // Rule 4: same token, new expiry, durability unchanged.
                    Some(h) if h.owner == *owner => {
                        h.expires_at_ms = expires_at_ms;
                        Expect::Exactly(Ok(Reply::Granted(Grant {
                            fencing_token: h.token,
                            expires_at_ms,
                        })))
                    }
                    // Rule 5.
                    Some(h) => Expect::Exactly(Err(LockError::Busy(h.info()))),
                    // Rule 3.
                    None => Expect::Fresh {
                        name: name.clone(),
                        owner: owner.clone(),
                        expires_at_ms,
                        durability: *durability,
                        lease: None,
                    },
                }
            }
            Call::Unlock { name, owner, token } => {
                if !self.valid(name, Some(owner), None) {
                    return Expect::Invalid;
                }
                // Rule 6.
                match self.live(name) {
                    None => Expect::Exactly(Err(LockError::NotHeld)),
                    Some(h) if h.owner != *owner || token.is_some_and(|t| t != h.token) => {
                        Expect::Exactly(Err(LockError::NotOwner))
                    }
                    Some(_) => {
                        self.holders.remove(name);
                        Expect::Exactly(Ok(Reply::Unlocked))
                    }
                }
            }
            Call::Extend {
                name,
                owner,
                ttl_ms,
            } => {
                if !self.valid(name, Some(owner), Some(*ttl_ms)) {
                    return Expect::Invalid;
                }
                // Rule 7.
                match self.live_mut(name) {
                    None => Expect::Exactly(Err(LockError::NotHeld)),
                    Some(h) if h.owner != *owner => Expect::Exactly(Err(LockError::NotOwner)),
                    // Rule 11: its expiry is the lease's.
                    Some(h) if h.lease.is_some() => Expect::Invalid,
                    Some(h) => {
                        h.expires_at_ms = now + ttl_ms;
                        Expect::Exactly(Ok(Reply::Granted(Grant {
                            fencing_token: h.token,
                            expires_at_ms: h.expires_at_ms,
                        })))
                    }
                }
            }
            // Rule 8.
            Call::Get { name } => {
                if !self.valid(name, None, None) {
                    return Expect::Invalid;
                }
                Expect::Exactly(Ok(Reply::Found(self.live(name).map(Holder::info))))
            }
            Call::List => {
                let live = self
                    .holders
                    .iter()
                    .filter(|(_, h)| now < h.expires_at_ms)
                    .map(|(name, h)| ListedLock {
                        name: name.clone(),
                        info: h.info(),
                        acquired_at_ms: Some(h.acquired_at_ms),
                        // The model never queues (waits are the conformance
                        // suite's).
                        waiters: 0,
                    })
                    .collect();
                Expect::Exactly(Ok(Reply::Listed(live)))
            }
            // Rule 9 (drop).
            Call::ReleaseDetached { name, owner, token } => {
                if self
                    .live(name)
                    .is_some_and(|h| h.owner == *owner && h.token == *token)
                {
                    self.holders.remove(name);
                }
                Expect::Exactly(Ok(Reply::Sent))
            }
            // Rule 11.
            Call::GrantLease { ttl_ms, durability } => {
                if !self.valid("n", None, Some(*ttl_ms)) {
                    return Expect::Invalid;
                }
                Expect::FreshLease {
                    ttl_ms: *ttl_ms,
                    expires_at_ms: now + ttl_ms,
                    durability: *durability,
                }
            }
            Call::LockInLease { name, lease_id } => {
                if !self.valid(name, Some(lease_id), None) {
                    return Expect::Invalid;
                }
                match self.live_lease_by_id(lease_id) {
                    Some(lease) => self.lock_in_lease(name, lease),
                    None => Expect::Exactly(Err(LockError::NotHeld)),
                }
            }
            Call::RefreshLease { lease_id } => {
                if !self.valid("n", Some(lease_id), None) {
                    return Expect::Invalid;
                }
                let Some(lease) = self.live_lease_by_id(lease_id) else {
                    return Expect::Exactly(Err(LockError::NotHeld));
                };
                let expires_at_ms = now + self.leases[lease].ttl_ms;
                self.leases[lease].expires_at_ms = expires_at_ms;
                for h in self.holders.values_mut() {
                    if h.lease == Some(lease) && now < h.expires_at_ms {
                        h.expires_at_ms = expires_at_ms;
                    }
                }
                Expect::Exactly(Ok(Reply::LeaseRefreshed(expires_at_ms)))
            }
            Call::RevokeLease { lease_id } => {
                if !self.valid("n", Some(lease_id), None) {
                    return Expect::Invalid;
                }
                let Some(lease) = self.live_lease_by_id(lease_id) else {
                    return Expect::Exactly(Err(LockError::NotHeld));
                };
                let locks = self.lease_locks(lease);
                for name in &locks {
                    self.holders.remove(name);
                }
                self.leases[lease].ended = true;
                Expect::Exactly(Ok(Reply::LeaseRevoked(locks.len() as u64)))
            }
            Call::GetLease { lease_id } => {
                if !self.valid("n", Some(lease_id), None) {
                    return Expect::Invalid;
                }
                let info = self.live_lease_by_id(lease_id).map(|lease| {
                    let l = &self.leases[lease];
                    LeaseInfo {
                        ttl_ms: l.ttl_ms,
                        expires_at_ms: l.expires_at_ms,
                        durability: l.durability,
                        locks: self.lease_locks(lease),
                    }
                });
                Expect::Exactly(Ok(Reply::LeaseFound(info)))
            }
        }
    }

    /// Rule 11: `lock` of `name` under the live lease `lease`, wait 0.
    fn lock_in_lease(&mut self, name: &str, lease: usize) -> Expect {
        let l = &self.leases[lease];
        match self.live(name) {
            // Held under it already: its grant, unchanged.
            Some(h) if h.owner == l.id => Expect::Exactly(Ok(Reply::Granted(Grant {
                fencing_token: h.token,
                expires_at_ms: h.expires_at_ms,
            }))),
            Some(h) => Expect::Exactly(Err(LockError::Busy(h.info()))),
            None => Expect::Fresh {
                name: name.to_string(),
                owner: l.id.clone(),
                expires_at_ms: l.expires_at_ms,
                durability: l.durability,
                lease: Some(lease),
            },
        }
    }

    /// Checks that `outcome` is what the model allows for `call`, made for
    /// `op`, and moves the model on. The error says what differed.
    pub fn check(&mut self, op: &Op, call: &Call, outcome: &Outcome) -> Result<(), String> {
        // Kept to explain a mismatch; formatted only then.
        let before = (self.holders.clone(), self.leases.clone());
        let expect = self.transition(call);
        let mismatch = |why: &str, expect: &dyn fmt::Debug| {
            Err(format!(
                "{why}\n  expected: {expect:?}\n  actual:   {outcome:?}\n  model at t={} before the call: {before:?}",
                self.now_ms
            ))
        };
        match &expect {
            Expect::Invalid => match outcome {
                Err(LockError::InvalidArgument(message)) if !message.is_empty() => {}
                _ => return mismatch("invalid input was not refused (rule 2)", &expect),
            },
            Expect::Exactly(expected) => {
                if outcome != expected {
                    return mismatch("reply differs from the model", &expect);
                }
            }
            Expect::Fresh {
                name,
                owner,
                expires_at_ms,
                durability,
                lease,
            } => {
                let Ok(Reply::Granted(grant)) = outcome else {
                    return mismatch("a free lock was not granted (rule 3)", &expect);
                };
                if grant.expires_at_ms != *expires_at_ms {
                    return mismatch("fresh grant with the wrong expiry (rule 3)", &expect);
                }
                let per_name = self.tokens.get(name).and_then(|t| t.last()).copied();
                if per_name.is_some_and(|t| grant.fencing_token <= t) {
                    return mismatch(
                        &format!(
                            "token did not rise for this name: {} after {per_name:?} (rule 3)",
                            grant.fencing_token
                        ),
                        &expect,
                    );
                }
                if grant.fencing_token <= self.highest_token {
                    return mismatch(
                        &format!(
                            "token {} is not above every token seen ({}) (rule 3)",
                            grant.fencing_token, self.highest_token
                        ),
                        &expect,
                    );
                }
                self.highest_token = grant.fencing_token;
                self.tokens
                    .entry(name.clone())
                    .or_default()
                    .push(grant.fencing_token);
                self.holders.insert(
                    name.clone(),
                    Holder {
                        owner: owner.clone(),
                        token: grant.fencing_token,
                        expires_at_ms: *expires_at_ms,
                        durability: *durability,
                        lease: *lease,
                        acquired_at_ms: self.now_ms,
                    },
                );
            }
            Expect::FreshLease {
                ttl_ms,
                expires_at_ms,
                durability,
            } => {
                let Ok(Reply::LeaseGranted(grant)) = outcome else {
                    return mismatch("a lease was not granted (rule 11)", &expect);
                };
                if grant.expires_at_ms != *expires_at_ms {
                    return mismatch("lease granted with the wrong expiry (rule 11)", &expect);
                }
                let hex = grant.id.strip_prefix("lease-").unwrap_or("");
                let well_formed = hex.len() == 32
                    && hex
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                if !well_formed {
                    return mismatch(
                        "a lease id not of the form lease-<32 hex> (rule 11)",
                        &expect,
                    );
                }
                if grant.id == UNKNOWN_LEASE_ID || self.leases.iter().any(|l| l.id == grant.id) {
                    return mismatch("a lease id granted twice (rule 11)", &expect);
                }
                self.leases.push(Lease {
                    id: grant.id.clone(),
                    ttl_ms: *ttl_ms,
                    expires_at_ms: *expires_at_ms,
                    durability: *durability,
                    ended: false,
                });
            }
        }
        let fresh = matches!(expect, Expect::Fresh { .. });
        let fresh_in_lease = matches!(expect, Expect::Fresh { lease: Some(_), .. });
        let extend_of_leased = matches!(
            (&expect, call),
            (Expect::Invalid, Call::Extend { owner, .. }) if self.live_lease_by_id(owner).is_some()
        );
        let t = &mut self.tally;
        t.lease_locks += u64::from(fresh_in_lease);
        t.lease_extend_refused += u64::from(extend_of_leased);
        self.after(op, call, outcome, fresh)
    }

    /// Guard bookkeeping and the tally, once a reply has been accepted.
    fn after(
        &mut self,
        op: &Op,
        call: &Call,
        outcome: &Outcome,
        fresh: bool,
    ) -> Result<(), String> {
        let t = &mut self.tally;
        t.ops += 1;
        match outcome {
            Ok(Reply::Granted(_)) if matches!(call, Call::Extend { .. }) => t.extended += 1,
            Ok(Reply::Granted(_)) if fresh => t.fresh += 1,
            Ok(Reply::Granted(_)) => t.relocks += 1,
            Ok(Reply::Unlocked) => t.unlocked += 1,
            Ok(Reply::Found(Some(_))) => t.reads_held += 1,
            Ok(Reply::Found(None)) => t.reads_free += 1,
            Ok(Reply::Listed(l)) if l.is_empty() => t.reads_free += 1,
            Ok(Reply::Listed(_)) => t.reads_held += 1,
            Ok(Reply::Sent) => {}
            Ok(Reply::LeaseGranted(_)) => t.leases_granted += 1,
            Ok(Reply::LeaseRefreshed(_)) => t.lease_refreshes += 1,
            Ok(Reply::LeaseRevoked(n)) => {
                t.lease_revokes += 1;
                t.lease_revoked_locks += n;
            }
            Ok(Reply::LeaseFound(Some(_))) => t.lease_reads_live += 1,
            Ok(Reply::LeaseFound(None)) => t.reads_free += 1,
            Err(LockError::Busy(_)) => t.busy += 1,
            Err(LockError::NotOwner) => t.not_owner += 1,
            Err(LockError::NotHeld) => t.not_held += 1,
            Err(LockError::InvalidArgument(_)) => t.invalid += 1,
            Err(_) => {}
        }
        match (call, outcome) {
            (
                Call::LockInLease { .. } | Call::RefreshLease { .. } | Call::RevokeLease { .. },
                Err(LockError::NotHeld),
            ) => t.lease_not_live += 1,
            (Call::Unlock { owner, .. }, Ok(Reply::Unlocked)) if is_lease_id(owner) => {
                t.lease_unlocks += 1
            }
            _ => {}
        }
        if let (Call::RefreshLease { lease_id }, Ok(Reply::LeaseRefreshed(_))) = (call, outcome) {
            let moved = self
                .live_lease_by_id(lease_id)
                .map_or(0, |lease| self.lease_locks(lease).len());
            self.tally.lease_refreshed_locks += moved as u64;
        }
        match *op {
            Op::GuardAcquire { .. } => {
                self.guards_made += 1;
                if let (Ok(Reply::Granted(grant)), Call::Lock { name, owner, .. }) = (outcome, call)
                {
                    self.guards.push(Guard {
                        name: name.clone(),
                        owner: owner.clone(),
                        token: grant.fencing_token,
                    });
                }
            }
            Op::GuardRelease { guard } | Op::GuardDrop { guard } => {
                if let Some(i) = self.guard_index(guard) {
                    self.guards.remove(i);
                }
            }
            Op::GuardIsHeld { guard } => {
                // Rule 9 (is_held): the reply above was checked exactly; the
                // guard's view of it must agree with the model's.
                if let (Some(i), Ok(Reply::Found(info))) = (self.guard_index(guard), outcome) {
                    let g = &self.guards[i];
                    let store_says = info
                        .as_ref()
                        .is_some_and(|h| h.owner == g.owner && h.fencing_token == g.token);
                    let model_says = self
                        .live(&g.name)
                        .is_some_and(|h| h.owner == g.owner && h.token == g.token);
                    if store_says != model_says {
                        return Err(format!(
                            "is_held of {g:?}: store says {store_says}, model {model_says}"
                        ));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Runs `ops` against a store from `factory` and the model side by side,
/// from a [`ManualClock`] at [`START_MS`]. Fails at the first disagreement,
/// naming the step and listing the whole sequence.
///
/// A restart drops the only handle on the store; `factory` must reopen the
/// same data. Run it on a current-thread runtime, so no task of the store
/// can hold a handle across the drop.
pub async fn run(factory: &dyn StoreFactory, ops: &[Op]) -> Result<Tally, String> {
    let clock = ManualClock::new(START_MS);
    let mut model = Model::new(START_MS, factory.keeps_persistent_locks());
    let open = || async { LockService::new(factory.open(clock.clone()).await, Limits::default()) };
    let mut service = open().await;
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Advance { ms } => {
                clock.advance(*ms);
                model.advance(*ms);
            }
            Op::Restart => {
                drop(service);
                service = open().await;
                model.restart();
            }
            _ => {
                let Some(call) = model.resolve(op) else {
                    continue;
                };
                let outcome = execute(&service, &call).await;
                model.check(op, &call, &outcome).map_err(|e| {
                    format!("step {step}: {op:?}\n  call: {call:?}\n  {e}\n  sequence: {ops:?}")
                })?;
            }
        }
    }
    Ok(model.tally())
}

fn durability() -> impl Strategy<Value = Durability> {
    prop_oneof![Just(Durability::Persistent), Just(Durability::Ephemeral)]
}

/// Ttls and clock moves lean towards a few milliseconds now and then, so
/// that a move lands exactly on an expiry (the `<=` boundary of rule 1)
/// often, not once in thousands of steps.
fn ttl() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 1..=MAX_GEN_TTL_MS, 1 => 1..=5u64]
}

/// Leases lean longer than plain locks, so that several locks gather under
/// one before it expires; a few milliseconds now and then for the boundary.
fn lease_ttl() -> impl Strategy<Value = u64> {
    prop_oneof![3 => MAX_GEN_TTL_MS / 4..=MAX_GEN_TTL_MS, 1 => 1..=5u64]
}

fn advance() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 0..=MAX_GEN_ADVANCE_MS, 1 => 0..=5u64]
}

/// One generated op; with `restarts`, crash-and-reopen too.
pub fn op(restarts: bool) -> BoxedStrategy<Op> {
    let name = 0..names().len();
    let owner = 0..owners().len();
    let caller = 0..=HOLDER;
    let guard = 0..8usize;
    let token = prop_oneof![
        Just(TokenArg::None),
        Just(TokenArg::Current),
        Just(TokenArg::Stale),
        Just(TokenArg::Future),
    ];
    let call = prop_oneof![
        Just(InvalidCall::Lock),
        Just(InvalidCall::Unlock),
        Just(InvalidCall::Extend),
        Just(InvalidCall::Get),
        Just(InvalidCall::GrantLease),
        Just(InvalidCall::LockInLease),
        Just(InvalidCall::RefreshLease),
    ];
    // Mostly the latest leases; one in eight the unknown id.
    let lease = 0..=UNKNOWN_LEASE;
    let bad = prop_oneof![
        Just(BadArg::EmptyName),
        Just(BadArg::LongName),
        Just(BadArg::EmptyOwner),
        Just(BadArg::LongOwner),
        Just(BadArg::ZeroTtl),
        Just(BadArg::LongTtl),
        Just(BadArg::HugeTtl),
    ];
    let base = prop_oneof![
        8 => (name.clone(), caller.clone(), ttl(), durability()).prop_map(
            |(name, owner, ttl_ms, durability)| Op::Lock { name, owner, ttl_ms, durability }
        ),
        4 => (name.clone(), caller.clone(), token.clone())
            .prop_map(|(name, owner, token)| Op::Unlock { name, owner, token }),
        3 => (name.clone(), caller, ttl())
            .prop_map(|(name, owner, ttl_ms)| Op::Extend { name, owner, ttl_ms }),
        3 => name.clone().prop_map(|name| Op::Get { name }),
        1 => Just(Op::List),
        3 => (name.clone(), ttl(), durability()).prop_map(|(name, ttl_ms, durability)| {
            Op::GuardAcquire { name, ttl_ms, durability }
        }),
        2 => guard.clone().prop_map(|guard| Op::GuardRelease { guard }),
        2 => guard.clone().prop_map(|guard| Op::GuardIsHeld { guard }),
        1 => guard.prop_map(|guard| Op::GuardDrop { guard }),
        5 => advance().prop_map(|ms| Op::Advance { ms }),
        1 => (call, bad, name.clone(), owner)
            .prop_map(|(call, bad, name, owner)| Op::Invalid { call, bad, name, owner }),
        2 => (lease_ttl(), durability())
            .prop_map(|(ttl_ms, durability)| Op::LeaseGrant { ttl_ms, durability }),
        6 => (name.clone(), lease.clone()).prop_map(|(name, lease)| Op::LeaseLock { name, lease }),
        2 => lease.clone().prop_map(|lease| Op::LeaseRefresh { lease }),
        1 => lease.clone().prop_map(|lease| Op::LeaseRevoke { lease }),
        2 => lease.clone().prop_map(|lease| Op::LeaseGet { lease }),
        1 => (name.clone(), lease.clone(), token.clone())
            .prop_map(|(name, lease, token)| Op::LeaseUnlock { name, lease, token }),
        1 => (name, lease, ttl())
            .prop_map(|(name, lease, ttl_ms)| Op::LeaseExtend { name, lease, ttl_ms }),
    ];
    if restarts {
        prop_oneof![16 => base, 1 => Just(Op::Restart)].boxed()
    } else {
        base.boxed()
    }
}

/// Sequences of up to [`MAX_OPS`] ops; with `restarts`, crash-and-reopen too.
pub fn ops(restarts: bool) -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(restarts), 0..=MAX_OPS)
}

/// How many sequences a property test runs: `PROPTEST_CASES` if set,
/// otherwise `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs [`cases`]`(default_cases)` generated sequences ([`ops`]`(restarts)`)
/// against a fresh store from `factory` each, reports the tally under
/// `label` (stderr and [`report`](crate::report)), and asserts
/// the generator reached every rule, since a run that never exercised a rule
/// proves little. Returns the tally for store-specific checks.
///
/// # Panics
/// At the first sequence where the store and the model disagree, with the
/// shrunk sequence.
pub fn check_against_model<F: StoreFactory>(
    label: &str,
    default_cases: u32,
    restarts: bool,
    factory: impl Fn() -> F,
) -> Tally {
    use proptest::test_runner::{Config, TestCaseError, TestRunner};

    // Current-thread: no store task can hold a handle across a restart.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    let cases = cases(default_cases);
    let mut runner = TestRunner::new(Config::with_cases(cases));
    let tally = std::sync::Mutex::new(Tally::default());
    let started = std::time::Instant::now();
    let result = runner.run(&ops(restarts), |ops: Vec<Op>| {
        let seen = runtime
            .block_on(run(&factory(), &ops))
            .map_err(TestCaseError::fail)?;
        tally.lock().unwrap_or_else(|e| e.into_inner()).add(&seen);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let tally = tally.into_inner().unwrap_or_else(|e| e.into_inner());
    let line = format!(
        "model ({label}): {cases} sequences in {:.1?}: {tally}",
        started.elapsed()
    );
    eprintln!("{line}");
    crate::report(&line);
    assert!(
        tally.fresh > 0 && tally.relocks > 0 && tally.busy > 0,
        "{tally}"
    );
    assert!(tally.unlocked > 0 && tally.extended > 0, "{tally}");
    assert!(
        tally.not_owner > 0 && tally.not_held > 0 && tally.invalid > 0,
        "{tally}"
    );
    assert!(
        tally.leases_granted > 0 && tally.lease_locks > 0 && tally.lease_reads_live > 0,
        "{tally}"
    );
    assert!(
        tally.lease_refreshed_locks > 0 && tally.lease_revoked_locks > 0,
        "{tally}"
    );
    assert!(
        tally.lease_unlocks > 0 && tally.lease_extend_refused > 0 && tally.lease_not_live > 0,
        "{tally}"
    );
    assert!(tally.leases_expired_holding > 0, "{tally}");
    tally
}

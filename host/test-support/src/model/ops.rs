//! The operations of a sequence ([`Op`]), the calls they resolve to
//! ([`Call`]), and making a call on a [`LockService`] ([`execute`]).

use lockd_core::{
    Claim, Durability, Grant, Leader, LeaseGrant, LeaseInfo, ListedLock, LockError, LockInfo,
    LockOptions, LockService, NameState, MAX_VALUE_BYTES,
};

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

/// The values a candidate proclaims: an empty one, an address, and one of
/// exactly the 4 096-byte limit.
pub fn values() -> [String; 3] {
    [
        String::new(),
        "10.0.0.1:80".to_string(),
        "v".repeat(MAX_VALUE_BYTES),
    ]
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
    /// `lock` of a permit: every bad argument becomes a permit count out of
    /// 1 to 65 536 (empty-kind ones 0, long-kind ones 65 537, `HugeTtl`
    /// `u32::MAX`).
    Permits,
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
        /// TTL.
        ttl_ms: u64,
        /// Durability asked for.
        durability: Durability,
    },
    /// `lock` with wait 0 taking the name shared, or a permit of it
    /// (docs/contract.md C21, C22); [`Op::Lock`] takes it exclusive.
    LockAs {
        /// Index into [`names`].
        name: usize,
        /// Index into [`owners`].
        owner: usize,
        /// Shared, or a permit of a semaphore of this many.
        claim: Claim,
        /// TTL.
        ttl_ms: u64,
        /// Durability asked for.
        durability: Durability,
    },
    /// `campaign` with wait 0 (docs/contract.md C24): leads the election
    /// `name` with a value.
    Campaign {
        /// Index into [`names`].
        name: usize,
        /// Index into [`owners`]: the candidate.
        owner: usize,
        /// Index into [`values`]; one past the end is a value one byte over
        /// the limit.
        value: usize,
        /// Term length.
        ttl_ms: u64,
        /// Durability asked for.
        durability: Durability,
    },
    /// `proclaim`: the leader's new value.
    Proclaim {
        /// Index into [`names`].
        name: usize,
        /// Index into [`owners`]; [`HOLDER`] picks the latest holder.
        owner: usize,
        /// Which token to pass ([`TokenArg::None`] passes 0).
        token: TokenArg,
        /// Index into [`values`].
        value: usize,
    },
    /// `leader`: who leads, without campaigning.
    Leader {
        /// Index into [`names`].
        name: usize,
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
        /// New TTL from now.
        ttl_ms: u64,
    },
    /// `get`.
    Get {
        /// Index into [`names`].
        name: usize,
    },
    /// `describe`: every holder, the queue, a lock-delay.
    Describe {
        /// Index into [`names`].
        name: usize,
    },
    /// An operator's `force_unlock`.
    ForceUnlock {
        /// Index into [`names`].
        name: usize,
    },
    /// `list` of the whole namespace.
    List,
    /// A guard's `acquire`: `lock` under a fresh owner `guard-N`.
    GuardAcquire {
        /// Index into [`names`].
        name: usize,
        /// TTL.
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
        /// New TTL from now.
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
        /// TTL.
        ttl_ms: u64,
        /// Durability asked for.
        durability: Durability,
        /// What it takes of the name.
        claim: Claim,
    },
    /// [`LockService::campaign`] with wait 0.
    Campaign {
        /// Name.
        name: String,
        /// The candidate.
        candidate: String,
        /// Its value.
        value: String,
        /// Term length.
        ttl_ms: u64,
        /// Durability asked for.
        durability: Durability,
    },
    /// [`LockService::proclaim`].
    Proclaim {
        /// Name.
        name: String,
        /// The candidate.
        candidate: String,
        /// The token it leads under.
        token: u64,
        /// The new value.
        value: String,
    },
    /// [`LockService::leader`].
    Leader {
        /// Name.
        name: String,
    },
    /// [`LockService::describe`].
    Describe {
        /// Name.
        name: String,
    },
    /// [`LockService::force_unlock`].
    ForceUnlock {
        /// Name.
        name: String,
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
        /// New TTL from now.
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
    /// From `describe`.
    Described(NameState),
    /// From `force_unlock`: the most recent holder it released.
    Forced(LockInfo),
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
    /// From `proclaim`.
    Proclaimed,
    /// From `leader`.
    Leader(Option<Leader>),
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
            claim,
        } => {
            let options = LockOptions {
                claim: *claim,
                lock_delay_ms: 0,
                wait_ms: 0,
                durability: *durability,
                quota: None,
                refuse_relock: false,
            };
            service
                .lock(NAMESPACE, name, owner, *ttl_ms, options)
                .await
                .map(Reply::Granted)
        }
        Call::Campaign {
            name,
            candidate,
            value,
            ttl_ms,
            durability,
        } => {
            let options = LockOptions {
                durability: *durability,
                ..LockOptions::default()
            };
            service
                .campaign(NAMESPACE, name, candidate, value, *ttl_ms, options)
                .await
                .map(Reply::Granted)
        }
        Call::Proclaim {
            name,
            candidate,
            token,
            value,
        } => service
            .proclaim(NAMESPACE, name, candidate, *token, value)
            .await
            .map(|()| Reply::Proclaimed),
        Call::Leader { name } => service.leader(NAMESPACE, name).await.map(Reply::Leader),
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
        Call::Describe { name } => service
            .describe(NAMESPACE, name)
            .await
            .map(Reply::Described),
        Call::ForceUnlock { name } => service
            .force_unlock(NAMESPACE, name)
            .await
            .map(Reply::Forced),
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

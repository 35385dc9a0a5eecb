//! The reference model ([`Model`]): its state, how a call resolves, and
//! what each call may answer (module docs, "The rules").

use std::collections::BTreeMap;

use lockd_core::{Claim, Durability, Limits, LockInfo};

use super::ops::*;
use super::tally::Tally;

/// A holder as the model knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Holder {
    pub(super) owner: String,
    pub(super) token: u64,
    /// Under a lease, always the lease's expiry (rule 11).
    pub(super) expires_at_ms: u64,
    pub(super) durability: Durability,
    /// The model's handle of the lease it is held under.
    pub(super) lease: Option<usize>,
    /// When this grant was made; a restart's time for a recovered lock.
    pub(super) acquired_at_ms: u64,
    /// Exclusive, shared or a permit (rule 12).
    pub(super) claim: Claim,
    /// When an operator force-released it (rule 14): no longer held, its
    /// place held back from then under a lock-delay.
    pub(super) forced_at_ms: Option<u64>,
    /// A leader's value (rule 16); `None` for every other claim.
    pub(super) value: Option<String>,
}

impl Holder {
    pub(super) fn info(&self) -> LockInfo {
        LockInfo {
            owner: self.owner.clone(),
            fencing_token: self.token,
            expires_at_ms: self.expires_at_ms,
            durability: self.durability,
        }
    }

    /// Rule 1: held at `now` (not expired, not force-released).
    pub(super) fn is_live(&self, now: u64) -> bool {
        self.forced_at_ms.is_none() && now < self.expires_at_ms
    }

    /// Rule 15: the end of the place an ended grant holds back under a
    /// lock-delay of `delay_ms`, if it holds one at `now`. A release by the
    /// holder removes the holder at once, so only an expiry or a
    /// force-release reach here.
    pub(super) fn delayed_until(&self, now: u64, delay_ms: u64) -> Option<u64> {
        if self.is_live(now) || delay_ms == 0 {
            return None;
        }
        let ended = self.forced_at_ms.unwrap_or(self.expires_at_ms);
        let until = ended.saturating_add(delay_ms);
        (now < until).then_some(until)
    }
}

/// What a name is while it has members (rule 13).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Lock,
    Semaphore(u32),
    Election,
}

impl Kind {
    pub(super) fn of(claim: Claim) -> Kind {
        match claim {
            Claim::Permit { permits } => Kind::Semaphore(permits),
            Claim::Leader => Kind::Election,
            Claim::Exclusive | Claim::Shared => Kind::Lock,
        }
    }
}

/// A lease as the model knows it: every lease ever granted, by handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Lease {
    /// The id the store generated.
    pub(super) id: String,
    pub(super) ttl_ms: u64,
    pub(super) expires_at_ms: u64,
    pub(super) durability: Durability,
    /// Revoked, or lost in a restart.
    pub(super) ended: bool,
}

/// The value a [`values`] index picks; one past the end is one byte over
/// the limit.
fn campaign_value(index: usize) -> String {
    values()
        .get(index)
        .cloned()
        .unwrap_or_else(|| "v".repeat(lockd_core::MAX_VALUE_BYTES + 1))
}

/// Whether `owner` has the form of a lease id (docs/contract.md#c16-leases).
pub(super) fn is_lease_id(owner: &str) -> bool {
    owner.starts_with("lease-")
}

/// A guard acquired and not yet released or dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Guard {
    pub(super) name: String,
    pub(super) owner: String,
    pub(super) token: u64,
}

/// What the model allows as the reply to one call.
#[derive(Clone, Debug)]
pub(super) enum Expect {
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
        claim: Claim,
        /// A leader's value (rule 16).
        value: Option<String>,
    },
    /// A new lease (rule 11): this expiry, and an id checked by form and
    /// novelty.
    FreshLease {
        ttl_ms: u64,
        expires_at_ms: u64,
        durability: Durability,
    },
}

/// The reference model. See the module docs for its rules.
#[derive(Clone, Debug)]
pub struct Model {
    pub(super) now_ms: u64,
    /// Whether persistent holders survive [`Model::restart`].
    pub(super) keeps_persistent: bool,
    pub(super) limits: Limits,
    /// By name, in token order. May hold ended grants (expired, or
    /// force-released); [`Model::live`] filters them.
    pub(super) holders: BTreeMap<String, Vec<Holder>>,
    /// The namespace's lock-delay (rule 15); 0 for none.
    pub(super) lock_delay_ms: u64,
    /// Every token granted per name, oldest first.
    pub(super) tokens: BTreeMap<String, Vec<u64>>,
    /// The highest token seen, ever (restarts included).
    pub(super) highest_token: u64,
    /// Live guards, oldest first.
    pub(super) guards: Vec<Guard>,
    /// Guards ever acquired, to make fresh owners.
    pub(super) guards_made: u64,
    /// Every lease granted, by handle (its index), live or not.
    pub(super) leases: Vec<Lease>,
    pub(super) tally: Tally,
}

impl Model {
    /// A model at `now_ms`, for a store that keeps persistent locks across
    /// restarts or not, with no lock-delay.
    pub fn new(now_ms: u64, keeps_persistent: bool) -> Self {
        Model::with_lock_delay(now_ms, keeps_persistent, 0)
    }

    /// [`Model::new`] for a service whose namespace has a lock-delay of
    /// `lock_delay_ms` (docs/contract.md#c23-lock-delay).
    pub fn with_lock_delay(now_ms: u64, keeps_persistent: bool, lock_delay_ms: u64) -> Self {
        Model {
            now_ms,
            keeps_persistent,
            limits: Limits::default(),
            holders: BTreeMap::new(),
            lock_delay_ms,
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

    /// Rule 1: the live holders of `name`, in token order.
    pub(super) fn live_holders(&self, name: &str) -> Vec<&Holder> {
        let now = self.now_ms;
        self.holders
            .get(name)
            .into_iter()
            .flatten()
            .filter(|h| h.is_live(now))
            .collect()
    }

    /// The most recent live holder of `name` (what `get` answers).
    pub(super) fn live(&self, name: &str) -> Option<&Holder> {
        self.live_holders(name).last().copied()
    }

    /// The live holder of `name` whose owner is `owner`.
    pub(super) fn live_of_mut(&mut self, name: &str, owner: &str) -> Option<&mut Holder> {
        let now = self.now_ms;
        self.holders
            .get_mut(name)?
            .iter_mut()
            .find(|h| h.is_live(now) && h.owner == owner)
    }

    /// Rules 13 and 15: what takes a place of `name`: its live holders and
    /// the places held back by a lock-delay, in token order, each with the
    /// info a `busy` shows of it (a held-back place's expiry is the end of
    /// its delay).
    pub(super) fn members(&self, name: &str) -> Vec<(&Holder, LockInfo)> {
        let (now, delay) = (self.now_ms, self.lock_delay_ms);
        self.holders
            .get(name)
            .into_iter()
            .flatten()
            .filter_map(|h| {
                if h.is_live(now) {
                    return Some((h, h.info()));
                }
                let until = h.delayed_until(now, delay)?;
                Some((
                    h,
                    LockInfo {
                        expires_at_ms: until,
                        ..h.info()
                    },
                ))
            })
            .collect()
    }

    /// Rule 13: what `name` is while it has members.
    pub(super) fn kind(&self, name: &str) -> Option<Kind> {
        let members = self.members(name);
        let (first, _) = members.first()?;
        Some(Kind::of(first.claim))
    }

    /// Removes the holder of `name` with this owner and token.
    pub(super) fn remove_holder(&mut self, name: &str, owner: &str, token: u64) {
        if let Some(holders) = self.holders.get_mut(name) {
            holders.retain(|h| !(h.owner == owner && h.token == token));
            if holders.is_empty() {
                self.holders.remove(name);
            }
        }
    }

    /// Rule 11: whether lease `handle` is live.
    pub(super) fn lease_live(&self, handle: usize) -> bool {
        let lease = &self.leases[handle];
        !lease.ended && self.now_ms < lease.expires_at_ms
    }

    /// The handle of the live lease whose id is `id`, if any.
    pub(super) fn live_lease_by_id(&self, id: &str) -> Option<usize> {
        (0..self.leases.len()).find(|&i| self.leases[i].id == id && self.lease_live(i))
    }

    /// The names of the live locks held under lease `handle`, sorted.
    pub(super) fn lease_locks(&self, handle: usize) -> Vec<String> {
        let now = self.now_ms;
        self.holders
            .iter()
            .filter(|(_, hs)| hs.iter().any(|h| h.lease == Some(handle) && h.is_live(now)))
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
        // Places held back by a lock-delay end too (rule 15).
        for holders in self.holders.values_mut() {
            holders.retain(|h| keeps && h.durability == Durability::Persistent && h.is_live(now));
            // A recovered lock's grant time is the restart's.
            for h in holders.iter_mut() {
                h.acquired_at_ms = now;
            }
        }
        self.holders.retain(|_, hs| !hs.is_empty());
        for lease in &mut self.leases {
            if !(keeps && lease.durability == Durability::Persistent && now < lease.expires_at_ms) {
                lease.ended = true;
            }
        }
        self.tally.ops += 1;
        self.tally.restarts += 1;
        self.tally.survived_restart += self.holders.values().map(|hs| hs.len() as u64).sum::<u64>();
        self.tally.leases_survived_restart += (0..self.leases.len())
            .filter(|&i| self.lease_live(i))
            .count() as u64;
    }

    pub(super) fn guard_index(&self, guard: usize) -> Option<usize> {
        (!self.guards.is_empty()).then(|| guard % self.guards.len())
    }

    /// The id a lease index picks (see [`UNKNOWN_LEASE`]).
    pub(super) fn lease_id(&self, lease: usize) -> String {
        let n = self.leases.len();
        if lease == UNKNOWN_LEASE || n == 0 {
            return UNKNOWN_LEASE_ID.to_string();
        }
        self.leases[n - 1 - lease % n].id.clone()
    }

    /// The concrete call `op` makes in the current state, or `None` for an
    /// op that makes no call (clock, restart, a guard op with no guard).
    pub fn resolve(&self, op: &Op) -> Option<Call> {
        match op {
            Op::Lock { .. } | Op::LockAs { .. } | Op::Unlock { .. } | Op::Extend { .. } => {
                Some(self.resolve_holder_call(op))
            }
            Op::Campaign { .. } | Op::Proclaim { .. } | Op::Leader { .. } => {
                Some(self.resolve_election_call(op))
            }
            Op::Get { .. } | Op::Describe { .. } | Op::ForceUnlock { .. } | Op::List => {
                Some(resolve_ownerless_call(op))
            }
            Op::GuardAcquire { .. }
            | Op::GuardRelease { .. }
            | Op::GuardIsHeld { .. }
            | Op::GuardDrop { .. } => self.resolve_guard_call(op),
            Op::LeaseGrant { .. }
            | Op::LeaseLock { .. }
            | Op::LeaseRefresh { .. }
            | Op::LeaseRevoke { .. }
            | Op::LeaseGet { .. }
            | Op::LeaseUnlock { .. }
            | Op::LeaseExtend { .. } => Some(self.resolve_lease_call(op)),
            Op::Advance { .. } | Op::Restart => None,
            Op::Invalid {
                call,
                bad,
                name,
                owner,
            } => Some(self.invalid_call(*call, *bad, name_at(*name), owner_at(*owner))),
        }
    }

    /// The owner a call by a holder passes: [`HOLDER`] picks the latest
    /// holder of the name at index `name`, any other index an owner.
    fn caller(&self, name: usize, owner: usize) -> String {
        match owner % (owners().len() + 1) {
            HOLDER => self
                .holders
                .get(&name_at(name))
                .and_then(|hs| hs.last())
                .map_or_else(|| owner_at(0), |h| h.owner.clone()),
            o => owner_at(o),
        }
    }

    /// `lock`, `unlock` and `extend` by an owner or the name's holder.
    fn resolve_holder_call(&self, op: &Op) -> Call {
        match *op {
            Op::Lock {
                name: n,
                owner: o,
                ttl_ms,
                durability,
            } => Call::Lock {
                name: name_at(n),
                owner: self.caller(n, o),
                ttl_ms,
                durability,
                claim: Claim::Exclusive,
            },
            Op::LockAs {
                name: n,
                owner: o,
                claim,
                ttl_ms,
                durability,
            } => Call::Lock {
                name: name_at(n),
                owner: self.caller(n, o),
                ttl_ms,
                durability,
                claim,
            },
            Op::Unlock {
                name: n,
                owner: o,
                token,
            } => Call::Unlock {
                name: name_at(n),
                owner: self.caller(n, o),
                token: self.token_arg(&name_at(n), token),
            },
            Op::Extend {
                name: n,
                owner: o,
                ttl_ms,
            } => Call::Extend {
                name: name_at(n),
                owner: self.caller(n, o),
                ttl_ms,
            },
            _ => unreachable!("resolve passes only lock, unlock and extend here"),
        }
    }

    /// `campaign`, `proclaim` and `leader` (rule 16).
    fn resolve_election_call(&self, op: &Op) -> Call {
        match *op {
            Op::Campaign {
                name: n,
                owner: o,
                value,
                ttl_ms,
                durability,
            } => Call::Campaign {
                name: name_at(n),
                candidate: owner_at(o),
                value: campaign_value(value),
                ttl_ms,
                durability,
            },
            Op::Proclaim {
                name: n,
                owner: o,
                token,
                value,
            } => Call::Proclaim {
                name: name_at(n),
                candidate: self.caller(n, o),
                token: self.token_arg(&name_at(n), token).unwrap_or(0),
                value: campaign_value(value),
            },
            Op::Leader { name: n } => Call::Leader { name: name_at(n) },
            _ => unreachable!("resolve passes only election calls here"),
        }
    }

    /// A guard's call with its own owner and token (rule 9); `None` when
    /// there is no live guard to make it.
    fn resolve_guard_call(&self, op: &Op) -> Option<Call> {
        Some(match *op {
            Op::GuardAcquire {
                name: n,
                ttl_ms,
                durability,
            } => Call::Lock {
                name: name_at(n),
                owner: format!("guard-{}", self.guards_made),
                ttl_ms,
                durability,
                claim: Claim::Exclusive,
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
            _ => unreachable!("resolve passes only guard ops here"),
        })
    }

    /// The lease calls, and `unlock` and `extend` by a lease's id (rule 11).
    fn resolve_lease_call(&self, op: &Op) -> Call {
        match *op {
            Op::LeaseGrant { ttl_ms, durability } => Call::GrantLease { ttl_ms, durability },
            Op::LeaseLock { name: n, lease } => Call::LockInLease {
                name: name_at(n),
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
                name: name_at(n),
                owner: self.lease_id(lease),
                token: self.token_arg(&name_at(n), token),
            },
            Op::LeaseExtend {
                name: n,
                lease,
                ttl_ms,
            } => Call::Extend {
                name: name_at(n),
                owner: self.lease_id(lease),
                ttl_ms,
            },
            _ => unreachable!("resolve passes only lease ops here"),
        }
    }

    pub(super) fn token_arg(&self, name: &str, arg: TokenArg) -> Option<u64> {
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

    /// The call an [`Op::Invalid`] makes: `call` with the argument `bad`
    /// out of limits or, for a call without that argument, the one that
    /// [`BadArg`] and [`InvalidCall`] say stands in for it.
    pub(super) fn invalid_call(
        &self,
        call: InvalidCall,
        bad: BadArg,
        name: String,
        owner: String,
    ) -> Call {
        match call {
            InvalidCall::GrantLease => Call::GrantLease {
                ttl_ms: self.bad_lease_ttl(bad),
                durability: Durability::Persistent,
            },
            InvalidCall::LockInLease => self.lock_in_lease_with_bad(bad, name),
            InvalidCall::Permits => Call::Lock {
                name,
                owner,
                ttl_ms: 1_000,
                durability: Durability::Persistent,
                claim: Claim::Permit {
                    permits: bad_permits(bad),
                },
            },
            InvalidCall::RefreshLease => Call::RefreshLease {
                lease_id: bad_lease_id(bad),
            },
            InvalidCall::Lock | InvalidCall::Unlock | InvalidCall::Extend | InvalidCall::Get => {
                self.plain_call_with_bad(call, bad, name, owner)
            }
        }
    }

    /// `grant_lease`'s bad argument is always its ttl.
    fn bad_lease_ttl(&self, bad: BadArg) -> u64 {
        match bad {
            BadArg::EmptyName | BadArg::EmptyOwner | BadArg::ZeroTtl => 0,
            BadArg::LongName | BadArg::LongOwner | BadArg::LongTtl => self.limits.max_ttl_ms + 1,
            BadArg::HugeTtl => u64::MAX,
        }
    }

    /// `lock_in_lease` with a bad lease id, or a bad name for a bad ttl.
    fn lock_in_lease_with_bad(&self, bad: BadArg, name: String) -> Call {
        match bad {
            BadArg::EmptyOwner => Call::LockInLease {
                name,
                lease_id: String::new(),
            },
            BadArg::LongOwner => Call::LockInLease {
                name,
                lease_id: over_long_owner(),
            },
            BadArg::EmptyName | BadArg::ZeroTtl => Call::LockInLease {
                name: String::new(),
                lease_id: self.lease_id(0),
            },
            BadArg::LongName | BadArg::LongTtl | BadArg::HugeTtl => Call::LockInLease {
                name: over_long_name(),
                lease_id: self.lease_id(0),
            },
        }
    }

    /// `lock`, `unlock`, `extend` or `get` with one argument broken.
    fn plain_call_with_bad(
        &self,
        call: InvalidCall,
        bad: BadArg,
        name: String,
        owner: String,
    ) -> Call {
        let (name, owner, ttl_ms) = self.plain_args_with_bad(call, bad, name, owner);
        match call {
            InvalidCall::Lock => Call::Lock {
                name,
                owner,
                ttl_ms,
                durability: Durability::Persistent,
                claim: Claim::Exclusive,
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
            InvalidCall::GrantLease
            | InvalidCall::LockInLease
            | InvalidCall::RefreshLease
            | InvalidCall::Permits => {
                unreachable!("made by invalid_call")
            }
        }
    }

    /// The name, owner and ttl of a plain call with `bad` broken.
    fn plain_args_with_bad(
        &self,
        call: InvalidCall,
        bad: BadArg,
        name: String,
        owner: String,
    ) -> (String, String, u64) {
        let ttl_ms = 1_000;
        // Arguments the call does not take become a bad name (see BadArg).
        match (call, bad) {
            (_, BadArg::EmptyName) => (String::new(), owner, ttl_ms),
            (_, BadArg::LongName) => (over_long_name(), owner, ttl_ms),
            (InvalidCall::Get, BadArg::EmptyOwner) => (String::new(), owner, ttl_ms),
            (_, BadArg::EmptyOwner) => (name, String::new(), ttl_ms),
            (InvalidCall::Get, BadArg::LongOwner) => (over_long_name(), owner, ttl_ms),
            (_, BadArg::LongOwner) => (name, over_long_owner(), ttl_ms),
            (InvalidCall::Get | InvalidCall::Unlock, BadArg::ZeroTtl) => {
                (String::new(), owner, ttl_ms)
            }
            (InvalidCall::Get | InvalidCall::Unlock, BadArg::LongTtl | BadArg::HugeTtl) => {
                (over_long_name(), owner, ttl_ms)
            }
            (_, BadArg::ZeroTtl) => (name, owner, 0),
            (_, BadArg::LongTtl) => (name, owner, self.limits.max_ttl_ms + 1),
            (_, BadArg::HugeTtl) => (name, owner, u64::MAX),
        }
    }

    /// Rule 2, checked independently of [`Limits`]' own code.
    pub(super) fn valid(&self, name: &str, owner: Option<&str>, ttl_ms: Option<u64>) -> bool {
        let name_ok = !name.is_empty() && name.len() <= self.limits.max_name_bytes;
        let owner_ok =
            owner.is_none_or(|o| !o.is_empty() && o.len() <= self.limits.max_owner_bytes);
        let ttl_ok = ttl_ms.is_none_or(|t| t >= 1 && t <= self.limits.max_ttl_ms);
        name_ok && owner_ok && ttl_ok
    }
}

/// The name a [`names`] index picks (modulo their number).
fn name_at(index: usize) -> String {
    let names = names();
    names[index % names.len()].clone()
}

/// The owner an [`owners`] index picks (modulo their number).
fn owner_at(index: usize) -> String {
    let owners = owners();
    owners[index % owners.len()].clone()
}

/// `get`, `describe`, `list` and an operator's `force_unlock`: calls that
/// pass no owner.
fn resolve_ownerless_call(op: &Op) -> Call {
    match *op {
        Op::Get { name: n } => Call::Get { name: name_at(n) },
        Op::Describe { name: n } => Call::Describe { name: name_at(n) },
        Op::ForceUnlock { name: n } => Call::ForceUnlock { name: name_at(n) },
        Op::List => Call::List,
        _ => unreachable!("resolve passes only get, describe, force_unlock and list here"),
    }
}

/// A name one byte over the 512-byte limit, in two-byte characters: a
/// limit counted in characters would let it through.
fn over_long_name() -> String {
    "ä".repeat(256) + "x"
}

/// An owner (or lease id) one byte over the 256-byte limit, in two-byte
/// characters.
fn over_long_owner() -> String {
    "ö".repeat(128) + "x"
}

/// `lock` of a permit: every bad argument becomes a permit count out of
/// range (see [`InvalidCall::Permits`]).
fn bad_permits(bad: BadArg) -> u32 {
    match bad {
        BadArg::EmptyName | BadArg::EmptyOwner | BadArg::ZeroTtl => 0,
        BadArg::LongName | BadArg::LongOwner | BadArg::LongTtl => lockd_core::MAX_PERMITS + 1,
        BadArg::HugeTtl => u32::MAX,
    }
}

/// `refresh_lease`: every bad argument becomes a bad lease id.
fn bad_lease_id(bad: BadArg) -> String {
    match bad {
        BadArg::EmptyName | BadArg::EmptyOwner | BadArg::ZeroTtl => String::new(),
        _ => over_long_owner(),
    }
}

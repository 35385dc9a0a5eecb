//! The reference model ([`Model`]): its state, how a call resolves, and
//! what each call may answer (module docs, "The rules").

use lockd_core::Claim;
use std::collections::BTreeMap;

use lockd_core::{Durability, Grant, LeaseInfo, Limits, ListedLock, LockError, LockInfo};

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
    /// By name. May hold expired holders; [`Model::live`] filters them.
    pub(super) holders: BTreeMap<String, Holder>,
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
    pub(super) fn live(&self, name: &str) -> Option<&Holder> {
        self.holders
            .get(name)
            .filter(|h| self.now_ms < h.expires_at_ms)
    }

    pub(super) fn live_mut(&mut self, name: &str) -> Option<&mut Holder> {
        let now = self.now_ms;
        self.holders.get_mut(name).filter(|h| now < h.expires_at_ms)
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

    pub(super) fn invalid_call(
        &self,
        call: InvalidCall,
        bad: BadArg,
        name: String,
        owner: String,
    ) -> Call {
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
    pub(super) fn valid(&self, name: &str, owner: Option<&str>, ttl_ms: Option<u64>) -> bool {
        let name_ok = !name.is_empty() && name.len() <= self.limits.max_name_bytes;
        let owner_ok =
            owner.is_none_or(|o| !o.is_empty() && o.len() <= self.limits.max_owner_bytes);
        let ttl_ok = ttl_ms.is_none_or(|t| t >= 1 && t <= self.limits.max_ttl_ms);
        name_ok && owner_ok && ttl_ok
    }

    /// Rules 2–9: what the store must answer to `call`, with the model's
    /// state changed accordingly — except a fresh grant, whose token only
    /// the reply can tell; [`Model::check`] installs it.
    pub(super) fn transition(&mut self, call: &Call) -> Expect {
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
                        claim: Claim::Exclusive,
                        holders: Vec::new(),
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
    pub(super) fn lock_in_lease(&mut self, name: &str, lease: usize) -> Expect {
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
}

//! A name held shared, a semaphore, an election, or a name under a
//! lock-delay: what the engine keeps of it (docs/contract.md C21 to C24).
//! How the engine uses it: the `group_ops` module.
//!
//! Members are kept in token order (tokens rise, and a member is appended
//! when granted), so the last live one is the name's most recent grant.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use super::namespaces::{FxBuild, Namespace};
use super::waiter::Waiter;
use crate::error::LockError;
use crate::types::{Claim, Durability, Grant, Key, LockInfo};

/// One grant of a group, or the place a lock-delay holds back.
pub(super) struct Member {
    pub(super) owner: Arc<str>,
    pub(super) claim: Claim,
    pub(super) token: u64,
    /// For a delayed place, the end of its delay.
    pub(super) expires_at_ms: u64,
    pub(super) acquired_at_ms: u64,
    pub(super) durability: Durability,
    /// A place held back by a lock-delay: nobody holds it, and nobody
    /// else gets it until `expires_at_ms`.
    pub(super) delayed: bool,
    /// What a leader proclaimed.
    pub(super) value: Option<Arc<str>>,
}

impl Member {
    pub(super) fn info(&self) -> LockInfo {
        LockInfo {
            owner: self.owner.to_string(),
            fencing_token: self.token,
            expires_at_ms: self.expires_at_ms,
            durability: self.durability,
        }
    }

    pub(super) fn grant(&self) -> Grant {
        Grant {
            fencing_token: self.token,
            expires_at_ms: self.expires_at_ms,
        }
    }
}

/// What a group's name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A lock held shared, or under a lock-delay.
    Lock,
    /// A semaphore of this many permits.
    Semaphore(u32),
    /// An election.
    Election,
}

impl Kind {
    /// The kind of name a grant of `claim` makes.
    pub(super) fn of(claim: Claim) -> Kind {
        match claim {
            Claim::Exclusive | Claim::Shared => Kind::Lock,
            Claim::Permit { permits } => Kind::Semaphore(permits),
            Claim::Leader => Kind::Election,
        }
    }
}

/// A name held shared, a semaphore, or a name under a lock-delay.
pub(super) struct Group {
    pub(super) namespace: Arc<Namespace>,
    pub(super) kind: Kind,
    /// In token order.
    pub(super) members: Vec<Member>,
    pub(super) waiters: VecDeque<Waiter>,
    /// Its entry in the shard's `group_deadlines`.
    pub(super) deadline: Option<u64>,
    /// The journal's position after the name's last op (see
    /// `Engine::name_barrier`).
    pub(super) journal_pos: u64,
}

impl Group {
    pub(super) fn new(namespace: Arc<Namespace>, kind: Kind) -> Group {
        Group {
            namespace,
            kind,
            members: Vec::new(),
            waiters: VecDeque::new(),
            deadline: None,
            journal_pos: 0,
        }
    }

    /// Whether a grant of `claim` fits beside the members (delayed places
    /// count as the grants they were).
    pub(super) fn admits(&self, claim: Claim) -> bool {
        match claim {
            Claim::Exclusive | Claim::Leader => self.members.is_empty(),
            Claim::Shared => self.members.iter().all(|m| m.claim == Claim::Shared),
            Claim::Permit { permits } => self.members.len() < permits as usize,
        }
    }

    pub(super) fn live(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| !m.delayed)
    }

    /// The live member whose owner is `owner`.
    pub(super) fn held_by(&self, owner: &str) -> Option<usize> {
        self.members
            .iter()
            .position(|m| !m.delayed && *m.owner == *owner)
    }

    /// The end of the latest delay in force.
    pub(super) fn delay_until(&self) -> Option<u64> {
        self.members
            .iter()
            .filter(|m| m.delayed)
            .map(|m| m.expires_at_ms)
            .max()
    }

    pub(super) fn live_count(&self, now: u64) -> usize {
        self.live().filter(|m| m.expires_at_ms > now).count()
    }

    /// Live members by durability, for the gauges: (persistent, ephemeral).
    pub(super) fn held_by_durability(&self, now: u64) -> (u64, u64) {
        self.live()
            .filter(|m| m.expires_at_ms > now)
            .fold((0, 0), |(p, e), m| match m.durability {
                Durability::Persistent => (p + 1, e),
                Durability::Ephemeral => (p, e + 1),
            })
    }

    /// `invalid_argument` unless `claim` is something this name can give:
    /// a lock's modes for a lock, this many permits for a semaphore.
    pub(super) fn check_claim(&self, key: &Key, claim: Claim) -> Result<(), LockError> {
        check_kind(key, self.kind, claim)
    }
}

/// `invalid_argument` unless `claim` fits a name of kind `kind`: a lock's
/// modes for a lock, this many permits for a semaphore, the leadership for
/// an election (docs/contract.md C22, C24).
pub(super) fn check_kind(key: &Key, kind: Kind, claim: Claim) -> Result<(), LockError> {
    let asked = Kind::of(claim);
    if asked == kind {
        return Ok(());
    }
    let name = &key.name;
    let is = match kind {
        Kind::Lock => "a lock".to_string(),
        Kind::Semaphore(permits) => format!("a semaphore of {permits} permits"),
        Kind::Election => "an election".to_string(),
    };
    let hint = match (kind, asked) {
        (Kind::Semaphore(_), Kind::Semaphore(_)) => {
            "a semaphore's size is set by its first acquire and stays while any permit is held or awaited"
        }
        (Kind::Lock, _) => "take it as a lock, or use another name",
        (Kind::Semaphore(_), _) => "take a permit of that many, or use another name",
        (Kind::Election, _) => "campaign for it, or use another name",
    };
    Err(LockError::InvalidArgument(format!(
        "{name:?} is held or awaited as {is}: {hint}"
    )))
}

/// `invalid_argument` for an election call on a name held as `kind`.
pub(super) fn not_an_election(key: &Key, kind: Kind) -> LockError {
    match check_kind(key, kind, Claim::Leader) {
        Err(e) => e,
        Ok(()) => unreachable!("an election is an election"),
    }
}

/// `invalid_argument` for an owner that holds `name` one way and asks for
/// it another (docs/contract.md#c21-shared: no upgrade, no downgrade).
pub(super) fn no_change_of_mode(key: &Key, owner: &str, holds: Claim, asks: Claim) -> LockError {
    LockError::InvalidArgument(format!(
        "owner {owner:?} holds {:?} {} and asks for it {}: a holder's mode never changes; release it first",
        key.name,
        holds.as_str(),
        asks.as_str()
    ))
}

/// A shard's groups, with each one's earliest deadline for the purge task.
#[derive(Default)]
pub(super) struct Groups {
    pub(super) map: HashMap<Key, Group, FxBuild>,
    deadlines: BTreeSet<(u64, Key)>,
}

impl Groups {
    /// Files the group `key`'s earliest deadline after its members
    /// changed. Answers it.
    pub(super) fn refile(&mut self, key: &Key) -> Option<u64> {
        let group = self.map.get_mut(key)?;
        let earliest = group.members.iter().map(|m| m.expires_at_ms).min();
        if earliest != group.deadline {
            if let Some(old) = group.deadline {
                self.deadlines.remove(&(old, key.clone()));
            }
            if let Some(new) = earliest {
                self.deadlines.insert((new, key.clone()));
            }
            group.deadline = earliest;
        }
        earliest
    }

    /// Takes the group `key` out, deadline and all.
    pub(super) fn take(&mut self, key: &Key) -> Option<Group> {
        let group = self.map.remove(key)?;
        if let Some(due) = group.deadline {
            self.deadlines.remove(&(due, key.clone()));
        }
        Some(group)
    }

    /// The earliest group deadline and its name.
    pub(super) fn next_deadline(&self) -> Option<(u64, Key)> {
        self.deadlines.first().cloned()
    }
}

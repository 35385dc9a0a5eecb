//! A name's grants as its one lock key holds them, and the rules of
//! docs/contract.md#c21-shared, #c22-semaphores and #c23-lock-delay over
//! them.
//!
//! The key's record is the name's most recent grant, with every other grant
//! of the name (shared holders, permits, ended grants serving a lock-delay)
//! in its `others`. An exclusive lock's record holds its grant alone: the
//! format lockd wrote before it had claims. So every decision about a name
//! reads one key and is applied by one transaction guarded by that key's
//! `mod_revision`.
//!
//! A grant's token is in its record, except for the most recent grant when
//! the transaction that wrote it granted it: its token is that
//! transaction's revision, the key's `mod_revision`. Every rewrite writes
//! each token it read into the record, so a later transaction, which moves
//! `mod_revision`, keeps them.

use std::collections::HashSet;

use lockd_core::{Claim, LockError, LockInfo};

use crate::record::{from_json, Held, LockRecord};

/// Every grant of one name, as read at one revision.
#[derive(Clone, Debug)]
pub(crate) struct Name {
    pub mod_revision: i64,
    /// By token, lowest first; each with the key's `mod_revision`.
    pub grants: Vec<Held>,
}

/// Whether a grant of `claim` may hold the name beside `other`, which takes
/// its place (held, or as a delay) at `now`.
fn may_join(claim: Claim, other: &Held, now: u64) -> bool {
    match (claim, other.rec.claim()) {
        // A shared grant's delay holds back exclusive requests only.
        (Claim::Shared, Claim::Shared) => true,
        (Claim::Permit { .. }, Claim::Permit { .. }) => true,
        _ => !other.blocks(now),
    }
}

impl Name {
    pub(crate) fn from_kv(kv: &etcd_client::KeyValue) -> Result<Name, LockError> {
        let mut rec: LockRecord = from_json(kv.key(), kv.value())?;
        let mod_revision = kv.mod_revision();
        let others = std::mem::take(&mut rec.others);
        let mut grants: Vec<Held> = others
            .into_iter()
            .chain(std::iter::once(rec))
            .map(|rec| Held {
                mod_revision,
                token: rec.token.unwrap_or(mod_revision as u64),
                rec,
            })
            .collect();
        grants.sort_by_key(|g| g.token);
        Ok(Name {
            mod_revision,
            grants,
        })
    }

    /// The name without the ephemeral grants of sessions not in `alive`:
    /// their hosts are gone, and so are they (docs/contract.md#c10-durability).
    /// A lone grant is left alone: its key lives on its session's lease and
    /// goes with it (and a waiter of a host that keeps no session key, a
    /// lockd from before claims, is handed a lone grant).
    pub(crate) fn without_dead(mut self, alive: &HashSet<i64>) -> Name {
        if self.grants.len() > 1 {
            self.grants
                .retain(|g| g.rec.session.is_none_or(|s| alive.contains(&s)));
        }
        self
    }

    /// The grants live at `now`, by token.
    pub(crate) fn live(&self, now: u64) -> impl Iterator<Item = &Held> {
        self.grants.iter().filter(move |g| g.live(now))
    }

    /// The most recent live grant: what `get` answers.
    pub(crate) fn latest(&self, now: u64) -> Option<&Held> {
        self.live(now).last()
    }

    /// Whether any grant is live at `now`.
    pub(crate) fn held(&self, now: u64) -> bool {
        self.latest(now).is_some()
    }

    /// `owner`'s live grant (one owner holds one grant of a name).
    pub(crate) fn of_owner(&self, owner: &str, now: u64) -> Option<&Held> {
        self.live(now).find(|g| g.rec.owner == owner)
    }

    /// The grant that was handed to the waiter `id`, if live or ended since.
    pub(crate) fn of_waiter(&self, id: &str) -> Option<&Held> {
        self.grants
            .iter()
            .find(|g| g.rec.waiter.as_deref() == Some(id))
    }

    /// The end of the lock-delays in force at `now`, if any.
    pub(crate) fn delay_until(&self, now: u64) -> Option<u64> {
        self.grants
            .iter()
            .filter(|g| !g.live(now) && g.blocks(now))
            .map(Held::blocks_until)
            .max()
    }

    /// What the name is at `now`, as far as its grants tell (held, or a
    /// delay): the claim of its most recent such grant.
    pub(crate) fn claim(&self, now: u64) -> Option<Claim> {
        self.grants
            .iter()
            .rev()
            .find(|g| g.blocks(now))
            .map(|g| g.rec.claim())
    }

    /// `None` if a grant of `claim` may join the grants at `now` (nobody
    /// waiting aside); else the most recent grant in its way, as `busy`
    /// shows it.
    pub(crate) fn in_the_way(&self, claim: Claim, now: u64) -> Option<LockInfo> {
        if let Some(n) = claim.permits() {
            let taken: Vec<&Held> = self.grants.iter().filter(|g| g.blocks(now)).collect();
            if taken.len() >= n as usize {
                return taken.last().map(|g| g.busy_info(now));
            }
        }
        self.grants
            .iter()
            .rev()
            .find(|g| !may_join(claim, g, now))
            .map(|g| g.busy_info(now))
    }

    /// When the name next changes by itself after `now`: a grant's expiry,
    /// or the end of a delay. The head of the queue sleeps until then.
    pub(crate) fn next_change(&self, now: u64) -> Option<u64> {
        self.grants
            .iter()
            .filter_map(|g| {
                if g.live(now) {
                    Some(g.rec.expires_at_ms)
                } else if g.blocks(now) {
                    Some(g.blocks_until())
                } else {
                    None
                }
            })
            .min()
    }

    /// When the sweeper must look at the name next: the expiry of a grant
    /// not ended yet (past or not), else the end of a delay.
    pub(crate) fn due(&self) -> Option<u64> {
        self.grants
            .iter()
            .map(|g| match g.rec.ended_at_ms {
                None => g.rec.expires_at_ms,
                Some(_) => g.blocks_until(),
            })
            .min()
    }

    /// The grants to keep at `now`, as records to write back (tokens in
    /// them): a grant that expired with a delay to serve is marked ended at
    /// its expiry, and grants that no longer take a place are dropped.
    /// Also whether that changes anything.
    pub(crate) fn tidied(&self, now: u64) -> (Vec<LockRecord>, bool) {
        let mut changed = false;
        let mut kept = Vec::with_capacity(self.grants.len());
        for g in &self.grants {
            if !g.blocks(now) {
                changed = true;
                continue;
            }
            let mut rec = g.stored();
            if !g.live(now) && rec.ended_at_ms.is_none() {
                rec.ended_at_ms = Some(rec.expires_at_ms);
                changed = true;
            }
            kept.push(rec);
        }
        (kept, changed)
    }

    /// Whether some grant must be written at `now` (see [`Name::tidied`]).
    pub(crate) fn untidy(&self, now: u64) -> bool {
        self.tidied(now).1
    }

    /// The claim a request must match, from the name's grants and the head
    /// of its queue (`queued`): `invalid_argument` for a permit on a lock,
    /// a lock on a semaphore, or another number of permits.
    pub(crate) fn check_claim(
        &self,
        name: &str,
        claim: Claim,
        queued: Option<Claim>,
        now: u64,
    ) -> Result<(), LockError> {
        let Some(current) = self.claim(now).or(queued) else {
            return Ok(());
        };
        check_same_kind(name, claim, current)
    }
}

/// What a name is used as: a lock (exclusive or shared), a semaphore, or
/// an election.
fn kind(claim: Claim) -> &'static str {
    match claim {
        Claim::Exclusive | Claim::Shared => "a lock",
        Claim::Permit { .. } => "a semaphore",
        Claim::Leader => "an election",
    }
}

/// `invalid_argument` unless `claim` and `current` are of one kind (both
/// locks, both permits of the same number, or both of an election).
pub(crate) fn check_same_kind(name: &str, claim: Claim, current: Claim) -> Result<(), LockError> {
    match (claim.permits(), current.permits()) {
        (Some(n), Some(m)) if n != m => Err(LockError::InvalidArgument(format!(
            "semaphore {name:?} has {m} permits, not {n}: ask with permits = {m}, \
             or wait until no permit is held or waited for"
        ))),
        _ if kind(claim) == kind(current) => Ok(()),
        _ => Err(LockError::InvalidArgument(format!(
            "{name:?} is held or waited for as {}, not {}: use it as {0}, or use another name",
            kind(current),
            kind(claim)
        ))),
    }
}

/// `invalid_argument` when `owner`'s live grant `held` has another mode
/// than `claim` (no upgrade, no downgrade).
pub(crate) fn check_same_mode(name: &str, held: &Held, claim: Claim) -> Result<(), LockError> {
    let mine = held.rec.claim();
    if mine.permits().is_some() || mine == claim {
        return Ok(());
    }
    Err(LockError::InvalidArgument(format!(
        "owner {:?} holds {name:?} {} and asked for it {}: a lock is not upgraded or \
         downgraded; release it first",
        held.rec.owner,
        mine.as_str(),
        claim.as_str()
    )))
}

/// The record to write for `grants` (tokens in them, except a grant this
/// transaction makes, which has none): the most recent grant with the
/// others in it; `None` for no grant (delete the key).
pub(crate) fn compose(mut grants: Vec<LockRecord>) -> Option<LockRecord> {
    // The new grant (no token yet) is the most recent.
    grants.sort_by_key(|r| r.token.unwrap_or(u64::MAX));
    let mut top = grants.pop()?;
    for g in &mut grants {
        g.others.clear();
    }
    top.others = grants;
    Some(top)
}

#[cfg(test)]
mod tests {
    use lockd_core::Durability;

    use super::*;
    use crate::record::to_json;

    fn grant(owner: &str, token: u64, expires: u64, claim: Claim, delay: u64) -> LockRecord {
        let mut r = LockRecord::fresh(owner, 0, expires, Durability::Persistent, None)
            .claiming(claim, delay);
        r.token = Some(token);
        r
    }

    fn name(grants: Vec<LockRecord>) -> Name {
        let rec = compose(grants).unwrap();
        let kv_value = to_json(&rec);
        // Read back as etcd would hand it over, at revision 99.
        let mut rec: LockRecord = from_json(b"k", &kv_value).unwrap();
        let others = std::mem::take(&mut rec.others);
        let mut grants: Vec<Held> = others
            .into_iter()
            .chain(std::iter::once(rec))
            .map(|rec| Held {
                mod_revision: 99,
                token: rec.token.unwrap_or(99),
                rec,
            })
            .collect();
        grants.sort_by_key(|g| g.token);
        Name {
            mod_revision: 99,
            grants,
        }
    }

    #[test]
    fn shared_holders_admit_shared_and_keep_out_exclusive() {
        let n = name(vec![
            grant("a", 5, 100, Claim::Shared, 0),
            grant("b", 7, 200, Claim::Shared, 0),
        ]);
        assert!(n.in_the_way(Claim::Shared, 50).is_none());
        let busy = n.in_the_way(Claim::Exclusive, 50).unwrap();
        assert_eq!((busy.owner.as_str(), busy.fencing_token), ("b", 7));
        assert_eq!(n.latest(50).unwrap().rec.owner, "b");
        assert_eq!(n.latest(150).unwrap().rec.owner, "b");
        assert!(n.in_the_way(Claim::Exclusive, 200).is_none());
        assert_eq!(n.next_change(50), Some(100));
        assert!(matches!(
            n.check_claim("x", Claim::Permit { permits: 2 }, None, 50),
            Err(LockError::InvalidArgument(m)) if m.contains("as a lock")
        ));
        let held = n.of_owner("a", 50).unwrap();
        assert!(check_same_mode("x", held, Claim::Exclusive).is_err());
        assert!(check_same_mode("x", held, Claim::Shared).is_ok());
    }

    #[test]
    fn a_semaphore_admits_up_to_its_permits_and_delays_count() {
        let p = Claim::Permit { permits: 2 };
        let n = name(vec![grant("a", 5, 100, p, 0), grant("b", 7, 100, p, 30)]);
        assert!(n.in_the_way(p, 50).is_some());
        assert!(n.in_the_way(Claim::Shared, 50).is_some());
        // "b" expired at 100 with a delay of 30: one permit fewer until 130.
        assert!(n.in_the_way(p, 110).is_none());
        let n2 = name(vec![grant("a", 5, 200, p, 0), grant("b", 7, 100, p, 30)]);
        let busy = n2.in_the_way(p, 110).unwrap();
        assert_eq!((busy.owner.as_str(), busy.expires_at_ms), ("b", 130));
        assert!(n2.in_the_way(p, 130).is_none());
        assert_eq!(n2.delay_until(110), Some(130));
        assert!(matches!(
            n2.check_claim("x", Claim::Permit { permits: 3 }, None, 110),
            Err(LockError::InvalidArgument(m)) if m.contains("2 permits")
        ));
        let (kept, changed) = n2.tidied(110);
        assert!(changed);
        assert_eq!(kept.len(), 2);
        assert_eq!(
            kept.iter().find(|r| r.owner == "b").unwrap().ended_at_ms,
            Some(100)
        );
        let (kept, _) = n2.tidied(140);
        assert_eq!(kept.len(), 1);
    }

    #[test]
    fn a_delay_keeps_everyone_out_after_an_exclusive_grant() {
        let n = name(vec![grant("a", 5, 100, Claim::Exclusive, 50)]);
        assert!(n.latest(120).is_none());
        let busy = n.in_the_way(Claim::Shared, 120).unwrap();
        assert_eq!(busy.expires_at_ms, 150);
        assert!(n.in_the_way(Claim::Exclusive, 150).is_none());
        // A shared grant's delay keeps out exclusive requests only.
        let s = name(vec![grant("a", 5, 100, Claim::Shared, 50)]);
        assert!(s.in_the_way(Claim::Shared, 120).is_none());
        assert!(s.in_the_way(Claim::Exclusive, 120).is_some());
    }

    #[test]
    fn compose_keeps_the_old_format_for_one_exclusive_grant() {
        let mut fresh = LockRecord::fresh("o1", 7, 17, Durability::Ephemeral, None);
        let json = to_json(&compose(vec![fresh.clone()]).unwrap());
        assert_eq!(
            std::str::from_utf8(&json).unwrap(),
            r#"{"v":1,"owner":"o1","expires_at_ms":17,"durability":"ephemeral","acquired_at_ms":7}"#
        );
        // The grant without a token is the most recent, the top record.
        fresh.claim = Some(crate::record::StoredClaim::Shared);
        let older = grant("o0", 3, 17, Claim::Shared, 0);
        let top = compose(vec![fresh, older]).unwrap();
        assert_eq!((top.owner.as_str(), top.others.len()), ("o1", 1));
        assert_eq!(compose(Vec::new()), None);
    }
}

//! Checking a reply against the model, and moving the model on.

use lockd_core::{Claim, Durability, LeaseGrant, LockError};

use super::ops::*;
use super::reference::*;

impl Model {
    /// Checks that `outcome` is what the model allows for `call`, made for
    /// `op`, and moves the model on. The error says what differed.
    pub fn check(&mut self, op: &Op, call: &Call, outcome: &Outcome) -> Result<(), String> {
        // Kept to explain a mismatch; formatted only then.
        let before = (self.holders.clone(), self.leases.clone());
        let expect = self.transition(call);
        if let Err(why) = self.accept(&expect, outcome) {
            return Err(format!(
                "{why}\n  expected: {expect:?}\n  actual:   {outcome:?}\n  model at t={} before the call: {before:?}",
                self.now_ms
            ));
        }
        let fresh = matches!(expect, Expect::Fresh { .. });
        self.tally_refusals_and_lease_locks(&expect, call, outcome);
        self.after(op, call, outcome, fresh)
    }

    /// Whether `outcome` is what `expect` allows; if so, a fresh grant or
    /// lease is installed with what only the reply can tell (its token or
    /// id). The error says which rule the reply broke.
    fn accept(&mut self, expect: &Expect, outcome: &Outcome) -> Result<(), String> {
        match expect {
            Expect::Invalid => match outcome {
                Err(LockError::InvalidArgument(message)) if !message.is_empty() => Ok(()),
                _ => Err("invalid input was not refused (rule 2)".to_string()),
            },
            Expect::Exactly(expected) if outcome != expected => {
                Err("reply differs from the model".to_string())
            }
            Expect::Exactly(_) => Ok(()),
            Expect::Fresh {
                name,
                owner,
                expires_at_ms,
                durability,
                lease,
                claim,
                value,
            } => {
                let Ok(Reply::Granted(grant)) = outcome else {
                    return Err("a free lock was not granted (rule 3)".to_string());
                };
                if grant.expires_at_ms != *expires_at_ms {
                    return Err("fresh grant with the wrong expiry (rule 3)".to_string());
                }
                self.check_token_rises(name, grant.fencing_token)?;
                let holder = Holder {
                    owner: owner.clone(),
                    token: grant.fencing_token,
                    expires_at_ms: *expires_at_ms,
                    durability: *durability,
                    lease: *lease,
                    acquired_at_ms: self.now_ms,
                    claim: *claim,
                    forced_at_ms: None,
                    value: value.clone(),
                };
                self.install_grant(name, holder);
                Ok(())
            }
            Expect::FreshLease {
                ttl_ms,
                expires_at_ms,
                durability,
            } => {
                let Ok(Reply::LeaseGranted(grant)) = outcome else {
                    return Err("a lease was not granted (rule 11)".to_string());
                };
                self.accept_fresh_lease(grant, *ttl_ms, *expires_at_ms, *durability)
            }
        }
    }

    /// Rule 3: a fresh grant's `token` is above every token seen for
    /// `name`, and above every token seen at all.
    fn check_token_rises(&self, name: &str, token: u64) -> Result<(), String> {
        let per_name = self.tokens.get(name).and_then(|t| t.last()).copied();
        if per_name.is_some_and(|t| token <= t) {
            return Err(format!(
                "token did not rise for this name: {token} after {per_name:?} (rule 3)"
            ));
        }
        if token <= self.highest_token {
            return Err(format!(
                "token {token} is not above every token seen ({}) (rule 3)",
                self.highest_token
            ));
        }
        Ok(())
    }

    /// Records an accepted fresh grant of `name` to `holder`, and counts
    /// what it took and whether it was made beside other members.
    fn install_grant(&mut self, name: &str, holder: Holder) {
        self.highest_token = holder.token;
        self.tokens
            .entry(name.to_string())
            .or_default()
            .push(holder.token);
        let (now, delay) = (self.now_ms, self.lock_delay_ms);
        let holders = self.holders.entry(name.to_string()).or_default();
        // Grants that ended and hold no place back are gone.
        holders.retain(|h| h.is_live(now) || h.delayed_until(now, delay).is_some());
        let t = &mut self.tally;
        t.beside += u64::from(!holders.is_empty());
        match holder.claim {
            Claim::Shared => t.shared += 1,
            Claim::Permit { .. } => t.permits += 1,
            Claim::Leader => t.leaders += 1,
            Claim::Exclusive => {}
        }
        holders.push(holder);
    }

    /// Rule 11: a new lease has the expected expiry and an id of the form
    /// `lease-<32 hex>` never granted before; it is recorded.
    fn accept_fresh_lease(
        &mut self,
        grant: &LeaseGrant,
        ttl_ms: u64,
        expires_at_ms: u64,
        durability: Durability,
    ) -> Result<(), String> {
        if grant.expires_at_ms != expires_at_ms {
            return Err("lease granted with the wrong expiry (rule 11)".to_string());
        }
        let hex = grant.id.strip_prefix("lease-").unwrap_or("");
        let well_formed = hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !well_formed {
            return Err("a lease id not of the form lease-<32 hex> (rule 11)".to_string());
        }
        if grant.id == UNKNOWN_LEASE_ID || self.leases.iter().any(|l| l.id == grant.id) {
            return Err("a lease id granted twice (rule 11)".to_string());
        }
        self.leases.push(Lease {
            id: grant.id.clone(),
            ttl_ms,
            expires_at_ms,
            durability,
            ended: false,
        });
        Ok(())
    }

    /// Counts the accepted replies that show rules 11–13 and 15 at work: a
    /// well-formed `lock` refused for its mode or kind, a `busy` naming a
    /// place held back by a lock-delay, a fresh grant under a lease, and an
    /// `extend` of a lease's lock refused.
    fn tally_refusals_and_lease_locks(&mut self, expect: &Expect, call: &Call, outcome: &Outcome) {
        // Rules 12 and 13: a well-formed lock refused for its mode or kind.
        let refused_claim = matches!(
            (expect, call),
            (Expect::Invalid, Call::Lock { name, owner, ttl_ms, claim, .. })
                if self.valid(name, Some(owner), Some(*ttl_ms))
                    && claim.permits().is_none_or(|n| (1..=lockd_core::MAX_PERMITS).contains(&n))
        );
        self.tally.claim_refused += u64::from(refused_claim);
        if let Err(lockd_core::LockError::Busy(info)) = outcome {
            let held = self
                .holders
                .values()
                .flatten()
                .any(|h| h.token == info.fencing_token && h.is_live(self.now_ms));
            self.tally.busy_delayed += u64::from(!held);
        }
        let fresh_in_lease = matches!(expect, Expect::Fresh { lease: Some(_), .. });
        let extend_of_leased = matches!(
            (expect, call),
            (Expect::Invalid, Call::Extend { owner, .. }) if self.live_lease_by_id(owner).is_some()
        );
        let t = &mut self.tally;
        t.lease_locks += u64::from(fresh_in_lease);
        t.lease_extend_refused += u64::from(extend_of_leased);
    }

    /// Guard bookkeeping and the tally, once a reply has been accepted.
    pub(super) fn after(
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
            Ok(Reply::Described(state)) => {
                t.described += 1;
                t.described_several += u64::from(state.holders.len() > 1);
                t.described_delayed += u64::from(state.delay_until_ms.is_some());
            }
            Ok(Reply::Forced(_)) => t.forced += 1,
            Ok(Reply::Sent) => {}
            Ok(Reply::LeaseGranted(_)) => t.leases_granted += 1,
            Ok(Reply::LeaseRefreshed(_)) => t.lease_refreshes += 1,
            Ok(Reply::LeaseRevoked(n)) => {
                t.lease_revokes += 1;
                t.lease_revoked_locks += n;
            }
            Ok(Reply::LeaseFound(Some(_))) => t.lease_reads_live += 1,
            Ok(Reply::LeaseFound(None)) => t.reads_free += 1,
            Ok(Reply::Proclaimed) => t.proclaimed += 1,
            Ok(Reply::Leader(Some(_))) => t.leader_reads += 1,
            Ok(Reply::Leader(None)) => t.reads_free += 1,
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

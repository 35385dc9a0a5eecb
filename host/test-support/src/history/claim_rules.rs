//! Names with several holders at once, shared or as a semaphore
//! (docs/contract.md C21, C22; module docs, "Shared locks and
//! semaphores"): what a grant holds, rule 1 for a call made beside other
//! holders, and rules 2 and 7 over the certain windows.

use lockd_core::Claim;

use super::checker::{Checker, Lease};
use super::record::{Op, OpKind, Outcome};
use super::verdict::{Coverage, Rule, Violation};

impl Checker<'_> {
    /// What `lease` holds: the claim of its acknowledged `lock`s, else that
    /// of every unknown-outcome `lock` of its owner on the name invoked
    /// before its first setting completed (one of them made it), if they
    /// agree.
    pub(super) fn lease_claim(&self, ids: &[usize], lease: &Lease<'_>) -> Option<Claim> {
        let ops = self.ops;
        if let Some(claim) = lease.settings.iter().find_map(|&i| ops[i].claim()) {
            return Some(claim);
        }
        let first = ops[lease.settings[0]].complete_ms;
        let mut makers = ids
            .iter()
            .map(|&i| &ops[i])
            .filter(|o| o.owner == lease.owner && o.outcome == Outcome::Unknown)
            .filter(|o| o.invoke_ms <= first)
            .filter_map(Op::claim);
        let claim = makers.next()?;
        makers.all(|c| c == claim).then_some(claim)
    }

    /// Rules 2 and 7 for a name with several holders: an exclusive grant's
    /// certain window meets no other certain window, and at no instant are
    /// more permits of a semaphore certainly held than it has.
    pub(super) fn holder_overlaps(
        &self,
        name: &str,
        leases: &[Lease<'_>],
        coverage: &mut Coverage,
        out: &mut Vec<Violation>,
    ) {
        let mut windows: Vec<(u64, u64, usize)> = leases
            .iter()
            .enumerate()
            .filter_map(|(n, l)| l.window.map(|(s, e)| (s, e, n)))
            .collect();
        windows.sort_unstable();
        for &(_, _, n) in &windows {
            match leases[n].claim {
                Some(Claim::Shared) => coverage.shared_windows += 1,
                Some(Claim::Permit { .. }) => coverage.permit_windows += 1,
                _ => {}
            }
        }
        let show = |n: usize| {
            let l = &leases[n];
            format!(
                "{} with token {} ({})",
                l.owner, l.token, self.ops[l.settings[0]]
            )
        };
        // Windows started so far that may still be open, in start order.
        let mut open: Vec<(u64, u64, usize)> = Vec::new();
        for &(start, end, n) in &windows {
            open.retain(|&(_, e, _)| e > start);
            let exclusive = leases[n].claim.is_some_and(super::alone);
            for &(_, e, m) in &open {
                if exclusive || leases[m].claim.is_some_and(super::alone) {
                    out.push(Violation {
                        rule: Rule::Overlap,
                        name: name.to_string(),
                        message: format!(
                            "an exclusive grant beside another: {} and {} both certainly held \
                             it from {start} to {}",
                            show(m),
                            show(n),
                            e.min(end)
                        ),
                    });
                }
            }
            open.push((start, end, n));
            let Some(Claim::Permit { permits }) = leases[n].claim else {
                continue;
            };
            // Every open permit window contains `start`.
            let held: Vec<usize> = open
                .iter()
                .map(|&(_, _, m)| m)
                .filter(|&m| matches!(leases[m].claim, Some(Claim::Permit { .. })))
                .collect();
            let fewest = held
                .iter()
                .filter_map(|&m| leases[m].claim.and_then(Claim::permits))
                .min()
                .unwrap_or(permits);
            if held.len() == fewest as usize {
                coverage.semaphore_full += 1;
            }
            if held.len() > fewest as usize {
                out.push(Violation {
                    rule: Rule::OverPermits,
                    name: name.to_string(),
                    message: format!(
                        "{} permits of a semaphore of {fewest} certainly held at {start}: {}",
                        held.len(),
                        held.iter().map(|&m| show(m)).collect::<Vec<_>>().join(", ")
                    ),
                });
            }
        }
    }
}

impl Lease<'_> {
    /// Judges one call made while `lease`, a shared grant or a permit, was
    /// certainly held throughout it, perhaps beside other holders: the name is
    /// not free, `get` and `busy` show a grant at least as recent as it
    /// (docs/contract.md#c21-shared: the most recent one), its owner's own
    /// calls find it, and no exclusive grant is made beside it. Other owners'
    /// grants of the same kind, extends and unlocks are theirs.
    pub(super) fn judge_beside_others(&self, op: &Op) -> Option<(Rule, &'static str)> {
        let lease = self;
        let own = op.owner == lease.owner;
        match (&op.kind, &op.outcome) {
            (_, Outcome::NotFound) => Some((Rule::LostGrant, "reported free")),
            (_, Outcome::NotHeld) => Some((Rule::LostGrant, "answered not_held")),
            (OpKind::Get, Outcome::Found { token, .. }) => (*token < lease.token).then_some((
                Rule::LostGrant,
                "get answered a grant older than one certainly held",
            )),
            (OpKind::Lock { .. }, Outcome::Busy { token, .. }) => {
                if own {
                    Some((Rule::LostGrant, "the holder's own relock answered busy"))
                } else {
                    (*token < lease.token).then_some((
                        Rule::LostGrant,
                        "busy named a grant older than one certainly held",
                    ))
                }
            }
            (OpKind::Lock { claim, .. }, Outcome::Ok { token, .. }) => {
                if own {
                    (*token != lease.token)
                        .then_some((Rule::Overlap, "relock returned a new token"))
                } else {
                    super::alone(*claim)
                        .then_some((Rule::Overlap, "granted exclusive beside another holder"))
                }
            }
            (OpKind::Extend { .. }, Outcome::Ok { token, .. }) => (own && *token != lease.token)
                .then_some((Rule::LostGrant, "extend returned another token")),
            (OpKind::Extend { .. }, Outcome::NotOwner) => {
                own.then_some((Rule::LostGrant, "the holder's extend answered not_owner"))
            }
            (OpKind::Unlock { token }, Outcome::NotOwner) => (own
                && token.is_none_or(|t| t == lease.token))
            .then_some((Rule::LostGrant, "the holder's unlock answered not_owner")),
            // Its own unlock with its token (or none) ends the window before it
            // starts: this is a stale token of the same owner.
            (OpKind::Unlock { .. }, Outcome::Unlocked) => {
                own.then_some((Rule::Overlap, "unlocked under a stale token of its owner"))
            }
            _ => None,
        }
    }
}

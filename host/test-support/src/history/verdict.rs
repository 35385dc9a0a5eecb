//! What the checker finds: violations of the rules, and how much it could
//! verify.

use std::fmt;

/// Which rule a violation breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// An acknowledged, unexpired, unreleased lock was reported free or held
    /// by someone else.
    LostGrant,
    /// Two owners (or tokens) held one name at once.
    Overlap,
    /// A token went backwards or was reused.
    TokenOrder,
    /// An acknowledged unlock was undone.
    LostUnlock,
    /// A waiter was passed over or not woken.
    FifoOrder,
    /// A lock was seen held by a lease, or the lease live, after the lease's
    /// revoke was acknowledged.
    HeldAfterRevoke,
    /// More permits of a semaphore were certainly held at once than it has.
    OverPermits,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::LostGrant => "lost grant",
            Rule::Overlap => "overlap",
            Rule::TokenOrder => "token order",
            Rule::LostUnlock => "lost unlock",
            Rule::FifoOrder => "FIFO order",
            Rule::HeldAfterRevoke => "held after revoke",
            Rule::OverPermits => "over permits",
        })
    }
}

/// One broken rule, with the calls that show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// The lock name.
    pub name: String,
    /// What happened, with the calls involved.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}: {}", self.rule, self.name, self.message)
    }
}

/// How much the checker could verify: a clean result over a history that
/// proves nothing would be worthless, so the harness asserts these too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Acknowledged leases (distinct name and token).
    pub leases: usize,
    /// Leases with a non-empty certain window.
    pub leases_with_window: usize,
    /// Calls judged against a lease certainly held throughout them
    /// (rules 1 and 2).
    pub calls_judged: usize,
    /// Of those, calls judged across a kill (invoked after a kill that came
    /// after the lease was acknowledged).
    pub calls_judged_after_kill: usize,
    /// Token-carrying answers compared with an earlier acknowledged token.
    pub token_comparisons: usize,
    /// Waiters that timed out `busy` with a non-empty queue interval.
    pub waits_judged: usize,
    /// Leases granted (acknowledged).
    pub lease_grants: usize,
    /// Of the acknowledged locks, those held under a lease.
    pub lease_locks: usize,
    /// Of those, with a non-empty certain window.
    pub lease_locks_with_window: usize,
    /// Calls by a lease (refresh, `get`, a lock under it) judged against
    /// the lease certainly live.
    pub lease_calls_judged: usize,
    /// Acknowledged revokes.
    pub revokes: usize,
    /// Calls on a revoked lease's locks, or on the lease, invoked after its
    /// acknowledged revoke (each judged by rule 6).
    pub calls_after_revoke: usize,
    /// Names taken shared or as a semaphore (several holders at once).
    pub shared_names: usize,
    /// Shared grants with a certain window.
    pub shared_windows: usize,
    /// Permits with a certain window.
    pub permit_windows: usize,
    /// Instants (the start of a permit's certain window) at which a
    /// semaphore was certainly full: as many permits certainly held as it
    /// has, each judged by rule 7.
    pub semaphore_full: usize,
    /// Leaderships (docs/contract.md C24) with a certain window.
    pub leader_windows: usize,
}

impl fmt::Display for Coverage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "leases acknowledged {}, with a certain window {}; calls judged against a held lease {} \
             ({} across a kill); token comparisons {}; timed-out waiters judged {}; \
             leases granted {}, locks under them {} ({} with a certain window), \
             lease calls judged {}, revokes {} with {} calls judged after them; \
             names with several holders {}, shared windows {}, permit windows {}, \
             semaphore certainly full {} times; leader windows {}",
            self.leases,
            self.leases_with_window,
            self.calls_judged,
            self.calls_judged_after_kill,
            self.token_comparisons,
            self.waits_judged,
            self.lease_grants,
            self.lease_locks,
            self.lease_locks_with_window,
            self.lease_calls_judged,
            self.revokes,
            self.calls_after_revoke,
            self.shared_names,
            self.shared_windows,
            self.permit_windows,
            self.semaphore_full,
            self.leader_windows
        )
    }
}

/// The checker's result.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Every violation found.
    pub violations: Vec<Violation>,
    /// What was checked.
    pub coverage: Coverage,
}

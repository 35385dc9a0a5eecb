//! What a run saw, counted ([`Tally`]).

use std::fmt;

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
    /// Fresh shared grants (rule 12); also counted in `fresh`.
    pub shared: u64,
    /// Fresh permits (rule 12); also counted in `fresh`.
    pub permits: u64,
    /// Fresh grants made while the name had other members (live holders
    /// or places held back).
    pub beside: u64,
    /// Well-formed locks refused `invalid_argument` for their mode or kind
    /// (rules 12, 13, and a lease's lock taken shared).
    pub claim_refused: u64,
    /// `describe` answers; of them, with several holders, and with a
    /// lock-delay in force.
    pub described: u64,
    /// `describe` answers with several holders.
    pub described_several: u64,
    /// `describe` answers with a lock-delay in force.
    pub described_delayed: u64,
    /// Successful force-unlocks (rule 14).
    pub forced: u64,
    /// `busy` answers naming a place held back by a lock-delay (rule 15).
    pub busy_delayed: u64,
    /// Fresh leaderships (rule 16); also counted in `fresh`.
    pub leaders: u64,
    /// Successful proclaims.
    pub proclaimed: u64,
    /// `leader` answers that found a leader.
    pub leader_reads: u64,
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
        self.shared += other.shared;
        self.permits += other.permits;
        self.beside += other.beside;
        self.claim_refused += other.claim_refused;
        self.described += other.described;
        self.described_several += other.described_several;
        self.described_delayed += other.described_delayed;
        self.forced += other.forced;
        self.busy_delayed += other.busy_delayed;
        self.leaders += other.leaders;
        self.proclaimed += other.proclaimed;
        self.leader_reads += other.leader_reads;
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
             {} expired holding locks, {} carried across a restart; \
             claims: {} shared, {} permits, {} granted beside other members, {} refused \
             for their mode or kind; {} describes ({} with several holders, {} with a delay); \
             {} force-unlocks; {} busy naming a place held back; elections: {} leaders, \
             {} proclaims, {} leader reads",
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
            self.leases_survived_restart,
            self.shared,
            self.permits,
            self.beside,
            self.claim_refused,
            self.described,
            self.described_several,
            self.described_delayed,
            self.forced,
            self.busy_delayed,
            self.leaders,
            self.proclaimed,
            self.leader_reads
        )
    }
}

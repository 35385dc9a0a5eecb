//! The checker against hand-written histories: each rule's violation is
//! caught, and legitimate histories (unknown outcomes, expiry hand-offs,
//! kills, leases) are clean.

use std::time::{SystemTime, UNIX_EPOCH};

use super::*;

/// Shared locks and semaphores.
mod claims;

/// A hand-written history: ops are added with explicit times.
#[derive(Default)]
struct H(History);

impl H {
    #[allow(clippy::too_many_arguments)]
    fn op(&mut self, inv: u64, comp: u64, owner: &str, kind: OpKind, outcome: Outcome) {
        self.op_on("n", inv, comp, owner, kind, outcome);
    }

    fn op_on(
        &mut self,
        name: &str,
        inv: u64,
        comp: u64,
        owner: &str,
        kind: OpKind,
        outcome: Outcome,
    ) {
        let client = owner.bytes().map(u32::from).sum();
        self.0.ops.push(Op {
            client,
            kind,
            name: name.to_string(),
            owner: owner.to_string(),
            invoke_ms: inv,
            complete_ms: comp,
            outcome,
        });
    }

    fn kill(&mut self, started_ms: u64, done_ms: u64) {
        self.0.kills.push(Kill {
            started_ms,
            done_ms,
        });
    }

    fn rules(&self) -> Vec<Rule> {
        let mut rules: Vec<Rule> = check(&self.0).into_iter().map(|v| v.rule).collect();
        rules.sort();
        rules.dedup();
        rules
    }

    fn assert_clean(&self) {
        let v = check(&self.0);
        assert!(
            v.is_empty(),
            "{}",
            v.iter().map(|v| format!("{v}\n")).collect::<String>()
        );
    }
}

fn lock(ttl_ms: u64) -> OpKind {
    lock_wait(ttl_ms, 0)
}
fn lock_wait(ttl_ms: u64, wait_ms: u64) -> OpKind {
    OpKind::Lock {
        ttl_ms,
        wait_ms,
        claim: lockd_core::Claim::Exclusive,
    }
}
fn unlock(token: u64) -> OpKind {
    OpKind::Unlock { token: Some(token) }
}
fn ok(token: u64, expires_at_ms: u64) -> Outcome {
    Outcome::Ok {
        token,
        expires_at_ms,
    }
}
fn busy(owner: &str, token: u64, expires_at_ms: u64) -> Outcome {
    Outcome::Busy {
        owner: owner.to_string(),
        token,
        expires_at_ms,
    }
}
fn found(owner: &str, token: u64, expires_at_ms: u64) -> Outcome {
    Outcome::Found {
        owner: owner.to_string(),
        token,
        expires_at_ms,
    }
}

// ---- negative controls -------------------------------------------

/// A persistent grant vanishes across a kill (what `--store memory`
/// does): `get` says free, and another owner is granted it.
#[test]
fn lost_grant_is_caught() {
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(10_000), ok(10, 11_005));
    h.op(1_100, 1_105, "", OpKind::Get, found("a", 10, 11_005));
    h.kill(2_000, 2_010);
    h.op(3_000, 3_004, "", OpKind::Get, Outcome::NotFound);
    assert_eq!(h.rules(), vec![Rule::LostGrant]);

    // The same, seen through busy naming someone else.
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(10_000), ok(10, 11_005));
    h.op(3_000, 3_004, "c", lock(1_000), busy("b", 12, 9_000));
    assert_eq!(h.rules(), vec![Rule::LostGrant]);

    // And through the holder's own extend.
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(10_000), ok(10, 11_005));
    h.op(
        3_000,
        3_004,
        "a",
        OpKind::Extend { ttl_ms: 5_000 },
        Outcome::NotHeld,
    );
    assert_eq!(h.rules(), vec![Rule::LostGrant]);

    // An acknowledged extend that is lost: the lock expires at the old
    // deadline while the client was promised the new one.
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(1_000), ok(10, 2_005));
    h.op(
        1_500,
        1_510,
        "a",
        OpKind::Extend { ttl_ms: 10_000 },
        ok(10, 11_505),
    );
    h.kill(1_600, 1_610);
    h.op(3_000, 3_004, "", OpKind::Get, Outcome::NotFound);
    assert_eq!(h.rules(), vec![Rule::LostGrant]);
}

#[test]
fn regressed_token_is_caught() {
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(500), ok(10, 1_505));
    h.op(1_100, 1_110, "a", unlock(10), Outcome::Unlocked);
    h.kill(1_200, 1_210);
    h.op(1_300, 1_310, "b", lock(500), ok(7, 1_805));
    assert_eq!(h.rules(), vec![Rule::TokenOrder]);

    // Reused by another owner.
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(500), ok(10, 1_505));
    h.op(2_000, 2_010, "b", lock(500), ok(10, 2_505));
    assert_eq!(h.rules(), vec![Rule::TokenOrder]);

    // Seen going backwards by a get.
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(500), ok(10, 1_505));
    h.op(2_000, 2_010, "", OpKind::Get, found("b", 9, 2_505));
    assert_eq!(h.rules(), vec![Rule::TokenOrder]);
}

#[test]
fn overlap_is_caught() {
    // b is granted while a certainly holds it.
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(5_000), ok(10, 6_005));
    h.op(2_000, 2_010, "b", lock(5_000), ok(11, 7_005));
    assert_eq!(h.rules(), vec![Rule::Overlap]);

    // Two certain windows intersect, though neither call lies inside the
    // other's window (b's grant was slow to answer).
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(5_000), ok(10, 6_005));
    h.op(900, 2_000, "b", lock(5_000), ok(11, 6_990));
    assert_eq!(h.rules(), vec![Rule::Overlap]);

    // A stale token unlocks a newer grant (etcd#22082).
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(5_000), ok(10, 6_005));
    h.op(2_000, 2_010, "a", unlock(9), Outcome::Unlocked);
    assert_eq!(h.rules(), vec![Rule::Overlap]);
}

#[test]
fn lost_unlock_is_caught() {
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(5_000), ok(10, 6_005));
    h.op(1_100, 1_110, "a", unlock(10), Outcome::Unlocked);
    h.kill(1_200, 1_210);
    h.op(1_300, 1_310, "", OpKind::Get, found("a", 10, 6_005));
    assert_eq!(h.rules(), vec![Rule::LostUnlock]);
}

/// w1 queues behind h; w2 queues after w1, yet is handed the lock when
/// h unlocks, and w1 times out.
#[test]
fn out_of_order_wake_is_caught() {
    let mut h = H::default();
    h.op(0, 10, "h", lock(5_000), ok(1, 5_005));
    h.op(100, 612, "w1", lock_wait(1_000, 500), busy("w2", 2, 1_400));
    // Queue interval of w1: [612 - 500 + 50, 100 + 500 - 50] = [162, 550].
    h.op(200, 205, "", OpKind::Get, found("h", 1, 5_005));
    h.op(250, 402, "w2", lock_wait(1_000, 400), ok(2, 1_400));
    h.op(300, 310, "h", unlock(1), Outcome::Unlocked);
    assert_eq!(h.rules(), vec![Rule::FifoOrder]);

    // w2 came with wait 0 when the lock was free: still a barge.
    let mut h = H::default();
    h.op(0, 10, "h", lock(5_000), ok(1, 5_005));
    h.op(100, 612, "w1", lock_wait(1_000, 500), busy("w2", 2, 1_400));
    h.op(200, 205, "", OpKind::Get, found("h", 1, 5_005));
    h.op(300, 310, "h", unlock(1), Outcome::Unlocked);
    h.op(320, 330, "w2", lock(1_000), ok(2, 1_325));
    assert_eq!(h.rules(), vec![Rule::FifoOrder]);

    // Not woken at all: the lock sat free while w1 waited.
    let mut h = H::default();
    h.op(0, 10, "h", lock(5_000), ok(1, 5_005));
    h.op(100, 612, "w1", lock_wait(1_000, 500), busy("x", 3, 1_400));
    h.op(300, 310, "h", unlock(1), Outcome::Unlocked);
    h.op(320, 325, "", OpKind::Get, Outcome::NotFound);
    assert_eq!(h.rules(), vec![Rule::FifoOrder]);
}

fn grant(lease_id: &str, expires_at_ms: u64) -> Outcome {
    Outcome::LeaseGranted {
        lease_id: lease_id.to_string(),
        expires_at_ms,
    }
}
fn refreshed(expires_at_ms: u64) -> Outcome {
    Outcome::LeaseRefreshed { expires_at_ms }
}
fn lease_found(expires_at_ms: u64, locks: &[&str]) -> Outcome {
    Outcome::LeaseFound {
        expires_at_ms,
        locks: locks.iter().map(|n| n.to_string()).collect(),
    }
}

impl H {
    /// A lease call: it names no lock; `owner` is the lease id.
    fn lease(&mut self, inv: u64, comp: u64, id: &str, kind: OpKind, outcome: Outcome) {
        self.op_on("", inv, comp, id, kind, outcome);
    }
}

/// `lease-1`, granted at 1_000..1_010 until 2_005, holding `x` (token 10)
/// and `y` (token 11), acknowledged by 1_130.
fn leased() -> H {
    let mut h = H::default();
    h.lease(
        1_000,
        1_010,
        "",
        OpKind::LeaseGrant { ttl_ms: 1_000 },
        grant("lease-1", 2_005),
    );
    h.op_on("x", 1_100, 1_110, "lease-1", lock(1_000), ok(10, 2_005));
    h.op_on("y", 1_120, 1_130, "lease-1", lock(1_000), ok(11, 2_005));
    h
}

/// Rule 6: after an acknowledged revoke, one of the lease's locks is
/// still seen held by it (a revoke that is not one atomic step), or the
/// lease is found live.
#[test]
fn held_after_revoke_is_caught() {
    let revoked = Outcome::LeaseRevoked { released: 2 };
    let mut h = leased();
    h.lease(
        1_500,
        1_510,
        "lease-1",
        OpKind::LeaseRevoke,
        revoked.clone(),
    );
    h.op_on("x", 1_600, 1_605, "", OpKind::Get, Outcome::NotFound);
    h.op_on(
        "y",
        1_600,
        1_605,
        "",
        OpKind::Get,
        found("lease-1", 11, 2_005),
    );
    assert_eq!(h.rules(), vec![Rule::HeldAfterRevoke]);

    // Seen through a busy.
    let mut h = leased();
    h.lease(
        1_500,
        1_510,
        "lease-1",
        OpKind::LeaseRevoke,
        revoked.clone(),
    );
    h.op_on(
        "y",
        1_600,
        1_605,
        "b",
        lock(1_000),
        busy("lease-1", 11, 2_005),
    );
    assert_eq!(h.rules(), vec![Rule::HeldAfterRevoke]);

    // The lease itself refreshed after its revoke.
    let mut h = leased();
    h.lease(1_500, 1_510, "lease-1", OpKind::LeaseRevoke, revoked);
    h.lease(
        1_600,
        1_605,
        "lease-1",
        OpKind::LeaseRefresh,
        refreshed(2_600),
    );
    assert_eq!(h.rules(), vec![Rule::HeldAfterRevoke]);
}

/// Rule 1 under a lease: a lock lost before the lease's expiry, which a
/// refresh moved.
#[test]
fn lease_lock_lost_before_its_expiry_is_caught() {
    // Seen free after the first expiry, before the refreshed one.
    let mut h = leased();
    h.lease(
        1_500,
        1_510,
        "lease-1",
        OpKind::LeaseRefresh,
        refreshed(2_505),
    );
    h.op_on("x", 2_200, 2_205, "", OpKind::Get, Outcome::NotFound);
    assert_eq!(h.rules(), vec![Rule::LostGrant]);

    // Held by another while the lease is live, across a kill.
    let mut h = leased();
    h.kill(1_300, 1_310);
    h.op_on("y", 1_400, 1_410, "b", lock(1_000), ok(12, 2_405));
    assert_eq!(h.rules(), vec![Rule::Overlap]);

    // A refresh of the certainly live lease answers not_held.
    let mut h = leased();
    h.lease(
        1_500,
        1_510,
        "lease-1",
        OpKind::LeaseRefresh,
        Outcome::NotHeld,
    );
    assert_eq!(h.rules(), vec![Rule::LostGrant]);

    // So does a lock under it.
    let mut h = leased();
    h.op_on("z", 1_500, 1_510, "lease-1", lock(1_000), Outcome::NotHeld);
    assert_eq!(h.rules(), vec![Rule::LostGrant]);

    // The lease's get leaves out a lock it certainly holds.
    let mut h = leased();
    h.lease(
        1_500,
        1_510,
        "lease-1",
        OpKind::LeaseGet,
        lease_found(2_005, &["x"]),
    );
    assert_eq!(h.rules(), vec![Rule::LostGrant]);
}

/// Rule 3 with leases: a plain grant after a revoke carries a token
/// below the lease lock's.
#[test]
fn lease_token_going_back_is_caught() {
    let mut h = leased();
    h.lease(
        1_500,
        1_510,
        "lease-1",
        OpKind::LeaseRevoke,
        Outcome::LeaseRevoked { released: 2 },
    );
    h.kill(1_520, 1_530);
    h.op_on("x", 1_600, 1_610, "b", lock(1_000), ok(9, 2_605));
    assert_eq!(h.rules(), vec![Rule::TokenOrder]);
}

/// Legitimate lease histories: refreshes, a kill, expiry take-over,
/// revoke then hand-over, an unknown revoke, an unlock by the lease id.
/// One history, so that the coverage counts them all.
#[test]
fn legitimate_lease_histories_are_clean() {
    let mut h = leased();
    refresh_across_a_kill_then_expire(&mut h);
    revoke_then_hand_over(&mut h);
    revoke_of_unknown_outcome(&mut h);
    unlock_by_the_lease_id(&mut h);
    h.assert_clean();
    let coverage = check_report(&h.0).coverage;
    assert_eq!(coverage.lease_grants, 4, "{coverage}");
    assert_eq!(coverage.lease_locks, 6, "{coverage}");
    assert_eq!(coverage.revokes, 1, "{coverage}");
    assert!(coverage.calls_after_revoke >= 3, "{coverage}");
    assert_eq!(coverage.lease_calls_judged, 10, "{coverage}");
}

/// `lease-1` (of [`leased`]) is refreshed, its locks seen held across a
/// kill, then it is not refreshed again: it expires and `x` passes on.
fn refresh_across_a_kill_then_expire(h: &mut H) {
    h.lease(
        1_500,
        1_510,
        "lease-1",
        OpKind::LeaseRefresh,
        refreshed(2_505),
    );
    h.op_on(
        "x",
        1_600,
        1_605,
        "",
        OpKind::Get,
        found("lease-1", 10, 2_505),
    );
    h.op_on(
        "y",
        1_700,
        1_705,
        "b",
        lock(1_000),
        busy("lease-1", 11, 2_505),
    );
    // Its own relock: the grant unchanged.
    h.op_on("y", 1_750, 1_755, "lease-1", lock(1_000), ok(11, 2_505));
    h.kill(1_800, 1_810);
    h.op_on(
        "y",
        1_850,
        1_855,
        "",
        OpKind::Get,
        found("lease-1", 11, 2_505),
    );
    h.lease(
        1_900,
        1_905,
        "lease-1",
        OpKind::LeaseGet,
        lease_found(2_505, &["x", "y"]),
    );
    // Not refreshed again: it expires at 2_505 and x passes on.
    h.op_on("x", 2_600, 2_610, "b", lock(1_000), ok(12, 3_605));
    h.lease(
        2_700,
        2_705,
        "lease-1",
        OpKind::LeaseRefresh,
        Outcome::NotHeld,
    );
}

/// `lease-2` is revoked: its lock is free at once and passes on.
fn revoke_then_hand_over(h: &mut H) {
    h.lease(
        3_000,
        3_010,
        "",
        OpKind::LeaseGrant { ttl_ms: 5_000 },
        grant("lease-2", 8_005),
    );
    h.op_on("z", 3_100, 3_110, "lease-2", lock(5_000), ok(13, 8_005));
    h.lease(
        3_200,
        3_210,
        "lease-2",
        OpKind::LeaseRevoke,
        Outcome::LeaseRevoked { released: 1 },
    );
    h.op_on("z", 3_300, 3_305, "", OpKind::Get, Outcome::NotFound);
    h.op_on("z", 3_400, 3_410, "b", lock(1_000), ok(14, 4_405));
    h.op_on("z", 3_450, 3_460, "lease-2", lock(5_000), Outcome::NotHeld);
}

/// A revoke of `lease-3` of unknown outcome may have freed its lock.
fn revoke_of_unknown_outcome(h: &mut H) {
    h.lease(
        4_000,
        4_010,
        "",
        OpKind::LeaseGrant { ttl_ms: 5_000 },
        grant("lease-3", 9_005),
    );
    h.op_on("w", 4_100, 4_110, "lease-3", lock(5_000), ok(15, 9_005));
    h.lease(
        4_200,
        4_300,
        "lease-3",
        OpKind::LeaseRevoke,
        Outcome::Unknown,
    );
    h.op_on("w", 4_400, 4_405, "", OpKind::Get, Outcome::NotFound);
}

/// One lock of `lease-4` unlocked by the lease id; the lease lives on.
fn unlock_by_the_lease_id(h: &mut H) {
    h.lease(
        5_000,
        5_010,
        "",
        OpKind::LeaseGrant { ttl_ms: 5_000 },
        grant("lease-4", 10_005),
    );
    h.op_on("u", 5_100, 5_110, "lease-4", lock(5_000), ok(16, 10_005));
    h.op_on("v", 5_120, 5_130, "lease-4", lock(5_000), ok(17, 10_005));
    h.op_on("v", 5_200, 5_210, "lease-4", unlock(17), Outcome::Unlocked);
    h.op_on("v", 5_300, 5_305, "", OpKind::Get, Outcome::NotFound);
    h.lease(
        5_400,
        5_405,
        "lease-4",
        OpKind::LeaseGet,
        lease_found(10_005, &["u"]),
    );
}

// ---- legitimate histories ------------------------------------------

#[test]
fn valid_history_is_clean() {
    let mut h = H::default();
    // Idempotent relocks: same token, refreshed expiry.
    h.op(1_000, 1_010, "a", lock(1_000), ok(10, 2_005));
    h.op(1_100, 1_110, "a", lock(2_000), ok(10, 3_105));
    h.op(1_200, 1_205, "", OpKind::Get, found("a", 10, 3_105));
    h.op(1_300, 1_305, "b", lock(1_000), busy("a", 10, 3_105));
    h.op(
        1_400,
        1_410,
        "a",
        OpKind::Extend { ttl_ms: 3_000 },
        ok(10, 4_405),
    );
    // A kill; the persistent lock survives with its token.
    h.kill(1_500, 1_520);
    h.op(1_600, 1_605, "", OpKind::Get, found("a", 10, 4_405));
    // A relock cut off by a kill (unknown) may have shortened it to
    // 2_000 + 300: after that, b may hold it.
    h.op(2_000, 2_100, "a", lock(300), Outcome::Unknown);
    h.kill(2_050, 2_110);
    h.op(2_400, 2_410, "b", lock(1_000), ok(11, 3_405));
    h.op(2_500, 2_505, "", OpKind::Get, found("b", 11, 3_405));
    // An unlock of unknown outcome: free or still held, either is fine.
    h.op(2_600, 2_650, "b", unlock(11), Outcome::Unknown);
    h.op(2_700, 2_705, "", OpKind::Get, Outcome::NotFound);
    h.op(2_710, 2_715, "", OpKind::Get, Outcome::NotFound);
    // Expiry take-over: c's lease runs out, d takes it.
    h.op(3_000, 3_010, "c", lock(200), ok(12, 3_205));
    h.op(3_300, 3_310, "d", lock(1_000), ok(13, 4_305));
    // A grant nobody acknowledged is seen, then lost in a kill; its token
    // is issued again (allowed: it was never acknowledged).
    h.op(3_400, 3_410, "d", unlock(13), Outcome::Unlocked);
    h.op(3_500, 3_600, "e", lock(1_000), Outcome::Unknown);
    h.op(3_520, 3_525, "", OpKind::Get, found("e", 14, 4_505));
    h.kill(3_550, 3_560);
    h.op(3_700, 3_710, "f", lock(500), ok(14, 4_205));
    h.op(3_800, 3_805, "f", lock(500), ok(14, 4_302));
    h.op(3_900, 3_910, "f", unlock(14), Outcome::Unlocked);
    h.op(3_920, 3_925, "f", unlock(14), Outcome::NotHeld);
    // A stale unlock of an old token is refused.
    h.op(3_950, 3_960, "g", lock(1_000), ok(15, 4_955));
    h.op(3_970, 3_980, "a", unlock(10), Outcome::NotOwner);
    h.op(3_990, 3_995, "g", unlock(15), Outcome::Unlocked);
    h.assert_clean();
}

#[test]
fn legitimate_waits_are_clean() {
    let mut h = H::default();
    // w0 queued before w1; h unlocks; w0 (ahead) is woken; w1 times out.
    h.op(0, 10, "h", lock(5_000), ok(1, 5_005));
    h.op(50, 330, "w0", lock_wait(1_000, 800), ok(2, 1_310));
    h.op(100, 612, "w1", lock_wait(1_000, 500), busy("w0", 2, 1_310));
    h.op(200, 205, "", OpKind::Get, found("h", 1, 5_005));
    h.op(300, 310, "h", unlock(1), Outcome::Unlocked);
    h.op(400, 405, "", OpKind::Get, found("w0", 2, 1_310));
    // The holder's relock while w1 waits is no wake-up.
    h.op(450, 460, "w0", lock(1_000), ok(2, 1_455));
    // An earlier waiter whose outcome is unknown may still sit in the
    // queue ahead of w3 and be granted.
    h.op(2_000, 2_010, "p", lock(1_000), ok(3, 3_005));
    h.op(2_050, 2_100, "q", lock_wait(1_000, 2_000), Outcome::Unknown);
    h.op(
        2_100,
        2_620,
        "w3",
        lock_wait(1_000, 500),
        busy("q", 4, 3_700),
    );
    h.op(2_200, 2_205, "", OpKind::Get, found("p", 3, 3_005));
    h.op(2_300, 2_310, "p", unlock(3), Outcome::Unlocked);
    h.op(2_400, 2_405, "", OpKind::Get, found("q", 4, 3_700));
    // Expiry hand-off to a waiter that was ahead.
    h.op(5_000, 5_010, "r", lock(300), ok(5, 5_305));
    h.op(5_050, 5_310, "s", lock_wait(1_000, 1_000), ok(6, 6_306));
    h.op(
        5_100,
        5_620,
        "t",
        lock_wait(1_000, 500),
        busy("s", 6, 6_306),
    );
    h.op(5_200, 5_205, "", OpKind::Get, found("r", 5, 5_305));
    h.assert_clean();
}

#[test]
fn unknown_outcomes_only_weaken_the_checks() {
    // An extend of unknown outcome, cut off by a kill, may have shortened
    // the lease to 2_000 + 100: from then on, free is a fine answer.
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(10_000), ok(10, 11_005));
    h.op(
        2_000,
        2_500,
        "a",
        OpKind::Extend { ttl_ms: 100 },
        Outcome::Unknown,
    );
    h.kill(2_450, 2_510);
    h.op(3_000, 3_004, "", OpKind::Get, Outcome::NotFound);
    h.op(3_100, 3_110, "b", lock(1_000), ok(11, 4_105));
    h.assert_clean();

    // But if the owner's relock, made after that kill, still returns the
    // token, the lease was never lost: held throughout, free is wrong.
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(10_000), ok(10, 11_005));
    h.op(
        2_000,
        2_500,
        "a",
        OpKind::Extend { ttl_ms: 100 },
        Outcome::Unknown,
    );
    h.kill(2_450, 2_510);
    h.op(3_000, 3_004, "", OpKind::Get, Outcome::NotFound);
    h.op(3_200, 3_210, "a", lock(5_000), ok(10, 8_205));
    assert_eq!(h.rules(), vec![Rule::LostGrant]);

    // Without a kill the unknown extend might still be in flight at the
    // server at any later time, so it is never overridden.
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(10_000), ok(10, 11_005));
    h.op(
        2_000,
        2_500,
        "a",
        OpKind::Extend { ttl_ms: 100 },
        Outcome::Unknown,
    );
    h.op(3_000, 3_004, "", OpKind::Get, Outcome::NotFound);
    h.op(3_200, 3_210, "a", lock(5_000), ok(10, 8_205));
    h.op(3_300, 3_304, "", OpKind::Get, found("a", 10, 8_205));
    h.assert_clean();

    // An unlock of unknown outcome ends the certain window, unless a
    // later setting shows it did not release the lease.
    let mut h = H::default();
    h.op(1_000, 1_010, "a", lock(10_000), ok(10, 11_005));
    h.op(2_000, 2_500, "a", unlock(10), Outcome::Unknown);
    h.op(3_000, 3_004, "", OpKind::Get, Outcome::NotFound);
    h.assert_clean();
    h.kill(2_450, 2_510);
    h.op(3_200, 3_210, "a", lock(5_000), ok(10, 8_205));
    assert_eq!(h.rules(), vec![Rule::LostGrant]);
}

#[test]
fn names_are_independent_and_summary_counts() {
    let mut h = H::default();
    h.op_on("x", 1_000, 1_010, "a", lock(5_000), ok(10, 6_005));
    h.op_on("y", 1_100, 1_110, "b", lock(5_000), ok(11, 6_105));
    h.op_on("y", 1_200, 1_210, "", OpKind::Get, found("b", 11, 6_105));
    h.assert_clean();
    let report = check_report(&h.0);
    assert_eq!(report.coverage.leases, 2);
    assert_eq!(report.coverage.calls_judged, 1);
    let summary = h.0.summary();
    assert!(summary.contains("lock       ok         2"), "{summary}");
    assert!(summary.contains("kills: 0"), "{summary}");
}

#[test]
fn recorder_times_bracket_the_call() {
    let rec = Recorder::new();
    let inv = rec.invoke();
    rec.complete(1, OpKind::Get, "n", "", inv, Outcome::NotFound);
    let started = rec.kill_started();
    rec.kill_done(started);
    let h = rec.history();
    assert_eq!(h.ops.len(), 1);
    assert!(h.ops[0].complete_ms >= h.ops[0].invoke_ms);
    assert!(h.kills[0].done_ms >= h.kills[0].started_ms);
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(wall.abs_diff(rec.clock().floor_ms()) < 1_000);
}

//! Shared grants and permits (docs/contract.md C21, C22): legitimate
//! histories with several holders are clean; more permits than the
//! semaphore has, or an exclusive grant beside a shared one, are caught.

use lockd_core::Claim;

use super::*;

fn take(claim: Claim, ttl_ms: u64) -> OpKind {
    OpKind::Lock {
        ttl_ms,
        wait_ms: 0,
        claim,
    }
}
fn permit(ttl_ms: u64) -> OpKind {
    take(Claim::Permit { permits: 2 }, ttl_ms)
}
fn shared(ttl_ms: u64) -> OpKind {
    take(Claim::Shared, ttl_ms)
}

/// A semaphore of 2 permits: two holders at once, a third `busy`, a
/// release that lets the third in, a kill the permits survive, and a
/// `busy` naming an older permit still held after a newer one was
/// released (the most recent grant *still held*).
#[test]
fn a_legitimate_semaphore_history_is_clean() {
    let mut h = H::default();
    h.op(1_000, 1_010, "a", permit(5_000), ok(10, 6_005));
    h.op(1_100, 1_110, "b", permit(5_000), ok(11, 6_105));
    h.op(1_200, 1_210, "c", permit(5_000), busy("b", 11, 6_105));
    h.op(1_300, 1_305, "", OpKind::Get, found("b", 11, 6_105));
    h.op(
        1_400,
        1_410,
        "b",
        OpKind::Extend { ttl_ms: 5_000 },
        ok(11, 6_405),
    );
    h.op(1_500, 1_510, "a", unlock(10), Outcome::Unlocked);
    h.op(1_600, 1_610, "c", permit(5_000), ok(12, 6_605));
    h.op(1_700, 1_705, "d", permit(5_000), busy("c", 12, 6_605));
    h.kill(1_800, 1_810);
    h.op(2_000, 2_005, "", OpKind::Get, found("c", 12, 6_605));
    h.op(2_100, 2_110, "c", unlock(12), Outcome::Unlocked);
    h.op(2_200, 2_210, "d", permit(5_000), busy("b", 11, 6_405));
    h.op(2_300, 2_310, "d", permit(5_000), ok(13, 7_305));
    h.op(2_400, 2_405, "", OpKind::Get, found("d", 13, 7_305));
    // b's relock answers its own, older token after d's grant.
    h.op(2_500, 2_510, "b", permit(5_000), ok(11, 7_505));
    h.assert_clean();
    let coverage = check_report(&h.0).coverage;
    assert_eq!(coverage.shared_names, 1);
    assert_eq!(coverage.permit_windows, 4);
    // Full when b joined a, when c joined b, and when d joined b.
    assert_eq!(coverage.semaphore_full, 3);
    assert!(coverage.calls_judged_after_kill > 0, "{coverage}");
    let summary = h.0.summary();
    assert!(summary.contains("permit     busy       3"), "{summary}");
}

/// Negative control: a fresh permit whose token is below one acknowledged
/// before it was asked for.
#[test]
fn a_fresh_permit_with_an_older_token_is_caught() {
    let mut h = H::default();
    h.op(1_000, 1_010, "a", permit(500), ok(10, 1_505));
    h.op(1_100, 1_110, "a", unlock(10), Outcome::Unlocked);
    h.op(1_200, 1_210, "b", permit(500), ok(9, 1_705));
    assert_eq!(h.rules(), vec![Rule::TokenOrder]);
}

/// Readers together, a writer `busy` until the last reader leaves (naming
/// the older reader once the newer one left), then the writer alone.
#[test]
fn a_legitimate_shared_history_is_clean() {
    let mut h = H::default();
    h.op(1_000, 1_010, "r1", shared(5_000), ok(20, 6_005));
    h.op(1_100, 1_110, "r2", shared(5_000), ok(21, 6_105));
    h.op(1_200, 1_205, "", OpKind::Get, found("r2", 21, 6_105));
    h.op(1_300, 1_310, "w", lock(5_000), busy("r2", 21, 6_105));
    h.op(1_400, 1_410, "r2", unlock(21), Outcome::Unlocked);
    h.op(1_500, 1_510, "w", lock(5_000), busy("r1", 20, 6_005));
    h.op(1_600, 1_610, "r1", unlock(20), Outcome::Unlocked);
    h.op(1_700, 1_710, "w", lock(5_000), ok(22, 6_705));
    h.op(1_800, 1_810, "r3", shared(5_000), busy("w", 22, 6_705));
    h.op(1_900, 1_905, "", OpKind::Get, found("w", 22, 6_705));
    h.assert_clean();
    assert_eq!(check_report(&h.0).coverage.shared_windows, 2);
}

/// Negative control: three permits of a semaphore of two, certainly held
/// at once.
#[test]
fn more_holders_than_permits_are_caught() {
    let mut h = H::default();
    h.op(1_000, 1_010, "a", permit(5_000), ok(10, 6_005));
    h.op(1_100, 1_110, "b", permit(5_000), ok(11, 6_105));
    h.assert_clean();
    h.op(1_200, 1_210, "c", permit(5_000), ok(12, 6_205));
    assert_eq!(h.rules(), vec![Rule::OverPermits]);

    // The same across a kill: a's and b's permits survive it, and a third
    // is granted beside them after the restart.
    let mut h = H::default();
    h.op(1_000, 1_010, "a", permit(5_000), ok(10, 6_005));
    h.op(1_100, 1_110, "b", permit(5_000), ok(11, 6_105));
    h.kill(1_500, 1_510);
    h.op(2_000, 2_010, "c", permit(5_000), ok(12, 7_005));
    assert_eq!(h.rules(), vec![Rule::OverPermits]);
}

/// Negative controls: an exclusive grant made while a shared grant is
/// certainly held, and a shared grant made while an exclusive one is.
#[test]
fn an_exclusive_grant_beside_a_shared_one_is_caught() {
    let mut h = H::default();
    h.op(1_000, 1_010, "r", shared(5_000), ok(10, 6_005));
    h.op(1_100, 1_110, "w", lock(5_000), ok(11, 6_105));
    assert_eq!(h.rules(), vec![Rule::Overlap]);

    let mut h = H::default();
    h.op(1_000, 1_010, "w", lock(5_000), ok(10, 6_005));
    h.op(1_100, 1_110, "r", shared(5_000), ok(11, 6_105));
    assert_eq!(h.rules(), vec![Rule::Overlap]);

    // Shared beside shared is what a read lock is for.
    let mut h = H::default();
    h.op(1_000, 1_010, "r", shared(5_000), ok(10, 6_005));
    h.op(1_100, 1_110, "s", shared(5_000), ok(11, 6_105));
    h.assert_clean();
}

/// A name taken shared keeps rule 1 for what it can prove: free while a
/// reader certainly holds, or a `get` older than a certain grant.
#[test]
fn a_lost_shared_grant_is_caught() {
    let mut h = H::default();
    h.op(1_000, 1_010, "r", shared(5_000), ok(10, 6_005));
    h.op(1_100, 1_110, "s", shared(5_000), ok(11, 6_105));
    h.kill(1_500, 1_510);
    h.op(2_000, 2_005, "", OpKind::Get, found("r", 10, 6_005));
    assert_eq!(h.rules(), vec![Rule::LostGrant]);

    let mut h = H::default();
    h.op(1_000, 1_010, "r", shared(5_000), ok(10, 6_005));
    h.kill(1_500, 1_510);
    h.op(2_000, 2_005, "", OpKind::Get, Outcome::NotFound);
    assert_eq!(h.rules(), vec![Rule::LostGrant]);
}

/// Leaderships (docs/contract.md C24) hold their name alone: a new leader
/// while another certainly leads is caught, as is a leader lost across a
/// kill; leaders in turn, one after the other's resignation, are clean.
#[test]
fn two_leaders_at_once_are_caught_and_leaders_in_turn_are_clean() {
    let campaign = |ttl_ms| take(Claim::Leader, ttl_ms);
    let mut h = H::default();
    h.op(1_000, 1_010, "a", campaign(5_000), ok(10, 6_005));
    h.op(2_000, 2_010, "b", campaign(5_000), ok(11, 7_005));
    assert_eq!(h.rules(), vec![Rule::Overlap]);

    let mut h = H::default();
    h.op(1_000, 1_010, "a", campaign(5_000), ok(10, 6_005));
    h.kill(2_000, 2_010);
    h.op(3_000, 3_005, "", OpKind::Get, Outcome::NotFound);
    assert_eq!(h.rules(), vec![Rule::LostGrant]);

    let mut h = H::default();
    h.op(1_000, 1_010, "a", campaign(5_000), ok(10, 6_005));
    h.op(1_100, 1_110, "b", campaign(5_000), busy("a", 10, 6_005));
    h.op(1_200, 1_205, "", OpKind::Get, found("a", 10, 6_005));
    h.op(2_000, 2_010, "a", unlock(10), Outcome::Unlocked);
    h.op(2_100, 2_110, "b", campaign(5_000), ok(12, 7_105));
    h.kill(3_000, 3_010);
    h.op(3_100, 3_105, "", OpKind::Get, found("b", 12, 7_105));
    h.assert_clean();
}

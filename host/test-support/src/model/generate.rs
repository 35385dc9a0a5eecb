//! The op generator for proptest ([`ops`]), and how many cases to run.

use proptest::prelude::*;

use lockd_core::{Claim, Durability};

use super::ops::*;

fn durability() -> impl Strategy<Value = Durability> {
    prop_oneof![Just(Durability::Persistent), Just(Durability::Ephemeral)]
}

/// Ttls and clock moves lean towards a few milliseconds now and then, so
/// that a move lands exactly on an expiry (the `<=` boundary of rule 1)
/// often, not once in thousands of steps.
fn ttl() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 1..=MAX_GEN_TTL_MS, 1 => 1..=5u64]
}

/// Leases lean longer than plain locks, so that several locks gather under
/// one before it expires; a few milliseconds now and then for the boundary.
fn lease_ttl() -> impl Strategy<Value = u64> {
    prop_oneof![3 => MAX_GEN_TTL_MS / 4..=MAX_GEN_TTL_MS, 1 => 1..=5u64]
}

/// Shared, or a permit: three times in four the name's habit (the first
/// name shared, the second a semaphore of 2, the third of 3), so that
/// holders meet and one too many is refused; otherwise any of them or a
/// semaphore of 1, which the name's kind or size often refuses.
fn claim_for(name: usize) -> impl Strategy<Value = Claim> {
    let habit = match name % 3 {
        0 => Claim::Shared,
        1 => Claim::Permit { permits: 2 },
        _ => Claim::Permit { permits: 3 },
    };
    prop_oneof![
        6 => Just(habit),
        1 => Just(Claim::Shared),
        1 => (1..=3u32).prop_map(|permits| Claim::Permit { permits }),
    ]
}

fn advance() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 0..=MAX_GEN_ADVANCE_MS, 1 => 0..=5u64]
}

/// One generated op; with `restarts`, crash-and-reopen too.
pub fn op(restarts: bool) -> BoxedStrategy<Op> {
    let name = 0..names().len();
    let owner = 0..owners().len();
    let caller = 0..=HOLDER;
    let guard = 0..8usize;
    let token = prop_oneof![
        Just(TokenArg::None),
        Just(TokenArg::Current),
        Just(TokenArg::Stale),
        Just(TokenArg::Future),
    ];
    let call = prop_oneof![
        Just(InvalidCall::Lock),
        Just(InvalidCall::Unlock),
        Just(InvalidCall::Extend),
        Just(InvalidCall::Get),
        Just(InvalidCall::GrantLease),
        Just(InvalidCall::LockInLease),
        Just(InvalidCall::RefreshLease),
        Just(InvalidCall::Permits),
    ];
    // Mostly the latest leases; one in eight the unknown id.
    let lease = 0..=UNKNOWN_LEASE;
    let bad = prop_oneof![
        Just(BadArg::EmptyName),
        Just(BadArg::LongName),
        Just(BadArg::EmptyOwner),
        Just(BadArg::LongOwner),
        Just(BadArg::ZeroTtl),
        Just(BadArg::LongTtl),
        Just(BadArg::HugeTtl),
    ];
    let base = prop_oneof![
        8 => (name.clone(), caller.clone(), ttl(), durability()).prop_map(
            |(name, owner, ttl_ms, durability)| Op::Lock { name, owner, ttl_ms, durability }
        ),
        // Longer ttls, as for leases, so that several holders meet.
        6 => (name.clone().prop_flat_map(|n| (Just(n), claim_for(n))), caller.clone(), lease_ttl(), durability())
            .prop_map(|((name, claim), owner, ttl_ms, durability)| {
                Op::LockAs { name, owner, claim, ttl_ms, durability }
            }),
        // Elections (rule 16): a campaign on any name, so that kinds meet.
        3 => (name.clone(), owner.clone(), 0..=values().len(), lease_ttl(), durability())
            .prop_map(|(name, owner, value, ttl_ms, durability)| {
                Op::Campaign { name, owner, value, ttl_ms, durability }
            }),
        // Mostly by the leader under its token, so that proclaims succeed.
        2 => (
            name.clone(),
            prop_oneof![2 => Just(HOLDER), 1 => caller.clone()],
            prop_oneof![2 => Just(TokenArg::Current), 1 => token.clone()],
            0..values().len(),
        )
            .prop_map(|(name, owner, token, value)| Op::Proclaim { name, owner, token, value }),
        1 => name.clone().prop_map(|name| Op::Leader { name }),
        1 => name.clone().prop_map(|name| Op::Describe { name }),
        1 => name.clone().prop_map(|name| Op::ForceUnlock { name }),
        4 => (name.clone(), caller.clone(), token.clone())
            .prop_map(|(name, owner, token)| Op::Unlock { name, owner, token }),
        3 => (name.clone(), caller, ttl())
            .prop_map(|(name, owner, ttl_ms)| Op::Extend { name, owner, ttl_ms }),
        3 => name.clone().prop_map(|name| Op::Get { name }),
        1 => Just(Op::List),
        3 => (name.clone(), ttl(), durability()).prop_map(|(name, ttl_ms, durability)| {
            Op::GuardAcquire { name, ttl_ms, durability }
        }),
        2 => guard.clone().prop_map(|guard| Op::GuardRelease { guard }),
        2 => guard.clone().prop_map(|guard| Op::GuardIsHeld { guard }),
        1 => guard.prop_map(|guard| Op::GuardDrop { guard }),
        5 => advance().prop_map(|ms| Op::Advance { ms }),
        1 => (call, bad, name.clone(), owner)
            .prop_map(|(call, bad, name, owner)| Op::Invalid { call, bad, name, owner }),
        2 => (lease_ttl(), durability())
            .prop_map(|(ttl_ms, durability)| Op::LeaseGrant { ttl_ms, durability }),
        6 => (name.clone(), lease.clone()).prop_map(|(name, lease)| Op::LeaseLock { name, lease }),
        2 => lease.clone().prop_map(|lease| Op::LeaseRefresh { lease }),
        1 => lease.clone().prop_map(|lease| Op::LeaseRevoke { lease }),
        2 => lease.clone().prop_map(|lease| Op::LeaseGet { lease }),
        1 => (name.clone(), lease.clone(), token.clone())
            .prop_map(|(name, lease, token)| Op::LeaseUnlock { name, lease, token }),
        1 => (name, lease, ttl())
            .prop_map(|(name, lease, ttl_ms)| Op::LeaseExtend { name, lease, ttl_ms }),
    ];
    if restarts {
        prop_oneof![16 => base, 1 => Just(Op::Restart)].boxed()
    } else {
        base.boxed()
    }
}

/// Sequences of up to [`MAX_OPS`] ops; with `restarts`, crash-and-reopen too.
pub fn ops(restarts: bool) -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(restarts), 0..=MAX_OPS)
}

/// How many sequences a property test runs: `PROPTEST_CASES` if set,
/// otherwise `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

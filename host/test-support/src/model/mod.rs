//! A reference model of the lock contract (docs/contract.md), and random
//! operation sequences to check a real store against it.
//!
//! [`Model`] is a deliberately naive, sequential restatement of the
//! contract: a map from name to holder, a clock, and the highest fencing
//! token seen. [`run`] drives a store (through [`LockService`], so limits are
//! checked as every surface checks them) and the model side by side, and
//! fails at the first reply the model does not allow. [`ops`] generates the
//! sequences for proptest; the cargo-fuzz target in `fuzz/` builds the same
//! [`Op`]s from `Arbitrary` bytes.
//!
//! # The rules
//!
//! Each rule is marked `Rule N` where the code states it (mostly in the
//! private `Model::transition`, one arm per call). `now` is the model's
//! clock, moved exactly as the store's [`ManualClock`].
//!
//! 1. **Live.** A holder is live while `now < expires_at`; an expired holder
//!    is free whether or not the store has purged it.
//! 2. **Invalid input.** An empty or over-long name (> 512 bytes) or owner
//!    (> 256 bytes), or a ttl of 0 or above the maximum (24 h), answers
//!    `invalid_argument` with a message, and nothing changes.
//! 3. **Fresh grant.** `lock` on a free name grants it: expiry `now + ttl`,
//!    the durability asked for, and a token the model cannot predict, so it
//!    checks relations: the token is above every token seen for that name
//!    (the contract), and above every token seen at all, before or after any
//!    restart (lockd's one global counter, resumed above its reservation).
//! 4. **Idempotent re-lock.** `lock` by the live holder answers the *same*
//!    token with expiry `now + ttl`; the durability stays what it was.
//! 5. **Busy.** `lock` by another owner (wait 0) answers `busy` with the
//!    holder's owner, token, expiry and durability; nothing changes.
//! 6. **Unlock.** Free: `not_held`. Another owner, or a token that is given
//!    and is not the current one: `not_owner`. Otherwise the name is free.
//! 7. **Extend.** Free: `not_held`. Another owner: `not_owner` (extend takes
//!    no token). Otherwise expiry `now + ttl`, the token unchanged.
//! 8. **Get / list.** The live holder(s), exactly; expired ones are absent.
//! 9. **Guards.** `acquire` is a `lock` under a fresh owner never used
//!    before; `release` is an `unlock` with the guard's token; `drop` is a
//!    `release_detached` with it (frees the name only if the guard still
//!    holds it); `is_held` is true iff the live holder has the guard's owner
//!    *and* token.
//! 10. **Restart** (crash and reopen, persistent stores only). Persistent
//!     live holders survive with owner, token and expiry; ephemeral ones
//!     vanish. A store that keeps nothing loses every holder. Persistent
//!     live leases survive with their latest (refreshed) expiry, and their
//!     locks with them; ephemeral leases and their locks are gone.
//! 11. **Leases** (docs/contract.md#c16-leases). `grant_lease` answers an id
//!     the model cannot predict (`lease-` and 32 lowercase hex digits, never
//!     one seen before; the model maps its handle to it) and expiry
//!     `now + ttl`. A lease is live while not revoked and `now < expiry`.
//!     `lock_in_lease` under a lease that is not live answers `not_held`;
//!     otherwise it is a `lock` whose owner is the lease id, whose expiry and
//!     durability are the lease's (a fresh grant, rule 3), and a lock the
//!     lease already holds answers its grant unchanged. A plain `lock` whose
//!     owner is a live lease's id is the same call (its ttl and durability
//!     are ignored); by a dead lease's id it is an ordinary `lock`. Refresh
//!     of a live lease moves it and every lock under it to `now + ttl`;
//!     revoke frees all its locks and answers how many; both answer
//!     `not_held` otherwise. `get_lease` answers ttl, expiry, durability and
//!     the sorted names of its locks, or nothing. `unlock` by the lease id
//!     frees one lock (rule 6); `extend` of a lock held under a lease answers
//!     `invalid_argument` (after rule 7's `not_held` and `not_owner`).
//!     A lease's locks expire with it (rule 1, one shared expiry).
//!
//! 12. **Shared and permits** (docs/contract.md C21, C22). A name has a
//!     list of grants, each with its own owner, token, expiry, durability
//!     and claim (exclusive, shared, or a permit of a semaphore of N).
//!     `unlock`, `extend`, a re-lock and a detached release act on the
//!     caller's own live grant (rules 4, 6, 7, 9): `not_held` when nobody
//!     holds the name, `not_owner` when others do. An owner asking for
//!     another mode than it holds: `invalid_argument`. A fresh request is
//!     granted when it fits beside the name's *members* (its live grants
//!     and the places held back by rule 15): exclusive when there are none,
//!     shared when all are shared, a permit when fewer than N; otherwise
//!     `busy` with the most recent member (the highest token). `get` is the
//!     most recent live grant; `describe` every live grant by token with
//!     its claim and grant time, no waiters, and the latest end of a
//!     held-back place; a listing shows a name's most recent grant, its
//!     claim, and for a shared name or a semaphore every grant. Leases'
//!     locks are exclusive: a shared or permit `lock` by a live lease's id
//!     is `invalid_argument`. A restart keeps persistent live grants of
//!     every claim (rule 10).
//! 13. **Kinds.** While a name has members it is a lock (exclusive and
//!     shared) or a semaphore of N: a permit of a lock, a lock of a
//!     semaphore, or a permit of another N is `invalid_argument` (a lock
//!     under a lease of a semaphore too). With no member left, the next
//!     grant sets the kind again. A permit count outside 1 to 65 536 is
//!     `invalid_argument` (rule 2).
//! 14. **Force-unlock** (C19). `not_held` when nobody holds the name;
//!     otherwise every live grant is released at once and the reply is the
//!     most recent one.
//! 15. **Lock-delay** (C23), when the run's namespace has one: a grant
//!     that expired holds its place until its expiry plus the delay, one
//!     force-released until the force plus the delay; a release by the
//!     holder (unlock, detached release, lease revoke) holds nothing back.
//!     A held-back place is a member for rules 12 and 13 (shown by `busy`
//!     with the end of its delay as its expiry), not a holder for `get`,
//!     `describe`'s holders, a listing, `unlock` or `extend`. A restart
//!     ends every delay.
//! 16. **Elections** (C24). `campaign` is a `lock` taking the name as its
//!     leader (rules 3–5, 13: an election is its own kind; a lock, a permit
//!     or a lease's lock of an election's name is `invalid_argument`, and so
//!     is a campaign on a lock or a semaphore), with a value of at most
//!     4 096 bytes (over it: `invalid_argument`); the leader's own campaign
//!     is a re-lock that also sets its value. `proclaim` on a lock or a
//!     semaphore is `invalid_argument`, `not_held` with no leader,
//!     `not_owner` by another candidate or under another token, and
//!     otherwise sets the value. `leader` answers the live leader with its
//!     value, token, expiry and grant time (a restart's for a recovered
//!     one), or none; on a lock or a semaphore `invalid_argument`. Unlock,
//!     extend, force-unlock, expiry, lock-delay and restarts treat a
//!     leadership as an exclusive grant.
//!
//! Waiting (`wait > 0`) needs concurrency and is left to the conformance
//! suite's FIFO tests; every generated `lock` uses wait 0.

mod check;
mod generate;
mod ops;
mod reference;
mod tally;
mod transition;

use lockd_core::{Limits, LockDelays, LockService, ManualClock};

use crate::conformance::{StoreFactory, START_MS};

pub use generate::{cases, op, ops};
pub use ops::*;
pub use reference::Model;
pub use tally::Tally;

/// Runs `ops` against a store from `factory` and the model side by side,
/// from a [`ManualClock`] at [`START_MS`]. Fails at the first disagreement,
/// naming the step and listing the whole sequence.
///
/// A restart drops the only handle on the store; `factory` must reopen the
/// same data. Run it on a current-thread runtime, so no task of the store
/// can hold a handle across the drop.
pub async fn run(factory: &dyn StoreFactory, ops: &[Op]) -> Result<Tally, String> {
    run_with_lock_delay(factory, ops, 0).await
}

/// [`run`] with a lock-delay of `lock_delay_ms` for the sequences'
/// namespace (rule 15; 0 for none).
pub async fn run_with_lock_delay(
    factory: &dyn StoreFactory,
    ops: &[Op],
    lock_delay_ms: u64,
) -> Result<Tally, String> {
    let clock = ManualClock::new(START_MS);
    let mut model =
        Model::with_lock_delay(START_MS, factory.keeps_persistent_locks(), lock_delay_ms);
    let delays = LockDelays {
        default_ms: lock_delay_ms,
        per_namespace: Default::default(),
    };
    let open = || async {
        LockService::new(factory.open(clock.clone()).await, Limits::default())
            .with_lock_delays(delays.clone())
    };
    let mut service = open().await;
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Advance { ms } => {
                clock.advance(*ms);
                model.advance(*ms);
            }
            Op::Restart => {
                drop(service);
                service = open().await;
                model.restart();
            }
            _ => {
                let Some(call) = model.resolve(op) else {
                    continue;
                };
                let outcome = execute(&service, &call).await;
                model.check(op, &call, &outcome).map_err(|e| {
                    format!("step {step}: {op:?}\n  call: {call:?}\n  {e}\n  sequence: {ops:?}")
                })?;
            }
        }
    }
    Ok(model.tally())
}

/// The lock-delay of the sequences that run with one
/// ([`check_against_model`]): a fifth of the longest generated ttl, so that
/// calls often land inside a delay and after it.
pub const MODEL_LOCK_DELAY_MS: u64 = MAX_GEN_TTL_MS / 5;

/// Runs [`cases`]`(default_cases)` generated sequences ([`ops`]`(restarts)`)
/// against a fresh store from `factory` each (with `lock_delays`, every
/// other one under a lock-delay of [`MODEL_LOCK_DELAY_MS`]), reports the
/// tally under
/// `label` (stderr and [`report`](crate::report)), and asserts
/// the generator reached every rule, since a run that never exercised a rule
/// proves little. Returns the tally for store-specific checks.
///
/// # Panics
/// At the first sequence where the store and the model disagree, with the
/// shrunk sequence.
pub fn check_against_model<F: StoreFactory>(
    label: &str,
    default_cases: u32,
    restarts: bool,
    lock_delays: bool,
    factory: impl Fn() -> F,
) -> Tally {
    use proptest::prelude::{prop_oneof, Just, Strategy};
    use proptest::test_runner::{Config, TestCaseError, TestRunner};

    // Current-thread: no store task can hold a handle across a restart.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    let cases = cases(default_cases);
    let mut runner = TestRunner::new(Config::with_cases(cases));
    let tally = std::sync::Mutex::new(Tally::default());
    let started = std::time::Instant::now();
    let delay = if lock_delays {
        prop_oneof![Just(0), Just(MODEL_LOCK_DELAY_MS)].boxed()
    } else {
        Just(0).boxed()
    };
    let result = runner.run(&(ops(restarts), delay), |(ops, delay): (Vec<Op>, u64)| {
        let seen = runtime
            .block_on(run_with_lock_delay(&factory(), &ops, delay))
            .map_err(|e| TestCaseError::fail(format!("lock-delay {delay} ms: {e}")))?;
        tally.lock().unwrap_or_else(|e| e.into_inner()).add(&seen);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let tally = tally.into_inner().unwrap_or_else(|e| e.into_inner());
    let line = format!(
        "model ({label}): {cases} sequences in {:.1?}: {tally}",
        started.elapsed()
    );
    eprintln!("{line}");
    crate::report(&line);
    assert!(
        tally.fresh > 0 && tally.relocks > 0 && tally.busy > 0,
        "{tally}"
    );
    assert!(tally.unlocked > 0 && tally.extended > 0, "{tally}");
    assert!(
        tally.not_owner > 0 && tally.not_held > 0 && tally.invalid > 0,
        "{tally}"
    );
    assert!(
        tally.leases_granted > 0 && tally.lease_locks > 0 && tally.lease_reads_live > 0,
        "{tally}"
    );
    assert!(
        tally.lease_refreshed_locks > 0 && tally.lease_revoked_locks > 0,
        "{tally}"
    );
    assert!(
        tally.lease_unlocks > 0 && tally.lease_extend_refused > 0 && tally.lease_not_live > 0,
        "{tally}"
    );
    assert!(tally.leases_expired_holding > 0, "{tally}");
    assert!(
        tally.shared > 0 && tally.permits > 0 && tally.beside > 0 && tally.claim_refused > 0,
        "{tally}"
    );
    assert!(tally.described_several > 0 && tally.forced > 0, "{tally}");
    assert!(
        tally.leaders > 0 && tally.proclaimed > 0 && tally.leader_reads > 0,
        "{tally}"
    );
    if lock_delays {
        assert!(
            tally.busy_delayed > 0 && tally.described_delayed > 0,
            "{tally}"
        );
    }
    tally
}

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
//! Waiting (`wait > 0`) needs concurrency and is left to the conformance
//! suite's FIFO tests; every generated `lock` uses wait 0.

mod check;
mod generate;
mod ops;
mod reference;
mod tally;

use lockd_core::{Limits, LockService, ManualClock};

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
    let clock = ManualClock::new(START_MS);
    let mut model = Model::new(START_MS, factory.keeps_persistent_locks());
    let open = || async { LockService::new(factory.open(clock.clone()).await, Limits::default()) };
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

/// Runs [`cases`]`(default_cases)` generated sequences ([`ops`]`(restarts)`)
/// against a fresh store from `factory` each, reports the tally under
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
    factory: impl Fn() -> F,
) -> Tally {
    use proptest::test_runner::{Config, TestCaseError, TestRunner};

    // Current-thread: no store task can hold a handle across a restart.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    let cases = cases(default_cases);
    let mut runner = TestRunner::new(Config::with_cases(cases));
    let tally = std::sync::Mutex::new(Tally::default());
    let started = std::time::Instant::now();
    let result = runner.run(&ops(restarts), |ops: Vec<Op>| {
        let seen = runtime
            .block_on(run(&factory(), &ops))
            .map_err(TestCaseError::fail)?;
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
    tally
}

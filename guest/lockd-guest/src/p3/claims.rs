//! Read-write locks, semaphores and holds through `lockd:lock@0.2.0`
//! (docs/contract.md#c21-shared, #c22-semaphores): [`crate::lock_shared`],
//! [`crate::acquire_permit`], [`crate::describe`] and [`crate::Hold`] with
//! their calls awaited and a hold's loss as a future.

use std::future::Future;
use std::time::Duration;

use super::raw::lockd::lock::holds as wit_holds;
use super::raw::lockd::lock::locks as wit_locks;
use super::raw::lockd::lock::rwlocks as wit_rwlocks;
use super::raw::lockd::lock::semaphores as wit_semaphores;
use super::{
    grant_from_wit, hold_options_to_wit, info_from_wit, lock_options_to_wit, lost_future,
    LostReason,
};
use crate::{to_millis, Error, Grant, HoldMode, HoldOptions, Holder, LockOptions, Mode, NameState};

fn hold_mode_to_wit(mode: HoldMode) -> wit_holds::HoldMode {
    match mode {
        HoldMode::Exclusive => wit_holds::HoldMode::Exclusive,
        HoldMode::Shared => wit_holds::HoldMode::Shared,
    }
}

fn mode_from_wit(mode: wit_rwlocks::Mode) -> Mode {
    match mode {
        wit_rwlocks::Mode::Exclusive => Mode::Exclusive,
        wit_rwlocks::Mode::Shared => Mode::Shared,
        wit_rwlocks::Mode::Permit => Mode::Permit,
        wit_rwlocks::Mode::Leader => Mode::Leader,
    }
}

fn name_state_from_wit(state: wit_rwlocks::NameState) -> NameState {
    let holders = state.holders.into_iter().map(|holder| Holder {
        info: info_from_wit(holder.info),
        mode: mode_from_wit(holder.mode),
        acquired_at_ms: holder.acquired_at_ms,
    });
    NameState {
        holders: holders.collect(),
        waiters: state.waiters,
        permits: state.permits,
        lock_delay_until_ms: state.lock_delay_until_ms,
    }
}

/// What a claim on a name takes: which WIT call sends it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Claim {
    /// `locks.lock`.
    Exclusive,
    /// `rwlocks.lock-shared`.
    Shared,
    /// `semaphores.acquire` of a semaphore of this many permits.
    Permit(u32),
}

/// Takes `claim` of `name` for `owner` for `ttl`: [`super::lock`],
/// [`lock_shared`] and [`acquire_permit`], which differ only in the call.
pub(super) async fn take(
    name: &str,
    owner: &str,
    claim: Claim,
    ttl: Duration,
    options: LockOptions,
) -> Result<Grant, Error> {
    let (name, owner) = (name.to_string(), owner.to_string());
    let (ttl_ms, options) = (to_millis(ttl), lock_options_to_wit(options));
    let grant = match claim {
        Claim::Exclusive => wit_locks::lock(name, owner, ttl_ms, options).await,
        Claim::Shared => wit_rwlocks::lock_shared(name, owner, ttl_ms, options).await,
        Claim::Permit(permits) => {
            wit_semaphores::acquire(name, owner, permits, ttl_ms, options).await
        }
    }?;
    Ok(grant_from_wit(grant))
}

/// Takes the lock `name` shared (a read lock) for `owner` for `ttl`,
/// waiting up to [`LockOptions::wait`]: [`crate::lock_shared`], awaited.
/// Only the calling task waits; dropping the returned future before it ends
/// leaves the queue. Release it with [`super::unlock`], keep it with
/// [`super::extend`].
///
/// # Errors
///
/// The same as [`crate::lock_shared`].
pub async fn lock_shared(
    name: &str,
    owner: &str,
    ttl: Duration,
    options: LockOptions,
) -> Result<Grant, Error> {
    take(name, owner, Claim::Shared, ttl, options).await
}

/// Takes one permit of the semaphore `name` of `permits` permits for
/// `owner` for `ttl`, waiting up to [`LockOptions::wait`]:
/// [`crate::acquire_permit`], awaited. Only the calling task waits;
/// dropping the returned future before it ends leaves the queue. Release
/// the permit with [`super::unlock`], keep it with [`super::extend`].
///
/// # Errors
///
/// The same as [`crate::acquire_permit`].
pub async fn acquire_permit(
    name: &str,
    owner: &str,
    permits: u32,
    ttl: Duration,
    options: LockOptions,
) -> Result<Grant, Error> {
    take(name, owner, Claim::Permit(permits), ttl, options).await
}

/// Every holder of `name` with its [`Mode`], the queue's length, a
/// semaphore's size and a lock-delay in force: [`crate::describe`],
/// awaited.
///
/// # Errors
///
/// The same as [`crate::describe`].
pub async fn describe(name: &str) -> Result<NameState, Error> {
    let state = wit_rwlocks::describe(name.to_string()).await?;
    Ok(name_state_from_wit(state))
}

/// A shared lock, an exclusive lock or a semaphore permit, held with an
/// owner the host generates: [`crate::Hold`] for WASI 0.3, its calls
/// awaited and its loss a future.
///
/// Dropping it releases it (without awaiting the store: a drop cannot
/// wait), and so does the end of the instance that holds it, even by a
/// trap. The TTL remains the safety net.
///
/// ```no_run
/// use std::time::Duration;
/// use lockd_guest::p3::Hold;
/// use lockd_guest::{Error, HoldOptions};
///
/// async fn rebuild_catalog() -> Result<(), Error> {
///     let ttl = Duration::from_secs(10);
///     // Readers share the name; this writer waits (up to 5 s) for them,
///     // while the instance's other tasks run on.
///     let options = HoldOptions::default().with_wait(Duration::from_secs(5));
///     let writing = Hold::exclusive("catalog", ttl, options).await?;
///     println!("writing with token {}", writing.fencing_token());
///     writing.release().await
/// }
/// ```
#[derive(Debug)]
pub struct Hold {
    inner: wit_holds::Hold,
}

impl Hold {
    /// Takes `name` in `mode` for `ttl` with a fresh owner, waiting up to
    /// [`HoldOptions::wait`]; dropping the returned future before it ends
    /// leaves the queue (and gives back a grant made meanwhile).
    ///
    /// # Errors
    ///
    /// As [`super::lock`] for exclusive and [`lock_shared`] for shared.
    pub async fn acquire(
        name: &str,
        mode: HoldMode,
        ttl: Duration,
        options: HoldOptions,
    ) -> Result<Hold, Error> {
        Hold::take(name, Ok(mode), ttl, options).await
    }

    /// Takes `name` in a mode (`Ok`) or one permit of a semaphore of so
    /// many permits (`Err`): [`Hold::acquire`] and [`Hold::permit`], which
    /// differ only in the call.
    async fn take(
        name: &str,
        what: Result<HoldMode, u32>,
        ttl: Duration,
        options: HoldOptions,
    ) -> Result<Hold, Error> {
        let (name, ttl_ms, options) = (
            name.to_string(),
            to_millis(ttl),
            hold_options_to_wit(options),
        );
        let inner = match what {
            Ok(mode) => {
                wit_holds::Hold::acquire(name, hold_mode_to_wit(mode), ttl_ms, options).await
            }
            Err(permits) => wit_holds::Hold::acquire_permit(name, permits, ttl_ms, options).await,
        }?;
        Ok(Hold { inner })
    }

    /// Takes `name` shared (a read lock) for `ttl` with a fresh owner.
    ///
    /// # Errors
    ///
    /// As [`lock_shared`].
    pub async fn shared(name: &str, ttl: Duration, options: HoldOptions) -> Result<Hold, Error> {
        Hold::acquire(name, HoldMode::Shared, ttl, options).await
    }

    /// Takes `name` exclusive (a write lock) for `ttl` with a fresh owner.
    ///
    /// # Errors
    ///
    /// As [`super::lock`].
    pub async fn exclusive(name: &str, ttl: Duration, options: HoldOptions) -> Result<Hold, Error> {
        Hold::acquire(name, HoldMode::Exclusive, ttl, options).await
    }

    /// Takes one permit of the semaphore `name` of `permits` permits for
    /// `ttl` with a fresh owner, waiting up to [`HoldOptions::wait`].
    ///
    /// # Errors
    ///
    /// As [`acquire_permit`].
    pub async fn permit(
        name: &str,
        permits: u32,
        ttl: Duration,
        options: HoldOptions,
    ) -> Result<Hold, Error> {
        Hold::take(name, Err(permits), ttl, options).await
    }

    grant_accessors!("hold");
    held_calls!("hold");
}

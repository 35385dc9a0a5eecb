//! The same locks through `lockd:lock@0.2.0`, for WASI 0.3 components
//! whose tasks run concurrently (feature `p3`): every call that reaches the
//! store is an `async fn`, so a task awaiting a lock parks alone while the
//! instance's other tasks go on, and a [`Guard`]'s loss is a future.
//!
//! Beside [`lock`], [`unlock`], [`extend`], [`get`] and [`Guard`], the rest
//! of the 0.2 API under the same names: [`Lease`], read-write locks
//! ([`lock_shared`], [`Hold::shared`], [`Hold::exclusive`]), semaphores
//! ([`acquire_permit`], [`Hold::permit`]), [`describe`], [`Leadership`] and
//! [`LeaderWatch`] (its `changed()` an `async fn`). Each `lost()` is a
//! future of a [`LostReason`] where the 0.2 API answers a pollable. The
//! types are the crate's own ([`Error`], [`Grant`], [`LockInfo`],
//! [`LockOptions`], [`crate::LeaseOptions`], [`crate::HoldOptions`],
//! [`crate::HoldMode`], [`crate::NameState`], [`crate::LeaderInfo`]), so
//! code can move between the versions. Dropping an
//! awaited call (racing it against a timeout, or the request going away)
//! cancels it: the host leaves the queue and gives back a lock granted
//! meanwhile.
//!
//! The bindings are generated with this crate's `wit-bindgen` (0.61), whose
//! async runtime then runs the component's tasks: a component whose other
//! bindings come from another `wit-bindgen` (spin-sdk 7 uses 0.57) generates
//! its own bindings of `wit/p3/lock.wit` instead, with that version.
//!
//! ```no_run
//! use std::time::Duration;
//! use lockd_guest::p3::Guard;
//! use lockd_guest::{Error, LockOptions};
//!
//! async fn report() -> Result<(), Error> {
//!     let options = LockOptions::ephemeral().with_wait(Duration::from_secs(5));
//!     // Other tasks of this instance run while this one waits.
//!     let guard = Guard::acquire("reports/weekly", Duration::from_secs(30), options).await?;
//!     let lost = guard.lost(); // resolves once the guard no longer holds
//!     // ... race the work against `lost`; write with guard.fencing_token() ...
//!     # drop(lost);
//!     guard.release().await
//! } // a guard dropped instead releases its lock too
//! ```

use std::future::Future;
use std::time::Duration;

use crate::{to_millis, Durability, Error, Grant, HoldOptions, LockInfo, LockOptions};

/// The `wit-bindgen` bindings of `lockd:lock/imports@0.2.0`. Private: the
/// API below converts to the crate's types.
mod raw {
    wit_bindgen::generate!({
        path: "wit/p3",
        world: "lockd:lock/imports@0.2.0",
        additional_derives: [PartialEq, Eq, Hash],
    });
}

use raw::lockd::lock::guards as wit_guards;
use raw::lockd::lock::locks as wit_locks;
use raw::lockd::lock::types as wit_types;

/// Why a guard no longer holds its lock: what [`Guard::lost`] resolves to.
pub use wit_types::LostReason;

fn durability_to_wit(durability: Durability) -> wit_types::Durability {
    match durability {
        Durability::Persistent => wit_types::Durability::Persistent,
        Durability::Ephemeral => wit_types::Durability::Ephemeral,
    }
}

fn durability_from_wit(durability: wit_types::Durability) -> Durability {
    match durability {
        wit_types::Durability::Persistent => Durability::Persistent,
        wit_types::Durability::Ephemeral => Durability::Ephemeral,
    }
}

fn info_from_wit(info: wit_types::LockInfo) -> LockInfo {
    LockInfo {
        owner: info.owner,
        fencing_token: info.fencing_token,
        expires_at_ms: info.expires_at_ms,
        durability: durability_from_wit(info.durability),
    }
}

fn grant_from_wit(grant: wit_types::Grant) -> Grant {
    Grant {
        fencing_token: grant.fencing_token,
        expires_at_ms: grant.expires_at_ms,
    }
}

impl From<wit_types::Error> for Error {
    fn from(e: wit_types::Error) -> Self {
        match e {
            wit_types::Error::Busy(holder) => Error::Busy(info_from_wit(holder)),
            wit_types::Error::NotOwner => Error::NotOwner,
            wit_types::Error::NotHeld => Error::NotHeld,
            wit_types::Error::InvalidArgument(msg) => Error::InvalidArgument(msg),
            wit_types::Error::Denied(msg) => Error::Denied(msg),
            wit_types::Error::Unavailable(msg) => Error::Unavailable(msg),
        }
    }
}

/// A guard's (and a hold's) options: the crate's [`HoldOptions`].
fn hold_options_to_wit(options: HoldOptions) -> wit_guards::GuardOptions {
    wit_guards::GuardOptions {
        wait_ms: to_millis(options.wait),
        durability: durability_to_wit(options.durability),
        keep_alive: options.keep_alive,
    }
}

fn lock_options_to_wit(options: LockOptions) -> wit_locks::LockOptions {
    wit_locks::LockOptions {
        wait_ms: to_millis(options.wait),
        durability: durability_to_wit(options.durability),
    }
}

/// Takes the lock `name` for `owner` for `ttl`, waiting up to
/// [`LockOptions::wait`]: [`crate::lock`], awaited.
///
/// # Errors
///
/// The same as [`crate::lock`].
pub async fn lock(
    name: &str,
    owner: &str,
    ttl: Duration,
    options: LockOptions,
) -> Result<Grant, Error> {
    claims::take(name, owner, Claim::Exclusive, ttl, options).await
}

/// Releases `name` if `owner` holds it: [`crate::unlock`], awaited.
///
/// # Errors
///
/// The same as [`crate::unlock`].
pub async fn unlock(name: &str, owner: &str, fencing_token: Option<u64>) -> Result<(), Error> {
    Ok(wit_locks::unlock(name.to_string(), owner.to_string(), fencing_token).await?)
}

/// Moves the expiry of `owner`'s lock on `name` to now + `ttl`:
/// [`crate::extend`], awaited.
///
/// # Errors
///
/// The same as [`crate::extend`].
pub async fn extend(name: &str, owner: &str, ttl: Duration) -> Result<Grant, Error> {
    let grant = wit_locks::extend(name.to_string(), owner.to_string(), to_millis(ttl)).await?;
    Ok(grant_from_wit(grant))
}

/// Who holds `name`, if anyone: [`crate::get`], awaited.
///
/// # Errors
///
/// The same as [`crate::get`].
pub async fn get(name: &str) -> Result<Option<LockInfo>, Error> {
    Ok(wit_locks::get(name.to_string()).await?.map(info_from_wit))
}

/// A resource's `lost` future as this API answers it: the bindings' reader
/// type stays private.
async fn lost_future(lost: wit_bindgen::FutureReader<LostReason>) -> LostReason {
    lost.await
}

/// The calls a held grant of `lockd:lock@0.2.0` (a guard or a hold) makes
/// of the store, and its loss as a future: both resources answer them
/// alike, so both wrappers forward them here. `$what` names the holder in
/// the docs.
macro_rules! held_calls {
    ($what:literal) => {
        #[doc = concat!("Whether this ", $what, " still holds its grant: not released,")]
        /// not expired, not force-released (asks the store; false when the
        /// store cannot answer).
        pub async fn is_held(&self) -> bool {
            self.inner.is_held().await
        }

        /// Moves the expiry to now + `ttl`; the fencing token does not change.
        /// `ttl` is sent as whole milliseconds, saturating at `u32::MAX`.
        ///
        /// # Errors
        ///
        /// [`Error::NotHeld`] or [`Error::NotOwner`] if it already expired
        /// (and perhaps was taken by another owner).
        pub async fn extend(&self, ttl: Duration) -> Result<Grant, Error> {
            Ok(grant_from_wit(self.inner.extend(to_millis(ttl)).await?))
        }

        #[doc = concat!("Releases it now and reports the outcome, which dropping the ", $what)]
        /// cannot do.
        ///
        /// # Errors
        ///
        /// [`Error::NotHeld`] or [`Error::NotOwner`] if it had already
        /// expired; [`Error::Unavailable`] if the store could not record it.
        pub async fn release(self) -> Result<(), Error> {
            Ok(self.inner.release().await?)
        }

        #[doc = concat!("A future that resolves once this ", $what, " no longer holds, with")]
        /// the reason: [`LostReason::Expired`] (TTL ran out, or keep-alive
        /// could not renew in time), [`LostReason::EndedElsewhere`] (an
        /// operator force-released it), [`LostReason::Released`] (released or
        /// dropped here). It borrows nothing; each call makes a new one.
        pub fn lost(&self) -> impl Future<Output = LostReason> + 'static {
            lost_future(self.inner.lost())
        }
    };
}

mod claims;
mod elections;
mod leases;

use claims::Claim;
pub use claims::{acquire_permit, describe, lock_shared, Hold};
pub use elections::{leader, LeaderWatch, Leadership};
pub use leases::Lease;

/// A held lock whose owner the host generated, released when dropped (or
/// when the instance ends, even by a trap); the TTL remains the safety net.
/// [`crate::Guard`] for WASI 0.3: its calls are awaited and its loss is a
/// future.
#[derive(Debug)]
pub struct Guard {
    inner: wit_guards::Guard,
}

impl Guard {
    async fn take(
        name: &str,
        ttl: Duration,
        options: LockOptions,
        keep_alive: bool,
    ) -> Result<Guard, Error> {
        let options = HoldOptions {
            wait: options.wait,
            durability: options.durability,
            keep_alive,
        };
        let inner = wit_guards::Guard::acquire(
            name.to_string(),
            to_millis(ttl),
            hold_options_to_wit(options),
        )
        .await?;
        Ok(Guard { inner })
    }

    /// Takes the lock `name` for `ttl` with a fresh owner, waiting up to
    /// [`LockOptions::wait`]. Dropping the returned future before it ends
    /// leaves the queue.
    ///
    /// # Errors
    ///
    /// The same as [`crate::lock`].
    pub async fn acquire(name: &str, ttl: Duration, options: LockOptions) -> Result<Guard, Error> {
        Guard::take(name, ttl, options, false).await
    }

    /// Like [`Guard::acquire`], and the host keeps the guard alive: it
    /// extends it at a third of `ttl` for as long as this instance lives.
    /// If a renewal cannot be made before the expiry, the guard is lost.
    ///
    /// # Errors
    ///
    /// The same as [`crate::lock`].
    pub async fn acquire_kept_alive(
        name: &str,
        ttl: Duration,
        options: LockOptions,
    ) -> Result<Guard, Error> {
        Guard::take(name, ttl, options, true).await
    }

    grant_accessors!("guard");
    held_calls!("guard");
}

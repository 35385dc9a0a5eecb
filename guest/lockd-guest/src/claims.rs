//! Read-write locks, semaphores and holds: the `rwlocks`, `semaphores` and
//! `holds` interfaces (docs/contract.md#c21-shared, #c22-semaphores).

use std::time::Duration;

use crate::raw::lockd::lock::holds as wit_holds;
use crate::raw::lockd::lock::rwlocks as wit_rwlocks;
use crate::raw::lockd::lock::semaphores as wit_semaphores;
use crate::{to_millis, Durability, Error, Grant, LockOptions, Pollable};

pub use wit_holds::HoldMode;
pub use wit_rwlocks::{Holder, Mode, NameState};

/// Takes the lock `name` shared (a read lock) for `owner` for `ttl`.
///
/// Granted while no exclusive grant holds the name and nobody waits; any
/// number of owners hold it shared together, each with its own grant and
/// token. Release it with [`unlock`](crate::unlock) and keep it with
/// [`extend`](crate::extend), as an exclusive lock. If `owner` holds it
/// shared already this is a safe retry (same token, new expiry).
///
/// # Errors
///
/// [`Error::Busy`] while it is held exclusive or an exclusive request waits
/// (after waiting up to [`LockOptions::wait`] in the FIFO queue);
/// [`Error::InvalidArgument`] if `owner` holds it exclusive, and for bad
/// arguments as in [`lock`](crate::lock).
pub fn lock_shared(
    name: &str,
    owner: &str,
    ttl: Duration,
    options: LockOptions,
) -> Result<Grant, Error> {
    Ok(wit_rwlocks::lock_shared(
        name,
        owner,
        to_millis(ttl),
        options.to_wit(),
    )?)
}

/// Takes one permit of the semaphore `name`, which has `permits` permits (1
/// to 65 536), for `owner` for `ttl`.
///
/// The first acquire of an idle name sets its number of permits. Each
/// permit is a grant with its own token: release it with
/// [`unlock`](crate::unlock), keep it with [`extend`](crate::extend); an
/// expired permit returns by itself.
///
/// # Errors
///
/// [`Error::Busy`] when every permit is held (after waiting up to
/// [`LockOptions::wait`]); [`Error::InvalidArgument`] for another number of
/// permits than the held semaphore's, a count out of bounds, or a name used
/// as a lock or an election.
pub fn acquire_permit(
    name: &str,
    owner: &str,
    permits: u32,
    ttl: Duration,
    options: LockOptions,
) -> Result<Grant, Error> {
    Ok(wit_semaphores::acquire(
        name,
        owner,
        permits,
        to_millis(ttl),
        options.to_wit(),
    )?)
}

/// Everything about `name`: every holder with its [`Mode`], the queue's
/// length, a semaphore's size and a lock-delay in force. For a lock, a
/// semaphore or an election.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for a bad name, and host errors.
pub fn describe(name: &str) -> Result<NameState, Error> {
    Ok(wit_rwlocks::describe(name)?)
}

/// Options of a [`Hold`] and of a [`Leadership`](crate::Leadership)'s
/// campaign: how long to wait, the durability, and whether the host keeps
/// the grant alive.
///
/// The default fails at once when the name is taken, is persistent and is
/// not kept alive.
///
/// ```
/// use std::time::Duration;
/// use lockd_guest::HoldOptions;
///
/// let opts = HoldOptions::default().with_wait(Duration::from_secs(1)).kept_alive();
/// assert!(opts.keep_alive);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HoldOptions {
    /// Zero: fail at once with [`Error::Busy`]. More: wait up to this long
    /// in the host's FIFO queue (whole milliseconds, saturating).
    pub wait: Duration,
    /// Whether the grant survives a host restart.
    pub durability: Durability,
    /// The host renews the grant at a third of its TTL for as long as this
    /// instance lives, until it is released or dropped.
    pub keep_alive: bool,
}

impl Default for HoldOptions {
    fn default() -> Self {
        HoldOptions {
            wait: Duration::ZERO,
            durability: Durability::Persistent,
            keep_alive: false,
        }
    }
}

impl HoldOptions {
    /// These options, waiting up to `wait`.
    pub const fn with_wait(self, wait: Duration) -> Self {
        HoldOptions { wait, ..self }
    }

    /// These options, with the given durability.
    pub const fn with_durability(self, durability: Durability) -> Self {
        HoldOptions { durability, ..self }
    }

    /// These options, with keep-alive on.
    pub const fn kept_alive(self) -> Self {
        HoldOptions {
            keep_alive: true,
            ..self
        }
    }

    pub(crate) fn to_guard_options(self) -> crate::raw::lockd::lock::guards::GuardOptions {
        crate::raw::lockd::lock::guards::GuardOptions {
            wait_ms: to_millis(self.wait),
            durability: self.durability,
            keep_alive: self.keep_alive,
        }
    }
}

/// A shared lock, an exclusive lock or a semaphore permit, held with an
/// owner the host generates: a [`Guard`](crate::Guard) of any mode.
///
/// Dropping it releases it, and so does the end of the instance that holds
/// it, even by a trap. The TTL remains the safety net.
///
/// ```no_run
/// use std::time::Duration;
/// use lockd_guest::{Hold, HoldOptions};
///
/// # fn main() -> Result<(), lockd_guest::Error> {
/// // Readers share the name; a writer waits for them.
/// let reading = Hold::shared("catalog", Duration::from_secs(10), HoldOptions::default())?;
/// // At most 4 workers at once.
/// let slot = Hold::permit("workers", 4, Duration::from_secs(30), HoldOptions::default().kept_alive())?;
/// println!("{} and {}", reading.fencing_token(), slot.fencing_token());
/// # Ok(()) } // both released here
/// ```
#[derive(Debug)]
pub struct Hold {
    inner: wit_holds::Hold,
}

impl Hold {
    /// Takes `name` in `mode` for `ttl` with a fresh owner.
    ///
    /// # Errors
    ///
    /// As [`lock`](crate::lock) for exclusive and [`lock_shared`] for
    /// shared.
    pub fn acquire(
        name: &str,
        mode: HoldMode,
        ttl: Duration,
        options: HoldOptions,
    ) -> Result<Hold, Error> {
        let inner =
            wit_holds::Hold::acquire(name, mode, to_millis(ttl), options.to_guard_options())?;
        Ok(Hold { inner })
    }

    /// Takes `name` shared (a read lock) for `ttl` with a fresh owner.
    ///
    /// # Errors
    ///
    /// As [`lock_shared`].
    pub fn shared(name: &str, ttl: Duration, options: HoldOptions) -> Result<Hold, Error> {
        Hold::acquire(name, HoldMode::Shared, ttl, options)
    }

    /// Takes `name` exclusive (a write lock) for `ttl` with a fresh owner.
    ///
    /// # Errors
    ///
    /// As [`lock`](crate::lock).
    pub fn exclusive(name: &str, ttl: Duration, options: HoldOptions) -> Result<Hold, Error> {
        Hold::acquire(name, HoldMode::Exclusive, ttl, options)
    }

    /// Takes one permit of the semaphore `name` of `permits` permits for
    /// `ttl` with a fresh owner.
    ///
    /// # Errors
    ///
    /// As [`acquire_permit`].
    pub fn permit(
        name: &str,
        permits: u32,
        ttl: Duration,
        options: HoldOptions,
    ) -> Result<Hold, Error> {
        let inner = wit_holds::Hold::acquire_permit(
            name,
            permits,
            to_millis(ttl),
            options.to_guard_options(),
        )?;
        Ok(Hold { inner })
    }

    grant_accessors!("hold");

    /// Whether this hold still holds its grant (asks the host).
    pub fn is_held(&self) -> bool {
        self.inner.is_held()
    }

    /// Moves the expiry to now + `ttl`; the token does not change.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] or [`Error::NotOwner`] once it was lost.
    pub fn extend(&self, ttl: Duration) -> Result<Grant, Error> {
        Ok(self.inner.extend(to_millis(ttl))?)
    }

    /// Releases it now and reports the outcome, which dropping cannot do.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] or [`Error::NotOwner`] if it was lost already;
    /// [`Error::Unavailable`] if the store could not record it.
    pub fn release(self) -> Result<(), Error> {
        Ok(self.inner.release()?)
    }

    /// A pollable that becomes ready once this hold no longer holds: expired
    /// without renewal, keep-alive failed, released by someone else, or
    /// released here.
    pub fn lost(&self) -> Pollable {
        self.inner.subscribe_lost()
    }
}

//! Rust guest SDK for the `lockd:lock@0.1.0` capability: named leases with
//! fencing tokens, for components built for `wasm32-wasip2`.
//!
//! The host gives each component a namespace of locks; names are unique
//! within it. There are two ways to hold a lock:
//!
//! - the free functions [`lock`], [`unlock`], [`extend`] and [`get`], where
//!   you choose the owner string (useful when several instances act as one
//!   owner, or when a retry must be recognised as the same owner), and
//! - a [`Guard`], whose owner the host generates, and which releases the lock
//!   when it is dropped or when the instance ends, even by a trap.
//!
//! Either way the lease ends at its TTL unless extended, and every grant
//! carries a fencing token: pass it to the resource you protect so that it
//! can reject writes from a holder whose lease has already expired.
//!
//! Beyond the exclusive lock:
//!
//! - read-write locks: [`lock_shared`] (release with [`unlock`]), or a
//!   [`Hold`] taken [`Hold::shared`] or [`Hold::exclusive`];
//! - semaphores whose permits expire with their holders: [`acquire_permit`],
//!   or [`Hold::permit`];
//! - leader election: [`Leadership::campaign`] (resigns when dropped),
//!   [`leader`], and a [`LeaderWatch`] whose pollable tells of a new leader;
//! - [`describe`]: every holder of a name with its [`Mode`].
//!
//! [`Hold`] and [`Leadership`] give back what they hold when dropped, as a
//! [`Guard`] does.
//!
//! With the feature `p3`, the module `p3` is the async API for WASI 0.3
//! components (`lockd:lock@0.2.0`) under the same names: `p3::lock`,
//! `p3::Guard`, `p3::Lease`, `p3::lock_shared`, `p3::acquire_permit`,
//! `p3::Hold`, `p3::Leadership` and the rest, awaited, each `lost()` a
//! future.
//!
//! ```no_run
//! use std::time::Duration;
//! use lockd_guest::{Error, Guard, LockOptions};
//!
//! fn nightly_report() -> Result<(), Error> {
//!     // Plain lock: this worker names itself as the owner.
//!     let grant = lockd_guest::lock(
//!         "reports/nightly",
//!         "worker-7",
//!         Duration::from_secs(30),
//!         LockOptions::default(),
//!     )?;
//!     println!("writing with fencing token {}", grant.fencing_token);
//!     lockd_guest::unlock("reports/nightly", "worker-7", Some(grant.fencing_token))?;
//!
//!     // Guard: wait up to 5 s in the host's queue; released when dropped.
//!     let guard = Guard::acquire(
//!         "reports/weekly",
//!         Duration::from_secs(30),
//!         LockOptions::default().with_wait(Duration::from_secs(5)),
//!     )?;
//!     println!("{} holds token {}", guard.owner(), guard.fencing_token());
//!     guard.extend(Duration::from_secs(60))?;
//!     Ok(())
//! } // `guard` is dropped here, which releases "reports/weekly".
//!
//! match nightly_report() {
//!     Ok(()) => {}
//!     Err(Error::Busy(holder)) => eprintln!("held by {}", holder.owner),
//!     Err(e) => eprintln!("lock error: {e}"),
//! }
//! ```
//!
//! # Durations
//!
//! The WIT interface counts time in `u32` milliseconds. Every [`Duration`]
//! given to this crate (TTLs and [`LockOptions::wait`]) is converted to whole
//! milliseconds, **truncating** any fraction of a millisecond and
//! **saturating** at `u32::MAX` ms (about 49.7 days). So a TTL under 1 ms
//! becomes 0, which the host rejects with [`Error::InvalidArgument`], and a
//! huge TTL becomes `u32::MAX` ms, which the host rejects if it is above its
//! configured maximum (24 h by default).

#![deny(missing_docs)]

use std::fmt;
use std::time::Duration;

/// The accessors of a held grant whose owner the host generated (a guard or
/// a hold, in either API): the resource answers them itself, without the
/// store, so every wrapper's `inner` forwards them alike. `$what` names the
/// holder in the docs.
macro_rules! grant_accessors {
    ($what:literal) => {
        #[doc = concat!("The fencing token of this ", $what, "'s grant.")]
        pub fn fencing_token(&self) -> u64 {
            self.inner.fencing_token()
        }

        /// When it ends unless extended: Unix epoch milliseconds.
        pub fn expires_at_ms(&self) -> u64 {
            self.inner.expires_at_ms()
        }

        #[doc = concat!("The owner string the host generated for this ", $what, ".")]
        /// Other callers see it in [`LockInfo::owner`](crate::LockInfo::owner)
        /// and [`Error::Busy`](crate::Error::Busy).
        pub fn owner(&self) -> String {
            self.inner.owner()
        }
    };
}

mod claims;
mod elections;
#[cfg(feature = "p3")]
pub mod p3;

pub use claims::{
    acquire_permit, describe, lock_shared, Hold, HoldMode, HoldOptions, Holder, Mode, NameState,
};
pub use elections::{leader, LeaderInfo, LeaderWatch, Leadership};

/// The `wit-bindgen` bindings for the `lockd:lock/imports` world. Kept private:
/// the public API re-exports the plain data types and wraps the rest. The
/// WIT is the crate's own `wit/`, a copy of the repository's `wit/` (a
/// published crate carries nothing from outside its directory), kept equal by
/// `host/test-support/tests/packaged_copies.rs`.
mod raw {
    wit_bindgen::generate!({
        path: "wit",
        world: "lockd:lock/imports",
        additional_derives: [PartialEq, Eq, Hash],
        with: {
            "wasi:io/poll@0.2.0": wasip2::io::poll,
        },
    });
}

use raw::lockd::lock::guards as wit_guards;
use raw::lockd::lock::leases as wit_leases;
use raw::lockd::lock::locks as wit_locks;
use raw::lockd::lock::types as wit_types;

/// The `wasi:io/poll` pollable [`Guard::lost`], [`Lease::lost`],
/// [`Hold::lost`], [`Leadership::lost`] and [`LeaderWatch::changed`] answer;
/// wait on it with [`Pollable::block`] or, with other pollables,
/// [`wasip2::io::poll::poll`].
pub use wasip2::io::poll::Pollable;
pub use wit_types::{Durability, Grant, LockInfo};

/// Converts a duration to the WIT millisecond count: truncated to whole
/// milliseconds and saturated at `u32::MAX` (see the crate docs).
pub(crate) fn to_millis(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}

/// Why a lock operation failed (the WIT `error` variant).
///
/// The WIT bindings' own error type formats itself with `Debug`; this one has
/// a readable [`Display`](fmt::Display) and implements
/// [`std::error::Error`], so it works with `?` into `Box<dyn Error>` or
/// `anyhow`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// Another owner holds the lock (and any wait timed out). Carries the
    /// current holder.
    Busy(LockInfo),
    /// The lock is held, but not by this owner, or the fencing token given is
    /// not the current one.
    NotOwner,
    /// Nobody holds the lock (it was never taken, was released, or expired).
    NotHeld,
    /// An argument broke a limit; the message says which. Nothing changed.
    InvalidArgument(String),
    /// The host refused the operation, for example because the namespace is
    /// over its quota; the message says why.
    Denied(String),
    /// The lock store could not complete the operation (for example a disk
    /// write failed). The outcome is unknown: retry, or check [`get`].
    Unavailable(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Busy(holder) => write!(
                f,
                "lock is busy: held by {:?} with fencing token {}",
                holder.owner, holder.fencing_token
            ),
            Error::NotOwner => f.write_str("lock is held by another owner or under another token"),
            Error::NotHeld => f.write_str("lock is not held"),
            Error::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            Error::Denied(msg) => write!(f, "denied by host: {msg}"),
            Error::Unavailable(msg) => write!(f, "lock store unavailable: {msg}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<wit_types::Error> for Error {
    fn from(e: wit_types::Error) -> Self {
        match e {
            wit_types::Error::Busy(holder) => Error::Busy(holder),
            wit_types::Error::NotOwner => Error::NotOwner,
            wit_types::Error::NotHeld => Error::NotHeld,
            wit_types::Error::InvalidArgument(msg) => Error::InvalidArgument(msg),
            wit_types::Error::Denied(msg) => Error::Denied(msg),
            wit_types::Error::Unavailable(msg) => Error::Unavailable(msg),
        }
    }
}

/// Options for [`lock`] and [`Guard::acquire`].
///
/// The default fails at once if the lock is held (`wait` zero) and makes the
/// lock [`Durability::Persistent`].
///
/// ```
/// use std::time::Duration;
/// use lockd_guest::{Durability, LockOptions};
///
/// let opts = LockOptions::ephemeral().with_wait(Duration::from_millis(250));
/// assert_eq!(opts.durability, Durability::Ephemeral);
/// assert_eq!(LockOptions::default(), LockOptions::persistent());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockOptions {
    /// Zero: fail at once with [`Error::Busy`] if another owner holds the
    /// lock. More: wait up to this long in the host's first-in-first-out
    /// queue. Sent as whole milliseconds, saturating (see the crate docs).
    pub wait: Duration,
    /// Whether the lock survives a host restart.
    pub durability: Durability,
}

impl LockOptions {
    /// No waiting, [`Durability::Persistent`]; the same as
    /// [`LockOptions::default`].
    pub const fn persistent() -> Self {
        LockOptions {
            wait: Duration::ZERO,
            durability: Durability::Persistent,
        }
    }

    /// No waiting, [`Durability::Ephemeral`]: kept in host memory only.
    pub const fn ephemeral() -> Self {
        LockOptions {
            wait: Duration::ZERO,
            durability: Durability::Ephemeral,
        }
    }

    /// These options, waiting up to `wait` for a held lock.
    pub const fn with_wait(self, wait: Duration) -> Self {
        LockOptions { wait, ..self }
    }

    /// These options, with the given durability.
    pub const fn with_durability(self, durability: Durability) -> Self {
        LockOptions { durability, ..self }
    }

    pub(crate) fn to_wit(self) -> wit_locks::LockOptions {
        wit_locks::LockOptions {
            wait_ms: to_millis(self.wait),
            durability: self.durability,
        }
    }
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions::persistent()
    }
}

/// Takes the lock `name` for `owner` for `ttl`.
///
/// If `owner` already holds it, this is a safe retry: the same fencing token
/// is returned and the expiry becomes now + `ttl`. `ttl` is sent as whole
/// milliseconds, saturating at `u32::MAX` (see the crate docs).
///
/// # Errors
///
/// [`Error::Busy`] with the current holder if another owner holds it (after
/// waiting up to [`LockOptions::wait`]); [`Error::InvalidArgument`] for an
/// empty or over-long name or owner, or a zero or over-long `ttl`; and
/// [`Error::Denied`] or [`Error::Unavailable`] from the host.
pub fn lock(name: &str, owner: &str, ttl: Duration, options: LockOptions) -> Result<Grant, Error> {
    Ok(wit_locks::lock(
        name,
        owner,
        to_millis(ttl),
        options.to_wit(),
    )?)
}

/// Releases the lock `name` if `owner` holds it and, when `fencing_token` is
/// given, the current grant carries that token. A stale unlock never releases
/// a newer grant.
///
/// # Errors
///
/// [`Error::NotOwner`] if another owner holds the lock or the token is not
/// the current one; [`Error::NotHeld`] if nobody holds it.
pub fn unlock(name: &str, owner: &str, fencing_token: Option<u64>) -> Result<(), Error> {
    Ok(wit_locks::unlock(name, owner, fencing_token)?)
}

/// Moves the expiry of the lock `name`, held by `owner`, to now + `ttl`. The
/// fencing token does not change. `ttl` is sent as whole milliseconds,
/// saturating at `u32::MAX` (see the crate docs).
///
/// # Errors
///
/// [`Error::NotOwner`] if another owner holds the lock; [`Error::NotHeld`]
/// if nobody does (for example because the lease already expired).
pub fn extend(name: &str, owner: &str, ttl: Duration) -> Result<Grant, Error> {
    Ok(wit_locks::extend(name, owner, to_millis(ttl))?)
}

/// The current holder of `name`, or `None` if it is free or expired.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for a bad name, and host errors.
pub fn get(name: &str) -> Result<Option<LockInfo>, Error> {
    Ok(wit_locks::get(name)?)
}

/// A held lock whose owner the host generates (unique and unguessable).
///
/// Dropping the guard releases the lock, and so does the end of the instance
/// that holds it, whether it returned normally or trapped. The TTL remains
/// the safety net: a guard whose lease expired no longer holds the lock even
/// though the guard still exists; check [`Guard::is_held`] or rely on the
/// fencing token downstream.
#[derive(Debug)]
pub struct Guard {
    inner: wit_guards::Guard,
}

impl Guard {
    /// Takes the lock `name` for `ttl`, like [`lock`], with a fresh
    /// host-generated owner. `ttl` is sent as whole milliseconds, saturating
    /// at `u32::MAX` (see the crate docs).
    ///
    /// # Errors
    ///
    /// The same as [`lock`].
    pub fn acquire(name: &str, ttl: Duration, options: LockOptions) -> Result<Guard, Error> {
        let inner = wit_guards::Guard::acquire(name, to_millis(ttl), options.to_wit())?;
        Ok(Guard { inner })
    }

    /// Like [`Guard::acquire`], and the host keeps the guard alive: it
    /// extends it at a third of `ttl` for as long as this instance lives,
    /// until the guard is released or dropped. If a renewal cannot be made
    /// before the expiry, the guard is lost ([`Guard::lost`]).
    ///
    /// # Errors
    ///
    /// The same as [`lock`].
    pub fn acquire_kept_alive(
        name: &str,
        ttl: Duration,
        options: LockOptions,
    ) -> Result<Guard, Error> {
        let inner = wit_guards::Guard::acquire_with(
            name,
            to_millis(ttl),
            wit_guards::GuardOptions {
                wait_ms: to_millis(options.wait),
                durability: options.durability,
                keep_alive: true,
            },
        )?;
        Ok(Guard { inner })
    }

    /// A pollable that becomes ready once this guard no longer holds its
    /// lock: it expired without renewal, keep-alive failed until the expiry,
    /// someone else released it, or it was released. No polling of the host
    /// is needed: wait on it with [`Pollable::block`] or `poll`.
    pub fn lost(&self) -> Pollable {
        self.inner.subscribe_lost()
    }

    grant_accessors!("guard");

    /// Whether this guard still holds the lock: not released, not expired,
    /// and not taken over by someone else after expiry.
    pub fn is_held(&self) -> bool {
        self.inner.is_held()
    }

    /// Moves the expiry to now + `ttl`; the fencing token does not change.
    /// `ttl` is sent as whole milliseconds, saturating at `u32::MAX`.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] or [`Error::NotOwner`] if the lease already
    /// expired (and perhaps was taken by another owner).
    pub fn extend(&self, ttl: Duration) -> Result<Grant, Error> {
        Ok(self.inner.extend(to_millis(ttl))?)
    }

    /// Releases the lock now and reports the outcome, which dropping the
    /// guard cannot do.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] or [`Error::NotOwner`] if the lease had already
    /// expired; [`Error::Unavailable`] if the store could not record it.
    pub fn release(self) -> Result<(), Error> {
        // Dropping `self.inner` afterwards is a no-op on the host: the
        // resource is already released.
        Ok(self.inner.release()?)
    }
}

/// Options for [`Lease::grant`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseOptions {
    /// Whether the lease and its locks survive a host restart.
    pub durability: Durability,
    /// The host refreshes the lease at a third of its TTL for as long as
    /// this instance lives, until it is revoked or dropped.
    pub keep_alive: bool,
}

impl Default for LeaseOptions {
    /// Persistent, without keep-alive.
    fn default() -> Self {
        LeaseOptions {
            durability: Durability::Persistent,
            keep_alive: false,
        }
    }
}

impl LeaseOptions {
    /// These options, with keep-alive on.
    pub const fn kept_alive(self) -> Self {
        LeaseOptions {
            keep_alive: true,
            ..self
        }
    }

    /// These options, with the given durability.
    pub const fn with_durability(self, durability: Durability) -> Self {
        LeaseOptions { durability, ..self }
    }
}

/// A lease: one expiry for several locks, refreshed and revoked in one step.
///
/// Every lock taken with [`Lease::lock`] is owned by the lease's id and ends
/// with the lease. Dropping the lease revokes it (releasing all its locks),
/// and so does the end of the instance that holds it.
///
/// ```no_run
/// use std::time::Duration;
/// use lockd_guest::{Lease, LeaseOptions};
///
/// # fn main() -> Result<(), lockd_guest::Error> {
/// let lease = Lease::grant(Duration::from_secs(10), LeaseOptions::default().kept_alive())?;
/// let a = lease.lock("accounts/a", Duration::ZERO)?;
/// let b = lease.lock("accounts/b", Duration::from_secs(1))?;
/// println!("tokens {} and {}", a.fencing_token, b.fencing_token);
/// lease.revoke()?; // both released at once
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Lease {
    inner: wit_leases::Lease,
}

impl Lease {
    /// Grants a lease of `ttl` (whole milliseconds, saturating).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a zero or over-long `ttl`; host errors.
    pub fn grant(ttl: Duration, options: LeaseOptions) -> Result<Lease, Error> {
        let inner = wit_leases::Lease::grant(
            to_millis(ttl),
            wit_leases::LeaseOptions {
                durability: options.durability,
                keep_alive: options.keep_alive,
            },
        )?;
        Ok(Lease { inner })
    }

    /// The id the host generated: the owner of every lock under the lease.
    pub fn id(&self) -> String {
        self.inner.id()
    }

    /// When the lease ends unless refreshed: Unix epoch milliseconds.
    pub fn expires_at_ms(&self) -> u64 {
        self.inner.expires_at_ms()
    }

    /// Takes the lock `name` under this lease, waiting up to `wait` in the
    /// host's FIFO queue. A lock the lease holds answers its grant.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] if another owner holds it after the wait;
    /// [`Error::NotHeld`] if the lease has ended.
    pub fn lock(&self, name: &str, wait: Duration) -> Result<Grant, Error> {
        Ok(self.inner.lock(name, to_millis(wait))?)
    }

    /// Releases one lock of the lease; the lease lives on.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] or [`Error::NotHeld`] if the lease does not hold it.
    pub fn unlock(&self, name: &str) -> Result<(), Error> {
        Ok(self.inner.unlock(name)?)
    }

    /// Moves the expiry of the lease and all its locks to now + its TTL;
    /// answers the new expiry.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] once the lease has ended.
    pub fn refresh(&self) -> Result<u64, Error> {
        Ok(self.inner.refresh()?)
    }

    /// Ends the lease and releases all its locks at once.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] if it had already ended; [`Error::Unavailable`] if
    /// the store could not record it.
    pub fn revoke(self) -> Result<(), Error> {
        Ok(self.inner.revoke()?)
    }

    /// Whether the lease is still live (asks the host).
    pub fn is_alive(&self) -> bool {
        self.inner.is_alive()
    }

    /// A pollable that becomes ready once the lease has ended: expired,
    /// revoked by anyone, or not renewed by keep-alive before its expiry.
    pub fn lost(&self) -> Pollable {
        self.inner.subscribe_lost()
    }
}

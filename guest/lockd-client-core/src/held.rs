//! What guards, holds, leaderships and leases do alike: one grant (or
//! lease) for an owner this client generated, with the expiry this client
//! last saw, that ends once released here. [`Held`] is that, for
//! [`HeldGrant`] and [`HeldLease`] and the watcher of `lockd-client-p3`
//! ([`crate::watch`]).

use std::cell::Cell;
use std::future::Future;

use crate::types::Error;
use crate::Io;

/// A grant or lease held by one of the guest's resources.
pub trait Held {
    /// The expiry this client last saw (Unix ms): from the grant, or the
    /// last extend, refresh or keep-alive renewal.
    fn expires_at_ms(&self) -> u64;

    /// Sets the expiry a renewal answered.
    fn set_expires_at_ms(&self, expires_at_ms: u64);

    /// Released (resigned, revoked) here: `release` answers `not-held` and
    /// dropping it sends nothing more.
    fn is_released(&self) -> bool;

    /// When it is lost for all this client knows without asking the server:
    /// at its expiry, or at once (0) once released here.
    fn lost_at_ms(&self) -> u64 {
        if self.is_released() {
            0
        } else {
            self.expires_at_ms()
        }
    }

    /// Whether the server still shows it; `None` when it cannot answer.
    fn still_held(&self, io: &impl Io) -> impl Future<Output = Option<bool>>;

    /// Extends the grant or refreshes the lease by `ttl_ms` (a lease by its
    /// own TTL): the new expiry. Neither checks nor sets any state here.
    fn renew(&self, io: &impl Io, ttl_ms: u32) -> impl Future<Output = Result<u64, Error>>;

    /// Unlock, resign or revoke: only this grant (its token) or lease.
    fn give_back(&self, io: &impl Io) -> impl Future<Output = Result<(), Error>>;

    /// `release`, `resign` or `revoke`: `not-held` once released here, else
    /// [`Held::give_back`], after which it is released unless the outcome
    /// is unknown (`unavailable`).
    fn release(&self, io: &impl Io) -> impl Future<Output = Result<(), Error>>;

    /// The guest dropped it: gives it back unless released here. Not-held
    /// or not-owner means it already ended, and an unreachable server
    /// leaves it to its TTL: nobody to tell, so errors are ignored.
    fn abandon(&self, io: &impl Io) -> impl Future<Output = ()> {
        async move {
            if !self.is_released() {
                let _ = self.give_back(io).await;
            }
        }
    }
}

/// The state [`Held`] asks after: the expiry last seen and whether it was
/// released here.
#[derive(Debug)]
pub(crate) struct Life {
    expires_at_ms: Cell<u64>,
    released: Cell<bool>,
}

impl Life {
    pub(crate) fn new(expires_at_ms: u64) -> Life {
        Life {
            expires_at_ms: Cell::new(expires_at_ms),
            released: Cell::new(false),
        }
    }

    pub(crate) fn expires_at_ms(&self) -> u64 {
        self.expires_at_ms.get()
    }

    pub(crate) fn set_expires_at_ms(&self, expires_at_ms: u64) {
        self.expires_at_ms.set(expires_at_ms);
    }

    pub(crate) fn is_released(&self) -> bool {
        self.released.get()
    }

    /// [`Held::release`], with `give_back` the request that gives it back
    /// (not sent once released).
    pub(crate) async fn release(
        &self,
        give_back: impl Future<Output = Result<(), Error>>,
    ) -> Result<(), Error> {
        if self.released.get() {
            return Err(Error::NotHeld);
        }
        let outcome = give_back.await;
        // Unless the outcome is unknown, it is gone now.
        if !matches!(outcome, Err(Error::Unavailable(_))) {
            self.released.set(true);
        }
        outcome
    }
}

//! Leases through `lockd:lock@0.2.0` (docs/contract.md#c16-leases):
//! [`crate::Lease`] with its calls awaited and its end as a future.

use std::future::Future;
use std::time::Duration;

use super::raw::lockd::lock::leases as wit_leases;
use super::{durability_to_wit, grant_from_wit, lost_future, LostReason};
use crate::{to_millis, Error, Grant, LeaseOptions};

/// A lease: one expiry for several locks, refreshed and revoked in one
/// step. [`crate::Lease`] for WASI 0.3: its calls are awaited (a lock under
/// it waits in the queue while the instance's other tasks run on) and its
/// end is a future.
///
/// Every lock taken with [`Lease::lock`] is owned by the lease's id and ends
/// with the lease. Dropping the lease revokes it (without awaiting the
/// store: a drop cannot wait), and so does the end of the instance that
/// holds it.
///
/// ```no_run
/// use std::time::Duration;
/// use lockd_guest::p3::Lease;
/// use lockd_guest::{Error, LeaseOptions};
///
/// async fn transfer() -> Result<(), Error> {
///     let lease = Lease::grant(Duration::from_secs(10), LeaseOptions::default().kept_alive()).await?;
///     let a = lease.lock("accounts/a", Duration::ZERO).await?;
///     let b = lease.lock("accounts/b", Duration::from_secs(1)).await?;
///     println!("tokens {} and {}", a.fencing_token, b.fencing_token);
///     lease.revoke().await // both released at once
/// }
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
    /// As [`crate::Lease::grant`].
    pub async fn grant(ttl: Duration, options: LeaseOptions) -> Result<Lease, Error> {
        let options = wit_leases::LeaseOptions {
            durability: durability_to_wit(options.durability),
            keep_alive: options.keep_alive,
        };
        let inner = wit_leases::Lease::grant(to_millis(ttl), options).await?;
        Ok(Lease { inner })
    }

    /// The id the host generated: the owner of every lock under the lease.
    pub fn id(&self) -> String {
        self.inner.id()
    }

    /// When the lease ends unless refreshed: Unix epoch milliseconds (moved
    /// by [`Lease::refresh`] and by keep-alive).
    pub fn expires_at_ms(&self) -> u64 {
        self.inner.expires_at_ms()
    }

    /// Takes the lock `name` under this lease, waiting up to `wait` in the
    /// host's FIFO queue; only the calling task waits, and dropping the
    /// returned future leaves the queue. A lock the lease holds answers its
    /// grant.
    ///
    /// # Errors
    ///
    /// As [`crate::Lease::lock`].
    pub async fn lock(&self, name: &str, wait: Duration) -> Result<Grant, Error> {
        let grant = self.inner.lock(name.to_string(), to_millis(wait)).await?;
        Ok(grant_from_wit(grant))
    }

    /// Releases one lock of the lease; the lease lives on.
    ///
    /// # Errors
    ///
    /// As [`crate::Lease::unlock`].
    pub async fn unlock(&self, name: &str) -> Result<(), Error> {
        Ok(self.inner.unlock(name.to_string()).await?)
    }

    /// Moves the expiry of the lease and all its locks to now + its TTL, in
    /// one step; answers the new expiry.
    ///
    /// # Errors
    ///
    /// As [`crate::Lease::refresh`].
    pub async fn refresh(&self) -> Result<u64, Error> {
        Ok(self.inner.refresh().await?)
    }

    /// Ends the lease and releases all its locks in one step; each passes to
    /// the head of its queue.
    ///
    /// # Errors
    ///
    /// As [`crate::Lease::revoke`].
    pub async fn revoke(self) -> Result<(), Error> {
        Ok(self.inner.revoke().await?)
    }

    /// Whether the lease is still live (asks the store; false when the store
    /// cannot answer).
    pub async fn is_alive(&self) -> bool {
        self.inner.is_alive().await
    }

    /// A future that resolves once the lease has ended, with the reason:
    /// [`LostReason::Expired`] (not refreshed in time, or keep-alive could
    /// not renew it), [`LostReason::EndedElsewhere`] (revoked by someone
    /// else, or one of its locks force-released) or [`LostReason::Released`]
    /// (revoked or dropped here). It does not borrow the lease; each call
    /// makes a new one.
    pub fn lost(&self) -> impl Future<Output = LostReason> + 'static {
        lost_future(self.inner.lost())
    }
}

//! Leases: one expiry for several locks, refreshed and revoked in one step
//! (docs/contract.md#c16-leases).

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use lockd_api::{
    DurabilityWord, GrantReply, LeaseGrantRequest, LeaseGrantedReply, LockRequest, Route, Status,
    StatusReply, UnlockRequest,
};
use lockd_core::keepalive::Terms;

use crate::client::{millis, Client, Grant};
use crate::error::Error;
use crate::holding::{get_lease, now_ms, refresh_lease, Hold, LostReason, Subject};
use crate::transport::Retry;

/// A lease request, made with [`Client::lease`]; `.await` it for a
/// [`Lease`].
#[derive(Debug)]
#[must_use = "a lease request does nothing until it is awaited"]
pub struct LeaseBuilder {
    client: Client,
    ttl: Duration,
    durability: Option<DurabilityWord>,
    keep_alive: bool,
}

impl Client {
    /// Asks for a lease of `ttl`.
    ///
    /// ```no_run
    /// # async fn run(client: lockd_native_client::Client) -> Result<(), lockd_native_client::Error> {
    /// use std::time::Duration;
    ///
    /// let lease = client.lease(Duration::from_secs(10)).keep_alive().await?;
    /// lease.lock("shard-1", Duration::ZERO).await?;
    /// lease.lock("shard-2", Duration::ZERO).await?;
    /// let released = lease.revoke().await?; // both, in one step
    /// assert_eq!(released, 2);
    /// # Ok(()) }
    /// ```
    pub fn lease(&self, ttl: Duration) -> LeaseBuilder {
        LeaseBuilder {
            client: self.clone(),
            ttl,
            durability: None,
            keep_alive: false,
        }
    }
}

impl LeaseBuilder {
    /// Whether the lease and its locks survive a server restart (the
    /// server's default, persistent, unless set).
    pub fn durability(mut self, durability: DurabilityWord) -> LeaseBuilder {
        self.durability = Some(durability);
        self
    }

    /// Refreshes the lease at a third of its TTL for as long as the
    /// [`Lease`] lives.
    pub fn keep_alive(mut self) -> LeaseBuilder {
        self.keep_alive = true;
        self
    }

    async fn grant(self) -> Result<Lease, Error> {
        let request = LeaseGrantRequest {
            namespace: self.client.ns(),
            ttl_ms: millis(self.ttl),
            durability: self.durability,
        };
        let sent_at_ms = now_ms();
        // Each grant mints a new id: one sent twice would leave a lease
        // nobody holds until its TTL ends it.
        let granted: LeaseGrantedReply = self
            .client
            .call(
                Route::LeaseGrant,
                &request,
                Status::Granted,
                Retry::Never,
                Duration::ZERO,
            )
            .await?;
        let terms = Terms {
            renewed_at_ms: sent_at_ms,
            ttl_ms: millis(self.ttl),
            expires_at_ms: granted.expires_at_ms,
        };
        let subject = Subject::Lease {
            id: granted.lease_id.clone(),
        };
        Ok(Lease {
            hold: Hold::start(self.client.clone(), subject, terms, self.keep_alive),
            client: self.client,
            id: granted.lease_id,
            ttl: self.ttl,
        })
    }
}

impl IntoFuture for LeaseBuilder {
    type Output = Result<Lease, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Lease, Error>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.grant())
    }
}

/// A lease: its id is the owner of every lock taken under it, and they all
/// share its expiry. Dropping it revokes it (spawned on the current tokio
/// runtime; outside one its TTL ends it).
#[derive(Debug)]
pub struct Lease {
    hold: Hold,
    client: Client,
    id: String,
    ttl: Duration,
}

impl Lease {
    /// Its id (`lease-` and 32 hex digits), the owner of its locks.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its TTL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// When it ends unless refreshed, as the store last answered: Unix
    /// epoch milliseconds.
    pub fn expires_at_ms(&self) -> u64 {
        self.hold.terms().expires_at_ms
    }

    /// Takes the lock `name` under this lease, waiting up to `wait` in its
    /// queue. A lock the lease holds already answers its grant unchanged;
    /// `not_held` once the lease has ended.
    pub async fn lock(&self, name: &str, wait: Duration) -> Result<Grant, Error> {
        let request = LockRequest {
            namespace: self.client.ns(),
            name: name.to_string(),
            wait_ms: (!wait.is_zero()).then(|| millis(wait)),
            lease_id: Some(self.id.clone()),
            ..LockRequest::default()
        };
        let grant: GrantReply = self
            .client
            .call(Route::Lock, &request, Status::Acquired, Retry::Safe, wait)
            .await?;
        Ok(grant.into())
    }

    /// Releases one lock of this lease; the lease lives on.
    pub async fn unlock(&self, name: &str) -> Result<(), Error> {
        let request = UnlockRequest {
            namespace: self.client.ns(),
            name: name.to_string(),
            owner: self.id.clone(),
            fencing_token: None,
        };
        // By owner alone: sent twice it could release a later grant of
        // the same name under this lease.
        let _: StatusReply = self
            .client
            .call(
                Route::Unlock,
                &request,
                Status::Unlocked,
                Retry::Never,
                Duration::ZERO,
            )
            .await?;
        Ok(())
    }

    /// Moves the expiry of the lease and all its locks to now + its TTL.
    /// Answers the new expiry. `not_held` marks it lost.
    pub async fn refresh(&self) -> Result<u64, Error> {
        let sent_at_ms = now_ms();
        let expires_at_ms = self
            .hold
            .note(refresh_lease(&self.client, &self.id).await)?;
        self.hold.renewed(sent_at_ms, self.ttl, expires_at_ms);
        Ok(expires_at_ms)
    }

    /// Ends the lease and releases all its locks in one step; answers how
    /// many it released.
    pub async fn revoke(self) -> Result<u64, Error> {
        self.hold.release().await
    }

    /// The names it holds, as the store answers now.
    pub async fn locks(&self) -> Result<Vec<String>, Error> {
        Ok(get_lease(&self.client, &self.id).await?.locks)
    }

    /// Whether the lease is live in the store (false when it cannot
    /// answer).
    pub async fn is_alive(&self) -> bool {
        self.hold.is_held().await
    }

    /// Whether it is lost, as far as this process knows (no call).
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Completes with why once the lease has ended.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.hold.lost()
    }
}

//! The lease behind a `lease` resource: one expiry for several locks, over
//! `/v1/leases/{grant,refresh,revoke,get}`, revoked on `revoke` or drop.

use lockd_api::{
    GrantReply, LeaseFoundReply, LeaseGrantedReply, LeaseRefreshedReply, LeaseRevokedReply, Route,
    Status,
};
use serde::de::DeserializeOwned;

use crate::call::{self, config, Retry};
use crate::held::{Held, Life};
use crate::types::{Error, Grant, LeaseOptions};
use crate::{locks, no_keep_alive, wire, Io};

/// A lease held by a resource.
#[derive(Debug)]
pub struct HeldLease {
    id: String,
    life: Life,
}

impl HeldLease {
    /// `lease.grant`.
    pub async fn grant<I: Io>(
        io: &I,
        ttl_ms: u32,
        options: &LeaseOptions,
    ) -> Result<HeldLease, Error> {
        if options.keep_alive && !I::KEEP_ALIVE {
            return Err(no_keep_alive());
        }
        let config = config(io)?;
        let request = wire::lease_grant_request(config, ttl_ms, options.durability);
        // A repeat would mint a second lease.
        let granted: LeaseGrantedReply = call::post(
            io,
            config,
            Route::LeaseGrant,
            &request,
            Status::Granted,
            0,
            Retry::Never,
        )
        .await?;
        Ok(HeldLease {
            id: granted.lease_id,
            life: Life::new(granted.expires_at_ms),
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// `lease.lock`: `name` under this lease.
    pub async fn lock(&self, io: &impl Io, name: String, wait_ms: u32) -> Result<Grant, Error> {
        let config = config(io)?;
        let request = wire::lease_lock_request(config, &self.id, name, wait_ms);
        // The lease's id is the owner: a repeat is a re-lock (C2, C16).
        let reply: GrantReply = call::post(
            io,
            config,
            Route::Lock,
            &request,
            Status::Acquired,
            wait_ms,
            Retry::Safe,
        )
        .await?;
        Ok(wire::grant(&reply))
    }

    /// `lease.unlock`: `name`, held under this lease (its id is the owner).
    pub async fn unlock(&self, io: &impl Io, name: &str) -> Result<(), Error> {
        locks::unlock(io, name, &self.id, None).await
    }

    /// `lease.refresh`: the new expiry.
    pub async fn refresh(&self, io: &impl Io) -> Result<u64, Error> {
        let reply: LeaseRefreshedReply =
            lease_call(io, Route::LeaseRefresh, &self.id, Status::Refreshed).await?;
        self.set_expires_at_ms(reply.expires_at_ms);
        Ok(reply.expires_at_ms)
    }

    /// `lease.is-alive`: unknown is not "alive" (a caller acting on `true`
    /// must be right).
    pub async fn is_alive(&self, io: &impl Io) -> bool {
        !self.is_released()
            && lease_call::<LeaseFoundReply>(io, Route::LeaseGet, &self.id, Status::Found)
                .await
                .is_ok()
    }
}

impl Held for HeldLease {
    fn expires_at_ms(&self) -> u64 {
        self.life.expires_at_ms()
    }

    fn set_expires_at_ms(&self, expires_at_ms: u64) {
        self.life.set_expires_at_ms(expires_at_ms);
    }

    fn is_released(&self) -> bool {
        self.life.is_released()
    }

    async fn still_held(&self, io: &impl Io) -> Option<bool> {
        match lease_call::<LeaseFoundReply>(io, Route::LeaseGet, &self.id, Status::Found).await {
            Ok(_) => Some(true),
            Err(Error::Unavailable(_)) => None,
            Err(_) => Some(false),
        }
    }

    async fn renew(&self, io: &impl Io, _ttl_ms: u32) -> Result<u64, Error> {
        lease_call::<LeaseRefreshedReply>(io, Route::LeaseRefresh, &self.id, Status::Refreshed)
            .await
            .map(|reply| reply.expires_at_ms)
    }

    async fn give_back(&self, io: &impl Io) -> Result<(), Error> {
        lease_call::<LeaseRevokedReply>(io, Route::LeaseRevoke, &self.id, Status::Revoked)
            .await
            .map(drop)
    }

    async fn release(&self, io: &impl Io) -> Result<(), Error> {
        self.life.release(self.give_back(io)).await
    }
}

/// A call that names one lease: refresh, revoke or get. Each is safe to
/// repeat: the id is never reused, a refresh sets the expiry from now, and
/// a repeated revoke finds the lease gone.
async fn lease_call<T: DeserializeOwned>(
    io: &impl Io,
    route: Route,
    id: &str,
    success: Status,
) -> Result<T, Error> {
    let config = config(io)?;
    let request = wire::lease_request(config, id);
    call::post(io, config, route, &request, success, 0, Retry::Safe).await
}

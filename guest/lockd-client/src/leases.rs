//! The `lease` resource: one expiry for several locks, over
//! `/v1/leases/{grant,refresh,revoke,get}`.

use std::cell::Cell;

use lockd_api::{
    GrantReply, LeaseFoundReply, LeaseGrantedReply, LeaseRefreshedReply, LeaseRevokedReply, Route,
    Status,
};

use crate::bindings::exports::lockd::lock::leases::{self, GuestLease, LeaseOptions};
use crate::bindings::exports::lockd::lock::types::{Error, Grant};
use crate::{call, http, ready_at, unlock, wire, Client};
use wasip2::io::poll::Pollable;

impl leases::Guest for Client {
    type Lease = Lease;
}

/// The state behind an exported `lease` resource.
#[derive(Debug)]
pub(crate) struct Lease {
    id: String,
    expires_at_ms: Cell<u64>,
    /// Revoked by `revoke`: dropping it sends nothing more.
    revoked: Cell<bool>,
}

/// A call that names one lease: refresh, revoke or get.
fn lease_call<T: serde::de::DeserializeOwned>(
    route: Route,
    id: &str,
    success: Status,
) -> Result<T, Error> {
    let config = http::config()?;
    let request = wire::lease_request(config, id);
    call::post(config, route, &request, success, 0)
}

impl GuestLease for Lease {
    fn grant(ttl_ms: u32, options: LeaseOptions) -> Result<leases::Lease, Error> {
        if options.keep_alive {
            return Err(crate::no_keep_alive());
        }
        let config = http::config()?;
        let request = wire::lease_grant_request(config, ttl_ms, options.durability);
        let granted: LeaseGrantedReply =
            call::post(config, Route::LeaseGrant, &request, Status::Granted, 0)?;
        let (id, expires_at_ms) = (granted.lease_id, granted.expires_at_ms);
        Ok(leases::Lease::new(Lease {
            id,
            expires_at_ms: Cell::new(expires_at_ms),
            revoked: Cell::new(false),
        }))
    }

    fn id(&self) -> String {
        self.id.clone()
    }

    fn expires_at_ms(&self) -> u64 {
        self.expires_at_ms.get()
    }

    fn lock(&self, name: String, wait_ms: u32) -> Result<Grant, Error> {
        let config = http::config()?;
        let request = wire::lease_lock_request(config, &self.id, name, wait_ms);
        let reply: GrantReply =
            call::post(config, Route::Lock, &request, Status::Acquired, wait_ms)?;
        Ok(wire::grant(&reply))
    }

    fn unlock(&self, name: String) -> Result<(), Error> {
        unlock(&name, &self.id, None)
    }

    fn refresh(&self) -> Result<u64, Error> {
        let reply: LeaseRefreshedReply =
            lease_call(Route::LeaseRefresh, &self.id, Status::Refreshed)?;
        self.expires_at_ms.set(reply.expires_at_ms);
        Ok(reply.expires_at_ms)
    }

    fn revoke(&self) -> Result<(), Error> {
        if self.revoked.get() {
            return Err(Error::NotHeld);
        }
        let outcome =
            lease_call::<LeaseRevokedReply>(Route::LeaseRevoke, &self.id, Status::Revoked)
                .map(drop);
        // Unless the outcome is unknown, this lease holds nothing now.
        if !matches!(outcome, Err(Error::Unavailable(_))) {
            self.revoked.set(true);
        }
        outcome
    }

    fn is_alive(&self) -> bool {
        // Unknown is not "alive": a caller acting on `true` must be right.
        !self.revoked.get()
            && lease_call::<LeaseFoundReply>(Route::LeaseGet, &self.id, Status::Found).is_ok()
    }

    fn subscribe_lost(&self) -> Pollable {
        if self.revoked.get() {
            return ready_at(0);
        }
        ready_at(self.expires_at_ms.get())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.revoked.get() {
            // Dropping a lease revokes it; if the server cannot be reached,
            // the TTL ends it.
            let _ = lease_call::<LeaseRevokedReply>(Route::LeaseRevoke, &self.id, Status::Revoked);
        }
    }
}

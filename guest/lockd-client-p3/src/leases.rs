//! The `lease` resource: one expiry for several locks, over
//! `/v1/leases/{grant,refresh,revoke,get}`; its `lost` futures and its
//! revoke on drop come from its [`Watch`].

use std::cell::Cell;
use std::rc::Rc;

use lockd_api::{
    GrantReply, LeaseFoundReply, LeaseGrantedReply, LeaseRefreshedReply, LeaseRevokedReply, Route,
    Status,
};

use crate::bindings::exports::lockd::lock::leases::{self, GuestLease, LeaseOptions};
use crate::bindings::exports::lockd::lock::types::{Error, Grant, LostReason};
use crate::lost::{lease_call, Subject, Watch};
use crate::{call, http, wire, Client};
use wit_bindgen::FutureReader;

impl leases::Guest for Client {
    type Lease = Lease;
}

/// The state behind an exported `lease` resource.
#[derive(Debug)]
pub(crate) struct Lease {
    id: String,
    /// Revoked by `revoke`: dropping it sends nothing more.
    revoked: Cell<bool>,
    watch: Rc<Watch>,
}

impl GuestLease for Lease {
    async fn grant(ttl_ms: u32, options: LeaseOptions) -> Result<leases::Lease, Error> {
        let config = http::config()?;
        let request = wire::lease_grant_request(config, ttl_ms, options.durability);
        let granted: LeaseGrantedReply =
            call::post(config, Route::LeaseGrant, &request, Status::Granted, 0).await?;
        let subject = Subject::Lease {
            id: granted.lease_id.clone(),
        };
        Ok(leases::Lease::new(Lease {
            id: granted.lease_id,
            revoked: Cell::new(false),
            watch: Watch::start(
                subject,
                granted.expires_at_ms,
                options.keep_alive.then_some(ttl_ms),
            ),
        }))
    }

    fn id(&self) -> String {
        self.id.clone()
    }

    fn expires_at_ms(&self) -> u64 {
        self.watch.expires_at_ms()
    }

    async fn lock(&self, name: String, wait_ms: u32) -> Result<Grant, Error> {
        let config = http::config()?;
        let request = wire::lease_lock_request(config, &self.id, name, wait_ms);
        let reply: GrantReply =
            call::post(config, Route::Lock, &request, Status::Acquired, wait_ms).await?;
        Ok(wire::grant(&reply))
    }

    async fn unlock(&self, name: String) -> Result<(), Error> {
        crate::unlock(&name, &self.id, None).await
    }

    async fn refresh(&self) -> Result<u64, Error> {
        let reply: LeaseRefreshedReply =
            lease_call(Route::LeaseRefresh, &self.id, Status::Refreshed).await?;
        self.watch.set_expires_at_ms(reply.expires_at_ms);
        Ok(reply.expires_at_ms)
    }

    async fn revoke(&self) -> Result<(), Error> {
        if self.revoked.get() {
            return Err(Error::NotHeld);
        }
        let outcome =
            lease_call::<LeaseRevokedReply>(Route::LeaseRevoke, &self.id, Status::Revoked)
                .await
                .map(drop);
        // Unless the outcome is unknown, this lease holds nothing now.
        if !matches!(outcome, Err(Error::Unavailable(_))) {
            self.revoked.set(true);
            self.watch.released();
        }
        outcome
    }

    async fn is_alive(&self) -> bool {
        // Unknown is not "alive": a caller acting on `true` must be right.
        !self.revoked.get()
            && lease_call::<LeaseFoundReply>(Route::LeaseGet, &self.id, Status::Found)
                .await
                .is_ok()
    }

    fn lost(&self) -> FutureReader<LostReason> {
        self.watch.lost()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // A destructor may not wait: the watcher revokes it.
        self.watch.dropped();
    }
}

//! The exported resources: `guard`, `hold`, `leadership` (each a
//! `lockd-client-core` [`HeldGrant`]), `lease` ([`HeldLease`]) and
//! `leader-watch` ([`LeaderWatch`]), and `elections.leader`. A `leader-watch`
//! polls (see the crate's documentation).

use std::ops::Deref;

use lockd_client_core::{Held, HeldGrant, HeldLease, LeaderWatch, LockClaim, LEADER_POLL_MS};

use crate::bindings::exports::lockd::lock::elections::{
    self, CampaignOptions, GuestLeaderWatch, GuestLeadership, LeaderInfo,
};
use crate::bindings::exports::lockd::lock::guards::{self, GuardOptions, GuestGuard};
use crate::bindings::exports::lockd::lock::holds::{self, GuestHold, HoldMode};
use crate::bindings::exports::lockd::lock::leases::{self, GuestLease, LeaseOptions};
use crate::bindings::exports::lockd::lock::locks::LockOptions;
use crate::bindings::exports::lockd::lock::types::{Error, Grant};
use crate::convert::wit;
use crate::io::{ready_at, ready_in, run, Http};
use crate::Client;
use wasip2::io::poll::Pollable;

/// A grant or lease of a resource, given back (unless released here) when
/// the guest drops the resource.
#[derive(Debug)]
pub(crate) struct Owned<H: Held>(H);

impl<H: Held> Deref for Owned<H> {
    type Target = H;

    fn deref(&self) -> &H {
        &self.0
    }
}

impl<H: Held> Drop for Owned<H> {
    fn drop(&mut self) {
        run(self.0.abandon(&Http));
    }
}

/// Takes a guard's or hold's grant.
fn take(
    name: String,
    ttl_ms: u32,
    options: GuardOptions,
    claim: LockClaim,
) -> Result<Owned<HeldGrant>, Error> {
    let held = run(HeldGrant::take(&Http, name, ttl_ms, &options.into(), claim))?;
    Ok(Owned(held))
}

/// The methods of `guard` and `hold`, which have the same names and answer
/// from the [`HeldGrant`] each wraps (`self.0`).
macro_rules! grant_methods {
    () => {
        fn fencing_token(&self) -> u64 {
            self.0.fencing_token()
        }

        fn expires_at_ms(&self) -> u64 {
            self.0.expires_at_ms()
        }

        fn owner(&self) -> String {
            self.0.owner().to_owned()
        }

        fn is_held(&self) -> bool {
            run(self.0.is_held(&Http))
        }

        fn extend(&self, ttl_ms: u32) -> Result<Grant, Error> {
            wit(run(self.0.extend(&Http, ttl_ms)))
        }

        fn release(&self) -> Result<(), Error> {
            wit(run(self.0.release(&Http)))
        }

        fn subscribe_lost(&self) -> Pollable {
            ready_at(self.0.lost_at_ms())
        }
    };
}

impl guards::Guest for Client {
    type Guard = Guard;
}

/// The state behind an exported `guard` resource.
#[derive(Debug)]
pub(crate) struct Guard(Owned<HeldGrant>);

impl GuestGuard for Guard {
    fn acquire(name: String, ttl_ms: u32, options: LockOptions) -> Result<guards::Guard, Error> {
        let options = GuardOptions {
            wait_ms: options.wait_ms,
            durability: options.durability,
            keep_alive: false,
        };
        Self::acquire_with(name, ttl_ms, options)
    }

    fn acquire_with(
        name: String,
        ttl_ms: u32,
        options: GuardOptions,
    ) -> Result<guards::Guard, Error> {
        let held = take(name, ttl_ms, options, LockClaim::Exclusive)?;
        Ok(guards::Guard::new(Guard(held)))
    }

    grant_methods!();
}

impl holds::Guest for Client {
    type Hold = Hold;
}

/// The state behind an exported `hold` resource.
#[derive(Debug)]
pub(crate) struct Hold(Owned<HeldGrant>);

impl GuestHold for Hold {
    fn acquire(
        name: String,
        mode: HoldMode,
        ttl_ms: u32,
        options: GuardOptions,
    ) -> Result<holds::Hold, Error> {
        let held = take(name, ttl_ms, options, mode.into())?;
        Ok(holds::Hold::new(Hold(held)))
    }

    fn acquire_permit(
        name: String,
        permits: u32,
        ttl_ms: u32,
        options: GuardOptions,
    ) -> Result<holds::Hold, Error> {
        let held = take(name, ttl_ms, options, LockClaim::Permit { permits })?;
        Ok(holds::Hold::new(Hold(held)))
    }

    grant_methods!();
}

impl leases::Guest for Client {
    type Lease = Lease;
}

/// The state behind an exported `lease` resource.
#[derive(Debug)]
pub(crate) struct Lease(Owned<HeldLease>);

impl GuestLease for Lease {
    fn grant(ttl_ms: u32, options: LeaseOptions) -> Result<leases::Lease, Error> {
        let held = run(HeldLease::grant(&Http, ttl_ms, &options.into()))?;
        Ok(leases::Lease::new(Lease(Owned(held))))
    }

    fn id(&self) -> String {
        self.0.id().to_owned()
    }

    fn expires_at_ms(&self) -> u64 {
        self.0.expires_at_ms()
    }

    fn lock(&self, name: String, wait_ms: u32) -> Result<Grant, Error> {
        wit(run(self.0.lock(&Http, name, wait_ms)))
    }

    fn unlock(&self, name: String) -> Result<(), Error> {
        wit(run(self.0.unlock(&Http, &name)))
    }

    fn refresh(&self) -> Result<u64, Error> {
        wit(run(self.0.refresh(&Http)))
    }

    fn revoke(&self) -> Result<(), Error> {
        wit(run(self.0.release(&Http)))
    }

    fn is_alive(&self) -> bool {
        run(self.0.is_alive(&Http))
    }

    fn subscribe_lost(&self) -> Pollable {
        ready_at(self.0.lost_at_ms())
    }
}

impl elections::Guest for Client {
    type Leadership = Leadership;
    type LeaderWatch = Watch;

    fn leader(name: String) -> Result<Option<LeaderInfo>, Error> {
        leader(&name)
    }
}

/// `POST /v1/elections/leader`: the leader, or `None` when nobody leads.
fn leader(name: &str) -> Result<Option<LeaderInfo>, Error> {
    let leader = run(lockd_client_core::leader(&Http, name))?;
    Ok(leader.map(LeaderInfo::from))
}

/// The state behind an exported `leadership` resource.
#[derive(Debug)]
pub(crate) struct Leadership(Owned<HeldGrant>);

impl GuestLeadership for Leadership {
    fn campaign(
        name: String,
        value: String,
        ttl_ms: u32,
        options: CampaignOptions,
    ) -> Result<elections::Leadership, Error> {
        let held = run(HeldGrant::campaign(
            &Http,
            name,
            value,
            ttl_ms,
            &options.into(),
        ))?;
        Ok(elections::Leadership::new(Leadership(Owned(held))))
    }

    fn fencing_token(&self) -> u64 {
        self.0.fencing_token()
    }

    fn candidate(&self) -> String {
        self.0.owner().to_owned()
    }

    fn expires_at_ms(&self) -> u64 {
        self.0.expires_at_ms()
    }

    fn proclaim(&self, value: String) -> Result<(), Error> {
        wit(run(self.0.proclaim(&Http, value)))
    }

    fn extend(&self, ttl_ms: u32) -> Result<Grant, Error> {
        wit(run(self.0.extend(&Http, ttl_ms)))
    }

    fn resign(&self) -> Result<(), Error> {
        wit(run(self.0.release(&Http)))
    }

    fn is_leader(&self) -> bool {
        run(self.0.is_held(&Http))
    }

    fn subscribe_lost(&self) -> Pollable {
        ready_at(self.0.lost_at_ms())
    }
}

/// The state behind an exported `leader-watch` resource.
#[derive(Debug)]
pub(crate) struct Watch(LeaderWatch);

impl GuestLeaderWatch for Watch {
    fn open(name: String) -> Result<elections::LeaderWatch, Error> {
        let watch = run(LeaderWatch::open(&Http, name))?;
        Ok(elections::LeaderWatch::new(Watch(watch)))
    }

    /// Asks the server once: ready at once if the leader differs from the
    /// one last seen (or the server cannot answer: `current` says why),
    /// else a timer of [`LEADER_POLL_MS`] after which the guest asks again.
    /// A wasi:io pollable of this component can only be a host timer or
    /// stream; a timer is the one that outlives the watch safely.
    fn subscribe(&self) -> Pollable {
        if run(self.0.changed(&Http)) {
            ready_in(0)
        } else {
            ready_in(LEADER_POLL_MS)
        }
    }

    fn current(&self) -> Result<Option<LeaderInfo>, Error> {
        let leader = run(self.0.current(&Http))?;
        Ok(leader.map(LeaderInfo::from))
    }
}

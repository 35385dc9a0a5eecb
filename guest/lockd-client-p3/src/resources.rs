//! The exported resources: `guard`, `hold`, `leadership` (each a
//! `lockd-client-core` [`HeldGrant`]) and `lease` ([`HeldLease`]), each
//! with its [`Watch`]er, `leader-watch` ([`LeaderWatch`]), and
//! `elections.leader`.

use lockd_client_core::{Held, HeldGrant, HeldLease, LeaderWatch, LockClaim};
use wit_bindgen::FutureReader;

use crate::bindings::exports::lockd::lock::elections::{
    self, CampaignOptions, GuestLeaderWatch, GuestLeadership, LeaderInfo,
};
use crate::bindings::exports::lockd::lock::guards::{self, GuardOptions, GuestGuard};
use crate::bindings::exports::lockd::lock::holds::{self, GuestHold, HoldMode};
use crate::bindings::exports::lockd::lock::leases::{self, GuestLease, LeaseOptions};
use crate::bindings::exports::lockd::lock::types::{Error, Grant, LostReason};
use crate::convert::wit;
use crate::io::{lost_future, Http};
use crate::Client;

/// A grant or lease of a resource with its watcher, which runs on the task
/// of the call that made it.
type Watch<H> = lockd_client_core::Watch<H, Http>;

/// Takes a guard's or hold's grant, renewed if `options` asks for
/// keep-alive.
async fn take(
    name: String,
    ttl_ms: u32,
    options: GuardOptions,
    claim: LockClaim,
) -> Result<Watch<HeldGrant>, Error> {
    let options = options.into();
    let held = HeldGrant::take(&Http, name, ttl_ms, &options, claim).await?;
    Ok(Watch::start(
        held,
        options.keep_alive.then_some(ttl_ms),
        Http,
    ))
}

/// A new `lost` future of `watch`.
fn lost<H: Held>(watch: &Watch<H>) -> FutureReader<LostReason> {
    let (writer, reader) = lost_future();
    watch.lost(writer);
    reader
}

/// The methods of `guard` and `hold`, which have the same names and answer
/// from the [`Watch`] each wraps (`self.0`).
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

        async fn is_held(&self) -> bool {
            self.0.is_held(&Http).await
        }

        async fn extend(&self, ttl_ms: u32) -> Result<Grant, Error> {
            wit(self.0.extend(&Http, ttl_ms).await)
        }

        async fn release(&self) -> Result<(), Error> {
            wit(self.0.release().await)
        }

        fn lost(&self) -> FutureReader<LostReason> {
            lost(&self.0)
        }
    };
}

impl guards::Guest for Client {
    type Guard = Guard;
}

/// The state behind an exported `guard` resource.
#[derive(Debug)]
pub(crate) struct Guard(Watch<HeldGrant>);

impl GuestGuard for Guard {
    async fn acquire(
        name: String,
        ttl_ms: u32,
        options: GuardOptions,
    ) -> Result<guards::Guard, Error> {
        let held = take(name, ttl_ms, options, LockClaim::Exclusive).await?;
        Ok(guards::Guard::new(Guard(held)))
    }

    grant_methods!();
}

impl holds::Guest for Client {
    type Hold = Hold;
}

/// The state behind an exported `hold` resource.
#[derive(Debug)]
pub(crate) struct Hold(Watch<HeldGrant>);

impl GuestHold for Hold {
    async fn acquire(
        name: String,
        mode: HoldMode,
        ttl_ms: u32,
        options: GuardOptions,
    ) -> Result<holds::Hold, Error> {
        let held = take(name, ttl_ms, options, mode.into()).await?;
        Ok(holds::Hold::new(Hold(held)))
    }

    async fn acquire_permit(
        name: String,
        permits: u32,
        ttl_ms: u32,
        options: GuardOptions,
    ) -> Result<holds::Hold, Error> {
        let held = take(name, ttl_ms, options, LockClaim::Permit { permits }).await?;
        Ok(holds::Hold::new(Hold(held)))
    }

    grant_methods!();
}

impl leases::Guest for Client {
    type Lease = Lease;
}

/// The state behind an exported `lease` resource.
#[derive(Debug)]
pub(crate) struct Lease(Watch<HeldLease>);

impl GuestLease for Lease {
    async fn grant(ttl_ms: u32, options: LeaseOptions) -> Result<leases::Lease, Error> {
        let options = options.into();
        let held = HeldLease::grant(&Http, ttl_ms, &options).await?;
        let watch = Watch::start(held, options.keep_alive.then_some(ttl_ms), Http);
        Ok(leases::Lease::new(Lease(watch)))
    }

    fn id(&self) -> String {
        self.0.id().to_owned()
    }

    fn expires_at_ms(&self) -> u64 {
        self.0.expires_at_ms()
    }

    async fn lock(&self, name: String, wait_ms: u32) -> Result<Grant, Error> {
        wit(self.0.lock(&Http, name, wait_ms).await)
    }

    async fn unlock(&self, name: String) -> Result<(), Error> {
        wit(self.0.unlock(&Http, &name).await)
    }

    async fn refresh(&self) -> Result<u64, Error> {
        wit(self.0.refresh(&Http).await)
    }

    async fn revoke(&self) -> Result<(), Error> {
        wit(self.0.release().await)
    }

    async fn is_alive(&self) -> bool {
        self.0.is_alive(&Http).await
    }

    fn lost(&self) -> FutureReader<LostReason> {
        lost(&self.0)
    }
}

impl elections::Guest for Client {
    type Leadership = Leadership;
    type LeaderWatch = Watcher;

    async fn leader(name: String) -> Result<Option<LeaderInfo>, Error> {
        let leader = lockd_client_core::leader(&Http, &name).await?;
        Ok(leader.map(LeaderInfo::from))
    }
}

/// The state behind an exported `leadership` resource.
#[derive(Debug)]
pub(crate) struct Leadership(Watch<HeldGrant>);

impl GuestLeadership for Leadership {
    async fn campaign(
        name: String,
        value: String,
        ttl_ms: u32,
        options: CampaignOptions,
    ) -> Result<elections::Leadership, Error> {
        let options = options.into();
        let held = HeldGrant::campaign(&Http, name, value, ttl_ms, &options).await?;
        let watch = Watch::start(held, options.keep_alive.then_some(ttl_ms), Http);
        Ok(elections::Leadership::new(Leadership(watch)))
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

    async fn proclaim(&self, value: String) -> Result<(), Error> {
        wit(self.0.proclaim(&Http, value).await)
    }

    async fn extend(&self, ttl_ms: u32) -> Result<Grant, Error> {
        wit(self.0.extend(&Http, ttl_ms).await)
    }

    async fn resign(&self) -> Result<(), Error> {
        wit(self.0.release().await)
    }

    async fn is_leader(&self) -> bool {
        self.0.is_held(&Http).await
    }

    fn lost(&self) -> FutureReader<LostReason> {
        lost(&self.0)
    }
}

/// The state behind an exported `leader-watch` resource.
#[derive(Debug)]
pub(crate) struct Watcher(LeaderWatch);

impl GuestLeaderWatch for Watcher {
    async fn open(name: String) -> Result<elections::LeaderWatch, Error> {
        let watch = LeaderWatch::open(&Http, name).await?;
        Ok(elections::LeaderWatch::new(Watcher(watch)))
    }

    /// Asks the server every [`lockd_client_core::LEADER_POLL_MS`] until
    /// the leader differs from the one last seen, or the server cannot
    /// answer (`current` then says why).
    async fn changed(&self) {
        self.0.wait_changed(&Http).await;
    }

    async fn current(&self) -> Result<Option<LeaderInfo>, Error> {
        let leader = self.0.current(&Http).await?;
        Ok(leader.map(LeaderInfo::from))
    }
}

//! What the resources that hold one grant (`guard`, `hold`, `leadership`)
//! do alike over REST: taken for a fresh owner, asked after with `get`,
//! extended, given back on `release` or (by their watcher) on drop, and
//! `lost` futures from their [`Watch`]. The `guard` and `hold` resources
//! themselves are here too.

use std::cell::Cell;
use std::rc::Rc;

use lockd_api::LockClaim;

use crate::bindings::exports::lockd::lock::guards::{self, GuardOptions, GuestGuard};
use crate::bindings::exports::lockd::lock::holds::{self, GuestHold, HoldMode};
use crate::bindings::exports::lockd::lock::locks::LockOptions;
use crate::bindings::exports::lockd::lock::types::{Error, Grant, LostReason};
use crate::lost::{GiveBack, Subject, Watch};
use crate::Client;
use wit_bindgen::FutureReader;

/// One grant held by a resource, for an owner this client generated.
#[derive(Debug)]
pub(crate) struct HeldGrant {
    pub(crate) name: String,
    pub(crate) owner: String,
    pub(crate) token: u64,
    /// Released by `release` (or `resign`): dropping it sends nothing more.
    released: Cell<bool>,
    watch: Rc<Watch>,
}

impl HeldGrant {
    /// The state of a grant just made; its watcher runs on the calling
    /// task from now on, renewing it by `keep_alive_ms` if given.
    pub(crate) fn new(
        name: String,
        owner: String,
        grant: &Grant,
        give_back: GiveBack,
        keep_alive_ms: Option<u32>,
    ) -> Self {
        let subject = Subject::Grant {
            name: name.clone(),
            owner: owner.clone(),
            token: grant.fencing_token,
            give_back,
        };
        HeldGrant {
            name,
            owner,
            token: grant.fencing_token,
            released: Cell::new(false),
            watch: Watch::start(subject, grant.expires_at_ms, keep_alive_ms),
        }
    }

    /// Takes `name` as `claim` for a fresh owner `guard-<32 hex>` (the
    /// native host's owner of guards and holds, whatever their mode).
    async fn take(
        name: String,
        ttl_ms: u32,
        options: GuardOptions,
        claim: LockClaim,
    ) -> Result<HeldGrant, Error> {
        let keep_alive_ms = options.keep_alive.then_some(ttl_ms);
        let owner = crate::fresh_id("guard");
        let options = LockOptions {
            wait_ms: options.wait_ms,
            durability: options.durability,
        };
        let grant = crate::lock(&name, &owner, ttl_ms, options, claim).await?;
        Ok(HeldGrant::new(
            name,
            owner,
            &grant,
            GiveBack::Unlock,
            keep_alive_ms,
        ))
    }

    pub(crate) fn is_released(&self) -> bool {
        self.released.get()
    }

    pub(crate) fn expires_at_ms(&self) -> u64 {
        self.watch.expires_at_ms()
    }

    /// A `get` that finds this owner and token among the holders; `false`
    /// when the server cannot answer.
    pub(crate) async fn is_held(&self) -> bool {
        !self.released.get() && crate::holds(&self.name, &self.owner, self.token).await
    }

    pub(crate) async fn extend(&self, ttl_ms: u32) -> Result<Grant, Error> {
        if self.released.get() {
            return Err(Error::NotHeld);
        }
        let grant = crate::extend(&self.name, &self.owner, ttl_ms).await?;
        self.watch.set_expires_at_ms(grant.expires_at_ms);
        Ok(grant)
    }

    pub(crate) async fn release(&self) -> Result<(), Error> {
        if self.released.get() {
            return Err(Error::NotHeld);
        }
        let outcome = self.watch.subject().give_back().await;
        // Unless the outcome is unknown, this grant is gone now.
        if !matches!(outcome, Err(Error::Unavailable(_))) {
            self.released.set(true);
            self.watch.released();
        }
        outcome
    }

    pub(crate) fn lost(&self) -> FutureReader<LostReason> {
        self.watch.lost()
    }
}

impl Drop for HeldGrant {
    fn drop(&mut self) {
        // A destructor may not wait: the watcher gives it back.
        self.watch.dropped();
    }
}

/// The methods of `guard` and `hold`, which have the same names and answer
/// from the [`HeldGrant`] each wraps (`self.0`).
macro_rules! grant_methods {
    () => {
        fn fencing_token(&self) -> u64 {
            self.0.token
        }

        fn expires_at_ms(&self) -> u64 {
            self.0.expires_at_ms()
        }

        fn owner(&self) -> String {
            self.0.owner.clone()
        }

        async fn is_held(&self) -> bool {
            self.0.is_held().await
        }

        async fn extend(&self, ttl_ms: u32) -> Result<Grant, Error> {
            self.0.extend(ttl_ms).await
        }

        async fn release(&self) -> Result<(), Error> {
            self.0.release().await
        }

        fn lost(&self) -> FutureReader<LostReason> {
            self.0.lost()
        }
    };
}

impl guards::Guest for Client {
    type Guard = Guard;
}

/// The state behind an exported `guard` resource.
#[derive(Debug)]
pub(crate) struct Guard(HeldGrant);

impl GuestGuard for Guard {
    async fn acquire(
        name: String,
        ttl_ms: u32,
        options: GuardOptions,
    ) -> Result<guards::Guard, Error> {
        let held = HeldGrant::take(name, ttl_ms, options, LockClaim::Exclusive).await?;
        Ok(guards::Guard::new(Guard(held)))
    }

    grant_methods!();
}

impl holds::Guest for Client {
    type Hold = Hold;
}

/// The state behind an exported `hold` resource.
#[derive(Debug)]
pub(crate) struct Hold(HeldGrant);

impl GuestHold for Hold {
    async fn acquire(
        name: String,
        mode: HoldMode,
        ttl_ms: u32,
        options: GuardOptions,
    ) -> Result<holds::Hold, Error> {
        let claim = match mode {
            HoldMode::Exclusive => LockClaim::Exclusive,
            HoldMode::Shared => LockClaim::Shared,
        };
        let held = HeldGrant::take(name, ttl_ms, options, claim).await?;
        Ok(holds::Hold::new(Hold(held)))
    }

    async fn acquire_permit(
        name: String,
        permits: u32,
        ttl_ms: u32,
        options: GuardOptions,
    ) -> Result<holds::Hold, Error> {
        let held = HeldGrant::take(name, ttl_ms, options, LockClaim::Permit { permits }).await?;
        Ok(holds::Hold::new(Hold(held)))
    }

    grant_methods!();
}

//! What the resources that hold one grant (`guard`, `hold`, `leadership`)
//! do alike over REST: taken for a fresh owner, asked after with `get`,
//! extended, given back on `release` or drop, and a lost pollable at the
//! known expiry. The `guard` and `hold` resources themselves are here too.

use std::cell::Cell;

use lockd_api::{LockClaim, Route, Status, StatusReply};

use crate::bindings::exports::lockd::lock::guards::{self, GuardOptions, GuestGuard};
use crate::bindings::exports::lockd::lock::holds::{self, GuestHold, HoldMode};
use crate::bindings::exports::lockd::lock::locks::LockOptions;
use crate::bindings::exports::lockd::lock::types::{Error, Grant};
use crate::{call, http, wire, Client};
use wasip2::io::poll::Pollable;

/// How a grant is given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GiveBack {
    /// `POST /v1/locks/unlock`: a lock, a shared lock or a permit.
    Unlock,
    /// `POST /v1/elections/resign`: a leadership.
    Resign,
}

/// One grant held by a resource, for an owner this client generated.
#[derive(Debug)]
pub(crate) struct HeldGrant {
    pub(crate) name: String,
    pub(crate) owner: String,
    pub(crate) token: u64,
    expires_at_ms: Cell<u64>,
    /// Released by `release` (or `resign`): dropping it sends nothing more.
    released: Cell<bool>,
    give_back: GiveBack,
}

impl HeldGrant {
    /// The state of a grant just made.
    pub(crate) fn new(name: String, owner: String, grant: &Grant, give_back: GiveBack) -> Self {
        HeldGrant {
            name,
            owner,
            token: grant.fencing_token,
            expires_at_ms: Cell::new(grant.expires_at_ms),
            released: Cell::new(false),
            give_back,
        }
    }

    /// Takes `name` as `claim` for a fresh owner `guard-<32 hex>` (the
    /// native host's owner of guards and holds, whatever their mode).
    fn take(
        name: String,
        ttl_ms: u32,
        options: GuardOptions,
        claim: LockClaim,
    ) -> Result<HeldGrant, Error> {
        if options.keep_alive {
            return Err(crate::no_keep_alive());
        }
        let owner = crate::fresh_id("guard");
        let options = LockOptions {
            wait_ms: options.wait_ms,
            durability: options.durability,
        };
        let grant = crate::lock(&name, &owner, ttl_ms, options, claim)?;
        Ok(HeldGrant::new(name, owner, &grant, GiveBack::Unlock))
    }

    pub(crate) fn is_released(&self) -> bool {
        self.released.get()
    }

    pub(crate) fn expires_at_ms(&self) -> u64 {
        self.expires_at_ms.get()
    }

    /// A `get` that finds this owner and token among the holders; `false`
    /// when the server cannot answer.
    pub(crate) fn is_held(&self) -> bool {
        !self.released.get() && crate::holds(&self.name, &self.owner, self.token)
    }

    pub(crate) fn extend(&self, ttl_ms: u32) -> Result<Grant, Error> {
        if self.released.get() {
            return Err(Error::NotHeld);
        }
        let grant = crate::extend(&self.name, &self.owner, ttl_ms)?;
        self.expires_at_ms.set(grant.expires_at_ms);
        Ok(grant)
    }

    pub(crate) fn release(&self) -> Result<(), Error> {
        if self.released.get() {
            return Err(Error::NotHeld);
        }
        let outcome = self.give_back();
        // Unless the outcome is unknown, this grant is gone now.
        if !matches!(outcome, Err(Error::Unavailable(_))) {
            self.released.set(true);
        }
        outcome
    }

    /// Ready at the expiry this client last saw, or at once once released
    /// here: the loss it can know of without asking the server.
    pub(crate) fn subscribe_lost(&self) -> Pollable {
        if self.released.get() {
            return crate::ready_in(0);
        }
        crate::ready_at(self.expires_at_ms.get())
    }

    /// Unlock or resign, only this grant (its token).
    fn give_back(&self) -> Result<(), Error> {
        match self.give_back {
            GiveBack::Unlock => crate::unlock(&self.name, &self.owner, Some(self.token)),
            GiveBack::Resign => {
                let config = http::config()?;
                let request = wire::resign_request(config, &self.name, &self.owner, self.token);
                let _: StatusReply =
                    call::post(config, Route::Resign, &request, Status::Resigned, 0)?;
                Ok(())
            }
        }
    }
}

impl Drop for HeldGrant {
    fn drop(&mut self) {
        if !self.released.get() {
            // Not-held or not-owner means the grant already ended, and an
            // unreachable server leaves it to its TTL: nobody to tell.
            let _ = self.give_back();
        }
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

        fn is_held(&self) -> bool {
            self.0.is_held()
        }

        fn extend(&self, ttl_ms: u32) -> Result<Grant, Error> {
            self.0.extend(ttl_ms)
        }

        fn release(&self) -> Result<(), Error> {
            self.0.release()
        }

        fn subscribe_lost(&self) -> Pollable {
            self.0.subscribe_lost()
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
        let held = HeldGrant::take(name, ttl_ms, options, LockClaim::Exclusive)?;
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
    fn acquire(
        name: String,
        mode: HoldMode,
        ttl_ms: u32,
        options: GuardOptions,
    ) -> Result<holds::Hold, Error> {
        let claim = match mode {
            HoldMode::Exclusive => LockClaim::Exclusive,
            HoldMode::Shared => LockClaim::Shared,
        };
        let held = HeldGrant::take(name, ttl_ms, options, claim)?;
        Ok(holds::Hold::new(Hold(held)))
    }

    fn acquire_permit(
        name: String,
        permits: u32,
        ttl_ms: u32,
        options: GuardOptions,
    ) -> Result<holds::Hold, Error> {
        let held = HeldGrant::take(name, ttl_ms, options, LockClaim::Permit { permits })?;
        Ok(holds::Hold::new(Hold(held)))
    }

    grant_methods!();
}

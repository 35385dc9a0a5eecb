//! The grant behind a `guard`, a `hold` or a `leadership`: taken for a
//! fresh owner, asked after with `get`, extended, and given back with
//! `/v1/locks/unlock` (a leadership: `/v1/elections/resign`) on `release` or
//! drop. Campaigns and `proclaim` are in [`crate::elections`].

use lockd_api::{LockClaim, Route, Status, StatusReply};

use crate::call::{self, config, Retry};
use crate::held::{Held, Life};
use crate::locks::{self, fresh_id};
use crate::types::{Error, Grant, GuardOptions};
use crate::{no_keep_alive, wire, Io};

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
pub struct HeldGrant {
    pub(crate) name: String,
    pub(crate) owner: String,
    pub(crate) token: u64,
    give_back: GiveBack,
    pub(crate) life: Life,
}

impl HeldGrant {
    /// The state of a grant just made.
    pub(crate) fn new(name: String, owner: String, grant: &Grant, give_back: GiveBack) -> Self {
        HeldGrant {
            name,
            owner,
            token: grant.fencing_token,
            give_back,
            life: Life::new(grant.expires_at_ms),
        }
    }

    /// `guard.acquire` and `hold.acquire(-permit)`: takes `name` as `claim`
    /// for a fresh owner `guard-<32 hex>` (the native host's owner of guards
    /// and holds, whatever their mode).
    pub async fn take<I: Io>(
        io: &I,
        name: String,
        ttl_ms: u32,
        options: &GuardOptions,
        claim: LockClaim,
    ) -> Result<HeldGrant, Error> {
        if options.keep_alive && !I::KEEP_ALIVE {
            return Err(no_keep_alive());
        }
        let owner = fresh_id(io, "guard");
        let grant = locks::lock(io, &name, &owner, ttl_ms, &options.lock(), claim).await?;
        Ok(HeldGrant::new(name, owner, &grant, GiveBack::Unlock))
    }

    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// The owner (a leadership's candidate).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// A `get` that finds this owner and token among the holders; `false`
    /// when the server cannot answer (a caller acting on `true` must be
    /// right).
    pub async fn is_held(&self, io: &impl Io) -> bool {
        !self.is_released() && self.still_held(io).await == Some(true)
    }

    /// `extend`: `not-held` once released here.
    pub async fn extend(&self, io: &impl Io, ttl_ms: u32) -> Result<Grant, Error> {
        if self.is_released() {
            return Err(Error::NotHeld);
        }
        let grant = locks::extend(io, &self.name, &self.owner, ttl_ms).await?;
        self.set_expires_at_ms(grant.expires_at_ms);
        Ok(grant)
    }
}

impl Held for HeldGrant {
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
        locks::still_holds(io, &self.name, &self.owner, self.token).await
    }

    async fn renew(&self, io: &impl Io, ttl_ms: u32) -> Result<u64, Error> {
        locks::extend(io, &self.name, &self.owner, ttl_ms)
            .await
            .map(|grant| grant.expires_at_ms)
    }

    async fn give_back(&self, io: &impl Io) -> Result<(), Error> {
        match self.give_back {
            GiveBack::Unlock => locks::unlock(io, &self.name, &self.owner, Some(self.token)).await,
            GiveBack::Resign => {
                let config = config(io)?;
                let request = wire::resign_request(config, &self.name, &self.owner, self.token);
                // It names its grant by token, as an unlock does (C5).
                let _: StatusReply = call::post(
                    io,
                    config,
                    Route::Resign,
                    &request,
                    Status::Resigned,
                    0,
                    Retry::Safe,
                )
                .await?;
                Ok(())
            }
        }
    }

    async fn release(&self, io: &impl Io) -> Result<(), Error> {
        self.life.release(self.give_back(io)).await
    }
}

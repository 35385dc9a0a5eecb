//! Elections over `/v1/elections/*`: `leader`, campaigns (a grant of the
//! election's name, kept with `/v1/locks/extend` and given back with
//! `/v1/elections/resign`: a [`HeldGrant`]), `proclaim`, and the
//! `leader-watch` resource, which polls.

use std::cell::RefCell;

use lockd_api::{GrantReply, LeaderReply, Route, Status, StatusReply};

use crate::call::{self, config, Retry};
use crate::grants::{GiveBack, HeldGrant};
use crate::held::Held;
use crate::locks::fresh_id;
use crate::types::{Error, GuardOptions, LeaderInfo};
use crate::watch::Runtime;
use crate::wire::{self, seen, Seen};
use crate::{no_keep_alive, Io};

/// How long a leader watch waits before it asks again when the leader had
/// not changed: `lockd-client`'s `subscribe` answers a timer of this, and
/// `lockd-client-p3`'s `changed` asks at this pace.
pub const LEADER_POLL_MS: u64 = 500;

/// `POST /v1/elections/leader`: the leader, or `None` when nobody leads.
pub async fn leader(io: &impl Io, name: &str) -> Result<Option<LeaderInfo>, Error> {
    let config = config(io)?;
    let request = wire::leader_request(config, name);
    let found: Result<LeaderReply, _> = call::find(io, config, Route::Leader, &request).await?;
    Ok(found.ok().map(wire::leader_info))
}

impl HeldGrant {
    /// `leadership.campaign`: `POST /v1/elections/campaign` for a fresh
    /// candidate `candidate-<32 hex>` (the native host's candidate names:
    /// unguessable, so that nobody else in the namespace can resign this
    /// leadership).
    pub async fn campaign<I: Io>(
        io: &I,
        name: String,
        value: String,
        ttl_ms: u32,
        options: &GuardOptions,
    ) -> Result<HeldGrant, Error> {
        if options.keep_alive && !I::KEEP_ALIVE {
            return Err(no_keep_alive());
        }
        let config = config(io)?;
        let candidate = fresh_id(io, "candidate");
        let request =
            wire::campaign_request(config, name, candidate, value, ttl_ms, &options.lock());
        let reply: GrantReply = call::post(
            io,
            config,
            Route::Campaign,
            &request,
            Status::Acquired,
            options.wait_ms,
            // A campaign by the leader is a re-lock (C2).
            Retry::Safe,
        )
        .await?;
        Ok(HeldGrant::new(
            request.name,
            request.candidate,
            &wire::grant(&reply),
            GiveBack::Resign,
        ))
    }

    /// `leadership.proclaim`: `not-held` once resigned here.
    pub async fn proclaim(&self, io: &impl Io, value: String) -> Result<(), Error> {
        if self.is_released() {
            return Err(Error::NotHeld);
        }
        let config = config(io)?;
        let request = wire::proclaim_request(config, &self.name, &self.owner, self.token, value);
        // A repeat may land after a newer value the guest proclaimed.
        let _: StatusReply = call::post(
            io,
            config,
            Route::Proclaim,
            &request,
            Status::Proclaimed,
            0,
            Retry::Never,
        )
        .await?;
        Ok(())
    }
}

/// The state behind a `leader-watch` resource: the election and the leader
/// the guest last saw.
#[derive(Debug)]
pub struct LeaderWatch {
    name: String,
    seen: RefCell<Seen>,
}

impl LeaderWatch {
    /// `leader-watch.open`: asks for the leader.
    pub async fn open(io: &impl Io, name: String) -> Result<LeaderWatch, Error> {
        let first = leader(io, &name).await?;
        Ok(LeaderWatch {
            name,
            seen: RefCell::new(seen(first.as_ref())),
        })
    }

    /// Asks the server once: whether the leader differs from the one last
    /// seen, or the server cannot answer (`current` then says why).
    pub async fn changed(&self, io: &impl Io) -> bool {
        match leader(io, &self.name).await {
            Ok(now) => seen(now.as_ref()) != *self.seen.borrow(),
            Err(_) => true,
        }
    }

    /// Asks every [`LEADER_POLL_MS`] until [`LeaderWatch::changed`].
    pub async fn wait_changed(&self, rt: &impl Runtime) {
        while !self.changed(rt).await {
            rt.sleep_ms(LEADER_POLL_MS).await;
        }
    }

    /// `leader-watch.current`: asks for the leader, who is then the one
    /// last seen.
    pub async fn current(&self, io: &impl Io) -> Result<Option<LeaderInfo>, Error> {
        let now = leader(io, &self.name).await?;
        *self.seen.borrow_mut() = seen(now.as_ref());
        Ok(now)
    }
}

//! The `elections` interface over `/v1/elections/*`: `leader`, the
//! `leadership` resource (a grant of the election's name, kept with
//! `/v1/locks/extend` and given back with `/v1/elections/resign`), and the
//! `leader-watch` resource, which polls (see the crate's documentation).

use std::cell::RefCell;

use lockd_api::{GrantReply, LeaderReply, Route, Status, StatusReply};

use crate::bindings::exports::lockd::lock::elections::{
    self, CampaignOptions, GuestLeaderWatch, GuestLeadership, LeaderInfo,
};
use crate::bindings::exports::lockd::lock::locks::LockOptions;
use crate::bindings::exports::lockd::lock::types::{Error, Grant};
use crate::grants::{GiveBack, HeldGrant};
use crate::wire::{self, seen, Seen};
use crate::{call, http, Client};
use wasip2::io::poll::Pollable;

/// How long a `leader-watch` pollable waits before the guest should ask
/// again, when the leader had not changed at `subscribe`. A wasi:io
/// pollable of this component can only be a host timer or stream; a timer
/// is the one that outlives the watch safely.
const WATCH_POLL_MS: u64 = 500;

impl elections::Guest for Client {
    type Leadership = Leadership;
    type LeaderWatch = LeaderWatch;

    fn leader(name: String) -> Result<Option<LeaderInfo>, Error> {
        leader(&name)
    }
}

/// `POST /v1/elections/leader`: the leader, or `None` when nobody leads.
fn leader(name: &str) -> Result<Option<LeaderInfo>, Error> {
    let config = http::config()?;
    let request = wire::leader_request(config, name);
    let found: Result<LeaderReply, _> = call::find(config, Route::Leader, &request)?;
    Ok(found.ok().map(wire::leader_info))
}

/// The state behind an exported `leadership` resource.
#[derive(Debug)]
pub(crate) struct Leadership(HeldGrant);

impl GuestLeadership for Leadership {
    fn campaign(
        name: String,
        value: String,
        ttl_ms: u32,
        options: CampaignOptions,
    ) -> Result<elections::Leadership, Error> {
        if options.keep_alive {
            return Err(crate::no_keep_alive());
        }
        let config = http::config()?;
        // The native host's candidate names: unguessable, so that nobody
        // else in the namespace can resign this leadership.
        let candidate = crate::fresh_id("candidate");
        let lock_options = LockOptions {
            wait_ms: options.wait_ms,
            durability: options.durability,
        };
        let request = wire::campaign_request(config, name, candidate, value, ttl_ms, &lock_options);
        let reply: GrantReply = call::post(
            config,
            Route::Campaign,
            &request,
            Status::Acquired,
            options.wait_ms,
        )?;
        let held = HeldGrant::new(
            request.name,
            request.candidate,
            &wire::grant(&reply),
            GiveBack::Resign,
        );
        Ok(elections::Leadership::new(Leadership(held)))
    }

    fn fencing_token(&self) -> u64 {
        self.0.token
    }

    fn candidate(&self) -> String {
        self.0.owner.clone()
    }

    fn expires_at_ms(&self) -> u64 {
        self.0.expires_at_ms()
    }

    fn proclaim(&self, value: String) -> Result<(), Error> {
        if self.0.is_released() {
            return Err(Error::NotHeld);
        }
        let config = http::config()?;
        let request =
            wire::proclaim_request(config, &self.0.name, &self.0.owner, self.0.token, value);
        let _: StatusReply = call::post(config, Route::Proclaim, &request, Status::Proclaimed, 0)?;
        Ok(())
    }

    fn extend(&self, ttl_ms: u32) -> Result<Grant, Error> {
        self.0.extend(ttl_ms)
    }

    fn resign(&self) -> Result<(), Error> {
        self.0.release()
    }

    fn is_leader(&self) -> bool {
        self.0.is_held()
    }

    fn subscribe_lost(&self) -> Pollable {
        self.0.subscribe_lost()
    }
}

/// The state behind an exported `leader-watch` resource: the election and
/// the leader the guest last saw.
#[derive(Debug)]
pub(crate) struct LeaderWatch {
    name: String,
    seen: RefCell<Seen>,
}

impl GuestLeaderWatch for LeaderWatch {
    fn open(name: String) -> Result<elections::LeaderWatch, Error> {
        let first = leader(&name)?;
        Ok(elections::LeaderWatch::new(LeaderWatch {
            name,
            seen: RefCell::new(seen(first.as_ref())),
        }))
    }

    /// Asks the server once: ready at once if the leader differs from the
    /// one last seen (or the server cannot answer: `current` says why),
    /// else a timer of [`WATCH_POLL_MS`] after which the guest asks again.
    fn subscribe(&self) -> Pollable {
        match leader(&self.name) {
            Ok(now) if seen(now.as_ref()) == *self.seen.borrow() => crate::ready_in(WATCH_POLL_MS),
            _ => crate::ready_in(0),
        }
    }

    fn current(&self) -> Result<Option<LeaderInfo>, Error> {
        let now = leader(&self.name)?;
        *self.seen.borrow_mut() = seen(now.as_ref());
        Ok(now)
    }
}

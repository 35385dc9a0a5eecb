//! What keeps watch over one held grant or lease after the call that made
//! it has returned: its `lost` futures, and its give-back when the guest
//! drops it.
//!
//! A component runs only inside a task, and a resource's `lost` and its
//! destructor are plain (non-async) functions, which may not wait. So the
//! call that makes the resource (`guard.acquire`, `lease.grant`, ...) leaves
//! a watcher running on its own task after it returns (`spawn_local`). Every
//! [`POLL_MS`] (or at the expiry this client last saw, if sooner) it looks
//! at what happened since:
//!
//! - the guest dropped the resource: it gives the grant back (unlock,
//!   resign or revoke, errors ignored) unless it has ended already,
//!   resolves the futures still pending with `released`, and stops;
//! - somebody awaits a `lost` future: it asks the server (`get`, or the
//!   lease's `get`) whether the grant still holds. If not, the futures
//!   resolve with `expired` when the expiry this client last saw has
//!   passed, else `ended-elsewhere` (force-released, revoked, taken over).
//!   While the server cannot answer, it asks again until the expiry, then
//!   says `expired`.
//!
//! - keep-alive was asked for: at a third of the TTL since the last renewal
//!   it extends the grant (or refreshes the lease) by the TTL. A renewal the
//!   server refuses ends it as a failed check does (below); one that cannot
//!   reach the server is tried again at each look until the expiry.
//!
//! `release` (or `resign`, `revoke`) here resolves the pending futures with
//! `released` at once, from its own task. Nobody awaiting and no keep-alive
//! means no request: an idle guard costs one timer per [`POLL_MS`].

use std::cell::RefCell;
use std::rc::Rc;

use lockd_api::{
    LeaseFoundReply, LeaseRefreshedReply, LeaseRevokedReply, Route, Status, StatusReply,
};

use crate::bindings::exports::lockd::lock::types::{Error, LostReason};
use crate::bindings::wasi::clocks::{monotonic_clock, system_clock};
use crate::bindings::wit_future;
use crate::{call, http, wire};
use wit_bindgen::{FutureReader, FutureWriter};

/// How often a watcher looks, and so the longest a `lost` future waits
/// beyond the loss (plus one request), and a dropped resource's give-back.
pub(crate) const POLL_MS: u64 = 250;

/// How a grant is given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GiveBack {
    /// `POST /v1/locks/unlock`: a lock, a shared lock or a permit.
    Unlock,
    /// `POST /v1/elections/resign`: a leadership.
    Resign,
}

/// What a watcher watches.
#[derive(Debug)]
pub(crate) enum Subject {
    /// One grant, for an owner this client generated.
    Grant {
        name: String,
        owner: String,
        token: u64,
        give_back: GiveBack,
    },
    /// A lease.
    Lease { id: String },
}

impl Subject {
    /// Whether the server still shows it; `None` when it cannot answer.
    async fn still_held(&self) -> Option<bool> {
        match self {
            Subject::Grant {
                name, owner, token, ..
            } => match crate::get(name).await {
                Ok(Ok(found)) => Some(wire::holds(&found, owner, *token)),
                Ok(Err(_free)) => Some(false),
                Err(_) => None,
            },
            Subject::Lease { id } => {
                match lease_call::<LeaseFoundReply>(Route::LeaseGet, id, Status::Found).await {
                    Ok(_) => Some(true),
                    Err(Error::Unavailable(_)) => None,
                    Err(_) => Some(false),
                }
            }
        }
    }

    /// Extends the grant or refreshes the lease by `ttl_ms`: the new expiry.
    async fn renew(&self, ttl_ms: u32) -> Result<u64, Error> {
        match self {
            Subject::Grant { name, owner, .. } => crate::extend(name, owner, ttl_ms)
                .await
                .map(|grant| grant.expires_at_ms),
            Subject::Lease { id } => {
                lease_call::<LeaseRefreshedReply>(Route::LeaseRefresh, id, Status::Refreshed)
                    .await
                    .map(|reply| reply.expires_at_ms)
            }
        }
    }

    /// Unlock, resign or revoke: only this grant (its token) or lease.
    pub(crate) async fn give_back(&self) -> Result<(), Error> {
        match self {
            Subject::Grant {
                name,
                owner,
                token,
                give_back: GiveBack::Unlock,
            } => crate::unlock(name, owner, Some(*token)).await,
            Subject::Grant {
                name,
                owner,
                token,
                give_back: GiveBack::Resign,
            } => {
                let config = http::config()?;
                let request = wire::resign_request(config, name, owner, *token);
                let _: StatusReply =
                    call::post(config, Route::Resign, &request, Status::Resigned, 0).await?;
                Ok(())
            }
            Subject::Lease { id } => {
                lease_call::<LeaseRevokedReply>(Route::LeaseRevoke, id, Status::Revoked)
                    .await
                    .map(drop)
            }
        }
    }
}

/// A call that names one lease: refresh, revoke or get.
pub(crate) async fn lease_call<T: serde::de::DeserializeOwned>(
    route: Route,
    id: &str,
    success: Status,
) -> Result<T, Error> {
    let config = http::config()?;
    let request = wire::lease_request(config, id);
    call::post(config, route, &request, success, 0).await
}

/// The state a resource and its watcher share.
#[derive(Debug)]
pub(crate) struct Watch {
    subject: Subject,
    /// The TTL keep-alive renews by, if asked for.
    keep_alive_ms: Option<u32>,
    state: RefCell<State>,
}

#[derive(Debug)]
struct State {
    expires_at_ms: u64,
    /// When keep-alive renews next (Unix ms).
    renew_at_ms: u64,
    /// Why it no longer holds, once known.
    ended: Option<LostReason>,
    /// The `lost` futures not resolved yet.
    pending: Vec<FutureWriter<LostReason>>,
    /// The guest dropped the resource.
    dropped: bool,
}

impl Watch {
    /// Starts watching `subject`, which expires at `expires_at_ms`, renewing
    /// it by `keep_alive_ms` if given. Call it from the task of the call that
    /// made the resource: the watcher runs on that task.
    pub(crate) fn start(
        subject: Subject,
        expires_at_ms: u64,
        keep_alive_ms: Option<u32>,
    ) -> Rc<Watch> {
        let watch = Rc::new(Watch {
            subject,
            keep_alive_ms,
            state: RefCell::new(State {
                expires_at_ms,
                renew_at_ms: now_ms() + third(keep_alive_ms),
                ended: None,
                pending: Vec::new(),
                dropped: false,
            }),
        });
        wit_bindgen::spawn_local(run(watch.clone()));
        watch
    }

    pub(crate) fn subject(&self) -> &Subject {
        &self.subject
    }

    pub(crate) fn expires_at_ms(&self) -> u64 {
        self.state.borrow().expires_at_ms
    }

    pub(crate) fn set_expires_at_ms(&self, expires_at_ms: u64) {
        self.state.borrow_mut().expires_at_ms = expires_at_ms;
    }

    /// A new future that resolves once this no longer holds. A plain
    /// function: the watcher writes it.
    pub(crate) fn lost(&self) -> FutureReader<LostReason> {
        let (writer, reader) = wit_future::new(|| LostReason::Released);
        self.state.borrow_mut().pending.push(writer);
        reader
    }

    /// Released here: the pending futures resolve now, from the caller's
    /// task (an async call).
    pub(crate) fn released(&self) {
        let pending = {
            let mut state = self.state.borrow_mut();
            state.ended.get_or_insert(LostReason::Released);
            std::mem::take(&mut state.pending)
        };
        resolve(pending, LostReason::Released);
    }

    /// The guest dropped the resource: the watcher gives it back.
    pub(crate) fn dropped(&self) {
        self.state.borrow_mut().dropped = true;
    }
}

/// Resolves `pending` with `reason`, each on the current task (a write
/// waits until the reader takes it).
fn resolve(pending: Vec<FutureWriter<LostReason>>, reason: LostReason) {
    for writer in pending {
        wit_bindgen::spawn_local(async move {
            // A reader dropped meanwhile wants no answer.
            let _ = writer.write(reason).await;
        });
    }
}

/// A third of the keep-alive TTL: how long between two renewals.
fn third(keep_alive_ms: Option<u32>) -> u64 {
    keep_alive_ms.map_or(u64::MAX / 2, |ttl| u64::from(ttl / 3).max(1))
}

/// Unix milliseconds by this host's clock.
pub(crate) fn now_ms() -> u64 {
    let now = system_clock::now();
    let seconds = u64::try_from(now.seconds).unwrap_or(0);
    seconds * 1_000 + u64::from(now.nanoseconds / 1_000_000)
}

/// Waits `ms` milliseconds (only this task).
pub(crate) async fn sleep_ms(ms: u64) {
    monotonic_clock::wait_for(ms.saturating_mul(1_000_000)).await;
}

/// The watcher (see the module's documentation).
async fn run(watch: Rc<Watch>) {
    loop {
        let (expires_at_ms, renew_at_ms) = {
            let state = watch.state.borrow();
            (state.expires_at_ms, state.renew_at_ms)
        };
        let now = now_ms();
        let until = expires_at_ms.min(renew_at_ms).saturating_sub(now);
        sleep_ms(POLL_MS.min(until.max(1))).await;

        let (dropped, ended, awaited) = {
            let state = watch.state.borrow();
            (state.dropped, state.ended, !state.pending.is_empty())
        };
        if dropped {
            if ended.is_none() {
                // Not-held or not-owner means it already ended, and an
                // unreachable server leaves it to its TTL: nobody to tell.
                let _ = watch.subject.give_back().await;
            }
            let pending = std::mem::take(&mut watch.state.borrow_mut().pending);
            resolve(pending, ended.unwrap_or(LostReason::Released));
            return;
        }
        if let Some(reason) = ended {
            // Futures asked for after the end.
            let pending = std::mem::take(&mut watch.state.borrow_mut().pending);
            resolve(pending, reason);
            continue;
        }
        let mut held = None;
        if let Some(ttl_ms) = watch.keep_alive_ms {
            if now_ms() >= watch.state.borrow().renew_at_ms {
                match watch.subject.renew(ttl_ms).await {
                    Ok(expires_at_ms) => {
                        let mut state = watch.state.borrow_mut();
                        state.expires_at_ms = expires_at_ms;
                        state.renew_at_ms = now_ms() + third(Some(ttl_ms));
                        held = Some(true);
                    }
                    // Tried again at the next look, until the expiry.
                    Err(Error::Unavailable(_)) => {}
                    Err(_) => held = Some(false),
                }
            }
        }
        if held.is_none() && !awaited {
            continue;
        }
        let held = match held {
            Some(held) => Some(held),
            None if awaited => watch.subject.still_held().await,
            None => None,
        };
        let now = now_ms();
        let expired = now >= watch.expires_at_ms();
        let lost = match held {
            Some(true) => None,
            Some(false) if expired => Some(LostReason::Expired),
            Some(false) => Some(LostReason::EndedElsewhere),
            None if expired => Some(LostReason::Expired),
            None => None,
        };
        if let Some(reason) = lost {
            let pending = {
                let mut state = watch.state.borrow_mut();
                // A release meanwhile says it first.
                let reason = *state.ended.get_or_insert(reason);
                (std::mem::take(&mut state.pending), reason)
            };
            resolve(pending.0, pending.1);
        }
    }
}

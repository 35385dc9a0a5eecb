//! What keeps watch over one held grant or lease after the call that made
//! it has returned, for a client that runs tasks (`lockd-client-p3`): its
//! `lost` futures, its keep-alive, and its give-back when the guest drops
//! it.
//!
//! A component runs only inside a task, and a resource's `lost` and its
//! destructor are plain (non-async) functions, which may not wait. So the
//! call that makes the resource (`guard.acquire`, `lease.grant`, ...) leaves
//! a watcher running on its own task after it returns
//! ([`Runtime::spawn`]). Every [`POLL_MS`] (or at the expiry this client
//! last saw, or the next renewal, if sooner) it looks at what happened
//! since:
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
//!   server refuses ends it as a failed check does (above); one that cannot
//!   reach the server is tried again at each look until the expiry.
//!
//! `release` (or `resign`, `revoke`) here resolves the pending futures with
//! `released` at once, from its own task. Nobody awaiting and no keep-alive
//! means no request: an idle guard costs one timer per [`POLL_MS`].

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::rc::Rc;

use crate::held::Held;
use crate::types::{Error, LostReason};
use crate::Io;

/// How often a watcher looks, and so the longest a `lost` future waits
/// beyond the loss (plus one request), and a dropped resource's give-back.
pub const POLL_MS: u64 = 250;

/// What a client that runs tasks does for a watcher, besides its [`Io`].
pub trait Runtime: Io + 'static {
    /// The writing end of one `lost` future.
    type Waiter: 'static;

    /// Unix milliseconds by the host's clock.
    fn now_ms(&self) -> u64;

    /// Waits `ms` milliseconds (only the awaiting task).
    fn sleep_ms(&self, ms: u64) -> impl Future<Output = ()>;

    /// Runs `task` on the current task after the call that made it returns.
    fn spawn(&self, task: impl Future<Output = ()> + 'static);

    /// Resolves `waiters` with `reason`.
    fn resolve(&self, waiters: Vec<Self::Waiter>, reason: LostReason);
}

/// A held grant or lease with its watcher: what a resource holds. Dropping
/// it tells the watcher, which gives the grant back. It dereferences to
/// the grant or lease.
pub struct Watch<H: Held + 'static, R: Runtime> {
    shared: Rc<Shared<H, R>>,
}

/// The state a resource and its watcher share.
struct Shared<H, R: Runtime> {
    held: H,
    /// The TTL keep-alive renews by, if asked for.
    keep_alive_ms: Option<u32>,
    runtime: R,
    state: RefCell<State<R::Waiter>>,
}

struct State<W> {
    /// When keep-alive renews next (Unix ms).
    renew_at_ms: u64,
    /// Why it no longer holds, once known.
    ended: Option<LostReason>,
    /// The `lost` futures not resolved yet.
    pending: Vec<W>,
    /// The guest dropped the resource.
    dropped: bool,
}

impl<H: Held + fmt::Debug + 'static, R: Runtime> fmt::Debug for Watch<H, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state.borrow();
        f.debug_struct("Watch")
            .field("held", &self.shared.held)
            .field("keep_alive_ms", &self.shared.keep_alive_ms)
            .field("renew_at_ms", &state.renew_at_ms)
            .field("ended", &state.ended)
            .field("pending", &state.pending.len())
            .field("dropped", &state.dropped)
            .finish()
    }
}

impl<H: Held + 'static, R: Runtime> Watch<H, R> {
    /// Starts watching `held`, renewing it by `keep_alive_ms` if given. Call
    /// it from the task of the call that made the resource: the watcher runs
    /// on that task.
    pub fn start(held: H, keep_alive_ms: Option<u32>, runtime: R) -> Watch<H, R> {
        let renew_at_ms = runtime.now_ms() + third(keep_alive_ms);
        let shared = Rc::new(Shared {
            held,
            keep_alive_ms,
            runtime,
            state: RefCell::new(State {
                renew_at_ms,
                ended: None,
                pending: Vec::new(),
                dropped: false,
            }),
        });
        shared.runtime.spawn(run(shared.clone()));
        Watch { shared }
    }

    /// Adds a `lost` future, which the watcher (or `release`) resolves once
    /// this no longer holds. A plain function, as `lost` is.
    pub fn lost(&self, waiter: R::Waiter) {
        self.shared.state.borrow_mut().pending.push(waiter);
    }

    /// [`Held::release`]; once released, the pending `lost` futures resolve
    /// with `released` at once, from the caller's task.
    pub async fn release(&self) -> Result<(), Error> {
        let shared = &self.shared;
        let was_held = !shared.held.is_released();
        let outcome = shared.held.release(&shared.runtime).await;
        if was_held && shared.held.is_released() {
            let pending = {
                let mut state = shared.state.borrow_mut();
                state.ended.get_or_insert(LostReason::Released);
                std::mem::take(&mut state.pending)
            };
            shared.runtime.resolve(pending, LostReason::Released);
        }
        outcome
    }
}

impl<H: Held + 'static, R: Runtime> Deref for Watch<H, R> {
    type Target = H;

    fn deref(&self) -> &H {
        &self.shared.held
    }
}

impl<H: Held + 'static, R: Runtime> Drop for Watch<H, R> {
    fn drop(&mut self) {
        // A destructor may not wait: the watcher gives it back.
        self.shared.state.borrow_mut().dropped = true;
    }
}

/// A third of the keep-alive TTL: how long between two renewals.
fn third(keep_alive_ms: Option<u32>) -> u64 {
    keep_alive_ms.map_or(u64::MAX / 2, |ttl| u64::from(ttl / 3).max(1))
}

/// What a look finds lost: `held` is whether the server still shows it
/// (`None`: it could not answer), `expired` whether the expiry this client
/// last saw has passed.
fn lost_reason(held: Option<bool>, expired: bool) -> Option<LostReason> {
    match held {
        Some(true) => None,
        Some(false) if expired => Some(LostReason::Expired),
        Some(false) => Some(LostReason::EndedElsewhere),
        None if expired => Some(LostReason::Expired),
        None => None,
    }
}

/// The watcher (see the module's documentation).
async fn run<H: Held, R: Runtime>(watch: Rc<Shared<H, R>>) {
    let runtime = &watch.runtime;
    loop {
        let renew_at_ms = watch.state.borrow().renew_at_ms;
        let until = watch
            .held
            .expires_at_ms()
            .min(renew_at_ms)
            .saturating_sub(runtime.now_ms());
        runtime.sleep_ms(POLL_MS.min(until.max(1))).await;

        let (dropped, ended, awaited) = {
            let state = watch.state.borrow();
            (state.dropped, state.ended, !state.pending.is_empty())
        };
        if dropped {
            if ended.is_none() {
                // Not-held or not-owner means it already ended, and an
                // unreachable server leaves it to its TTL: nobody to tell.
                let _ = watch.held.give_back(runtime).await;
            }
            let pending = std::mem::take(&mut watch.state.borrow_mut().pending);
            runtime.resolve(pending, ended.unwrap_or(LostReason::Released));
            return;
        }
        if let Some(reason) = ended {
            // Futures asked for after the end.
            let pending = std::mem::take(&mut watch.state.borrow_mut().pending);
            runtime.resolve(pending, reason);
            continue;
        }
        let mut held = None;
        if let Some(ttl_ms) = watch.keep_alive_ms {
            if runtime.now_ms() >= watch.state.borrow().renew_at_ms {
                match watch.held.renew(runtime, ttl_ms).await {
                    Ok(expires_at_ms) => {
                        watch.held.set_expires_at_ms(expires_at_ms);
                        watch.state.borrow_mut().renew_at_ms =
                            runtime.now_ms() + third(Some(ttl_ms));
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
            None if awaited => watch.held.still_held(runtime).await,
            None => None,
        };
        let expired = runtime.now_ms() >= watch.held.expires_at_ms();
        if let Some(reason) = lost_reason(held, expired) {
            let (pending, reason) = {
                let mut state = watch.state.borrow_mut();
                // A release meanwhile says it first.
                let reason = *state.ended.get_or_insert(reason);
                (std::mem::take(&mut state.pending), reason)
            };
            runtime.resolve(pending, reason);
        }
    }
}

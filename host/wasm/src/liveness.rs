//! Keep-alive and the lost signal of guards, holds, leaderships and leases
//! (docs/contract.md#c17-keep-alive, #c18-lost), on the core's one rule
//! ([`lockd_core::keepalive`]).
//!
//! Each guard or lease shares a [`Holding`] (its terms and lost flag) with a
//! [`Monitor`]: the task that renews it (with keep-alive) or watches its
//! expiry (without), and marks it lost. What is local to this crate is how
//! a hold is renewed and checked (over [`LockService`]), what else ends it
//! (a lease's end, a force-release), and the `wasi:io` pollable a guest
//! waits on. The task belongs to the resource: dropping the resource, or the
//! instance's store, aborts it, so renewal never outlives its holder.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use lockd_core::keepalive::{self, CheckHeld, Holding, Lost, Renew, Terms};
use lockd_core::{Claim, Clock, LockError, LockInfo, LockService, SystemClock};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi_io::poll::{subscribe, DynPollable, Pollable};

/// The clock that times every hold of this capability: monotonic, so that a
/// step of the wall clock neither fires nor hides a lost signal.
const CLOCK: SystemClock = SystemClock;

/// Now on [`CLOCK`]. Read just before a grant or renewal is sent, it is the
/// time the hold is counted from ([`Terms::renewed_at_ms`]).
pub(crate) fn now_ms() -> u64 {
    CLOCK.now_ms()
}

/// The terms of a grant or renewal for `ttl_ms`, sent at `sent_at_ms`,
/// that the store answered with `expires_at_ms`.
pub(crate) fn terms(sent_at_ms: u64, ttl_ms: u64, expires_at_ms: u64) -> Terms {
    Terms {
        renewed_at_ms: sent_at_ms,
        ttl_ms,
        expires_at_ms,
    }
}

/// `subscribe-lost`: a `wasi:io` pollable in `table`, ready once `holding`
/// is lost.
pub(crate) fn subscribe_lost(
    table: &mut ResourceTable,
    holding: &Holding,
) -> wasmtime::Result<Resource<DynPollable>> {
    let pollable = table.push(LostPollable(holding.subscribe_lost()))?;
    subscribe(table, pollable)
}

/// Who ended a hold, as far as this host knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// Released (or dropped) by its holder here.
    Released,
    /// Not renewed in time, or a renewal was refused: the core's keep-alive
    /// or expiry watch marked it lost.
    Expired,
    /// An operator force-released it, or (a lease) it was revoked or ended
    /// elsewhere.
    EndedElsewhere,
}

/// The [`Cause`] of a hold's loss. The host's own paths record it before
/// they mark the [`Holding`] lost (through [`end`]), so that whoever wakes
/// on the mark reads it; the core's keep-alive and expiry watch mark it
/// without recording, so an unrecorded loss is [`Cause::Expired`].
#[derive(Debug, Default)]
pub(crate) struct Ending {
    cause: OnceLock<Cause>,
    /// The holder is releasing or revoking it here right now: the store
    /// reports that end to the [`Monitor`] before the holder's call returns
    /// and records [`Cause::Released`], and it must not read as an end
    /// elsewhere.
    releasing: AtomicBool,
}

impl Ending {
    /// Why the hold was lost, once it is.
    pub(crate) fn cause(&self) -> Cause {
        self.cause.get().copied().unwrap_or(Cause::Expired)
    }

    /// Says that the holder's own release (or revoke) is under way, or, if
    /// the store could not answer it, no longer.
    pub(crate) fn set_releasing(&self, releasing: bool) {
        self.releasing.store(releasing, Ordering::SeqCst);
    }
}

/// Marks `holding` lost for `cause`, unless it was lost already (the first
/// cause stays). Answers whether this call marked it.
pub(crate) fn end(holding: &Holding, ending: &Ending, cause: Cause) -> bool {
    if !holding.is_lost() {
        let _ = ending.cause.set(cause);
    }
    holding.mark_lost()
}

/// Completes once `holding` is lost, with the cause `ending` records: the
/// WASI 0.3 `lost` future. Holds only a receiver, so it never keeps a hold
/// alive; a holding that is gone counts as lost.
pub(crate) fn lost(
    holding: &Holding,
    ending: Arc<Ending>,
) -> impl std::future::Future<Output = Cause> + Send + 'static {
    let mut lost = holding.subscribe_lost();
    async move {
        let _ = lost.wait_for(|lost| *lost).await;
        ending.cause()
    }
}

/// The host side of a `subscribe-lost` pollable.
#[derive(Debug)]
struct LostPollable(watch::Receiver<bool>);

#[wasmtime_wasi_io::async_trait]
impl Pollable for LostPollable {
    async fn ready(&mut self) {
        // The sender lives as long as the guard or lease; once that is gone
        // (dropped), it holds nothing, so a closed channel is ready too.
        let _ = self.0.wait_for(|lost| *lost).await;
    }
}

/// What a monitor renews and checks.
#[derive(Debug)]
pub(crate) enum Subject {
    /// A guard, hold or leadership: `name` held by `owner` under `token`
    /// for `claim`.
    Grant {
        namespace: String,
        name: String,
        owner: String,
        token: u64,
        claim: Claim,
    },
    /// A lease.
    Lease { namespace: String, id: String },
}

/// The expiry of the grant of `name` held by `owner` under `token`, or none
/// if the store shows no such grant. `get` shows an exclusive lock's holder
/// and an election's leader; a shared name or a semaphore has several
/// holders, among which `get` shows only the most recent, so it is looked up
/// in the name's full state.
pub(crate) async fn held_until(
    service: &LockService,
    (namespace, name): (&str, &str),
    (owner, token): (&str, u64),
    claim: Claim,
) -> Result<Option<u64>, LockError> {
    let is_it = |info: &LockInfo| info.owner == owner && info.fencing_token == token;
    Ok(match claim {
        Claim::Exclusive | Claim::Leader => service
            .get(namespace, name)
            .await?
            .filter(is_it)
            .map(|info| info.expires_at_ms),
        Claim::Shared | Claim::Permit { .. } => service
            .describe(namespace, name)
            .await?
            .holders
            .into_iter()
            .find(|h| is_it(&h.info))
            .map(|h| h.info.expires_at_ms),
    })
}

/// A subject in the service that holds it: what the core's keep-alive
/// renews and its expiry watch checks.
struct Held {
    service: LockService,
    subject: Subject,
}

impl Renew for Held {
    type Error = LockError;

    /// Renews a guard's lock for `ttl_ms`, a lease for its own TTL.
    async fn renew(&self, ttl_ms: u64) -> Result<u64, LockError> {
        match &self.subject {
            Subject::Grant {
                namespace,
                name,
                owner,
                ..
            } => self
                .service
                .extend(namespace, name, owner, ttl_ms)
                .await
                .map(|g| g.expires_at_ms),
            Subject::Lease { namespace, id } => self.service.refresh_lease(namespace, id).await,
        }
    }

    fn is_unavailable(error: &LockError) -> bool {
        matches!(error, LockError::Unavailable(_))
    }
}

impl CheckHeld for Held {
    type Error = LockError;

    async fn held_until(&self) -> Result<Option<u64>, LockError> {
        match &self.subject {
            Subject::Grant {
                namespace,
                name,
                owner,
                token,
                claim,
            } => held_until(&self.service, (namespace, name), (owner, *token), *claim).await,
            Subject::Lease { namespace, id } => Ok(self
                .service
                .get_lease(namespace, id)
                .await?
                .map(|info| info.expires_at_ms)),
        }
    }
}

impl Held {
    /// Completes when the subject ended outside the core's rule: an operator
    /// force-released its lock (for a lease, any of its locks), or, for a
    /// lease, it was revoked or expired elsewhere. The holder hears it at
    /// once rather than at its next renewal.
    async fn ended_elsewhere(&self) {
        let service = &self.service;
        match &self.subject {
            Subject::Grant {
                namespace, owner, ..
            } => service.force_released(namespace, owner).await,
            Subject::Lease { namespace, id } => {
                tokio::select! {
                    () = service.lease_ended(namespace, id) => {}
                    () = service.force_released(namespace, id) => {}
                }
            }
        }
    }
}

impl Held {
    /// Why the store says it ended: the holder's own release under way, a
    /// lease that reached the expiry this holder last saw (the store's purge
    /// can come before this host's own expiry check), or else an end
    /// elsewhere (force-release, a revoke by another).
    fn cause_of_end(&self, holding: &Holding, ending: &Ending) -> Cause {
        if ending.releasing.load(Ordering::SeqCst) {
            return Cause::Released;
        }
        let expired = CLOCK.now_ms() >= CLOCK.monotonic_of_wall_ms(holding.expires_at_ms());
        match self.subject {
            Subject::Lease { .. } if expired => Cause::Expired,
            _ => Cause::EndedElsewhere,
        }
    }
}

/// The task watching one guard or lease. Aborted when dropped.
#[derive(Debug)]
pub(crate) struct Monitor(JoinHandle<()>);

impl Drop for Monitor {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Monitor {
    /// Starts watching `subject` on the current tokio runtime: renewing it
    /// by the core's rule if `keep_alive`, else checking it at its expiry;
    /// and hearing at once that it ended elsewhere. Marks `holding` lost
    /// when it no longer holds, with its cause in `ending`.
    pub(crate) fn start(
        service: LockService,
        (holding, ending): (Arc<Holding>, Arc<Ending>),
        subject: Subject,
        keep_alive: bool,
    ) -> Monitor {
        let held = Held { service, subject };
        Monitor(tokio::spawn(async move {
            let lost = async {
                if keep_alive {
                    keepalive::keep_alive(&CLOCK, &holding, &held).await
                } else {
                    keepalive::watch_expiry(&CLOCK, &holding, &held).await
                }
            };
            tokio::select! {
                () = held.ended_elsewhere() => {
                    if end(&holding, &ending, held.cause_of_end(&holding, &ending)) {
                        tracing::debug!(subject = ?held.subject, "lease or guard ended elsewhere");
                    }
                }
                why = lost => match why {
                    Lost::Marked => {}
                    Lost::Expired { .. } if keep_alive => {
                        tracing::warn!(subject = ?held.subject, %why, "keep-alive could not renew before the deadline");
                    }
                    why => tracing::debug!(subject = ?held.subject, %why, "lease or guard lost"),
                },
            }
        }))
    }
}

//! What guards, leases and leaderships share: keep-alive, the lost signal
//! and the release on drop.
//!
//! Renewals follow lockd's one keep-alive rule (`lockd_core::keepalive`,
//! docs/contract.md#c17-keep-alive), the same code that keeps a guest's
//! guards: renew at a third of the TTL, counted on the monotonic clock from
//! the moment the last successful renewal was *sent*; retry a renewal that
//! failed transiently (no host reachable, outcome unknown, `unavailable`)
//! every clamp(TTL/10, 10 ms, 1 s); count the hold lost at
//! `t + TTL - min(TTL/10, 1 s)` without a success, before the store can
//! grant it to anyone else; a renewal refused (`not_held`, `not_owner`, a
//! new token) means it is already lost. Without keep-alive the hold is only
//! watched: at its expiry the store is asked whether it still holds.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lockd_api::{
    LeaseFoundReply, LeaseRefreshedReply, LeaseRequest, LeaseRevokedReply, ResignRequest, Route,
    Status, StatusReply, UnlockRequest,
};
use lockd_core::keepalive::{self, CheckHeld, Holding, Lost, Renew, Terms};
use lockd_core::{Clock as _, SystemClock};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::client::{millis, Client, Grant};
use crate::error::Error;
use crate::transport::Retry;

/// The clock of every deadline here: monotonic, anchored to the wall clock
/// once per process.
pub(crate) const CLOCK: SystemClock = SystemClock;

/// Why a guard, lease or leadership no longer holds
/// (docs/contract.md#c18-lost).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum LostReason {
    /// Its TTL ran out without a renewal (it had no keep-alive), and the
    /// store no longer holds it for this holder.
    Expired,
    /// A renewal was refused: someone released it (`force-unlock`), revoked
    /// the lease, or the grant passed on. The refusal.
    Revoked(Error),
    /// Keep-alive could not renew it before its lost deadline: every host
    /// stayed unreachable or unavailable. The last failure, if any.
    Unreachable(Option<Error>),
    /// Its holder ended it: released, resigned, revoked, or dropped.
    Released,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LostReason::Expired => f.write_str("it expired without renewal"),
            LostReason::Revoked(e) => write!(f, "a renewal was refused: {e}"),
            LostReason::Unreachable(Some(e)) => {
                write!(f, "no renewal succeeded before its deadline: {e}")
            }
            LostReason::Unreachable(None) => {
                f.write_str("no renewal succeeded before its deadline")
            }
            LostReason::Released => f.write_str("its holder released it"),
        }
    }
}

/// What is held, and how it is renewed, checked and released.
#[derive(Clone, Debug)]
pub(crate) enum Subject {
    /// A lock, shared lock or permit: renewed by `extend`, released by
    /// `unlock` with its token.
    Grant {
        name: String,
        owner: String,
        token: u64,
    },
    /// A leadership: renewed by `extend`, ended by `resign` with its token.
    Leader {
        name: String,
        candidate: String,
        token: u64,
    },
    /// A lease: renewed by `refresh`, ended by `revoke`.
    Lease { id: String },
}

/// One holder's state, shared by its handle, its monitor task and whoever
/// waits for the loss.
#[derive(Debug)]
pub(crate) struct Held {
    client: Client,
    pub(crate) subject: Subject,
    pub(crate) holding: Holding,
    /// Set once, before or right after the holding is marked lost.
    reason: watch::Sender<Option<LostReason>>,
}

impl Held {
    /// Records why it ended, unless a reason is recorded already, and marks
    /// the holding lost.
    fn end(&self, reason: LostReason) {
        self.reason.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(reason);
            true
        });
        self.holding.mark_lost();
    }

    /// The expiry of this holder's grant in the store, or `None` if the
    /// store shows no such grant.
    async fn grant_held_until(
        &self,
        name: &str,
        owner: &str,
        token: u64,
    ) -> Result<Option<u64>, Error> {
        let Some(found) = self.client.get(name).await? else {
            return Ok(None);
        };
        let is_it = |o: &str, t: u64| o == owner && t == token;
        if is_it(&found.owner, found.fencing_token) {
            return Ok(Some(found.expires_at_ms));
        }
        // A shared name or a semaphore: the top grant may be another's.
        Ok(found
            .holders
            .iter()
            .find(|h| is_it(&h.owner, h.fencing_token))
            .map(|h| h.expires_at_ms))
    }
}

impl Renew for Held {
    type Error = Error;

    async fn renew(&self, ttl_ms: u64) -> Result<u64, Error> {
        let ttl = Duration::from_millis(ttl_ms);
        match &self.subject {
            Subject::Grant {
                name, owner, token, ..
            }
            | Subject::Leader {
                name,
                candidate: owner,
                token,
            } => {
                let grant = self.client.extend(name, owner, ttl).await?;
                same_token(grant, *token)
            }
            Subject::Lease { id } => refresh_lease(&self.client, id).await,
        }
    }

    fn is_unavailable(error: &Error) -> bool {
        error.is_transient()
    }
}

impl CheckHeld for Held {
    type Error = Error;

    async fn held_until(&self) -> Result<Option<u64>, Error> {
        match &self.subject {
            Subject::Grant {
                name, owner, token, ..
            }
            | Subject::Leader {
                name,
                candidate: owner,
                token,
            } => self.grant_held_until(name, owner, *token).await,
            Subject::Lease { id } => match get_lease(&self.client, id).await {
                Ok(found) => Ok(Some(found.expires_at_ms)),
                Err(Error::NotHeld { .. }) => Ok(None),
                Err(e) => Err(e),
            },
        }
    }
}

/// An extend answered with another token is another grant: this one is
/// gone (the owner string took the name again after it expired).
fn same_token(grant: Grant, token: u64) -> Result<u64, Error> {
    if grant.fencing_token == token {
        Ok(grant.expires_at_ms)
    } else {
        Err(Error::NotOwner {
            message: format!(
                "the grant under fencing token {token} ended; the owner now holds token {}",
                grant.fencing_token
            ),
        })
    }
}

pub(crate) async fn refresh_lease(client: &Client, id: &str) -> Result<u64, Error> {
    let body = LeaseRequest {
        namespace: client.ns(),
        lease_id: id.to_string(),
    };
    let reply: LeaseRefreshedReply = client
        .call(
            Route::LeaseRefresh,
            &body,
            Status::Refreshed,
            Retry::Safe,
            Duration::ZERO,
        )
        .await?;
    Ok(reply.expires_at_ms)
}

pub(crate) async fn get_lease(client: &Client, id: &str) -> Result<LeaseFoundReply, Error> {
    let body = LeaseRequest {
        namespace: client.ns(),
        lease_id: id.to_string(),
    };
    client
        .call(
            Route::LeaseGet,
            &body,
            Status::Found,
            Retry::Safe,
            Duration::ZERO,
        )
        .await
}

/// Ends `subject` as its holder: unlock with its token, resign with its
/// token, or revoke the lease. Answers how many locks a revoke released
/// (0 otherwise).
async fn release(client: &Client, subject: &Subject) -> Result<u64, Error> {
    let none = Duration::ZERO;
    match subject {
        Subject::Grant {
            name, owner, token, ..
        } => {
            let body = UnlockRequest {
                namespace: client.ns(),
                name: name.clone(),
                owner: owner.clone(),
                fencing_token: Some(*token),
            };
            let _: StatusReply = client
                .call(Route::Unlock, &body, Status::Unlocked, Retry::Safe, none)
                .await?;
            Ok(0)
        }
        Subject::Leader {
            name,
            candidate,
            token,
        } => {
            let body = ResignRequest {
                namespace: client.ns(),
                name: name.clone(),
                candidate: candidate.clone(),
                fencing_token: Some(*token),
            };
            let _: StatusReply = client
                .call(Route::Resign, &body, Status::Resigned, Retry::Safe, none)
                .await?;
            Ok(0)
        }
        Subject::Lease { id } => {
            let body = LeaseRequest {
                namespace: client.ns(),
                lease_id: id.clone(),
            };
            // A revoke sent twice answers `not_held` the second time, and
            // touches nothing else: safe.
            let reply: LeaseRevokedReply = client
                .call(
                    Route::LeaseRevoke,
                    &body,
                    Status::Revoked,
                    Retry::Safe,
                    none,
                )
                .await?;
            Ok(reply.released)
        }
    }
}

/// The handle's part: the shared state, the monitor task (stopped on
/// drop), and whether the holder ended it already.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) held: Arc<Held>,
    monitor: JoinHandle<()>,
    released: bool,
}

impl Hold {
    /// Starts watching a grant made on `terms`: keeping it alive if
    /// `keep_alive`, else checking it at its expiry. Needs a tokio runtime
    /// (the caller is in one: it just awaited the grant).
    pub(crate) fn start(client: Client, subject: Subject, terms: Terms, keep_alive: bool) -> Hold {
        let held = Arc::new(Held {
            client,
            subject,
            holding: Holding::new(terms),
            reason: watch::Sender::new(None),
        });
        let watched = held.clone();
        let monitor = tokio::spawn(async move {
            let why = if keep_alive {
                keepalive::keep_alive(&CLOCK, &watched.holding, &*watched).await
            } else {
                keepalive::watch_expiry(&CLOCK, &watched.holding, &*watched).await
            };
            let reason = match why {
                Lost::Marked => return,
                Lost::Refused(e) => LostReason::Revoked(e),
                Lost::Expired { last_error } if keep_alive => LostReason::Unreachable(last_error),
                Lost::Expired { .. } => LostReason::Expired,
            };
            tracing::debug!(subject = ?watched.subject, %reason, "lost");
            watched.end(reason);
        });
        Hold {
            held,
            monitor,
            released: false,
        }
    }

    /// The terms of the last renewal.
    pub(crate) fn terms(&self) -> Terms {
        self.held.holding.terms()
    }

    /// Records a renewal the holder made itself, sent at `sent_at_ms`.
    pub(crate) fn renewed(&self, sent_at_ms: u64, ttl: Duration, expires_at_ms: u64) {
        self.held.holding.renewed(Terms {
            renewed_at_ms: sent_at_ms,
            ttl_ms: millis(ttl),
            expires_at_ms,
        });
    }

    /// Marks it lost when `result` is a refusal that says it is gone.
    pub(crate) fn note<T>(&self, result: Result<T, Error>) -> Result<T, Error> {
        if let Err(e) = &result {
            if matches!(e, Error::NotHeld { .. } | Error::NotOwner { .. }) {
                self.held.end(LostReason::Revoked(e.clone()));
            }
        }
        result
    }

    /// Ends it as its holder. A transient failure leaves it to the drop
    /// path's release (and the TTL); any other answer means it is over.
    pub(crate) async fn release(mut self) -> Result<u64, Error> {
        let result = release(&self.held.client, &self.held.subject).await;
        if !result.as_ref().is_err_and(Error::is_transient) {
            self.released = true;
            self.held.end(LostReason::Released);
        }
        result
    }

    /// Whether the store still shows it held by this holder (false when it
    /// cannot answer, or it is lost here already).
    pub(crate) async fn is_held(&self) -> bool {
        !self.held.holding.is_lost() && matches!(self.held.held_until().await, Ok(Some(_)))
    }

    /// Whether it is lost (or ended) as far as this process knows.
    pub(crate) fn is_lost(&self) -> bool {
        self.held.holding.is_lost()
    }

    /// Completes with why, once it no longer holds.
    pub(crate) fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let mut reason = self.held.reason.subscribe();
        async move {
            match reason.wait_for(Option::is_some).await {
                Ok(reason) => reason.clone().unwrap_or(LostReason::Released),
                // The holder is gone (the sender with it): it was dropped.
                Err(_) => LostReason::Released,
            }
        }
    }
}

/// Dropping a holder that did not end it releases it: an unlock (resign,
/// revoke) with its token is spawned on the current tokio runtime, its
/// answer ignored. Outside a runtime nothing is sent, and the TTL ends it.
impl Drop for Hold {
    fn drop(&mut self) {
        self.monitor.abort();
        if self.released {
            return;
        }
        self.held.end(LostReason::Released);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(subject = ?self.held.subject, "dropped outside a runtime; the TTL ends it");
            return;
        };
        let held = self.held.clone();
        runtime.spawn(async move {
            if let Err(e) = release(&held.client, &held.subject).await {
                tracing::debug!(subject = ?held.subject, error = %e, "release on drop failed");
            }
        });
    }
}

/// Now on the clock of the deadlines, for a renewal's send time.
pub(crate) fn now_ms() -> u64 {
    CLOCK.now_ms()
}

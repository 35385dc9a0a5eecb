//! A draining shutdown ([`Server::run`](super::Server::run) once its
//! `shutdown` future completes):
//!
//! 1. `begin`: the listeners stop accepting (new connections are
//!    refused), every call waiting in a lock queue is answered `unavailable`
//!    ([`SHUTTING_DOWN`]; [`LockService::shutdown`]) and no call waits
//!    after, event streams end, `/readyz` answers 503 `shutting down`, and
//!    every open connection is asked to close once its request in flight
//!    is answered (HTTP/1.1: no keep-alive; HTTP/2: GOAWAY).
//! 2. The requests in flight finish, until the bound
//!    (`[server] shutdown_timeout_ms`, less [`STORE_RESERVE`]).
//! 3. The store is synced ([`LockService::sync`]): every change it accepted
//!    is durable.
//!
//! What is still open at the bound is cut, and [`Drained`] says so. The
//! store itself closes when the last handle on it is dropped (the embedded
//! store's log is then checkpointed into its file).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::header::HeaderValue;
use hyper::Response;
use lockd_api::Status;
use lockd_core::{LockError, LockService};
use tokio::sync::{watch, Notify};

use crate::body::Body;

/// What a queued waiter is answered (`unavailable`) when the server shuts
/// down: its client should ask another server.
pub const SHUTTING_DOWN: &str = "server shutting down; retry elsewhere";

pub use crate::config::DEFAULT_SHUTDOWN_TIMEOUT;

/// Whether `error` is what the shutdown answered a call that would wait
/// (refused at once, or answered while queued; a grant handed to it then is
/// released, never acknowledged): nothing was applied, so its answer
/// carries [`Status::NOT_APPLIED_HEADER`]
/// and a client may send the call to another server.
pub fn not_applied(error: &LockError) -> bool {
    matches!(error, LockError::Unavailable(why) if why == SHUTTING_DOWN)
}

/// Marks `response`, an `unavailable` answer given before anything was
/// applied (a draining or a starting server), with
/// [`Status::NOT_APPLIED_HEADER`]: its client may send the call to another
/// server.
pub fn mark_not_applied(response: &mut Response<Body>) {
    response
        .headers_mut()
        .insert(Status::NOT_APPLIED_HEADER, HeaderValue::from_static("1"));
}

/// Of the bound, the part kept for syncing the store (at most a fifth of
/// it): requests in flight are cut this long before the bound.
pub const STORE_RESERVE: Duration = Duration::from_secs(1);

/// The server's open connections, and the signal that asks them to close.
#[derive(Debug)]
pub(super) struct Connections {
    open: AtomicU64,
    closed: Notify,
    stop: watch::Sender<bool>,
}

impl Default for Connections {
    fn default() -> Self {
        Connections {
            open: AtomicU64::new(0),
            closed: Notify::new(),
            stop: watch::Sender::new(false),
        }
    }
}

/// One open connection, counted until dropped.
pub(super) struct Open(Arc<Connections>);

impl Drop for Open {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.closed.notify_waiters();
        }
    }
}

impl Connections {
    /// Counts a connection open until the guard is dropped.
    pub(super) fn open(self: &Arc<Self>) -> Open {
        self.open.fetch_add(1, Ordering::AcqRel);
        Open(self.clone())
    }

    /// Asks every connection to close once its request in flight is
    /// answered.
    pub(super) fn close_all(&self) {
        self.stop.send_replace(true);
    }

    /// Completes once the connections are asked to close.
    pub(super) fn stopping(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.stop.subscribe();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }

    fn now_open(&self) -> u64 {
        self.open.load(Ordering::Acquire)
    }

    /// Waits until no connection is open, or `deadline`; answers how many
    /// are still open.
    async fn closed_by(&self, deadline: tokio::time::Instant) -> u64 {
        loop {
            let closed = self.closed.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            let open = self.now_open();
            if open == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, closed).await.is_err() {
                return self.now_open();
            }
        }
    }
}

/// What a shutdown did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drained {
    /// Queued waiters answered `unavailable` ([`SHUTTING_DOWN`]).
    pub waiters_answered: u64,
    /// Connections open when it began.
    pub connections: u64,
    /// Connections still open at the bound, cut with their requests.
    pub connections_cut: u64,
    /// Whether the store confirmed, within the bound, that every change it
    /// accepted is durable.
    pub store_synced: bool,
    /// How long it took.
    pub took: Duration,
}

impl Drained {
    /// Whether it finished within its bound: every request answered and
    /// the store synced.
    pub fn within_bound(&self) -> bool {
        self.connections_cut == 0 && self.store_synced
    }
}

/// Where a shutdown begins, in one place: tells systemd it stops
/// (`STOPPING=1`, when started by it), logs one line, answers the waiting calls
/// and asks the connections to close (the listeners stopped accepting
/// before). Answers how many calls were waiting.
pub(super) fn begin(service: &LockService, connections: &Connections, bound: Duration) -> u64 {
    tracing::info!(
        connections = connections.now_open(),
        bound_ms = bound.as_millis() as u64,
        "shutting down: no new connections; answering queued waiters unavailable; \
         finishing the requests in flight"
    );
    #[cfg(unix)]
    super::notify::stopping();
    let waiting = service.shutdown(SHUTTING_DOWN);
    connections.close_all();
    waiting
}

/// Steps 2 and 3 (see the module docs), within `bound` of `started`; logs
/// one line saying what was done.
pub(super) async fn finish(
    service: &LockService,
    connections: &Connections,
    started: Instant,
    bound: Duration,
) -> Drained {
    let open_at_start = connections.now_open();
    let reserve = STORE_RESERVE.min(bound / 5);
    let deadline = tokio::time::Instant::from_std(started + bound);
    let cut = connections.closed_by(deadline - reserve).await;
    let store_synced = match tokio::time::timeout_at(deadline, service.sync()).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "shutting down: the store could not sync");
            false
        }
        Err(_) => false,
    };
    let drained = Drained {
        waiters_answered: service.waits_answered(),
        connections: open_at_start,
        connections_cut: cut,
        store_synced,
        took: started.elapsed(),
    };
    log_finished(&drained, bound);
    drained
}

fn log_finished(d: &Drained, bound: Duration) {
    let took_ms = d.took.as_millis() as u64;
    if d.within_bound() {
        tracing::info!(
            waiters_answered = d.waiters_answered,
            connections = d.connections,
            took_ms,
            "shut down: every request answered, the store synced"
        );
    } else {
        tracing::error!(
            waiters_answered = d.waiters_answered,
            connections = d.connections,
            connections_cut = d.connections_cut,
            store_synced = d.store_synced,
            took_ms,
            bound_ms = bound.as_millis() as u64,
            "shut down at its bound: connections still open were cut, or the store did not \
             confirm its sync (acknowledged changes were durable already)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::error_response;

    #[test]
    fn only_the_shutdowns_refusal_is_marked_not_applied() {
        let refused = error_response(&LockError::Unavailable(SHUTTING_DOWN.into()));
        assert_eq!(refused.status().as_u16(), 503);
        assert_eq!(
            refused.headers().get(Status::NOT_APPLIED_HEADER).unwrap(),
            "1"
        );
        // A store failure's outcome is unknown: no marker.
        let failed = error_response(&LockError::Unavailable("etcd timed out".into()));
        assert_eq!(failed.status().as_u16(), 503);
        assert!(failed.headers().get(Status::NOT_APPLIED_HEADER).is_none());
    }
}

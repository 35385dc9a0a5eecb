//! `GET /v1/events`: the store's events as Server-Sent Events
//! (docs/reference.md#events).
//!
//! Each stream is one task that reads the store's bounded broadcast and
//! hands frames to the response body through a small channel. Locking never
//! waits for a stream: the broadcast never blocks its sender, and a stream
//! whose client reads too slowly falls behind in the broadcast, learns it as
//! `Lagged`, sends a final `event: lagged` and ends.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Frame;
use lockd_core::LockEvent;
use tokio::sync::{broadcast, mpsc};

use lockd_api::{Event, EventQuery, LaggedEvent};

use crate::auth::Scope;
use crate::body::Body;

/// How often an idle stream sends a `: heartbeat` comment, unless
/// [`ApiOptions::events_heartbeat`](super::ApiOptions::events_heartbeat)
/// says otherwise.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// Frames a stream may have handed to its body before it waits for the
/// client (the broadcast holds the rest, up to its bound).
const FRAMES_IN_FLIGHT: usize = 64;

/// How long the final `lagged` event may wait for room before the stream
/// ends without it.
const LAGGED_GRACE: Duration = Duration::from_secs(10);

/// The body of one event stream over `events`, filtered by `query` and, for
/// a scoped token, by its namespaces. `open` counts the live streams
/// (`lockd_event_streams`). The stream ends once `closed` completes (the
/// server shuts down).
pub fn stream(
    events: broadcast::Receiver<LockEvent>,
    query: EventQuery,
    scope: Option<Scope>,
    heartbeat: Duration,
    open: Arc<AtomicU64>,
    closed: impl std::future::Future<Output = ()> + Send + 'static,
) -> Body {
    let (tx, rx) = mpsc::channel(FRAMES_IN_FLIGHT);
    open.fetch_add(1, Ordering::Relaxed);
    let guard = OpenStream(open);
    tokio::spawn(async move {
        let _guard = guard;
        tokio::select! {
            () = forward(events, query, scope, heartbeat, tx) => {}
            () = closed => {}
        }
    });
    ChannelBody(rx).boxed_unsync()
}

/// Decrements the open-stream count when a stream's task ends.
struct OpenStream(Arc<AtomicU64>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn forward(
    mut events: broadcast::Receiver<LockEvent>,
    query: EventQuery,
    scope: Option<Scope>,
    heartbeat: Duration,
    tx: mpsc::Sender<Bytes>,
) {
    // A first comment, so that the client sees the stream open at once.
    if tx
        .send(Bytes::from_static(b": lockd events\n\n"))
        .await
        .is_err()
    {
        return;
    }
    let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let frame = tokio::select! {
            // The client went away (hyper dropped the body).
            () = tx.closed() => return,
            received = events.recv() => match received {
                Ok(event) if passes(&query, scope.as_ref(), &event) => data_frame(&event),
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::info!(missed, "an event stream fell behind; closing it");
                    let json = serde_json::to_string(&LaggedEvent::new(missed)).unwrap_or_default();
                    let name = LaggedEvent::NAME;
                    let frame = Bytes::from(format!("event: {name}\ndata: {json}\n\n"));
                    let _ = tokio::time::timeout(LAGGED_GRACE, tx.send(frame)).await;
                    return;
                }
                // The store is gone: the stream ends.
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = beat.tick() => Bytes::from_static(b": heartbeat\n\n"),
        };
        // Waiting here holds nothing the store needs: while the client is
        // slow, this stream falls behind in the broadcast and lags.
        if tx.send(frame).await.is_err() {
            return;
        }
    }
}

/// Whether `event` passes the stream's filters and is in the scope.
fn passes(query: &EventQuery, scope: Option<&Scope>, event: &LockEvent) -> bool {
    scope.is_none_or(|scope| scope.allows(&event.namespace))
        && query
            .namespace
            .as_deref()
            .is_none_or(|ns| *event.namespace == *ns)
        && query
            .prefix
            .as_deref()
            .is_none_or(|p| event.name.starts_with(p))
}

fn data_frame(event: &LockEvent) -> Bytes {
    let json = serde_json::to_string(&Event::from(event)).unwrap_or_default();
    Bytes::from(format!("data: {json}\n\n"))
}

/// A response body fed by a channel; it ends when the sender is dropped.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = anyhow::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|frame| frame.map(|bytes| Ok(Frame::data(bytes))))
    }
}

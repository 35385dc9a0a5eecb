//! `GET /v1/events`: the store's events as Server-Sent Events
//! (docs/reference.md#events).
//!
//! Each stream is one task that reads the store's bounded broadcast and
//! hands frames to the response body through a small channel. Locking never
//! waits for a stream: the broadcast never blocks its sender, and a stream
//! whose client reads too slowly falls behind in the broadcast, learns it as
//! `Lagged`, sends a final `event: lagged` and ends.
//!
//! On a store whose hosts share one history (etcd), each event carries its
//! position as its SSE `id:`, and a stream opened with `after=` (or the
//! `Last-Event-ID` header) first replays the events after that position,
//! so that a client whose host died resumes on another without losing
//! any; where it cannot, the stream starts with `event: gap`.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Frame;
use lockd_core::{EventHistory, EventPosition, LockEvent, PositionedEvent};
use tokio::sync::{broadcast, mpsc};

use lockd_api::{Event, EventQuery, GapEvent, LaggedEvent};

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

/// Where a stream's events come from.
pub enum Source {
    /// The store's events, without positions: a one-host store (memory,
    /// redb), whose events no other host can replay.
    Local(broadcast::Receiver<LockEvent>),
    /// The store's shared history (etcd): each event carries its position
    /// as the SSE `id:`, and a stream may resume after one.
    Shared(Arc<dyn EventHistory>),
}

/// The body of one event stream from `source`, resumed after `after` if
/// given, filtered by `query` and, for a scoped token, by its namespaces.
/// `open` counts the live streams (`lockd_event_streams`). The stream ends
/// once `closed` completes (the server shuts down).
pub fn stream(
    source: Source,
    after: Option<EventPosition>,
    filter: Filter,
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
            () = forward(source, after, filter, heartbeat, tx) => {}
            () = closed => {}
        }
    });
    ChannelBody(rx).boxed_unsync()
}

/// What a stream lets through: its query's filters and the token's scope.
pub struct Filter {
    /// The stream's query.
    pub query: EventQuery,
    /// The namespaces a scoped token may see.
    pub scope: Option<Scope>,
}

/// Decrements the open-stream count when a stream's task ends.
struct OpenStream(Arc<AtomicU64>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn forward(
    source: Source,
    after: Option<EventPosition>,
    filter: Filter,
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
    match source {
        Source::Local(events) => {
            if let Some(after) = after {
                let reason = "this store keeps no history that its hosts share";
                if tx.send(gap_frame(after, reason)).await.is_err() {
                    return;
                }
            }
            let frame = |event: Option<LockEvent>| match event {
                Some(event) => filter.passes(&event).then(|| data_frame(&event, None)),
                None => Some(Bytes::from_static(b": heartbeat\n\n")),
            };
            live(events, heartbeat, &tx, frame).await;
        }
        Source::Shared(history) => resume(&*history, after, &filter, heartbeat, &tx).await,
    }
}

/// A stream over a shared history: the events after `after` that happened
/// before it subscribed (or a `gap` event when they cannot be told), then
/// the live ones. Positions order the events, so none is sent twice or
/// skipped where the two meet.
async fn resume(
    history: &dyn EventHistory,
    after: Option<EventPosition>,
    filter: &Filter,
    heartbeat: Duration,
    tx: &mpsc::Sender<Bytes>,
) {
    // Subscribed first: whatever happens during the replay waits in the
    // broadcast.
    let (events, start) = history.subscribe();
    let mut last = start;
    // Further than this host has come: the live events up to `after`
    // were sent by the host the client came from.
    if let Some(after) = after.filter(|after| *after >= start) {
        last = after;
    } else if let Some(after) = after {
        match replay(history, after, start, filter, heartbeat, tx).await {
            Replayed::Through => {}
            Replayed::Gap(from, reason) => {
                tracing::info!(%from, %reason, "an event stream cannot resume where asked");
                if tx.send(gap_frame(from, &reason)).await.is_err() {
                    return;
                }
            }
            Replayed::ClientGone => return,
        }
    }
    // The position the stream starts from, even if no event comes: an
    // `id:` alone dispatches nothing, but the client resumes from it.
    if tx
        .send(Bytes::from(format!("id: {last}\n\n")))
        .await
        .is_err()
    {
        return;
    }
    let frame = |positioned: Option<PositionedEvent>| {
        // A heartbeat carries the position too: filtered-out events move
        // it on.
        let Some(positioned) = positioned else {
            return Some(Bytes::from(format!("id: {last}\n: heartbeat\n\n")));
        };
        if positioned.position <= last {
            return None;
        }
        last = positioned.position;
        let event = &positioned.event;
        filter.passes(event).then(|| data_frame(event, Some(last)))
    };
    live(events, heartbeat, tx, frame).await;
}

/// How a replay ended.
enum Replayed {
    /// Every event through `start` was sent.
    Through,
    /// The events after this position cannot be told, for this reason.
    Gap(EventPosition, String),
    ClientGone,
}

/// Sends the events in (`after`, `start`] from the history, with
/// heartbeats while it waits for them (a replay to the present waits for
/// the next change).
async fn replay(
    history: &dyn EventHistory,
    after: EventPosition,
    start: EventPosition,
    filter: &Filter,
    heartbeat: Duration,
    tx: &mpsc::Sender<Bytes>,
) -> Replayed {
    let (into, mut replayed) = mpsc::channel(FRAMES_IN_FLIGHT);
    let reading = history.replay(after, start, into);
    tokio::pin!(reading);
    let mut ended = None;
    let mut last = after;
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
    loop {
        let frame = tokio::select! {
            () = tx.closed() => return Replayed::ClientGone,
            result = &mut reading, if ended.is_none() => {
                ended = Some(result);
                continue;
            }
            next = replayed.recv() => match next {
                Some(positioned) => {
                    last = positioned.position;
                    let event = &positioned.event;
                    if !filter.passes(event) {
                        continue;
                    }
                    data_frame(event, Some(last))
                }
                // The reader is done and everything it sent is forwarded.
                None => break,
            },
            _ = ticks.tick() => Bytes::from(format!("id: {last}\n: heartbeat\n\n")),
        };
        if tx.send(frame).await.is_err() {
            return Replayed::ClientGone;
        }
    }
    match ended {
        Some(Err(reason)) => Replayed::Gap(last, reason),
        _ => Replayed::Through,
    }
}

/// Forwards the live events of `events` as `frame` makes them (`None`
/// skips one), and a heartbeat (`frame(None)`) while idle, until the
/// client goes, the store goes, or the client falls behind (a final
/// `lagged` event).
async fn live<T: Clone>(
    mut events: broadcast::Receiver<T>,
    heartbeat: Duration,
    tx: &mpsc::Sender<Bytes>,
    mut frame: impl FnMut(Option<T>) -> Option<Bytes>,
) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let frame = tokio::select! {
            // The client went away (hyper dropped the body).
            () = tx.closed() => return,
            received = events.recv() => match received {
                Ok(event) => match frame(Some(event)) {
                    Some(frame) => frame,
                    None => continue,
                },
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
            _ = ticks.tick() => match frame(None) {
                Some(beat) => beat,
                None => continue,
            },
        };
        // Waiting here holds nothing the store needs: while the client is
        // slow, this stream falls behind in the broadcast and lags.
        if tx.send(frame).await.is_err() {
            return;
        }
    }
}

impl Filter {
    /// Whether `event` passes the stream's filters and is in the scope.
    fn passes(&self, event: &LockEvent) -> bool {
        self.scope
            .as_ref()
            .is_none_or(|scope| scope.allows(&event.namespace))
            && self
                .query
                .namespace
                .as_deref()
                .is_none_or(|ns| *event.namespace == *ns)
            && self
                .query
                .prefix
                .as_deref()
                .is_none_or(|p| event.name.starts_with(p))
    }
}

/// An event's frame, with its position as the SSE `id:` if it has one.
fn data_frame(event: &LockEvent, position: Option<EventPosition>) -> Bytes {
    let json = serde_json::to_string(&Event::from(event)).unwrap_or_default();
    match position {
        Some(position) => Bytes::from(format!("id: {position}\ndata: {json}\n\n")),
        None => Bytes::from(format!("data: {json}\n\n")),
    }
}

/// The `gap` event: the events after `after` cannot be told, and why.
fn gap_frame(after: EventPosition, reason: &str) -> Bytes {
    let json = serde_json::to_string(&GapEvent::new(after.to_string(), reason)).unwrap_or_default();
    let name = GapEvent::NAME;
    Bytes::from(format!("event: {name}\ndata: {json}\n\n"))
}

/// The position a stream resumes after: `after=`, else the standard
/// `Last-Event-ID` header (a browser's `EventSource` sends it when it
/// reconnects); `Err` if it is not a position.
pub fn resume_after(
    query: &EventQuery,
    headers: &hyper::HeaderMap,
) -> Result<Option<EventPosition>, String> {
    let header = match headers.get("last-event-id") {
        Some(value) => Some(
            value
                .to_str()
                .map_err(|_| "Last-Event-ID is not text".to_string())?,
        ),
        None => None,
    };
    query
        .after
        .as_deref()
        .or(header)
        .map(str::parse)
        .transpose()
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use lockd_core::{BoxFuture, Claim, EventKind};

    use super::*;

    fn event(name: &str, token: u64) -> LockEvent {
        LockEvent {
            kind: EventKind::Acquired,
            namespace: Arc::from("default"),
            name: Arc::from(name),
            owner: Arc::from("w"),
            fencing_token: token,
            at_ms: 0,
            acquired_at_ms: None,
            claim: Claim::Exclusive,
        }
    }

    fn at(revision: u64, index: u32) -> EventPosition {
        EventPosition::at(revision, index)
    }

    /// A history whose past is `past` and whose subscribers start after
    /// `start`; `replayed` records what each replay was asked for.
    struct Scripted {
        past: Result<Vec<PositionedEvent>, String>,
        start: EventPosition,
        live: broadcast::Sender<PositionedEvent>,
        replayed: Mutex<Vec<(EventPosition, EventPosition)>>,
    }

    impl EventHistory for Scripted {
        fn subscribe(&self) -> (broadcast::Receiver<PositionedEvent>, EventPosition) {
            (self.live.subscribe(), self.start)
        }

        fn replay(
            &self,
            after: EventPosition,
            through: EventPosition,
            into: mpsc::Sender<PositionedEvent>,
        ) -> BoxFuture<'_, Result<(), String>> {
            self.replayed.lock().unwrap().push((after, through));
            Box::pin(async move {
                for p in self.past.iter().flatten() {
                    if p.position > after && p.position <= through {
                        into.send(p.clone()).await.unwrap();
                    }
                }
                self.past.as_ref().map(|_| ()).map_err(Clone::clone)
            })
        }
    }

    /// Runs a stream over `history` resumed after `after`, publishes
    /// `live` once it has subscribed, and answers the frames it sent (the
    /// opening comment left out) until it had nothing more to send.
    async fn frames(
        history: Arc<Scripted>,
        after: Option<EventPosition>,
        live: Vec<PositionedEvent>,
    ) -> Vec<String> {
        let (tx, mut rx) = mpsc::channel(FRAMES_IN_FLIGHT);
        let filter = Filter {
            query: EventQuery {
                prefix: Some("job".to_string()),
                ..EventQuery::default()
            },
            scope: None,
        };
        let source = Source::Shared(history.clone());
        let task = tokio::spawn(forward(
            source,
            after,
            filter,
            Duration::from_secs(3600),
            tx,
        ));
        let mut sent = Vec::new();
        while let Ok(Some(frame)) =
            tokio::time::timeout(Duration::from_millis(200), rx.recv()).await
        {
            sent.push(String::from_utf8(frame.to_vec()).unwrap());
            // Subscribed once the stream says where it starts.
            if sent.last().is_some_and(|f| f.starts_with("id: ")) {
                for p in &live {
                    history.live.send(p.clone()).unwrap();
                }
            }
        }
        task.abort();
        sent.remove(0);
        sent
    }

    fn positioned(revision: u64, index: u32, name: &str) -> PositionedEvent {
        PositionedEvent {
            position: at(revision, index),
            event: event(name, revision),
        }
    }

    /// The `id:` and the name of each data frame, and each other frame as
    /// it is.
    fn summary(frames: &[String]) -> Vec<String> {
        frames
            .iter()
            .map(|f| match f.split_once("\ndata: ") {
                Some((id, json)) if id.starts_with("id: ") => {
                    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
                    format!("{} {}", &id[4..], v["name"].as_str().unwrap())
                }
                _ => f.trim_end().to_string(),
            })
            .collect()
    }

    fn scripted(past: Result<Vec<PositionedEvent>, String>, start: EventPosition) -> Arc<Scripted> {
        Arc::new(Scripted {
            past,
            start,
            live: broadcast::Sender::new(16),
            replayed: Mutex::new(Vec::new()),
        })
    }

    #[tokio::test]
    async fn a_resumed_stream_replays_then_goes_live_without_a_gap_or_a_duplicate() {
        let past = vec![
            positioned(5, 0, "job-a"),
            positioned(7, 0, "job-b"),
            positioned(7, 1, "other"),
            positioned(7, 2, "job-c"),
            positioned(9, 0, "job-d"),
        ];
        let history = scripted(Ok(past), EventPosition::whole(9));
        // The client saw 7.0; the live events repeat the end of the past
        // (a subscriber may see a revision the replay also read).
        let live = vec![
            positioned(9, 0, "job-d"),
            positioned(10, 0, "job-e"),
            positioned(10, 1, "job-f"),
        ];
        let sent = frames(history.clone(), Some(at(7, 0)), live).await;
        assert_eq!(
            summary(&sent),
            [
                "7.2 job-c",
                "9.0 job-d",
                "id: 9",
                "10.0 job-e",
                "10.1 job-f"
            ]
        );
        assert_eq!(
            *history.replayed.lock().unwrap(),
            [(at(7, 0), EventPosition::whole(9))]
        );
    }

    #[tokio::test]
    async fn a_client_ahead_of_this_host_gets_nothing_it_saw_again() {
        let history = scripted(Ok(Vec::new()), EventPosition::whole(9));
        let live = vec![
            positioned(10, 0, "job-a"),
            positioned(11, 0, "job-b"),
            positioned(12, 0, "job-c"),
        ];
        let sent = frames(history.clone(), Some(at(11, 0)), live).await;
        assert_eq!(summary(&sent), ["id: 11.0", "12.0 job-c"]);
        assert!(history.replayed.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn history_compacted_away_is_a_gap_event_then_live() {
        let history = scripted(
            Err("etcd compacted its history up to revision 8".to_string()),
            EventPosition::whole(9),
        );
        let sent = frames(history, Some(at(3, 0)), vec![positioned(10, 0, "job-a")]).await;
        assert_eq!(sent.len(), 3, "{sent:?}");
        assert_eq!(
            sent[0],
            "event: gap\ndata: {\"type\":\"gap\",\"after\":\"3.0\",\
             \"reason\":\"etcd compacted its history up to revision 8\"}\n\n"
        );
        assert_eq!(summary(&sent[1..]), ["id: 9", "10.0 job-a"]);
    }

    #[tokio::test]
    async fn a_new_stream_starts_at_the_present_and_a_local_store_cannot_resume() {
        let history = scripted(Ok(vec![positioned(5, 0, "job-a")]), EventPosition::whole(5));
        let sent = frames(history, None, vec![positioned(6, 0, "job-b")]).await;
        assert_eq!(summary(&sent), ["id: 5", "6.0 job-b"]);

        let (live, events) = broadcast::channel(4);
        let (tx, mut rx) = mpsc::channel(FRAMES_IN_FLIGHT);
        let filter = Filter {
            query: EventQuery::default(),
            scope: None,
        };
        let task = tokio::spawn(forward(
            Source::Local(events),
            Some(at(5, 0)),
            filter,
            Duration::from_secs(3600),
            tx,
        ));
        assert_eq!(rx.recv().await.unwrap(), ": lockd events\n\n");
        let gap = String::from_utf8(rx.recv().await.unwrap().to_vec()).unwrap();
        assert!(gap.starts_with("event: gap\n"), "{gap}");
        assert!(gap.contains("no history that its hosts share"), "{gap}");
        live.send(event("a", 1)).unwrap();
        let data = String::from_utf8(rx.recv().await.unwrap().to_vec()).unwrap();
        assert!(data.starts_with("data: {"), "{data}");
        task.abort();
    }

    #[test]
    fn the_position_comes_from_after_or_last_event_id() {
        let mut headers = hyper::HeaderMap::new();
        let query = |after: Option<&str>| EventQuery {
            after: after.map(str::to_string),
            ..EventQuery::default()
        };
        assert_eq!(resume_after(&query(None), &headers), Ok(None));
        headers.insert("last-event-id", "12.3".parse().unwrap());
        assert_eq!(resume_after(&query(None), &headers), Ok(Some(at(12, 3))));
        assert_eq!(
            resume_after(&query(Some("14")), &headers),
            Ok(Some(EventPosition::whole(14)))
        );
        assert!(resume_after(&query(Some("x")), &headers).is_err());
    }
}

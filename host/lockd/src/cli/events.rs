//! Reading `GET /v1/events` (docs/reference.md#events): the Server-Sent Events
//! of a stream, one lockd event at a time (`lockd watch`, `lockd leader
//! --watch`), and [`Resuming`], which opens the stream again after it broke
//! off (its host died), after the last event seen.
//!
//! On etcd every event carries its position as its SSE `id:`; a stream
//! opened again with `after=` that position misses nothing (or starts with
//! `event: gap` when etcd compacted that history away). A store that gives
//! no positions (redb, memory: one host) cannot resume: the events of the
//! break may be lost, and [`Resuming`] says so with a gap of its own.

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use lockd_api::{decode, Event, GapEvent, LaggedEvent, Route};

use super::failure::{fail, Failure};

/// One item of an event stream.
#[derive(Debug)]
pub enum Sse {
    /// A lock event, and its JSON as the server sent it.
    Event(Event, String),
    /// The stream's final event: this client fell behind and missed this
    /// many events.
    Lagged(u64),
    /// Events after a position may be missing: the server cannot replay
    /// them (or, from [`Resuming`], the stream broke off without giving
    /// one). The stream goes on with the events from then on.
    Gap(GapEvent),
    /// The stream broke off (the reason) and was opened again.
    Resumed(String),
}

/// The events of a stream, read as they come.
pub struct EventStream<R> {
    lines: BufReader<R>,
    /// The `id:` of the last event read (or of an `id:` alone): where a
    /// stream opened again resumes.
    last_id: Option<String>,
}

impl<R: Read> EventStream<R> {
    /// Reads the stream `stream` (an open `GET /v1/events` body).
    pub fn new(stream: R) -> Self {
        EventStream {
            lines: BufReader::new(stream),
            last_id: None,
        }
    }

    /// The position of the last event read, if the server gives positions.
    pub fn last_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// The next event; `None` when the server closed the stream. Exit 3 if
    /// the stream broke off or carried a malformed event.
    pub fn next_event(&mut self) -> Result<Option<Sse>, Failure> {
        let mut event_name = String::new();
        let mut data = String::new();
        let mut id = None;
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .lines
                .read_line(&mut line)
                .map_err(|e| fail(3, format!("the event stream broke off: {e}")))?;
            if n == 0 {
                return Ok(None);
            }
            let field = line.trim_end_matches(['\r', '\n']);
            if !field.is_empty() {
                // Comments (`: heartbeat`) and unknown fields are skipped.
                if let Some(value) = field.strip_prefix("data:") {
                    if !data.is_empty() {
                        data.push('\n');
                    }
                    data.push_str(value.strip_prefix(' ').unwrap_or(value));
                } else if let Some(value) = field.strip_prefix("event:") {
                    event_name = value.trim().to_string();
                } else if let Some(value) = field.strip_prefix("id:") {
                    id = Some(value.strip_prefix(' ').unwrap_or(value).to_string());
                }
                continue;
            }
            // A blank line ends an event; its `id:` (even alone) is where
            // the stream has come to.
            if let Some(id) = id.take() {
                self.last_id = Some(id);
            }
            let (name, json) = (std::mem::take(&mut event_name), std::mem::take(&mut data));
            if json.is_empty() {
                continue;
            }
            if name == GapEvent::NAME {
                let gap: GapEvent = decode(Route::Events, json.as_bytes()).map_err(|e| {
                    fail(
                        3,
                        format!("the server sent a malformed gap event ({e}): {json}"),
                    )
                })?;
                return Ok(Some(Sse::Gap(gap)));
            }
            if name == LaggedEvent::NAME {
                let lagged: LaggedEvent = decode(Route::Events, json.as_bytes()).map_err(|e| {
                    fail(
                        3,
                        format!("the server sent a malformed lagged event ({e}): {json}"),
                    )
                })?;
                return Ok(Some(Sse::Lagged(lagged.missed)));
            }
            let event: Event = decode(Route::Events, json.as_bytes()).map_err(|e| {
                fail(
                    3,
                    format!("the server sent a malformed event ({e}): {json}"),
                )
            })?;
            return Ok(Some(Sse::Event(event, json)));
        }
    }
}

/// How long a broken stream may take to open again, on any host, before
/// the command gives up.
pub const RESUME_WITHIN: Duration = Duration::from_secs(30);

/// The first pause between two attempts to open a broken stream again;
/// it doubles up to [`MAX_RESUME_PAUSE`].
const FIRST_RESUME_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two attempts to open a broken stream again.
const MAX_RESUME_PAUSE: Duration = Duration::from_secs(2);

/// An event stream that opens itself again, after the last event seen,
/// when it breaks off: a read error, as when its host dies. (A stream the
/// server ended is not broken: it ends.) `open` opens the stream after a
/// position, or from now on with `None`; with a list of hosts, the
/// client's transport picks one that answers.
pub struct Resuming<R, F> {
    open: F,
    stream: Option<EventStream<R>>,
    /// The position of the last event seen, on any of the streams.
    last_id: Option<String>,
    /// How long to keep trying to open a broken stream again.
    within: Duration,
    /// What [`Self::next_event`] answers before reading on.
    pending: std::collections::VecDeque<Sse>,
}

impl<R: Read, F: FnMut(Option<&str>) -> Result<R, Failure>> Resuming<R, F> {
    /// A stream that `open` opens, now and after each break, trying for up
    /// to `within` after a break.
    pub fn new(open: F, within: Duration) -> Self {
        Resuming {
            open,
            stream: None,
            last_id: None,
            within,
            pending: Default::default(),
        }
    }

    /// The next item: as [`EventStream::next_event`], and after a break
    /// [`Sse::Resumed`], then, when the store gave no position to resume
    /// from, [`Sse::Gap`]. Exit 3 if the stream broke off and could not be
    /// opened again within the bound; the first open's refusal as it is.
    pub fn next_event(&mut self) -> Result<Option<Sse>, Failure> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Ok(Some(item));
            }
            let stream = self.subscribe()?;
            let item = stream.next_event();
            if let Some(id) = stream.last_id() {
                self.last_id = Some(id.to_string());
            }
            match item {
                Err(broken) => self.resume(broken)?,
                other => return other,
            }
        }
    }

    /// Opens the stream now unless it is open: a caller that asks the
    /// server something after subscribing hears every change after the
    /// answer as an event.
    pub fn subscribe(&mut self) -> Result<&mut EventStream<R>, Failure> {
        if self.stream.is_none() {
            let opened = (self.open)(None)?;
            self.stream = Some(EventStream::new(opened));
        }
        Ok(self.stream.as_mut().expect("opened above"))
    }

    /// Opens the stream again after `broken`, after the last position seen,
    /// trying with growing pauses for up to the bound.
    fn resume(&mut self, broken: Failure) -> Result<(), Failure> {
        let deadline = Instant::now() + self.within;
        let mut pause = FIRST_RESUME_PAUSE;
        let opened = loop {
            match (self.open)(self.last_id.as_deref()) {
                Ok(opened) => break opened,
                Err(refused) if refused.code != 3 => return Err(refused),
                Err(last) => {
                    if Instant::now() + pause >= deadline {
                        return Err(fail(
                            3,
                            format!(
                                "{}; no server took the stream again within {:?}: {}",
                                broken.message, self.within, last.message
                            ),
                        ));
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(MAX_RESUME_PAUSE);
                }
            }
        };
        self.stream = Some(EventStream::new(opened));
        self.pending.push_back(Sse::Resumed(broken.message));
        if self.last_id.is_none() {
            self.pending.push_back(Sse::Gap(GapEvent::new(
                "",
                "the server gives no event positions (its store keeps no history that \
                 its hosts share), so the stream resumed from now",
            )));
        }
        Ok(())
    }
}

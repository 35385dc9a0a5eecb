//! Reading `GET /v1/events` (docs/reference.md#events): the Server-Sent Events
//! of a stream, one lockd event at a time (`lockd watch`, `lockd leader
//! --watch`).

use std::io::{BufRead, BufReader, Read};

use lockd_api::{decode, Event, LaggedEvent, Route};

use super::failure::{fail, Failure};

/// One item of an event stream.
#[derive(Debug)]
pub enum Sse {
    /// A lock event, and its JSON as the server sent it.
    Event(Event, String),
    /// The stream's final event: this client fell behind and missed this
    /// many events.
    Lagged(u64),
}

/// The events of a stream, read as they come.
pub struct EventStream<R> {
    lines: BufReader<R>,
}

impl<R: Read> EventStream<R> {
    /// Reads the stream `stream` (an open `GET /v1/events` body).
    pub fn new(stream: R) -> Self {
        EventStream {
            lines: BufReader::new(stream),
        }
    }

    /// The next event; `None` when the server closed the stream. Exit 3 if
    /// the stream broke off or carried a malformed event.
    pub fn next_event(&mut self) -> Result<Option<Sse>, Failure> {
        let mut event_name = String::new();
        let mut data = String::new();
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
                }
                continue;
            }
            // A blank line ends an event.
            let (name, json) = (std::mem::take(&mut event_name), std::mem::take(&mut data));
            if json.is_empty() {
                continue;
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

//! `lockd watch`: prints the events of `GET /v1/events` as they come
//! (docs/reference.md#events).

use std::io::{Read, Write};

use clap::Args;
use lockd_api::{Event, EventQuery, HeldMode, Route};

use crate::cli::client::Client;
use crate::cli::events::{EventStream, Sse};
use crate::cli::failure::{exit_code, fail, Failure};
use crate::cli::flags::Conn;
use crate::cli::output::Format;
use crate::cli::time::rfc3339;

/// Print lock events live, one line each, until interrupted.
///
/// The events: acquired, extended, released, expired, handed_off,
/// force_released, lease_*. Exits 1 if the server closes the stream because
/// this client fell behind, 3 if the stream ends otherwise.
#[derive(Args, Debug)]
pub struct WatchCommand {
    /// Only events of this namespace [default: every namespace].
    #[arg(long)]
    namespace: Option<String>,
    /// Only events of locks whose name starts with this.
    #[arg(long)]
    prefix: Option<String>,
    #[command(flatten)]
    conn: Conn,
}

impl WatchCommand {
    /// Prints until the stream ends; see [`print`] for the exit codes.
    pub fn execute(self) -> i32 {
        exit_code(self.run(), "lockd")
    }

    fn run(self) -> Result<i32, Failure> {
        let query = EventQuery {
            namespace: self.namespace,
            prefix: self.prefix.filter(|p| !p.is_empty()),
            after: None,
            access_token: None,
        };
        let format = self.conn.format;
        let client = Client::streaming(self.conn)?;
        let events = client.open_stream(Route::Events, &query.path())?;
        print(events, format, &mut std::io::stdout().lock())
    }
}

/// Reads the Server-Sent Events of `stream` and writes each event to `out`:
/// its JSON line with `Format::Json`, else one readable line. Returns when
/// the stream ends: exit 1 after a `lagged` event (this client fell
/// behind), 3 when the server closed the stream otherwise, 0 when `out` is
/// closed (`lockd watch | head`).
pub fn print(stream: impl Read, format: Format, out: &mut impl Write) -> Result<i32, Failure> {
    let mut events = EventStream::new(stream);
    loop {
        let (event, json) = match events.next_event()? {
            Some(Sse::Event(event, json)) => (event, json),
            Some(Sse::Lagged(missed)) => {
                return Err(fail(
                    1,
                    format!(
                        "this client fell behind and the server closed the stream \
                         ({missed} events missed); run 'lockd watch' again"
                    ),
                ))
            }
            None => {
                return Err(fail(
                    3,
                    "the server closed the event stream; run 'lockd watch' again",
                ))
            }
        };
        let written = match format {
            Format::Json => writeln!(out, "{json}"),
            Format::Text => writeln!(out, "{}", text_line(&event)),
        };
        if written.and_then(|()| out.flush()).is_err() {
            return Ok(0);
        }
    }
}

/// `2025-01-31T12:00:00.250Z acquired default/deploy owner w1 token 7`,
/// and ` shared` or ` permit` after a grant that is not exclusive.
fn text_line(e: &Event) -> String {
    let mode = match e.mode {
        HeldMode::Exclusive => String::new(),
        mode => format!(" {mode}"),
    };
    format!(
        "{} {} {}/{} owner {} token {}{mode}",
        rfc3339(e.at_ms),
        e.kind.as_str(),
        e.namespace,
        e.name,
        e.owner,
        e.fencing_token
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stream: &str, format: Format) -> (Result<i32, String>, String) {
        let mut out = Vec::new();
        let result = print(stream.as_bytes(), format, &mut out).map_err(|f| f.message);
        (result, String::from_utf8(out).unwrap())
    }

    #[test]
    fn prints_events_and_skips_comments() {
        let stream = ": lockd events\n\n\
            data: {\"type\":\"acquired\",\"namespace\":\"default\",\"name\":\"deploy\",\"owner\":\"w1\",\"fencing_token\":7,\"at_ms\":0}\n\n\
            : heartbeat\n\n\
            data: {\"type\":\"force_released\",\"namespace\":\"n\",\"name\":\"a\",\"owner\":\"w2\",\"fencing_token\":8,\"at_ms\":1000,\"mode\":\"shared\"}\n\n";
        let (result, out) = run(stream, Format::Text);
        assert!(result.unwrap_err().contains("closed the event stream"));
        assert_eq!(
            out,
            "1970-01-01T00:00:00.000Z acquired default/deploy owner w1 token 7\n\
             1970-01-01T00:00:01.000Z force_released n/a owner w2 token 8 shared\n"
        );
        let (_, out) = run(stream, Format::Json);
        assert_eq!(out.lines().count(), 2);
        assert!(out.starts_with("{\"type\":\"acquired\""), "{out}");
    }

    #[test]
    fn lagged_ends_with_exit_1_and_bad_events_with_3() {
        let mut out = Vec::new();
        let failure = print(
            "event: lagged\ndata: {\"type\":\"lagged\",\"missed\":12}\n\n".as_bytes(),
            Format::Text,
            &mut out,
        )
        .unwrap_err();
        assert_eq!(failure.code, 1);
        assert!(
            failure.message.contains("12 events missed"),
            "{}",
            failure.message
        );
        let failure = print(
            "data: {\"type\":\"stolen\"}\n\n".as_bytes(),
            Format::Text,
            &mut out,
        )
        .unwrap_err();
        assert_eq!(failure.code, 3);
        assert!(
            failure.message.contains("malformed event"),
            "{}",
            failure.message
        );
    }
}

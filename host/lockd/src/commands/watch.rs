//! `lockd watch`: prints the events of `GET /v1/events` as they come
//! (docs/reference.md#events).

use std::io::{Read, Write};

use clap::Args;
use lockd_api::{Event, EventQuery, GapEvent, HeldMode, Route};

use crate::cli::client::Client;
use crate::cli::events::{Resuming, Sse, RESUME_WITHIN};
use crate::cli::failure::{exit_code, fail, Failure};
use crate::cli::flags::Conn;
use crate::cli::output::Format;
use crate::cli::time::rfc3339;

/// Print lock events live, one line each, until interrupted.
///
/// The events: acquired, extended, released, expired, handed_off,
/// force_released, lease_*. If the stream breaks off (its host died), it is
/// opened again, on another host of --server if need be, after the last
/// event seen: on etcd nothing is lost, and where events may have been
/// missed a line on stderr says so. Exits 1 if the server closes the
/// stream because this client fell behind, 3 if the stream ends otherwise
/// or no server takes it again within 30s.
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
    /// Prints until the stream ends; see [`print()`] for the exit codes.
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
        let open = |after: Option<&str>| {
            let query = EventQuery {
                after: after.map(str::to_string),
                ..query.clone()
            };
            client.open_stream(Route::Events, &query.path())
        };
        let mut events = Resuming::new(open, RESUME_WITHIN);
        print(
            &mut events,
            format,
            &mut std::io::stdout().lock(),
            &mut std::io::stderr(),
        )
    }
}

/// Reads the Server-Sent Events of `events` and writes each event to
/// `out`: its JSON line with `Format::Json`, else one readable line. A
/// stream that broke off and resumed is a line on `notes` (stderr), and so
/// is a gap (events may have been missed), which `Format::Json` also
/// writes to `out` as its JSON line. Returns when the stream ends: exit 1
/// after a `lagged` event (this client fell behind), 3 when the server
/// closed the stream otherwise or no server took it again after a break, 0
/// when `out` is closed (`lockd watch | head`).
pub fn print<R: Read>(
    events: &mut Resuming<R, impl FnMut(Option<&str>) -> Result<R, Failure>>,
    format: Format,
    out: &mut impl Write,
    notes: &mut impl Write,
) -> Result<i32, Failure> {
    loop {
        let written = match events.next_event()? {
            Some(Sse::Event(event, json)) => match format {
                Format::Json => writeln!(out, "{json}"),
                Format::Text => writeln!(out, "{}", text_line(&event)),
            },
            Some(Sse::Lagged(missed)) => {
                return Err(fail(
                    1,
                    format!(
                        "this client fell behind and the server closed the stream \
                         ({missed} events missed); run 'lockd watch' again"
                    ),
                ))
            }
            Some(Sse::Gap(gap)) => {
                let _ = writeln!(notes, "lockd: {}", gap_line(&gap));
                match format {
                    Format::Json => {
                        writeln!(out, "{}", serde_json::to_string(&gap).unwrap_or_default())
                    }
                    Format::Text => Ok(()),
                }
            }
            Some(Sse::Resumed(broken)) => {
                let _ = writeln!(notes, "lockd: {broken}; resumed the event stream");
                Ok(())
            }
            None => {
                return Err(fail(
                    3,
                    "the server closed the event stream; run 'lockd watch' again",
                ))
            }
        };
        if written.and_then(|()| out.flush()).is_err() {
            return Ok(0);
        }
    }
}

/// `events may have been missed after 41.2: etcd compacted ...`.
pub fn gap_line(gap: &GapEvent) -> String {
    let after = match gap.after.as_str() {
        "" => String::new(),
        after => format!(" after {after}"),
    };
    format!("events may have been missed{after}: {}", gap.reason)
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
    use std::collections::VecDeque;
    use std::time::Duration;

    use super::*;

    /// A stream that gives `text`, then breaks off (a read error), as when
    /// its host dies; or ends cleanly if `breaks` is false.
    struct Scripted {
        text: std::io::Cursor<Vec<u8>>,
        breaks: bool,
    }

    impl Read for Scripted {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.text.read(buf)? {
                0 if self.breaks => Err(std::io::Error::other("connection reset")),
                n => Ok(n),
            }
        }
    }

    /// Prints the streams `opened` in turn (each opening records the
    /// position it was asked for in `asked`): the outcome, stdout, stderr.
    fn run(
        opened: Vec<(&str, bool)>,
        format: Format,
        asked: &mut Vec<Option<String>>,
    ) -> (Result<i32, Failure>, String, String) {
        let mut streams: VecDeque<_> = opened
            .into_iter()
            .map(|(text, breaks)| Scripted {
                text: std::io::Cursor::new(text.as_bytes().to_vec()),
                breaks,
            })
            .collect();
        let open = |after: Option<&str>| {
            asked.push(after.map(str::to_string));
            streams.pop_front().ok_or_else(|| fail(3, "cannot connect"))
        };
        let mut events = Resuming::new(open, Duration::from_millis(300));
        let (mut out, mut notes) = (Vec::new(), Vec::new());
        let result = print(&mut events, format, &mut out, &mut notes);
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        (result, text(out), text(notes))
    }

    const ACQUIRED: &str = "data: {\"type\":\"acquired\",\"namespace\":\"default\",\"name\":\"deploy\",\"owner\":\"w1\",\"fencing_token\":7,\"at_ms\":0}\n\n";

    #[test]
    fn prints_events_and_skips_comments() {
        let stream = ": lockd events\n\n\
            data: {\"type\":\"acquired\",\"namespace\":\"default\",\"name\":\"deploy\",\"owner\":\"w1\",\"fencing_token\":7,\"at_ms\":0}\n\n\
            : heartbeat\n\n\
            data: {\"type\":\"force_released\",\"namespace\":\"n\",\"name\":\"a\",\"owner\":\"w2\",\"fencing_token\":8,\"at_ms\":1000,\"mode\":\"shared\"}\n\n";
        let (result, out, _) = run(vec![(stream, false)], Format::Text, &mut Vec::new());
        assert!(result
            .unwrap_err()
            .message
            .contains("closed the event stream"));
        assert_eq!(
            out,
            "1970-01-01T00:00:00.000Z acquired default/deploy owner w1 token 7\n\
             1970-01-01T00:00:01.000Z force_released n/a owner w2 token 8 shared\n"
        );
        let (_, out, _) = run(vec![(stream, false)], Format::Json, &mut Vec::new());
        assert_eq!(out.lines().count(), 2);
        assert!(out.starts_with("{\"type\":\"acquired\""), "{out}");
    }

    #[test]
    fn lagged_ends_with_exit_1_and_bad_events_with_3() {
        let lagged = "event: lagged\ndata: {\"type\":\"lagged\",\"missed\":12}\n\n";
        let (result, _, _) = run(vec![(lagged, false)], Format::Text, &mut Vec::new());
        let failure = result.unwrap_err();
        assert_eq!(failure.code, 1);
        assert!(
            failure.message.contains("12 events missed"),
            "{}",
            failure.message
        );
        let bad = "data: {\"type\":\"stolen\"}\n\n";
        let (result, _, _) = run(vec![(bad, false)], Format::Text, &mut Vec::new());
        let failure = result.unwrap_err();
        assert_eq!(failure.code, 3);
        assert!(
            failure.message.contains("malformed event"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn a_broken_stream_resumes_after_the_last_event_seen() {
        let first = format!("id: 40\n\nid: 41.0\n{ACQUIRED}id: 41.1\n: heartbeat\n\n");
        let second = format!("id: 41.1\n\nid: 42.0\n{ACQUIRED}");
        let mut asked = Vec::new();
        let (result, out, notes) = run(
            vec![(&first, true), (&second, false)],
            Format::Text,
            &mut asked,
        );
        assert_eq!(result.unwrap_err().code, 3);
        assert_eq!(asked, [None, Some("41.1".to_string())]);
        assert_eq!(out.lines().count(), 2, "{out}");
        assert_eq!(
            notes,
            "lockd: the event stream broke off: connection reset; resumed the event stream\n"
        );
    }

    #[test]
    fn a_gap_is_said_on_stderr_and_as_a_json_line() {
        let gap = "event: gap\ndata: {\"type\":\"gap\",\"after\":\"3\",\"reason\":\"etcd compacted its history up to revision 9\"}\n\n";
        let first = "id: 3\n\n";
        let second = format!("{gap}id: 10\n\n{ACQUIRED}");
        let (_, out, notes) = run(
            vec![(first, true), (&second, false)],
            Format::Json,
            &mut Vec::new(),
        );
        assert!(
            notes.ends_with(
                "lockd: events may have been missed after 3: etcd compacted its history up \
                 to revision 9\n"
            ),
            "{notes}"
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(
            lines[0].starts_with("{\"type\":\"gap\",\"after\":\"3\""),
            "{out}"
        );

        // No position to resume from (a one-host store): a gap of its own.
        let (_, out, notes) = run(
            vec![(ACQUIRED, true), (ACQUIRED, false)],
            Format::Text,
            &mut Vec::new(),
        );
        assert_eq!(out.lines().count(), 2, "{out}");
        assert!(
            notes.contains(
                "lockd: events may have been missed: the server gives no event positions"
            ),
            "{notes}"
        );
    }

    #[test]
    fn a_stream_no_server_takes_again_ends_with_exit_3() {
        let (result, out, _) = run(vec![(ACQUIRED, true)], Format::Text, &mut Vec::new());
        let failure = result.unwrap_err();
        assert_eq!(failure.code, 3);
        assert!(
            failure.message.contains("broke off: connection reset; no server took the stream again within 300ms: cannot connect"),
            "{}",
            failure.message
        );
        assert_eq!(out.lines().count(), 1);
    }
}

//! `lockd leader NAME [--watch]`: who leads an election
//! (`POST /v1/elections/leader`, docs/contract.md#c24-elections), once or
//! each time it changes (the event stream, docs/reference.md#events).

use std::io::Write;
use std::time::Duration;

use clap::Args;
use lockd_api::{EventQuery, EventWord, FreeReply, LeaderReply, LeaderRequest, Route, Status};

use crate::cli::client::Client;
use crate::cli::events::{Resuming, Sse, RESUME_WITHIN};
use crate::cli::failure::{exit_code, fail, Failure};
use crate::cli::flags::{Conn, NamespaceArg};
use crate::cli::output::Format;
use crate::cli::time::{elapsed, remaining, rfc3339};

/// How long to wait before subscribing again to a stream the server
/// closed, so that a server that keeps closing streams is not hammered.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(200);

/// Show who leads an election (exit 1 if nobody leads); --watch follows it.
///
/// It shows the leader's candidate, value, fencing token, since when and
/// until when. With --watch, a line each time the leader or its value
/// changes, until interrupted.
#[derive(Args, Debug)]
#[command(mut_arg("namespace", |arg| arg.help("The namespace of the election")))]
pub struct LeaderCommand {
    /// The election's name.
    name: String,
    #[command(flatten)]
    namespace: NamespaceArg,
    /// Keep watching: print the leader, then a line each time the leader
    /// or its value changes, until interrupted (exit 3 if the server goes
    /// away).
    #[arg(long)]
    watch: bool,
    /// The same as --format json: the server's JSON, one line per answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

impl LeaderCommand {
    /// Exits 0 if someone leads, 1 if nobody does; with `--watch`, runs
    /// until interrupted.
    pub fn execute(self) -> i32 {
        exit_code(self.run(), "lockd")
    }

    fn run(mut self) -> Result<i32, Failure> {
        if self.json {
            self.conn.format = Format::Json;
        }
        if self.watch {
            return self.follow(&mut std::io::stdout().lock());
        }
        let client = Client::new(self.conn, 0)?;
        // With --format json, `Client::post` printed the body already.
        let leader = ask(&client, &self.namespace.namespace, &self.name)?;
        client.text(|| leader_line(&self.name, leader.as_ref()));
        Ok(if leader.is_some() { 0 } else { 1 })
    }

    /// `--watch`: subscribes to the election's events, then asks who leads
    /// and prints it; asks again on each event of the name that can change
    /// the leader or its value, printing only a change. A stream that
    /// lagged or that the server closed is subscribed to again, and one
    /// that broke off (its host died) resumes on another host; the leader
    /// is asked again each time, so no change goes unseen; only the latest
    /// state is shown.
    fn follow(self, out: &mut impl Write) -> Result<i32, Failure> {
        let format = self.conn.format;
        let asking = Client::new(
            Conn {
                // This loop prints, and only the changes.
                format: Format::Text,
                ..self.conn.clone()
            },
            0,
        )?;
        let streaming = Client::streaming(Conn {
            format: Format::Text,
            ..self.conn
        })?;
        let query = EventQuery {
            namespace: Some(self.namespace.namespace.clone()),
            prefix: Some(self.name.clone()),
            after: None,
            access_token: None,
        };
        let open = |after: Option<&str>| {
            let query = EventQuery {
                after: after.map(str::to_string),
                ..query.clone()
            };
            streaming.open_stream(Route::Events, &query.path())
        };
        let mut shown = None;
        loop {
            // Subscribed before asking: a change after the answer is an
            // event on this stream.
            let mut events = Resuming::new(&open, RESUME_WITHIN);
            events.subscribe()?;
            let mut ask_again = true;
            loop {
                if ask_again {
                    let leader = ask(&asking, &self.namespace.namespace, &self.name)?;
                    let state = leader
                        .as_ref()
                        .map(|l| (l.candidate.clone(), l.fencing_token, l.value.clone()));
                    if shown.as_ref() != Some(&state) {
                        if !print(out, format, &self.name, leader.as_ref()) {
                            // stdout closed (`lockd leader --watch | head`).
                            return Ok(0);
                        }
                        shown = Some(state);
                    }
                }
                ask_again = match events.next_event() {
                    Ok(Some(Sse::Event(event, _))) => {
                        event.name == self.name
                            && event.namespace == self.namespace.namespace
                            && event.kind != EventWord::Extended
                    }
                    // On another host, or with events maybe missed: the
                    // answer tells the present.
                    Ok(Some(Sse::Resumed(_) | Sse::Gap(_))) => true,
                    Ok(Some(Sse::Lagged(_))) => break,
                    Ok(None) => {
                        std::thread::sleep(RESUBSCRIBE_AFTER);
                        break;
                    }
                    Err(broken) => {
                        return Err(fail(
                            broken.code,
                            format!("{}; run 'lockd leader --watch' again", broken.message),
                        ))
                    }
                };
            }
        }
    }
}

/// Who leads `name`: `None` if nobody does.
fn ask(client: &Client, namespace: &str, name: &str) -> Result<Option<LeaderReply>, Failure> {
    let request = LeaderRequest {
        namespace: Some(namespace.to_string()),
        name: name.to_string(),
    };
    let answer = client.post(Route::Leader, &request)?;
    match answer.status {
        Status::Found => client.reply(&answer).map(Some),
        Status::NotFound => client.reply::<FreeReply>(&answer).map(|_| None),
        _ => Err(client.refused(name, &answer)),
    }
}

/// Writes the leader's line, or its JSON; whether `out` took it.
fn print(out: &mut impl Write, format: Format, name: &str, leader: Option<&LeaderReply>) -> bool {
    let line = match (format, leader) {
        (Format::Text, _) => leader_line(name, leader),
        (Format::Json, Some(leader)) => serde_json::to_string(leader).unwrap_or_default(),
        (Format::Json, None) => serde_json::to_string(&FreeReply {
            lock_delay_until_ms: None,
            status: Status::NotFound,
            waiters: None,
        })
        .unwrap_or_default(),
    };
    writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
}

/// `deploy led by web-1 value "10.0.0.5:8080" token 7 since
/// 2026-11-26T11:40:00.000Z (12.5s) expires in 9.9s (persistent)`, or
/// `nobody leads deploy`.
fn leader_line(name: &str, leader: Option<&LeaderReply>) -> String {
    let Some(leader) = leader else {
        return format!("nobody leads {name}");
    };
    let since = leader.since_ms.map_or_else(String::new, |ms| {
        format!(" since {} ({})", rfc3339(ms), elapsed(ms))
    });
    format!(
        "{name} led by {} value {:?} token {}{since} expires in {} ({})",
        leader.candidate,
        leader.value,
        leader.fencing_token,
        remaining(leader.expires_at_ms),
        leader.durability
    )
}

#[cfg(test)]
mod tests {
    use lockd_api::decode;

    use super::*;

    #[test]
    fn a_leader_is_one_line() {
        let leader: LeaderReply = decode(
            Route::Leader,
            br#"{"candidate":"web-1","durability":"persistent","expires_at_ms":0,"fencing_token":7,
                "since_ms":0,"status":"found","value":"10.0.0.5:8080\nsecond line"}"#,
        )
        .unwrap();
        let line = leader_line("deploy", Some(&leader));
        assert!(
            line.starts_with(
                "deploy led by web-1 value \"10.0.0.5:8080\\nsecond line\" token 7 \
                 since 1970-01-01T00:00:00.000Z ("
            ),
            "{line}"
        );
        assert!(line.ends_with(" expires in 0.0s (persistent)"), "{line}");
        assert_eq!(leader_line("deploy", None), "nobody leads deploy");
        let mut out = Vec::new();
        assert!(print(&mut out, Format::Json, "deploy", None));
        assert!(print(&mut out, Format::Json, "deploy", Some(&leader)));
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["status"], "not_found");
        assert_eq!(lines[1]["candidate"], "web-1");
        assert_eq!(lines[1]["fencing_token"], 7);
    }
}

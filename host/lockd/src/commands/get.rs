//! `lockd get`: who holds a name (`POST /v1/locks/get`): every holder with
//! its mode, the queue and a lock-delay in force.

use clap::Args;
use lockd_api::{FoundReply, FreeReply, GetRequest, HeldMode, Holding, Route, Status};

use crate::cli::client::Client;
use crate::cli::failure::{exit_code, Failure};
use crate::cli::flags::{Conn, NamespaceArg};
use crate::cli::output::{delay_line, holder_line};

/// Show who holds a lock, a shared lock or a semaphore (exit 1 if nobody
/// does).
#[derive(Args, Debug)]
pub struct GetCommand {
    /// The lock name.
    name: String,
    #[command(flatten)]
    namespace: NamespaceArg,
    #[command(flatten)]
    conn: Conn,
}

impl GetCommand {
    /// Exits 0 if the name is held, 1 if it is free.
    pub fn execute(self) -> i32 {
        exit_code(self.run(), "lockd")
    }

    fn run(self) -> Result<i32, Failure> {
        let client = Client::new(self.conn, 0)?;
        let request = GetRequest {
            namespace: Some(self.namespace.namespace),
            name: self.name,
        };
        let answer = client.post(Route::Get, &request)?;
        let name = request.name;
        match answer.status {
            Status::Found => {
                let found: FoundReply = client.reply(&answer)?;
                client.text(|| found_lines(&name, &found));
                Ok(0)
            }
            // A free lock is an answer, not an error: like grep finding
            // nothing, it exits 1 without complaining on stderr.
            Status::NotFound => {
                let free: FreeReply = client.reply(&answer)?;
                client.text(|| match free.lock_delay_until_ms {
                    Some(until_ms) => format!(
                        "{name} is free, held back by a {}{}",
                        delay_line(until_ms),
                        waiting(free.waiters.unwrap_or(0))
                    ),
                    None => format!("{name} is free"),
                });
                Ok(1)
            }
            _ => Err(client.refused(&name, &answer)),
        }
    }
}

/// One line per holder, `NAME held [MODE] by OWNER token N expires in T
/// (DURABILITY)` (an exclusive holder's line names no mode), then the
/// queue and a lock-delay in force.
fn found_lines(name: &str, found: &FoundReply) -> String {
    // A server older than `holders` sent the most recent grant alone.
    let holders = if found.holders.is_empty() {
        vec![Holding {
            acquired_at_ms: None,
            durability: found.durability,
            expires_at_ms: found.expires_at_ms,
            fencing_token: found.fencing_token,
            mode: found.mode,
            owner: found.owner.clone(),
        }]
    } else {
        found.holders.clone()
    };
    let mut lines: Vec<String> = holders
        .iter()
        .map(|holder| {
            let mode = match (holder.mode, found.permits) {
                (HeldMode::Exclusive, _) => String::new(),
                (HeldMode::Permit, Some(permits)) => format!(" a permit (of {permits})"),
                (HeldMode::Leader, _) => " as leader".to_string(),
                (mode, _) => format!(" {mode}"),
            };
            format!("{name} held{mode} by {}", holder_line(holder))
        })
        .collect();
    if found.waiters > 0 {
        lines.push(format!("{} waiting", found.waiters));
    }
    if let Some(until_ms) = found.lock_delay_until_ms {
        lines.push(delay_line(until_ms));
    }
    lines.join("\n")
}

/// `, 2 waiting` (nothing for none).
fn waiting(waiters: u64) -> String {
    if waiters == 0 {
        String::new()
    } else {
        format!(", {waiters} waiting")
    }
}

#[cfg(test)]
mod tests {
    use lockd_api::{decode, Route};

    use super::*;

    #[test]
    fn every_holder_is_a_line() {
        let found: FoundReply = decode(
            Route::Get,
            br#"{"status":"found","owner":"b","fencing_token":8,"expires_at_ms":0,"durability":"persistent",
                "mode":"shared","waiters":1,"lock_delay_until_ms":0,"holders":[
                {"owner":"a","fencing_token":7,"expires_at_ms":0,"durability":"ephemeral","mode":"shared"},
                {"owner":"b","fencing_token":8,"expires_at_ms":0,"durability":"persistent","mode":"shared"}]}"#,
        )
        .unwrap();
        let text = found_lines("r", &found);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(
            lines[0],
            "r held shared by a token 7 expires in 0.0s (ephemeral)"
        );
        assert_eq!(
            lines[1],
            "r held shared by b token 8 expires in 0.0s (persistent)"
        );
        assert_eq!(lines[2], "1 waiting");
        assert!(
            lines[3].starts_with("lock-delay until 1970-01-01T00:00:00.000Z"),
            "{text}"
        );
        // An exclusive holder's line is the one it has always been.
        let found: FoundReply = decode(
            Route::Get,
            br#"{"status":"found","owner":"w","fencing_token":3,"expires_at_ms":0,"durability":"persistent"}"#,
        )
        .unwrap();
        assert_eq!(
            found_lines("x", &found),
            "x held by w token 3 expires in 0.0s (persistent)"
        );
    }
}

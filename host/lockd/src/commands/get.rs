//! `lockd get`: who holds a lock (`POST /v1/locks/get`).

use clap::Args;
use lockd_api::{FoundReply, GetRequest, Route, Status, StatusReply};

use crate::cli::client::Client;
use crate::cli::failure::{exit_code, Failure};
use crate::cli::flags::Conn;
use crate::cli::time::remaining;

/// Show who holds a lock (exit 1 if nobody does).
#[derive(Args, Debug)]
pub struct GetCommand {
    /// The lock name.
    name: String,
    /// The namespace of the lock.
    #[arg(long, default_value = "default")]
    namespace: String,
    #[command(flatten)]
    conn: Conn,
}

impl GetCommand {
    /// Exits 0 if the lock is held, 1 if it is free.
    pub fn execute(self) -> i32 {
        exit_code(self.run(), "lockd")
    }

    fn run(self) -> Result<i32, Failure> {
        let client = Client::new(self.conn, 0)?;
        let request = GetRequest {
            namespace: Some(self.namespace),
            name: self.name,
        };
        let answer = client.post(Route::Get, &request)?;
        let name = request.name;
        match answer.status {
            Status::Found => {
                let found: FoundReply = client.reply(&answer)?;
                client.text(|| {
                    format!(
                        "{name} held by {} token {} expires in {} ({})",
                        found.owner,
                        found.fencing_token,
                        remaining(found.expires_at_ms),
                        found.durability,
                    )
                });
                Ok(0)
            }
            // A free lock is an answer, not an error: like grep finding
            // nothing, it exits 1 without complaining on stderr.
            Status::NotFound => {
                let _: StatusReply = client.reply(&answer)?;
                client.text(|| format!("{name} is free"));
                Ok(1)
            }
            _ => Err(client.refused(&name, &answer)),
        }
    }
}

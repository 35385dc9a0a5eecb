//! `lockd extend`: moves a held lock's expiry (`POST /v1/locks/extend`).

use clap::Args;
use lockd_api::{ExtendRequest, GrantReply, Route, Status};

use crate::cli::client::Client;
use crate::cli::failure::{exit_code, Failure};
use crate::cli::flags::{Conn, NamespaceArg};
use crate::cli::time::{parse_duration_ms, rfc3339};

/// Move the expiry of a held lock to now + TTL.
#[derive(Args, Debug)]
pub struct ExtendCommand {
    /// The lock name.
    name: String,
    /// The owner that holds it.
    #[arg(long)]
    owner: String,
    /// The new TTL, from now.
    #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION")]
    ttl: u64,
    #[command(flatten)]
    namespace: NamespaceArg,
    #[command(flatten)]
    conn: Conn,
}

impl ExtendCommand {
    /// Exits 0 once the lock is extended.
    pub fn execute(self) -> i32 {
        exit_code(self.run(), "lockd")
    }

    fn run(self) -> Result<i32, Failure> {
        let client = Client::new(self.conn, 0)?;
        let request = ExtendRequest {
            namespace: Some(self.namespace.namespace),
            name: self.name,
            owner: self.owner,
            ttl_ms: self.ttl,
        };
        let answer = client.post(Route::Extend, &request)?;
        let name = request.name;
        let grant: GrantReply = client.expect(&name, &answer, Status::Extended)?;
        client.text(|| {
            format!(
                "extended {name} token {} expires {}",
                grant.fencing_token,
                rfc3339(grant.expires_at_ms)
            )
        });
        Ok(0)
    }
}

//! `lockd lock`: takes a lock (`POST /v1/locks/lock`).

use clap::Args;
use lockd_api::{ErrorReply, GrantReply, LockMode, LockRequest, Route, Status};

use super::lease::lease_not_live;
use crate::cli::client::Client;
use crate::cli::failure::{exit_code, Failure};
use crate::cli::flags::{durability, Conn, NamespaceArg};
use crate::cli::time::{parse_duration_ms, rfc3339};

/// Take a lock (durations: 500ms, 10s, 5m, 1h30m; a plain number is ms).
#[derive(Args, Debug)]
pub struct LockCommand {
    /// The lock name.
    name: String,
    /// Who takes it; use the same owner to unlock, extend or re-lock.
    #[arg(long, required_unless_present = "lease")]
    owner: Option<String>,
    /// The lock's TTL: how long it is held unless extended.
    #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION",
          required_unless_present = "lease")]
    ttl: Option<u64>,
    /// Take it under this lease (from 'lockd lease grant') instead of
    /// --owner and --ttl: the lease id owns it, with the lease's expiry.
    #[arg(long, value_name = "LEASE_ID", conflicts_with_all = ["owner", "ttl", "ephemeral"])]
    lease: Option<String>,
    /// Wait this long in the lock's FIFO queue if it is held.
    #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION")]
    wait: Option<u64>,
    /// Keep the lock in memory only (lost if the server restarts).
    #[arg(long)]
    ephemeral: bool,
    /// Take it shared (a read lock): beside other shared holders, never
    /// beside an exclusive one.
    #[arg(long, conflicts_with = "lease")]
    shared: bool,
    #[command(flatten)]
    namespace: NamespaceArg,
    #[command(flatten)]
    conn: Conn,
}

impl LockCommand {
    /// Exits 0 once the lock is taken; see [`crate::cli::client`] for the
    /// codes of a refusal.
    pub fn execute(self) -> i32 {
        exit_code(self.run(), "lockd")
    }

    fn run(self) -> Result<i32, Failure> {
        let client = Client::new(self.conn, self.wait.unwrap_or(0))?;
        let request = LockRequest {
            namespace: Some(self.namespace.namespace),
            name: self.name,
            owner: self.owner,
            ttl_ms: self.ttl,
            wait_ms: self.wait,
            // Under a lease, the lease's durability applies.
            durability: self.lease.is_none().then_some(durability(self.ephemeral)),
            lease_id: self.lease,
            mode: self.shared.then_some(LockMode::Shared),
            permits: None,
        };
        let answer = client.post(Route::Lock, &request)?;
        let name = request.name;
        if let Some(id) = &request.lease_id {
            if answer.status == Status::NotHeld {
                let _: ErrorReply = client.reply(&answer)?;
                return Err(lease_not_live(id));
            }
        }
        let grant: GrantReply = client.expect(&name, &answer, Status::Acquired)?;
        let shared = if self.shared { " shared" } else { "" };
        client.text(|| {
            format!(
                "acquired {name}{shared} token {} expires {}",
                grant.fencing_token,
                rfc3339(grant.expires_at_ms)
            )
        });
        Ok(0)
    }
}

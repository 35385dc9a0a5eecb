//! `lockd sem acquire | release | extend | get`: semaphores, a name with a
//! number of permits, each held like a lock (docs/contract.md#c22-semaphores),
//! over the lock routes with `permits`.

use clap::{Args, Subcommand};
use lockd_api::{
    ExtendRequest, FoundReply, FreeReply, GetRequest, GrantReply, HeldMode, LockRequest, Route,
    Status, StatusReply, UnlockRequest,
};

use crate::cli::client::Client;
use crate::cli::failure::{exit_code, fail, Failure};
use crate::cli::flags::{durability, Conn, NamespaceArg};
use crate::cli::output::{delay_line, holder_line};
use crate::cli::time::{parse_duration_ms, rfc3339};

/// Semaphores: a name with N permits, each held by one owner.
///
/// Each permit has its own TTL and fencing token (durations: 500ms, 10s,
/// 5m, 1h30m).
#[derive(Args, Debug)]
pub struct SemCommand {
    #[command(subcommand)]
    action: SemAction,
}

/// `lockd sem ...`
#[derive(Subcommand, Debug)]
enum SemAction {
    /// Take one permit of the semaphore NAME, which has --permits of them.
    #[command(mut_arg("namespace", |arg| arg.help("The namespace of the semaphore")))]
    Acquire {
        /// The semaphore's name.
        name: String,
        /// How many permits the semaphore has (1 to 65536); the first
        /// acquirer sets it, and every holder must agree.
        #[arg(long, value_name = "N")]
        permits: u32,
        /// Who takes the permit; use the same owner to release or extend it.
        #[arg(long)]
        owner: String,
        /// The permit's TTL: how long it is held unless extended.
        #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION")]
        ttl: u64,
        /// Wait this long in the semaphore's FIFO queue if every permit is
        /// held.
        #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION")]
        wait: Option<u64>,
        /// Keep the permit in memory only (lost if the server restarts).
        #[arg(long)]
        ephemeral: bool,
        #[command(flatten)]
        namespace: NamespaceArg,
        #[command(flatten)]
        conn: Conn,
    },
    /// Release the permit OWNER holds.
    #[command(mut_arg("namespace", |arg| arg.help("The namespace of the semaphore")))]
    Release {
        /// The semaphore's name.
        name: String,
        /// The owner that holds the permit.
        #[arg(long)]
        owner: String,
        /// Release it only if it is held under this fencing token.
        #[arg(long)]
        token: Option<u64>,
        #[command(flatten)]
        namespace: NamespaceArg,
        #[command(flatten)]
        conn: Conn,
    },
    /// Move the expiry of the permit OWNER holds to now + TTL.
    #[command(mut_arg("namespace", |arg| arg.help("The namespace of the semaphore")))]
    Extend {
        /// The semaphore's name.
        name: String,
        /// The owner that holds the permit.
        #[arg(long)]
        owner: String,
        /// The new TTL, from now.
        #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION")]
        ttl: u64,
        #[command(flatten)]
        namespace: NamespaceArg,
        #[command(flatten)]
        conn: Conn,
    },
    /// Show a semaphore's permits, holders and waiters (exit 1 if no
    /// permit is held).
    #[command(mut_arg("namespace", |arg| arg.help("The namespace of the semaphore")))]
    Get {
        /// The semaphore's name.
        name: String,
        #[command(flatten)]
        namespace: NamespaceArg,
        #[command(flatten)]
        conn: Conn,
    },
}

impl SemCommand {
    /// Exits 0 on success; 1 for `busy`, `not_owner`, `not_held` and a
    /// semaphore with no permit held; the other codes as every client
    /// command.
    pub fn execute(self) -> i32 {
        exit_code(self.action.run(), "lockd")
    }
}

impl SemAction {
    fn run(self) -> Result<i32, Failure> {
        match self {
            SemAction::Acquire {
                name,
                permits,
                owner,
                ttl,
                wait,
                ephemeral,
                namespace: NamespaceArg { namespace },
                conn,
            } => {
                let client = Client::new(conn, wait.unwrap_or(0))?;
                let request = LockRequest {
                    namespace: Some(namespace),
                    name,
                    owner: Some(owner),
                    ttl_ms: Some(ttl),
                    wait_ms: wait,
                    durability: Some(durability(ephemeral)),
                    permits: Some(permits),
                    ..LockRequest::default()
                };
                let answer = client.post(Route::Lock, &request)?;
                let name = request.name;
                let grant: GrantReply = client.expect(&name, &answer, Status::Acquired)?;
                client.text(|| {
                    format!(
                        "acquired a permit of {name} ({permits} permits) token {} expires {}",
                        grant.fencing_token,
                        rfc3339(grant.expires_at_ms)
                    )
                });
                Ok(0)
            }
            SemAction::Release {
                name,
                owner,
                token,
                namespace: NamespaceArg { namespace },
                conn,
            } => {
                let client = Client::new(conn, 0)?;
                let request = UnlockRequest {
                    namespace: Some(namespace),
                    name,
                    owner,
                    fencing_token: token,
                };
                let answer = client.post(Route::Unlock, &request)?;
                let name = request.name;
                let _: StatusReply = client.expect(&name, &answer, Status::Unlocked)?;
                client.text(|| format!("released a permit of {name}"));
                Ok(0)
            }
            SemAction::Extend {
                name,
                owner,
                ttl,
                namespace: NamespaceArg { namespace },
                conn,
            } => {
                let client = Client::new(conn, 0)?;
                let request = ExtendRequest {
                    namespace: Some(namespace),
                    name,
                    owner,
                    ttl_ms: ttl,
                };
                let answer = client.post(Route::Extend, &request)?;
                let name = request.name;
                let grant: GrantReply = client.expect(&name, &answer, Status::Extended)?;
                client.text(|| {
                    format!(
                        "extended a permit of {name} token {} expires {}",
                        grant.fencing_token,
                        rfc3339(grant.expires_at_ms)
                    )
                });
                Ok(0)
            }
            SemAction::Get {
                name,
                namespace: NamespaceArg { namespace },
                conn,
            } => get(name, namespace, conn),
        }
    }
}

/// `lockd sem get`: `NAME: 2 of 3 permits held, 1 waiting`, then a line
/// per holder and a lock-delay in force. A name held as a lock is exit 1
/// with a line saying so.
fn get(name: String, namespace: String, conn: Conn) -> Result<i32, Failure> {
    let client = Client::new(conn, 0)?;
    let request = GetRequest {
        namespace: Some(namespace),
        name,
    };
    let answer = client.post(Route::Get, &request)?;
    let name = request.name;
    match answer.status {
        Status::Found => {
            let found: FoundReply = client.reply(&answer)?;
            let Some(permits) = found.permits.filter(|_| found.mode == HeldMode::Permit) else {
                return Err(fail(
                    1,
                    format!(
                        "{name} is not a semaphore: it is held {} by {:?}; see 'lockd get {name}'",
                        found.mode, found.owner
                    ),
                ));
            };
            client.text(|| {
                let mut lines = vec![format!(
                    "{name}: {} of {permits} permits held, {} waiting",
                    found.holders.len(),
                    found.waiters
                )];
                lines.extend(
                    found
                        .holders
                        .iter()
                        .map(|h| format!("  {}", holder_line(h))),
                );
                if let Some(until_ms) = found.lock_delay_until_ms {
                    lines.push(delay_line(until_ms));
                }
                lines.join("\n")
            });
            Ok(0)
        }
        Status::NotFound => {
            let free: FreeReply = client.reply(&answer)?;
            client.text(|| match free.lock_delay_until_ms {
                Some(until_ms) => format!(
                    "{name}: no permit held, {} waiting; {}",
                    free.waiters.unwrap_or(0),
                    delay_line(until_ms)
                ),
                None => format!("{name}: no permit held"),
            });
            Ok(1)
        }
        _ => Err(client.refused(&name, &answer)),
    }
}

//! `lockd lease grant | refresh | revoke | get`: leases, one expiry for
//! several locks (`/v1/leases/...`).

use clap::{Args, Subcommand};
use lockd_api::{
    ErrorReply, LeaseFoundReply, LeaseGrantRequest, LeaseGrantedReply, LeaseRefreshedReply,
    LeaseRequest, LeaseRevokedReply, Route, Status,
};

use crate::cli::client::Client;
use crate::cli::failure::{exit_code, fail, Failure};
use crate::cli::flags::{durability, Conn, NamespaceArg};
use crate::cli::time::{parse_duration_ms, remaining, rfc3339, seconds};

/// Leases: one expiry for several locks.
///
/// Take locks under a lease with 'lockd lock --lease' or the REST API's
/// `lease_id`.
#[derive(Args, Debug)]
pub struct LeaseCommand {
    #[command(subcommand)]
    action: LeaseAction,
}

/// `lockd lease ...`
#[derive(Subcommand, Debug)]
enum LeaseAction {
    /// Grant a lease and print its id.
    #[command(mut_arg("namespace", |arg| arg.help("The namespace of the lease and its locks")))]
    Grant {
        /// The lease's TTL; each refresh moves its expiry to now + this.
        #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION")]
        ttl: u64,
        /// Keep the lease and its locks in memory only (lost if the server restarts).
        #[arg(long)]
        ephemeral: bool,
        #[command(flatten)]
        namespace: NamespaceArg,
        #[command(flatten)]
        conn: Conn,
    },
    /// Move the expiry of a lease and of all its locks to now + its TTL.
    #[command(mut_arg("namespace", |arg| arg.help("The namespace of the lease")))]
    Refresh {
        /// The lease id.
        id: String,
        #[command(flatten)]
        namespace: NamespaceArg,
        #[command(flatten)]
        conn: Conn,
    },
    /// End a lease and release all its locks at once.
    #[command(mut_arg("namespace", |arg| arg.help("The namespace of the lease")))]
    Revoke {
        /// The lease id.
        id: String,
        #[command(flatten)]
        namespace: NamespaceArg,
        #[command(flatten)]
        conn: Conn,
    },
    /// Show a lease's expiry, durability and locks (exit 1 if it is not live).
    #[command(mut_arg("namespace", |arg| arg.help("The namespace of the lease")))]
    Get {
        /// The lease id.
        id: String,
        #[command(flatten)]
        namespace: NamespaceArg,
        #[command(flatten)]
        conn: Conn,
    },
}

impl LeaseCommand {
    /// Exits 0 on success, 1 if the lease is not live.
    pub fn execute(self) -> i32 {
        exit_code(self.action.run(), "lockd")
    }
}

/// The failure for a lease id the server does not know as live; `lockd
/// lock --lease` reports it too.
pub fn lease_not_live(id: &str) -> Failure {
    fail(
        1,
        format!(
            "lease {id} is not live (unknown, revoked or expired, or in another namespace); \
             grant a new one with 'lockd lease grant'"
        ),
    )
}

impl LeaseAction {
    fn run(self) -> Result<i32, Failure> {
        let (route, id, namespace, conn) = match self {
            LeaseAction::Grant {
                ttl,
                ephemeral,
                namespace: NamespaceArg { namespace },
                conn,
            } => return grant(ttl, ephemeral, namespace, conn),
            LeaseAction::Refresh {
                id,
                namespace: NamespaceArg { namespace },
                conn,
            } => (Route::LeaseRefresh, id, namespace, conn),
            LeaseAction::Revoke {
                id,
                namespace: NamespaceArg { namespace },
                conn,
            } => (Route::LeaseRevoke, id, namespace, conn),
            LeaseAction::Get {
                id,
                namespace: NamespaceArg { namespace },
                conn,
            } => (Route::LeaseGet, id, namespace, conn),
        };
        let client = Client::new(conn, 0)?;
        let request = LeaseRequest {
            namespace: Some(namespace),
            lease_id: id,
        };
        let answer = client.post(route, &request)?;
        let id = request.lease_id;
        if answer.status == Status::NotHeld {
            let _: ErrorReply = client.reply(&answer)?;
            return Err(lease_not_live(&id));
        }
        match route {
            Route::LeaseRefresh => {
                let r: LeaseRefreshedReply = client.expect(&id, &answer, Status::Refreshed)?;
                client.text(|| format!("refreshed {id} expires {}", rfc3339(r.expires_at_ms)));
            }
            Route::LeaseRevoke => {
                let r: LeaseRevokedReply = client.expect(&id, &answer, Status::Revoked)?;
                let s = if r.released == 1 { "" } else { "s" };
                client.text(|| format!("revoked {id}, released {} lock{s}", r.released));
            }
            _ => {
                let r: LeaseFoundReply = client.expect(&id, &answer, Status::Found)?;
                client.text(|| {
                    let locks = if r.locks.is_empty() {
                        "no locks".to_string()
                    } else {
                        format!("locks: {}", r.locks.join(", "))
                    };
                    format!(
                        "{id} expires in {} (ttl {}, {}), {locks}",
                        remaining(r.expires_at_ms),
                        seconds(r.ttl_ms),
                        r.durability,
                    )
                });
            }
        }
        Ok(0)
    }
}

/// `lockd lease grant`: prints the new lease's id alone.
fn grant(ttl: u64, ephemeral: bool, namespace: String, conn: Conn) -> Result<i32, Failure> {
    let client = Client::new(conn, 0)?;
    let request = LeaseGrantRequest {
        namespace: Some(namespace),
        ttl_ms: ttl,
        durability: Some(durability(ephemeral)),
    };
    let answer = client.post(Route::LeaseGrant, &request)?;
    let granted: LeaseGrantedReply = client.expect("lease", &answer, Status::Granted)?;
    // The id alone, so that `ID=$(lockd lease grant --ttl 30s)` works.
    client.text(|| granted.lease_id.clone());
    Ok(0)
}

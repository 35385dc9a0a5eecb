//! `lockd exec NAME -- CMD [ARGS...]`: runs a command while holding a lock,
//! like `flock`, `etcdctl lock` and `consul lock`, over the REST API.
//!
//! It takes NAME (shared with `--shared`) for a fresh owner (`exec-` and 32
//! hex digits from the OS's secure random source), then runs CMD with
//! `LOCKD_LOCK_NAME`, `LOCKD_NAMESPACE`, `LOCKD_OWNER` and
//! `LOCKD_FENCING_TOKEN` in its environment; keep-alive, the loss (exit 76),
//! the release and the exit codes are [`crate::cli::supervise`]'s, which
//! `lockd elect` shares.

use clap::Args;
use lockd_api::{LockMode, LockRequest, Route};
use lockd_core::random_id;

use crate::cli::failure::{fail, Failure};
use crate::cli::supervise::{self, not_taken, run_while_held, take, Held, HoldArgs, Kind};

/// Run a command while holding a lock, like flock.
///
/// Take NAME (waiting up to --wait), run CMD with LOCKD_LOCK_NAME,
/// LOCKD_NAMESPACE, LOCKD_OWNER and LOCKD_FENCING_TOKEN set, keep the lock
/// alive while CMD runs, release it when CMD exits, and exit with CMD's
/// status.
///
/// Exits 75 (CMD never started) if the lock cannot be taken, and 76 if
/// the lock is lost while CMD runs (CMD then gets SIGTERM, and SIGKILL
/// after --kill-after). SIGINT and SIGTERM are passed on to CMD.
#[derive(Args, Debug)]
pub struct ExecCommand {
    /// The lock name.
    name: String,
    /// Hold it shared (a read lock): CMD runs beside other shared holders,
    /// never beside an exclusive one.
    #[arg(long)]
    shared: bool,
    #[command(flatten)]
    hold: HoldArgs,
}

impl ExecCommand {
    /// Runs `lockd exec` on a small runtime of its own; returns the process
    /// exit code.
    pub fn execute(self) -> i32 {
        supervise::execute(Kind::Lock, exec(self))
    }
}

async fn exec(args: ExecCommand) -> Result<i32, Failure> {
    let ExecCommand { name, shared, hold } = args;
    let owner = random_id("exec").map_err(|e| not_taken("take", &name, fail(3, e.to_string())))?;
    let request = LockRequest {
        namespace: Some(hold.namespace.namespace.clone()),
        name: name.clone(),
        owner: Some(owner.clone()),
        ttl_ms: Some(hold.ttl),
        wait_ms: Some(hold.wait),
        durability: Some(hold.durability()),
        lease_id: None,
        mode: shared.then_some(LockMode::Shared),
        permits: None,
    };
    let remote = hold.remote()?;
    let taken = take(&remote, Route::Lock, request, &name, hold.wait, "take").await?;
    let held = Held {
        kind: Kind::Lock,
        remote,
        namespace: hold.namespace.namespace.clone(),
        name,
        owner,
        token: taken.grant.fencing_token,
    };
    let env = [
        ("LOCKD_LOCK_NAME", held.name.clone()),
        ("LOCKD_NAMESPACE", held.namespace.clone()),
        ("LOCKD_OWNER", held.owner.clone()),
        ("LOCKD_FENCING_TOKEN", held.token.to_string()),
    ];
    run_while_held(held, &taken, &hold, &env).await
}

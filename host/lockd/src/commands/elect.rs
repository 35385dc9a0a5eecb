//! `lockd elect NAME --value V -- CMD [ARGS...]`: runs a command while this
//! process leads the election NAME (docs/contract.md#c24-elections), like
//! `etcdctl elect`, over the REST API.
//!
//! It campaigns (`POST /v1/elections/campaign`) as `--candidate` (by
//! default `elect-` and 32 hex digits from the OS's secure random source),
//! waiting in the election's FIFO queue up to `--wait`, then runs CMD with
//! `LOCKD_ELECTION`, `LOCKD_NAMESPACE`, `LOCKD_OWNER` (the candidate),
//! `LOCKD_FENCING_TOKEN` and `LOCKD_LEADER_VALUE` in its environment. A
//! leadership is a grant of the name, so keep-alive, the loss (exit 76), the
//! release (here a resignation) and the exit codes are
//! [`crate::cli::supervise`]'s, the same as `lockd exec`'s.

use clap::Args;
use lockd_api::{CampaignRequest, Route};
use lockd_core::random_id;

use crate::cli::failure::{fail, Failure};
use crate::cli::flags::check_leader_value;
use crate::cli::supervise::{self, not_taken, run_while_held, take, Held, HoldArgs, Kind};

/// Run a command while leading an election.
///
/// Campaign for NAME with --value (waiting up to --wait), run CMD with
/// LOCKD_ELECTION, LOCKD_NAMESPACE, LOCKD_OWNER, LOCKD_FENCING_TOKEN and
/// LOCKD_LEADER_VALUE set, keep the leadership alive while CMD runs, resign
/// when CMD exits, and exit with CMD's status.
///
/// Exits 75 (CMD never started) if this process cannot lead, and 76 if the
/// leadership is lost while CMD runs (CMD then gets SIGTERM, and SIGKILL
/// after --kill-after). SIGINT and SIGTERM are passed on to CMD.
#[derive(Args, Debug)]
pub struct ElectCommand {
    /// The election's name.
    name: String,
    /// What this process proclaims while it leads, for example its address
    /// (at most 4096 bytes); 'lockd leader NAME' shows it.
    #[arg(long)]
    value: String,
    /// Who campaigns [default: `elect-` and 32 random hex digits].
    #[arg(long)]
    candidate: Option<String>,
    #[command(flatten)]
    hold: HoldArgs,
}

impl ElectCommand {
    /// Runs `lockd elect` on a small runtime of its own; returns the process
    /// exit code.
    pub fn execute(self) -> i32 {
        supervise::execute(Kind::Leadership, elect(self))
    }
}

async fn elect(args: ElectCommand) -> Result<i32, Failure> {
    let ElectCommand {
        name,
        value,
        candidate,
        hold,
    } = args;
    check_leader_value(&value)?;
    let candidate = match candidate {
        Some(candidate) => candidate,
        None => random_id("elect").map_err(|e| not_taken("lead", &name, fail(3, e.to_string())))?,
    };
    let request = CampaignRequest {
        namespace: Some(hold.namespace.namespace.clone()),
        name: name.clone(),
        candidate: candidate.clone(),
        value: value.clone(),
        ttl_ms: hold.ttl,
        wait_ms: Some(hold.wait),
        durability: Some(hold.durability()),
    };
    let remote = hold.remote()?;
    let taken = take(&remote, Route::Campaign, request, &name, hold.wait, "lead").await?;
    let held = Held {
        kind: Kind::Leadership,
        remote,
        namespace: hold.namespace.namespace.clone(),
        name,
        owner: candidate,
        token: taken.grant.fencing_token,
    };
    let env = [
        ("LOCKD_ELECTION", held.name.clone()),
        ("LOCKD_NAMESPACE", held.namespace.clone()),
        ("LOCKD_OWNER", held.owner.clone()),
        ("LOCKD_FENCING_TOKEN", held.token.to_string()),
        ("LOCKD_LEADER_VALUE", value),
    ];
    run_while_held(held, &taken, &hold, &env).await
}

//! `lockd proclaim NAME --value V`: the leader of an election replaces its
//! value (`POST /v1/elections/proclaim`, docs/contract.md#c24-elections);
//! its token and expiry stay. Under `lockd elect`, NAME, the candidate and
//! the token come from CMD's environment.

use clap::Args;
use lockd_api::{ProclaimRequest, Route, Status, StatusReply};

use crate::cli::client::Client;
use crate::cli::failure::{exit_code, fail, Failure};
use crate::cli::flags::{check_leader_value, Conn, NamespaceArg};

/// Replace the value an election's leader proclaims, keeping its leadership.
///
/// The value is at most 4096 bytes. Run by CMD under 'lockd elect', it
/// needs only --value.
#[derive(Args, Debug)]
#[command(mut_arg("namespace", |arg| arg.env("LOCKD_NAMESPACE").help("The namespace of the election")))]
pub struct ProclaimCommand {
    /// The election's name.
    #[arg(env = "LOCKD_ELECTION")]
    name: String,
    /// The new value.
    #[arg(long)]
    value: String,
    /// The candidate that leads.
    #[arg(long, env = "LOCKD_OWNER")]
    candidate: String,
    /// The fencing token of its leadership.
    #[arg(long, env = "LOCKD_FENCING_TOKEN")]
    token: u64,
    #[command(flatten)]
    namespace: NamespaceArg,
    #[command(flatten)]
    conn: Conn,
}

impl ProclaimCommand {
    /// Exits 0 once the value is replaced; 1 if the candidate does not lead
    /// under the token.
    pub fn execute(self) -> i32 {
        exit_code(self.run(), "lockd")
    }

    fn run(self) -> Result<i32, Failure> {
        check_leader_value(&self.value)?;
        let client = Client::new(self.conn, 0)?;
        let request = ProclaimRequest {
            namespace: Some(self.namespace.namespace),
            name: self.name,
            candidate: self.candidate,
            fencing_token: self.token,
            value: self.value,
        };
        let answer = client.post(Route::Proclaim, &request)?;
        let name = request.name;
        let see = format!("see 'lockd leader {name}'");
        match answer.status {
            Status::Proclaimed => {
                let _: StatusReply = client.reply(&answer)?;
                client.text(|| format!("{name} led by {} value {:?}", request.candidate, request.value));
                Ok(0)
            }
            Status::NotHeld => Err(fail(
                1,
                format!("nobody leads {name} (the leadership may have expired); {see}"),
            )),
            Status::NotOwner => Err(fail(
                1,
                format!(
                    "{name} is led by another candidate than {:?} or under another token than {}; {see}",
                    request.candidate, request.fencing_token
                ),
            )),
            _ => Err(client.refused(&name, &answer)),
        }
    }
}

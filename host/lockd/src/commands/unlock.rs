//! `lockd unlock`: releases a lock (`POST /v1/locks/unlock`).

use clap::Args;
use lockd_api::{Route, Status, StatusReply, UnlockRequest};

use crate::cli::client::Client;
use crate::cli::failure::{exit_code, Failure};
use crate::cli::flags::{Conn, NamespaceArg};

/// Release a lock.
#[derive(Args, Debug)]
pub struct UnlockCommand {
    /// The lock name.
    name: String,
    /// The owner that holds it.
    #[arg(long)]
    owner: String,
    /// Release only the grant with this fencing token.
    #[arg(long)]
    token: Option<u64>,
    #[command(flatten)]
    namespace: NamespaceArg,
    #[command(flatten)]
    conn: Conn,
}

impl UnlockCommand {
    /// Exits 0 once the lock is released.
    pub fn execute(self) -> i32 {
        exit_code(self.run(), "lockd")
    }

    fn run(self) -> Result<i32, Failure> {
        let client = Client::new(self.conn, 0)?;
        let request = UnlockRequest {
            namespace: Some(self.namespace.namespace),
            name: self.name,
            owner: self.owner,
            fencing_token: self.token,
        };
        let answer = client.post(Route::Unlock, &request)?;
        let name = request.name;
        let _: StatusReply = client.expect(&name, &answer, Status::Unlocked)?;
        client.text(|| format!("unlocked {name}"));
        Ok(0)
    }
}

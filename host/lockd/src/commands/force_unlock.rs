//! `lockd force-unlock`: an operator releases a lock whoever holds it
//! (`POST /v1/locks/force-unlock`).

use clap::Args;
use lockd_api::{ErrorReply, ForceUnlockRequest, ReleasedReply, Route, Status};

use crate::cli::client::Client;
use crate::cli::failure::{exit_code, fail, Failure};
use crate::cli::flags::{Conn, NamespaceArg};

/// Release a lock whoever holds it (an operator's action, logged by the server).
///
/// The head of its queue gets it next. Exits 1 if it is not held.
#[derive(Args, Debug)]
pub struct ForceUnlockCommand {
    /// The lock name.
    name: String,
    #[command(flatten)]
    namespace: NamespaceArg,
    #[command(flatten)]
    conn: Conn,
}

impl ForceUnlockCommand {
    /// Exits 0 once released, 1 if the lock was not held.
    pub fn execute(self) -> i32 {
        exit_code(self.run(), "lockd")
    }

    fn run(self) -> Result<i32, Failure> {
        let client = Client::new(self.conn, 0)?;
        let request = ForceUnlockRequest {
            namespace: Some(self.namespace.namespace),
            name: self.name,
        };
        let answer = client.post(Route::ForceUnlock, &request)?;
        let name = request.name;
        if answer.status == Status::NotHeld {
            let _: ErrorReply = client.reply(&answer)?;
            return Err(fail(1, format!("{name} is not held; nothing to release")));
        }
        let released: ReleasedReply = client.expect(&name, &answer, Status::Released)?;
        client.text(|| {
            format!(
                "force-released {name} from {} (token {})",
                released.owner, released.fencing_token
            )
        });
        Ok(0)
    }
}

//! `lockd ls`: the live locks of a namespace (`GET /v1/locks`).

use clap::Args;
use lockd_api::{ListQuery, ListReply, Route, Status, DEFAULT_NAMESPACE};

use crate::cli::client::Client;
use crate::cli::failure::{exit_code, Failure};
use crate::cli::flags::{Conn, NamespaceArg};
use crate::cli::output::table;

/// List the live locks of a namespace.
#[derive(Args, Debug)]
#[command(mut_arg("namespace", |arg| arg.help("The namespace to list")))]
pub struct LsCommand {
    /// Only names starting with this.
    #[arg(long, default_value = "")]
    prefix: String,
    #[command(flatten)]
    namespace: NamespaceArg,
    #[command(flatten)]
    conn: Conn,
}

impl LsCommand {
    /// Exits 0 with the table (or the line that says nothing is held).
    pub fn execute(self) -> i32 {
        exit_code(self.run(), "lockd")
    }

    fn run(self) -> Result<i32, Failure> {
        let client = Client::new(self.conn, 0)?;
        let query = ListQuery {
            namespace: Some(self.namespace.namespace),
            prefix: Some(self.prefix).filter(|p| !p.is_empty()),
        };
        let answer = client.get(Route::List, &query.path())?;
        let namespace = query.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        let list: ListReply = client.expect(namespace, &answer, Status::Found)?;
        let prefix = query.prefix.as_deref().unwrap_or("");
        client.text(|| table(&list.locks, namespace, prefix));
        Ok(0)
    }
}

//! `lockd token new`: a new random token and the `[[auth.tokens]]` entry
//! of lockd.toml that admits it ([`lockd_server::config::NewToken`]).

use clap::{Args, Subcommand};
use lockd_server::config::NewToken;

/// Tokens of the REST API (lockd.toml's [[auth.tokens]]).
#[derive(Args, Debug)]
pub struct TokenCommand {
    #[command(subcommand)]
    action: TokenAction,
}

/// `lockd token ...`
#[derive(Subcommand, Debug)]
enum TokenAction {
    /// Print a new random token and the [[auth.tokens]] block that admits it.
    ///
    /// The token (256 bits, 64 hex digits) is on the first line, then the
    /// [[auth.tokens]] block to paste into lockd.toml (it holds the token's
    /// SHA-256, never the token).
    New {
        /// The token's name, as logs and refusals show it; unique in
        /// lockd.toml.
        #[arg(long)]
        name: String,
        /// The namespaces it may use, comma-separated: exact names,
        /// prefixes ending in *, or * for every namespace.
        #[arg(long, value_delimiter = ',', required = true)]
        namespaces: Vec<String>,
        /// reader (get, list, events), locker (also lock, unlock, extend,
        /// leases, exec) or admin (also force-unlock, snapshot save).
        #[arg(long)]
        role: String,
    },
}

impl TokenCommand {
    /// Exits 0 with the token and the block on stdout, or 2 with one line
    /// on stderr naming what is wrong.
    pub fn execute(self) -> i32 {
        let TokenAction::New {
            name,
            namespaces,
            role,
        } = self.action;
        let made = NewToken::generate(&name, namespaces, &role)
            .and_then(|made| Ok((made.toml_block()?, made)));
        match made {
            Ok((block, made)) => {
                println!("{}", made.token);
                println!(
                    "# Give the token above to its client (LOCKD_AUTH_TOKEN); \
                     paste this into lockd.toml and restart the server:"
                );
                print!("{block}");
                0
            }
            Err(e) => {
                eprintln!("lockd token new: {e:#}");
                2
            }
        }
    }
}

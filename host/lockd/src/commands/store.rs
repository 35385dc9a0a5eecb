//! `lockd store check`: checks a stopped redb store, offline, without
//! changing it ([`lockd_redb::check()`]).

use clap::{Args, Subcommand};

use crate::cli::failure::{exit_code, fail, Failure};
use crate::cli::flags::{redb_path, StoreArgs};

/// Check a stopped lock store, offline.
#[derive(Args, Debug)]
pub struct StoreCommand {
    #[command(subcommand)]
    action: StoreAction,
}

/// `lockd store ...`
#[derive(Subcommand, Debug)]
enum StoreAction {
    /// Check a stopped redb store without changing it (exit 1 if damaged).
    ///
    /// It runs what opening the store runs, on a copy in TMPDIR: redb's
    /// integrity check, the format version, every log segment of its -wal
    /// directory (read in place) and every record. It prints the report:
    /// the store's records and tokens, and one line per thing wrong, naming
    /// the damaged file.
    ///
    /// Exits 0 if the store is intact; 1 if it is damaged or is not a lockd
    /// store (a directory, an empty file, another program's file, nothing
    /// there); 2 for a usage error, such as a --store that is not
    /// redb:PATH; 3 if it could not be checked (a lockd process has it
    /// open, or TMPDIR has no room for the copy).
    Check {
        #[command(flatten)]
        store: StoreArgs,
    },
}

impl StoreCommand {
    /// Exits as the action's help says.
    pub fn execute(self) -> i32 {
        let StoreAction::Check { store } = self.action;
        exit_code(check(store), "lockd")
    }
}

/// `lockd store check`.
fn check(store: StoreArgs) -> Result<i32, Failure> {
    let path = redb_path(store, "lockd store check")?;
    let report = lockd_redb::check(&path).map_err(|e| fail(3, e.to_string()))?;
    println!("{report}");
    Ok(if report.is_intact() { 0 } else { 1 })
}

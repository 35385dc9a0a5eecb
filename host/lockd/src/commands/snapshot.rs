//! `lockd snapshot save | restore`: a snapshot of a serving redb store, saved
//! to a file through the REST API (`POST /v1/admin/snapshot`), and a store
//! built from one, offline ([`lockd_redb::snapshot`]).

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use lockd_api::{ErrorReply, Route, Status};
use lockd_redb::snapshot::{self, RestoreOptions, RestoreReport};
use serde::Serialize;

use crate::cli::client::Client;
use crate::cli::failure::{exit_code, fail, Failure};
use crate::cli::flags::{redb_path, Conn, StoreArgs};
use crate::cli::output::Format;
use crate::cli::time::{parse_duration_ms, rfc3339};

/// Save a serving store's snapshot to a file, or restore a store from one.
#[derive(Args, Debug)]
pub struct SnapshotCommand {
    #[command(subcommand)]
    action: SnapshotAction,
}

/// `lockd snapshot ...`
#[derive(Subcommand, Debug)]
enum SnapshotAction {
    /// Save a snapshot of the server's redb store to FILE (an admin's call).
    ///
    /// The server takes it without stopping lock traffic: every change it
    /// acknowledged before the call is in it. FILE is written under a
    /// temporary name beside it, checked whole (its checksum), then renamed
    /// over FILE, so FILE always holds a whole snapshot. Prints one line:
    /// the records, the highest token and the size (with --format json, a
    /// JSON object). The token must be an admin over every namespace.
    ///
    /// Exits 0 once saved; 1 if FILE cannot be written; 2 for a server
    /// whose store is not redb (memory, etcd), a usage error or 401; 3 if
    /// the server cannot be reached, is unavailable, or the snapshot
    /// arrived cut short; 4 for a token that is not an admin over every
    /// namespace (403).
    Save {
        /// Where to write the snapshot (replaced if it exists).
        file: PathBuf,
        #[command(flatten)]
        conn: Conn,
    },
    /// Build a redb store from a snapshot file, offline (no server).
    ///
    /// The target store (--store) must be empty: no file there, or a store
    /// without a record. Every record keeps its owner, token and expiry;
    /// records that expired since the snapshot are dropped when the store
    /// opens. Tokens resume above any the old store can have issued, even
    /// after the snapshot: above its ceiling at the snapshot plus the time
    /// since, plus --skew-allowance. Stop the old server first.
    ///
    /// Exits 0 with the report; 1 if the snapshot is refused (not a
    /// snapshot, damaged or cut short, of a newer format) or the target is
    /// not empty or in use, with nothing restored; 2 for a usage error,
    /// such as a --store that is not redb:PATH.
    Restore {
        /// The snapshot file.
        file: PathBuf,
        #[command(flatten)]
        store: StoreArgs,
        /// Added to the restored store's token floor, for a clock here
        /// behind the old server's: at least the worst disagreement of the
        /// two clocks.
        #[arg(long, default_value = "1h", value_parser = parse_duration_ms, value_name = "DURATION")]
        skew_allowance: u64,
    },
}

impl SnapshotCommand {
    /// Exits as each action's help says.
    pub fn execute(self) -> i32 {
        let outcome = match self.action {
            SnapshotAction::Save { file, conn } => save(&file, conn),
            SnapshotAction::Restore {
                file,
                store,
                skew_allowance,
            } => restore(&file, store, skew_allowance),
        };
        exit_code(outcome, "lockd")
    }
}

/// What `lockd snapshot save --format json` prints.
#[derive(Serialize)]
struct Saved<'a> {
    file: &'a Path,
    taken_at: String,
    locks: u64,
    shares: u64,
    leases: u64,
    highest_token: Option<u64>,
    bytes: u64,
}

/// `lockd snapshot save FILE`.
fn save(file: &Path, conn: Conn) -> Result<i32, Failure> {
    let format = conn.format;
    let client = Client::streaming(conn)?;
    let mut body = match client.post_for_bytes(Route::Snapshot)? {
        Ok(body) => body,
        // lockd's words, not the arguments': the server's store is not redb.
        Err(answer) if answer.status == Status::InvalidArgument => {
            let refusal: ErrorReply = client.reply(&answer)?;
            return Err(fail(2, refusal.message));
        }
        Err(answer) => return Err(client.refused("the snapshot", &answer)),
    };
    let (report, bytes) = write_atomically(file, &mut body, client.server())?;
    let saved = Saved {
        file,
        taken_at: rfc3339(report.taken_at_us / 1_000),
        locks: report.locks,
        shares: report.shares,
        leases: report.leases,
        highest_token: report.highest_token,
        bytes,
    };
    match format {
        Format::Text => println!(
            "saved snapshot {} of {}: {} lock records, {} shared, permit and leader holders, \
             {} leases, highest token {}, {} bytes",
            file.display(),
            saved.taken_at,
            saved.locks,
            saved.shares,
            saved.leases,
            saved
                .highest_token
                .map_or_else(|| "none".to_string(), |t| t.to_string()),
            saved.bytes
        ),
        Format::Json => println!(
            "{}",
            serde_json::to_string(&saved).map_err(|e| fail(1, e.to_string()))?
        ),
    }
    Ok(0)
}

/// Writes `body` to `file` through a temporary file beside it, which is
/// synced and checked whole before it is renamed over `file`; on any
/// failure it is removed and `file` is left as it was. The snapshot's
/// report and its size.
fn write_atomically(
    file: &Path,
    body: &mut impl Read,
    server: &str,
) -> Result<(RestoreReport, u64), Failure> {
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = file
        .file_name()
        .ok_or_else(|| fail(2, format!("{} is not a file name", file.display())))?;
    let temporary = dir.join(format!(
        ".{}.{}.part",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = receive(&temporary, body, server).and_then(|bytes| {
        let report = snapshot::verify(&temporary).map_err(|e| {
            fail(
                3,
                format!(
                    "the snapshot from the server at {server} is not whole ({e}); {} was not \
                     written",
                    file.display()
                ),
            )
        })?;
        let cannot = |e: std::io::Error| fail(1, format!("cannot write {}: {e}", file.display()));
        std::fs::rename(&temporary, file).map_err(cannot)?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(cannot)?;
        Ok((report, bytes))
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// Copies `body` into a new file at `temporary` and syncs it; the bytes
/// written.
fn receive(temporary: &Path, body: &mut impl Read, server: &str) -> Result<u64, Failure> {
    let cannot = |e: std::io::Error| fail(1, format!("cannot write {}: {e}", temporary.display()));
    let mut out = BufWriter::with_capacity(1 << 20, File::create(temporary).map_err(cannot)?);
    let mut buffer = vec![0; 1 << 16];
    let mut bytes = 0u64;
    loop {
        let n = body.read(&mut buffer).map_err(|e| {
            fail(
                3,
                format!(
                    "the snapshot from the server at {server} broke off after {bytes} bytes ({e})"
                ),
            )
        })?;
        if n == 0 {
            break;
        }
        out.write_all(&buffer[..n]).map_err(cannot)?;
        bytes += n as u64;
    }
    let file = out.into_inner().map_err(|e| cannot(e.into_error()))?;
    file.sync_all().map_err(cannot)?;
    Ok(bytes)
}

/// `lockd snapshot restore FILE --store redb:PATH`.
fn restore(file: &Path, store: StoreArgs, skew_allowance_ms: u64) -> Result<i32, Failure> {
    let target = redb_path(store, "lockd snapshot restore")?;
    let options =
        RestoreOptions::default().with_skew_allowance(Duration::from_millis(skew_allowance_ms));
    let report = snapshot::restore(file, &target, options).map_err(|e| fail(1, e.to_string()))?;
    println!("{report}");
    Ok(0)
}

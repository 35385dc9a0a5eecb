//! What the client commands print on stdout: the format flag, the table of
//! `lockd ls` and the lines of a name's holders (`lockd get`, `lockd sem
//! get`). (Failures go to stderr through [`super::failure`].)

use std::fmt::Write as _;

use clap::ValueEnum;
use lockd_api::{HeldMode, Holding, ListedLock};

use super::time::{elapsed, remaining, rfc3339};

/// Output format of the client commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Human-readable lines.
    Text,
    /// The server's JSON response body.
    Json,
}

/// `lockd ls`'s table: one row per lock under a header, columns padded to
/// their widest cell; or one line saying that nothing is held.
pub fn table(locks: &[ListedLock], namespace: &str, prefix: &str) -> String {
    if locks.is_empty() {
        return if prefix.is_empty() {
            format!("no locks held in namespace {namespace:?}")
        } else {
            format!("no locks named {prefix:?}... held in namespace {namespace:?}")
        };
    }
    let mut rows = vec![[
        "NAME".to_string(),
        "OWNER".to_string(),
        "TOKEN".to_string(),
        "MODE".to_string(),
        "HELD".to_string(),
        "EXPIRES".to_string(),
        "WAITERS".to_string(),
        "DURABILITY".to_string(),
    ]];
    for lock in locks {
        rows.push([
            lock.name.clone(),
            lock.owner.clone(),
            lock.fencing_token.to_string(),
            mode_cell(lock),
            lock.acquired_at_ms.map_or_else(|| "-".to_string(), elapsed),
            format!("in {}", remaining(lock.expires_at_ms)),
            lock.waiters.to_string(),
            lock.durability.to_string(),
        ]);
    }
    let mut widths = [0; 8];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.pop();
    out
}

/// The MODE cell of a listed lock, one word so that the columns split on
/// spaces: `exclusive`, `shared(3)` (its holders), `permit(2/5)` (permits
/// held of the semaphore's), `leader` (an election's).
fn mode_cell(lock: &ListedLock) -> String {
    let holders = lock.holders.len().max(1);
    match (lock.mode, lock.permits) {
        (HeldMode::Exclusive | HeldMode::Leader, _) => lock.mode.to_string(),
        (HeldMode::Permit, Some(permits)) => format!("permit({holders}/{permits})"),
        _ => format!("{}({holders})", lock.mode),
    }
}

/// One holder, as `lockd get` and `lockd sem get` show it:
/// `w1 token 7 expires in 9.9s (persistent)`.
pub fn holder_line(holder: &Holding) -> String {
    format!(
        "{} token {} expires in {} ({})",
        holder.owner,
        holder.fencing_token,
        remaining(holder.expires_at_ms),
        holder.durability
    )
}

/// The line of a lock-delay in force: `lock-delay until
/// 2026-11-26T08:00:00.300Z (another 0.3s)`.
pub fn delay_line(until_ms: u64) -> String {
    format!(
        "lock-delay until {} (another {})",
        rfc3339(until_ms),
        remaining(until_ms)
    )
}

#[cfg(test)]
mod tests {
    use lockd_api::{decode, ListReply, Route};

    use super::*;

    #[test]
    fn tables_align() {
        let locks: ListReply = decode(
            Route::List,
            br#"{"status": "found", "locks": [
                {"name": "a", "owner": "worker-1", "fencing_token": 7, "expires_at_ms": 0, "durability": "persistent"},
                {"name": "long-name", "owner": "w", "fencing_token": 12345, "expires_at_ms": 0, "durability": "ephemeral"}
            ]}"#,
        )
        .unwrap();
        let t = table(&locks.locks, "default", "");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].starts_with(
                "NAME       OWNER     TOKEN  MODE       HELD  EXPIRES  WAITERS  DURABILITY"
            ),
            "{t}"
        );
        // A reply without acquired_at_ms and mode (an older server) shows "-"
        // and exclusive.
        assert!(
            lines[2].starts_with(
                "long-name  w         12345  exclusive  -     in 0.0s  0        ephemeral"
            ),
            "{t}"
        );
        assert_eq!(table(&[], "ns", ""), "no locks held in namespace \"ns\"");
    }

    #[test]
    fn the_mode_shows_holders_and_permits() {
        let locks: ListReply = decode(
            Route::List,
            br#"{"status": "found", "locks": [
                {"name": "r", "owner": "b", "fencing_token": 8, "expires_at_ms": 0, "durability": "persistent", "mode": "shared",
                 "holders": [
                    {"owner": "a", "fencing_token": 7, "expires_at_ms": 0, "durability": "persistent", "mode": "shared"},
                    {"owner": "b", "fencing_token": 8, "expires_at_ms": 0, "durability": "persistent", "mode": "shared"}]},
                {"name": "s", "owner": "c", "fencing_token": 9, "expires_at_ms": 0, "durability": "persistent", "mode": "permit", "permits": 5,
                 "holders": [{"owner": "c", "fencing_token": 9, "expires_at_ms": 0, "durability": "persistent", "mode": "permit"}]}
            ]}"#,
        )
        .unwrap();
        let t = table(&locks.locks, "default", "");
        let modes: Vec<&str> = t
            .lines()
            .map(|l| l.split_whitespace().nth(3).unwrap())
            .collect();
        assert_eq!(modes, ["MODE", "shared(2)", "permit(1/5)"], "{t}");
    }
}

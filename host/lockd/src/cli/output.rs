//! What the client commands print on stdout: the format flag, and the table
//! of `lockd ls`. (Failures go to stderr through [`super::failure`].)

use std::fmt::Write as _;

use clap::ValueEnum;
use lockd_api::ListedLock;

use super::time::{elapsed, remaining};

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
            lock.acquired_at_ms.map_or_else(|| "-".to_string(), elapsed),
            format!("in {}", remaining(lock.expires_at_ms)),
            lock.waiters.to_string(),
            lock.durability.to_string(),
        ]);
    }
    let mut widths = [0; 7];
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
            lines[0].starts_with("NAME       OWNER     TOKEN  HELD  EXPIRES  WAITERS  DURABILITY"),
            "{t}"
        );
        // A reply without acquired_at_ms (an older server) shows "-".
        assert!(
            lines[2].starts_with("long-name  w         12345  -     in 0.0s  0        ephemeral"),
            "{t}"
        );
        assert_eq!(table(&[], "ns", ""), "no locks held in namespace \"ns\"");
    }
}

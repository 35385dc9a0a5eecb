//! Recovery of the `shares` table: the holders of names held shared and of
//! semaphores, by the rule the engine applies to lock records
//! (`Engine::resume`): an expiry on disk is a wall-clock time, read once
//! through [`Clock::monotonic_of_wall_ms`] and compared with the clock's
//! monotonic now; a holder that is a live lease of its namespace lives as
//! long as the lease (a refresh writes only the lease's record). A record
//! that expired while the store was closed is deleted rather than
//! recovered.

use std::collections::HashSet;

use lockd_core::{Clock, Journal, JournalOp, Key, Recovered};
use redb::{Database, ReadableDatabase, ReadableTable};

use crate::codec;

/// Fills `recovered.shares` with the share records live at `clock`'s now,
/// and submits the deletes of the others to `journal`. `recovered.leases`
/// must be read already. Tokens resume above every share record's, expired
/// ones included: a token anyone saw is never issued again
/// (docs/contract.md#c9-fencing-tokens).
pub(crate) fn recover(
    db: &Database,
    recovered: &mut Recovered,
    clock: &dyn Clock,
    journal: &dyn Journal,
) -> Result<(), String> {
    let now = clock.now_ms();
    let live_leases: HashSet<&Key> = recovered
        .leases
        .iter()
        .filter(|(_, lease)| clock.monotonic_of_wall_ms(lease.expires_at_ms) > now)
        .map(|(lease, _)| lease)
        .collect();
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    let table = txn.open_table(codec::SHARES).map_err(|e| e.to_string())?;
    let mut shares = Vec::new();
    let mut highest = None;
    for row in table.iter().map_err(|e| e.to_string())? {
        let (k, v) = row.map_err(|e| e.to_string())?;
        let (key, owner) = codec::decode_share_key(k.value()).ok_or("a share key is malformed")?;
        let record = codec::decode_share(v.value(), &owner).map_err(|why| {
            format!("the share record of {owner:?} on {key:?} is malformed: {why}")
        })?;
        highest = highest.max(Some(record.token));
        let under_live_lease =
            live_leases.contains(&Key::new(key.namespace.clone(), owner.as_str()));
        if !under_live_lease && clock.monotonic_of_wall_ms(record.expires_at_ms) <= now {
            drop(journal.submit(JournalOp::DeleteShare(key, owner)));
            continue;
        }
        shares.push((key, record));
    }
    if let Some(highest) = highest {
        recovered.next_token = recovered.next_token.max(highest.saturating_add(1));
    }
    recovered.shares = shares;
    Ok(())
}

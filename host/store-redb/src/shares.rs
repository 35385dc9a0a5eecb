//! Recovery of the `shares` table: the holders of names held shared and of
//! semaphores, by the engine's rule for recovered records
//! (`Engine::resume`): an expiry on disk is a wall-clock time, read once
//! through [`Clock::monotonic_of_wall_ms`] and compared with the clock's
//! monotonic now. A record that expired while the store was closed is
//! deleted rather than recovered.

use lockd_core::{Clock, Journal, JournalOp, Recovered};
use redb::{Database, ReadableDatabase, ReadableTable};

use crate::codec;

/// Fills `recovered.shares` with the share records live at `clock`'s now,
/// and submits the deletes of the others to `journal`. Tokens resume above
/// every share record's, expired ones included: a token anyone saw is
/// never issued again (docs/contract.md#c9-fencing-tokens).
pub(crate) fn recover(
    db: &Database,
    recovered: &mut Recovered,
    clock: &dyn Clock,
    journal: &dyn Journal,
) -> Result<(), String> {
    let now = clock.now_ms();
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
        if clock.monotonic_of_wall_ms(record.expires_at_ms) <= now {
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

//! Recovery of the `shares` table: the holders of names held shared and of
//! semaphores, by the engine's rule for recovered records
//! (`Engine::resume`): an expiry on disk is a wall-clock time, read once
//! through [`Clock::monotonic_of_wall_ms`] and compared with the clock's
//! monotonic now. A record that expired while the store was closed is
//! deleted rather than recovered.

use lockd_core::{Clock, Journal, JournalOp, Recovered};
use redb::{Database, ReadableDatabase, ReadableTable};

use crate::codec;
use crate::recovery::{decode_share_row, Bad};

/// Fills `recovered.shares` with the share records live at `clock`'s now,
/// and submits the deletes of the others to `journal`. Tokens resume above
/// every share record's, expired ones included: a token anyone saw is
/// never issued again (docs/contract.md#c9-fencing-tokens).
pub(crate) fn recover(
    db: &Database,
    recovered: &mut Recovered,
    clock: &dyn Clock,
    journal: &dyn Journal,
) -> Result<(), Bad> {
    let now = clock.now_ms();
    let txn = db.begin_read()?;
    let table = txn.open_table(codec::SHARES)?;
    let mut shares = Vec::new();
    let mut highest = None;
    for row in table.iter()? {
        let (k, v) = row?;
        let (key, record) = decode_share_row(k.value(), v.value())?;
        highest = highest.max(Some(record.token));
        if clock.monotonic_of_wall_ms(record.expires_at_ms) <= now {
            drop(journal.submit(JournalOp::DeleteShare(key, record.owner)));
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

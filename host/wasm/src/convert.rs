//! Conversions between the core's types and the `lockd:lock@0.1.0` WIT
//! types: the one place where core errors become this version's WIT errors
//! (the shared functions are `crate::conversions`'s).

use lockd_core::{Leader, LockOptions};

use crate::wit::{elections, guards, locks, rwlocks, types};

crate::conversions::wit_conversions!(pub(crate));

pub(crate) fn leader_to_wit(leader: Leader) -> elections::LeaderInfo {
    elections::LeaderInfo {
        candidate: leader.info.owner,
        value: leader.value,
        fencing_token: leader.info.fencing_token,
        since_ms: leader.since_ms,
        expires_at_ms: leader.info.expires_at_ms,
        durability: durability_to_wit(leader.info.durability),
    }
}

/// The options of `campaign`: the lock's options and whether to keep the
/// leadership alive.
pub(crate) fn campaign_options_from_wit(
    options: elections::CampaignOptions,
) -> (LockOptions, bool) {
    let lock_options = LockOptions {
        wait_ms: u64::from(options.wait_ms),
        durability: durability_from_wit(options.durability),
        ..LockOptions::default()
    };
    (lock_options, options.keep_alive)
}

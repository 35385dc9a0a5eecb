//! The grants this backend wrote, remembered so that their owner's unlock
//! can be one conditional delete.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::record::Held;

/// At most this many remembered grants; past it, expired ones are dropped,
/// and if that is not enough, all (they are only a shortcut).
const MAX_RECENT: usize = 65_536;

/// Grants this backend made and may release in one round trip, by lock key.
#[derive(Debug, Default)]
pub(crate) struct RecentGrants {
    grants: Mutex<HashMap<Vec<u8>, RecentGrant>>,
}

/// A grant this backend wrote, as written: while the lock key's
/// `mod_revision` is still `mod_revision`, the key holds exactly this
/// holder, so its owner's unlock can be one conditional delete.
#[derive(Debug)]
struct RecentGrant {
    owner: String,
    token: u64,
    mod_revision: i64,
    expires_at_ms: u64,
}

impl RecentGrants {
    /// Remembers a grant this backend just wrote at `lock_key`; `now_ms`
    /// tells which remembered grants have expired, should room be needed.
    pub(crate) fn remember(&self, lock_key: &[u8], h: &Held, now_ms: impl FnOnce() -> u64) {
        let mut recent = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.len() >= MAX_RECENT {
            let now = now_ms();
            recent.retain(|_, g| g.expires_at_ms > now);
            if recent.len() >= MAX_RECENT {
                recent.clear();
            }
        }
        recent.insert(
            lock_key.to_vec(),
            RecentGrant {
                owner: h.rec.owner.clone(),
                token: h.token,
                mod_revision: h.mod_revision,
                expires_at_ms: h.rec.expires_at_ms,
            },
        );
    }

    /// If the grant remembered at `lock_key` is `owner`'s (with `token`, if
    /// given) and live at `now_ms`, forgets it and returns the
    /// `mod_revision` it was written at.
    pub(crate) fn take(
        &self,
        lock_key: &[u8],
        owner: &str,
        token: Option<u64>,
        now_ms: u64,
    ) -> Option<i64> {
        let mut recent = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        match recent.get(lock_key) {
            Some(g)
                if g.owner == owner
                    && token.is_none_or(|t| t == g.token)
                    && g.expires_at_ms > now_ms =>
            {
                let m = g.mod_revision;
                recent.remove(lock_key);
                Some(m)
            }
            _ => None,
        }
    }
}

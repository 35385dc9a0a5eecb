//! The oldest revisions this backend's watches and reads still need, so
//! that its compactor never compacts them away (see `space.rs`).
//!
//! A watch opened from revision `r` needs etcd to keep every revision from
//! `r` on until etcd has caught the watch up: compacting past `r` first
//! makes etcd cancel it ("required revision has been compacted"). Once a
//! watch is caught up, compaction no longer touches it. So each place that
//! watches or reads from a revision holds a [`Floor`] at the first revision
//! it needs, for as long as it may still ask etcd for it:
//!
//! - the events watch (`store/observe.rs`) for the backend's life, moved
//!   on as it sees revisions: after a failure it resumes from there;
//! - a waiter's or a lease end's watch (`Keyspace::watch_any`), from the
//!   revision after the read it follows, until etcd confirmed every key's
//!   watch (then the watch is registered and compaction cannot touch it;
//!   the read itself is a moment old, far inside the compactor's window);
//! - a `list`, whose queue and session reads are made at the revision of
//!   its first read.
//!
//! Other hosts' floors are not known here: their safety comes from the
//! compactor's retention window (`space.rs`).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// The floors held now, by holder.
#[derive(Debug, Default)]
pub(crate) struct Floors {
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    next_id: u64,
    /// The first revision each holder still needs.
    revisions: HashMap<u64, i64>,
}

impl Floors {
    /// Holds `revision` (the first one the caller needs) until the floor is
    /// dropped or moved on.
    pub(crate) fn hold(&self, revision: i64) -> Floor<'_> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let id = held.next_id;
        held.next_id += 1;
        held.revisions.insert(id, revision);
        Floor { floors: self, id }
    }

    /// The oldest revision some holder still needs, if any.
    pub(crate) fn oldest(&self) -> Option<i64> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.revisions.values().copied().min()
    }

    fn set(&self, id: u64, revision: i64) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = held.revisions.get_mut(&id) {
            *r = revision;
        }
    }

    fn release(&self, id: u64) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.revisions.remove(&id);
    }
}

/// One holder's floor: released when dropped.
#[derive(Debug)]
pub(crate) struct Floor<'a> {
    floors: &'a Floors,
    id: u64,
}

impl Floor<'_> {
    /// The holder now needs revisions from `revision` on only (or, if
    /// lower, from `revision` again: after a fresh read, say).
    pub(crate) fn set(&self, revision: i64) {
        self.floors.set(self.id, revision);
    }
}

impl Drop for Floor<'_> {
    fn drop(&mut self) {
        self.floors.release(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_floor_held_is_the_one_kept() {
        let floors = Floors::default();
        assert_eq!(floors.oldest(), None);
        let a = floors.hold(50);
        {
            let b = floors.hold(20);
            assert_eq!(floors.oldest(), Some(20));
            b.set(70);
            assert_eq!(floors.oldest(), Some(50));
            b.set(10);
            assert_eq!(floors.oldest(), Some(10));
        }
        assert_eq!(floors.oldest(), Some(50));
        a.set(90);
        assert_eq!(floors.oldest(), Some(90));
        drop(a);
        assert_eq!(floors.oldest(), None);
    }
}

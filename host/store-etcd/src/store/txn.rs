//! The pieces of a guarded transaction that every part of the store
//! shares: the compares that hold while what was read is unchanged, and
//! the edits one transaction makes to the lease records it touches.
//!
//! Every write of the store is one etcd transaction guarded by a compare on
//! what was read, so a decision made on stale data is never applied. A
//! transaction that changes which locks a lockd lease holds also rewrites
//! that lease's record, guarded by the lease key's revision
//! ([`LeaseEdits`]).

use std::collections::BTreeMap;

use etcd_client::{Compare, CompareOp, PutOptions, TxnOp};
use lockd_core::LockError;

use crate::name::Name;
use crate::record::{to_json, LeaseRecord, Leased, Queued};
use crate::rpc::Etcd;

/// The compare that holds while the lock key is as read: absent, or at the
/// revision read.
pub(super) fn unchanged(lock_key: &[u8], current: Option<&Name>) -> Compare {
    unchanged_at(lock_key, current.map(|n| n.mod_revision))
}

/// The compare that holds while the lock key is absent (`None`) or at the
/// revision `mod_revision`.
pub(super) fn unchanged_at(lock_key: &[u8], mod_revision: Option<i64>) -> Compare {
    match mod_revision {
        None => Compare::version(lock_key.to_vec(), CompareOp::Equal, 0),
        Some(r) => Compare::mod_revision(lock_key.to_vec(), CompareOp::Equal, r),
    }
}

/// The compare that holds while nobody is queued for the lock.
pub(super) fn nobody_queued(queue: &[u8]) -> Compare {
    Compare::version(queue.to_vec(), CompareOp::Equal, 0).with_prefix()
}

/// The compare that holds while the waiter key `w` is as read.
pub(super) fn waiter_unchanged(w: &Queued) -> Compare {
    Compare::mod_revision(w.key.clone(), CompareOp::Equal, w.mod_revision)
}

/// The lease record at `lease_key`, if any.
pub(super) async fn read_lease(etcd: &Etcd, lease_key: &[u8]) -> Result<Option<Leased>, LockError> {
    let resp = etcd.range("lease read", lease_key.to_vec(), None).await?;
    resp.kvs().first().map(Leased::from_kv).transpose()
}

/// What one transaction does to the lease records it touches, by lease
/// key: each is read the first time the transaction needs it, compared
/// with the revision read, and written back if it changed.
pub(super) struct LeaseEdits<'a> {
    etcd: &'a Etcd,
    edits: BTreeMap<Vec<u8>, Edit>,
}

struct Edit {
    /// The key's `mod_revision` as read; `None`: absent.
    read: Option<i64>,
    /// The record as the transaction leaves it; `None`: absent or deleted.
    rec: Option<LeaseRecord>,
    changed: bool,
}

impl<'a> LeaseEdits<'a> {
    /// No edits yet; the records are read from `etcd`.
    pub(super) fn new(etcd: &'a Etcd) -> Self {
        LeaseEdits {
            etcd,
            edits: BTreeMap::new(),
        }
    }

    /// The lease at `lease_key`, as read the first time this transaction
    /// needed it, with the edits made since.
    async fn load(&mut self, lease_key: Vec<u8>) -> Result<&mut Edit, LockError> {
        if !self.edits.contains_key(&lease_key) {
            let read = read_lease(self.etcd, &lease_key).await?;
            let edit = Edit {
                read: read.as_ref().map(|l| l.mod_revision),
                rec: read.map(|l| l.rec),
                changed: false,
            };
            self.edits.insert(lease_key.clone(), edit);
        }
        Ok(self
            .edits
            .get_mut(&lease_key)
            .expect("inserted just above if absent"))
    }

    /// Takes the lock `name` out of the list of the lease at `lease_key`.
    pub(super) async fn remove_lock(
        &mut self,
        lease_key: Vec<u8>,
        name: &str,
    ) -> Result<(), LockError> {
        let edit = self.load(lease_key).await?;
        if let Some(rec) = edit.rec.as_mut() {
            if rec.remove(name) {
                edit.changed = true;
            }
        }
        Ok(())
    }

    /// Adds the lock `name` to the list of the lease at `lease_key` and
    /// answers the lease as the transaction leaves it; `None` (and no
    /// edit) if the lease is not live at `now` or already holds `max`
    /// other locks.
    pub(super) async fn add_lock(
        &mut self,
        lease_key: Vec<u8>,
        name: &str,
        now: u64,
        max: usize,
    ) -> Result<Option<&LeaseRecord>, LockError> {
        let edit = self.load(lease_key).await?;
        let Some(l) = edit
            .rec
            .as_mut()
            .filter(|l| l.live(now) && l.has_room_for(name, max))
        else {
            return Ok(None);
        };
        l.add(name);
        edit.changed = true;
        Ok(Some(l))
    }

    /// Deletes the lease `l`, read at `lease_key`.
    pub(super) fn delete(&mut self, lease_key: Vec<u8>, l: &Leased) {
        self.edits.insert(
            lease_key,
            Edit {
                read: Some(l.mod_revision),
                rec: None,
                changed: true,
            },
        );
    }

    /// Adds the compares (every lease key as read) and the writes (every
    /// lease record changed) to a transaction.
    pub(super) fn apply(self, when: &mut Vec<Compare>, ops: &mut Vec<TxnOp>) {
        for (key, edit) in self.edits {
            when.push(match edit.read {
                None => Compare::version(key.clone(), CompareOp::Equal, 0),
                Some(r) => Compare::mod_revision(key.clone(), CompareOp::Equal, r),
            });
            if !edit.changed {
                continue;
            }
            match edit.rec {
                // The record keeps the etcd lease its key has.
                Some(rec) => ops.push(TxnOp::put(
                    key,
                    to_json(&rec),
                    Some(PutOptions::new().with_ignore_lease()),
                )),
                None if edit.read.is_some() => ops.push(TxnOp::delete(key, None)),
                None => {}
            }
        }
    }
}

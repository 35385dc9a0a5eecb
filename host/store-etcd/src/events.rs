//! Events from etcd: every change to a lock or lease key, as one etcd watch
//! per backend reports it (with each key's previous value), becomes the
//! [`LockEvent`]s of docs/reference.md#events. Since the watch sees the writes
//! of every host, each host's stream shows every host's changes.
//!
//! A put or delete of a lock key is compared with the key's previous
//! record:
//!
//! - a new holder (no holder before, or another grant) is `acquired`, or
//!   `handed_off` when its record names the waiter it was handed to;
//! - the same owner and token with another expiry is `extended`;
//! - a holder that is gone or replaced left by `released`, `expired` or
//!   `force_released`: the transaction that removed it says which by
//!   writing the marker key (`<prefix>/.why`) in the same revision. A
//!   removal without a marker (a one-step unlock, or etcd ending the key's
//!   lease) is `expired` if the record's expiry has passed when the event
//!   arrives, else `released`.
//!
//! A lease key created is `lease_granted`; deleted, `lease_expired` (marked
//! so, or past its expiry) or `lease_revoked`.

use lockd_core::Claim;
use std::sync::Arc;

use etcd_client::TxnOp;
use lockd_core::{EventKind, Key, LockEvent};

use crate::keys::Layout;
use crate::record::{Held, LeaseRecord};

/// Why a transaction removed a holder, as its marker says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// Its holder (or its lease's revoke) released it.
    Released,
    /// Its expiry had passed.
    Expired,
    /// An operator's force-unlock.
    Forced,
}

impl Why {
    fn word(self) -> &'static str {
        match self {
            Why::Released => "released",
            Why::Expired => "expired",
            Why::Forced => "force_released",
        }
    }

    /// The reason a marker value names.
    pub(crate) fn from_marker(value: &[u8]) -> Option<Why> {
        [Why::Released, Why::Expired, Why::Forced]
            .into_iter()
            .find(|w| w.word().as_bytes() == value)
    }

    fn kind(self) -> EventKind {
        match self {
            Why::Released => EventKind::Released,
            Why::Expired => EventKind::Expired,
            Why::Forced => EventKind::ForceReleased,
        }
    }

    /// The write that marks a transaction's removals with this reason. The
    /// marker is one key, on no etcd lease.
    pub(crate) fn marker(self, layout: &Layout) -> TxnOp {
        TxnOp::put(layout.marker_key(), self.word(), None)
    }
}

#[allow(clippy::too_many_arguments)]
fn event(
    kind: EventKind,
    key: &Key,
    owner: &str,
    token: u64,
    now: u64,
    acquired_at_ms: Option<u64>,
    claim: Claim,
) -> LockEvent {
    LockEvent {
        claim,
        kind,
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        owner: Arc::from(owner),
        fencing_token: token,
        at_ms: now,
        acquired_at_ms,
    }
}

/// How the grant `p`, not ended before, left: removed from the record
/// (`ended_at` `None`) or kept there as a delay ended at `ended_at`, by a
/// transaction marked `why`, seen at `now`. `alone`: `p` was the name's
/// only grant, so the marker speaks of it whatever the clock says.
fn end_kind(p: &Held, ended_at: Option<u64>, why: Option<Why>, now: u64, alone: bool) -> EventKind {
    if let Some(at) = ended_at {
        // Kept as a delay: it ended at its expiry, or before (forced).
        return match why {
            _ if at >= p.rec.expires_at_ms => EventKind::Expired,
            Some(Why::Expired) => EventKind::Expired,
            _ => EventKind::ForceReleased,
        };
    }
    match why {
        Some(why) if alone || p.rec.expires_at_ms > now => why.kind(),
        _ if p.rec.expires_at_ms <= now => EventKind::Expired,
        _ => EventKind::Released,
    }
}

/// The events of one change to the lock `key`: its grants before (`prev`)
/// and after (`new`, empty for a delete), in a revision marked `why`, seen
/// at `now`. Grants are told apart by token. In order: the grants that
/// left, those extended, then those that came.
pub(crate) fn lock_events(
    key: &Key,
    prev: &[Held],
    new: &[Held],
    why: Option<Why>,
    now: u64,
) -> Vec<LockEvent> {
    let ev = |kind, g: &Held, acquired_at_ms| {
        event(
            kind,
            key,
            &g.rec.owner,
            g.token,
            now,
            acquired_at_ms,
            g.rec.claim(),
        )
    };
    let alone = prev.len() == 1;
    let mut ended = Vec::new();
    let mut extended = Vec::new();
    for p in prev.iter().filter(|p| p.rec.ended_at_ms.is_none()) {
        match new.iter().find(|n| n.token == p.token) {
            None => ended.push(ev(
                end_kind(p, None, why, now, alone),
                p,
                p.rec.acquired_at_ms,
            )),
            Some(n) if n.rec.ended_at_ms.is_some() => ended.push(ev(
                end_kind(p, n.rec.ended_at_ms, why, now, alone),
                p,
                p.rec.acquired_at_ms,
            )),
            Some(n) => {
                if n.rec.expires_at_ms != p.rec.expires_at_ms {
                    extended.push(ev(EventKind::Extended, n, None));
                }
                if n.rec.value != p.rec.value {
                    extended.push(ev(EventKind::Proclaimed, n, None));
                }
            }
        }
    }
    let came = new
        .iter()
        .filter(|n| !prev.iter().any(|p| p.token == n.token))
        .map(|n| {
            let kind = if n.rec.waiter.is_some() {
                EventKind::HandedOff
            } else {
                EventKind::Acquired
            };
            ev(kind, n, None)
        });
    ended.into_iter().chain(extended).chain(came).collect()
}

/// The event of one change to the lease `lease` (its namespace and id).
pub(crate) fn lease_event(
    lease: &Key,
    prev: Option<&LeaseRecord>,
    new: Option<&LeaseRecord>,
    why: Option<Why>,
    now: u64,
) -> Option<LockEvent> {
    let kind = match (prev, new) {
        (None, Some(_)) => EventKind::LeaseGranted,
        (Some(p), None) => match why {
            Some(Why::Expired) => EventKind::LeaseExpired,
            Some(_) => EventKind::LeaseRevoked,
            None if p.expires_at_ms <= now => EventKind::LeaseExpired,
            None => EventKind::LeaseRevoked,
        },
        // A refresh, or a change to the locks it lists.
        _ => return None,
    };
    Some(event(
        kind,
        lease,
        &lease.name,
        0,
        now,
        None,
        Claim::Exclusive,
    ))
}

#[cfg(test)]
mod tests {
    use lockd_core::Durability;

    use super::*;
    use crate::record::LockRecord;

    fn held(owner: &str, token: u64, expires: u64, waiter: Option<&str>) -> Held {
        let rec = LockRecord::fresh(
            owner,
            5,
            expires,
            Durability::Persistent,
            waiter.map(str::to_string),
        );
        Held {
            mod_revision: token as i64,
            rec,
            token,
        }
    }

    fn kinds(events: &[LockEvent]) -> Vec<(EventKind, &str, u64)> {
        events
            .iter()
            .map(|e| (e.kind, &*e.owner, e.fencing_token))
            .collect()
    }

    #[test]
    fn lock_changes_become_events_in_order() {
        let key = Key::new("ns", "x");
        let a = held("a", 10, 100, None);
        let now = 50;
        let acquired = lock_events(&key, &[], std::slice::from_ref(&a), None, now);
        assert_eq!(kinds(&acquired), [(EventKind::Acquired, "a", 10)]);
        assert_eq!(
            (
                &*acquired[0].namespace,
                &*acquired[0].name,
                acquired[0].at_ms
            ),
            ("ns", "x", 50)
        );
        let mut moved = a.clone();
        moved.rec.expires_at_ms = 200;
        moved.mod_revision = 11;
        assert_eq!(
            kinds(&lock_events(
                &key,
                std::slice::from_ref(&a),
                std::slice::from_ref(&moved),
                None,
                now
            )),
            [(EventKind::Extended, "a", 10)]
        );
        assert!(lock_events(
            &key,
            std::slice::from_ref(&a),
            std::slice::from_ref(&a),
            None,
            now
        )
        .is_empty());
        let b = held("b", 12, 300, Some("w-1"));
        let handed = lock_events(
            &key,
            std::slice::from_ref(&a),
            std::slice::from_ref(&b),
            Some(Why::Released),
            now,
        );
        assert_eq!(
            kinds(&handed),
            [
                (EventKind::Released, "a", 10),
                (EventKind::HandedOff, "b", 12)
            ]
        );
        assert_eq!(handed[0].acquired_at_ms, Some(5));
        assert_eq!(handed[1].acquired_at_ms, None);
        // Unmarked: released while live, expired once past the expiry.
        assert_eq!(
            kinds(&lock_events(&key, std::slice::from_ref(&a), &[], None, 99)),
            [(EventKind::Released, "a", 10)]
        );
        assert_eq!(
            kinds(&lock_events(&key, std::slice::from_ref(&a), &[], None, 100)),
            [(EventKind::Expired, "a", 10)]
        );
        // A marker decides, whatever the clock says.
        assert_eq!(
            kinds(&lock_events(
                &key,
                std::slice::from_ref(&a),
                &[],
                Some(Why::Expired),
                0
            )),
            [(EventKind::Expired, "a", 10)]
        );
        assert_eq!(
            kinds(&lock_events(
                &key,
                std::slice::from_ref(&a),
                &[],
                Some(Why::Forced),
                0
            )),
            [(EventKind::ForceReleased, "a", 10)]
        );
        // A fresh grant over an expired record: both.
        let c = held("a", 20, 400, None);
        assert_eq!(
            kinds(&lock_events(
                &key,
                std::slice::from_ref(&a),
                std::slice::from_ref(&c),
                None,
                150
            )),
            [
                (EventKind::Expired, "a", 10),
                (EventKind::Acquired, "a", 20)
            ]
        );
    }

    #[test]
    fn each_grant_of_a_shared_name_is_told_apart_by_token() {
        let key = Key::new("ns", "x");
        let mut r1 = held("r1", 10, 100, None);
        r1.rec.claim = Some(crate::record::StoredClaim::Shared);
        let mut r2 = held("r2", 12, 100, Some("w-1"));
        r2.rec.claim = Some(crate::record::StoredClaim::Shared);
        let both = [r1.clone(), r2.clone()];
        // One more reader: only its grant is news.
        let came = lock_events(&key, std::slice::from_ref(&r1), &both, None, 50);
        assert_eq!(kinds(&came), [(EventKind::HandedOff, "r2", 12)]);
        assert_eq!(came[0].claim, Claim::Shared);
        // A force-unlock of both: one event each.
        let forced = lock_events(&key, &both, &[], Some(Why::Forced), 50);
        assert_eq!(
            kinds(&forced),
            [
                (EventKind::ForceReleased, "r1", 10),
                (EventKind::ForceReleased, "r2", 12)
            ]
        );
        // A release of r2 marked released, r1 found expired in passing.
        let gone = lock_events(&key, &both, &[], Some(Why::Released), 100);
        assert_eq!(
            kinds(&gone),
            [
                (EventKind::Expired, "r1", 10),
                (EventKind::Expired, "r2", 12)
            ]
        );
        // Kept as a delay: ended at its expiry is expired, before it forced.
        let mut delayed = r1.clone();
        delayed.rec.ended_at_ms = Some(100);
        assert_eq!(
            kinds(&lock_events(
                &key,
                std::slice::from_ref(&r1),
                std::slice::from_ref(&delayed),
                Some(Why::Expired),
                100
            )),
            [(EventKind::Expired, "r1", 10)]
        );
        delayed.rec.ended_at_ms = Some(40);
        assert_eq!(
            kinds(&lock_events(
                &key,
                std::slice::from_ref(&r1),
                std::slice::from_ref(&delayed),
                Some(Why::Forced),
                40
            )),
            [(EventKind::ForceReleased, "r1", 10)]
        );
        // Nothing to tell once it ended.
        assert!(lock_events(&key, std::slice::from_ref(&delayed), &[], None, 200).is_empty());
        // A leader's new value.
        let mut proclaimed = r1.clone();
        proclaimed.rec.value = Some("v2".into());
        assert_eq!(
            kinds(&lock_events(
                &key,
                std::slice::from_ref(&r1),
                std::slice::from_ref(&proclaimed),
                None,
                50
            )),
            [(EventKind::Proclaimed, "r1", 10)]
        );
    }

    #[test]
    fn lease_changes_become_events() {
        let lease = Key::new("ns", "lease-1");
        let rec = LeaseRecord::new(1_000, 100, Durability::Ephemeral, None);
        let kind = |p, n, why, now| lease_event(&lease, p, n, why, now).map(|e| e.kind);
        assert_eq!(
            kind(None, Some(&rec), None, 0),
            Some(EventKind::LeaseGranted)
        );
        assert_eq!(kind(Some(&rec), Some(&rec), None, 0), None);
        assert_eq!(
            kind(Some(&rec), None, Some(Why::Released), 500),
            Some(EventKind::LeaseRevoked)
        );
        assert_eq!(
            kind(Some(&rec), None, Some(Why::Expired), 0),
            Some(EventKind::LeaseExpired)
        );
        assert_eq!(
            kind(Some(&rec), None, None, 99),
            Some(EventKind::LeaseRevoked)
        );
        assert_eq!(
            kind(Some(&rec), None, None, 100),
            Some(EventKind::LeaseExpired)
        );
        let e = lease_event(&lease, None, Some(&rec), None, 7).unwrap();
        assert_eq!(
            (&*e.name, &*e.owner, e.fencing_token, e.at_ms),
            ("lease-1", "lease-1", 0, 7)
        );
    }

    #[test]
    fn markers_round_trip() {
        for why in [Why::Released, Why::Expired, Why::Forced] {
            assert_eq!(Why::from_marker(why.word().as_bytes()), Some(why));
        }
        assert_eq!(Why::from_marker(b"nope"), None);
    }
}

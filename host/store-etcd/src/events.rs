//! Events from etcd: every change to a lock or lease key, as one etcd watch
//! per backend reports it (with each key's previous value), becomes the
//! [`LockEvent`]s of docs/http.md#events. Since the watch sees the writes
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

fn event(
    kind: EventKind,
    key: &Key,
    owner: &str,
    token: u64,
    now: u64,
    acquired_at_ms: Option<u64>,
) -> LockEvent {
    LockEvent {
        claim: Claim::Exclusive,
        kind,
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        owner: Arc::from(owner),
        fencing_token: token,
        at_ms: now,
        acquired_at_ms,
    }
}

/// The events of one change to the lock `key`: its holder before (`prev`)
/// and after (`new`, `None` for a delete), in a revision marked `why`,
/// seen at `now`. In order: the holder that left, then the one that came.
pub(crate) fn lock_events(
    key: &Key,
    prev: Option<&Held>,
    new: Option<&Held>,
    why: Option<Why>,
    now: u64,
) -> Vec<LockEvent> {
    if let (Some(p), Some(n)) = (prev, new) {
        if p.token == n.token && p.rec.owner == n.rec.owner {
            // The same grant rewritten: a refresh, or nothing to report.
            if p.rec.expires_at_ms == n.rec.expires_at_ms {
                return Vec::new();
            }
            return vec![event(
                EventKind::Extended,
                key,
                &n.rec.owner,
                n.token,
                now,
                None,
            )];
        }
    }
    let mut out = Vec::with_capacity(2);
    if let Some(p) = prev {
        let kind = match why {
            Some(why) => why.kind(),
            None if p.rec.expires_at_ms <= now => EventKind::Expired,
            None => EventKind::Released,
        };
        out.push(event(
            kind,
            key,
            &p.rec.owner,
            p.token,
            now,
            p.rec.acquired_at_ms,
        ));
    }
    if let Some(n) = new {
        let kind = if n.rec.waiter.is_some() {
            EventKind::HandedOff
        } else {
            EventKind::Acquired
        };
        out.push(event(kind, key, &n.rec.owner, n.token, now, None));
    }
    out
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
    Some(event(kind, lease, &lease.name, 0, now, None))
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
        let acquired = lock_events(&key, None, Some(&a), None, now);
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
            kinds(&lock_events(&key, Some(&a), Some(&moved), None, now)),
            [(EventKind::Extended, "a", 10)]
        );
        assert!(lock_events(&key, Some(&a), Some(&a), None, now).is_empty());
        let b = held("b", 12, 300, Some("w-1"));
        let handed = lock_events(&key, Some(&a), Some(&b), Some(Why::Released), now);
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
            kinds(&lock_events(&key, Some(&a), None, None, 99)),
            [(EventKind::Released, "a", 10)]
        );
        assert_eq!(
            kinds(&lock_events(&key, Some(&a), None, None, 100)),
            [(EventKind::Expired, "a", 10)]
        );
        // A marker decides, whatever the clock says.
        assert_eq!(
            kinds(&lock_events(&key, Some(&a), None, Some(Why::Expired), 0)),
            [(EventKind::Expired, "a", 10)]
        );
        assert_eq!(
            kinds(&lock_events(&key, Some(&a), None, Some(Why::Forced), 0)),
            [(EventKind::ForceReleased, "a", 10)]
        );
        // A fresh grant over an expired record: both.
        let c = held("a", 20, 400, None);
        assert_eq!(
            kinds(&lock_events(&key, Some(&a), Some(&c), None, 150)),
            [
                (EventKind::Expired, "a", 10),
                (EventKind::Acquired, "a", 20)
            ]
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

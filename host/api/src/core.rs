//! The server's side (feature `core`): replies and words from lockd-core's
//! types, and the tests that hold the words of both crates equal.

use lockd_core::{
    Claim, Durability, ErrorKind, EventKind, Grant, Leader, LeaseGrant, LeaseInfo, LockEvent,
    LockInfo, NameState,
};

use crate::reply::{
    BusyReply, Event, FoundReply, FreeReply, GetReply, GrantReply, Holding, LeaderReply,
    LeaseFoundReply, LeaseGrantedReply, ListReply, ListedLock, ReleasedReply,
};
use crate::request::LockClaim;
use crate::words::{DurabilityWord, EventWord, HeldMode, Status};

impl Status {
    /// The lock error this status reports, if it reports one.
    pub fn kind(self) -> Option<ErrorKind> {
        Some(match self {
            Status::Busy => ErrorKind::Busy,
            Status::NotOwner => ErrorKind::NotOwner,
            Status::NotHeld => ErrorKind::NotHeld,
            Status::InvalidArgument => ErrorKind::InvalidArgument,
            Status::Denied => ErrorKind::Denied,
            Status::Unavailable => ErrorKind::Unavailable,
            _ => return None,
        })
    }
}

impl From<ErrorKind> for Status {
    fn from(kind: ErrorKind) -> Status {
        match kind {
            ErrorKind::Busy => Status::Busy,
            ErrorKind::NotOwner => Status::NotOwner,
            ErrorKind::NotHeld => Status::NotHeld,
            ErrorKind::InvalidArgument => Status::InvalidArgument,
            ErrorKind::Denied => Status::Denied,
            ErrorKind::Unavailable => Status::Unavailable,
            // A kind added to the core later: its outcome is unknown to this
            // surface, which is what `unavailable` says.
            _ => Status::Unavailable,
        }
    }
}

impl From<DurabilityWord> for Durability {
    fn from(d: DurabilityWord) -> Self {
        match d {
            DurabilityWord::Persistent => Durability::Persistent,
            DurabilityWord::Ephemeral => Durability::Ephemeral,
        }
    }
}

impl From<Durability> for DurabilityWord {
    fn from(d: Durability) -> Self {
        match d {
            Durability::Persistent => DurabilityWord::Persistent,
            Durability::Ephemeral => DurabilityWord::Ephemeral,
        }
    }
}

impl From<EventKind> for EventWord {
    fn from(kind: EventKind) -> Self {
        match kind {
            EventKind::Acquired => EventWord::Acquired,
            EventKind::Extended => EventWord::Extended,
            EventKind::Released => EventWord::Released,
            EventKind::Expired => EventWord::Expired,
            EventKind::HandedOff => EventWord::HandedOff,
            EventKind::ForceReleased => EventWord::ForceReleased,
            EventKind::LeaseGranted => EventWord::LeaseGranted,
            EventKind::LeaseRevoked => EventWord::LeaseRevoked,
            EventKind::LeaseExpired => EventWord::LeaseExpired,
            EventKind::Proclaimed => EventWord::Proclaimed,
        }
    }
}

impl From<Claim> for HeldMode {
    fn from(claim: Claim) -> Self {
        match claim {
            Claim::Exclusive => HeldMode::Exclusive,
            Claim::Shared => HeldMode::Shared,
            Claim::Permit { .. } => HeldMode::Permit,
            Claim::Leader => HeldMode::Leader,
        }
    }
}

impl From<LockClaim> for Claim {
    fn from(claim: LockClaim) -> Self {
        match claim {
            LockClaim::Exclusive => Claim::Exclusive,
            LockClaim::Shared => Claim::Shared,
            LockClaim::Permit { permits } => Claim::Permit { permits },
        }
    }
}

impl From<&lockd_core::Holding> for Holding {
    fn from(h: &lockd_core::Holding) -> Self {
        Holding {
            acquired_at_ms: h.acquired_at_ms,
            durability: h.info.durability.into(),
            expires_at_ms: h.info.expires_at_ms,
            fencing_token: h.info.fencing_token,
            mode: h.claim.into(),
            owner: h.info.owner.clone(),
        }
    }
}

/// `get` from a name's full state: its most recent grant (the highest
/// token) and every holder, or, for a name nobody holds, the lock-delay in
/// force and who waits through it.
impl From<NameState> for GetReply {
    fn from(state: NameState) -> Self {
        let holders = state.holders.iter().map(Holding::from).collect();
        let latest = state
            .holders
            .into_iter()
            .max_by_key(|h| h.info.fencing_token);
        match latest {
            Some(latest) => GetReply::Found(FoundReply {
                durability: latest.info.durability.into(),
                expires_at_ms: latest.info.expires_at_ms,
                fencing_token: latest.info.fencing_token,
                holders,
                lock_delay_until_ms: state.delay_until_ms,
                mode: latest.claim.into(),
                owner: latest.info.owner,
                permits: latest.claim.permits(),
                status: Status::Found,
                waiters: state.waiters,
            }),
            None => GetReply::Free(FreeReply {
                lock_delay_until_ms: state.delay_until_ms,
                status: Status::NotFound,
                waiters: state.delay_until_ms.map(|_| state.waiters),
            }),
        }
    }
}

impl From<&LockEvent> for Event {
    fn from(e: &LockEvent) -> Self {
        Event {
            kind: e.kind.into(),
            namespace: e.namespace.to_string(),
            name: e.name.to_string(),
            owner: e.owner.to_string(),
            fencing_token: e.fencing_token,
            at_ms: e.at_ms,
            mode: e.claim.into(),
        }
    }
}

impl GrantReply {
    /// The answer to a granted `lock`.
    pub fn acquired(grant: Grant) -> Self {
        GrantReply::with_status(Status::Acquired, grant)
    }

    /// The answer to a granted `extend`.
    pub fn extended(grant: Grant) -> Self {
        GrantReply::with_status(Status::Extended, grant)
    }

    fn with_status(status: Status, grant: Grant) -> Self {
        GrantReply {
            expires_at_ms: grant.expires_at_ms,
            fencing_token: grant.fencing_token,
            status,
        }
    }
}

impl ListReply {
    /// The answer listing `locks`.
    pub fn new(locks: Vec<lockd_core::ListedLock>) -> Self {
        ListReply {
            locks: locks.into_iter().map(ListedLock::from).collect(),
            status: Status::Found,
        }
    }
}

/// The entry's own fields are the most recent grant's; a shared name or a
/// semaphore also lists every holder.
impl From<lockd_core::ListedLock> for ListedLock {
    fn from(lock: lockd_core::ListedLock) -> Self {
        let holders = if lock.claim == Claim::Exclusive {
            Vec::new()
        } else {
            lock.holders.iter().map(Holding::from).collect()
        };
        ListedLock {
            acquired_at_ms: lock.acquired_at_ms,
            durability: lock.info.durability.into(),
            expires_at_ms: lock.info.expires_at_ms,
            fencing_token: lock.info.fencing_token,
            holders,
            mode: lock.claim.into(),
            name: lock.name,
            owner: lock.info.owner,
            permits: lock.claim.permits(),
            waiters: lock.waiters,
        }
    }
}

impl From<LockInfo> for ReleasedReply {
    fn from(info: LockInfo) -> Self {
        ReleasedReply {
            fencing_token: info.fencing_token,
            owner: info.owner,
            status: Status::Released,
        }
    }
}

impl From<Leader> for LeaderReply {
    fn from(leader: Leader) -> Self {
        LeaderReply {
            candidate: leader.info.owner,
            durability: leader.info.durability.into(),
            expires_at_ms: leader.info.expires_at_ms,
            fencing_token: leader.info.fencing_token,
            since_ms: leader.since_ms,
            status: Status::Found,
            value: leader.value,
        }
    }
}

impl From<LeaseGrant> for LeaseGrantedReply {
    fn from(grant: LeaseGrant) -> Self {
        LeaseGrantedReply {
            expires_at_ms: grant.expires_at_ms,
            lease_id: grant.id,
            status: Status::Granted,
        }
    }
}

impl From<LeaseInfo> for LeaseFoundReply {
    fn from(info: LeaseInfo) -> Self {
        LeaseFoundReply {
            durability: info.durability.into(),
            expires_at_ms: info.expires_at_ms,
            locks: info.locks,
            status: Status::Found,
            ttl_ms: info.ttl_ms,
        }
    }
}

impl BusyReply {
    /// The answer naming `holder`.
    pub fn new(holder: &LockInfo, message: String) -> Self {
        BusyReply {
            durability: holder.durability.into(),
            expires_at_ms: holder.expires_at_ms,
            fencing_token: holder.fencing_token,
            message,
            owner: holder.owner.clone(),
            status: Status::Busy,
        }
    }
}

#[cfg(test)]
mod tests {
    use lockd_core::Claim;
    use lockd_core::LockError;

    use super::*;
    use crate::decode::decode;
    use crate::reply::ErrorReply;
    use crate::route::Route;

    #[test]
    fn the_words_are_the_cores() {
        for kind in ErrorKind::ALL {
            let status = Status::from(kind);
            assert_eq!(status.as_str(), kind.as_str());
            assert_eq!(status.kind(), Some(kind));
        }
        for status in Status::ALL {
            if let Some(kind) = status.kind() {
                assert_eq!(Status::from(kind), status);
            }
        }
        for kind in EventKind::ALL {
            assert_eq!(EventWord::from(kind).as_str(), kind.as_str());
        }
        assert_eq!(EventWord::ALL.len(), EventKind::ALL.len());
        for d in DurabilityWord::ALL {
            assert_eq!(DurabilityWord::from(Durability::from(d)), d);
        }
    }

    #[test]
    fn the_detail_is_what_the_lock_error_carried() {
        for (err, detail) in [
            (
                LockError::InvalidArgument("name too long".into()),
                "name too long",
            ),
            (LockError::Denied("quota".into()), "quota"),
            (LockError::Unavailable("disk".into()), "disk"),
        ] {
            let reply = ErrorReply {
                message: err.to_string(),
                status: err.kind().into(),
            };
            assert_eq!(reply.detail(), detail, "{err}");
        }
    }

    fn sample_info() -> LockInfo {
        LockInfo {
            owner: "w1".to_string(),
            fencing_token: 7,
            expires_at_ms: 42,
            durability: Durability::Ephemeral,
        }
    }

    fn holding(info: &LockInfo, claim: Claim, acquired_at_ms: Option<u64>) -> lockd_core::Holding {
        lockd_core::Holding {
            info: info.clone(),
            claim,
            acquired_at_ms,
        }
    }

    // The replies below are written byte for byte as clients have always
    // read them.

    #[test]
    fn grant_busy_and_released_replies_keep_their_bytes() {
        let grant = Grant {
            fencing_token: u64::MAX,
            expires_at_ms: 42,
        };
        assert_eq!(
            serde_json::to_string(&GrantReply::acquired(grant)).unwrap(),
            format!(
                r#"{{"expires_at_ms":42,"fencing_token":{},"status":"acquired"}}"#,
                u64::MAX
            )
        );
        let info = sample_info();
        assert_eq!(
            serde_json::to_string(&BusyReply::new(&info, "m".to_string())).unwrap(),
            r#"{"durability":"ephemeral","expires_at_ms":42,"fencing_token":7,"message":"m","owner":"w1","status":"busy"}"#
        );
        assert_eq!(
            serde_json::to_string(&ReleasedReply::from(info.clone())).unwrap(),
            r#"{"fencing_token":7,"owner":"w1","status":"released"}"#
        );
    }

    #[test]
    fn get_replies_keep_their_bytes() {
        let info = sample_info();
        let found = GetReply::from(NameState {
            holders: vec![holding(&info, Claim::Exclusive, Some(40))],
            waiters: 2,
            delay_until_ms: None,
        });
        let GetReply::Found(found) = found else {
            panic!("{found:?}")
        };
        assert_eq!(
            serde_json::to_string(&found).unwrap(),
            r#"{"durability":"ephemeral","expires_at_ms":42,"fencing_token":7,"holders":[{"acquired_at_ms":40,"durability":"ephemeral","expires_at_ms":42,"fencing_token":7,"mode":"exclusive","owner":"w1"}],"mode":"exclusive","owner":"w1","status":"found","waiters":2}"#
        );
        // Nobody holds it: 404, with a delay in force when there is one.
        assert_eq!(
            GetReply::from(NameState::default()),
            GetReply::Free(FreeReply {
                lock_delay_until_ms: None,
                status: Status::NotFound,
                waiters: None,
            })
        );
        let GetReply::Free(free) = GetReply::from(NameState {
            holders: vec![],
            waiters: 1,
            delay_until_ms: Some(60),
        }) else {
            panic!("found")
        };
        assert_eq!(
            serde_json::to_string(&free).unwrap(),
            r#"{"lock_delay_until_ms":60,"status":"not_found","waiters":1}"#
        );
    }

    #[test]
    fn a_semaphore_shows_its_most_recent_permit_and_every_holder() {
        let info = sample_info();
        let newer = LockInfo {
            owner: "w2".to_string(),
            fencing_token: 9,
            ..info.clone()
        };
        let permit = Claim::Permit { permits: 3 };
        let GetReply::Found(found) = GetReply::from(NameState {
            holders: vec![holding(&info, permit, None), holding(&newer, permit, None)],
            waiters: 0,
            delay_until_ms: Some(50),
        }) else {
            panic!("not found")
        };
        assert_eq!(
            (found.owner.as_str(), found.fencing_token, found.mode),
            ("w2", 9, HeldMode::Permit)
        );
        assert_eq!(
            (
                found.permits,
                found.holders.len(),
                found.lock_delay_until_ms
            ),
            (Some(3), 2, Some(50))
        );
        let text = serde_json::to_string(&found).unwrap();
        assert_eq!(
            decode::<FoundReply>(Route::Get, text.as_bytes()).unwrap(),
            found
        );
    }

    #[test]
    fn list_replies_keep_their_bytes_and_parse_back() {
        let info = sample_info();
        let shared = LockInfo {
            owner: "r2".to_string(),
            fencing_token: 8,
            ..info.clone()
        };
        let list = ListReply::new(vec![
            lockd_core::ListedLock {
                name: "a".to_string(),
                info: info.clone(),
                acquired_at_ms: Some(40),
                waiters: 2,
                claim: Claim::Exclusive,
                holders: vec![holding(&info, Claim::Exclusive, Some(40))],
            },
            lockd_core::ListedLock {
                name: "b".to_string(),
                info: shared.clone(),
                acquired_at_ms: None,
                waiters: 0,
                claim: Claim::Shared,
                holders: vec![
                    holding(&info, Claim::Shared, None),
                    holding(&shared, Claim::Shared, None),
                ],
            },
        ]);
        let text = serde_json::to_string(&list).unwrap();
        assert_eq!(
            text,
            r#"{"locks":[{"acquired_at_ms":40,"durability":"ephemeral","expires_at_ms":42,"fencing_token":7,"mode":"exclusive","name":"a","owner":"w1","waiters":2},{"durability":"ephemeral","expires_at_ms":42,"fencing_token":8,"holders":[{"durability":"ephemeral","expires_at_ms":42,"fencing_token":7,"mode":"shared","owner":"w1"},{"durability":"ephemeral","expires_at_ms":42,"fencing_token":8,"mode":"shared","owner":"r2"}],"mode":"shared","name":"b","owner":"r2","waiters":0}],"status":"found"}"#
        );
        assert_eq!(
            decode::<ListReply>(Route::List, text.as_bytes()).unwrap(),
            list
        );
    }

    #[test]
    fn lease_replies_keep_their_bytes_and_parse_back() {
        assert_eq!(
            serde_json::to_string(&LeaseGrantedReply::from(LeaseGrant {
                id: "lease-1".to_string(),
                expires_at_ms: 42,
            }))
            .unwrap(),
            r#"{"expires_at_ms":42,"lease_id":"lease-1","status":"granted"}"#
        );
        let found = LeaseFoundReply::from(LeaseInfo {
            ttl_ms: 10,
            expires_at_ms: 42,
            durability: Durability::Persistent,
            locks: vec!["a".to_string(), "b".to_string()],
        });
        let text = serde_json::to_string(&found).unwrap();
        assert_eq!(
            text,
            r#"{"durability":"persistent","expires_at_ms":42,"locks":["a","b"],"status":"found","ttl_ms":10}"#
        );
        assert_eq!(
            decode::<LeaseFoundReply>(Route::LeaseGet, text.as_bytes()).unwrap(),
            found
        );
    }
}

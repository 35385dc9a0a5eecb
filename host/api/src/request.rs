//! Request bodies, one type per body. They refuse unknown fields, so a
//! misspelt `wait_ms` is an error rather than ignored; optional fields left
//! out (`None`, or JSON `null`) are not written. Each type's `PATH` is its
//! [`Route`]'s path.

use serde::{Deserialize, Serialize};

use crate::route::Route;
use crate::words::{DurabilityWord, LockMode};

/// `POST /v1/locks/lock`
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The lock name.
    pub name: String,
    /// Who takes the lock; `None` with `lease_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// TTL in milliseconds; given with `owner`, `None` with
    /// `lease_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// How long to wait in the lock's FIFO queue; 0 if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// Durability of a fresh grant; persistent if `None`. `None` with
    /// `lease_id` (the lease's durability applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<DurabilityWord>,
    /// Take the lock under this lease (docs/contract.md#c16-leases), in
    /// place of `owner` and `ttl_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// `exclusive` (if `None`) or `shared` (docs/contract.md#c21-shared);
    /// not with `permits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<LockMode>,
    /// Take one permit of the semaphore `name`, which has this many
    /// (docs/contract.md#c22-semaphores); not with `mode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
}

impl LockRequest {
    /// Where it is posted.
    pub const PATH: &'static str = Route::Lock.path();

    /// Who would hold the lock: exactly one of `owner` (with `ttl_ms`) and
    /// `lease_id` (without `ttl_ms` and `durability`). The error says which
    /// fields are wrong, as serde's do.
    pub fn holder(&self) -> Result<LockHolder<'_>, String> {
        match (&self.owner, &self.lease_id) {
            (Some(owner), None) => match self.ttl_ms {
                Some(ttl_ms) => Ok(LockHolder::Owner { owner, ttl_ms }),
                None => Err("missing field `ttl_ms` (a lock with `owner` needs it)".to_string()),
            },
            (None, Some(lease_id)) => {
                if self.ttl_ms.is_some() {
                    Err(
                        "`ttl_ms` is not allowed with `lease_id`: the lock has the lease's expiry"
                            .to_string(),
                    )
                } else if self.durability.is_some() {
                    Err(
                        "`durability` is not allowed with `lease_id`: the lock has the lease's durability"
                            .to_string(),
                    )
                } else {
                    Ok(LockHolder::Lease { lease_id })
                }
            }
            (Some(_), Some(_)) => {
                Err("`owner` and `lease_id` were both given; give exactly one".to_string())
            }
            (None, None) => Err("missing field `owner` (or `lease_id`)".to_string()),
        }
    }

    /// What the lock takes of its name: `mode` or `permits`, not both, and
    /// exclusive under a lease (shared grants and permits are not taken
    /// under one). The error names the fields, as serde's do. The server
    /// checks the permit count's bounds.
    pub fn claim(&self) -> Result<LockClaim, String> {
        let claim =
            match (self.mode, self.permits) {
                (Some(_), Some(_)) => return Err(
                    "`mode` and `permits` were both given; give `mode` for a lock, `permits` for \
                     a semaphore's permit"
                        .to_string(),
                ),
                (None | Some(LockMode::Exclusive), None) => LockClaim::Exclusive,
                (Some(LockMode::Shared), None) => LockClaim::Shared,
                (None, Some(permits)) => LockClaim::Permit { permits },
            };
        if claim != LockClaim::Exclusive && self.lease_id.is_some() {
            return Err(format!(
                "`{}` is not allowed with `lease_id`: shared locks and permits are not taken \
                 under a lease",
                if self.permits.is_some() {
                    "permits"
                } else {
                    "mode"
                }
            ));
        }
        Ok(claim)
    }
}

/// What a [`LockRequest`] takes of its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockClaim {
    /// The name alone.
    Exclusive,
    /// The name beside other shared holders.
    Shared,
    /// One permit of a semaphore of `permits`.
    Permit {
        /// How many permits the semaphore has.
        permits: u32,
    },
}

/// Who takes a lock of a [`LockRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockHolder<'a> {
    /// A plain lock.
    Owner {
        /// The owner.
        owner: &'a str,
        /// Its TTL in milliseconds.
        ttl_ms: u64,
    },
    /// A lock under a lease, owned by the lease id.
    Lease {
        /// The lease.
        lease_id: &'a str,
    },
}

/// `POST /v1/leases/grant`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseGrantRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The lease's TTL in milliseconds; every refresh moves its expiry to
    /// now + this.
    pub ttl_ms: u64,
    /// Durability of the lease and its locks; persistent if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<DurabilityWord>,
}

impl LeaseGrantRequest {
    /// Where it is posted.
    pub const PATH: &'static str = Route::LeaseGrant.path();
}

/// `POST /v1/leases/refresh`, `/v1/leases/revoke` and `/v1/leases/get`:
/// one lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The lease's id, as granted.
    pub lease_id: String,
}

impl LeaseRequest {
    /// Where a refresh is posted.
    pub const REFRESH_PATH: &'static str = Route::LeaseRefresh.path();
    /// Where a revoke is posted.
    pub const REVOKE_PATH: &'static str = Route::LeaseRevoke.path();
    /// Where a get is posted.
    pub const GET_PATH: &'static str = Route::LeaseGet.path();
}

/// `POST /v1/locks/unlock`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnlockRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The lock name.
    pub name: String,
    /// The owner that holds it.
    pub owner: String,
    /// Release only the grant with this token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
}

impl UnlockRequest {
    /// Where it is posted.
    pub const PATH: &'static str = Route::Unlock.path();
}

/// `POST /v1/locks/extend`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtendRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The lock name.
    pub name: String,
    /// The owner that holds it.
    pub owner: String,
    /// New TTL from now, in milliseconds.
    pub ttl_ms: u64,
}

impl ExtendRequest {
    /// Where it is posted.
    pub const PATH: &'static str = Route::Extend.path();
}

/// `POST /v1/locks/force-unlock`: an operator releases a lock whoever
/// holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForceUnlockRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The lock name.
    pub name: String,
}

impl ForceUnlockRequest {
    /// Where it is posted.
    pub const PATH: &'static str = Route::ForceUnlock.path();
}

/// `POST /v1/locks/get`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The lock name.
    pub name: String,
}

impl GetRequest {
    /// Where it is posted.
    pub const PATH: &'static str = Route::Get.path();
}

/// `POST /v1/elections/campaign` (docs/contract.md#c24-elections): lead
/// the election `name` as `candidate`, proclaiming `value`. A leadership is
/// a grant of the name: `/v1/locks/extend` keeps it, with `owner` the
/// candidate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CampaignRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The election name.
    pub name: String,
    /// Who campaigns: the owner of the leadership.
    pub candidate: String,
    /// What the leader proclaims (at most 4,096 bytes), for example its
    /// address.
    pub value: String,
    /// Leadership length in milliseconds.
    pub ttl_ms: u64,
    /// How long to wait in the election's FIFO queue; 0 if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// Durability of the leadership; persistent if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<DurabilityWord>,
}

impl CampaignRequest {
    /// Where it is posted.
    pub const PATH: &'static str = Route::Campaign.path();
}

/// `POST /v1/elections/proclaim`: the leader replaces its value; its token
/// and expiry stay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProclaimRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The election name.
    pub name: String,
    /// The candidate that leads.
    pub candidate: String,
    /// The fencing token of its leadership.
    pub fencing_token: u64,
    /// The new value (at most 4,096 bytes).
    pub value: String,
}

impl ProclaimRequest {
    /// Where it is posted.
    pub const PATH: &'static str = Route::Proclaim.path();
}

/// `POST /v1/elections/resign`: the leader stops leading; the head of the
/// queue leads next.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResignRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The election name.
    pub name: String,
    /// The candidate that leads.
    pub candidate: String,
    /// Resign only the leadership with this token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
}

impl ResignRequest {
    /// Where it is posted.
    pub const PATH: &'static str = Route::Resign.path();
}

/// `POST /v1/elections/leader`: who leads, without campaigning.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaderRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The election name.
    pub name: String,
}

impl LeaderRequest {
    /// Where it is posted.
    pub const PATH: &'static str = Route::Leader.path();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_unknown_fields_and_bad_numbers() {
        let ok: LockRequest =
            serde_json::from_str(r#"{"name":"a","owner":"o","ttl_ms":1,"durability":"ephemeral"}"#)
                .unwrap();
        assert_eq!(ok.durability, Some(DurabilityWord::Ephemeral));
        for bad in [
            r#"{"name":"a","owner":"o","ttl_ms":1,"wait":5}"#,
            r#"{"name":"a","owner":"o","ttl_ms":-1}"#,
            r#"{"name":"a","owner":"o","ttl_ms":1.5}"#,
            r#"{"name":"a","owner":"o","ttl_ms":18446744073709551616}"#,
            r#"{"name":"a","owner":"o","ttl_ms":"10"}"#,
            r#"{"name":"a","owner":"o","ttl_ms":1,"durability":"forever"}"#,
            r#"{"name":1,"owner":"o","ttl_ms":1}"#,
            r#"{"owner":"o","ttl_ms":1}"#,
        ] {
            assert!(serde_json::from_str::<LockRequest>(bad).is_err(), "{bad}");
        }
        let forever = serde_json::from_str::<LockRequest>(
            r#"{"name":"a","owner":"o","ttl_ms":1,"durability":"forever"}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            forever.contains("unknown variant `forever`, expected `persistent` or `ephemeral`"),
            "{forever}"
        );
        // null is "not given", as the OpenAPI document's `nullable` says.
        let nulls: UnlockRequest = serde_json::from_str(
            r#"{"namespace":null,"name":"a","owner":"o","fencing_token":null}"#,
        )
        .unwrap();
        assert_eq!((nulls.namespace, nulls.fencing_token), (None, None));
    }

    #[test]
    fn requests_round_trip_and_leave_out_what_is_not_given() {
        let lock = LockRequest {
            namespace: Some("ns".to_string()),
            name: "a".to_string(),
            owner: Some("o".to_string()),
            ttl_ms: Some(10),
            wait_ms: None,
            durability: Some(DurabilityWord::Persistent),
            lease_id: None,
            mode: None,
            permits: None,
        };
        let text = serde_json::to_string(&lock).unwrap();
        assert_eq!(
            text,
            r#"{"namespace":"ns","name":"a","owner":"o","ttl_ms":10,"durability":"persistent"}"#
        );
        assert_eq!(serde_json::from_str::<LockRequest>(&text).unwrap(), lock);
        let unlock = UnlockRequest {
            namespace: None,
            name: "a".to_string(),
            owner: "o".to_string(),
            fencing_token: Some(u64::MAX),
        };
        let text = serde_json::to_string(&unlock).unwrap();
        assert_eq!(
            text,
            format!(r#"{{"name":"a","owner":"o","fencing_token":{}}}"#, u64::MAX)
        );
        assert_eq!(
            serde_json::from_str::<UnlockRequest>(&text).unwrap(),
            unlock
        );
    }

    #[test]
    fn a_lock_names_exactly_one_holder() {
        let parse = |body: &str| serde_json::from_str::<LockRequest>(body).unwrap();
        assert_eq!(
            parse(r#"{"name":"a","owner":"o","ttl_ms":5}"#).holder(),
            Ok(LockHolder::Owner {
                owner: "o",
                ttl_ms: 5
            })
        );
        assert_eq!(
            parse(r#"{"name":"a","lease_id":"l","wait_ms":5}"#).holder(),
            Ok(LockHolder::Lease { lease_id: "l" })
        );
        for (body, needle) in [
            (r#"{"name":"a","ttl_ms":5}"#, "missing field `owner`"),
            (r#"{"name":"a","owner":"o"}"#, "missing field `ttl_ms`"),
            (
                r#"{"name":"a","owner":"o","lease_id":"l"}"#,
                "`owner` and `lease_id` were both given",
            ),
            (
                r#"{"name":"a","lease_id":"l","ttl_ms":5}"#,
                "`ttl_ms` is not allowed with `lease_id`",
            ),
            (
                r#"{"name":"a","lease_id":"l","durability":"ephemeral"}"#,
                "`durability` is not allowed with `lease_id`",
            ),
        ] {
            let err = parse(body).holder().unwrap_err();
            assert!(err.contains(needle), "{body}: {err}");
        }
        // Written without the fields not given.
        let lease = LockRequest {
            namespace: None,
            name: "a".to_string(),
            owner: None,
            ttl_ms: None,
            wait_ms: Some(1),
            durability: None,
            lease_id: Some("l".to_string()),
            mode: None,
            permits: None,
        };
        assert_eq!(
            serde_json::to_string(&lease).unwrap(),
            r#"{"name":"a","wait_ms":1,"lease_id":"l"}"#
        );
    }

    #[test]
    fn a_lock_takes_a_mode_or_permits() {
        let parse = |body: &str| serde_json::from_str::<LockRequest>(body).unwrap();
        for (body, claim) in [
            (
                r#"{"name":"a","owner":"o","ttl_ms":5}"#,
                LockClaim::Exclusive,
            ),
            (
                r#"{"name":"a","owner":"o","ttl_ms":5,"mode":"exclusive"}"#,
                LockClaim::Exclusive,
            ),
            (
                r#"{"name":"a","owner":"o","ttl_ms":5,"mode":"shared"}"#,
                LockClaim::Shared,
            ),
            (
                r#"{"name":"a","owner":"o","ttl_ms":5,"permits":3}"#,
                LockClaim::Permit { permits: 3 },
            ),
            (
                r#"{"name":"a","lease_id":"l","mode":"exclusive"}"#,
                LockClaim::Exclusive,
            ),
        ] {
            assert_eq!(parse(body).claim(), Ok(claim), "{body}");
        }
        for (body, needle) in [
            (
                r#"{"name":"a","owner":"o","ttl_ms":5,"mode":"shared","permits":2}"#,
                "`mode` and `permits` were both given",
            ),
            (
                r#"{"name":"a","lease_id":"l","mode":"shared"}"#,
                "`mode` is not allowed with `lease_id`",
            ),
            (
                r#"{"name":"a","lease_id":"l","permits":2}"#,
                "`permits` is not allowed with `lease_id`",
            ),
        ] {
            let err = parse(body).claim().unwrap_err();
            assert!(err.contains(needle), "{body}: {err}");
        }
        let err = serde_json::from_str::<LockRequest>(
            r#"{"name":"a","owner":"o","ttl_ms":5,"mode":"read"}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("expected `exclusive` or `shared`"), "{err}");
        assert!(serde_json::from_str::<LockRequest>(
            r#"{"name":"a","owner":"o","ttl_ms":5,"permits":-1}"#
        )
        .is_err());
        let shared = LockRequest {
            name: "a".to_string(),
            owner: Some("o".to_string()),
            ttl_ms: Some(5),
            mode: Some(LockMode::Shared),
            ..LockRequest::default()
        };
        assert_eq!(
            serde_json::to_string(&shared).unwrap(),
            r#"{"name":"a","owner":"o","ttl_ms":5,"mode":"shared"}"#
        );
    }

    #[test]
    fn lease_bodies_round_trip() {
        let grant: LeaseGrantRequest =
            serde_json::from_str(r#"{"ttl_ms":5,"durability":"ephemeral"}"#).unwrap();
        assert_eq!(grant.durability, Some(DurabilityWord::Ephemeral));
        assert!(serde_json::from_str::<LeaseGrantRequest>(r#"{"ttl_ms":5,"ttl":1}"#).is_err());
        assert!(serde_json::from_str::<LeaseGrantRequest>(r#"{}"#).is_err());
        assert!(serde_json::from_str::<LeaseRequest>(r#"{"lease_id":"l","name":"a"}"#).is_err());
    }
}

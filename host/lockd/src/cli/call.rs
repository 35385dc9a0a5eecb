//! What each request the CLI sends may do twice: a call whose outcome is
//! unknown (sent, then the host died or the connection broke, or the store
//! answered `unavailable`) is sent again to the next host of `--server` only
//! when that is the same as sending it once (docs/contract.md#c2-relock,
//! #c4-unlock, #c5-stale-unlock, #c6-extend), and the message for an
//! unknown outcome says how to find out what happened.

use lockd_api::{
    CampaignRequest, ExtendRequest, ForceUnlockRequest, GetRequest, LeaderRequest,
    LeaseGrantRequest, LeaseRequest, LockRequest, ProclaimRequest, ResignRequest, UnlockRequest,
    DEFAULT_NAMESPACE,
};
use lockd_native_client::Retry;
use serde::Serialize;

/// A request body the CLI posts.
pub trait Call: Serialize {
    /// [`Retry::Safe`] when sending it again after an unknown outcome is
    /// the same as sending it once; [`Retry::Never`] otherwise.
    fn retry(&self) -> Retry;

    /// What to do when its outcome is unknown, for the failure's message:
    /// the command that shows what happened.
    fn if_unknown(&self) -> String;
}

/// `lockd get NAME`, with `--namespace` when it is not the default.
fn check_lock(namespace: &Option<String>, name: &str) -> String {
    format!("check with 'lockd get {name}{}'", namespace_flag(namespace))
}

/// `lockd leader NAME`, with `--namespace` when it is not the default.
fn check_leader(namespace: &Option<String>, name: &str) -> String {
    format!(
        "check with 'lockd leader {name}{}'",
        namespace_flag(namespace)
    )
}

fn namespace_flag(namespace: &Option<String>) -> String {
    match namespace.as_deref() {
        Some(ns) if ns != DEFAULT_NAMESPACE => format!(" --namespace {ns}"),
        _ => String::new(),
    }
}

/// A read changes nothing: asking again is always safe.
const RETRY_READ: &str = "retry later";

/// A retry by the same owner (or lease) is a re-lock: the same grant, the
/// same token (C2; C16 under a lease). The CLI never sends `refuse_relock`
/// (the REST API has no such field; Dapr's API does, and its lock is not
/// this one).
impl Call for LockRequest {
    fn retry(&self) -> Retry {
        Retry::Safe
    }

    fn if_unknown(&self) -> String {
        check_lock(&self.namespace, &self.name)
    }
}

/// With its token, an unlock frees that grant only (C5): a second one
/// answers `not_held` and frees nothing. Without one it could free a later
/// grant of the same owner string.
impl Call for UnlockRequest {
    fn retry(&self) -> Retry {
        if self.fencing_token.is_some() {
            Retry::Safe
        } else {
            Retry::Never
        }
    }

    fn if_unknown(&self) -> String {
        check_lock(&self.namespace, &self.name)
    }
}

/// An extend sets the expiry to now + ttl (C6): twice is once, a little
/// later.
impl Call for ExtendRequest {
    fn retry(&self) -> Retry {
        Retry::Safe
    }

    fn if_unknown(&self) -> String {
        check_lock(&self.namespace, &self.name)
    }
}

/// A force-unlock names no grant: a second one would release whoever took
/// the lock after the first.
impl Call for ForceUnlockRequest {
    fn retry(&self) -> Retry {
        Retry::Never
    }

    fn if_unknown(&self) -> String {
        check_lock(&self.namespace, &self.name)
    }
}

impl Call for GetRequest {
    fn retry(&self) -> Retry {
        Retry::Safe
    }

    fn if_unknown(&self) -> String {
        RETRY_READ.to_string()
    }
}

/// A grant mints a new lease id each time: a second one would leave a lease
/// nobody knows of until its TTL.
impl Call for LeaseGrantRequest {
    fn retry(&self) -> Retry {
        Retry::Never
    }

    fn if_unknown(&self) -> String {
        "a lease may have been granted whose id was never answered; it ends at its TTL, \
         grant another"
            .to_string()
    }
}

/// Refresh, revoke and get of one lease id (C16): a refresh sets the expiry
/// again, a revoke of an ended lease answers `not_held` and does nothing, a
/// get reads. Ids are never reused.
impl Call for LeaseRequest {
    fn retry(&self) -> Retry {
        Retry::Safe
    }

    fn if_unknown(&self) -> String {
        let namespace = namespace_flag(&self.namespace);
        format!("check with 'lockd lease get {}{namespace}'", self.lease_id)
    }
}

/// A campaign by the leader is a re-lock (C24, C2).
impl Call for CampaignRequest {
    fn retry(&self) -> Retry {
        Retry::Safe
    }

    fn if_unknown(&self) -> String {
        check_leader(&self.namespace, &self.name)
    }
}

/// Proclaiming the same value under the same token twice is once.
impl Call for ProclaimRequest {
    fn retry(&self) -> Retry {
        Retry::Safe
    }

    fn if_unknown(&self) -> String {
        check_leader(&self.namespace, &self.name)
    }
}

/// A resignation is an unlock (C24): safe with its token only.
impl Call for ResignRequest {
    fn retry(&self) -> Retry {
        if self.fencing_token.is_some() {
            Retry::Safe
        } else {
            Retry::Never
        }
    }

    fn if_unknown(&self) -> String {
        check_leader(&self.namespace, &self.name)
    }
}

impl Call for LeaderRequest {
    fn retry(&self) -> Retry {
        Retry::Safe
    }

    fn if_unknown(&self) -> String {
        RETRY_READ.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unlock(token: Option<u64>) -> UnlockRequest {
        UnlockRequest {
            namespace: Some("jobs".to_string()),
            name: "a".to_string(),
            owner: "o".to_string(),
            fencing_token: token,
        }
    }

    #[test]
    fn only_calls_that_are_the_same_twice_are_retried() {
        assert_eq!(unlock(Some(7)).retry(), Retry::Safe);
        assert_eq!(unlock(None).retry(), Retry::Never);
        let grant = LeaseGrantRequest {
            namespace: None,
            ttl_ms: 1,
            durability: None,
        };
        assert_eq!(grant.retry(), Retry::Never);
        let force = ForceUnlockRequest {
            namespace: None,
            name: "a".to_string(),
        };
        assert_eq!(force.retry(), Retry::Never);
        let resign = |token| ResignRequest {
            namespace: None,
            name: "e".to_string(),
            candidate: "c".to_string(),
            fencing_token: token,
        };
        assert_eq!(resign(Some(1)).retry(), Retry::Safe);
        assert_eq!(resign(None).retry(), Retry::Never);
        let lock = LockRequest {
            name: "a".to_string(),
            owner: Some("o".to_string()),
            ttl_ms: Some(1),
            ..LockRequest::default()
        };
        assert_eq!(lock.retry(), Retry::Safe);
    }

    #[test]
    fn an_unknown_outcome_names_the_command_that_checks_it() {
        assert_eq!(
            unlock(None).if_unknown(),
            "check with 'lockd get a --namespace jobs'"
        );
        let lock = LockRequest {
            namespace: Some(DEFAULT_NAMESPACE.to_string()),
            name: "a".to_string(),
            ..LockRequest::default()
        };
        assert_eq!(lock.if_unknown(), "check with 'lockd get a'");
    }
}

//! The requests the clients send and the values they make of the replies,
//! whatever carries them.

use lockd_api::{
    CampaignRequest, DurabilityWord, ExtendRequest, FoundReply, FreeReply, GetRequest, GrantReply,
    LeaderReply, LeaderRequest, LeaseGrantRequest, LeaseRequest, LockClaim, LockMode, LockRequest,
    ProclaimRequest, ResignRequest, UnlockRequest,
};

use crate::config::Config;
use crate::types::{Grant, Holder, LeaderInfo, LockInfo, LockOptions, NameState};

/// `POST /v1/locks/lock` for `owner`: `claim` says what it takes of `name`.
pub(crate) fn lock_request(
    config: &Config,
    name: &str,
    owner: &str,
    ttl_ms: u32,
    options: &LockOptions,
    claim: LockClaim,
) -> LockRequest {
    let (mode, permits) = match claim {
        // Left out, as every client before modes sent it.
        LockClaim::Exclusive => (None, None),
        LockClaim::Shared => (Some(LockMode::Shared), None),
        LockClaim::Permit { permits } => (None, Some(permits)),
    };
    LockRequest {
        namespace: Some(config.namespace.clone()),
        name: name.to_owned(),
        owner: Some(owner.to_owned()),
        ttl_ms: Some(ttl_ms.into()),
        wait_ms: Some(options.wait_ms.into()),
        durability: Some(options.durability),
        lease_id: None,
        mode,
        permits,
    }
}

/// `POST /v1/locks/lock` of `name` under the lease `lease_id`.
pub(crate) fn lease_lock_request(
    config: &Config,
    lease_id: &str,
    name: String,
    wait_ms: u32,
) -> LockRequest {
    LockRequest {
        namespace: Some(config.namespace.clone()),
        name,
        owner: None,
        ttl_ms: None,
        wait_ms: Some(wait_ms.into()),
        durability: None,
        lease_id: Some(lease_id.to_owned()),
        mode: None,
        permits: None,
    }
}

pub(crate) fn unlock_request(
    config: &Config,
    name: &str,
    owner: &str,
    fencing_token: Option<u64>,
) -> UnlockRequest {
    UnlockRequest {
        namespace: Some(config.namespace.clone()),
        name: name.to_owned(),
        owner: owner.to_owned(),
        fencing_token,
    }
}

pub(crate) fn extend_request(
    config: &Config,
    name: &str,
    owner: &str,
    ttl_ms: u32,
) -> ExtendRequest {
    ExtendRequest {
        namespace: Some(config.namespace.clone()),
        name: name.to_owned(),
        owner: owner.to_owned(),
        ttl_ms: ttl_ms.into(),
    }
}

pub(crate) fn get_request(config: &Config, name: &str) -> GetRequest {
    GetRequest {
        namespace: Some(config.namespace.clone()),
        name: name.to_owned(),
    }
}

/// A call that names one lease: refresh, revoke or get.
pub(crate) fn lease_request(config: &Config, lease_id: &str) -> LeaseRequest {
    LeaseRequest {
        namespace: Some(config.namespace.clone()),
        lease_id: lease_id.to_owned(),
    }
}

pub(crate) fn lease_grant_request(
    config: &Config,
    ttl_ms: u32,
    durability: DurabilityWord,
) -> LeaseGrantRequest {
    LeaseGrantRequest {
        namespace: Some(config.namespace.clone()),
        ttl_ms: ttl_ms.into(),
        durability: Some(durability),
    }
}

pub(crate) fn leader_request(config: &Config, name: &str) -> LeaderRequest {
    LeaderRequest {
        namespace: Some(config.namespace.clone()),
        name: name.to_owned(),
    }
}

/// A campaign for `name` under `candidate` (see [`fresh_id`]).
pub(crate) fn campaign_request(
    config: &Config,
    name: String,
    candidate: String,
    value: String,
    ttl_ms: u32,
    options: &LockOptions,
) -> CampaignRequest {
    CampaignRequest {
        namespace: Some(config.namespace.clone()),
        name,
        candidate,
        value,
        ttl_ms: ttl_ms.into(),
        wait_ms: Some(options.wait_ms.into()),
        durability: Some(options.durability),
    }
}

pub(crate) fn proclaim_request(
    config: &Config,
    name: &str,
    candidate: &str,
    fencing_token: u64,
    value: String,
) -> ProclaimRequest {
    ProclaimRequest {
        namespace: Some(config.namespace.clone()),
        name: name.to_owned(),
        candidate: candidate.to_owned(),
        fencing_token,
        value,
    }
}

pub(crate) fn resign_request(
    config: &Config,
    name: &str,
    candidate: &str,
    fencing_token: u64,
) -> ResignRequest {
    ResignRequest {
        namespace: Some(config.namespace.clone()),
        name: name.to_owned(),
        candidate: candidate.to_owned(),
        fencing_token: Some(fencing_token),
    }
}

/// Whether `get`'s answer shows `owner` holding the name under `token`, in
/// any mode.
pub(crate) fn holds(found: &FoundReply, owner: &str, token: u64) -> bool {
    if found.holders.is_empty() {
        // A server older than `holders` names the one exclusive holder.
        return found.owner == owner && found.fencing_token == token;
    }
    found
        .holders
        .iter()
        .any(|h| h.owner == owner && h.fencing_token == token)
}

/// `describe`'s answer from `get`'s: every holder with its mode, or what
/// the server says of a free name.
pub(crate) fn name_state(found: Result<FoundReply, FreeReply>) -> NameState {
    let found = match found {
        Ok(found) => found,
        Err(free) => {
            return NameState {
                holders: Vec::new(),
                waiters: free.waiters.unwrap_or(0),
                permits: None,
                lock_delay_until_ms: free.lock_delay_until_ms,
            }
        }
    };
    let mut holders: Vec<Holder> = found
        .holders
        .into_iter()
        .map(|h| Holder {
            info: lock_info(h.owner, h.fencing_token, h.expires_at_ms, h.durability),
            mode: h.mode,
            acquired_at_ms: h.acquired_at_ms,
        })
        .collect();
    if holders.is_empty() {
        // A server older than `holders`: its one holder is the reply's.
        holders.push(Holder {
            info: lock_info(
                found.owner,
                found.fencing_token,
                found.expires_at_ms,
                found.durability,
            ),
            mode: found.mode,
            acquired_at_ms: None,
        });
    }
    NameState {
        holders,
        waiters: found.waiters,
        permits: found.permits,
        lock_delay_until_ms: found.lock_delay_until_ms,
    }
}

/// `get`'s answer as `locks.get` gives it.
pub(crate) fn found_info(found: FoundReply) -> LockInfo {
    lock_info(
        found.owner,
        found.fencing_token,
        found.expires_at_ms,
        found.durability,
    )
}

pub(crate) fn lock_info(
    owner: String,
    fencing_token: u64,
    expires_at_ms: u64,
    durability: DurabilityWord,
) -> LockInfo {
    LockInfo {
        owner,
        fencing_token,
        expires_at_ms,
        durability,
    }
}

pub(crate) fn grant(reply: &GrantReply) -> Grant {
    Grant {
        fencing_token: reply.fencing_token,
        expires_at_ms: reply.expires_at_ms,
    }
}

pub(crate) fn leader_info(leader: LeaderReply) -> LeaderInfo {
    LeaderInfo {
        candidate: leader.candidate,
        value: leader.value,
        fencing_token: leader.fencing_token,
        since_ms: leader.since_ms,
        expires_at_ms: leader.expires_at_ms,
        durability: leader.durability,
    }
}

/// What tells one leader from another: its candidate, its token and its
/// value (not its expiry, which moves with every extend), as the native
/// host compares them.
pub(crate) type Seen = Option<(String, u64, String)>;

pub(crate) fn seen(leader: Option<&LeaderInfo>) -> Seen {
    leader.map(|l| (l.candidate.clone(), l.fencing_token, l.value.clone()))
}

/// A fresh owner `PREFIX-<32 hex digits>` from 16 random bytes, as the
/// native host makes guard owners and candidates.
pub(crate) fn fresh_id(prefix: &str, random: &[u8]) -> String {
    let mut bytes = [0u8; 16];
    for (slot, byte) in bytes.iter_mut().zip(random) {
        *slot = *byte;
    }
    format!("{prefix}-{:032x}", u128::from_be_bytes(bytes))
}

//! The election routes (docs/contract.md#c24-elections): campaign, proclaim,
//! resign and who leads. A leadership is a grant of the election's name, so
//! `/v1/locks/extend` keeps it alive like any other grant.

use hyper::Response;
use lockd_api::{
    CampaignRequest, FreeReply, GrantReply, LeaderReply, LeaderRequest, ProclaimRequest,
    ResignRequest, Status, StatusReply,
};
use lockd_core::{Durability, LockOptions, LockService};

use super::access::{namespace, Asker};
use super::reply::{Answer, Refused};
use crate::body::Body;

/// Leads at once, waits up to `wait_ms` in the election's queue, or
/// answers `busy` with the leader. A client that hangs up leaves the
/// queue, as a waiting lock does.
pub(super) async fn campaign(
    service: &LockService,
    a: Asker<'_>,
    r: CampaignRequest,
) -> Result<GrantReply, Refused> {
    let namespace = namespace(a, r.namespace.as_deref())?;
    let options = LockOptions {
        wait_ms: r.wait_ms.unwrap_or(0),
        durability: r.durability.map_or(Durability::Persistent, Into::into),
        ..LockOptions::default()
    };
    let grant = service
        .campaign(
            namespace,
            &r.name,
            &r.candidate,
            &r.value,
            r.ttl_ms,
            options,
        )
        .await?;
    Ok(GrantReply::acquired(grant))
}

pub(super) async fn proclaim(
    service: &LockService,
    a: Asker<'_>,
    r: ProclaimRequest,
) -> Result<StatusReply, Refused> {
    let namespace = namespace(a, r.namespace.as_deref())?;
    service
        .proclaim(namespace, &r.name, &r.candidate, r.fencing_token, &r.value)
        .await?;
    Ok(StatusReply {
        status: Status::Proclaimed,
    })
}

/// The head of the queue leads next.
pub(super) async fn resign(
    service: &LockService,
    a: Asker<'_>,
    r: ResignRequest,
) -> Result<StatusReply, Refused> {
    let namespace = namespace(a, r.namespace.as_deref())?;
    service
        .resign(namespace, &r.name, &r.candidate, r.fencing_token)
        .await?;
    Ok(StatusReply {
        status: Status::Resigned,
    })
}

/// The leader, or 404 `not_found` when nobody leads.
pub(super) async fn leader(
    service: &LockService,
    a: Asker<'_>,
    r: LeaderRequest,
) -> Result<Response<Body>, Refused> {
    let namespace = namespace(a, r.namespace.as_deref())?;
    Ok(match service.leader(namespace, &r.name).await? {
        Some(leader) => LeaderReply::from(leader).into_response(),
        None => FreeReply {
            lock_delay_until_ms: None,
            status: Status::NotFound,
            waiters: None,
        }
        .into_response(),
    })
}

//! The calls on a name and an owner the guest gives (`locks`, `rwlocks`,
//! `semaphores`): `POST /v1/locks/lock|unlock|extend|get`.

use lockd_api::{FoundReply, FreeReply, GrantReply, LockClaim, Route, Status, StatusReply};

use crate::call::{self, config, Retry};
use crate::types::{Error, Grant, LockInfo, LockOptions, NameState};
use crate::{wire, Io};

/// `POST /v1/locks/lock` for `owner`: `claim` says what it takes of `name`
/// (`locks.lock`, `rwlocks.lock-shared`, `semaphores.acquire`).
pub async fn lock(
    io: &impl Io,
    name: &str,
    owner: &str,
    ttl_ms: u32,
    options: &LockOptions,
    claim: LockClaim,
) -> Result<Grant, Error> {
    let config = config(io)?;
    let request = wire::lock_request(config, name, owner, ttl_ms, options, claim);
    let reply: GrantReply = call::post(
        io,
        config,
        Route::Lock,
        &request,
        Status::Acquired,
        options.wait_ms,
        // A re-lock by the same owner answers the same grant (C2).
        Retry::Safe,
    )
    .await?;
    Ok(wire::grant(&reply))
}

/// `POST /v1/locks/unlock`: only the grant `fencing_token` names, if given.
pub async fn unlock(
    io: &impl Io,
    name: &str,
    owner: &str,
    fencing_token: Option<u64>,
) -> Result<(), Error> {
    let config = config(io)?;
    let request = wire::unlock_request(config, name, owner, fencing_token);
    // With its token it frees that grant only (C5); without, a repeat could
    // free a later grant of the same owner.
    let retry = if fencing_token.is_some() {
        Retry::Safe
    } else {
        Retry::Never
    };
    let _: StatusReply = call::post(
        io,
        config,
        Route::Unlock,
        &request,
        Status::Unlocked,
        0,
        retry,
    )
    .await?;
    Ok(())
}

/// `POST /v1/locks/extend`.
pub async fn extend(io: &impl Io, name: &str, owner: &str, ttl_ms: u32) -> Result<Grant, Error> {
    let config = config(io)?;
    let request = wire::extend_request(config, name, owner, ttl_ms);
    let reply: GrantReply = call::post(
        io,
        config,
        Route::Extend,
        &request,
        Status::Extended,
        0,
        Retry::Safe,
    )
    .await?;
    Ok(wire::grant(&reply))
}

/// `locks.get`: the holder `get` names, or `None` for a free name.
pub async fn get(io: &impl Io, name: &str) -> Result<Option<LockInfo>, Error> {
    Ok(find(io, name).await?.ok().map(wire::found_info))
}

/// `rwlocks.describe`: `get`'s full answer.
pub async fn describe(io: &impl Io, name: &str) -> Result<NameState, Error> {
    Ok(wire::name_state(find(io, name).await?))
}

/// `POST /v1/locks/get`: the holders of `name`, or what the server says of
/// a free one.
async fn find(io: &impl Io, name: &str) -> Result<Result<FoundReply, FreeReply>, Error> {
    let config = config(io)?;
    call::find(io, config, Route::Get, &wire::get_request(config, name)).await
}

/// Whether the server still shows `owner` holding `name` under `token`, in
/// any mode: `None` when it cannot answer.
pub(crate) async fn still_holds(io: &impl Io, name: &str, owner: &str, token: u64) -> Option<bool> {
    match find(io, name).await {
        Ok(Ok(found)) => Some(wire::holds(&found, owner, token)),
        Ok(Err(_free)) => Some(false),
        Err(_) => None,
    }
}

/// A fresh owner `PREFIX-<32 hex digits>`: 128 random bits, as the native
/// host makes guard owners and candidates.
pub(crate) fn fresh_id(io: &impl Io, prefix: &str) -> String {
    wire::fresh_id(prefix, &io.random_bytes())
}

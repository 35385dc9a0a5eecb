//! What `guard` and `hold` do alike in `lockd:lock@0.2.0`: taken for an
//! owner the host generates, extended, released and watched for their loss
//! (docs/contract.md#c14-guards, #c18-lost).
//!
//! The calls that reach the store copy what they need out of the resource
//! table ([`Granted`]) and await without borrowing the instance.

use lockd_core::LockError;
use wasmtime::component::{Access, Accessor, FutureReader, Resource};

use super::abandon::unless_abandoned;
use super::convert::{grant_to_wit, lost_reason_to_wit, to_wit, WitResult};
use super::wit::types;
use crate::ctx::HasLockCtx;
use crate::grants::Take;
use crate::liveness::lost;
use crate::resources::{Granted, HeldGrant, HoldsGrant};

/// Takes `name` as `take` says (a lock with its options, or a campaign)
/// for a fresh owner (`prefix-` and 32 hex digits), renewed if
/// `keep_alive`, and hands the guest the resource `wrap` makes of it.
/// Cancelled (or its task abandoned) while it waits, the core leaves the queue;
/// once granted, nothing is awaited until the resource is in the table,
/// whose drop gives the grant back.
pub(super) async fn acquire<U, T: HoldsGrant>(
    accessor: &Accessor<U, HasLockCtx>,
    (name, prefix): (String, &str),
    ttl_ms: u32,
    (take, keep_alive): (Take, bool),
    wrap: fn(HeldGrant) -> T,
) -> WitResult<Resource<T>> {
    let asking = match accessor.with(|mut access| access.get().asking(prefix)) {
        Ok(asking) => asking,
        Err(e) => return Ok(Err(to_wit(e))),
    };
    let wait = asking.take(name, ttl_ms, take, keep_alive);
    let held = match unless_abandoned(accessor, wait).await {
        Ok(held) => held,
        Err(e) => return Ok(Err(to_wit(e))),
    };
    Ok(accessor.with(|mut access| access.get().push_grant(held, wrap).map_err(to_wit)))
}

/// The grant of `resource`, copied out of the table; `not-held` once the
/// guest released it here.
pub(super) fn granted<U, T: HoldsGrant>(
    accessor: &Accessor<U, HasLockCtx>,
    resource: &Resource<T>,
) -> wasmtime::Result<Result<Granted, types::Error>> {
    accessor.with(|mut access| {
        let held = access.get().table.get(resource)?.grant();
        Ok(if held.is_released() {
            Err(types::Error::NotHeld)
        } else {
            Ok(held.granted().clone())
        })
    })
}

pub(super) async fn is_held<U, T: HoldsGrant>(
    accessor: &Accessor<U, HasLockCtx>,
    resource: Resource<T>,
) -> wasmtime::Result<bool> {
    Ok(match granted(accessor, &resource)? {
        Ok(granted) => granted.is_held_in_store().await,
        Err(_) => false,
    })
}

pub(super) async fn extend<U, T: HoldsGrant>(
    accessor: &Accessor<U, HasLockCtx>,
    resource: Resource<T>,
    ttl_ms: u32,
) -> WitResult<types::Grant> {
    let granted = match granted(accessor, &resource)? {
        Ok(granted) => granted,
        Err(e) => return Ok(Err(e)),
    };
    Ok(granted
        .extend(u64::from(ttl_ms))
        .await
        .map(grant_to_wit)
        .map_err(to_wit))
}

pub(super) async fn release<U, T: HoldsGrant>(
    accessor: &Accessor<U, HasLockCtx>,
    resource: Resource<T>,
) -> WitResult<()> {
    let granted = match granted(accessor, &resource)? {
        Ok(granted) => granted,
        Err(e) => return Ok(Err(e)),
    };
    let outcome = granted.unlock().await;
    // Unless the store could not answer, this grant is gone now.
    if !matches!(outcome, Err(LockError::Unavailable(_))) {
        accessor.with(|mut access| -> wasmtime::Result<()> {
            access
                .get()
                .table
                .get_mut(&resource)?
                .grant_mut()
                .mark_released();
            Ok(())
        })?;
    }
    Ok(outcome.map_err(to_wit))
}

/// `lost`: a future in the store that resolves, with the reason, once the
/// grant no longer holds.
pub(super) fn lost_future<U, T: HoldsGrant>(
    mut access: Access<'_, U, HasLockCtx>,
    resource: Resource<T>,
) -> wasmtime::Result<FutureReader<types::LostReason>> {
    let held = access.get().table.get_mut(&resource)?.grant_mut();
    // Kept-alive grants are watched already; others from now on.
    held.watch();
    let cause = lost(&held.holding, held.ending.clone());
    FutureReader::new(&mut access, async move {
        Ok::<_, wasmtime::Error>(lost_reason_to_wit(cause.await))
    })
}

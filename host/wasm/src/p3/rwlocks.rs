//! The `rwlocks` interface (shared locks and a name's full state) and the
//! `semaphores` interface of `lockd:lock@0.2.0`
//! (docs/contract.md#c21-shared, #c22-semaphores), as `async func`s. Glue
//! only: `LockService` decides.

use lockd_core::Claim;
use wasmtime::component::Accessor;

use super::abandon::unless_abandoned;
use super::convert::{grant_to_wit, lock_options_from_wit, name_state_to_wit, to_wit, WitResult};
use super::locks::place;
use super::wit::{locks, rwlocks, semaphores, types};
use crate::ctx::{HasLockCtx, LockCtxView};

impl rwlocks::Host for LockCtxView<'_> {}
impl semaphores::Host for LockCtxView<'_> {}

/// `lock` of `name` for `claim`. Dropped while it waits (the call
/// cancelled, or its task abandoned), the core leaves the queue and gives back a grant made
/// meanwhile.
async fn lock_claim<U>(
    accessor: &Accessor<U, HasLockCtx>,
    (name, owner): (String, String),
    ttl_ms: u32,
    options: locks::LockOptions,
    claim: Claim,
) -> WitResult<types::Grant> {
    let (service, namespace) = place(accessor);
    let options = lockd_core::LockOptions {
        claim,
        ..lock_options_from_wit(options)
    };
    let wait = service.lock(&namespace, &name, &owner, u64::from(ttl_ms), options);
    Ok(unless_abandoned(accessor, wait)
        .await
        .map(grant_to_wit)
        .map_err(to_wit))
}

impl<U> rwlocks::HostWithStore<U> for HasLockCtx {
    async fn lock_shared(
        accessor: &Accessor<U, Self>,
        name: String,
        owner: String,
        ttl_ms: u32,
        options: locks::LockOptions,
    ) -> WitResult<types::Grant> {
        lock_claim(accessor, (name, owner), ttl_ms, options, Claim::Shared).await
    }

    async fn describe(accessor: &Accessor<U, Self>, name: String) -> WitResult<rwlocks::NameState> {
        let (service, namespace) = place(accessor);
        Ok(service
            .describe(&namespace, &name)
            .await
            .map(name_state_to_wit)
            .map_err(to_wit))
    }
}

impl<U> semaphores::HostWithStore<U> for HasLockCtx {
    async fn acquire(
        accessor: &Accessor<U, Self>,
        name: String,
        owner: String,
        permits: u32,
        ttl_ms: u32,
        options: locks::LockOptions,
    ) -> WitResult<types::Grant> {
        let claim = Claim::Permit { permits };
        lock_claim(accessor, (name, owner), ttl_ms, options, claim).await
    }
}

//! The `locks` interface of `lockd:lock@0.2.0` (and the empty host of
//! `types`). Every function is an `async func`: it takes the instance's
//! service and namespace, lets go of the store, and awaits the core, so the
//! instance's other tasks run meanwhile. Glue only: every decision is made
//! by `LockService` and the backend behind it.

use lockd_core::LockService;
use wasmtime::component::Accessor;

use super::abandon::unless_abandoned;
use super::convert::{grant_to_wit, info_to_wit, lock_options_from_wit, to_wit, WitResult};
use super::wit::{locks, types};
use crate::ctx::{HasLockCtx, LockCtxView};

impl types::Host for LockCtxView<'_> {}
impl locks::Host for LockCtxView<'_> {}

/// The service and namespace of the calling instance, copied out so that
/// nothing of the store is borrowed while the call awaits.
pub(super) fn place<U>(accessor: &Accessor<U, HasLockCtx>) -> (LockService, String) {
    accessor.with(|mut access| {
        let view = access.get();
        (view.ctx.service.clone(), view.ctx.namespace.clone())
    })
}

impl<U> locks::HostWithStore<U> for HasLockCtx {
    async fn lock(
        accessor: &Accessor<U, Self>,
        name: String,
        owner: String,
        ttl_ms: u32,
        options: locks::LockOptions,
    ) -> WitResult<types::Grant> {
        let (service, namespace) = place(accessor);
        // Dropped while it waits (the guest cancelled the call, or the
        // host abandoned its task), the core's lock future leaves the queue
        // and gives back a grant made meanwhile.
        let wait = service.lock(
            &namespace,
            &name,
            &owner,
            u64::from(ttl_ms),
            lock_options_from_wit(options),
        );
        Ok(unless_abandoned(accessor, wait)
            .await
            .map(grant_to_wit)
            .map_err(to_wit))
    }

    async fn unlock(
        accessor: &Accessor<U, Self>,
        name: String,
        owner: String,
        fencing_token: Option<u64>,
    ) -> WitResult<()> {
        let (service, namespace) = place(accessor);
        Ok(service
            .unlock(&namespace, &name, &owner, fencing_token)
            .await
            .map_err(to_wit))
    }

    async fn extend(
        accessor: &Accessor<U, Self>,
        name: String,
        owner: String,
        ttl_ms: u32,
    ) -> WitResult<types::Grant> {
        let (service, namespace) = place(accessor);
        Ok(service
            .extend(&namespace, &name, &owner, u64::from(ttl_ms))
            .await
            .map(grant_to_wit)
            .map_err(to_wit))
    }

    async fn get(accessor: &Accessor<U, Self>, name: String) -> WitResult<Option<types::LockInfo>> {
        let (service, namespace) = place(accessor);
        Ok(service
            .get(&namespace, &name)
            .await
            .map(|info| info.map(info_to_wit))
            .map_err(to_wit))
    }
}

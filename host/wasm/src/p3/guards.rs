//! The `guards` interface of `lockd:lock@0.2.0`: a lock held by a `guard`
//! resource whose owner the host picks, released when the guard is dropped
//! (docs/contract.md#c14-guards), with its loss as a `future`. What it
//! shares with `hold` is in [`super::grants`].

use wasmtime::component::{Access, Accessor, FutureReader, Resource};

use super::convert::{guard_options_from_wit, WitResult};
use super::grants;
use super::wit::{guards, types};
use crate::ctx::{HasLockCtx, LockCtxView};
use crate::grants::Take;
use crate::resources::Guard;

impl guards::Host for LockCtxView<'_> {}

impl<U> guards::HostGuardWithStore<U> for HasLockCtx {
    async fn acquire(
        accessor: &Accessor<U, Self>,
        name: String,
        ttl_ms: u32,
        options: guards::GuardOptions,
    ) -> WitResult<Resource<Guard>> {
        let (options, keep_alive) = guard_options_from_wit(options);
        let take = (Take::Lock(options), keep_alive);
        grants::acquire(accessor, (name, "guard"), ttl_ms, take, Guard).await
    }

    async fn is_held(
        accessor: &Accessor<U, Self>,
        guard: Resource<Guard>,
    ) -> wasmtime::Result<bool> {
        grants::is_held(accessor, guard).await
    }

    async fn extend(
        accessor: &Accessor<U, Self>,
        guard: Resource<Guard>,
        ttl_ms: u32,
    ) -> WitResult<types::Grant> {
        grants::extend(accessor, guard, ttl_ms).await
    }

    async fn release(accessor: &Accessor<U, Self>, guard: Resource<Guard>) -> WitResult<()> {
        grants::release(accessor, guard).await
    }

    fn lost(
        access: Access<'_, U, Self>,
        guard: Resource<Guard>,
    ) -> wasmtime::Result<FutureReader<types::LostReason>> {
        grants::lost_future(access, guard)
    }
}

impl guards::HostGuard for LockCtxView<'_> {
    fn fencing_token(&mut self, guard: Resource<Guard>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&guard)?.0.token)
    }

    fn expires_at_ms(&mut self, guard: Resource<Guard>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&guard)?.0.holding.expires_at_ms())
    }

    fn owner(&mut self, guard: Resource<Guard>) -> wasmtime::Result<String> {
        Ok(self.table.get(&guard)?.0.owner.clone())
    }

    /// A resource drop cannot wait: the guard's own drop gives the lock
    /// back at once (detached), and the TTL remains the safety net.
    fn drop(&mut self, guard: Resource<Guard>) -> wasmtime::Result<()> {
        self.table.delete(guard)?;
        Ok(())
    }
}

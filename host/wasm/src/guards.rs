//! The `guards` interface: a lock held by a `guard` resource whose owner the
//! host picks, released when the guard is dropped
//! (docs/contract.md#c14-guards).

use wasmtime::component::Resource;
use wasmtime_wasi_io::poll::DynPollable;

use crate::convert::{guard_options_from_wit, lock_options_from_wit, WitResult};
use crate::ctx::LockCtxView;
use crate::grants::Take;
use crate::resources::Guard;
use crate::wit::{guards, locks, types};

impl guards::Host for LockCtxView<'_> {}

impl guards::HostGuard for LockCtxView<'_> {
    async fn acquire(
        &mut self,
        name: String,
        ttl_ms: u32,
        options: locks::LockOptions,
    ) -> WitResult<Resource<Guard>> {
        let take = Take::Lock(lock_options_from_wit(options));
        self.take_grant((name, "guard"), ttl_ms, take, false, Guard)
            .await
    }

    async fn acquire_with(
        &mut self,
        name: String,
        ttl_ms: u32,
        options: guards::GuardOptions,
    ) -> WitResult<Resource<Guard>> {
        let (lock_options, keep_alive) = guard_options_from_wit(options);
        let take = Take::Lock(lock_options);
        self.take_grant((name, "guard"), ttl_ms, take, keep_alive, Guard)
            .await
    }

    async fn fencing_token(&mut self, guard: Resource<Guard>) -> wasmtime::Result<u64> {
        Ok(self.grant_of(&guard)?.token)
    }

    async fn expires_at_ms(&mut self, guard: Resource<Guard>) -> wasmtime::Result<u64> {
        Ok(self.grant_of(&guard)?.holding.expires_at_ms())
    }

    async fn owner(&mut self, guard: Resource<Guard>) -> wasmtime::Result<String> {
        Ok(self.grant_of(&guard)?.owner.clone())
    }

    async fn is_held(&mut self, guard: Resource<Guard>) -> wasmtime::Result<bool> {
        self.grant_is_held(guard).await
    }

    async fn extend(&mut self, guard: Resource<Guard>, ttl_ms: u32) -> WitResult<types::Grant> {
        self.extend_grant(guard, ttl_ms).await
    }

    async fn release(&mut self, guard: Resource<Guard>) -> WitResult<()> {
        self.release_grant(guard).await
    }

    async fn subscribe_lost(
        &mut self,
        guard: Resource<Guard>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.subscribe_grant_lost(guard)
    }

    async fn drop(&mut self, guard: Resource<Guard>) -> wasmtime::Result<()> {
        self.drop_grant(guard).await
    }
}

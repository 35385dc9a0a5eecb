//! The `holds` interface of `lockd:lock@0.2.0`: shared locks, exclusive
//! locks and permits held by a `hold` resource, a guard of any mode
//! (docs/contract.md#c21-shared, #c22-semaphores, #c14-guards). What it
//! shares with `guard` is in [`super::grants`].

use lockd_core::Claim;
use wasmtime::component::{Access, Accessor, FutureReader, Resource};

use super::convert::{guard_options_from_wit, WitResult};
use super::grants;
use super::wit::{guards, holds, types};
use crate::ctx::{HasLockCtx, LockCtxView};
use crate::grants::Take;
use crate::resources::Hold;

impl holds::Host for LockCtxView<'_> {}

/// Takes `name` for `claim` as a hold.
async fn take_hold<U>(
    accessor: &Accessor<U, HasLockCtx>,
    name: String,
    claim: Claim,
    ttl_ms: u32,
    options: guards::GuardOptions,
) -> WitResult<Resource<Hold>> {
    let (mut lock_options, keep_alive) = guard_options_from_wit(options);
    lock_options.claim = claim;
    let take = (Take::Lock(lock_options), keep_alive);
    grants::acquire(accessor, (name, "guard"), ttl_ms, take, Hold).await
}

impl<U> holds::HostHoldWithStore<U> for HasLockCtx {
    async fn acquire(
        accessor: &Accessor<U, Self>,
        name: String,
        mode: holds::HoldMode,
        ttl_ms: u32,
        options: guards::GuardOptions,
    ) -> WitResult<Resource<Hold>> {
        let claim = match mode {
            holds::HoldMode::Exclusive => Claim::Exclusive,
            holds::HoldMode::Shared => Claim::Shared,
        };
        take_hold(accessor, name, claim, ttl_ms, options).await
    }

    async fn acquire_permit(
        accessor: &Accessor<U, Self>,
        name: String,
        permits: u32,
        ttl_ms: u32,
        options: guards::GuardOptions,
    ) -> WitResult<Resource<Hold>> {
        take_hold(accessor, name, Claim::Permit { permits }, ttl_ms, options).await
    }

    async fn is_held(accessor: &Accessor<U, Self>, hold: Resource<Hold>) -> wasmtime::Result<bool> {
        grants::is_held(accessor, hold).await
    }

    async fn extend(
        accessor: &Accessor<U, Self>,
        hold: Resource<Hold>,
        ttl_ms: u32,
    ) -> WitResult<types::Grant> {
        grants::extend(accessor, hold, ttl_ms).await
    }

    async fn release(accessor: &Accessor<U, Self>, hold: Resource<Hold>) -> WitResult<()> {
        grants::release(accessor, hold).await
    }

    fn lost(
        access: Access<'_, U, Self>,
        hold: Resource<Hold>,
    ) -> wasmtime::Result<FutureReader<types::LostReason>> {
        grants::lost_future(access, hold)
    }
}

impl holds::HostHold for LockCtxView<'_> {
    fn fencing_token(&mut self, hold: Resource<Hold>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&hold)?.0.token)
    }

    fn expires_at_ms(&mut self, hold: Resource<Hold>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&hold)?.0.holding.expires_at_ms())
    }

    fn owner(&mut self, hold: Resource<Hold>) -> wasmtime::Result<String> {
        Ok(self.table.get(&hold)?.0.owner.clone())
    }

    /// A resource drop cannot wait: the hold's own drop gives its grant
    /// back at once (detached), and the TTL remains the safety net.
    fn drop(&mut self, hold: Resource<Hold>) -> wasmtime::Result<()> {
        self.table.delete(hold)?;
        Ok(())
    }
}

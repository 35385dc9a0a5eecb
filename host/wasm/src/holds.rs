//! The `holds` interface: shared locks, exclusive locks and permits held by a
//! `hold` resource, a guard of any mode (docs/contract.md#c21-shared,
//! #c22-semaphores, #c14-guards).

use lockd_core::Claim;
use wasmtime::component::Resource;
use wasmtime_wasi_io::poll::DynPollable;

use crate::convert::{guard_options_from_wit, WitResult};
use crate::ctx::LockCtxView;
use crate::grants::Take;
use crate::resources::Hold;
use crate::wit::{guards, holds, types};

impl holds::Host for LockCtxView<'_> {}

impl holds::HostHold for LockCtxView<'_> {
    async fn acquire(
        &mut self,
        name: String,
        mode: holds::HoldMode,
        ttl_ms: u32,
        options: guards::GuardOptions,
    ) -> WitResult<Resource<Hold>> {
        let claim = match mode {
            holds::HoldMode::Exclusive => Claim::Exclusive,
            holds::HoldMode::Shared => Claim::Shared,
        };
        self.take_hold(name, claim, ttl_ms, options).await
    }

    async fn acquire_permit(
        &mut self,
        name: String,
        permits: u32,
        ttl_ms: u32,
        options: guards::GuardOptions,
    ) -> WitResult<Resource<Hold>> {
        self.take_hold(name, Claim::Permit { permits }, ttl_ms, options)
            .await
    }

    async fn fencing_token(&mut self, hold: Resource<Hold>) -> wasmtime::Result<u64> {
        Ok(self.grant_of(&hold)?.token)
    }

    async fn expires_at_ms(&mut self, hold: Resource<Hold>) -> wasmtime::Result<u64> {
        Ok(self.grant_of(&hold)?.holding.expires_at_ms())
    }

    async fn owner(&mut self, hold: Resource<Hold>) -> wasmtime::Result<String> {
        Ok(self.grant_of(&hold)?.owner.clone())
    }

    async fn is_held(&mut self, hold: Resource<Hold>) -> wasmtime::Result<bool> {
        self.grant_is_held(hold).await
    }

    async fn extend(&mut self, hold: Resource<Hold>, ttl_ms: u32) -> WitResult<types::Grant> {
        self.extend_grant(hold, ttl_ms).await
    }

    async fn release(&mut self, hold: Resource<Hold>) -> WitResult<()> {
        self.release_grant(hold).await
    }

    async fn subscribe_lost(
        &mut self,
        hold: Resource<Hold>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.subscribe_grant_lost(hold)
    }

    async fn drop(&mut self, hold: Resource<Hold>) -> wasmtime::Result<()> {
        self.drop_grant(hold).await
    }
}

impl LockCtxView<'_> {
    async fn take_hold(
        &mut self,
        name: String,
        claim: Claim,
        ttl_ms: u32,
        options: guards::GuardOptions,
    ) -> WitResult<Resource<Hold>> {
        let (mut lock_options, keep_alive) = guard_options_from_wit(options);
        lock_options.claim = claim;
        // A guard's owner (docs/contract.md#c14-guards), whatever the mode.
        let take = Take::Lock(lock_options);
        self.take_grant((name, "guard"), ttl_ms, take, keep_alive, Hold)
            .await
    }
}

//! The `rwlocks` interface (shared locks and a name's full state) and the
//! `semaphores` interface (docs/contract.md#c21-shared, #c22-semaphores).
//! Glue only: `LockService` decides.

use lockd_core::Claim;

use crate::convert::{grant_to_wit, lock_options_from_wit, name_state_to_wit, to_wit, WitResult};
use crate::ctx::LockCtxView;
use crate::wit::{locks, rwlocks, semaphores, types};

impl rwlocks::Host for LockCtxView<'_> {
    async fn lock_shared(
        &mut self,
        name: String,
        owner: String,
        ttl_ms: u32,
        options: locks::LockOptions,
    ) -> WitResult<types::Grant> {
        self.lock_claim(name, owner, ttl_ms, options, Claim::Shared)
            .await
    }

    async fn describe(&mut self, name: String) -> WitResult<rwlocks::NameState> {
        let ctx = &self.ctx;
        Ok(ctx
            .service
            .describe(&ctx.namespace, &name)
            .await
            .map(name_state_to_wit)
            .map_err(to_wit))
    }
}

impl semaphores::Host for LockCtxView<'_> {
    async fn acquire(
        &mut self,
        name: String,
        owner: String,
        permits: u32,
        ttl_ms: u32,
        options: locks::LockOptions,
    ) -> WitResult<types::Grant> {
        self.lock_claim(name, owner, ttl_ms, options, Claim::Permit { permits })
            .await
    }
}

impl LockCtxView<'_> {
    /// `lock` of `name` for `claim`.
    async fn lock_claim(
        &mut self,
        name: String,
        owner: String,
        ttl_ms: u32,
        options: locks::LockOptions,
        claim: Claim,
    ) -> WitResult<types::Grant> {
        let options = lockd_core::LockOptions {
            claim,
            ..lock_options_from_wit(options)
        };
        let ctx = &self.ctx;
        Ok(ctx
            .service
            .lock(&ctx.namespace, &name, &owner, u64::from(ttl_ms), options)
            .await
            .map(grant_to_wit)
            .map_err(to_wit))
    }
}

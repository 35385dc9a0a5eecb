//! The `locks` interface (and the empty host of `types`): named locks with
//! owners the guest chooses. Glue only: every decision is made by
//! `LockService` and the backend behind it.

use crate::convert::{grant_to_wit, info_to_wit, lock_options_from_wit, to_wit, WitResult};
use crate::ctx::LockCtxView;
use crate::wit::{locks, types};

impl types::Host for LockCtxView<'_> {}

impl locks::Host for LockCtxView<'_> {
    async fn lock(
        &mut self,
        name: String,
        owner: String,
        ttl_ms: u32,
        options: locks::LockOptions,
    ) -> WitResult<types::Grant> {
        let ctx = &self.ctx;
        Ok(ctx
            .service
            .lock(
                &ctx.namespace,
                &name,
                &owner,
                u64::from(ttl_ms),
                lock_options_from_wit(options),
            )
            .await
            .map(grant_to_wit)
            .map_err(to_wit))
    }

    async fn unlock(
        &mut self,
        name: String,
        owner: String,
        fencing_token: Option<u64>,
    ) -> WitResult<()> {
        let ctx = &self.ctx;
        Ok(ctx
            .service
            .unlock(&ctx.namespace, &name, &owner, fencing_token)
            .await
            .map_err(to_wit))
    }

    async fn extend(
        &mut self,
        name: String,
        owner: String,
        ttl_ms: u32,
    ) -> WitResult<types::Grant> {
        let ctx = &self.ctx;
        Ok(ctx
            .service
            .extend(&ctx.namespace, &name, &owner, u64::from(ttl_ms))
            .await
            .map(grant_to_wit)
            .map_err(to_wit))
    }

    async fn get(&mut self, name: String) -> WitResult<Option<types::LockInfo>> {
        let ctx = &self.ctx;
        Ok(ctx
            .service
            .get(&ctx.namespace, &name)
            .await
            .map(|info| info.map(info_to_wit))
            .map_err(to_wit))
    }
}

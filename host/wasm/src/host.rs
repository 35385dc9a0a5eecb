//! Host implementations of the WIT interfaces. Glue only: every decision is
//! made by `LockService` and the backend behind it.

use lockd_core::{LockError, LockOptions};
use wasmtime::component::Resource;

use crate::bindings::{guards, locks, types};
use crate::ctx::LockCtxView;
use crate::errors::{durability_from_wit, info_to_wit, to_wit};
use crate::guard::{fresh_owner, Guard};

type WitResult<T> = wasmtime::Result<Result<T, types::Error>>;

fn options_from_wit(options: locks::LockOptions) -> LockOptions {
    LockOptions {
        wait_ms: u64::from(options.wait_ms),
        durability: durability_from_wit(options.durability),
        ..LockOptions::default()
    }
}

fn grant_to_wit(grant: lockd_core::Grant) -> types::Grant {
    types::Grant {
        fencing_token: grant.fencing_token,
        expires_at_ms: grant.expires_at_ms,
    }
}

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
                options_from_wit(options),
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

impl guards::Host for LockCtxView<'_> {}

impl guards::HostGuard for LockCtxView<'_> {
    async fn acquire(
        &mut self,
        name: String,
        ttl_ms: u32,
        options: locks::LockOptions,
    ) -> WitResult<Resource<Guard>> {
        if self.ctx.live_guards.len() >= self.ctx.max_guards {
            return Ok(Err(to_wit(LockError::Denied(format!(
                "this instance already holds {} guards, the most allowed",
                self.ctx.max_guards
            )))));
        }
        let owner = match fresh_owner() {
            Ok(owner) => owner,
            Err(e) => {
                return Ok(Err(to_wit(LockError::Unavailable(format!(
                    "no randomness for a guard owner: {e}"
                )))))
            }
        };
        let ctx = &mut *self.ctx;
        let grant = match ctx
            .service
            .lock(
                &ctx.namespace,
                &name,
                &owner,
                u64::from(ttl_ms),
                options_from_wit(options),
            )
            .await
        {
            Ok(grant) => grant,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        let id = ctx.next_guard_id;
        ctx.next_guard_id += 1;
        let guard = Guard {
            id,
            name,
            owner,
            token: grant.fencing_token,
            expires_at_ms: grant.expires_at_ms,
            released: false,
        };
        match self.table.push(guard.clone()) {
            Ok(resource) => {
                ctx.live_guards
                    .insert(id, (guard.name, guard.owner, guard.token));
                Ok(Ok(resource))
            }
            Err(e) => {
                // No handle for the guest: give the lock back at once.
                ctx.service.release_detached(
                    &ctx.namespace,
                    &guard.name,
                    &guard.owner,
                    guard.token,
                );
                Ok(Err(to_wit(LockError::Denied(format!(
                    "resource table is full: {e}"
                )))))
            }
        }
    }

    async fn fencing_token(&mut self, guard: Resource<Guard>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&guard)?.token)
    }

    async fn expires_at_ms(&mut self, guard: Resource<Guard>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&guard)?.expires_at_ms)
    }

    async fn owner(&mut self, guard: Resource<Guard>) -> wasmtime::Result<String> {
        Ok(self.table.get(&guard)?.owner.clone())
    }

    async fn is_held(&mut self, guard: Resource<Guard>) -> wasmtime::Result<bool> {
        let g = self.table.get(&guard)?.clone();
        if g.released {
            return Ok(false);
        }
        let ctx = &self.ctx;
        Ok(match ctx.service.get(&ctx.namespace, &g.name).await {
            Ok(Some(info)) => info.owner == g.owner && info.fencing_token == g.token,
            Ok(None) => false,
            // Unknown is not "held": a caller acting on `true` must be right.
            Err(_) => false,
        })
    }

    async fn extend(&mut self, guard: Resource<Guard>, ttl_ms: u32) -> WitResult<types::Grant> {
        let g = self.table.get(&guard)?.clone();
        if g.released {
            return Ok(Err(types::Error::NotHeld));
        }
        let ctx = &self.ctx;
        let grant = match ctx
            .service
            .extend(&ctx.namespace, &g.name, &g.owner, u64::from(ttl_ms))
            .await
        {
            Ok(grant) => grant,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        self.table.get_mut(&guard)?.expires_at_ms = grant.expires_at_ms;
        Ok(Ok(grant_to_wit(grant)))
    }

    async fn release(&mut self, guard: Resource<Guard>) -> WitResult<()> {
        let g = self.table.get(&guard)?.clone();
        if g.released {
            return Ok(Err(types::Error::NotHeld));
        }
        let ctx = &mut *self.ctx;
        let outcome = ctx
            .service
            .unlock(&ctx.namespace, &g.name, &g.owner, Some(g.token))
            .await;
        // Unless the store could not answer, this guard holds nothing now.
        if !matches!(outcome, Err(LockError::Unavailable(_))) {
            ctx.live_guards.remove(&g.id);
            self.table.get_mut(&guard)?.released = true;
        }
        Ok(outcome.map_err(to_wit))
    }

    async fn drop(&mut self, guard: Resource<Guard>) -> wasmtime::Result<()> {
        let g = self.table.delete(guard)?;
        let ctx = &mut *self.ctx;
        if ctx.live_guards.remove(&g.id).is_some() {
            // Not-held or not-owner here means the lease already ended; the
            // guest dropped the guard, so there is nobody to tell either way.
            let _ = ctx
                .service
                .unlock(&ctx.namespace, &g.name, &g.owner, Some(g.token))
                .await;
        }
        Ok(())
    }
}

//! Host implementations of the WIT interfaces. Glue only: every decision is
//! made by `LockService` and the backend behind it.

use lockd_core::{LockError, LockOptions};
use wasmtime::component::Resource;
use wasmtime_wasi_io::poll::{subscribe, DynPollable};

use crate::bindings::{guards, locks, types};
use crate::ctx::LockCtxView;
use crate::errors::{durability_from_wit, info_to_wit, to_wit};
use crate::guard::{fresh_owner, Guard};
use crate::liveness::{Liveness, Monitor, Subject};

pub(crate) type WitResult<T> = wasmtime::Result<Result<T, types::Error>>;

fn options_from_wit(options: locks::LockOptions) -> LockOptions {
    LockOptions {
        wait_ms: u64::from(options.wait_ms),
        durability: durability_from_wit(options.durability),
        ..LockOptions::default()
    }
}

pub(crate) fn grant_to_wit(grant: lockd_core::Grant) -> types::Grant {
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

impl LockCtxView<'_> {
    /// `acquire` and `acquire-with`: take the lock for a fresh owner and
    /// hand the guest a guard.
    async fn acquire_guard(
        &mut self,
        name: String,
        ttl_ms: u32,
        options: LockOptions,
        keep_alive: bool,
    ) -> WitResult<Resource<Guard>> {
        if let Err(e) = self.ctx.check_room() {
            return Ok(Err(to_wit(e)));
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
        let ttl_ms = u64::from(ttl_ms);
        let grant = match ctx
            .service
            .lock(&ctx.namespace, &name, &owner, ttl_ms, options)
            .await
        {
            Ok(grant) => grant,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        let id = ctx.next_guard_id;
        ctx.next_guard_id += 1;
        let liveness = Liveness::new(grant.expires_at_ms, ttl_ms);
        let subject = Subject::Guard {
            namespace: ctx.namespace.clone(),
            name: name.clone(),
            owner: owner.clone(),
            token: grant.fencing_token,
        };
        let monitor = keep_alive
            .then(|| Monitor::start(ctx.service.clone(), liveness.clone(), subject, true));
        let guard = Guard {
            id,
            name: name.clone(),
            owner: owner.clone(),
            token: grant.fencing_token,
            released: false,
            liveness,
            monitor,
        };
        match self.table.push(guard) {
            Ok(resource) => {
                ctx.live_guards
                    .insert(id, (name, owner, grant.fencing_token));
                Ok(Ok(resource))
            }
            Err(e) => {
                // No handle for the guest: give the lock back at once.
                ctx.service
                    .release_detached(&ctx.namespace, &name, &owner, grant.fencing_token);
                Ok(Err(to_wit(LockError::Denied(format!(
                    "resource table is full: {e}"
                )))))
            }
        }
    }
}

impl guards::HostGuard for LockCtxView<'_> {
    async fn acquire(
        &mut self,
        name: String,
        ttl_ms: u32,
        options: locks::LockOptions,
    ) -> WitResult<Resource<Guard>> {
        self.acquire_guard(name, ttl_ms, options_from_wit(options), false)
            .await
    }

    async fn acquire_with(
        &mut self,
        name: String,
        ttl_ms: u32,
        options: guards::GuardOptions,
    ) -> WitResult<Resource<Guard>> {
        let lock_options = LockOptions {
            wait_ms: u64::from(options.wait_ms),
            durability: durability_from_wit(options.durability),
            ..LockOptions::default()
        };
        self.acquire_guard(name, ttl_ms, lock_options, options.keep_alive)
            .await
    }

    async fn fencing_token(&mut self, guard: Resource<Guard>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&guard)?.token)
    }

    async fn expires_at_ms(&mut self, guard: Resource<Guard>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&guard)?.liveness.expires_at_ms())
    }

    async fn owner(&mut self, guard: Resource<Guard>) -> wasmtime::Result<String> {
        Ok(self.table.get(&guard)?.owner.clone())
    }

    async fn is_held(&mut self, guard: Resource<Guard>) -> wasmtime::Result<bool> {
        let g = self.table.get(&guard)?;
        if g.released || g.liveness.is_lost() {
            return Ok(false);
        }
        let (name, owner, token) = (g.name.clone(), g.owner.clone(), g.token);
        let ctx = &self.ctx;
        Ok(match ctx.service.get(&ctx.namespace, &name).await {
            Ok(Some(info)) => info.owner == owner && info.fencing_token == token,
            Ok(None) => false,
            // Unknown is not "held": a caller acting on `true` must be right.
            Err(_) => false,
        })
    }

    async fn extend(&mut self, guard: Resource<Guard>, ttl_ms: u32) -> WitResult<types::Grant> {
        let g = self.table.get(&guard)?;
        if g.released {
            return Ok(Err(types::Error::NotHeld));
        }
        let (name, owner) = (g.name.clone(), g.owner.clone());
        let ctx = &self.ctx;
        let grant = match ctx
            .service
            .extend(&ctx.namespace, &name, &owner, u64::from(ttl_ms))
            .await
        {
            Ok(grant) => grant,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        self.table
            .get(&guard)?
            .liveness
            .renewed(grant.expires_at_ms, u64::from(ttl_ms));
        Ok(Ok(grant_to_wit(grant)))
    }

    async fn release(&mut self, guard: Resource<Guard>) -> WitResult<()> {
        let g = self.table.get(&guard)?;
        if g.released {
            return Ok(Err(types::Error::NotHeld));
        }
        let (id, name, owner, token) = (g.id, g.name.clone(), g.owner.clone(), g.token);
        let ctx = &mut *self.ctx;
        let outcome = ctx
            .service
            .unlock(&ctx.namespace, &name, &owner, Some(token))
            .await;
        // Unless the store could not answer, this guard holds nothing now.
        if !matches!(outcome, Err(LockError::Unavailable(_))) {
            ctx.live_guards.remove(&id);
            let g = self.table.get_mut(&guard)?;
            g.released = true;
            g.monitor = None;
            g.liveness.mark_lost();
        }
        Ok(outcome.map_err(to_wit))
    }

    async fn subscribe_lost(
        &mut self,
        guard: Resource<Guard>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let namespace = self.ctx.namespace.clone();
        let service = self.ctx.service.clone();
        let g = self.table.get_mut(&guard)?;
        if g.monitor.is_none() && !g.released && !g.liveness.is_lost() {
            // Watch its expiry from now on (keep-alive guards are watched
            // already).
            let subject = Subject::Guard {
                namespace,
                name: g.name.clone(),
                owner: g.owner.clone(),
                token: g.token,
            };
            g.monitor = Some(Monitor::start(service, g.liveness.clone(), subject, false));
        }
        let pollable = g.liveness.lost_pollable();
        let pollable = self.table.push(pollable)?;
        subscribe(self.table, pollable)
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
        g.liveness.mark_lost();
        Ok(())
    }
}

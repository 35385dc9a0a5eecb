//! The `guards` interface: a lock held by a `guard` resource whose owner the
//! host picks, released when the guard is dropped
//! (docs/contract.md#c15-guards).

use lockd_core::{random_id, LockError, LockOptions};
use wasmtime::component::Resource;
use wasmtime_wasi_io::poll::DynPollable;

use crate::convert::{
    grant_to_wit, guard_options_from_wit, lock_options_from_wit, to_wit, WitResult,
};
use crate::ctx::LockCtxView;
use crate::liveness::{now_ms, subscribe_lost, terms};
use crate::resources::Guard;
use crate::wit::{guards, locks, types};

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
        let slot = match self.ctx.guard_slot() {
            Ok(slot) => slot,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        // Random, so that another guest in the same namespace cannot guess
        // it and release the lock.
        let owner = match random_id("guard") {
            Ok(owner) => owner,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        let ctx = &self.ctx;
        let ttl_ms = u64::from(ttl_ms);
        let sent_at_ms = now_ms();
        let grant = match ctx
            .service
            .lock(&ctx.namespace, &name, &owner, ttl_ms, options)
            .await
        {
            Ok(grant) => grant,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        let mut guard = Guard::new(
            ctx.service.clone(),
            ctx.namespace.clone(),
            name,
            owner,
            grant.fencing_token,
            terms(sent_at_ms, ttl_ms, grant.expires_at_ms),
            slot,
        );
        if keep_alive {
            guard.keep_alive();
        }
        // If the table is full the guard is dropped, which gives the lock
        // back at once: the guest has no handle to release it with.
        Ok(self
            .table
            .push(guard)
            .map_err(|e| to_wit(LockError::Denied(format!("resource table is full: {e}")))))
    }
}

impl guards::HostGuard for LockCtxView<'_> {
    async fn acquire(
        &mut self,
        name: String,
        ttl_ms: u32,
        options: locks::LockOptions,
    ) -> WitResult<Resource<Guard>> {
        self.acquire_guard(name, ttl_ms, lock_options_from_wit(options), false)
            .await
    }

    async fn acquire_with(
        &mut self,
        name: String,
        ttl_ms: u32,
        options: guards::GuardOptions,
    ) -> WitResult<Resource<Guard>> {
        let (lock_options, keep_alive) = guard_options_from_wit(options);
        self.acquire_guard(name, ttl_ms, lock_options, keep_alive)
            .await
    }

    async fn fencing_token(&mut self, guard: Resource<Guard>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&guard)?.token)
    }

    async fn expires_at_ms(&mut self, guard: Resource<Guard>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&guard)?.holding.expires_at_ms())
    }

    async fn owner(&mut self, guard: Resource<Guard>) -> wasmtime::Result<String> {
        Ok(self.table.get(&guard)?.owner.clone())
    }

    async fn is_held(&mut self, guard: Resource<Guard>) -> wasmtime::Result<bool> {
        let g = self.table.get(&guard)?;
        if g.is_released() || g.holding.is_lost() {
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
        if g.is_released() {
            return Ok(Err(types::Error::NotHeld));
        }
        let (name, owner) = (g.name.clone(), g.owner.clone());
        let ctx = &self.ctx;
        let sent_at_ms = now_ms();
        let grant = match ctx
            .service
            .extend(&ctx.namespace, &name, &owner, u64::from(ttl_ms))
            .await
        {
            Ok(grant) => grant,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        let renewed = terms(sent_at_ms, u64::from(ttl_ms), grant.expires_at_ms);
        self.table.get(&guard)?.holding.renewed(renewed);
        Ok(Ok(grant_to_wit(grant)))
    }

    async fn release(&mut self, guard: Resource<Guard>) -> WitResult<()> {
        let g = self.table.get(&guard)?;
        if g.is_released() {
            return Ok(Err(types::Error::NotHeld));
        }
        let outcome = g.unlock().await;
        // Unless the store could not answer, this guard holds nothing now.
        if !matches!(outcome, Err(LockError::Unavailable(_))) {
            self.table.get_mut(&guard)?.mark_released();
        }
        Ok(outcome.map_err(to_wit))
    }

    async fn subscribe_lost(
        &mut self,
        guard: Resource<Guard>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let g = self.table.get_mut(&guard)?;
        // Keep-alive guards are watched already; others from now on.
        g.watch();
        let holding = g.holding.clone();
        subscribe_lost(self.table, &holding)
    }

    async fn drop(&mut self, guard: Resource<Guard>) -> wasmtime::Result<()> {
        let mut g = self.table.delete(guard)?;
        if !g.is_released() {
            // Not-held or not-owner here means it was lost already; the guest
            // dropped the guard, so there is nobody to tell either way.
            let _ = g.unlock().await;
        }
        g.mark_released();
        Ok(())
    }
}

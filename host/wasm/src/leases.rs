//! The `leases` interface: a `lease` resource that owns the locks taken
//! under it, revoked when the lease is dropped
//! (docs/contract.md#c16-leases).

use lockd_core::LockError;
use wasmtime::component::Resource;
use wasmtime_wasi_io::poll::DynPollable;

use crate::convert::{durability_from_wit, grant_to_wit, to_wit, WitResult};
use crate::ctx::LockCtxView;
use crate::liveness::{now_ms, subscribe_lost, terms};
use crate::resources::Lease;
use crate::wit::{leases, types};

impl leases::Host for LockCtxView<'_> {}

impl leases::HostLease for LockCtxView<'_> {
    async fn grant(
        &mut self,
        ttl_ms: u32,
        options: leases::LeaseOptions,
    ) -> WitResult<Resource<Lease>> {
        let slot = match self.ctx.lease_slot() {
            Ok(slot) => slot,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        let ctx = &self.ctx;
        let ttl_ms = u64::from(ttl_ms);
        let sent_at_ms = now_ms();
        let granted = match ctx
            .service
            .grant_lease(
                &ctx.namespace,
                ttl_ms,
                durability_from_wit(options.durability),
            )
            .await
        {
            Ok(granted) => granted,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        let lease = Lease::new(
            ctx.service.clone(),
            ctx.namespace.clone(),
            granted.id,
            terms(sent_at_ms, ttl_ms, granted.expires_at_ms),
            options.keep_alive,
            slot,
        );
        // If the table is full the lease is dropped, which revokes it: the
        // guest has no handle to revoke it with.
        Ok(self
            .table
            .push(lease)
            .map_err(|e| to_wit(LockError::Denied(format!("resource table is full: {e}")))))
    }

    async fn id(&mut self, lease: Resource<Lease>) -> wasmtime::Result<String> {
        Ok(self.table.get(&lease)?.id.clone())
    }

    async fn expires_at_ms(&mut self, lease: Resource<Lease>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&lease)?.holding.expires_at_ms())
    }

    async fn lock(
        &mut self,
        lease: Resource<Lease>,
        name: String,
        wait_ms: u32,
    ) -> WitResult<types::Grant> {
        let id = self.table.get(&lease)?.id.clone();
        let ctx = &self.ctx;
        Ok(ctx
            .service
            .lock_in_lease(&ctx.namespace, &name, &id, u64::from(wait_ms))
            .await
            .map(grant_to_wit)
            .map_err(to_wit))
    }

    async fn unlock(&mut self, lease: Resource<Lease>, name: String) -> WitResult<()> {
        let id = self.table.get(&lease)?.id.clone();
        let ctx = &self.ctx;
        Ok(ctx
            .service
            .unlock(&ctx.namespace, &name, &id, None)
            .await
            .map_err(to_wit))
    }

    async fn refresh(&mut self, lease: Resource<Lease>) -> WitResult<u64> {
        let l = self.table.get(&lease)?;
        let (id, ttl_ms) = (l.id.clone(), l.holding.terms().ttl_ms);
        let ctx = &self.ctx;
        let sent_at_ms = now_ms();
        let expires_at_ms = match ctx.service.refresh_lease(&ctx.namespace, &id).await {
            Ok(expires_at_ms) => expires_at_ms,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        let renewed = terms(sent_at_ms, ttl_ms, expires_at_ms);
        self.table.get(&lease)?.holding.renewed(renewed);
        Ok(Ok(expires_at_ms))
    }

    async fn revoke(&mut self, lease: Resource<Lease>) -> WitResult<()> {
        let l = self.table.get(&lease)?;
        if l.is_revoked() {
            return Ok(Err(types::Error::NotHeld));
        }
        let outcome = l.revoke().await;
        // Unless the store could not answer, this lease holds nothing now.
        if !matches!(outcome, Err(LockError::Unavailable(_))) {
            self.table.get_mut(&lease)?.mark_revoked();
        }
        Ok(outcome.map(drop).map_err(to_wit))
    }

    async fn is_alive(&mut self, lease: Resource<Lease>) -> wasmtime::Result<bool> {
        let l = self.table.get(&lease)?;
        if l.is_revoked() || l.holding.is_lost() {
            return Ok(false);
        }
        let id = l.id.clone();
        let ctx = &self.ctx;
        // Unknown is not "alive": a caller acting on `true` must be right.
        Ok(matches!(
            ctx.service.get_lease(&ctx.namespace, &id).await,
            Ok(Some(_))
        ))
    }

    async fn subscribe_lost(
        &mut self,
        lease: Resource<Lease>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let holding = self.table.get(&lease)?.holding.clone();
        subscribe_lost(self.table, &holding)
    }

    async fn drop(&mut self, lease: Resource<Lease>) -> wasmtime::Result<()> {
        let mut l = self.table.delete(lease)?;
        if !l.is_revoked() {
            // Dropping a lease revokes it. Not-held means it already ended.
            let _ = l.revoke().await;
        }
        l.mark_revoked();
        Ok(())
    }
}

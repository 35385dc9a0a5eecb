//! The `leases` interface: the `lease` resource and its host functions
//! (docs/contract.md#c16-leases).

use std::sync::Arc;

use lockd_core::LockError;
use wasmtime::component::Resource;
use wasmtime_wasi_io::poll::{subscribe, DynPollable};

use crate::bindings::{leases, types};
use crate::ctx::LockCtxView;
use crate::errors::{durability_from_wit, to_wit};
use crate::host::{grant_to_wit, WitResult};
use crate::liveness::{Liveness, Monitor, Subject};

/// A lease held through the `leases` interface, as the host keeps it.
#[derive(Debug)]
pub struct Lease {
    pub(crate) id: String,
    pub(crate) ttl_ms: u64,
    pub(crate) revoked: bool,
    pub(crate) liveness: Arc<Liveness>,
    /// Hears that the lease ended and, with keep-alive, renews it. Aborted
    /// with the lease.
    pub(crate) monitor: Option<Monitor>,
}

impl leases::Host for LockCtxView<'_> {}

impl leases::HostLease for LockCtxView<'_> {
    async fn grant(
        &mut self,
        ttl_ms: u32,
        options: leases::LeaseOptions,
    ) -> WitResult<Resource<Lease>> {
        if let Err(e) = self.ctx.check_room() {
            return Ok(Err(to_wit(e)));
        }
        let ctx = &mut *self.ctx;
        let ttl_ms = u64::from(ttl_ms);
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
        let liveness = Liveness::new(granted.expires_at_ms, ttl_ms);
        // Always watched: a lease hears its end (a revoke from elsewhere)
        // without the guest asking.
        let monitor = Monitor::start(
            ctx.service.clone(),
            liveness.clone(),
            Subject::Lease {
                namespace: ctx.namespace.clone(),
                id: granted.id.clone(),
            },
            options.keep_alive,
        );
        let lease = Lease {
            id: granted.id.clone(),
            ttl_ms,
            revoked: false,
            liveness,
            monitor: Some(monitor),
        };
        match self.table.push(lease) {
            Ok(resource) => {
                ctx.live_leases.insert(granted.id);
                Ok(Ok(resource))
            }
            Err(e) => {
                let _ = ctx.service.revoke_lease(&ctx.namespace, &granted.id).await;
                Ok(Err(to_wit(LockError::Denied(format!(
                    "resource table is full: {e}"
                )))))
            }
        }
    }

    async fn id(&mut self, lease: Resource<Lease>) -> wasmtime::Result<String> {
        Ok(self.table.get(&lease)?.id.clone())
    }

    async fn expires_at_ms(&mut self, lease: Resource<Lease>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&lease)?.liveness.expires_at_ms())
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
        let (id, ttl_ms) = (l.id.clone(), l.ttl_ms);
        let ctx = &self.ctx;
        let expires_at_ms = match ctx.service.refresh_lease(&ctx.namespace, &id).await {
            Ok(expires_at_ms) => expires_at_ms,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        self.table
            .get(&lease)?
            .liveness
            .renewed(expires_at_ms, ttl_ms);
        Ok(Ok(expires_at_ms))
    }

    async fn revoke(&mut self, lease: Resource<Lease>) -> WitResult<()> {
        let l = self.table.get(&lease)?;
        if l.revoked {
            return Ok(Err(types::Error::NotHeld));
        }
        let id = l.id.clone();
        let ctx = &mut *self.ctx;
        let outcome = ctx.service.revoke_lease(&ctx.namespace, &id).await;
        // Unless the store could not answer, this lease holds nothing now.
        if !matches!(outcome, Err(LockError::Unavailable(_))) {
            ctx.live_leases.remove(&id);
            let l = self.table.get_mut(&lease)?;
            l.revoked = true;
            l.monitor = None;
            l.liveness.mark_lost();
        }
        Ok(outcome.map(drop).map_err(to_wit))
    }

    async fn is_alive(&mut self, lease: Resource<Lease>) -> wasmtime::Result<bool> {
        let l = self.table.get(&lease)?;
        if l.revoked || l.liveness.is_lost() {
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
        let pollable = self.table.get(&lease)?.liveness.lost_pollable();
        let pollable = self.table.push(pollable)?;
        subscribe(self.table, pollable)
    }

    async fn drop(&mut self, lease: Resource<Lease>) -> wasmtime::Result<()> {
        let l = self.table.delete(lease)?;
        let ctx = &mut *self.ctx;
        if ctx.live_leases.remove(&l.id) {
            // Dropping a lease revokes it. Not-held means it already ended.
            let _ = ctx.service.revoke_lease(&ctx.namespace, &l.id).await;
        }
        l.liveness.mark_lost();
        Ok(())
    }
}

//! The `leases` interface of `lockd:lock@0.2.0`: a `lease` resource that
//! owns the locks taken under it, revoked when the lease is dropped
//! (docs/contract.md#c16-leases), with its end as a `future`.
//!
//! The calls that reach the store copy the lease's id (and what they need
//! of it) out of the resource table and await without borrowing the
//! instance.

use std::sync::Arc;

use lockd_core::keepalive::Holding;
use lockd_core::{LockError, LockService};
use wasmtime::component::{Access, Accessor, FutureReader, Resource};

use super::abandon::unless_abandoned;
use super::convert::{durability_from_wit, grant_to_wit, lost_reason_to_wit, to_wit, WitResult};
use super::locks::place;
use super::wit::{leases, types};
use crate::ctx::{HasLockCtx, LockCtxView};
use crate::liveness::{lost, now_ms, terms, Ending};
use crate::resources::Lease;

impl leases::Host for LockCtxView<'_> {}

/// What a call on a lease awaits the store with, copied out of the table.
struct LeaseRef {
    service: LockService,
    namespace: String,
    id: String,
    holding: Arc<Holding>,
    ending: Arc<Ending>,
}

/// The lease behind `lease`; `not-held` once the guest revoked it here.
fn lease_ref<U>(
    accessor: &Accessor<U, HasLockCtx>,
    lease: &Resource<Lease>,
) -> wasmtime::Result<Result<LeaseRef, types::Error>> {
    accessor.with(|mut access| {
        let l = access.get().table.get(lease)?;
        if l.is_revoked() {
            return Ok(Err(types::Error::NotHeld));
        }
        let (service, namespace) = l.place();
        Ok(Ok(LeaseRef {
            service: service.clone(),
            namespace: namespace.to_string(),
            id: l.id.clone(),
            holding: l.holding.clone(),
            ending: l.ending.clone(),
        }))
    })
}

/// `let x = try_guest!(expr)`: the `Ok` of a guest-facing result, or return
/// its error to the guest.
macro_rules! try_guest {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        }
    };
}

impl<U> leases::HostLeaseWithStore<U> for HasLockCtx {
    async fn grant(
        accessor: &Accessor<U, Self>,
        ttl_ms: u32,
        options: leases::LeaseOptions,
    ) -> WitResult<Resource<Lease>> {
        let slot = try_guest!(accessor
            .with(|mut access| access.get().ctx.lease_slot())
            .map_err(to_wit));
        let (service, namespace) = place(accessor);
        let ttl_ms = u64::from(ttl_ms);
        let sent_at_ms = now_ms();
        let granted = try_guest!(service
            .grant_lease(&namespace, ttl_ms, durability_from_wit(options.durability))
            .await
            .map_err(to_wit));
        let lease = Lease::new(
            service,
            namespace,
            granted.id,
            terms(sent_at_ms, ttl_ms, granted.expires_at_ms),
            options.keep_alive,
            slot,
        );
        // If the table is full the lease is dropped, which revokes it: the
        // guest has no handle to revoke it with.
        Ok(accessor.with(|mut access| {
            access
                .get()
                .table
                .push(lease)
                .map_err(|e| to_wit(LockError::Denied(format!("resource table is full: {e}"))))
        }))
    }

    async fn lock(
        accessor: &Accessor<U, Self>,
        lease: Resource<Lease>,
        name: String,
        wait_ms: u32,
    ) -> WitResult<types::Grant> {
        let l = try_guest!(lease_ref(accessor, &lease)?);
        // Dropped while it waits (the call cancelled, or its task
        // abandoned), the core leaves the queue and gives back a grant made
        // meanwhile.
        let wait = l
            .service
            .lock_in_lease(&l.namespace, &name, &l.id, u64::from(wait_ms));
        Ok(unless_abandoned(accessor, wait)
            .await
            .map(grant_to_wit)
            .map_err(to_wit))
    }

    async fn unlock(
        accessor: &Accessor<U, Self>,
        lease: Resource<Lease>,
        name: String,
    ) -> WitResult<()> {
        let l = try_guest!(lease_ref(accessor, &lease)?);
        Ok(l.service
            .unlock(&l.namespace, &name, &l.id, None)
            .await
            .map_err(to_wit))
    }

    async fn refresh(accessor: &Accessor<U, Self>, lease: Resource<Lease>) -> WitResult<u64> {
        let l = try_guest!(lease_ref(accessor, &lease)?);
        let ttl_ms = l.holding.terms().ttl_ms;
        let sent_at_ms = now_ms();
        let expires_at_ms = try_guest!(l
            .service
            .refresh_lease(&l.namespace, &l.id)
            .await
            .map_err(to_wit));
        l.holding.renewed(terms(sent_at_ms, ttl_ms, expires_at_ms));
        Ok(Ok(expires_at_ms))
    }

    async fn revoke(accessor: &Accessor<U, Self>, lease: Resource<Lease>) -> WitResult<()> {
        let l = try_guest!(lease_ref(accessor, &lease)?);
        l.ending.set_releasing(true);
        let outcome = l.service.revoke_lease(&l.namespace, &l.id).await;
        if matches!(outcome, Err(LockError::Unavailable(_))) {
            l.ending.set_releasing(false);
        }
        // Unless the store could not answer, this lease holds nothing now.
        if !matches!(outcome, Err(LockError::Unavailable(_))) {
            accessor.with(|mut access| -> wasmtime::Result<()> {
                access.get().table.get_mut(&lease)?.mark_revoked();
                Ok(())
            })?;
        }
        Ok(outcome.map(drop).map_err(to_wit))
    }

    async fn is_alive(
        accessor: &Accessor<U, Self>,
        lease: Resource<Lease>,
    ) -> wasmtime::Result<bool> {
        let Ok(l) = lease_ref(accessor, &lease)? else {
            return Ok(false);
        };
        if l.holding.is_lost() {
            return Ok(false);
        }
        // Unknown is not "alive": a caller acting on `true` must be right.
        Ok(matches!(
            l.service.get_lease(&l.namespace, &l.id).await,
            Ok(Some(_))
        ))
    }

    fn lost(
        mut access: Access<'_, U, Self>,
        lease: Resource<Lease>,
    ) -> wasmtime::Result<FutureReader<types::LostReason>> {
        // A lease is always watched (from its grant): nothing to start.
        let l = access.get().table.get(&lease)?;
        let cause = lost(&l.holding, l.ending.clone());
        FutureReader::new(&mut access, async move {
            Ok::<_, wasmtime::Error>(lost_reason_to_wit(cause.await))
        })
    }
}

impl leases::HostLease for LockCtxView<'_> {
    fn id(&mut self, lease: Resource<Lease>) -> wasmtime::Result<String> {
        Ok(self.table.get(&lease)?.id.clone())
    }

    fn expires_at_ms(&mut self, lease: Resource<Lease>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&lease)?.holding.expires_at_ms())
    }

    /// A resource drop cannot wait: the lease's own drop revokes it on the
    /// runtime (detached), and the TTL remains the safety net.
    fn drop(&mut self, lease: Resource<Lease>) -> wasmtime::Result<()> {
        self.table.delete(lease)?;
        Ok(())
    }
}

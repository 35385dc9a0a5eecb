//! The `guards` interface of `lockd:lock@0.2.0`: a lock held by a `guard`
//! resource whose owner the host picks, released when the guard is dropped
//! (docs/contract.md#c14-guards), with its loss as a `future`.
//!
//! The calls that reach the store copy what they need out of the resource
//! table ([`Granted`]) and await without borrowing the instance.

use wasmtime::component::{Access, Accessor, FutureReader, Resource};

use super::convert::{grant_to_wit, guard_options_from_wit, lost_reason_to_wit, to_wit, WitResult};
use super::wit::{guards, types};
use crate::ctx::{HasLockCtx, LockCtxView};
use crate::grants::Take;
use crate::liveness::lost;
use crate::resources::{Granted, Guard};

impl guards::Host for LockCtxView<'_> {}

/// The grant of `guard`, copied out of the table; `not-held` once the guest
/// released it here.
fn granted<U>(
    accessor: &Accessor<U, HasLockCtx>,
    guard: &Resource<Guard>,
) -> wasmtime::Result<Result<Granted, types::Error>> {
    accessor.with(|mut access| {
        let held = &access.get().table.get(guard)?.0;
        Ok(if held.is_released() {
            Err(types::Error::NotHeld)
        } else {
            Ok(held.granted().clone())
        })
    })
}

impl<U> guards::HostGuardWithStore<U> for HasLockCtx {
    async fn acquire(
        accessor: &Accessor<U, Self>,
        name: String,
        ttl_ms: u32,
        options: guards::GuardOptions,
    ) -> WitResult<Resource<Guard>> {
        let (lock_options, keep_alive) = guard_options_from_wit(options);
        let asking = match accessor.with(|mut access| access.get().asking("guard")) {
            Ok(asking) => asking,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        // Cancelled while it waits, the core leaves the queue; once granted,
        // nothing is awaited until the guard is in the table, whose drop
        // gives it back.
        let held = match asking
            .take(name, ttl_ms, Take::Lock(lock_options), keep_alive)
            .await
        {
            Ok(held) => held,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        Ok(accessor.with(|mut access| access.get().push_grant(held, Guard).map_err(to_wit)))
    }

    async fn is_held(
        accessor: &Accessor<U, Self>,
        guard: Resource<Guard>,
    ) -> wasmtime::Result<bool> {
        Ok(match granted(accessor, &guard)? {
            Ok(granted) => granted.is_held_in_store().await,
            Err(_) => false,
        })
    }

    async fn extend(
        accessor: &Accessor<U, Self>,
        guard: Resource<Guard>,
        ttl_ms: u32,
    ) -> WitResult<types::Grant> {
        let granted = match granted(accessor, &guard)? {
            Ok(granted) => granted,
            Err(e) => return Ok(Err(e)),
        };
        Ok(granted
            .extend(u64::from(ttl_ms))
            .await
            .map(grant_to_wit)
            .map_err(to_wit))
    }

    async fn release(accessor: &Accessor<U, Self>, guard: Resource<Guard>) -> WitResult<()> {
        let granted = match granted(accessor, &guard)? {
            Ok(granted) => granted,
            Err(e) => return Ok(Err(e)),
        };
        let outcome = granted.unlock().await;
        // Unless the store could not answer, this grant is gone now.
        if !matches!(outcome, Err(lockd_core::LockError::Unavailable(_))) {
            accessor.with(|mut access| -> wasmtime::Result<()> {
                access.get().table.get_mut(&guard)?.0.mark_released();
                Ok(())
            })?;
        }
        Ok(outcome.map_err(to_wit))
    }

    fn lost(
        mut access: Access<'_, U, Self>,
        guard: Resource<Guard>,
    ) -> wasmtime::Result<FutureReader<types::LostReason>> {
        let held = &mut access.get().table.get_mut(&guard)?.0;
        // Kept-alive guards are watched already; others from now on.
        held.watch();
        let cause = lost(&held.holding, held.ending.clone());
        FutureReader::new(&mut access, async move {
            Ok::<_, wasmtime::Error>(lost_reason_to_wit(cause.await))
        })
    }
}

impl guards::HostGuard for LockCtxView<'_> {
    fn fencing_token(&mut self, guard: Resource<Guard>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&guard)?.0.token)
    }

    fn expires_at_ms(&mut self, guard: Resource<Guard>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&guard)?.0.holding.expires_at_ms())
    }

    fn owner(&mut self, guard: Resource<Guard>) -> wasmtime::Result<String> {
        Ok(self.table.get(&guard)?.0.owner.clone())
    }

    /// A resource drop cannot wait: the guard's own drop gives the lock
    /// back at once (detached), and the TTL remains the safety net.
    fn drop(&mut self, guard: Resource<Guard>) -> wasmtime::Result<()> {
        self.table.delete(guard)?;
        Ok(())
    }
}

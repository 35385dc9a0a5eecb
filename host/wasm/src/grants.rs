//! What the resources that hold one grant (`guard`, `hold`, `leadership`)
//! do alike: taken for an owner the host generates, counted under the
//! instance's cap, kept alive, extended, released, dropped, and watched for
//! their loss (docs/contract.md#c14-guards, #c17-keep-alive, #c18-lost).

use lockd_core::{random_id, Claim, LockError, LockOptions, LockService};
use wasmtime::component::Resource;
use wasmtime_wasi_io::poll::DynPollable;

use crate::convert::{grant_to_wit, to_wit, WitResult};
use crate::ctx::LockCtxView;
use crate::liveness::{now_ms, subscribe_lost, terms};
use crate::resources::{HeldGrant, HoldsGrant, Slot};
use crate::wit::types;

/// How a grant is taken.
pub(crate) enum Take {
    /// `lock`, with the claim in its options.
    Lock(LockOptions),
    /// `campaign` with this value.
    Campaign(String, LockOptions),
}

impl Take {
    fn claim(&self) -> Claim {
        match self {
            Take::Lock(options) => options.claim,
            Take::Campaign(..) => Claim::Leader,
        }
    }
}

/// A grant about to be asked for: its place under the instance's cap and a
/// fresh owner, taken from the view before the store is awaited, so that
/// the wait borrows nothing of the instance.
pub(crate) struct Asking {
    service: LockService,
    namespace: String,
    owner: String,
    slot: Slot,
}

impl Asking {
    /// Asks the store for `name` for `ttl_ms` as `take` says, and answers
    /// the grant as the resource will hold it, renewed if `keep_alive`.
    ///
    /// Dropped while it waits (its call cancelled), it leaves the queue
    /// (the store gives back a grant made to it meanwhile); once it
    /// returns, the [`HeldGrant`] gives the grant back when dropped.
    pub(crate) async fn take(
        self,
        name: String,
        ttl_ms: u32,
        take: Take,
        keep_alive: bool,
    ) -> Result<HeldGrant, LockError> {
        let Asking {
            service,
            namespace,
            owner,
            slot,
        } = self;
        let ttl_ms = u64::from(ttl_ms);
        let claim = take.claim();
        let sent_at_ms = now_ms();
        let grant = match take {
            Take::Lock(options) => {
                service
                    .lock(&namespace, &name, &owner, ttl_ms, options)
                    .await?
            }
            Take::Campaign(value, options) => {
                service
                    .campaign(&namespace, &name, &owner, &value, ttl_ms, options)
                    .await?
            }
        };
        let mut held = HeldGrant::new(
            service,
            namespace,
            name,
            owner,
            (grant.fencing_token, claim),
            terms(sent_at_ms, ttl_ms, grant.expires_at_ms),
            slot,
        );
        if keep_alive {
            held.keep_alive();
        }
        Ok(held)
    }
}

impl LockCtxView<'_> {
    /// A place under the cap and a fresh owner (`prefix-` and 32 hex
    /// digits) for a grant to ask for; `denied` once the instance holds as
    /// many resources as allowed.
    pub(crate) fn asking(&self, prefix: &str) -> Result<Asking, LockError> {
        let slot = self.ctx.guard_slot()?;
        // Random, so that another guest in the same namespace cannot guess
        // it and release the grant.
        let owner = random_id(prefix)?;
        Ok(Asking {
            service: self.ctx.service.clone(),
            namespace: self.ctx.namespace.clone(),
            owner,
            slot,
        })
    }

    /// Hands the guest `held` as the resource `wrap` makes of it.
    pub(crate) fn push_grant<T: HoldsGrant>(
        &mut self,
        held: HeldGrant,
        wrap: fn(HeldGrant) -> T,
    ) -> Result<Resource<T>, LockError> {
        // If the table is full the resource is dropped, which gives the
        // grant back at once: the guest has no handle to release it with.
        self.table
            .push(wrap(held))
            .map_err(|e| LockError::Denied(format!("resource table is full: {e}")))
    }

    /// Takes `name` for a fresh owner (`prefix-` and 32 hex digits) and
    /// hands the guest the resource `wrap` makes of the grant.
    pub(crate) async fn take_grant<T: HoldsGrant>(
        &mut self,
        (name, prefix): (String, &str),
        ttl_ms: u32,
        take: Take,
        keep_alive: bool,
        wrap: fn(HeldGrant) -> T,
    ) -> WitResult<Resource<T>> {
        let asking = match self.asking(prefix) {
            Ok(asking) => asking,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        match asking.take(name, ttl_ms, take, keep_alive).await {
            Ok(held) => Ok(self.push_grant(held, wrap).map_err(to_wit)),
            Err(e) => Ok(Err(to_wit(e))),
        }
    }

    pub(crate) fn grant_of<T: HoldsGrant>(
        &self,
        resource: &Resource<T>,
    ) -> wasmtime::Result<&HeldGrant> {
        Ok(self.table.get(resource)?.grant())
    }

    pub(crate) async fn grant_is_held<T: HoldsGrant>(
        &mut self,
        resource: Resource<T>,
    ) -> wasmtime::Result<bool> {
        Ok(self.grant_of(&resource)?.is_held().await)
    }

    pub(crate) async fn extend_grant<T: HoldsGrant>(
        &mut self,
        resource: Resource<T>,
        ttl_ms: u32,
    ) -> WitResult<types::Grant> {
        let held = self.grant_of(&resource)?;
        if held.is_released() {
            return Ok(Err(types::Error::NotHeld));
        }
        Ok(held
            .extend(u64::from(ttl_ms))
            .await
            .map(grant_to_wit)
            .map_err(to_wit))
    }

    pub(crate) async fn release_grant<T: HoldsGrant>(
        &mut self,
        resource: Resource<T>,
    ) -> WitResult<()> {
        let held = self.grant_of(&resource)?;
        if held.is_released() {
            return Ok(Err(types::Error::NotHeld));
        }
        let outcome = held.unlock().await;
        // Unless the store could not answer, this grant is gone now.
        if !matches!(outcome, Err(LockError::Unavailable(_))) {
            self.table.get_mut(&resource)?.grant_mut().mark_released();
        }
        Ok(outcome.map_err(to_wit))
    }

    pub(crate) fn subscribe_grant_lost<T: HoldsGrant>(
        &mut self,
        resource: Resource<T>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let held = self.table.get_mut(&resource)?.grant_mut();
        // Kept-alive grants are watched already; others from now on.
        held.watch();
        let holding = held.holding.clone();
        subscribe_lost(self.table, &holding)
    }

    pub(crate) async fn drop_grant<T: HoldsGrant>(
        &mut self,
        resource: Resource<T>,
    ) -> wasmtime::Result<()> {
        let mut resource = self.table.delete(resource)?;
        let held = resource.grant_mut();
        if !held.is_released() {
            // Not-held or not-owner here means it was lost already; the
            // guest dropped the resource, so there is nobody to tell.
            let _ = held.unlock().await;
        }
        held.mark_released();
        Ok(())
    }
}

//! The `elections` interface of `lockd:lock@0.2.0`: a `leadership`
//! resource (a guard of an election, resigned when dropped) with its loss as
//! a `future`, `leader`, and the `leader-watch` resource whose `changed` is
//! an `async func` (docs/contract.md#c24-elections). What a leadership
//! shares with `guard` and `hold` is in [`super::grants`]; the watch's
//! follower is [`crate::watch`]'s, as for 0.1.0.

use lockd_core::LockError;
use wasmtime::component::{Access, Accessor, FutureReader, Resource};

use super::convert::{campaign_options_from_wit, leader_to_wit, to_wit, WitResult};
use super::grants;
use super::locks::place;
use super::wit::{elections, types};
use crate::ctx::{HasLockCtx, LockCtxView};
use crate::grants::Take;
use crate::resources::Leadership;
use crate::watch::LeaderWatch;

impl elections::Host for LockCtxView<'_> {}

impl<U> elections::HostWithStore<U> for HasLockCtx {
    async fn leader(
        accessor: &Accessor<U, Self>,
        name: String,
    ) -> WitResult<Option<elections::LeaderInfo>> {
        let (service, namespace) = place(accessor);
        Ok(service
            .leader(&namespace, &name)
            .await
            .map(|leader| leader.map(leader_to_wit))
            .map_err(to_wit))
    }
}

impl<U> elections::HostLeadershipWithStore<U> for HasLockCtx {
    async fn campaign(
        accessor: &Accessor<U, Self>,
        name: String,
        value: String,
        ttl_ms: u32,
        options: elections::CampaignOptions,
    ) -> WitResult<Resource<Leadership>> {
        let (options, keep_alive) = campaign_options_from_wit(options);
        let take = (Take::Campaign(value, options), keep_alive);
        grants::acquire(accessor, (name, "candidate"), ttl_ms, take, Leadership).await
    }

    async fn proclaim(
        accessor: &Accessor<U, Self>,
        leadership: Resource<Leadership>,
        value: String,
    ) -> WitResult<()> {
        let granted = match grants::granted(accessor, &leadership)? {
            Ok(granted) => granted,
            Err(e) => return Ok(Err(e)),
        };
        let (service, namespace) = granted.place();
        Ok(service
            .proclaim(
                namespace,
                &granted.name,
                &granted.owner,
                granted.token,
                &value,
            )
            .await
            .map_err(to_wit))
    }

    async fn extend(
        accessor: &Accessor<U, Self>,
        leadership: Resource<Leadership>,
        ttl_ms: u32,
    ) -> WitResult<types::Grant> {
        grants::extend(accessor, leadership, ttl_ms).await
    }

    async fn resign(
        accessor: &Accessor<U, Self>,
        leadership: Resource<Leadership>,
    ) -> WitResult<()> {
        grants::release(accessor, leadership).await
    }

    async fn is_leader(
        accessor: &Accessor<U, Self>,
        leadership: Resource<Leadership>,
    ) -> wasmtime::Result<bool> {
        grants::is_held(accessor, leadership).await
    }

    fn lost(
        access: Access<'_, U, Self>,
        leadership: Resource<Leadership>,
    ) -> wasmtime::Result<FutureReader<types::LostReason>> {
        grants::lost_future(access, leadership)
    }
}

impl elections::HostLeadership for LockCtxView<'_> {
    fn fencing_token(&mut self, leadership: Resource<Leadership>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&leadership)?.0.token)
    }

    fn candidate(&mut self, leadership: Resource<Leadership>) -> wasmtime::Result<String> {
        Ok(self.table.get(&leadership)?.0.owner.clone())
    }

    fn expires_at_ms(&mut self, leadership: Resource<Leadership>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&leadership)?.0.holding.expires_at_ms())
    }

    /// A resource drop cannot wait: the leadership's own drop resigns at
    /// once (detached), and the TTL remains the safety net.
    fn drop(&mut self, leadership: Resource<Leadership>) -> wasmtime::Result<()> {
        self.table.delete(leadership)?;
        Ok(())
    }
}

impl<U> elections::HostLeaderWatchWithStore<U> for HasLockCtx {
    async fn open(accessor: &Accessor<U, Self>, name: String) -> WitResult<Resource<LeaderWatch>> {
        let slot = match accessor.with(|mut access| access.get().ctx.guard_slot()) {
            Ok(slot) => slot,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        let (service, namespace) = place(accessor);
        let watch = match LeaderWatch::open(service, namespace, name, slot).await {
            Ok(watch) => watch,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        Ok(accessor.with(|mut access| {
            access
                .get()
                .table
                .push(watch)
                .map_err(|e| to_wit(LockError::Denied(format!("resource table is full: {e}"))))
        }))
    }

    async fn changed(
        accessor: &Accessor<U, Self>,
        watch: Resource<LeaderWatch>,
    ) -> wasmtime::Result<()> {
        let changed = accessor.with(|mut access| -> wasmtime::Result<_> {
            Ok(access.get().table.get(&watch)?.changed())
        })?;
        changed.await;
        Ok(())
    }

    async fn current(
        accessor: &Accessor<U, Self>,
        watch: Resource<LeaderWatch>,
    ) -> WitResult<Option<elections::LeaderInfo>> {
        let current = accessor.with(|mut access| -> wasmtime::Result<_> {
            Ok(access.get().table.get(&watch)?.current())
        })?;
        Ok(current
            .await
            .map(|leader| leader.map(leader_to_wit))
            .map_err(to_wit))
    }
}

impl elections::HostLeaderWatch for LockCtxView<'_> {
    fn drop(&mut self, watch: Resource<LeaderWatch>) -> wasmtime::Result<()> {
        self.table.delete(watch)?;
        Ok(())
    }
}

//! The `elections` interface: a `leadership` resource (a guard of an
//! election, resigned when dropped), `leader`, and the `leader-watch`
//! resource (docs/contract.md#c24-elections).

use lockd_core::LockError;
use wasmtime::component::Resource;
use wasmtime_wasi_io::poll::DynPollable;

use crate::convert::{campaign_options_from_wit, leader_to_wit, to_wit, WitResult};
use crate::ctx::LockCtxView;
use crate::grants::Take;
use crate::resources::Leadership;
use crate::watch::LeaderWatch;
use crate::wit::{elections, types};

impl elections::Host for LockCtxView<'_> {
    async fn leader(&mut self, name: String) -> WitResult<Option<elections::LeaderInfo>> {
        let ctx = &self.ctx;
        Ok(ctx
            .service
            .leader(&ctx.namespace, &name)
            .await
            .map(|leader| leader.map(leader_to_wit))
            .map_err(to_wit))
    }
}

impl elections::HostLeadership for LockCtxView<'_> {
    async fn campaign(
        &mut self,
        name: String,
        value: String,
        ttl_ms: u32,
        options: elections::CampaignOptions,
    ) -> WitResult<Resource<Leadership>> {
        let (lock_options, keep_alive) = campaign_options_from_wit(options);
        let take = Take::Campaign(value, lock_options);
        self.take_grant((name, "candidate"), ttl_ms, take, keep_alive, Leadership)
            .await
    }

    async fn fencing_token(&mut self, leadership: Resource<Leadership>) -> wasmtime::Result<u64> {
        Ok(self.grant_of(&leadership)?.token)
    }

    async fn candidate(&mut self, leadership: Resource<Leadership>) -> wasmtime::Result<String> {
        Ok(self.grant_of(&leadership)?.owner.clone())
    }

    async fn expires_at_ms(&mut self, leadership: Resource<Leadership>) -> wasmtime::Result<u64> {
        Ok(self.grant_of(&leadership)?.holding.expires_at_ms())
    }

    async fn proclaim(&mut self, leadership: Resource<Leadership>, value: String) -> WitResult<()> {
        let held = self.grant_of(&leadership)?;
        if held.is_released() {
            return Ok(Err(types::Error::NotHeld));
        }
        let (service, namespace) = held.place();
        Ok(service
            .proclaim(namespace, &held.name, &held.owner, held.token, &value)
            .await
            .map_err(to_wit))
    }

    async fn extend(
        &mut self,
        leadership: Resource<Leadership>,
        ttl_ms: u32,
    ) -> WitResult<types::Grant> {
        self.extend_grant(leadership, ttl_ms).await
    }

    async fn resign(&mut self, leadership: Resource<Leadership>) -> WitResult<()> {
        self.release_grant(leadership).await
    }

    async fn is_leader(&mut self, leadership: Resource<Leadership>) -> wasmtime::Result<bool> {
        self.grant_is_held(leadership).await
    }

    async fn subscribe_lost(
        &mut self,
        leadership: Resource<Leadership>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.subscribe_grant_lost(leadership)
    }

    async fn drop(&mut self, leadership: Resource<Leadership>) -> wasmtime::Result<()> {
        self.drop_grant(leadership).await
    }
}

impl elections::HostLeaderWatch for LockCtxView<'_> {
    async fn open(&mut self, name: String) -> WitResult<Resource<LeaderWatch>> {
        let slot = match self.ctx.guard_slot() {
            Ok(slot) => slot,
            Err(e) => return Ok(Err(to_wit(e))),
        };
        let ctx = &self.ctx;
        let watch =
            match LeaderWatch::open(ctx.service.clone(), ctx.namespace.clone(), name, slot).await {
                Ok(watch) => watch,
                Err(e) => return Ok(Err(to_wit(e))),
            };
        Ok(self
            .table
            .push(watch)
            .map_err(|e| to_wit(LockError::Denied(format!("resource table is full: {e}")))))
    }

    async fn subscribe(
        &mut self,
        watch: Resource<LeaderWatch>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let watch = self.table.get(&watch)?;
        // The pollable reads the watch's shared state, not the table.
        let pollable = watch.pollable();
        crate::watch::push_pollable(self.table, pollable)
    }

    async fn current(
        &mut self,
        watch: Resource<LeaderWatch>,
    ) -> WitResult<Option<elections::LeaderInfo>> {
        Ok(self
            .table
            .get(&watch)?
            .current()
            .await
            .map(|leader| leader.map(leader_to_wit))
            .map_err(to_wit))
    }

    async fn drop(&mut self, watch: Resource<LeaderWatch>) -> wasmtime::Result<()> {
        self.table.delete(watch)?;
        Ok(())
    }
}

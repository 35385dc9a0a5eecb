//! The engine as a [`LockBackend`]. The engine keeps every deadline in
//! the [`Clock`](crate::Clock)'s monotonic time; what it answers (a grant's or a holder's
//! `expires_at_ms`, a lease's expiry) is converted to wall-clock time here,
//! at the edge, and nowhere else (docs/contract.md#c8-expiry).

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use super::table::FxBuild;
use super::{Engine, Request};
use crate::backend::{BoxFuture, LockBackend};
use crate::error::LockError;
use crate::journal::Ticket;
use crate::limits::LockDelays;
use crate::metrics::{BackendStats, HoldTimes, NamespaceStats};
use crate::types::{
    Claim, Durability, Grant, Holding, Key, Leader, LeaseInfo, ListedLock, LockEvent, LockInfo,
    LockOptions, NameState,
};

impl Engine {
    /// A grant or `busy` answer, its expiry in wall-clock time (the
    /// engine's deadlines are monotonic: see [`Clock`](crate::Clock)).
    fn wall_grant(&self, result: Result<Grant, LockError>) -> Result<Grant, LockError> {
        match result {
            Ok(grant) => Ok(Grant {
                expires_at_ms: self.clock.to_wall_ms(grant.expires_at_ms),
                ..grant
            }),
            Err(LockError::Busy(info)) => Err(LockError::Busy(self.wall_info(info))),
            Err(e) => Err(e),
        }
    }

    /// `answer`, once nothing it may show is still waiting for the disk.
    ///
    /// What the engine's memory shows can run ahead of the journal: a
    /// change is decided and its op submitted at once, and becomes durable
    /// at the next group commit. A call acknowledged through its own op's
    /// ticket is behind it already (ops are durable in the order submitted).
    /// Every other answer that shows state (a read, `busy`, `not-held`,
    /// `not-owner`, a quota's `denied`) waits behind `barrier`, taken after
    /// the state was read, so no reply shows a change that a crash could
    /// take back (docs/contract.md#c10-durability). While the store cannot
    /// write, such answers are `unavailable`.
    async fn shown_behind<T: ShowsTokens>(
        &self,
        barrier: Ticket,
        answer: Result<T, LockError>,
    ) -> Result<T, LockError> {
        let token = match &answer {
            Err(LockError::InvalidArgument(_) | LockError::Unavailable(_)) => return answer,
            Err(LockError::Busy(info)) => info.fencing_token,
            Err(_) => 0,
            Ok(shown) => shown.highest_token(),
        };
        barrier.wait().await?;
        // An ephemeral holder's token has no record of its own: show it
        // only once a reservation covers it, so it is never issued again.
        self.tokens.make_durable(token, &*self.journal).await?;
        answer
    }

    /// [`Engine::shown_behind`] everything submitted so far: for answers
    /// that show many names (listings, a quota, leases).
    async fn shown<T: ShowsTokens>(&self, answer: Result<T, LockError>) -> Result<T, LockError> {
        match answer {
            Err(LockError::InvalidArgument(_) | LockError::Unavailable(_)) => answer,
            answer => self.shown_behind(self.journal.flushed(), answer).await,
        }
    }

    /// [`Engine::shown_behind`] the last op of `key`: an answer about one
    /// name (a read of it, or a refusal that shows its holder or its
    /// absence). A quota's `denied` shows the namespace's count, so it
    /// waits for everything.
    async fn shown_for<T: ShowsTokens>(
        &self,
        key: &Key,
        answer: Result<T, LockError>,
    ) -> Result<T, LockError> {
        match answer {
            Err(LockError::InvalidArgument(_) | LockError::Unavailable(_)) => answer,
            Err(LockError::Denied(_)) => self.shown(answer).await,
            answer => self.shown_behind(self.name_barrier(key), answer).await,
        }
    }

    /// [`Engine::shown_for`] an answer that is an error only: an `Ok` was
    /// acknowledged through its own op's ticket.
    async fn shown_if_refused_for<T: ShowsTokens>(
        &self,
        key: &Key,
        answer: Result<T, LockError>,
    ) -> Result<T, LockError> {
        match answer {
            Ok(acknowledged) => Ok(acknowledged),
            refused => self.shown_for(key, refused).await,
        }
    }

    /// [`Engine::shown`] an answer that is an error only: for calls about a
    /// lease, whose refusals show the lease's state.
    async fn shown_if_refused<T: ShowsTokens>(
        &self,
        answer: Result<T, LockError>,
    ) -> Result<T, LockError> {
        match answer {
            Ok(acknowledged) => Ok(acknowledged),
            refused => self.shown(refused).await,
        }
    }

    fn wall_holding(&self, holding: &mut Holding) {
        holding.info.expires_at_ms = self.clock.to_wall_ms(holding.info.expires_at_ms);
        holding.acquired_at_ms = holding.acquired_at_ms.map(|at| self.clock.to_wall_ms(at));
    }

    fn wall_info(&self, info: LockInfo) -> LockInfo {
        LockInfo {
            expires_at_ms: self.clock.to_wall_ms(info.expires_at_ms),
            ..info
        }
    }
}

impl LockBackend for Engine {
    fn lock<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        // A plain `lock` by a live lease's id is a lock under that lease
        // (docs/contract.md#c16-leases): never a lock with its own expiry.
        let lease = self
            .leases
            .live_owner_now(&key.namespace, owner, &*self.clock);
        let request = Request {
            owner,
            ttl_ms,
            options,
            value: None,
        };
        // Under a lease, a refusal may show the lease's end.
        let per_name = lease.is_none();
        let locking = self.lock_impl(key, request, lease);
        Box::pin(async move {
            let answer = locking.await;
            let shown = if per_name {
                self.shown_if_refused_for(key, answer).await
            } else {
                self.shown_if_refused(answer).await
            };
            self.wall_grant(shown)
        })
    }

    fn unlock<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        token: Option<u64>,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(async move {
            self.shown_if_refused_for(key, self.unlock_impl(key, owner, token).await)
                .await
        })
    }

    fn extend<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        Box::pin(async move {
            let extended = self.extend_impl(key, owner, ttl_ms).await;
            self.wall_grant(self.shown_if_refused_for(key, extended).await)
        })
    }

    fn get<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<LockInfo>, LockError>> {
        let info = self.get_impl(key).map(|i| self.wall_info(i));
        Box::pin(self.shown_for(key, Ok(info)))
    }

    fn list<'a>(
        &'a self,
        namespace: &'a str,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ListedLock>, LockError>> {
        let mut locks = self.list_impl(namespace, prefix);
        for lock in &mut locks {
            lock.info.expires_at_ms = self.clock.to_wall_ms(lock.info.expires_at_ms);
            lock.acquired_at_ms = lock.acquired_at_ms.map(|at| self.clock.to_wall_ms(at));
            for holding in &mut lock.holders {
                self.wall_holding(holding);
            }
        }
        Box::pin(self.shown(Ok(locks)))
    }

    fn describe<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<NameState, LockError>> {
        let mut state = self.describe_impl(key);
        for holding in &mut state.holders {
            self.wall_holding(holding);
        }
        state.delay_until_ms = state.delay_until_ms.map(|at| self.clock.to_wall_ms(at));
        Box::pin(self.shown_for(key, Ok(state)))
    }

    fn supports_claims(&self) -> bool {
        true
    }

    fn set_lock_delays(&self, delays: &LockDelays) {
        self.namespaces.set_lock_delays(delays);
    }

    fn campaign<'a>(
        &'a self,
        key: &'a Key,
        candidate: &'a str,
        value: &'a str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        let request = Request {
            owner: candidate,
            ttl_ms,
            options: LockOptions {
                claim: Claim::Leader,
                ..options
            },
            value: Some(value),
        };
        let campaigning = self.lock_impl(key, request, None);
        Box::pin(
            async move { self.wall_grant(self.shown_if_refused_for(key, campaigning.await).await) },
        )
    }

    fn proclaim<'a>(
        &'a self,
        key: &'a Key,
        candidate: &'a str,
        token: u64,
        value: &'a str,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(async move {
            self.shown_if_refused_for(key, self.proclaim_impl(key, candidate, token, value).await)
                .await
        })
    }

    fn leader<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Leader>, LockError>> {
        let leader = self.leader_impl(key).map(|leader| {
            leader.map(|mut leader| {
                leader.info.expires_at_ms = self.clock.to_wall_ms(leader.info.expires_at_ms);
                leader.since_ms = leader.since_ms.map(|at| self.clock.to_wall_ms(at));
                leader
            })
        });
        Box::pin(self.shown_for(key, leader))
    }

    fn release_detached(&self, key: Key, owner: String, token: u64) {
        self.release_now(&key, &owner, token);
    }

    fn grant_lease<'a>(
        &'a self,
        lease: &'a Key,
        ttl_ms: u64,
        durability: Durability,
    ) -> BoxFuture<'a, Result<u64, LockError>> {
        Box::pin(async move {
            let granted = self.grant_lease_impl(lease, ttl_ms, durability).await;
            let expires_at_ms = self.shown_if_refused(granted).await?;
            Ok(self.clock.to_wall_ms(expires_at_ms))
        })
    }

    fn refresh_lease<'a>(&'a self, lease: &'a Key) -> BoxFuture<'a, Result<u64, LockError>> {
        Box::pin(async move {
            let refreshed = self.refresh_lease_impl(lease).await;
            let expires_at_ms = self.shown_if_refused(refreshed).await?;
            Ok(self.clock.to_wall_ms(expires_at_ms))
        })
    }

    fn revoke_lease<'a>(&'a self, lease: &'a Key) -> BoxFuture<'a, Result<u64, LockError>> {
        Box::pin(async move {
            self.shown_if_refused(self.revoke_lease_impl(lease).await)
                .await
        })
    }

    fn get_lease<'a>(
        &'a self,
        lease: &'a Key,
    ) -> BoxFuture<'a, Result<Option<LeaseInfo>, LockError>> {
        let info = self.get_lease_impl(lease).map(|mut info| {
            info.expires_at_ms = self.clock.to_wall_ms(info.expires_at_ms);
            info
        });
        Box::pin(self.shown(Ok(info)))
    }

    fn lock_in_lease<'a>(
        &'a self,
        key: &'a Key,
        lease_id: &'a str,
        options: LockOptions,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        let now = self.clock.now_ms();
        let Some(lease) = self.leases.live_owner(&key.namespace, lease_id, now) else {
            return Box::pin(self.shown(Err(LockError::NotHeld)));
        };
        let request = Request {
            owner: lease_id,
            ttl_ms: 1,
            options,
            value: None,
        };
        let locking = self.lock_impl(key, request, Some(lease));
        Box::pin(async move { self.wall_grant(self.shown_if_refused(locking.await).await) })
    }

    fn lease_ended(&self, lease: &Key) -> BoxFuture<'static, ()> {
        self.lease_ended_impl(lease)
    }

    fn force_unlock<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<LockInfo, LockError>> {
        Box::pin(async move {
            let info = self
                .shown_if_refused_for(key, self.force_unlock_impl(key).await)
                .await?;
            Ok(self.wall_info(info))
        })
    }

    fn events(&self) -> Option<tokio::sync::broadcast::Receiver<LockEvent>> {
        Some(self.events.subscribe())
    }

    fn hold_times(&self) -> Option<HoldTimes> {
        Some(self.namespaces.hold_times())
    }

    fn namespace_stats(&self) -> Vec<NamespaceStats> {
        let now = self.clock.now_ms();
        let mut by_namespace: HashMap<Arc<str>, NamespaceStats, FxBuild> = HashMap::default();
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            for lock in shard.iter() {
                let row = by_namespace
                    .entry(lock.namespace.name.clone())
                    .or_insert_with(|| NamespaceStats {
                        namespace: lock.namespace.name.to_string(),
                        ..NamespaceStats::default()
                    });
                row.waiters += lock.waiters.len() as u64;
                match lock.holder().filter(|h| h.expires_at_ms() > now) {
                    Some(h) if h.durability == Durability::Persistent => row.persistent += 1,
                    Some(_) => row.ephemeral += 1,
                    None => {}
                }
            }
            for group in shard.groups.map.values() {
                let row = by_namespace
                    .entry(group.namespace.name.clone())
                    .or_insert_with(|| NamespaceStats {
                        namespace: group.namespace.name.to_string(),
                        ..NamespaceStats::default()
                    });
                row.waiters += group.waiters.len() as u64;
                let (persistent, ephemeral) = group.held_by_durability(now);
                row.persistent += persistent;
                row.ephemeral += ephemeral;
            }
        }
        let mut rows: Vec<NamespaceStats> = by_namespace.into_values().collect();
        rows.sort_by(|a, b| a.namespace.cmp(&b.namespace));
        rows
    }

    fn namespaces(&self) -> BoxFuture<'_, Result<Vec<NamespaceStats>, LockError>> {
        let mut rows = self.namespace_stats();
        // A table entry outlives its last holder and waiter until the purge.
        rows.retain(|row| row.persistent + row.ephemeral + row.waiters > 0);
        Box::pin(self.shown(Ok(rows)))
    }

    /// Once everything submitted to the journal so far is durable.
    fn sync(&self) -> BoxFuture<'_, Result<(), LockError>> {
        Box::pin(self.journal.flushed().wait())
    }

    fn stats(&self) -> BackendStats {
        let (commits, committed_ops, failed_commits) = self.journal.commit_stats();
        BackendStats {
            locks_held: self.live_locks() as u64,
            waiters: self.waiters() as u64,
            commits,
            committed_ops,
            failed_commits,
        }
    }
}

/// The highest fencing token an answer shows (0 for none).
trait ShowsTokens {
    fn highest_token(&self) -> u64;
}

impl ShowsTokens for () {
    fn highest_token(&self) -> u64 {
        0
    }
}

impl ShowsTokens for u64 {
    /// A lease's expiry or a count: no token.
    fn highest_token(&self) -> u64 {
        0
    }
}

impl ShowsTokens for Grant {
    fn highest_token(&self) -> u64 {
        self.fencing_token
    }
}

impl ShowsTokens for LockInfo {
    fn highest_token(&self) -> u64 {
        self.fencing_token
    }
}

impl<T: ShowsTokens> ShowsTokens for Option<T> {
    fn highest_token(&self) -> u64 {
        self.as_ref().map_or(0, T::highest_token)
    }
}

impl ShowsTokens for Vec<ListedLock> {
    fn highest_token(&self) -> u64 {
        self.iter()
            .flat_map(|l| {
                std::iter::once(l.info.fencing_token)
                    .chain(l.holders.iter().map(|h| h.info.fencing_token))
            })
            .max()
            .unwrap_or(0)
    }
}

impl ShowsTokens for Vec<NamespaceStats> {
    fn highest_token(&self) -> u64 {
        0
    }
}

impl ShowsTokens for NameState {
    fn highest_token(&self) -> u64 {
        self.holders
            .iter()
            .map(|h| h.info.fencing_token)
            .max()
            .unwrap_or(0)
    }
}

impl ShowsTokens for Leader {
    fn highest_token(&self) -> u64 {
        self.info.fencing_token
    }
}

impl ShowsTokens for LeaseInfo {
    fn highest_token(&self) -> u64 {
        0
    }
}

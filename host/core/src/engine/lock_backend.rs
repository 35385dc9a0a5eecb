//! The engine as a [`LockBackend`]. The engine keeps every deadline in
//! the [`Clock`](crate::Clock)'s monotonic time; what it answers (a grant's or a holder's
//! `expires_at_ms`, a lease's expiry) is converted to wall-clock time here,
//! at the edge, and nowhere else (docs/contract.md#c8-expiry).

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use super::table::FxBuild;
use super::Engine;
use crate::backend::{BoxFuture, LockBackend};
use crate::error::LockError;
use crate::metrics::{BackendStats, HoldTimes, NamespaceStats};
use crate::types::{
    Durability, Grant, Key, LeaseInfo, ListedLock, LockEvent, LockInfo, LockOptions,
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
        let locking = self.lock_impl(key, owner, ttl_ms, options, lease);
        Box::pin(async move { self.wall_grant(locking.await) })
    }

    fn unlock<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        token: Option<u64>,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(self.unlock_impl(key, owner, token))
    }

    fn extend<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        Box::pin(async move { self.wall_grant(self.extend_impl(key, owner, ttl_ms).await) })
    }

    fn get<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<LockInfo>, LockError>> {
        let info = self.get_impl(key).map(|i| self.wall_info(i));
        Box::pin(async move { Ok(info) })
    }

    fn list<'a>(
        &'a self,
        namespace: &'a str,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ListedLock>, LockError>> {
        let mut locks = self.list_impl(namespace, prefix);
        for lock in &mut locks {
            lock.info.expires_at_ms = self.clock.to_wall_ms(lock.info.expires_at_ms);
        }
        Box::pin(async move { Ok(locks) })
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
            let expires_at_ms = self.grant_lease_impl(lease, ttl_ms, durability).await?;
            Ok(self.clock.to_wall_ms(expires_at_ms))
        })
    }

    fn refresh_lease<'a>(&'a self, lease: &'a Key) -> BoxFuture<'a, Result<u64, LockError>> {
        Box::pin(async move {
            let expires_at_ms = self.refresh_lease_impl(lease).await?;
            Ok(self.clock.to_wall_ms(expires_at_ms))
        })
    }

    fn revoke_lease<'a>(&'a self, lease: &'a Key) -> BoxFuture<'a, Result<u64, LockError>> {
        Box::pin(self.revoke_lease_impl(lease))
    }

    fn get_lease<'a>(
        &'a self,
        lease: &'a Key,
    ) -> BoxFuture<'a, Result<Option<LeaseInfo>, LockError>> {
        let info = self.get_lease_impl(lease).map(|mut info| {
            info.expires_at_ms = self.clock.to_wall_ms(info.expires_at_ms);
            info
        });
        Box::pin(async move { Ok(info) })
    }

    fn lock_in_lease<'a>(
        &'a self,
        key: &'a Key,
        lease_id: &'a str,
        options: LockOptions,
    ) -> BoxFuture<'a, Result<Grant, LockError>> {
        let now = self.clock.now_ms();
        let Some(lease) = self.leases.live_owner(&key.namespace, lease_id, now) else {
            return Box::pin(std::future::ready(Err(LockError::NotHeld)));
        };
        let locking = self.lock_impl(key, lease_id, 1, options, Some(lease));
        Box::pin(async move { self.wall_grant(locking.await) })
    }

    fn lease_ended(&self, lease: &Key) -> BoxFuture<'static, ()> {
        self.lease_ended_impl(lease)
    }

    fn force_unlock<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<LockInfo, LockError>> {
        Box::pin(async move {
            let info = self.force_unlock_impl(key).await?;
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
        }
        let mut rows: Vec<NamespaceStats> = by_namespace.into_values().collect();
        rows.sort_by(|a, b| a.namespace.cmp(&b.namespace));
        rows
    }

    fn namespaces(&self) -> BoxFuture<'_, Result<Vec<NamespaceStats>, LockError>> {
        let mut rows = self.namespace_stats();
        // A table entry outlives its last holder and waiter until the purge.
        rows.retain(|row| row.persistent + row.ephemeral + row.waiters > 0);
        Box::pin(std::future::ready(Ok(rows)))
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

//! The engine's reads: a name's holder, its full state, an election's
//! leader, listings, counts; and the barrier a reply about one name waits
//! behind (docs/contract.md#c10-durability). Each answers in the engine's
//! clock; `lock_backend` converts to wall-clock time.

use std::sync::PoisonError;

use super::{group_state, Engine};
use crate::error::LockError;
use crate::journal::Ticket;
use crate::types::{Claim, Holding, Key, Leader, ListedLock, LockInfo, NameState};

impl Engine {
    /// The barrier a reply that shows `key` waits behind: the name's last
    /// op durable (docs/contract.md#c10-durability). A name the shard does
    /// not have may have been removed by an op still waiting: it waits
    /// for everything submitted so far.
    pub(super) fn name_barrier(&self, key: &Key) -> Ticket {
        let (shard, hash) = self.shard(key);
        let position = match shard.find(hash, key) {
            Some(at) => {
                let now = self.journal.submitted();
                let behind = (now as u32).wrapping_sub(shard.at(at).journal_pos);
                now.saturating_sub(u64::from(behind))
            }
            None => match shard.groups.map.get(key) {
                Some(group) => group.journal_pos,
                None => {
                    drop(shard);
                    return self.journal.flushed();
                }
            },
        };
        drop(shard);
        self.journal.flushed_through(position)
    }

    pub(super) fn get_impl(&self, key: &Key) -> Option<LockInfo> {
        let (mut guard, hash) = self.shard(key);
        let now = self.clock.now_ms();
        match self.settle_all(&mut guard, key, hash, now) {
            Some(at) => guard.at(at).info(),
            None => self.get_in_group(&guard, key),
        }
    }

    /// The leader of the election `key`, in the engine's clock.
    pub(super) fn leader_impl(&self, key: &Key) -> Result<Option<Leader>, LockError> {
        let (mut guard, hash) = self.shard(key);
        let now = self.clock.now_ms();
        if self.settle_all(&mut guard, key, hash, now).is_some() {
            return Err(group_state::not_an_election(key, group_state::Kind::Lock));
        }
        self.leader_in_group(&guard, key)
    }

    /// Everything about `key`, in the engine's clock.
    pub(super) fn describe_impl(&self, key: &Key) -> NameState {
        let (mut guard, hash) = self.shard(key);
        let now = self.clock.now_ms();
        match self.settle_all(&mut guard, key, hash, now) {
            Some(at) => {
                let lock = guard.at(at);
                let holder = lock.holder().expect("held");
                NameState {
                    holders: vec![Holding {
                        info: lock.info().expect("held"),
                        claim: Claim::Exclusive,
                        acquired_at_ms: Some(holder.acquired_at_ms),
                    }],
                    waiters: lock.waiters.len() as u64,
                    delay_until_ms: None,
                }
            }
            None => self.describe_group(&guard, key).unwrap_or_default(),
        }
    }

    pub(super) fn list_impl(&self, namespace: &str, prefix: &str) -> Vec<ListedLock> {
        let now = self.clock.now_ms();
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            for lock in shard.iter() {
                if *lock.namespace.name != *namespace || !lock.name().starts_with(prefix) {
                    continue;
                }
                if let Some(h) = lock.holder().filter(|h| h.expires_at_ms() > now) {
                    out.push(ListedLock {
                        name: lock.name().to_string(),
                        info: lock.info().expect("held"),
                        acquired_at_ms: Some(h.acquired_at_ms),
                        waiters: lock.waiters.len() as u64,
                        claim: Claim::Exclusive,
                        holders: Vec::new(),
                    });
                }
            }
            for (key, group) in &shard.groups.map {
                if *key.namespace != *namespace || !key.name.starts_with(prefix) {
                    continue;
                }
                out.extend(self.list_group(key, group, now));
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The number of live (unexpired) locks, for tests and metrics.
    pub fn live_locks(&self) -> usize {
        let now = self.clock.now_ms();
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap_or_else(PoisonError::into_inner);
                let table = s
                    .iter()
                    .filter(|l| l.holder().is_some_and(|h| h.expires_at_ms() > now))
                    .count();
                let groups: usize = s.groups.map.values().map(|g| g.live_count(now)).sum();
                table + groups
            })
            .sum()
    }

    /// The number of callers waiting in queues.
    pub(super) fn waiters(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap_or_else(PoisonError::into_inner);
                let table = s.iter().map(|l| l.waiters.len()).sum::<usize>();
                table
                    + s.groups
                        .map
                        .values()
                        .map(|g| g.waiters.len())
                        .sum::<usize>()
            })
            .sum()
    }
}

//! Leases in the engine (docs/contract.md#c16-leases): one expiry shared by
//! several locks, refreshed and revoked in one step.
//!
//! A lock under a lease is an ordinary holder whose owner is the lease id,
//! whose `expires_at_ms` is the lease's, and which points at its
//! [`LeaseCell`]. Refresh and revoke take the shard mutexes of all the
//! lease's locks at once (in shard order, so two of them never deadlock),
//! and change every lock under them: nobody can see a lease half refreshed
//! or half revoked.
//!
//! Lock order: shard mutexes (ascending), then one lease's `state`, then the
//! lease table. Nothing takes a shard while holding a `state` or the table.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use super::{key_hash, Engine, FxBuild, Shard};
use crate::backend::BoxFuture;
use crate::clock::{deadline, Clock};
use crate::error::LockError;
use crate::journal::{JournalOp, LeaseRecord};
use crate::types::{Claim, Durability, EventKind, Key, LeaseInfo, LockEvent};

/// Every lease id starts with this; a cheap test keeps the plain `lock` path
/// from looking up the lease table.
const LEASE_ID_PREFIX: &str = "lease-";

/// One lease. Shared by the table, its holders and its waiters.
pub(crate) struct LeaseCell {
    /// Namespace and lease id.
    pub(crate) key: Key,
    pub(crate) ttl_ms: u64,
    pub(crate) durability: Durability,
    state: Mutex<LeaseState>,
    /// Becomes true once the lease has ended, for `lease_ended`.
    ended: watch::Sender<bool>,
}

struct LeaseState {
    expires_at_ms: u64,
    /// Revoked, or found expired by the purge task.
    ended: bool,
    /// The names of the locks held under it.
    locks: BTreeSet<Arc<str>>,
}

impl LeaseCell {
    pub(crate) fn new(
        key: Key,
        ttl_ms: u64,
        expires_at_ms: u64,
        durability: Durability,
    ) -> Arc<LeaseCell> {
        Arc::new(LeaseCell {
            key,
            ttl_ms,
            durability,
            state: Mutex::new(LeaseState {
                expires_at_ms,
                ended: false,
                locks: BTreeSet::new(),
            }),
            ended: watch::Sender::new(false),
        })
    }

    fn state(&self) -> MutexGuard<'_, LeaseState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn is_live(&self, now: u64) -> bool {
        self.state().is_live(now)
    }

    /// Records `name` as held under the lease, whatever its state (recovery);
    /// answers the lease's expiry.
    pub(crate) fn attach(&self, name: &Arc<str>) -> u64 {
        let mut state = self.state();
        state.locks.insert(name.clone());
        state.expires_at_ms
    }

    /// Records `name` as held under the lease if it is live; answers the
    /// lease's expiry, or `None` if it ended.
    pub(crate) fn attach_if_live(&self, name: &Arc<str>, now: u64) -> Option<u64> {
        let mut state = self.state();
        if !state.is_live(now) {
            return None;
        }
        state.locks.insert(name.clone());
        Some(state.expires_at_ms)
    }

    /// Forgets `name`: its lock was released or expired.
    pub(crate) fn detach(&self, name: &str) {
        self.state().locks.remove(name);
    }

    fn names(&self) -> BTreeSet<Arc<str>> {
        self.state().locks.clone()
    }

    fn mark_ended(&self) {
        self.ended.send_replace(true);
    }
}

impl LeaseState {
    fn is_live(&self, now: u64) -> bool {
        !self.ended && self.expires_at_ms > now
    }
}

/// The live leases of an engine, by id, with their deadlines for the purge
/// task.
#[derive(Default)]
pub(crate) struct LeaseTable(Mutex<LeaseMap>);

#[derive(Default)]
struct LeaseMap {
    by_id: HashMap<Arc<str>, Arc<LeaseCell>, FxBuild>,
    deadlines: BTreeSet<(u64, Arc<str>)>,
}

impl LeaseTable {
    fn map(&self) -> MutexGuard<'_, LeaseMap> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `cell`; false if its id is taken.
    pub(crate) fn insert(&self, cell: Arc<LeaseCell>) -> bool {
        let mut map = self.map();
        let id = cell.key.name.clone();
        if map.by_id.contains_key(&id) {
            return false;
        }
        let expires_at_ms = cell.state().expires_at_ms;
        map.deadlines.insert((expires_at_ms, id.clone()));
        map.by_id.insert(id, cell);
        true
    }

    /// The lease `lease`, live or not, if the table still has it.
    fn get(&self, lease: &Key) -> Option<Arc<LeaseCell>> {
        self.map()
            .by_id
            .get(&lease.name)
            .filter(|cell| cell.key.namespace == lease.namespace)
            .cloned()
    }

    /// [`LeaseTable::live_owner`] for a plain `lock`: the clock is read
    /// only for an owner that reads as a lease id, which few do (a clock
    /// read is a tenth of a lock + unlock pair, docs/benchmarks.md B1).
    pub(crate) fn live_owner_now(
        &self,
        namespace: &str,
        owner: &str,
        clock: &dyn Clock,
    ) -> Option<Arc<LeaseCell>> {
        if !owner.starts_with(LEASE_ID_PREFIX) {
            return None;
        }
        self.live_owner(namespace, owner, clock.now_ms())
    }

    /// The live lease of `namespace` whose id is `owner`, if there is one.
    pub(crate) fn live_owner(
        &self,
        namespace: &str,
        owner: &str,
        now: u64,
    ) -> Option<Arc<LeaseCell>> {
        if !owner.starts_with(LEASE_ID_PREFIX) {
            return None;
        }
        self.map()
            .by_id
            .get(owner)
            .filter(|cell| *cell.key.namespace == *namespace && cell.is_live(now))
            .cloned()
    }

    fn remove(&self, cell: &LeaseCell, expires_at_ms: u64) {
        let mut map = self.map();
        map.by_id.remove(&cell.key.name);
        map.deadlines
            .remove(&(expires_at_ms, cell.key.name.clone()));
    }

    fn move_deadline(&self, cell: &LeaseCell, from_ms: u64, to_ms: u64) {
        let mut map = self.map();
        map.deadlines.remove(&(from_ms, cell.key.name.clone()));
        map.deadlines.insert((to_ms, cell.key.name.clone()));
    }

    /// Removes the leases whose deadline is past; answers them and the
    /// earliest deadline left.
    fn take_expired(&self, now: u64) -> (Vec<Arc<LeaseCell>>, u64) {
        let mut map = self.map();
        let mut expired = Vec::new();
        while let Some((due, id)) = map.deadlines.first().cloned() {
            if due > now {
                return (expired, due);
            }
            map.deadlines.remove(&(due, id.clone()));
            if let Some(cell) = map.by_id.remove(&id) {
                expired.push(cell);
            }
        }
        (expired, u64::MAX)
    }
}

/// The shard mutexes of a set of keys, taken in ascending shard order.
struct Shards<'a> {
    guards: Vec<(usize, MutexGuard<'a, Shard>)>,
}

impl Shards<'_> {
    fn of(&mut self, index: usize) -> &mut Shard {
        let at = self
            .guards
            .binary_search_by_key(&index, |(i, _)| *i)
            .expect("every key's shard was locked");
        &mut self.guards[at].1
    }
}

impl Engine {
    fn lock_shards_of<'a>(&'a self, keys: &[Key]) -> Shards<'a> {
        let mut indices: Vec<usize> = keys.iter().map(|k| self.shard_index(k)).collect();
        indices.sort_unstable();
        indices.dedup();
        Shards {
            guards: indices
                .into_iter()
                .map(|i| {
                    (
                        i,
                        self.shards[i]
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner),
                    )
                })
                .collect(),
        }
    }

    /// The live lease `lease`, or `not_held`.
    fn live_lease(&self, lease: &Key) -> Result<Arc<LeaseCell>, LockError> {
        self.leases
            .get(lease)
            .filter(|cell| cell.is_live(self.clock.now_ms()))
            .ok_or(LockError::NotHeld)
    }

    pub(super) async fn grant_lease_impl(
        &self,
        lease: &Key,
        ttl_ms: u64,
        durability: Durability,
    ) -> Result<u64, LockError> {
        let expires_at_ms = deadline(self.clock.now_ms(), ttl_ms)?;
        let cell = LeaseCell::new(lease.clone(), ttl_ms, expires_at_ms, durability);
        if !self.leases.insert(cell.clone()) {
            return Err(LockError::InvalidArgument(format!(
                "lease id {:?} is already in use",
                lease.name
            )));
        }
        self.purge.note_deadline(expires_at_ms);
        let ticket = self.journal_if_persistent(durability, || {
            JournalOp::PutLease(
                lease.clone(),
                LeaseRecord {
                    ttl_ms,
                    expires_at_ms: self.clock.to_wall_ms(expires_at_ms),
                },
            )
        });
        if let Err(e) = ticket.wait().await {
            // Never acknowledged, so nobody knows its id: gone again.
            cell.state().ended = true;
            self.leases.remove(&cell, expires_at_ms);
            cell.mark_ended();
            return Err(e);
        }
        self.emit_lease(EventKind::LeaseGranted, &cell, self.clock.now_ms());
        Ok(expires_at_ms)
    }

    fn emit_lease(&self, kind: EventKind, cell: &LeaseCell, now: u64) {
        self.events.emit(|| LockEvent {
            claim: Claim::Exclusive,
            kind,
            namespace: cell.key.namespace.clone(),
            name: cell.key.name.clone(),
            owner: cell.key.name.clone(),
            fencing_token: 0,
            at_ms: self.clock.to_wall_ms(now),
            acquired_at_ms: None,
        });
    }

    /// Locks the shards of every lock of `cell` and answers them with its
    /// state, once the set of locks is the one whose shards are held.
    fn lock_lease<'a>(
        &'a self,
        cell: &'a LeaseCell,
    ) -> (Vec<Key>, Shards<'a>, MutexGuard<'a, LeaseState>) {
        loop {
            let keys: Vec<Key> = cell
                .names()
                .into_iter()
                .map(|name| Key {
                    namespace: cell.key.namespace.clone(),
                    name,
                })
                .collect();
            let shards = self.lock_shards_of(&keys);
            let state = cell.state();
            // A lock taken or released between the snapshot and the shard
            // mutexes: take them again for the new set.
            if state.locks.len() == keys.len() && keys.iter().all(|k| state.locks.contains(&k.name))
            {
                return (keys, shards, state);
            }
        }
    }

    pub(super) async fn refresh_lease_impl(&self, lease: &Key) -> Result<u64, LockError> {
        let cell = self.live_lease(lease)?;
        let (expires_at_ms, ticket) = {
            let (keys, mut shards, mut state) = self.lock_lease(&cell);
            let now = self.clock.now_ms();
            if !state.is_live(now) {
                return Err(LockError::NotHeld);
            }
            let expires_at_ms = deadline(now, cell.ttl_ms)?;
            let old = std::mem::replace(&mut state.expires_at_ms, expires_at_ms);
            drop(state);
            // Only the lease's record: its locks take its expiry at recovery.
            // Submitted before the locks' events, which wait for it.
            let ticket = self.journal_if_persistent(cell.durability, || {
                JournalOp::PutLease(
                    cell.key.clone(),
                    LeaseRecord {
                        ttl_ms: cell.ttl_ms,
                        expires_at_ms: self.clock.to_wall_ms(expires_at_ms),
                    },
                )
            });
            for key in &keys {
                let hash = key_hash(&key.namespace, &key.name);
                let shard = shards.of(self.shard_of(hash));
                let held = shard.find(hash, key).and_then(|at| {
                    let holder = shard.at(at).held_by(&cell.key.name)?;
                    Some((at, holder.token))
                });
                if let Some((at, token)) = held {
                    shard.move_expiry(at, expires_at_ms);
                    self.note_journal_pos(shard, at);
                    self.events.emit(|| LockEvent {
                        claim: Claim::Exclusive,
                        kind: EventKind::Extended,
                        namespace: key.namespace.clone(),
                        name: key.name.clone(),
                        owner: cell.key.name.clone(),
                        fencing_token: token,
                        at_ms: self.clock.to_wall_ms(now),
                        acquired_at_ms: None,
                    });
                }
            }
            self.leases.move_deadline(&cell, old, expires_at_ms);
            self.purge.note_deadline(expires_at_ms);
            (expires_at_ms, ticket)
        };
        ticket.wait().await?;
        Ok(expires_at_ms)
    }

    pub(super) async fn revoke_lease_impl(&self, lease: &Key) -> Result<u64, LockError> {
        let cell = self.live_lease(lease)?;
        let (released, ticket) = {
            let (keys, mut shards, mut state) = self.lock_lease(&cell);
            let now = self.clock.now_ms();
            if !state.is_live(now) {
                return Err(LockError::NotHeld);
            }
            state.ended = true;
            state.locks.clear();
            let expires_at_ms = state.expires_at_ms;
            // A hand-off below may take another lease's state: not while
            // holding this one.
            drop(state);
            self.leases.remove(&cell, expires_at_ms);
            let mut ops = vec![JournalOp::DeleteLease(cell.key.clone())];
            let mut released = Vec::new();
            for key in &keys {
                let hash = key_hash(&key.namespace, &key.name);
                let shard = shards.of(self.shard_of(hash));
                let Some(at) = shard.find(hash, key) else {
                    continue;
                };
                let lock = shard.at(at);
                if lock.held_by(&cell.key.name).is_none() {
                    continue;
                }
                lock.namespace.remove();
                let namespace = lock.namespace.clone();
                released.extend(shard.take_holder(at).map(|holder| (key, namespace, holder)));
                ops.push(JournalOp::Delete(key.clone()));
            }
            // One commit for the lease and all its locks. Submitted before
            // the hand-offs, whose grants must be journaled after it, and
            // before the events, which wait for it.
            let ticket = self.journal_if_persistent(cell.durability, || JournalOp::Batch(ops));
            for (key, namespace, holder) in &released {
                self.emit_left(
                    EventKind::Released,
                    key,
                    namespace,
                    &cell.key.name,
                    holder,
                    now,
                );
            }
            for key in &keys {
                let hash = key_hash(&key.namespace, &key.name);
                let shard = shards.of(self.shard_of(hash));
                if let Some(at) = shard.find(hash, key) {
                    self.hand_off(shard, at, key, now);
                }
            }
            self.emit_lease(EventKind::LeaseRevoked, &cell, now);
            (keys.len() as u64, ticket)
        };
        cell.mark_ended();
        ticket.wait().await?;
        Ok(released)
    }

    pub(super) fn get_lease_impl(&self, lease: &Key) -> Option<LeaseInfo> {
        let cell = self.leases.get(lease)?;
        let state = cell.state();
        if !state.is_live(self.clock.now_ms()) {
            return None;
        }
        Some(LeaseInfo {
            ttl_ms: cell.ttl_ms,
            expires_at_ms: state.expires_at_ms,
            durability: cell.durability,
            locks: state.locks.iter().map(|n| n.to_string()).collect(),
        })
    }

    pub(super) fn lease_ended_impl(&self, lease: &Key) -> BoxFuture<'static, ()> {
        let Some(cell) = self.leases.get(lease) else {
            return Box::pin(std::future::ready(()));
        };
        let mut ended = cell.ended.subscribe();
        Box::pin(async move {
            // The sender lives in `cell`, which this future owns.
            let _ = ended.wait_for(|ended| *ended).await;
            drop(cell);
        })
    }

    /// Ends the leases whose expiry passed (their locks expire at the same
    /// instant, through their own deadlines). Answers the earliest lease
    /// deadline left.
    pub(super) fn expire_leases(&self, now: u64) -> u64 {
        let (expired, mut earliest) = self.leases.take_expired(now);
        for cell in expired {
            let mut state = cell.state();
            if state.is_live(now) {
                // Refreshed after its deadline was read: put it back.
                let expires_at_ms = state.expires_at_ms;
                drop(state);
                self.leases.insert(cell);
                earliest = earliest.min(expires_at_ms);
                continue;
            }
            state.ended = true;
            drop(state);
            drop(self.journal_if_persistent(cell.durability, || {
                JournalOp::DeleteLease(cell.key.clone())
            }));
            self.emit_lease(EventKind::LeaseExpired, &cell, now);
            cell.mark_ended();
        }
        earliest
    }
}

//! The single-node lock engine: every lock in memory, sharded by name, with
//! what must survive a restart written through a [`Journal`].
//!
//! Invariants, each relied on below:
//! - A name's state changes only under its shard's mutex, and journal ops are
//!   submitted under that same mutex, so the journal sees changes to a name in
//!   the order they were decided.
//! - A holder whose `expires_at_ms <= now` is treated as absent by every
//!   operation ([`Engine::settle`] runs first), whether or not the purge task
//!   has removed it yet.
//! - Every holder has exactly one entry in its shard's deadline heap, whose
//!   deadline is the holder's `expires_at_ms` (the table changes both
//!   together: `table::Shard::move_expiry`); it drives the purge task.
//! - A lock with waiters always has a holder: when a holder goes away, the
//!   first waiter still listening is granted the lock on the spot
//!   ([`Engine::hand_off`]), so nobody can barge past the queue.
//! - A grant is acknowledged only once its journal op (if persistent) and a
//!   token reservation covering its token are durable.
//! - A lock's position in its shard (`at` below) changes when any lock of
//!   the shard is removed: it is looked up again after anything that may
//!   remove one (`remove_holder`, `hand_off`).
//!
//! Memory: a held lock is one `table::Lock` in its shard's dense vector
//! (its name and owner in one allocation, its namespace interned once per
//! engine), a 4-byte slot in the shard's hash index and a 16-byte entry in
//! its deadline heap (see the `table` module).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use rustc_hash::FxHasher;
use tokio::sync::{oneshot, Notify};

use crate::backend::{BoxFuture, LockBackend};
use crate::clock::{deadline, Clock, SystemClock};
use crate::error::LockError;
use crate::events::EventSender;
use crate::journal::{Journal, JournalOp, NullJournal, Record, Recovered, Ticket};
use crate::metrics::{BackendStats, NamespaceStats};
use crate::types::{
    Durability, EventKind, Grant, Key, LeaseInfo, ListedLock, LockEvent, LockInfo, LockOptions,
};

mod leases;
mod table;

use leases::{LeaseCell, LeaseTable};
use table::{key_hash, Holder, Lock, Namespace, Namespaces, NewHolder, Shard};

type FxBuild = BuildHasherDefault<FxHasher>;

/// Tuning knobs of the engine.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Number of independently locked shards (a power of two is not needed).
    pub shards: usize,
    /// How many tokens one durable reservation covers. Larger blocks mean
    /// fewer syncs and bigger (harmless) jumps in tokens after a restart.
    pub token_block: u64,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            shards: 64,
            token_block: 1 << 20,
        }
    }
}

/// The single-node [`LockBackend`]. See the module docs for its invariants.
pub struct Engine {
    shards: Box<[Mutex<Shard>]>,
    tokens: TokenAllocator,
    journal: Arc<dyn Journal>,
    clock: Arc<dyn Clock>,
    purge: Arc<PurgeSignal>,
    next_waiter_id: AtomicU64,
    /// Every namespace seen, interned, with its count of holders (quotas).
    namespaces: Namespaces,
    /// Live leases (docs/contract.md#c16-leases).
    leases: LeaseTable,
    /// Every change, for whoever subscribed (docs/http.md#events).
    events: EventSender,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("shards", &self.shards.len())
            .field("next_token", &self.tokens.next.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

struct Waiter {
    id: u64,
    owner: String,
    ttl_ms: u64,
    durability: Durability,
    /// Waiting under a lease: granted with the lease's expiry, and refused
    /// with `not_held` if the lease ended meanwhile.
    lease: Option<Arc<LeaseCell>>,
    tx: oneshot::Sender<Result<Handoff, LockError>>,
}

/// What the synchronous part of `lock` decided.
enum Attempt {
    Granted(Grant, Ticket),
    Refreshed(Grant, Ticket),
    Queued {
        id: u64,
        rx: oneshot::Receiver<Result<Handoff, LockError>>,
        wait_until: u64,
    },
}

/// A grant made on a waiter's behalf, still to be acknowledged by it.
struct Handoff {
    grant: Grant,
    ticket: Ticket,
}

/// Wakes the purge task early when a deadline sooner than the one it sleeps
/// towards appears, and when the engine is dropped.
struct PurgeSignal {
    notify: Notify,
    /// The deadline the purge task currently sleeps towards.
    next_wake_ms: AtomicU64,
}

impl PurgeSignal {
    fn note_deadline(&self, deadline_ms: u64) {
        if deadline_ms < self.next_wake_ms.load(Ordering::Acquire) {
            self.next_wake_ms.store(deadline_ms, Ordering::Release);
            self.notify.notify_one();
        }
    }
}

/// Issues fencing tokens from one global counter, and makes sure a token is
/// covered by a durable reservation before any grant carrying it is
/// acknowledged. After a restart the counter resumes above the reservation,
/// so tokens never go backwards, for ephemeral locks too.
struct TokenAllocator {
    next: AtomicU64,
    reserved_up_to: AtomicU64,
    block: u64,
    refill: tokio::sync::Mutex<()>,
}

impl TokenAllocator {
    /// Called under the shard mutex, so that per name, token order is grant
    /// order.
    fn issue(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    async fn make_durable(&self, token: u64, journal: &dyn Journal) -> Result<(), LockError> {
        if token <= self.reserved_up_to.load(Ordering::Acquire) {
            return Ok(());
        }
        let _one_refill_at_a_time = self.refill.lock().await;
        if token <= self.reserved_up_to.load(Ordering::Acquire) {
            return Ok(());
        }
        let up_to = self
            .next
            .load(Ordering::Relaxed)
            .max(token)
            .saturating_add(self.block);
        journal
            .submit(JournalOp::ReserveTokens { up_to })
            .wait()
            .await?;
        self.reserved_up_to.fetch_max(up_to, Ordering::AcqRel);
        Ok(())
    }
}

impl Engine {
    /// The `memory` store: nothing survives a restart, and tokens are seeded
    /// from the wall clock (see [`Recovered::in_memory`]).
    ///
    /// Like [`Engine::new`], this must be called within a tokio runtime.
    pub fn memory() -> Arc<Engine> {
        Engine::new(
            Arc::new(NullJournal),
            Recovered::in_memory(),
            Arc::new(SystemClock),
            EngineOptions::default(),
        )
    }

    /// An engine resuming from `recovered`, writing through `journal`.
    ///
    /// Spawns the purge task on the current tokio runtime; it ends when the
    /// engine is dropped.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn new(
        journal: Arc<dyn Journal>,
        mut recovered: Recovered,
        clock: Arc<dyn Clock>,
        options: EngineOptions,
    ) -> Arc<Engine> {
        let locks = std::mem::take(&mut recovered.locks);
        let rows = locks.into_iter().map(Ok::<_, std::convert::Infallible>);
        match Engine::resume(journal, recovered, rows, clock, options) {
            Ok(engine) => engine,
            Err(never) => match never {},
        }
    }

    /// [`Engine::new`] with the persistent locks streamed from `locks`
    /// (after those in `recovered.locks`), so that a store never holds a
    /// million recovered records and the engine's table at once. Stops at
    /// the first error, which it returns; the engine is then dropped
    /// unstarted (what it submitted to `journal` meanwhile is up to the
    /// journal to drop).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn resume<E>(
        journal: Arc<dyn Journal>,
        mut recovered: Recovered,
        locks: impl IntoIterator<Item = Result<(Key, Record), E>>,
        clock: Arc<dyn Clock>,
        options: EngineOptions,
    ) -> Result<Arc<Engine>, E> {
        let shards = (0..options.shards.max(1))
            .map(|_| Mutex::new(Shard::default()))
            .collect();
        let engine = Arc::new(Engine {
            shards,
            tokens: TokenAllocator {
                next: AtomicU64::new(recovered.next_token.max(1)),
                reserved_up_to: AtomicU64::new(recovered.reserved_up_to),
                block: options.token_block.max(1),
                refill: tokio::sync::Mutex::new(()),
            },
            journal,
            clock,
            purge: Arc::new(PurgeSignal {
                notify: Notify::new(),
                next_wake_ms: AtomicU64::new(u64::MAX),
            }),
            next_waiter_id: AtomicU64::new(0),
            namespaces: Namespaces::default(),
            leases: LeaseTable::default(),
            events: EventSender::default(),
        });
        let now = engine.clock.now_ms();
        for (lease, mut record) in std::mem::take(&mut recovered.leases) {
            record.expires_at_ms = engine.clock.monotonic_of_wall_ms(record.expires_at_ms);
            if record.expires_at_ms <= now {
                drop(engine.journal.submit(JournalOp::DeleteLease(lease)));
                continue;
            }
            engine.leases.insert(LeaseCell::new(
                lease,
                record.ttl_ms,
                record.expires_at_ms,
                Durability::Persistent,
            ));
            engine.purge.note_deadline(record.expires_at_ms);
        }
        let mut highest_recorded = None;
        let mut last_namespace: Option<Arc<Namespace>> = None;
        let rows = std::mem::take(&mut recovered.locks)
            .into_iter()
            .map(Ok)
            .chain(locks);
        // Size the shards for what is coming (a store says how many rows it
        // has): growing them lock by lock rehashed every index several
        // times, a sixth of recovery's time with a million locks (B5).
        let expected = rows.size_hint().0;
        if expected > 0 {
            let per_shard = expected.div_ceil(engine.shards.len());
            // Keys spread unevenly; a little headroom spares a last rehash.
            let per_shard = per_shard + per_shard / 16;
            for shard in &engine.shards {
                shard
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .reserve(per_shard);
            }
        }
        for row in rows {
            let (key, record) = row?;
            highest_recorded = highest_recorded.max(Some(record.token));
            let namespace = match last_namespace.take() {
                Some(ns) if *ns.name == *key.namespace => ns,
                _ => engine.namespaces.get(&key.namespace),
            };
            engine.recover_lock(key, record, &namespace, now);
            last_namespace = Some(namespace);
        }
        // Resume above any token found in a record too: a grant's record can
        // reach the disk in an earlier batch than the reservation covering it.
        if let Some(highest) = highest_recorded {
            engine
                .tokens
                .next
                .fetch_max(highest.saturating_add(1), Ordering::Relaxed);
        }
        tokio::spawn(purge_loop(Arc::downgrade(&engine), engine.purge.clone()));
        Ok(engine)
    }

    /// Installs one recovered lock of `namespace`, or drops its record if it
    /// expired while the store was closed.
    fn recover_lock(&self, key: Key, mut record: Record, namespace: &Arc<Namespace>, now: u64) {
        record.expires_at_ms = self.clock.monotonic_of_wall_ms(record.expires_at_ms);
        // A lock under a live lease takes the lease's expiry: a refresh
        // writes only the lease's record. A lease that is gone was
        // revoked (its locks' records went with it, in one batch) or
        // expired after all its locks' recorded expiries.
        let lease = self.leases.live_owner(&key.namespace, &record.owner, now);
        if let Some(lease) = &lease {
            record.expires_at_ms = lease.attach(&key.name);
        }
        if record.expires_at_ms <= now {
            // Expired while we were down: free, and no longer worth keeping.
            drop(self.journal.submit(JournalOp::Delete(key)));
            return;
        }
        let (mut shard, hash) = self.shard(&key);
        let at = shard.find_or_insert(hash, &key, &record.owner, || namespace.clone());
        if shard.take_holder(at).is_some() {
            // The same key twice (no store returns that): the last one wins.
            shard.at(at).namespace.remove();
        }
        // Recovered locks count against quotas but are never refused.
        shard.at(at).namespace.add();
        shard.set_holder(
            at,
            NewHolder {
                owner: &record.owner,
                token: record.token,
                expires_at_ms: record.expires_at_ms,
                acquired_at_ms: now,
                durability: Durability::Persistent,
                lease,
            },
        );
    }

    /// A grant or `busy` answer, its expiry in wall-clock time (the
    /// engine's deadlines are monotonic: see [`Clock`]).
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

    /// The shard of the key whose hash is `hash`. The high half picks the
    /// shard, so the low bits (the shard's index) and the top seven (its
    /// control bytes) stay spread within a shard.
    fn shard_of(&self, hash: u64) -> usize {
        (hash >> 32) as usize % self.shards.len()
    }

    fn shard_index(&self, key: &Key) -> usize {
        self.shard_of(key_hash(&key.namespace, &key.name))
    }

    /// The shard of `key`, locked, and the key's hash.
    fn shard(&self, key: &Key) -> (MutexGuard<'_, Shard>, u64) {
        let hash = key_hash(&key.namespace, &key.name);
        let guard = self.shards[self.shard_of(hash)]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (guard, hash)
    }

    fn journal_if_persistent(
        &self,
        durability: Durability,
        op: impl FnOnce() -> JournalOp,
    ) -> Ticket {
        match durability {
            Durability::Persistent => self.journal.submit(op()),
            Durability::Ephemeral => Ticket::ready(),
        }
    }

    /// Makes `owner` the holder of `key`, if the namespace's `quota` allows
    /// one more lock. The caller has checked the lock is free and holds the
    /// shard mutex.
    #[allow(clippy::too_many_arguments)]
    fn install(
        &self,
        shard: &mut Shard,
        key: &Key,
        hash: u64,
        owner: &str,
        expires_at_ms: u64,
        durability: Durability,
        lease: Option<Arc<LeaseCell>>,
        quota: Option<u64>,
    ) -> Result<(Grant, Ticket), LockError> {
        let at = shard.find_or_insert(hash, key, owner, || self.namespaces.get(&key.namespace));
        if let Err(e) = shard.at(at).namespace.try_add(quota) {
            forget_if_idle(shard, at);
            return Err(e);
        }
        let (grant, ticket) =
            self.install_counted(shard, at, key, owner, expires_at_ms, durability, lease);
        self.emit(EventKind::Acquired, shard.at(at), key);
        Ok((grant, ticket))
    }

    /// Publishes `kind` about the holder of `lock` (which must have one).
    fn emit(&self, kind: EventKind, lock: &Lock, key: &Key) {
        self.events.emit(|| {
            let holder = lock.holder();
            LockEvent {
                kind,
                namespace: key.namespace.clone(),
                name: key.name.clone(),
                owner: Arc::from(holder.map_or("", |_| lock.owner())),
                fencing_token: holder.map_or(0, |h| h.token),
                at_ms: self.clock.to_wall_ms(self.clock.now_ms()),
                acquired_at_ms: None,
            }
        });
    }

    /// Publishes that `holder` (owned by `owner`) of `key` left, by `kind`.
    fn emit_left(&self, kind: EventKind, key: &Key, owner: &str, holder: &Holder, now: u64) {
        self.events.emit(|| LockEvent {
            kind,
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            owner: Arc::from(owner),
            fencing_token: holder.token,
            at_ms: self.clock.to_wall_ms(now),
            acquired_at_ms: Some(self.clock.to_wall_ms(holder.acquired_at_ms)),
        });
    }

    /// [`Engine::install`] for a holder already counted in its namespace,
    /// of the lock at `at` (which has no holder).
    #[allow(clippy::too_many_arguments)]
    fn install_counted(
        &self,
        shard: &mut Shard,
        at: usize,
        key: &Key,
        owner: &str,
        expires_at_ms: u64,
        durability: Durability,
        lease: Option<Arc<LeaseCell>>,
    ) -> (Grant, Ticket) {
        let token = self.tokens.issue();
        let ticket = self.journal_if_persistent(durability, || {
            JournalOp::Put(
                key.clone(),
                Record {
                    owner: owner.to_string(),
                    token,
                    expires_at_ms: self.clock.to_wall_ms(expires_at_ms),
                },
            )
        });
        shard.set_holder(
            at,
            NewHolder {
                owner,
                token,
                expires_at_ms,
                acquired_at_ms: self.clock.now_ms(),
                durability,
                lease,
            },
        );
        self.purge.note_deadline(expires_at_ms);
        let grant = Grant {
            fencing_token: token,
            expires_at_ms,
        };
        (grant, ticket)
    }

    /// Moves the expiry of the holder of the lock at `at` (same owner, same
    /// token), keeping its deadline and, if persistent, its record in step.
    /// The caller holds the shard mutex.
    fn move_expiry(
        &self,
        shard: &mut Shard,
        at: usize,
        key: &Key,
        expires_at_ms: u64,
    ) -> (Grant, Ticket) {
        shard.move_expiry(at, expires_at_ms);
        let lock = shard.at(at);
        let holder = lock.holder().expect("only a holder's expiry moves");
        let grant = holder.grant();
        let ticket = self.journal_if_persistent(holder.durability, || {
            JournalOp::Put(
                key.clone(),
                Record {
                    owner: lock.owner().to_string(),
                    token: grant.fencing_token,
                    expires_at_ms: self.clock.to_wall_ms(expires_at_ms),
                },
            )
        });
        self.purge.note_deadline(expires_at_ms);
        self.events.emit(|| LockEvent {
            kind: EventKind::Extended,
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            owner: Arc::from(lock.owner()),
            fencing_token: holder.token,
            at_ms: self.clock.to_wall_ms(self.clock.now_ms()),
            acquired_at_ms: None,
        });
        (grant, ticket)
    }

    /// Removes the holder of the lock at `at`, named `key` (journaling the
    /// delete if persistent), and hands the lock to the next waiter. Returns
    /// the delete's ticket. Positions in the shard may change.
    fn remove_holder(
        &self,
        shard: &mut Shard,
        at: usize,
        key: &Key,
        now: u64,
        why: EventKind,
    ) -> Ticket {
        let lock = shard.at(at);
        let Some(holder) = lock.holder() else {
            return Ticket::ready();
        };
        self.emit_left(why, key, lock.owner(), holder, now);
        lock.namespace.remove();
        let Some(holder) = shard.take_holder(at) else {
            return Ticket::ready();
        };
        if let Some(lease) = &holder.lease {
            lease.detach(&key.name);
        }
        let ticket =
            self.journal_if_persistent(holder.durability, || JournalOp::Delete(key.clone()));
        self.hand_off(shard, at, key, now);
        ticket
    }

    /// Removes an expired holder of `key`, if any; then, if the lock is free,
    /// grants it to the first waiter still listening. Answers where the
    /// lock is now, if the shard still has it.
    fn settle(&self, shard: &mut Shard, key: &Key, hash: u64, now: u64) -> Option<usize> {
        let at = shard.find(hash, key)?;
        let expired = shard
            .at(at)
            .holder()
            .is_some_and(|h| h.expires_at_ms() <= now);
        if !expired {
            return Some(at);
        }
        // Nobody waits on this delete: a record found expired at the next
        // start is dropped anyway.
        drop(self.remove_holder(shard, at, key, now, EventKind::Expired));
        shard.find(hash, key)
    }

    /// Where the held lock `key` is, after settling it.
    fn settle_held(&self, shard: &mut Shard, key: &Key, hash: u64, now: u64) -> Option<usize> {
        self.settle(shard, key, hash, now)
            .filter(|&at| shard.at(at).holder().is_some())
    }

    /// Grants the free lock at `at`, named `key`, to its first live waiter,
    /// or forgets the lock if nobody waits.
    fn hand_off(&self, shard: &mut Shard, at: usize, key: &Key, now: u64) {
        loop {
            let lock = shard.at_mut(at);
            if lock.holder().is_some() {
                return;
            }
            let Some(waiter) = lock.waiters.pop_front() else {
                shard.remove(at);
                return;
            };
            if waiter.tx.is_closed() {
                continue;
            }
            let expires_at_ms = match &waiter.lease {
                // A lease that ended while its caller waited gets nothing.
                Some(lease) => match lease.attach_if_live(&key.name, now) {
                    Some(expires_at_ms) => expires_at_ms,
                    None => {
                        let _ = waiter.tx.send(Err(LockError::NotHeld));
                        continue;
                    }
                },
                // The ttl was validated when the waiter queued; saturate
                // rather than fail here, where nobody could be told.
                None => now.saturating_add(waiter.ttl_ms),
            };
            // The lock changes hands within its namespace: counted, but never
            // refused by a quota.
            lock.namespace.add();
            let lease = waiter.lease.clone();
            let (grant, ticket) = self.install_counted(
                shard,
                at,
                key,
                &waiter.owner,
                expires_at_ms,
                waiter.durability,
                waiter.lease,
            );
            if waiter.tx.send(Ok(Handoff { grant, ticket })).is_ok() {
                self.emit(EventKind::HandedOff, shard.at(at), key);
                return;
            }
            // The waiter left between the check and the send: undo, try the next.
            if let Some(lease) = &lease {
                lease.detach(&key.name);
            }
            if let Some(h) = shard.take_holder(at) {
                shard.at(at).namespace.remove();
                drop(self.journal_if_persistent(h.durability, || JournalOp::Delete(key.clone())));
            }
        }
    }

    /// Waits until a grant is durable, then acknowledges it. If that fails,
    /// or the caller goes away first, the grant is released again.
    async fn acknowledge(
        &self,
        key: &Key,
        owner: &str,
        grant: Grant,
        ticket: Ticket,
    ) -> Result<Grant, LockError> {
        let mut release = ReleaseOnDrop {
            engine: self,
            key,
            owner,
            token: grant.fencing_token,
            armed: true,
        };
        ticket.wait().await?;
        self.tokens
            .make_durable(grant.fencing_token, &*self.journal)
            .await?;
        release.armed = false;
        Ok(grant)
    }

    async fn lock_impl(
        &self,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
        lease: Option<Arc<LeaseCell>>,
    ) -> Result<Grant, LockError> {
        let attempt = self.try_lock(key, owner, ttl_ms, options, lease.as_ref())?;
        let (waiter_id, rx, wait_until) = match attempt {
            Attempt::Granted(grant, ticket) => {
                return self.acknowledge(key, owner, grant, ticket).await
            }
            Attempt::Refreshed(grant, ticket) => {
                // A retry by the holder: it was acknowledged before, or is
                // being acknowledged by the call it retries.
                ticket.wait().await?;
                self.tokens
                    .make_durable(grant.fencing_token, &*self.journal)
                    .await?;
                return Ok(grant);
            }
            Attempt::Queued { id, rx, wait_until } => (id, rx, wait_until),
        };

        let mut waiting = Waiting {
            engine: self,
            key,
            owner,
            id: waiter_id,
            rx,
            queued: true,
        };
        tokio::select! {
            biased;
            handoff = &mut waiting.rx => {
                waiting.queued = false;
                let Ok(handoff) = handoff else {
                    return Err(LockError::Unavailable("the lock store shut down".to_string()));
                };
                let handoff = handoff?;
                return self.acknowledge(key, owner, handoff.grant, handoff.ticket).await;
            }
            () = self.clock.sleep_until(wait_until) => {}
        }
        waiting.queued = false;
        let (grant, ticket) =
            self.time_out(key, owner, ttl_ms, options, lease.as_ref(), &mut waiting)?;
        self.acknowledge(key, owner, grant, ticket).await
    }

    /// The synchronous part of `lock`: grant, refresh, refuse, or queue.
    /// Under a `lease`, the owner is the lease's id and the expiry and
    /// durability are the lease's.
    fn try_lock(
        &self,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
        lease: Option<&Arc<LeaseCell>>,
    ) -> Result<Attempt, LockError> {
        let (mut guard, hash) = self.shard(key);
        let shard = &mut *guard;
        let now = self.clock.now_ms();
        let Some(at) = self.settle_held(shard, key, hash, now) else {
            let (grant, ticket) = match lease {
                Some(lease) => {
                    let expires_at_ms = lease
                        .attach_if_live(&key.name, now)
                        .ok_or(LockError::NotHeld)?;
                    self.install(
                        shard,
                        key,
                        hash,
                        owner,
                        expires_at_ms,
                        lease.durability,
                        Some(lease.clone()),
                        options.quota,
                    )
                    .inspect_err(|_| lease.detach(&key.name))?
                }
                None => self.install(
                    shard,
                    key,
                    hash,
                    owner,
                    deadline(now, ttl_ms)?,
                    options.durability,
                    None,
                    options.quota,
                )?,
            };
            return Ok(Attempt::Granted(grant, ticket));
        };
        let lock = shard.at(at);
        if let Some(holder) = lock.held_by(owner) {
            if holder.lease.is_some() {
                // Held under the lease already: its grant, unchanged; only
                // a refresh of the lease moves its expiry.
                return Ok(Attempt::Refreshed(holder.grant(), Ticket::ready()));
            }
            // Same token, refreshed expiry, and the durability the lock
            // already has.
            let expires_at_ms = deadline(now, ttl_ms)?;
            let (grant, ticket) = self.move_expiry(shard, at, key, expires_at_ms);
            return Ok(Attempt::Refreshed(grant, ticket));
        }
        if let Some(lease) = lease {
            if !lease.is_live(now) {
                return Err(LockError::NotHeld);
            }
        }
        if options.wait_ms == 0 {
            return Err(LockError::Busy(lock.info().expect("held")));
        }
        let id = self.next_waiter_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        shard.at_mut(at).waiters.push_back(Waiter {
            id,
            owner: owner.to_string(),
            ttl_ms,
            durability: options.durability,
            lease: lease.cloned(),
            tx,
        });
        Ok(Attempt::Queued {
            id,
            rx,
            wait_until: now.saturating_add(options.wait_ms),
        })
    }

    /// A queued call's wait ran out. A hand-off may have raced the timer: if
    /// so, it wins; otherwise the caller leaves the queue with `busy`.
    fn time_out(
        &self,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
        lease: Option<&Arc<LeaseCell>>,
        waiting: &mut Waiting<'_>,
    ) -> Result<(Grant, Ticket), LockError> {
        let (mut guard, hash) = self.shard(key);
        let shard = &mut *guard;
        let now = self.clock.now_ms();
        self.settle(shard, key, hash, now);
        if let Ok(handoff) = waiting.rx.try_recv() {
            let handoff = handoff?;
            return Ok((handoff.grant, handoff.ticket));
        }
        remove_waiter(shard, key, hash, waiting.id);
        match shard.find(hash, key).and_then(|at| shard.at(at).info()) {
            Some(info) => Err(LockError::Busy(info)),
            // Free with nobody ahead (a live waiter ahead would hold it).
            None => match lease {
                Some(lease) => {
                    let expires_at_ms = lease
                        .attach_if_live(&key.name, now)
                        .ok_or(LockError::NotHeld)?;
                    self.install(
                        shard,
                        key,
                        hash,
                        owner,
                        expires_at_ms,
                        lease.durability,
                        Some(lease.clone()),
                        options.quota,
                    )
                    .inspect_err(|_| lease.detach(&key.name))
                }
                None => {
                    let expires_at_ms = deadline(now, ttl_ms)?;
                    self.install(
                        shard,
                        key,
                        hash,
                        owner,
                        expires_at_ms,
                        options.durability,
                        None,
                        options.quota,
                    )
                }
            },
        }
    }

    async fn unlock_impl(
        &self,
        key: &Key,
        owner: &str,
        token: Option<u64>,
    ) -> Result<(), LockError> {
        let ticket = {
            let (mut guard, hash) = self.shard(key);
            let shard = &mut *guard;
            let now = self.clock.now_ms();
            let Some(at) = self.settle_held(shard, key, hash, now) else {
                return Err(LockError::NotHeld);
            };
            let holds = shard
                .at(at)
                .held_by(owner)
                .is_some_and(|h| token.is_none_or(|t| t == h.token));
            if !holds {
                return Err(LockError::NotOwner);
            }
            self.remove_holder(shard, at, key, now, EventKind::Released)
        };
        ticket.wait().await
    }

    async fn extend_impl(&self, key: &Key, owner: &str, ttl_ms: u64) -> Result<Grant, LockError> {
        let (grant, ticket) = {
            let (mut guard, hash) = self.shard(key);
            let shard = &mut *guard;
            let now = self.clock.now_ms();
            let expires_at_ms = deadline(now, ttl_ms)?;
            let Some(at) = self.settle_held(shard, key, hash, now) else {
                return Err(LockError::NotHeld);
            };
            let lock = shard.at(at);
            let Some(holder) = lock.held_by(owner) else {
                return Err(LockError::NotOwner);
            };
            if holder.lease.is_some() {
                return Err(LockError::InvalidArgument(format!(
                    "lock {:?} is held under lease {:?}: its expiry is the lease's; refresh the lease",
                    key.name,
                    lock.owner()
                )));
            }
            self.move_expiry(shard, at, key, expires_at_ms)
        };
        ticket.wait().await?;
        Ok(grant)
    }

    async fn force_unlock_impl(&self, key: &Key) -> Result<LockInfo, LockError> {
        let (info, ticket) = {
            let (mut guard, hash) = self.shard(key);
            let shard = &mut *guard;
            let now = self.clock.now_ms();
            let Some((at, info)) = self
                .settle(shard, key, hash, now)
                .and_then(|at| Some((at, shard.at(at).info()?)))
            else {
                return Err(LockError::NotHeld);
            };
            tracing::warn!(
                namespace = &*key.namespace,
                name = &*key.name,
                owner = %info.owner,
                token = info.fencing_token,
                "lock force-released"
            );
            (
                info,
                self.remove_holder(shard, at, key, now, EventKind::ForceReleased),
            )
        };
        ticket.wait().await?;
        Ok(info)
    }

    fn get_impl(&self, key: &Key) -> Option<LockInfo> {
        let (mut guard, hash) = self.shard(key);
        let now = self.clock.now_ms();
        let at = self.settle(&mut guard, key, hash, now)?;
        guard.at(at).info()
    }

    fn list_impl(&self, namespace: &str, prefix: &str) -> Vec<ListedLock> {
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
                        acquired_at_ms: Some(self.clock.to_wall_ms(h.acquired_at_ms)),
                        waiters: lock.waiters.len() as u64,
                    });
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    fn release_now(&self, key: &Key, owner: &str, token: u64) {
        let (mut guard, hash) = self.shard(key);
        let shard = &mut *guard;
        let now = self.clock.now_ms();
        let Some(at) = self.settle(shard, key, hash, now) else {
            return;
        };
        let holds = shard
            .at(at)
            .held_by(owner)
            .is_some_and(|h| h.token == token);
        if holds {
            drop(self.remove_holder(shard, at, key, now, EventKind::Released));
        }
    }

    /// Removes every expired holder and hands freed locks to their waiters.
    /// Returns the earliest remaining deadline.
    fn purge_expired(&self, now: u64) -> u64 {
        let mut earliest = u64::MAX;
        for shard in self.shards.iter() {
            let mut guard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let shard = &mut *guard;
            while let Some((due, at)) = shard.next_deadline() {
                if due > now {
                    earliest = earliest.min(due);
                    break;
                }
                // The deadline is its holder's expiry, which has passed.
                // Removing the holder removes this deadline, and a waiter
                // granted in its place gets a later one: this loop ends.
                let key = shard.at(at).key();
                drop(self.remove_holder(shard, at, &key, now, EventKind::Expired));
            }
        }
        earliest.min(self.expire_leases(now))
    }

    /// The number of live (unexpired) locks, for tests and metrics.
    pub fn live_locks(&self) -> usize {
        let now = self.clock.now_ms();
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap_or_else(PoisonError::into_inner);
                s.iter()
                    .filter(|l| l.holder().is_some_and(|h| h.expires_at_ms() > now))
                    .count()
            })
            .sum()
    }

    /// The number of callers waiting in queues.
    fn waiters(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap_or_else(PoisonError::into_inner);
                s.iter().map(|l| l.waiters.len()).sum::<usize>()
            })
            .sum()
    }
}

/// Forgets the lock at `at` if it has neither holder nor waiters.
fn forget_if_idle(shard: &mut Shard, at: usize) {
    let lock = shard.at(at);
    if lock.holder().is_none() && lock.waiters.is_empty() {
        shard.remove(at);
    }
}

fn remove_waiter(shard: &mut Shard, key: &Key, hash: u64, id: u64) {
    if let Some(at) = shard.find(hash, key) {
        shard.at_mut(at).waiters.retain(|w| w.id != id);
        forget_if_idle(shard, at);
    }
}

/// A queued `lock` call. If the call goes away (its future is dropped), it
/// leaves the queue; if a grant was handed to it meanwhile, that grant is
/// released.
struct Waiting<'a> {
    engine: &'a Engine,
    key: &'a Key,
    owner: &'a str,
    id: u64,
    rx: oneshot::Receiver<Result<Handoff, LockError>>,
    queued: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.queued {
            return;
        }
        let (mut guard, hash) = self.engine.shard(self.key);
        remove_waiter(&mut guard, self.key, hash, self.id);
        drop(guard);
        if let Ok(Ok(handoff)) = self.rx.try_recv() {
            self.engine
                .release_now(self.key, self.owner, handoff.grant.fencing_token);
        }
    }
}

/// Releases a grant that will never be acknowledged.
struct ReleaseOnDrop<'a> {
    engine: &'a Engine,
    key: &'a Key,
    owner: &'a str,
    token: u64,
    armed: bool,
}

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.engine.release_now(self.key, self.owner, self.token);
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Let the purge task notice that the engine is gone.
        self.purge.notify.notify_one();
    }
}

/// Sleeps until the earliest deadline (or an earlier one appears), then
/// purges. Holds the engine only while purging, so dropping the last handle
/// ends the task.
async fn purge_loop(engine: Weak<Engine>, signal: Arc<PurgeSignal>) {
    loop {
        let sleep = {
            let Some(engine) = engine.upgrade() else {
                return;
            };
            // While we purge, any new deadline may be earlier than the one we
            // will compute: have every one of them leave a wake-up permit.
            signal.next_wake_ms.store(u64::MAX, Ordering::Release);
            let next = engine.purge_expired(engine.clock.now_ms());
            signal.next_wake_ms.store(next, Ordering::Release);
            engine.clock.sleep_until(next)
        };
        tokio::select! {
            () = sleep => {}
            () = signal.notify.notified() => {}
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
            .live_owner(&key.namespace, owner, self.clock.now_ms());
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

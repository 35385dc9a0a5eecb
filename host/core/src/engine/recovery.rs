//! How an engine starts: resuming from what its journal [`Recovered`]
//! (nothing, for the `memory` store), then starting its purge task.
//!
//! Expiries on disk are wall-clock times; each is read once through
//! [`Clock::monotonic_of_wall_ms`] and compared with the monotonic now. A
//! record that expired while the store was closed is deleted rather than
//! installed, and a lock under a live lease takes the lease's expiry (a
//! refresh writes only the lease's record).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use super::leases::{LeaseCell, LeaseTable};
use super::outbox::Outbox;
use super::purge::{self, PurgeSignal};
use super::table::{Namespace, Namespaces, NewHolder, Shard};
use super::tokens::TokenAllocator;
use super::{Engine, EngineOptions};
use crate::clock::{Clock, SystemClock};
use crate::journal::{Journal, JournalOp, NullJournal, Record, Recovered};
use crate::types::{Claim, Durability, Key};

impl Engine {
    /// The `memory` store: nothing survives a restart, and tokens are seeded
    /// from the wall clock (see [`Recovered::in_memory`]).
    ///
    /// # Panics
    /// Outside a tokio runtime, like [`Engine::new`].
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
    /// Starts the purge task on the current tokio runtime; it ends when the
    /// engine is dropped.
    ///
    /// # Panics
    /// Outside a tokio runtime, saying so: without its purge task the
    /// engine would hand expired locks to their waiters late (the rule of
    /// every constructor that starts a task, `LockService::new`'s too).
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
    /// Outside a tokio runtime, like [`Engine::new`] (before reading a
    /// row).
    pub fn resume<E>(
        journal: Arc<dyn Journal>,
        mut recovered: Recovered,
        locks: impl IntoIterator<Item = Result<(Key, Record), E>>,
        clock: Arc<dyn Clock>,
        options: EngineOptions,
    ) -> Result<Arc<Engine>, E> {
        let runtime = purge::runtime();
        let shards = (0..options.shards.max(1))
            .map(|_| Mutex::new(Shard::default()))
            .collect();
        let tokens = Arc::new(TokenAllocator::resume(
            recovered.next_token,
            recovered.reserved_up_to,
            options.token_block,
        ));
        let engine = Arc::new(Engine {
            shards,
            events: Outbox::start(&runtime, journal.clone(), tokens.clone()),
            tokens,
            journal,
            clock,
            purge: PurgeSignal::new(),
            next_waiter_id: AtomicU64::new(0),
            namespaces: Namespaces::default(),
            leases: LeaseTable::default(),
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
        for (key, record) in std::mem::take(&mut recovered.shares) {
            highest_recorded = highest_recorded.max(Some(record.token));
            engine.recover_share_record(key, record, now);
        }
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
            engine.tokens.resume_above(highest);
        }
        purge::start(&runtime, &engine, engine.purge.clone());
        Ok(engine)
    }

    /// Installs one recovered holder of a name held shared or of a
    /// semaphore, or drops its record if it expired while the store was
    /// closed.
    fn recover_share_record(&self, key: Key, mut record: Record, now: u64) {
        record.expires_at_ms = self.clock.monotonic_of_wall_ms(record.expires_at_ms);
        if record.expires_at_ms <= now || record.claim == Claim::Exclusive {
            // Expired while we were down (or not a share: no store writes
            // one): free, and no longer worth keeping.
            drop(
                self.journal
                    .submit(JournalOp::DeleteShare(key, record.owner)),
            );
            return;
        }
        let namespace = self.namespaces.get(&key.namespace);
        let (mut shard, _) = self.shard(&key);
        self.recover_share(&mut shard, key, record, &namespace, now);
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
}

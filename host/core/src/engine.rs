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
//!
//! This file holds the engine and its lock operations. Beside it: `table`
//! (a shard's locks, index and deadlines), `namespaces` (what the engine
//! keeps per namespace), `waiter` (a call waiting in a queue), `queue`
//! (waiting in a lock's FIFO queue, hand-off and time-out), `group_state` and
//! `group_ops` (names held shared, semaphores, elections and lock-delays),
//! `reads` (a name's holders, listings, and the barrier a read waits
//! behind), `leases`, `tokens` (fencing tokens and their durable
//! reservations), `recovery` (the constructors, resuming from what the
//! journal recovered), `purge` (the task that sweeps expired holders at
//! their deadlines), `outbox` (events, published once durable) and
//! `lock_backend` (the [`LockBackend`](crate::LockBackend) face, answering
//! in wall-clock time).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::clock::{deadline, Clock};
use crate::error::LockError;
use crate::journal::{Journal, JournalOp, Record, Ticket};
use crate::types::{Claim, Durability, EventKind, Grant, Key, LockEvent, LockInfo, LockOptions};

mod group_ops;
mod group_state;
mod leases;
mod lock_backend;
mod namespaces;
mod outbox;
mod purge;
mod queue;
mod reads;
mod recovery;
mod table;
mod tokens;
mod waiter;

use leases::{LeaseCell, LeaseTable};
use outbox::Outbox;
use purge::{PurgeSignal, Sweep};
use table::{key_hash, FxBuild, Holder, Lock, Namespace, Namespaces, NewHolder, Shard};
use tokens::TokenAllocator;
use waiter::Queued;

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

/// The single-node [`LockBackend`](crate::LockBackend). See the module docs
/// for its invariants.
pub struct Engine {
    shards: Box<[Mutex<Shard>]>,
    tokens: Arc<TokenAllocator>,
    journal: Arc<dyn Journal>,
    clock: Arc<dyn Clock>,
    purge: Arc<PurgeSignal>,
    next_waiter_id: AtomicU64,
    /// Every namespace seen, interned, with its count of holders (quotas).
    namespaces: Namespaces,
    /// Live leases (docs/contract.md#c16-leases).
    leases: LeaseTable,
    /// Every change, for whoever subscribed (docs/reference.md#events), once
    /// durable.
    events: Outbox,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("shards", &self.shards.len())
            .field("next_token", &self.tokens.peek())
            .finish_non_exhaustive()
    }
}

/// A `lock` or a campaign, as [`Engine::decide`] takes it.
#[derive(Clone, Copy)]
pub(super) struct Request<'a> {
    pub(super) owner: &'a str,
    pub(super) ttl_ms: u64,
    pub(super) options: LockOptions,
    /// A candidate's value (a campaign only).
    pub(super) value: Option<&'a str>,
}

/// What the synchronous part of `lock` decided.
enum Attempt {
    Granted(Grant, Ticket),
    Refreshed(Grant, Ticket),
    Queued(Queued),
}

impl Engine {
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
        (quota, lock_delay_ms): (Option<u64>, u64),
        now: u64,
    ) -> Result<(Grant, Ticket), LockError> {
        let at = shard.find_or_insert(hash, key, owner, || self.namespaces.get(&key.namespace));
        if let Err(e) = shard.at(at).namespace.try_add(quota) {
            shard.forget_if_idle(at);
            return Err(e);
        }
        shard.at(at).namespace.note_lock_delay(lock_delay_ms);
        let (grant, ticket) =
            self.install_counted(shard, at, key, owner, expires_at_ms, durability, lease, now);
        self.emit(EventKind::Acquired, shard.at(at), key);
        Ok((grant, ticket))
    }

    /// Makes `owner` the holder of the free lock `key`: under `lease`, with
    /// the lease's expiry and durability (`not_held` if it ended), else for
    /// `ttl_ms` with `options.durability`; if the namespace's quota allows.
    /// The caller holds the shard mutex.
    #[allow(clippy::too_many_arguments)]
    fn install_fresh(
        &self,
        shard: &mut Shard,
        key: &Key,
        hash: u64,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
        lease: Option<&Arc<LeaseCell>>,
        now: u64,
    ) -> Result<(Grant, Ticket), LockError> {
        match lease {
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
                    (options.quota, options.lock_delay_ms),
                    now,
                )
                .inspect_err(|_| lease.detach(&key.name))
            }
            None => self.install(
                shard,
                key,
                hash,
                owner,
                deadline(now, ttl_ms)?,
                options.durability,
                None,
                (options.quota, options.lock_delay_ms),
                now,
            ),
        }
    }

    /// Publishes `kind` about the holder of `lock` (which must have one).
    fn emit(&self, kind: EventKind, lock: &Lock, key: &Key) {
        self.events.emit(|| {
            let holder = lock.holder();
            LockEvent {
                claim: Claim::Exclusive,
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

    /// Publishes that `holder` of `lock` (named `key`) left, by `kind`, and
    /// counts how long it held.
    fn emit_left(
        &self,
        kind: EventKind,
        key: &Key,
        namespace: &Namespace,
        owner: &str,
        holder: &Holder,
        now: u64,
    ) {
        namespace.record_hold(now.saturating_sub(holder.acquired_at_ms));
        self.events.emit(|| LockEvent {
            claim: Claim::Exclusive,
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
    /// of the lock at `at` (which has no holder), granted at `now`.
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
        now: u64,
    ) -> (Grant, Ticket) {
        let token = self.tokens.issue();
        let ticket = self.journal_if_persistent(durability, || {
            JournalOp::Put(
                key.clone(),
                Record {
                    claim: Claim::Exclusive,
                    value: None,
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
                acquired_at_ms: now,
                durability,
                lease,
            },
        );
        // Even for an ephemeral holder: a persistent release of the name
        // before it may still be on its way to the disk.
        self.note_journal_pos(shard, at);
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
                    claim: Claim::Exclusive,
                    value: None,
                    owner: lock.owner().to_string(),
                    token: grant.fencing_token,
                    expires_at_ms: self.clock.to_wall_ms(expires_at_ms),
                },
            )
        });
        self.purge.note_deadline(expires_at_ms);
        self.events.emit(|| LockEvent {
            claim: Claim::Exclusive,
            kind: EventKind::Extended,
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            owner: Arc::from(lock.owner()),
            fencing_token: holder.token,
            at_ms: self.clock.to_wall_ms(self.clock.now_ms()),
            acquired_at_ms: None,
        });
        self.note_journal_pos(shard, at);
        (grant, ticket)
    }

    /// Records where the journal is after the last op of the lock at `at`.
    fn note_journal_pos(&self, shard: &mut Shard, at: usize) {
        // The low half: `name_barrier` rebuilds the whole from the journal's
        // current position, which is less than 2^32 ops ahead of any op
        // that may still be waiting for the disk.
        shard.at_mut(at).journal_pos = self.journal.submitted() as u32;
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
        // The delete first: the event waits for everything submitted before
        // it (the outbox), so it must come after its own op.
        let ticket =
            self.journal_if_persistent(holder.durability, || JournalOp::Delete(key.clone()));
        self.emit_left(why, key, &lock.namespace, lock.owner(), holder, now);
        lock.namespace.remove();
        // Under a lock-delay an expired or force-released grant keeps its
        // place (docs/contract.md#c23-lock-delay), from when it ended.
        let delayed_until = match why {
            EventKind::Expired => Some(holder.expires_at_ms()),
            EventKind::ForceReleased => Some(now),
            _ => None,
        }
        .map(|ended| ended.saturating_add(lock.namespace.lock_delay_ms()))
        .filter(|&until| until > now);
        let ended = lock.info().expect("held");
        let holder = shard.take_holder(at).expect("held");
        if let Some(lease) = &holder.lease {
            lease.detach(&key.name);
        }
        match delayed_until {
            Some(until) => {
                self.delay_in_group(shard, at, key, ended, holder.acquired_at_ms, until);
            }
            None => self.hand_off(shard, at, key, now),
        }
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

    /// Settles `key` wherever it is, the table or the groups, and answers
    /// where its exclusive holder is in the table, if it has one. After it
    /// the name is in one place, which stays so for the caller (it holds
    /// the shard mutex): settling a group may move the name to the table
    /// and grant it, and an expiry under a lock-delay moves it to a group.
    fn settle_all(&self, shard: &mut Shard, key: &Key, hash: u64, now: u64) -> Option<usize> {
        let held = self.settle_held(shard, key, hash, now);
        if held.is_some() || shard.groups.map.is_empty() {
            return held;
        }
        self.settle_group(shard, key, now);
        shard
            .find(hash, key)
            .filter(|&at| shard.at(at).holder().is_some())
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
        request: Request<'_>,
        lease: Option<Arc<LeaseCell>>,
    ) -> Result<Grant, LockError> {
        let owner = request.owner;
        match self.try_lock(key, request, lease.as_ref())? {
            Attempt::Granted(grant, ticket) => self.acknowledge(key, owner, grant, ticket).await,
            Attempt::Refreshed(grant, ticket) => {
                // A retry by the holder: it was acknowledged before, or is
                // being acknowledged by the call it retries.
                ticket.wait().await?;
                self.tokens
                    .make_durable(grant.fencing_token, &*self.journal)
                    .await?;
                Ok(grant)
            }
            Attempt::Queued(queued) => {
                self.wait_in_queue(key, request, lease.as_ref(), queued)
                    .await
            }
        }
    }

    /// The synchronous part of `lock`: grant, refresh, refuse, or queue.
    /// Under a `lease`, the owner is the lease's id and the expiry and
    /// durability are the lease's.
    fn try_lock(
        &self,
        key: &Key,
        request: Request<'_>,
        lease: Option<&Arc<LeaseCell>>,
    ) -> Result<Attempt, LockError> {
        if lease.is_some() && request.options.claim != Claim::Exclusive {
            return Err(LockError::InvalidArgument(format!(
                "{:?}: a lease's locks are exclusive; take a shared lock or a permit without a lease",
                key.name
            )));
        }
        let (mut guard, hash) = self.shard(key);
        let now = self.clock.now_ms();
        self.decide(&mut guard, key, hash, request, lease, now)
    }

    /// [`Engine::try_lock`] (and a campaign) under the shard mutex.
    fn decide(
        &self,
        shard: &mut Shard,
        key: &Key,
        hash: u64,
        request: Request<'_>,
        lease: Option<&Arc<LeaseCell>>,
        now: u64,
    ) -> Result<Attempt, LockError> {
        let Request {
            owner,
            ttl_ms,
            options,
            value,
        } = request;
        let Some(at) = self.settle_all(shard, key, hash, now) else {
            if options.claim != Claim::Exclusive
                || (!shard.groups.map.is_empty() && shard.groups.map.contains_key(key))
            {
                return self.lock_in_group(shard, key, owner, ttl_ms, options, (value, lease), now);
            }
            let (grant, ticket) =
                self.install_fresh(shard, key, hash, owner, ttl_ms, options, lease, now)?;
            return Ok(Attempt::Granted(grant, ticket));
        };
        let lock = shard.at(at);
        if options.claim != Claim::Exclusive {
            // Held exclusive, in the table: a lock.
            group_state::check_kind(key, group_state::Kind::Lock, options.claim)?;
            if lock.held_by(owner).is_some() {
                return Err(group_state::no_change_of_mode(
                    key,
                    owner,
                    Claim::Exclusive,
                    options.claim,
                ));
            }
        } else if let Some(holder) = lock.held_by(owner) {
            if options.refuse_relock && lease.is_none() {
                return Err(LockError::Busy(lock.info().expect("held")));
            }
            if holder.lease.is_some() {
                // Held under the lease already: its grant, unchanged; only
                // a refresh of the lease moves its expiry. The grant may
                // still be on its way to the disk: answer behind it.
                return Ok(Attempt::Refreshed(holder.grant(), self.journal.flushed()));
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
        Ok(Attempt::Queued(
            self.enqueue(shard, at, owner, ttl_ms, options, lease, now),
        ))
    }

    async fn unlock_impl(
        &self,
        key: &Key,
        owner: &str,
        token: Option<u64>,
    ) -> Result<(), LockError> {
        let ticket = 'decided: {
            let (mut guard, hash) = self.shard(key);
            let shard = &mut *guard;
            let now = self.clock.now_ms();
            let Some(at) = self.settle_all(shard, key, hash, now) else {
                break 'decided self.unlock_in_group(shard, key, owner, token, now)?;
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
        let (grant, ticket) = 'decided: {
            let (mut guard, hash) = self.shard(key);
            let shard = &mut *guard;
            let now = self.clock.now_ms();
            let expires_at_ms = deadline(now, ttl_ms)?;
            let Some(at) = self.settle_all(shard, key, hash, now) else {
                break 'decided self.extend_in_group(shard, key, owner, expires_at_ms, now)?;
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
        let (info, ticket) = 'decided: {
            let (mut guard, hash) = self.shard(key);
            let shard = &mut *guard;
            let now = self.clock.now_ms();
            let Some((at, info)) = self
                .settle_all(shard, key, hash, now)
                .and_then(|at| Some((at, shard.at(at).info()?)))
            else {
                break 'decided self.force_in_group(shard, key, now)?;
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

    /// `proclaim` (docs/contract.md#c24-elections).
    async fn proclaim_impl(
        &self,
        key: &Key,
        candidate: &str,
        token: u64,
        value: &str,
    ) -> Result<(), LockError> {
        let ticket = {
            let (mut guard, hash) = self.shard(key);
            let shard = &mut *guard;
            let now = self.clock.now_ms();
            if self.settle_all(shard, key, hash, now).is_some() {
                return Err(group_state::not_an_election(key, group_state::Kind::Lock));
            }
            self.proclaim_in_group(shard, key, candidate, token, value, now)?
        };
        ticket.wait().await
    }

    fn release_now(&self, key: &Key, owner: &str, token: u64) {
        let (mut guard, hash) = self.shard(key);
        let now = self.clock.now_ms();
        self.release_in_shard(&mut guard, key, hash, owner, token, now);
    }

    /// [`release_now`](Self::release_now) under the shard mutex the caller
    /// holds.
    fn release_in_shard(
        &self,
        shard: &mut Shard,
        key: &Key,
        hash: u64,
        owner: &str,
        token: u64,
        now: u64,
    ) {
        let Some(at) = self.settle_all(shard, key, hash, now) else {
            self.release_in_group(shard, key, owner, token, now);
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
        self.purge.engine_dropped();
    }
}

impl Sweep for Engine {
    fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// Removes every expired holder and hands freed locks to their
    /// waiters, then every expired lease.
    fn sweep(&self, now: u64) -> u64 {
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
            // Groups: settling one ends what expired and refiles it at a
            // later deadline, or forgets it: this loop ends too.
            while let Some((due, key)) = shard.groups.next_deadline() {
                if due > now {
                    earliest = earliest.min(due);
                    break;
                }
                self.settle_group(shard, &key, now);
            }
        }
        earliest.min(self.expire_leases(now))
    }
}

//! Names held shared, semaphores, elections, and places held back by a
//! lock-delay (docs/contract.md C21 to C24): a shard's `groups`.
//!
//! The table (`table`) is laid out for the common case, a name with one
//! exclusive holder. A name lives here instead while it has a shared
//! holder or a delayed place, and for as long as it is a semaphore or an
//! election with a holder or a waiter:
//! - a key is in the table or in `groups`, never in both;
//! - a group's members are live shared, permit and leader grants and
//!   delayed places (the place of a grant that expired or was
//!   force-released, until its delay ends), never a live exclusive grant,
//!   never a lease's lock;
//! - after [`Engine::settle_group`] a group has a member. When its members
//!   are gone, its queue's head (if it fits) has been granted; a lock's
//!   group whose first waiter asks for the name alone moves back to the
//!   table, which grants it, and a group nobody waits for is forgotten;
//! - its `deadline` is its members' earliest expiry, filed in the shard's
//!   `Groups` for the purge task.

use std::sync::Arc;

use super::group_state::{no_change_of_mode, not_an_election, Group, Kind, Member};
use super::leases::LeaseCell;
use super::namespaces::Namespace;
use super::table::{key_hash, Shard};
use super::waiter::{Handoff, Waiter};
use super::{Attempt, Engine};
use crate::clock::deadline;
use crate::error::LockError;
use crate::journal::{JournalOp, Record, Ticket};
use crate::types::{
    Claim, Durability, EventKind, Grant, Holding, Key, Leader, ListedLock, LockEvent, LockInfo,
    LockOptions, NameState,
};

impl Engine {
    /// The record of a persistent member (its expiry in wall-clock time).
    fn share_record(&self, member: &Member) -> Record {
        Record {
            owner: member.owner.to_string(),
            token: member.token,
            expires_at_ms: self.clock.to_wall_ms(member.expires_at_ms),
            claim: member.claim,
            value: member.value.as_deref().map(str::to_string),
        }
    }

    /// Appends a grant of `claim` to `group`: a token, the record if
    /// persistent. The caller has counted it in the namespace.
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &self,
        group: &mut Group,
        key: &Key,
        owner: &str,
        (claim, value): (Claim, Option<Arc<str>>),
        expires_at_ms: u64,
        durability: Durability,
        now: u64,
    ) -> (Grant, Ticket) {
        let member = Member {
            owner: Arc::from(owner),
            claim,
            token: self.tokens.issue(),
            expires_at_ms,
            acquired_at_ms: now,
            durability,
            delayed: false,
            value,
        };
        let ticket = self.journal_if_persistent(durability, || {
            JournalOp::PutShare(key.clone(), self.share_record(&member))
        });
        let grant = member.grant();
        group.members.push(member);
        group.journal_pos = self.journal.submitted();
        self.purge.note_deadline(expires_at_ms);
        (grant, ticket)
    }

    fn emit_member(&self, kind: EventKind, key: &Key, member: &Member, now: u64) {
        let ended = kind.ends_a_grant();
        self.events.emit(|| LockEvent {
            kind,
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            owner: member.owner.clone(),
            fencing_token: member.token,
            at_ms: self.clock.to_wall_ms(now),
            acquired_at_ms: ended.then(|| self.clock.to_wall_ms(member.acquired_at_ms)),
            claim: member.claim,
        });
    }

    /// Ends the live member `i` of `group` by `why`: submits its record's
    /// delete (for a persistent member, unless `journaled` already did, in
    /// a batch), then publishes it (the event waits for the ops submitted
    /// before it), uncounts it, and, for an expiry or a force-release under
    /// a lock-delay, keeps its place until `ended_at + delay`. Answers the
    /// delete's ticket and whether the place stays at `i`.
    #[allow(clippy::too_many_arguments)]
    fn end_member(
        &self,
        group: &mut Group,
        i: usize,
        key: &Key,
        now: u64,
        why: EventKind,
        ended_at: u64,
        journaled: bool,
    ) -> (Ticket, bool) {
        let member = &group.members[i];
        let ticket = if journaled || member.durability == Durability::Ephemeral {
            Ticket::ready()
        } else {
            let ticket = self.journal.submit(JournalOp::DeleteShare(
                key.clone(),
                member.owner.to_string(),
            ));
            group.journal_pos = self.journal.submitted();
            ticket
        };
        let member = &group.members[i];
        group
            .namespace
            .record_hold(now.saturating_sub(member.acquired_at_ms));
        group.namespace.remove();
        self.emit_member(why, key, member, now);
        let delay = match why {
            EventKind::Expired | EventKind::ForceReleased => group.namespace.lock_delay_ms(),
            _ => 0,
        };
        let until = ended_at.saturating_add(delay);
        if delay > 0 && until > now {
            let member = &mut group.members[i];
            member.delayed = true;
            member.expires_at_ms = until;
            (ticket, true)
        } else {
            group.members.remove(i);
            (ticket, false)
        }
    }

    /// Brings the group `key` up to `now`: ends expired members (keeping
    /// their places under a lock-delay) and delays that ended, serves its
    /// queue from the head, and moves the name back to the table, or
    /// forgets it, when nothing in it needs a group. The caller holds the
    /// shard mutex.
    pub(super) fn settle_group(&self, shard: &mut Shard, key: &Key, now: u64) {
        let Some(group) = shard.groups.map.get_mut(key) else {
            return;
        };
        let mut i = 0;
        while i < group.members.len() {
            let member = &group.members[i];
            if member.expires_at_ms > now {
                i += 1;
            } else if member.delayed {
                group.members.remove(i);
            } else {
                let expired_at = member.expires_at_ms;
                // Nobody waits on this delete: a record found expired at
                // the next start is dropped anyway.
                let (delete, kept) =
                    self.end_member(group, i, key, now, EventKind::Expired, expired_at, false);
                drop(delete);
                i += usize::from(kept);
            }
        }
        self.serve(group, key, now);
        if group.members.is_empty() && (group.waiters.is_empty() || group.kind == Kind::Lock) {
            let group = shard.groups.take(key).expect("present");
            if !group.waiters.is_empty() {
                // The first live waiter asks for the lock alone: the table
                // grants it.
                self.to_table(shard, key, group, now);
            }
            return;
        }
        if let Some(due) = shard.groups.refile(key) {
            self.purge.note_deadline(due);
        }
    }

    /// Grants the group's queue from its head for as long as the head fits
    /// beside the members: consecutive shared waiters together, permits
    /// while some are free. An exclusive head stops the queue; with no
    /// members left it is the table's to grant.
    fn serve(&self, group: &mut Group, key: &Key, now: u64) {
        while let Some(head) = group.waiters.front() {
            if head.tx.is_closed() {
                group.waiters.pop_front();
                continue;
            }
            if head.claim == Claim::Exclusive || !group.admits(head.claim) {
                return;
            }
            let waiter = group.waiters.pop_front().expect("a head");
            // A hand-off is counted, never refused by a quota.
            group.namespace.add();
            let expires_at_ms = now.saturating_add(waiter.ttl_ms);
            let (grant, ticket) = self.admit(
                group,
                key,
                &waiter.owner,
                (waiter.claim, waiter.value),
                expires_at_ms,
                waiter.durability,
                now,
            );
            if waiter.tx.send(Ok(Handoff { grant, ticket })).is_ok() {
                let member = group.members.last().expect("just admitted");
                self.emit_member(EventKind::HandedOff, key, member, now);
            } else {
                // The waiter left between the check and the send: undo.
                let member = group.members.pop().expect("just admitted");
                group.namespace.remove();
                drop(self.journal_if_persistent(member.durability, || {
                    JournalOp::DeleteShare(key.clone(), member.owner.to_string())
                }));
                group.journal_pos = self.journal.submitted();
            }
        }
    }

    /// Puts the waiters of a group with no members back in the table,
    /// whose hand-off grants the first of them.
    fn to_table(&self, shard: &mut Shard, key: &Key, group: Group, now: u64) {
        let hash = key_hash(&key.namespace, &key.name);
        let at = shard.find_or_insert(hash, key, "", || group.namespace.clone());
        let lock = shard.at_mut(at);
        for waiter in group.waiters {
            lock.waiters.push_back(waiter);
        }
        self.hand_off(shard, at, key, now);
    }

    /// The free lock at `at` in the table has a shared waiter at its head:
    /// the name becomes a group, which grants it (and the shared waiters
    /// right behind it).
    pub(super) fn table_to_group(
        &self,
        shard: &mut Shard,
        at: usize,
        key: &Key,
        head: Waiter,
        now: u64,
    ) {
        let lock = shard.remove(at);
        let mut group = Group::new(lock.namespace, Kind::Lock);
        group.waiters = lock.waiters.into_deque();
        group.waiters.push_front(head);
        shard.groups.map.insert(key.clone(), group);
        self.settle_group(shard, key, now);
    }

    /// The holder of a lock in the table expired or was force-released
    /// under a lock-delay: the name becomes a group whose one member is
    /// the delayed place, until `until`, with the lock's waiters.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn delay_in_group(
        &self,
        shard: &mut Shard,
        at: usize,
        key: &Key,
        ended: LockInfo,
        acquired_at_ms: u64,
        until: u64,
    ) {
        let lock = shard.remove(at);
        let mut group = Group::new(lock.namespace, Kind::Lock);
        group.waiters = lock.waiters.into_deque();
        group.members.push(Member {
            owner: Arc::from(ended.owner),
            claim: Claim::Exclusive,
            token: ended.fencing_token,
            expires_at_ms: until,
            acquired_at_ms,
            durability: ended.durability,
            delayed: true,
            value: None,
        });
        group.journal_pos = self.journal.submitted();
        shard.groups.map.insert(key.clone(), group);
        if let Some(due) = shard.groups.refile(key) {
            self.purge.note_deadline(due);
        }
    }

    /// `lock` on a name that is a group, or a shared lock or a permit of a
    /// free name (`group` absent): C21, C22. The caller settled the name
    /// and holds the shard mutex.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn lock_in_group(
        &self,
        shard: &mut Shard,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
        (value, lease): (Option<&str>, Option<&Arc<LeaseCell>>),
        now: u64,
    ) -> Result<Attempt, LockError> {
        let claim = options.claim;
        let value: Option<Arc<str>> = value.map(Arc::from);
        if !shard.groups.map.contains_key(key) {
            // Free: the first grant makes the group.
            let expires_at_ms = deadline(now, ttl_ms)?;
            let mut group = Group::new(self.namespaces.get(&key.namespace), Kind::of(claim));
            group.namespace.try_add(options.quota)?;
            group.namespace.note_lock_delay(options.lock_delay_ms);
            let (grant, ticket) = self.admit(
                &mut group,
                key,
                owner,
                (claim, value),
                expires_at_ms,
                options.durability,
                now,
            );
            self.emit_member(EventKind::Acquired, key, &group.members[0], now);
            shard.groups.map.insert(key.clone(), group);
            shard.groups.refile(key);
            return Ok(Attempt::Granted(grant, ticket));
        }
        let group = shard.groups.map.get_mut(key).expect("present");
        group.check_claim(key, claim)?;
        group.namespace.note_lock_delay(options.lock_delay_ms);
        if let Some(i) = group.held_by(owner) {
            return self.relock_member(shard, key, i, (owner, claim, value), ttl_ms, options, now);
        }
        let group = shard.groups.map.get_mut(key).expect("present");
        if group.waiters.is_empty() && claim != Claim::Exclusive && group.admits(claim) {
            let expires_at_ms = deadline(now, ttl_ms)?;
            group.namespace.try_add(options.quota)?;
            let (grant, ticket) = self.admit(
                group,
                key,
                owner,
                (claim, value),
                expires_at_ms,
                options.durability,
                now,
            );
            let member = group.members.last().expect("just admitted");
            self.emit_member(EventKind::Acquired, key, member, now);
            shard.groups.refile(key);
            return Ok(Attempt::Granted(grant, ticket));
        }
        // Refused: a settled group that refuses has a member in the way.
        let in_the_way = group.members.last().expect("a settled group has a member");
        if lease.is_some_and(|lease| !lease.is_live(now)) {
            return Err(LockError::NotHeld);
        }
        if options.wait_ms == 0 {
            return Err(LockError::Busy(in_the_way.info()));
        }
        // A lease's lock waits here too (exclusive: the table grants it,
        // under the lease, once the group has no member left).
        let (mut waiter, queued) = self.new_waiter(owner, ttl_ms, options, lease, now);
        waiter.value = value;
        group.waiters.push_back(waiter);
        Ok(Attempt::Queued(queued))
    }

    /// `lock` by a member that already holds the group's name (C2): the
    /// same token, a new expiry, the durability it has, and for a leader
    /// the value of this campaign.
    #[allow(clippy::too_many_arguments)]
    fn relock_member(
        &self,
        shard: &mut Shard,
        key: &Key,
        i: usize,
        (owner, claim, value): (&str, Claim, Option<Arc<str>>),
        ttl_ms: u64,
        options: LockOptions,
        now: u64,
    ) -> Result<Attempt, LockError> {
        let group = shard.groups.map.get_mut(key).expect("present");
        let member = &mut group.members[i];
        if member.claim != claim {
            return Err(no_change_of_mode(key, owner, member.claim, claim));
        }
        if options.refuse_relock {
            return Err(LockError::Busy(member.info()));
        }
        member.expires_at_ms = deadline(now, ttl_ms)?;
        let proclaimed = value.is_some() && value != member.value;
        if proclaimed {
            member.value = value;
        }
        let grant = member.grant();
        let member = &group.members[i];
        let ticket = self.journal_if_persistent(member.durability, || {
            JournalOp::PutShare(key.clone(), self.share_record(member))
        });
        self.emit_member(EventKind::Extended, key, member, now);
        if proclaimed {
            // A leader campaigning again with another value proclaims it.
            self.emit_member(EventKind::Proclaimed, key, member, now);
        }
        group.journal_pos = self.journal.submitted();
        if let Some(due) = shard.groups.refile(key) {
            self.purge.note_deadline(due);
        }
        Ok(Attempt::Refreshed(grant, ticket))
    }

    /// `unlock` of a group's member (C4, C5 for one grant of many).
    pub(super) fn unlock_in_group(
        &self,
        shard: &mut Shard,
        key: &Key,
        owner: &str,
        token: Option<u64>,
        now: u64,
    ) -> Result<Ticket, LockError> {
        let Some(group) = shard.groups.map.get_mut(key) else {
            return Err(LockError::NotHeld);
        };
        if group.live().next().is_none() {
            return Err(LockError::NotHeld);
        }
        let i = group
            .held_by(owner)
            .filter(|&i| token.is_none_or(|t| t == group.members[i].token))
            .ok_or(LockError::NotOwner)?;
        let (ticket, _) = self.end_member(group, i, key, now, EventKind::Released, now, false);
        self.settle_group(shard, key, now);
        Ok(ticket)
    }

    /// `extend` of a group's member (C6).
    pub(super) fn extend_in_group(
        &self,
        shard: &mut Shard,
        key: &Key,
        owner: &str,
        expires_at_ms: u64,
        now: u64,
    ) -> Result<(Grant, Ticket), LockError> {
        let Some(group) = shard.groups.map.get_mut(key) else {
            return Err(LockError::NotHeld);
        };
        if group.live().next().is_none() {
            return Err(LockError::NotHeld);
        }
        let i = group.held_by(owner).ok_or(LockError::NotOwner)?;
        group.members[i].expires_at_ms = expires_at_ms;
        let member = &group.members[i];
        let ticket = self.journal_if_persistent(member.durability, || {
            JournalOp::PutShare(key.clone(), self.share_record(member))
        });
        self.emit_member(EventKind::Extended, key, member, now);
        let grant = member.grant();
        group.journal_pos = self.journal.submitted();
        if let Some(due) = shard.groups.refile(key) {
            self.purge.note_deadline(due);
        }
        Ok((grant, ticket))
    }

    /// Force-unlock of a group: every live member in one step (one
    /// commit), answering the most recent (C19, C21).
    pub(super) fn force_in_group(
        &self,
        shard: &mut Shard,
        key: &Key,
        now: u64,
    ) -> Result<(LockInfo, Ticket), LockError> {
        let Some(group) = shard.groups.map.get_mut(key) else {
            return Err(LockError::NotHeld);
        };
        let Some(latest) = group.live().last().map(Member::info) else {
            return Err(LockError::NotHeld);
        };
        // One commit for them all, submitted before their events.
        let mut deletes: Vec<JournalOp> = group
            .live()
            .filter(|m| m.durability == Durability::Persistent)
            .map(|m| JournalOp::DeleteShare(key.clone(), m.owner.to_string()))
            .collect();
        let ticket = match deletes.len() {
            0 => Ticket::ready(),
            1 => self.journal.submit(deletes.pop().expect("one")),
            _ => self.journal.submit(JournalOp::Batch(deletes)),
        };
        group.journal_pos = self.journal.submitted();
        let mut i = 0;
        while i < group.members.len() {
            if group.members[i].delayed {
                i += 1;
                continue;
            }
            let member = &group.members[i];
            tracing::warn!(
                namespace = &*key.namespace,
                name = &*key.name,
                owner = &*member.owner,
                token = member.token,
                "lock force-released"
            );
            let (_, kept) =
                self.end_member(group, i, key, now, EventKind::ForceReleased, now, true);
            i += usize::from(kept);
        }
        self.settle_group(shard, key, now);
        Ok((latest, ticket))
    }

    /// A detached release of a group's member (C15).
    pub(super) fn release_in_group(
        &self,
        shard: &mut Shard,
        key: &Key,
        owner: &str,
        token: u64,
        now: u64,
    ) {
        let Some(group) = shard.groups.map.get_mut(key) else {
            return;
        };
        let Some(i) = group
            .held_by(owner)
            .filter(|&i| group.members[i].token == token)
        else {
            return;
        };
        let (delete, _) = self.end_member(group, i, key, now, EventKind::Released, now, false);
        drop(delete);
        self.settle_group(shard, key, now);
    }

    /// `proclaim`: sets the value of the leadership `candidate` holds under
    /// `token` (C24).
    pub(super) fn proclaim_in_group(
        &self,
        shard: &mut Shard,
        key: &Key,
        candidate: &str,
        token: u64,
        value: &str,
        now: u64,
    ) -> Result<Ticket, LockError> {
        let Some(group) = shard.groups.map.get_mut(key) else {
            return Err(LockError::NotHeld);
        };
        if group.kind != Kind::Election {
            return Err(not_an_election(key, group.kind));
        }
        if group.live().next().is_none() {
            return Err(LockError::NotHeld);
        }
        let i = group
            .held_by(candidate)
            .filter(|&i| group.members[i].token == token)
            .ok_or(LockError::NotOwner)?;
        let member = &mut group.members[i];
        member.value = Some(Arc::from(value));
        let member = &group.members[i];
        let ticket = self.journal_if_persistent(member.durability, || {
            JournalOp::PutShare(key.clone(), self.share_record(member))
        });
        self.emit_member(EventKind::Proclaimed, key, member, now);
        group.journal_pos = self.journal.submitted();
        Ok(ticket)
    }

    /// The election's leader, in the engine's clock; `invalid_argument` for
    /// a name held as something else.
    pub(super) fn leader_in_group(
        &self,
        shard: &Shard,
        key: &Key,
    ) -> Result<Option<Leader>, LockError> {
        let Some(group) = shard.groups.map.get(key) else {
            return Ok(None);
        };
        if group.kind != Kind::Election {
            return Err(not_an_election(key, group.kind));
        }
        Ok(group.live().last().map(|m| Leader {
            info: m.info(),
            value: m.value.as_deref().unwrap_or_default().to_string(),
            since_ms: Some(m.acquired_at_ms),
        }))
    }

    /// The group's most recent live grant (`get`).
    pub(super) fn get_in_group(&self, shard: &Shard, key: &Key) -> Option<LockInfo> {
        shard.groups.map.get(key)?.live().last().map(Member::info)
    }

    /// The group's full state, in the engine's clock.
    pub(super) fn describe_group(&self, shard: &Shard, key: &Key) -> Option<NameState> {
        let group = shard.groups.map.get(key)?;
        Some(NameState {
            holders: group.live().map(|m| self.holding(m)).collect(),
            waiters: group.waiters.len() as u64,
            delay_until_ms: group.delay_until(),
        })
    }

    fn holding(&self, member: &Member) -> Holding {
        Holding {
            info: member.info(),
            claim: member.claim,
            acquired_at_ms: Some(member.acquired_at_ms),
        }
    }

    /// The listing's entry of a group with a live member, in the engine's
    /// clock.
    pub(super) fn list_group(&self, key: &Key, group: &Group, now: u64) -> Option<ListedLock> {
        let live: Vec<&Member> = group.live().filter(|m| m.expires_at_ms > now).collect();
        let latest = live.last()?;
        Some(ListedLock {
            name: key.name.to_string(),
            info: latest.info(),
            acquired_at_ms: Some(latest.acquired_at_ms),
            waiters: group.waiters.len() as u64,
            claim: latest.claim,
            holders: live.iter().map(|m| self.holding(m)).collect(),
        })
    }

    /// Takes the waiter `id` out of the group `key`'s queue, and serves the
    /// queue: a waiter that left the head may have held back others.
    pub(super) fn leave_group_queue(&self, shard: &mut Shard, key: &Key, id: u64, now: u64) {
        if let Some(group) = shard.groups.map.get_mut(key) {
            group.waiters.retain(|w| w.id != id);
            self.settle_group(shard, key, now);
        }
    }

    /// Installs a recovered persistent share holder (a shared grant or a
    /// permit); `expires_at_ms` is in the engine's clock and in the future.
    pub(super) fn recover_share(
        &self,
        shard: &mut Shard,
        key: Key,
        record: Record,
        namespace: &Arc<Namespace>,
        now: u64,
    ) {
        let group = shard
            .groups
            .map
            .entry(key.clone())
            .or_insert_with(|| Group::new(namespace.clone(), Kind::of(record.claim)));
        // Recovered holders count against quotas but are never refused.
        group.namespace.add();
        group.members.push(Member {
            owner: Arc::from(record.owner),
            claim: record.claim,
            token: record.token,
            expires_at_ms: record.expires_at_ms,
            acquired_at_ms: now,
            durability: Durability::Persistent,
            delayed: false,
            value: record.value.map(Arc::from),
        });
        group.members.sort_by_key(|m| m.token);
        if let Some(due) = shard.groups.refile(&key) {
            self.purge.note_deadline(due);
        }
    }
}

//! The lock table of one shard, laid out for a million held locks
//! (benchmark B5, docs/benchmarks.md).
//!
//! - Every lock is one [`Lock`] in a dense vector (`locks`, no holes: a
//!   removal moves the last lock into the gap). Its name and its holder's
//!   owner share one allocation; its namespace is a pointer to the engine's
//!   one [`Namespace`] of that name.
//! - `index` maps the hash of a key to a position in `locks`: four bytes
//!   a slot, where a map from [`Key`] to lock stored the two strings' fat
//!   pointers again.
//! - `deadlines` is a binary min-heap of `(expires_at_ms, position)`, one
//!   entry per holder, and each holder knows where its entry is, so moving
//!   or removing it is O(log n) without a second copy of the key.
//!
//! Positions change only when a lock is removed ([`Shard::remove`]); the
//! engine never keeps one across a removal.

use std::sync::Arc;

use hashbrown::HashTable;

use super::group_state::Groups;
use super::leases::LeaseCell;
use super::waiter::Queue;
use crate::types::{Durability, Grant, Key, LockInfo};

pub(super) use super::namespaces::{key_hash, FxBuild, Namespace, Namespaces};

/// One lock: its name, its holder if any, and its queue.
pub(super) struct Lock {
    pub(super) namespace: Arc<Namespace>,
    /// The name, then the holder's owner. The owner part means something
    /// only while there is a holder.
    text: Box<str>,
    name_len: u32,
    /// The journal's position after this name's last op (its low 32 bits:
    /// see `Engine::name_barrier`): a read of the name waits until that
    /// much of the journal is durable.
    pub(super) journal_pos: u32,
    holder: Option<Holder>,
    /// First in, first served.
    pub(super) waiters: Queue,
}

impl Lock {
    pub(super) fn name(&self) -> &str {
        &self.text[..self.name_len as usize]
    }

    /// The holder's owner (meaningless without a holder).
    pub(super) fn owner(&self) -> &str {
        &self.text[self.name_len as usize..]
    }

    pub(super) fn holder(&self) -> Option<&Holder> {
        self.holder.as_ref()
    }

    /// The holder, if there is one and its owner is `owner`.
    pub(super) fn held_by(&self, owner: &str) -> Option<&Holder> {
        self.holder.as_ref().filter(|_| self.owner() == owner)
    }

    pub(super) fn is(&self, key: &Key) -> bool {
        *self.namespace.name == *key.namespace && self.name() == &*key.name
    }

    /// A key naming this lock (allocates its name).
    pub(super) fn key(&self) -> Key {
        Key {
            namespace: self.namespace.name.clone(),
            name: Arc::from(self.name()),
        }
    }

    fn hash(&self) -> u64 {
        key_hash(&self.namespace.name, self.name())
    }

    /// Its state, if held (expired or not).
    pub(super) fn info(&self) -> Option<LockInfo> {
        self.holder.as_ref().map(|h| LockInfo {
            owner: self.owner().to_string(),
            fencing_token: h.token,
            expires_at_ms: h.expires_at_ms,
            durability: h.durability,
        })
    }
}

/// The current grant of a lock. Its owner is [`Lock::owner`].
pub(super) struct Holder {
    pub(super) token: u64,
    /// For a lock under a lease, the lease's expiry. Changed only through
    /// [`Shard::move_expiry`], which moves its deadline too.
    expires_at_ms: u64,
    /// When this grant was made (a restart's time for a recovered lock),
    /// for listings and hold-time metrics.
    pub(super) acquired_at_ms: u64,
    /// The lease the lock is held under, whose id is the owner.
    pub(super) lease: Option<Arc<LeaseCell>>,
    pub(super) durability: Durability,
    /// Where its entry is in the shard's `deadlines`.
    heap_pos: u32,
}

impl Holder {
    pub(super) fn expires_at_ms(&self) -> u64 {
        self.expires_at_ms
    }

    pub(super) fn grant(&self) -> Grant {
        Grant {
            fencing_token: self.token,
            expires_at_ms: self.expires_at_ms,
        }
    }
}

/// What a new holder is, for [`Shard::set_holder`].
pub(super) struct NewHolder<'a> {
    pub(super) owner: &'a str,
    pub(super) token: u64,
    pub(super) expires_at_ms: u64,
    pub(super) acquired_at_ms: u64,
    pub(super) durability: Durability,
    pub(super) lease: Option<Arc<LeaseCell>>,
}

/// The locks of one shard. See the module docs for the layout.
#[derive(Default)]
pub(super) struct Shard {
    index: HashTable<u32>,
    locks: Vec<Lock>,
    /// A min-heap on the deadline; one entry per holder.
    deadlines: Vec<(u64, u32)>,
    /// Names held shared, semaphores, elections and names under a
    /// lock-delay (the `groups` module); never a name that is in `locks`
    /// too.
    pub(super) groups: Groups,
}

impl Shard {
    /// The position of `key` (whose hash is `hash`), if the shard has it.
    pub(super) fn find(&self, hash: u64, key: &Key) -> Option<usize> {
        self.index
            .find(hash, |&at| self.locks[at as usize].is(key))
            .map(|&at| at as usize)
    }

    pub(super) fn at(&self, at: usize) -> &Lock {
        &self.locks[at]
    }

    pub(super) fn at_mut(&mut self, at: usize) -> &mut Lock {
        &mut self.locks[at]
    }

    /// Makes room for `additional` more locks, so that filling the shard
    /// (recovery) does not rehash its index and move its vectors as it grows.
    pub(super) fn reserve(&mut self, additional: usize) {
        let locks = &self.locks;
        self.index
            .reserve(additional, |&at| locks[at as usize].hash());
        self.locks.reserve(additional);
        self.deadlines.reserve(additional);
    }

    /// Every lock of the shard.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Lock> {
        self.locks.iter()
    }

    /// The position of `key`, added without holder or waiters if new (its
    /// namespace from `namespace`, called only then). `owner` is who is
    /// about to hold it: its text is allocated once, with the owner in it.
    pub(super) fn find_or_insert(
        &mut self,
        hash: u64,
        key: &Key,
        owner: &str,
        namespace: impl FnOnce() -> Arc<Namespace>,
    ) -> usize {
        if let Some(at) = self.find(hash, key) {
            return at;
        }
        let at = self.locks.len();
        let position = u32::try_from(at).expect("fewer than 2^32 locks in a shard");
        let name_len = u32::try_from(key.name.len()).expect("lock names are below 4 GiB");
        let mut text = String::with_capacity(key.name.len() + owner.len());
        text.push_str(&key.name);
        text.push_str(owner);
        self.locks.push(Lock {
            namespace: namespace(),
            text: text.into_boxed_str(),
            name_len,
            journal_pos: 0,
            holder: None,
            waiters: Queue::default(),
        });
        let locks = &self.locks;
        self.index
            .insert_unique(hash, position, |&at| locks[at as usize].hash());
        at
    }

    /// Makes `new` the holder of the lock at `at`, which has none.
    pub(super) fn set_holder(&mut self, at: usize, new: NewHolder<'_>) {
        let lock = &mut self.locks[at];
        debug_assert!(lock.holder.is_none(), "a lock has one holder");
        if lock.owner() != new.owner {
            let name = lock.name();
            let mut text = String::with_capacity(name.len() + new.owner.len());
            text.push_str(name);
            text.push_str(new.owner);
            lock.text = text.into_boxed_str();
        }
        lock.holder = Some(Holder {
            token: new.token,
            expires_at_ms: new.expires_at_ms,
            acquired_at_ms: new.acquired_at_ms,
            lease: new.lease,
            durability: new.durability,
            heap_pos: 0,
        });
        self.deadlines.push((new.expires_at_ms, at as u32));
        self.sift_up(self.deadlines.len() - 1);
    }

    /// Removes the holder of the lock at `at` and its deadline. The lock
    /// stays, with its waiters.
    pub(super) fn take_holder(&mut self, at: usize) -> Option<Holder> {
        let pos = self.locks[at].holder.as_ref()?.heap_pos;
        self.remove_deadline(pos as usize);
        self.locks[at].holder.take()
    }

    /// Moves the expiry of the holder at `at` (which must have one), and
    /// its deadline with it.
    pub(super) fn move_expiry(&mut self, at: usize, expires_at_ms: u64) {
        let holder = self.locks[at]
            .holder
            .as_mut()
            .expect("only a holder has an expiry");
        let old = std::mem::replace(&mut holder.expires_at_ms, expires_at_ms);
        let pos = holder.heap_pos as usize;
        self.deadlines[pos].0 = expires_at_ms;
        if expires_at_ms < old {
            self.sift_up(pos);
        } else {
            self.sift_down(pos);
        }
    }

    /// Forgets the lock at `at` if it has neither holder nor waiters.
    pub(super) fn forget_if_idle(&mut self, at: usize) {
        let lock = &self.locks[at];
        if lock.holder().is_none() && lock.waiters.is_empty() {
            self.remove(at);
        }
    }

    /// Removes the lock at `at`, holder and all. The last lock takes its
    /// position.
    pub(super) fn remove(&mut self, at: usize) -> Lock {
        self.take_holder(at);
        let hash = self.locks[at].hash();
        if let Ok(entry) = self.index.find_entry(hash, |&i| i as usize == at) {
            entry.remove();
        }
        let last = self.locks.len() - 1;
        if at != last {
            let moved = &self.locks[last];
            let moved_hash = moved.hash();
            if let Some(i) = self.index.find_mut(moved_hash, |&i| i as usize == last) {
                *i = at as u32;
            }
            if let Some(holder) = &moved.holder {
                self.deadlines[holder.heap_pos as usize].1 = at as u32;
            }
        }
        let lock = self.locks.swap_remove(at);
        self.shrink();
        lock
    }

    /// The earliest deadline and the position of its lock.
    pub(super) fn next_deadline(&self) -> Option<(u64, usize)> {
        self.deadlines.first().map(|&(due, at)| (due, at as usize))
    }

    /// Gives memory back once a shard holds a quarter of what it has room
    /// for (after a mass release), keeping room to double.
    fn shrink(&mut self) {
        let len = self.locks.len();
        if self.locks.capacity() >= 64 && len <= self.locks.capacity() / 4 {
            self.locks.shrink_to(len * 2);
            self.deadlines.shrink_to(len * 2);
            let locks = &self.locks;
            self.index
                .shrink_to(len * 2, |&at| locks[at as usize].hash());
        }
    }

    fn place(&mut self, pos: usize, entry: (u64, u32)) {
        self.deadlines[pos] = entry;
        if let Some(holder) = self.locks[entry.1 as usize].holder.as_mut() {
            holder.heap_pos = pos as u32;
        }
    }

    fn sift_up(&mut self, mut pos: usize) {
        let entry = self.deadlines[pos];
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if self.deadlines[parent].0 <= entry.0 {
                break;
            }
            self.place(pos, self.deadlines[parent]);
            pos = parent;
        }
        self.place(pos, entry);
    }

    fn sift_down(&mut self, mut pos: usize) {
        let entry = self.deadlines[pos];
        let len = self.deadlines.len();
        loop {
            let left = 2 * pos + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.deadlines[right].0 < self.deadlines[left].0 {
                right
            } else {
                left
            };
            if self.deadlines[child].0 >= entry.0 {
                break;
            }
            self.place(pos, self.deadlines[child]);
            pos = child;
        }
        self.place(pos, entry);
    }

    fn remove_deadline(&mut self, pos: usize) {
        let last = self.deadlines.pop().expect("a holder has a deadline");
        if pos < self.deadlines.len() {
            self.deadlines[pos] = last;
            if pos > 0 && self.deadlines[(pos - 1) / 2].0 > last.0 {
                self.sift_up(pos);
            } else {
                self.sift_down(pos);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn key(i: u32) -> Key {
        Key::new(
            if i.is_multiple_of(3) { "a" } else { "b" },
            format!("lock/{i}"),
        )
    }

    fn holder(owner: &str, expires_at_ms: u64) -> NewHolder<'_> {
        NewHolder {
            owner,
            token: expires_at_ms,
            expires_at_ms,
            acquired_at_ms: 0,
            durability: Durability::Persistent,
            lease: None,
        }
    }

    /// Checks the shard against `model` (key → (owner, expiry)): every
    /// lock findable, positions consistent, the heap ordered and pointing
    /// at its holders.
    fn check(shard: &Shard, model: &BTreeMap<u32, (String, u64)>) {
        assert_eq!(shard.locks.len(), model.len());
        assert_eq!(shard.deadlines.len(), model.len());
        for (i, (owner, expires)) in model {
            let k = key(*i);
            let at = shard
                .find(key_hash(&k.namespace, &k.name), &k)
                .expect("found");
            let lock = shard.at(at);
            assert_eq!(lock.name(), &*k.name);
            assert_eq!(lock.owner(), owner);
            let holder = lock.holder().expect("held");
            assert_eq!(holder.expires_at_ms(), *expires);
            assert_eq!(
                shard.deadlines[holder.heap_pos as usize],
                (*expires, at as u32)
            );
        }
        for pos in 1..shard.deadlines.len() {
            assert!(shard.deadlines[(pos - 1) / 2].0 <= shard.deadlines[pos].0);
        }
        let earliest = model.values().map(|(_, e)| *e).min();
        assert_eq!(shard.next_deadline().map(|(due, _)| due), earliest);
    }

    /// The per-lock sizes docs/benchmarks.md (B5 scale, memory per held lock) accounts for:
    /// growing them shows in B5's RSS a million times over.
    #[test]
    fn a_lock_costs_what_the_benchmark_notes_say() {
        assert_eq!(std::mem::size_of::<Lock>(), 80);
        assert_eq!(std::mem::size_of::<(u64, u32)>(), 16);
    }

    #[test]
    fn stays_consistent_through_inserts_moves_and_removals() {
        let mut shard = Shard::default();
        let namespaces = Namespaces::default();
        let mut model = BTreeMap::new();
        // A small deterministic generator: no dependency for one test.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for step in 0..20_000u32 {
            let i = (next() % 300) as u32;
            let k = key(i);
            let hash = key_hash(&k.namespace, &k.name);
            let expires = next() % 50;
            match (next() % 4, shard.find(hash, &k)) {
                (0 | 1, None) => {
                    let owner = format!("o{}", step % 7);
                    let at =
                        shard.find_or_insert(hash, &k, &owner, || namespaces.get(&k.namespace));
                    shard.set_holder(at, holder(&owner, expires));
                    model.insert(i, (owner, expires));
                }
                (0, Some(at)) => {
                    shard.move_expiry(at, expires);
                    model.get_mut(&i).expect("modelled").1 = expires;
                }
                (1, Some(at)) => {
                    // A hand-off: a new holder on the same lock.
                    shard.take_holder(at).expect("held");
                    let owner = format!("p{}", step % 5);
                    shard.set_holder(at, holder(&owner, expires));
                    model.insert(i, (owner, expires));
                }
                (_, Some(at)) => {
                    let lock = shard.remove(at);
                    assert_eq!(lock.name(), &*k.name);
                    model.remove(&i);
                }
                (_, None) => {}
            }
            if step.is_multiple_of(97) {
                check(&shard, &model);
            }
        }
        check(&shard, &model);
        // Drain by deadline: in order, and the shard gives memory back.
        let mut last = 0;
        while let Some((due, at)) = shard.next_deadline() {
            assert!(due >= last);
            last = due;
            shard.remove(at);
        }
        assert!(shard.locks.is_empty() && shard.locks.capacity() < 64);
    }
}

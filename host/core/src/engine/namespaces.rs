//! The namespaces an engine has seen, with what the engine keeps per
//! namespace (its holders' count for quotas, its hold times, its
//! lock-delay), and the hash that places a name.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use rustc_hash::FxHasher;

use crate::error::LockError;
use crate::limits::LockDelays;
use crate::metrics::{Histogram, HoldTimes};

/// The engine's hasher for maps keyed by its own strings.
pub(super) type FxBuild = BuildHasherDefault<FxHasher>;

/// The hash of a key: picks its shard and its slot in the shard's index.
pub(super) fn key_hash(namespace: &str, name: &str) -> u64 {
    let mut hasher = FxHasher::default();
    namespace.hash(&mut hasher);
    name.hash(&mut hasher);
    hasher.finish()
}

/// One namespace of an engine, shared by all its locks.
pub(super) struct Namespace {
    pub(super) name: Arc<str>,
    /// Live holders, for quotas. Changed with the holder itself, under its
    /// shard mutex.
    held: AtomicU64,
    /// How long its grants were held (`lockd_hold_seconds`): recorded as
    /// each ends, so that no event is built for it.
    hold_times: Histogram,
    /// Its lock-delay (docs/contract.md#c23-lock-delay), as the last grant
    /// or waiter of the namespace brought it from the service's
    /// configuration; read when a grant expires or is force-released.
    lock_delay_ms: AtomicU64,
}

impl Namespace {
    /// Counts one more holder, whatever the quota.
    pub(super) fn add(&self) {
        self.held.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one more holder if `quota` allows it: the check and the
    /// increment are one atomic step, so concurrent grants never overshoot.
    pub(super) fn try_add(&self, quota: Option<u64>) -> Result<(), LockError> {
        let Some(quota) = quota else {
            self.add();
            return Ok(());
        };
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held < quota).then_some(held + 1)
            })
            .map(drop)
            .map_err(|_| {
                LockError::Denied(format!(
                    "namespace {:?} already holds {quota} locks, its quota",
                    self.name
                ))
            })
    }

    /// Keeps the namespace's lock-delay, as a call brought it. A store
    /// only when it changed: this is on every fresh grant.
    pub(super) fn note_lock_delay(&self, delay_ms: u64) {
        if self.lock_delay_ms.load(Ordering::Relaxed) != delay_ms {
            self.lock_delay_ms.store(delay_ms, Ordering::Relaxed);
        }
    }

    /// How long a grant that expired or was force-released holds its place
    /// back.
    pub(super) fn lock_delay_ms(&self) -> u64 {
        self.lock_delay_ms.load(Ordering::Relaxed)
    }

    /// Counts a grant that ended after `held_ms`.
    pub(super) fn record_hold(&self, held_ms: u64) {
        self.hold_times.observe(Duration::from_millis(held_ms));
    }

    pub(super) fn remove(&self) {
        let _ = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_sub(1)
            });
    }
}

/// The namespaces an engine has seen, each interned once. Never shrinks:
/// a namespace costs its name and a counter.
#[derive(Default)]
pub(super) struct Namespaces {
    map: RwLock<HashMap<Arc<str>, Arc<Namespace>, FxBuild>>,
    /// The configured lock-delays, for namespaces made from now on.
    delays: RwLock<LockDelays>,
}

impl Namespaces {
    /// The namespace `name`, created if new. The common case takes only
    /// the read lock and allocates nothing: this is on every fresh grant.
    pub(super) fn get(&self, name: &Arc<str>) -> Arc<Namespace> {
        if let Some(ns) = self
            .map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&**name)
        {
            return ns.clone();
        }
        let delay_ms = self
            .delays
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .of(name);
        self.map
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.clone())
            .or_insert_with(|| {
                Arc::new(Namespace {
                    name: name.clone(),
                    held: AtomicU64::new(0),
                    hold_times: Histogram::default(),
                    lock_delay_ms: AtomicU64::new(delay_ms),
                })
            })
            .clone()
    }

    /// Puts `delays` in force, for the namespaces seen so far (those of
    /// recovered grants among them) and those to come.
    pub(super) fn set_lock_delays(&self, delays: &LockDelays) {
        *self.delays.write().unwrap_or_else(PoisonError::into_inner) = delays.clone();
        for ns in self
            .map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            ns.note_lock_delay(delays.of(&ns.name));
        }
    }

    /// The hold times of every namespace that has ended a grant.
    pub(super) fn hold_times(&self) -> HoldTimes {
        self.map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|ns| (ns.name.to_string(), ns.hold_times.snapshot()))
            .filter(|(_, h)| h.count() > 0)
            .collect()
    }
}

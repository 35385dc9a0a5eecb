//! The expiry of every lock and lease key this backend knows of, kept from
//! the events watch, so that the sweeper can remove what expired without
//! waiting for a read (or for etcd's lease, `lease_slack` later).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// Keys by expiry.
#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    index: Mutex<Index>,
    /// Woken when an entry is added, so the sweeper sleeps until the
    /// earliest.
    added: Notify,
}

#[derive(Debug, Default)]
struct Index {
    by_key: HashMap<Vec<u8>, u64>,
    by_time: BTreeSet<(u64, Vec<u8>)>,
}

impl Index {
    fn remove(&mut self, key: &[u8]) {
        if let Some(at) = self.by_key.remove(key) {
            self.by_time.remove(&(at, key.to_vec()));
        }
    }
}

impl Deadlines {
    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `key` expires at `at` (replacing what was known of it).
    pub(crate) fn set(&self, key: &[u8], at: u64) {
        {
            let mut index = self.index();
            index.remove(key);
            index.by_key.insert(key.to_vec(), at);
            index.by_time.insert((at, key.to_vec()));
        }
        self.added.notify_one();
    }

    /// `key` is gone.
    pub(crate) fn remove(&self, key: &[u8]) {
        self.index().remove(key);
    }

    /// Forgets everything and knows `entries` instead (after a full read).
    pub(crate) fn replace_all(&self, entries: impl IntoIterator<Item = (Vec<u8>, u64)>) {
        {
            let mut index = self.index();
            *index = Index::default();
            for (key, at) in entries {
                index.by_time.insert((at, key.clone()));
                index.by_key.insert(key, at);
            }
        }
        self.added.notify_one();
    }

    /// The earliest expiry known.
    pub(crate) fn earliest(&self) -> Option<u64> {
        self.index().by_time.first().map(|(at, _)| *at)
    }

    /// Takes out every key whose expiry is at or before `now`.
    pub(crate) fn take_due(&self, now: u64) -> Vec<Vec<u8>> {
        let mut index = self.index();
        let mut due = Vec::new();
        while let Some((at, _)) = index.by_time.first() {
            if *at > now {
                break;
            }
            let (_, key) = index.by_time.pop_first().expect("just looked at it");
            index.by_key.remove(&key);
            due.push(key);
        }
        due
    }

    /// Completes once an entry was added since the last call (or now, if
    /// one was added since).
    pub(crate) async fn added(&self) {
        self.added.notified().await;
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.index().by_key.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_due_in_expiry_order_and_only_once() {
        let d = Deadlines::default();
        d.set(b"a", 30);
        d.set(b"b", 10);
        d.set(b"c", 20);
        d.set(b"a", 5); // moved earlier
        d.remove(b"c");
        assert_eq!(d.earliest(), Some(5));
        assert_eq!(d.take_due(4), Vec::<Vec<u8>>::new());
        assert_eq!(d.take_due(10), vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(d.take_due(100), Vec::<Vec<u8>>::new());
        assert_eq!(d.earliest(), None);
        d.replace_all([(b"x".to_vec(), 1), (b"y".to_vec(), 2)]);
        assert_eq!(d.len(), 2);
        d.replace_all([(b"z".to_vec(), 3)]);
        assert_eq!(d.take_due(3), vec![b"z".to_vec()]);
        assert_eq!(d.len(), 0);
    }
}

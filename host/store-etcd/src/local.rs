//! Ordering inside one process, which etcd cannot see.
//!
//! - [`Turns`]: `lock` calls on one name start their first attempt (and, if
//!   they must wait, join the etcd queue) one at a time, in call order. Two
//!   waiters of one process therefore enter the etcd queue in the order they
//!   called, however the network reorders their requests. An `unlock` or
//!   force-unlock waits for the `lock` calls on its name that came before
//!   it to queue (or end), so a waiter that called first is in the queue
//!   when the lock is released, as with the in-memory engine.
//! - [`Pending`]: a `release_detached` is in flight; later calls on that name
//!   through the same backend wait for it first (read-your-writes within the
//!   process, as the in-memory engine gives).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockd_core::Key;
use tokio::sync::watch;

struct Line {
    /// The number of the next turn to hand out. Changed under the map's
    /// mutex.
    next: u64,
    /// The number of the turn being served.
    serving: watch::Sender<u64>,
}

/// Per-name lines of `lock` calls, served in FIFO order.
#[derive(Default)]
pub(crate) struct Turns {
    map: Arc<Mutex<HashMap<Key, Line>>>,
}

/// One `lock` call's place in the line of a name. Its turn ends when it
/// is dropped.
pub(crate) struct Turn {
    map: Arc<Mutex<HashMap<Key, Line>>>,
    key: Key,
    n: u64,
    rx: watch::Receiver<u64>,
}

impl Turns {
    /// Takes the next turn on `key`. Synchronous, so the order of the
    /// calls is the order of the turns.
    pub(crate) fn take(&self, key: &Key) -> Turn {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let line = map.entry(key.clone()).or_insert_with(|| Line {
            next: 0,
            serving: watch::Sender::new(0),
        });
        let n = line.next;
        line.next += 1;
        Turn {
            map: self.map.clone(),
            key: key.clone(),
            n,
            rx: line.serving.subscribe(),
        }
    }

    /// Waits (at most `limit`) until every turn on `key` taken so far has
    /// ended.
    pub(crate) async fn settle(&self, key: &Key, limit: Duration) {
        let taken = {
            let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            map.get(key)
                .map(|line| (line.serving.subscribe(), line.next))
        };
        if let Some((mut rx, next)) = taken {
            // An error: every turn on the name ended.
            let _ = tokio::time::timeout(limit, rx.wait_for(|s| *s >= next)).await;
        }
    }
}

impl Turn {
    /// Waits until every earlier turn on the name has ended.
    pub(crate) async fn wait(&mut self) {
        let n = self.n;
        // The sender lives while any turn on the name does.
        let _ = self.rx.wait_for(|s| *s >= n).await;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let Some(line) = map.get_mut(&self.key) else {
            return;
        };
        let n = self.n;
        // Turns end in order (each waits for its turn first); a turn
        // dropped before it came (its task was cancelled with the runtime)
        // leaves the line as it is.
        line.serving.send_if_modified(|s| {
            if *s == n {
                *s = n + 1;
                true
            } else {
                false
            }
        });
        if *line.serving.borrow() == line.next {
            map.remove(&self.key);
        }
    }
}

/// Detached releases in flight, per name.
#[derive(Default)]
pub(crate) struct Pending {
    map: Arc<Mutex<HashMap<Key, watch::Sender<usize>>>>,
}

/// Marks one detached release in flight until dropped.
pub(crate) struct PendingGuard {
    map: Arc<Mutex<HashMap<Key, watch::Sender<usize>>>>,
    key: Key,
}

impl Pending {
    pub(crate) fn begin(&self, key: &Key) -> PendingGuard {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.clone())
            .or_insert_with(|| watch::Sender::new(0))
            .send_modify(|n| *n += 1);
        PendingGuard {
            map: self.map.clone(),
            key: key.clone(),
        }
    }

    /// Waits (at most `limit`) until no detached release of a name matching
    /// `filter` is in flight.
    pub(crate) async fn settle(&self, filter: impl Fn(&Key) -> bool, limit: Duration) {
        let receivers: Vec<watch::Receiver<usize>> = {
            let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            map.iter()
                .filter(|(k, _)| filter(k))
                .map(|(_, tx)| tx.subscribe())
                .collect()
        };
        if receivers.is_empty() {
            return;
        }
        let all = async {
            for mut rx in receivers {
                // An error means the entry was removed: nothing in flight.
                let _ = rx.wait_for(|n| *n == 0).await;
            }
        };
        let _ = tokio::time::timeout(limit, all).await;
    }
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = map.get(&self.key) {
            tx.send_modify(|n| *n = n.saturating_sub(1));
            if *tx.borrow() == 0 {
                map.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn turns_are_served_in_order_and_cleaned_up() {
        let turns = Turns::default();
        let k = Key::new("n", "a");
        let mut t0 = turns.take(&k);
        let mut t1 = turns.take(&k);
        t0.wait().await;
        let second = tokio::spawn(async move {
            t1.wait().await;
        });
        tokio::task::yield_now().await;
        assert!(!second.is_finished());
        drop(t0);
        second.await.unwrap();
        assert!(turns.map.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn turns_settle_waits_for_the_turns_taken_before() {
        let turns = Arc::new(Turns::default());
        let k = Key::new("n", "a");
        let t0 = turns.take(&k);
        let t1 = turns.take(&k);
        let t = turns.clone();
        let kk = k.clone();
        let settled = tokio::spawn(async move { t.settle(&kk, Duration::from_secs(10)).await });
        // A turn taken after the settle began is not waited for.
        tokio::task::yield_now().await;
        let later = turns.take(&k);
        drop(t0);
        tokio::task::yield_now().await;
        assert!(!settled.is_finished());
        drop(t1);
        settled.await.unwrap();
        drop(later);
        // Nothing taken: at once.
        turns.settle(&k, Duration::from_secs(10)).await;
    }

    #[tokio::test]
    async fn settle_waits_for_pending_releases() {
        let pending = Arc::new(Pending::default());
        let k = Key::new("n", "a");
        let g = pending.begin(&k);
        let p = pending.clone();
        let waiter = tokio::spawn(async move {
            p.settle(|key| &*key.name == "a", Duration::from_secs(10))
                .await;
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(g);
        waiter.await.unwrap();
        assert!(pending.map.lock().unwrap().is_empty());
    }
}

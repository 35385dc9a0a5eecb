//! Reads: one consistent read of a lock and its queue, `get` and `list`.

use etcd_client::{GetOptions, SortOrder, SortTarget, Txn, TxnOp};
use lockd_core::{Key, ListedLock, LockError, LockInfo};

use super::queue::Waiter;
use super::{nobody_queued, unchanged, Inner};
use crate::events::Why;
use crate::record::{Held, Queued};
use crate::rpc::gets;

/// One consistent read of a lock and its queue.
pub(super) struct Snap {
    pub(super) revision: i64,
    pub(super) lock: Option<Held>,
    /// The first waiter (lowest create revision).
    pub(super) head: Option<Queued>,
    /// For a waiter: whether its own key still exists.
    pub(super) own_present: bool,
    /// For a waiter: the waiter just ahead of it.
    pub(super) ahead: Option<Queued>,
}

impl Inner {
    /// Reads the lock key, its queue head and, for a waiter, its own key and
    /// the waiter ahead of it, all at one revision.
    async fn snapshot(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        me: Option<&Waiter>,
    ) -> Result<Snap, LockError> {
        let first_waiter = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let mut ops = vec![
            TxnOp::get(lock_key.to_vec(), None),
            TxnOp::get(queue.to_vec(), Some(first_waiter)),
        ];
        if let Some(w) = me {
            ops.push(TxnOp::get(
                w.key.clone(),
                Some(GetOptions::new().with_keys_only()),
            ));
            let ahead = GetOptions::new()
                .with_prefix()
                .with_max_create_revision((w.create_revision - 1).max(1))
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(1);
            ops.push(TxnOp::get(queue.to_vec(), Some(ahead)));
        }
        let resp = self.etcd.read_txn("read", Txn::new().and_then(ops)).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let gets = gets(&resp);
        let first = |i: usize| gets.get(i).and_then(|g| g.kvs().first());
        let lock = first(0).map(Held::from_kv).transpose()?;
        let head = first(1).map(Queued::from_kv).transpose()?;
        let (own_present, ahead) = match me {
            Some(w) => {
                let ahead = first(3)
                    .filter(|kv| {
                        kv.key() != w.key.as_slice() && kv.create_revision() < w.create_revision
                    })
                    .map(Queued::from_kv)
                    .transpose()?;
                (first(2).is_some(), ahead)
            }
            None => (false, None),
        };
        Ok(Snap {
            revision,
            lock,
            head,
            own_present,
            ahead,
        })
    }

    /// A snapshot in which the lock is not free while someone waits: if it
    /// is, the lock is first handed to the head of the queue. Every path
    /// (a waiter, a `wait = 0` caller, an unlock) goes through here, so
    /// nobody can take a lock past the queue.
    pub(super) async fn settled(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        me: Option<&Waiter>,
    ) -> Result<Snap, LockError> {
        loop {
            let snap = self.snapshot(lock_key, queue, me).await?;
            let now = self.clock.now_ms();
            let free = snap.lock.as_ref().is_none_or(|h| !h.live(now));
            match &snap.head {
                Some(head) if free => {
                    // Either way, read again: handed off, or raced.
                    self.hand_off(lock_key, snap.lock.as_ref(), head, now, Why::Expired)
                        .await?;
                }
                _ => return Ok(snap),
            }
        }
    }

    /// The live holder. A lock found expired while someone waits is first
    /// handed to the head of the queue (as every other path does), so `get`
    /// never reports a lock free that a waiter is about to take: between
    /// the expiry and the head's own hand-off, that would show a free
    /// moment no caller could use.
    pub(super) async fn get_flow(&self, key: &Key) -> Result<Option<LockInfo>, LockError> {
        let lock_key = self.layout.lock_key(key);
        let queue = self.layout.queue_prefix(key);
        // Liveness is judged at the time the read was asked, not when its
        // answer arrived: an answer held up in the network (a partition
        // healing) may show an expiry that has passed since, while the
        // holder extended meanwhile. Judged at the asking, a read's answer
        // is true at one moment between its call and its return
        // (host/lockd/tests/partitions.rs, `answered_late`).
        let now = self.clock.now_ms();
        let snap = self.settled(&lock_key, &queue, None).await?;
        if let Some(h) = snap.lock.as_ref().filter(|h| !h.live(now)) {
            // Found expired: removed now, so every host's event stream
            // hears of it. The answer does not wait on the cleanup.
            if let Err(e) = self.remove_expired(&lock_key, &queue, h).await {
                tracing::debug!(error = %e, "etcd store: removing an expired lock failed");
            }
        }
        Ok(snap.lock.filter(|h| h.live(now)).map(|h| h.info()))
    }

    /// Deletes the expired lock `h` if it is still as read and nobody
    /// waits (a waiter would have it handed over instead), marked expired.
    /// Whether it did.
    pub(super) async fn remove_expired(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        h: &Held,
    ) -> Result<bool, LockError> {
        let mut ops = vec![TxnOp::delete(lock_key.to_vec(), None)];
        ops.extend(self.marked(Why::Expired, Some(h)));
        let txn = Txn::new()
            .when(vec![unchanged(lock_key, Some(h)), nobody_queued(queue)])
            .and_then(ops);
        Ok(self.etcd.txn("remove expired", txn).await?.succeeded())
    }

    /// Live locks under a name prefix, from one read. Unlike `get`, it does
    /// not hand over expired locks that have waiters: such a lock is left
    /// out until its head claims it, a round trip after the expiry.
    pub(super) async fn list_flow(
        &self,
        namespace: &str,
        prefix: &str,
    ) -> Result<Vec<ListedLock>, LockError> {
        // Judged at the asking, as in `get_flow`.
        let now = self.clock.now_ms();
        let resp = self
            .etcd
            .range(
                "list",
                self.layout.list_prefix(namespace, prefix),
                Some(GetOptions::new().with_prefix()),
            )
            .await?;
        // Queue lengths from the waiter keys, read at the revision of the
        // locks read above.
        let queues = self
            .etcd
            .range(
                "list queues",
                self.layout.queues_prefix(namespace, prefix),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_keys_only()
                        .with_revision(resp.header().map_or(0, |h| h.revision())),
                ),
            )
            .await?;
        let mut waiters: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
        for kv in queues.kvs() {
            if let Some(name) = self.layout.queued_name_of(namespace, kv.key()) {
                *waiters.entry(name).or_default() += 1;
            }
        }
        let mut out = Vec::new();
        for kv in resp.kvs() {
            let h = Held::from_kv(kv)?;
            if !h.live(now) {
                continue;
            }
            let Some(name) = self.layout.name_of(namespace, kv.key()) else {
                continue;
            };
            out.push(ListedLock {
                waiters: waiters.get(&name).copied().unwrap_or(0),
                acquired_at_ms: h.rec.acquired_at_ms,
                name,
                info: h.info(),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

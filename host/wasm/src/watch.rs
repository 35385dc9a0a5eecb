//! The host side of a `leader-watch`: it follows the store's events for one
//! election and readies its pollable (0.1.0) or ends its `changed` call
//! (0.2.0) once the leader or its value differs from what the guest last
//! saw (docs/contract.md#c24-elections). Nothing polls: an event of the name
//! makes it read the leader once.

use std::sync::{Arc, Mutex, PoisonError};

use lockd_core::{Leader, LockError, LockEvent, LockService};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi_io::poll::{subscribe, DynPollable, Pollable};

use crate::resources::Slot;

/// What tells one leader from another: its candidate, its token and its
/// value (not its expiry, which moves with every renewal).
type Seen = Option<(String, u64, String)>;

fn seen(leader: &Option<Leader>) -> Seen {
    leader
        .as_ref()
        .map(|l| (l.info.owner.clone(), l.info.fencing_token, l.value.clone()))
}

/// What the watch and its follower share.
#[derive(Debug)]
struct Shared {
    /// The leader the guest last saw (at `open`, then at each `current`).
    seen: Mutex<Seen>,
    /// Whether the leader may differ from `seen`: the pollable's state.
    changed: watch::Sender<bool>,
}

impl Shared {
    /// Compares the leader read after an event with the one last seen. A
    /// failed read readies the pollable too: `current` will tell the
    /// guest what is wrong.
    fn note(&self, now: &Result<Option<Leader>, LockError>) {
        let differs = match now {
            Ok(leader) => *self.seen.lock().unwrap_or_else(PoisonError::into_inner) != seen(leader),
            Err(_) => true,
        };
        if differs {
            self.changed.send_replace(true);
        }
    }
}

/// A `leader-watch` resource. Its follower task is aborted with it.
#[derive(Debug)]
pub struct LeaderWatch {
    service: LockService,
    namespace: String,
    name: String,
    shared: Arc<Shared>,
    follower: JoinHandle<()>,
    /// Its place under the instance's cap.
    _slot: Slot,
}

impl Drop for LeaderWatch {
    fn drop(&mut self) {
        self.follower.abort();
    }
}

impl LeaderWatch {
    /// Starts following the election `name`; the leader now is the first one
    /// seen. `denied` on a store that publishes no events.
    pub(crate) async fn open(
        service: LockService,
        namespace: String,
        name: String,
        slot: Slot,
    ) -> Result<LeaderWatch, LockError> {
        // Subscribed before the first read, so that no change falls between.
        let Some(events) = service.events() else {
            return Err(LockError::Denied(
                "this lock store publishes no events, which a leader watch follows".to_string(),
            ));
        };
        let first = service.leader(&namespace, &name).await?;
        let shared = Arc::new(Shared {
            seen: Mutex::new(seen(&first)),
            changed: watch::Sender::new(false),
        });
        let follower = tokio::spawn(follow(
            service.clone(),
            (namespace.clone(), name.clone()),
            events,
            shared.clone(),
        ));
        Ok(LeaderWatch {
            service,
            namespace,
            name,
            shared,
            follower,
            _slot: slot,
        })
    }

    /// The leader now, which the pollable compares with from now on. Owns
    /// what it reads, so it borrows neither the watch nor the instance.
    pub(crate) fn current(
        &self,
    ) -> impl std::future::Future<Output = Result<Option<Leader>, LockError>> + Send + 'static {
        let (service, namespace, name) = (
            self.service.clone(),
            self.namespace.clone(),
            self.name.clone(),
        );
        let shared = self.shared.clone();
        async move {
            // Cleared before the read: a change after the read is then noted
            // against this answer, never lost.
            shared.changed.send_replace(false);
            let now = service.leader(&namespace, &name).await?;
            *shared.seen.lock().unwrap_or_else(PoisonError::into_inner) = seen(&now);
            Ok(now)
        }
    }

    /// Resolves once the leader may differ from the one last seen (at once
    /// if it may already): WASI 0.3's `changed`. Owns what it waits on, so
    /// it borrows neither the watch nor the instance.
    pub(crate) fn changed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut changes = self.shared.changed.subscribe();
        async move {
            // A closed channel (the watch dropped) ends the wait too.
            let _ = changes.wait_for(|changed| *changed).await;
        }
    }

    /// The host side of a pollable ready while the leader may differ from
    /// the one last seen.
    pub(crate) fn pollable(&self) -> ChangedPollable {
        ChangedPollable(self.shared.changed.subscribe())
    }
}

/// `subscribe`: `pollable` as a `wasi:io` pollable in `table`.
pub(crate) fn push_pollable(
    table: &mut ResourceTable,
    pollable: ChangedPollable,
) -> wasmtime::Result<Resource<DynPollable>> {
    let pollable = table.push(pollable)?;
    subscribe(table, pollable)
}

/// Reads the leader after each event of the election (and after a lag,
/// when events were missed) and notes whether it changed.
async fn follow(
    service: LockService,
    (namespace, name): (String, String),
    mut events: broadcast::Receiver<LockEvent>,
    shared: Arc<Shared>,
) {
    loop {
        match events.recv().await {
            Ok(event) if *event.namespace == *namespace && *event.name == *name => {}
            Ok(_) => continue,
            Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => {
                // The store is gone: no change will be heard again. Ready,
                // so that no guest waits forever; `current` says why.
                shared.changed.send_replace(true);
                return;
            }
        }
        let now = service.leader(&namespace, &name).await;
        shared.note(&now);
    }
}

/// The host side of a `leader-watch.subscribe` pollable.
#[derive(Debug)]
pub(crate) struct ChangedPollable(watch::Receiver<bool>);

#[wasmtime_wasi_io::async_trait]
impl Pollable for ChangedPollable {
    async fn ready(&mut self) {
        // The sender lives as long as the watch; once that is dropped
        // nothing will change, and a closed channel is ready.
        let _ = self.0.wait_for(|changed| *changed).await;
    }
}

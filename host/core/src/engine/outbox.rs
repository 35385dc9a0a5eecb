//! Events wait for the journal: an event is published only once every
//! change journaled before it was decided is durable, so the stream never
//! shows a persistent change that a crash could take back
//! (docs/contract.md#c10-durability), and each event keeps its place behind
//! those before it.
//!
//! An event's token is shown only once a durable reservation covers it
//! (an ephemeral grant's token has no record of its own), so no token an
//! event showed is issued again after a crash.
//!
//! With nothing pending (the `memory` store, or a quiet one) an event goes
//! out at once; otherwise it waits in the outbox for its barrier.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{broadcast, mpsc};

use crate::events::EventSender;
use crate::journal::Journal;
use crate::types::LockEvent;

use super::tokens::TokenAllocator;

/// Events held while the store cannot write. Past this many, new events are
/// dropped (and a warning logged) rather than kept without bound.
const CAPACITY: usize = 65_536;

/// How often a barrier that failed (the store cannot write) is tried again.
const RETRY: Duration = Duration::from_millis(50);

/// The engine's event publisher.
pub(super) struct Outbox {
    events: EventSender,
    journal: Arc<dyn Journal>,
    tokens: Arc<TokenAllocator>,
    queue: mpsc::Sender<LockEvent>,
    /// Events in the queue: while any is, new ones queue behind it.
    held: Arc<AtomicUsize>,
    warned: AtomicBool,
}

impl Outbox {
    /// An outbox whose delivery task runs on `runtime` until the outbox is
    /// dropped and its queue drained.
    pub(super) fn start(
        runtime: &Handle,
        journal: Arc<dyn Journal>,
        tokens: Arc<TokenAllocator>,
    ) -> Outbox {
        let events = EventSender::default();
        let (queue, pending) = mpsc::channel(CAPACITY);
        let held = Arc::new(AtomicUsize::new(0));
        drop(runtime.spawn(deliver(
            pending,
            events.clone(),
            Arc::downgrade(&journal),
            tokens.clone(),
            held.clone(),
        )));
        Outbox {
            events,
            journal,
            tokens,
            queue,
            held,
            warned: AtomicBool::new(false),
        }
    }

    /// Publishes the event `make` builds, once every op journaled so far is
    /// durable; builds nothing if nobody listens. Called where the change
    /// was decided (under its shard's mutex), after its op was submitted.
    pub(super) fn emit(&self, make: impl FnOnce() -> LockEvent) {
        if !self.events.is_listened() {
            return;
        }
        let event = make();
        if self.held.load(Ordering::Acquire) == 0
            && self.tokens.is_durable(event.fencing_token)
            && self.journal.flushed().is_ready()
        {
            self.events.send(event);
            return;
        }
        self.held.fetch_add(1, Ordering::AcqRel);
        if self.queue.try_send(event).is_err() {
            self.held.fetch_sub(1, Ordering::AcqRel);
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    held = CAPACITY,
                    "the event stream is behind a store that cannot write; newer events are dropped until it can"
                );
            }
        }
    }

    /// A new subscriber, which sees events published from now on.
    pub(super) fn subscribe(&self) -> broadcast::Receiver<LockEvent> {
        self.events.subscribe()
    }
}

/// Publishes queued events in order. It takes everything queued, then one
/// barrier (taken after those events were queued, so after their changes
/// were journaled), and publishes them once it resolves and a reservation
/// covers their tokens. While the store cannot write, it tries again until
/// it can, or the journal is gone (the engine was dropped).
async fn deliver(
    mut pending: mpsc::Receiver<LockEvent>,
    events: EventSender,
    journal: Weak<dyn Journal>,
    tokens: Arc<TokenAllocator>,
    held: Arc<AtomicUsize>,
) {
    let mut batch = Vec::new();
    while let Some(first) = pending.recv().await {
        batch.push(first);
        while let Ok(next) = pending.try_recv() {
            batch.push(next);
        }
        let highest = batch.iter().map(|e| e.fencing_token).max().unwrap_or(0);
        let durable = loop {
            // Never held across an await: the engine's drop must close the
            // store at once (a reopen of its file follows).
            let Some((barrier, reservation)) = journal
                .upgrade()
                .map(|journal| (journal.flushed(), tokens.reserve(highest, &*journal)))
            else {
                break false;
            };
            let covered = match reservation {
                None => true,
                Some((up_to, ticket)) => {
                    let made = ticket.wait().await.is_ok();
                    if made {
                        tokens.reserved(up_to);
                    }
                    made
                }
            };
            if covered && barrier.wait().await.is_ok() {
                break true;
            }
            tokio::time::sleep(RETRY).await;
        };
        let delivered = batch.len();
        for event in batch.drain(..) {
            if durable {
                events.send(event);
            }
        }
        held.fetch_sub(delivered, Ordering::AcqRel);
    }
}

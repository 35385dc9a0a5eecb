//! The event stream of a store: one bounded broadcast channel. A store
//! publishes every change; subscribers (the SSE route, metrics, `lockd
//! watch`, lost signals) read it. A subscriber that falls behind loses
//! events (and learns it from `RecvError::Lagged`); it never slows locking.

use tokio::sync::broadcast;

use crate::types::LockEvent;

/// Events a subscriber may fall behind by before it lags.
pub const EVENT_BUFFER: usize = 4096;

/// The publishing side, owned by a store.
#[derive(Clone, Debug)]
pub struct EventSender(broadcast::Sender<LockEvent>);

impl Default for EventSender {
    fn default() -> Self {
        EventSender(broadcast::Sender::new(EVENT_BUFFER))
    }
}

impl EventSender {
    /// Publishes the event `make` builds, building it only if anyone
    /// listens: with no subscriber, an event costs one atomic load.
    pub fn emit(&self, make: impl FnOnce() -> LockEvent) {
        if self.0.receiver_count() > 0 {
            let _ = self.0.send(make());
        }
    }

    /// Whether anyone subscribed: an event nobody reads need not be built.
    pub fn is_listened(&self) -> bool {
        self.0.receiver_count() > 0
    }

    /// Publishes `event` to the subscribers there are.
    pub fn send(&self, event: LockEvent) {
        let _ = self.0.send(event);
    }

    /// A new subscriber, which sees events published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<LockEvent> {
        self.0.subscribe()
    }
}

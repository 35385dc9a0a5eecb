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

/// Where an event stands in a history that every host of a store shares
/// (etcd: the revision of the change, and the event's place among that
/// revision's events), so that a client can resume a stream on another
/// host from the last event it saw.
///
/// Written `R.I` (the `I`-th event of revision `R`, from 0) or `R` (every
/// event of revision `R`), as the SSE `id:` of docs/reference.md#events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventPosition {
    /// The store's revision of the change.
    pub revision: u64,
    /// The event's index among the revision's events; [`Self::WHOLE`]
    /// stands after all of them.
    pub index: u32,
}

impl EventPosition {
    /// The index of a position past every event of its revision.
    pub const WHOLE: u32 = u32::MAX;

    /// The position after every event of `revision`.
    pub fn whole(revision: u64) -> Self {
        EventPosition {
            revision,
            index: Self::WHOLE,
        }
    }

    /// The position of the `index`-th event of `revision`.
    pub fn at(revision: u64, index: u32) -> Self {
        EventPosition { revision, index }
    }
}

impl std::fmt::Display for EventPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.index {
            Self::WHOLE => write!(f, "{}", self.revision),
            index => write!(f, "{}.{index}", self.revision),
        }
    }
}

impl std::str::FromStr for EventPosition {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not an event position (REVISION or REVISION.INDEX)");
        // `u64::from_str` takes a leading `+`: one spelling only.
        let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        match s.split_once('.') {
            None if digits(s) => Ok(EventPosition::whole(s.parse().map_err(|_| bad())?)),
            Some((revision, index)) if digits(revision) && digits(index) => {
                let index: u32 = index.parse().map_err(|_| bad())?;
                if index == Self::WHOLE {
                    return Err(bad());
                }
                Ok(EventPosition::at(
                    revision.parse().map_err(|_| bad())?,
                    index,
                ))
            }
            _ => Err(bad()),
        }
    }
}

/// An event and its place in the shared history.
#[derive(Clone, Debug)]
pub struct PositionedEvent {
    /// Where it stands.
    pub position: EventPosition,
    /// The event.
    pub event: LockEvent,
}

/// A store's shared history of events: what lets a stream resume on
/// another host without losing events. Only a store whose hosts share one
/// ordered history has it (etcd); a one-host store (memory, redb) has none.
pub trait EventHistory: Send + Sync {
    /// A subscriber to the events published from now on, and the position
    /// of the last event published before it: every later event reaches
    /// the subscriber, no earlier one does.
    fn subscribe(&self) -> (broadcast::Receiver<PositionedEvent>, EventPosition);

    /// Sends `into` the events after `after` up to and including
    /// `through`, in order, as a history watch reads them. Completes once
    /// the history has gone past `through` (every such event was sent,
    /// which waits for the next change when `through` is the present) or
    /// `into` is closed; `Err` with the reason when the store can no
    /// longer tell those events (etcd compacted them away).
    fn replay(
        &self,
        after: EventPosition,
        through: EventPosition,
        into: tokio::sync::mpsc::Sender<PositionedEvent>,
    ) -> crate::BoxFuture<'_, Result<(), String>>;
}

#[cfg(test)]
mod tests {
    use super::EventPosition;

    #[test]
    fn positions_are_written_and_read_back_and_ordered() {
        let whole = EventPosition::whole(42);
        let third = EventPosition::at(42, 2);
        assert_eq!(whole.to_string(), "42");
        assert_eq!(third.to_string(), "42.2");
        assert_eq!("42".parse(), Ok(whole));
        assert_eq!("42.2".parse(), Ok(third));
        assert!(EventPosition::at(42, 0) < third);
        assert!(third < whole);
        assert!(whole < EventPosition::at(43, 0));
        for bad in [
            "",
            ".",
            "42.",
            ".2",
            "+42",
            "42.+2",
            "4 2",
            "42.2.1",
            "42.4294967295",
        ] {
            assert!(bad.parse::<EventPosition>().is_err(), "{bad:?}");
        }
    }
}

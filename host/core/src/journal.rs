//! What the [`Engine`](crate::Engine) must keep across restarts, and the
//! trait through which a persistent store keeps it.

use tokio::sync::oneshot;

use crate::error::LockError;
use crate::types::{Claim, Key};

/// A persistent lock as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The holder.
    pub owner: String,
    /// The token of its grant.
    pub token: u64,
    /// End of the lease, Unix epoch milliseconds.
    pub expires_at_ms: u64,
    /// What it holds: [`Claim::Exclusive`] for a lock's one holder
    /// ([`JournalOp::Put`]); shared or a permit for one of several holders
    /// ([`JournalOp::PutShare`]).
    pub claim: Claim,
    /// What an election's leader proclaimed ([`Claim::Leader`] only).
    pub value: Option<String>,
}

/// A persistent lease as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// Its time to live.
    pub ttl_ms: u64,
    /// End of the lease, Unix epoch milliseconds.
    pub expires_at_ms: u64,
}

/// One change to durable state. Ephemeral locks never produce one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JournalOp {
    /// A persistent lock was granted, re-locked or extended.
    Put(Key, Record),
    /// A persistent lock was released or expired.
    Delete(Key),
    /// One holder of a name held shared or of a semaphore was granted,
    /// re-locked or extended: keyed by the name and the record's owner
    /// (docs/contract.md#c21-shared). A name has either one `Put` record
    /// or any number of share records, never both.
    PutShare(Key, Record),
    /// That holder (the name and its owner) was released or expired.
    DeleteShare(Key, String),
    /// A persistent lease was granted or refreshed. `Key::name` is the lease
    /// id. Locks whose owner is a live lease's id in the same namespace are
    /// held under it and take its expiry at recovery.
    PutLease(Key, LeaseRecord),
    /// A persistent lease ended (revoked or expired). A lock record owned by
    /// a lease that has no record is released at recovery, so deleting the
    /// lease alone releases its locks; the engine deletes them in the same
    /// batch anyway.
    DeleteLease(Key),
    /// Ops that must be durable together, in one commit, or not at all.
    Batch(Vec<JournalOp>),
    /// No token above `up_to` will be issued until another reservation is
    /// durable; after a restart, issuing resumes above it.
    ReserveTokens {
        /// The highest token that may be issued.
        up_to: u64,
    },
}

/// Durable storage beneath the engine.
///
/// Ops are submitted while the engine holds the lock of the affected name, so
/// submission order is decision order, and the journal must apply them in
/// that order. `submit` must not block: a store with slow writes queues
/// them and lets many operations share one sync (group commit).
pub trait Journal: Send + Sync + 'static {
    /// Queues `op`. The ticket resolves once `op` is durable.
    fn submit(&self, op: JournalOp) -> Ticket;

    /// A ticket that resolves once every op submitted before this call is
    /// durable: the reads' barrier. A reply, listing or event that shows
    /// state waits on it first, so nothing is shown that a crash could take
    /// back (docs/contract.md, C10). It fails (`unavailable`) while the
    /// store cannot write: then what a reader saw may not survive a crash.
    ///
    /// A journal that keeps nothing, or whose `submit` is durable on
    /// return, answers ready.
    fn flushed(&self) -> Ticket {
        Ticket::ready()
    }

    /// How many ops were submitted so far: the position just after the
    /// last one. A journal that does not count answers 0, and then
    /// [`Journal::flushed_through`] must wait like [`Journal::flushed`].
    fn submitted(&self) -> u64 {
        0
    }

    /// A ticket that resolves once the first `position` ops submitted are
    /// durable: a read of one name waits for that name's last op only
    /// (docs/contract.md, C10), not for everyone's. The default waits for
    /// everything, which is always enough.
    fn flushed_through(&self, position: u64) -> Ticket {
        let _ = position;
        self.flushed()
    }

    /// Commit counters: `(commits, committed_ops, failed_commits)`.
    fn commit_stats(&self) -> (u64, u64, u64) {
        (0, 0, 0)
    }
}

/// What a journal hands back at open: the state to resume from.
#[derive(Clone, Debug, Default)]
pub struct Recovered {
    /// Persistent locks that had not expired, with their owners and tokens.
    pub locks: Vec<(Key, Record)>,
    /// Persistent holders of names held shared and of semaphores that had
    /// not expired, one entry per holder.
    pub shares: Vec<(Key, Record)>,
    /// Persistent leases, keyed by namespace and lease id, possibly expired.
    pub leases: Vec<(Key, LeaseRecord)>,
    /// The next token to issue: above every token issued before.
    pub next_token: u64,
    /// Tokens up to this one are covered by a durable reservation.
    pub reserved_up_to: u64,
}

impl Recovered {
    /// The starting point of a store that keeps nothing: no locks, and tokens
    /// starting at the wall clock in microseconds. An engine never issues a
    /// token above the wall clock in microseconds at its start plus the
    /// microseconds elapsed since (its ceiling, docs/internals.md#fencing-tokens),
    /// so a restarted process starts above every token the previous one
    /// issued, unless the wall clock went back.
    pub fn in_memory() -> Self {
        let micros = crate::clock::wall_clock_micros();
        Recovered {
            locks: Vec::new(),
            shares: Vec::new(),
            leases: Vec::new(),
            next_token: micros.max(1),
            reserved_up_to: u64::MAX,
        }
    }
}

/// The journal of the `memory` store: nothing is kept, so everything is
/// durable at once.
#[derive(Clone, Copy, Debug, Default)]
pub struct NullJournal;

impl Journal for NullJournal {
    fn submit(&self, _op: JournalOp) -> Ticket {
        Ticket::ready()
    }
}

/// Resolves when a journal op is durable, or reports why it is not.
#[derive(Debug)]
#[must_use = "a ticket must be awaited before the operation is acknowledged"]
pub struct Ticket(Option<oneshot::Receiver<Result<(), String>>>);

/// The journal's side of a [`Ticket`].
#[derive(Debug)]
pub struct TicketSender(oneshot::Sender<Result<(), String>>);

impl TicketSender {
    /// Reports the outcome: `Err` carries a message for `unavailable`.
    pub fn complete(self, outcome: Result<(), String>) {
        // The waiter may have gone away; the op is durable (or not) either way.
        let _ = self.0.send(outcome);
    }
}

impl Ticket {
    /// A ticket for an op that needs no I/O.
    pub fn ready() -> Self {
        Ticket(None)
    }

    /// A ticket to complete later, and its sender.
    pub fn pending() -> (TicketSender, Ticket) {
        let (tx, rx) = oneshot::channel();
        (TicketSender(tx), Ticket(Some(rx)))
    }

    /// Whether it resolved already (nothing to wait for).
    pub fn is_ready(&self) -> bool {
        self.0.is_none()
    }

    /// Waits until the op is durable.
    pub async fn wait(self) -> Result<(), LockError> {
        match self.0 {
            None => Ok(()),
            Some(rx) => match rx.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(message)) => Err(LockError::Unavailable(message)),
                Err(_) => Err(LockError::Unavailable(
                    "the store's writer stopped before the change was durable".to_string(),
                )),
            },
        }
    }
}

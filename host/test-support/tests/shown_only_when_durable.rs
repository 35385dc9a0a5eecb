//! Nothing is shown before it is durable (docs/contract.md#c10-durability):
//! a crash test that records what readers saw.
//!
//! The engine runs over a simulated disk whose ops become durable only when
//! the test syncs it, and whose crash keeps exactly what was synced (the
//! process dies; unsynced writes are gone). In each round a persistent
//! grant or release is left waiting for the disk while readers (`get`, a
//! `busy` answer, `list`, the event stream) look at its name; then the
//! process crashes and a new engine recovers from the disk. Every holder a
//! reader saw must be there after the restart, every release a reader saw
//! must hold after it, and no token a reader saw may be issued again.
//!
//! The negative control runs the same rounds over a disk whose barrier lies
//! (it reports everything durable at once), as an engine that answered
//! reads from memory would: the checker must catch it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockd_core::{
    Claim, Durability, Engine, EngineOptions, EventKind, Journal, JournalOp, Key, LeaseRecord,
    Limits, LockError, LockEvent, LockOptions, LockService, Record, Recovered, SystemClock, Ticket,
    TicketSender,
};

/// What a reader may wait for before the test moves on.
const READ_WINDOW: Duration = Duration::from_millis(60);

/// The durable part of the simulated disk.
#[derive(Clone, Default)]
struct Synced {
    locks: HashMap<Key, Record>,
    shares: HashMap<(Key, String), Record>,
    leases: HashMap<Key, LeaseRecord>,
    reserved: u64,
}

impl Synced {
    fn apply(&mut self, op: &JournalOp) {
        match op {
            JournalOp::Put(key, record) => {
                self.locks.insert(key.clone(), record.clone());
            }
            JournalOp::Delete(key) => {
                self.locks.remove(key);
            }
            JournalOp::PutShare(key, record) => {
                self.shares
                    .insert((key.clone(), record.owner.clone()), record.clone());
            }
            JournalOp::DeleteShare(key, owner) => {
                self.shares.remove(&(key.clone(), owner.clone()));
            }
            JournalOp::PutLease(key, record) => {
                self.leases.insert(key.clone(), *record);
            }
            JournalOp::DeleteLease(key) => {
                self.leases.remove(key);
            }
            JournalOp::Batch(ops) => ops.iter().for_each(|op| self.apply(op)),
            JournalOp::ReserveTokens { up_to } => self.reserved = self.reserved.max(*up_to),
        }
    }

    fn recovered(&self) -> Recovered {
        Recovered {
            shares: self
                .shares
                .iter()
                .map(|((k, _), r)| (k.clone(), r.clone()))
                .collect(),
            locks: self
                .locks
                .iter()
                .map(|(k, r)| (k.clone(), r.clone()))
                .collect(),
            leases: self.leases.iter().map(|(k, r)| (k.clone(), *r)).collect(),
            next_token: self.reserved + 1,
            reserved_up_to: self.reserved,
        }
    }
}

#[derive(Default)]
struct Disk {
    synced: Synced,
    /// Ops written but not synced, and barriers, in order.
    unsynced: Vec<(Option<JournalOp>, TicketSender)>,
    /// Ops submitted, and how many of them are synced: positions.
    submitted: u64,
    synced_ops: u64,
}

/// A journal on the simulated disk. `lying` makes `flushed` answer at once.
struct SimulatedDisk {
    disk: Mutex<Disk>,
    lying: bool,
}

impl SimulatedDisk {
    fn new(synced: Synced, lying: bool) -> Arc<SimulatedDisk> {
        Arc::new(SimulatedDisk {
            disk: Mutex::new(Disk {
                synced,
                ..Disk::default()
            }),
            lying,
        })
    }

    /// One fsync: everything written so far is durable.
    fn sync(&self) {
        let done: Vec<TicketSender> = {
            let mut disk = self.disk.lock().unwrap();
            let unsynced = std::mem::take(&mut disk.unsynced);
            unsynced
                .into_iter()
                .map(|(op, done)| {
                    if let Some(op) = op {
                        disk.synced.apply(&op);
                        disk.synced_ops += 1;
                    }
                    done
                })
                .collect()
        };
        done.into_iter().for_each(|d| d.complete(Ok(())));
    }

    /// The process dies: unsynced writes are lost, and every caller still
    /// waiting hears `unavailable`. Returns what the disk keeps.
    fn crash(&self) -> Synced {
        let mut disk = self.disk.lock().unwrap();
        for (_, done) in disk.unsynced.drain(..) {
            done.complete(Err("the process crashed".to_string()));
        }
        disk.synced.clone()
    }
}

impl Journal for SimulatedDisk {
    fn submit(&self, op: JournalOp) -> Ticket {
        let (done, ticket) = Ticket::pending();
        let mut disk = self.disk.lock().unwrap();
        disk.unsynced.push((Some(op), done));
        disk.submitted += 1;
        ticket
    }

    fn submitted(&self) -> u64 {
        self.disk.lock().unwrap().submitted
    }

    fn flushed_through(&self, position: u64) -> Ticket {
        let mut disk = self.disk.lock().unwrap();
        if self.lying || disk.synced_ops >= position {
            return Ticket::ready();
        }
        let (done, ticket) = Ticket::pending();
        disk.unsynced.push((None, done));
        ticket
    }

    fn flushed(&self) -> Ticket {
        let mut disk = self.disk.lock().unwrap();
        if self.lying || disk.unsynced.is_empty() {
            return Ticket::ready();
        }
        let (done, ticket) = Ticket::pending();
        disk.unsynced.push((None, done));
        ticket
    }
}

fn persistent(wait_ms: u64) -> LockOptions {
    LockOptions {
        wait_ms,
        durability: Durability::Persistent,
        ..LockOptions::default()
    }
}

fn shared() -> LockOptions {
    LockOptions {
        claim: Claim::Shared,
        ..persistent(0)
    }
}

/// What readers saw of one name while its change waited for the disk.
#[derive(Debug, Default)]
struct Seen {
    /// Holders shown, as (reader, owner, token).
    holders: Vec<(&'static str, String, u64)>,
    /// The readers shown the name free.
    free: Vec<&'static str>,
}

impl Seen {
    fn holder(&mut self, reader: &'static str, owner: &str, token: u64) {
        self.holders.push((reader, owner.to_string(), token));
    }
}

/// Every reader at once, each given [`READ_WINDOW`] to answer.
async fn read_all(
    service: &Arc<LockService>,
    name: &str,
    events: &mut tokio::sync::broadcast::Receiver<LockEvent>,
) -> Seen {
    let mut seen = Seen::default();
    let get = tokio::time::timeout(READ_WINDOW, service.get("ns", name));
    let busy = tokio::time::timeout(
        READ_WINDOW,
        service.lock("ns", name, "reader", 10_000, persistent(0)),
    );
    let list = tokio::time::timeout(READ_WINDOW, service.list("ns", name));
    let (get, busy, list) = tokio::join!(get, busy, list);
    match get {
        Ok(Ok(Some(info))) => seen.holder("get", &info.owner, info.fencing_token),
        Ok(Ok(None)) => seen.free.push("get"),
        _ => {}
    }
    match busy {
        Ok(Err(LockError::Busy(info))) => seen.holder("busy", &info.owner, info.fencing_token),
        Ok(Ok(grant)) => {
            // Granted: the name was free, as shown to this reader.
            seen.free.push("lock");
            seen.holder("lock", "reader", grant.fencing_token);
        }
        _ => {}
    }
    if let Ok(Ok(locks)) = list {
        match locks.iter().find(|l| l.name == name) {
            Some(l) => seen.holder("list", &l.info.owner, l.info.fencing_token),
            None => seen.free.push("list"),
        }
    }
    while let Ok(event) = events.try_recv() {
        if *event.name != *name {
            continue;
        }
        match event.kind {
            EventKind::Acquired | EventKind::HandedOff => {
                seen.holder("event", &event.owner, event.fencing_token)
            }
            EventKind::Released | EventKind::ForceReleased => seen.free.push("event"),
            _ => {}
        }
    }
    seen
}

/// Runs `call` while the disk syncs every few milliseconds.
async fn synced_while<T>(disk: &SimulatedDisk, call: impl std::future::Future<Output = T>) -> T {
    let syncing = async {
        loop {
            tokio::time::sleep(Duration::from_millis(2)).await;
            disk.sync();
        }
    };
    tokio::select! {
        out = call => out,
        never = syncing => never,
    }
}

fn start(disk: &Arc<SimulatedDisk>, synced: &Synced) -> Arc<LockService> {
    let engine = Engine::new(
        disk.clone(),
        synced.recovered(),
        Arc::new(SystemClock),
        EngineOptions::default(),
    );
    Arc::new(LockService::new(engine, Limits::default()))
}

/// Runs the rounds; answers every violation found.
async fn rounds(lying: bool) -> Vec<String> {
    let mut violations = Vec::new();
    let mut synced = Synced::default();
    let mut highest_seen = 0;
    for round in 0..8 {
        let disk = SimulatedDisk::new(synced.clone(), lying);
        let service = start(&disk, &synced);
        let mut events = service.events().expect("the engine publishes events");
        let name = format!("n{round}");
        // Even rounds: a grant waits for the disk. Odd rounds: a durable
        // holder's release does. The last two: the same for a shared grant
        // (a name of the engine's groups, with a journal position of its
        // own).
        let releasing = round % 2 == 1;
        let holding = if round >= 6 { shared() } else { persistent(0) };
        // A durable reservation covers the tokens of this round's grants, so
        // that only the barrier stands between them and a reader.
        let warm = LockOptions {
            durability: Durability::Ephemeral,
            ..LockOptions::default()
        };
        synced_while(&disk, service.lock("ns", "warm", "w", 600_000, warm))
            .await
            .unwrap();
        if releasing {
            let grant = synced_while(&disk, service.lock("ns", &name, "holder", 600_000, holding))
                .await
                .unwrap();
            highest_seen = highest_seen.max(grant.fencing_token);
            while events.try_recv().is_ok() {}
        }
        let change = {
            let service = service.clone();
            let name = name.clone();
            tokio::spawn(async move {
                if releasing {
                    drop(service.unlock("ns", &name, "holder", None).await);
                } else {
                    drop(service.lock("ns", &name, "holder", 600_000, holding).await);
                }
            })
        };
        // The change is decided at once; its write waits for a sync that
        // never comes.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let seen = read_all(&service, &name, &mut events).await;
        let kept = disk.crash();
        drop(change.await);
        drop(service);

        let key = Key::new("ns", name.as_str());
        let after = kept
            .locks
            .get(&key)
            .or_else(|| kept.shares.get(&(key.clone(), "holder".to_string())));
        for (reader, owner, token) in &seen.holders {
            highest_seen = highest_seen.max(*token);
            if after.is_none_or(|r| r.owner != *owner || r.token != *token) {
                violations.push(format!(
                    "round {round}: {reader} showed {owner:?} holding {name:?} with token {token}; after the crash: {after:?}"
                ));
            }
        }
        for reader in &seen.free {
            if after.is_some_and(|r| r.owner == "holder") {
                violations.push(format!(
                    "round {round}: {reader} showed {name:?} free; after the crash it is held: {after:?}"
                ));
            }
        }
        synced = kept;
        // No token a reader saw is issued again.
        let disk = SimulatedDisk::new(synced.clone(), lying);
        let service = start(&disk, &synced);
        let probe = LockOptions {
            durability: Durability::Ephemeral,
            ..LockOptions::default()
        };
        let next = synced_while(&disk, service.lock("ns", "probe", "p", 1_000, probe))
            .await
            .unwrap();
        if next.fencing_token <= highest_seen {
            violations.push(format!(
                "round {round}: token {} issued after the restart, not above {highest_seen} that a reader saw",
                next.fencing_token
            ));
        }
        drop(service);
    }
    violations
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_never_see_what_a_crash_takes_back() {
    let violations = rounds(false).await;
    assert!(violations.is_empty(), "{violations:#?}");
}

/// Negative control: the same rounds, with a barrier that lies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barrier_that_lies_is_caught() {
    let violations = rounds(true).await;
    eprintln!("{violations:#?}");
    // Every kind of reader is caught, for grants and for releases.
    for caught in [
        "get showed \"holder\" holding",
        "busy showed \"holder\" holding",
        "list showed \"holder\" holding",
        "event showed \"holder\" holding",
        "get showed \"n1\" free",
        "event showed \"n1\" free",
        // The shared rounds: a name of the engine's groups.
        "get showed \"holder\" holding \"n6\"",
        "busy showed \"holder\" holding \"n6\"",
        "get showed \"n7\" free",
        "event showed \"n7\" free",
    ] {
        assert!(
            violations.iter().any(|v| v.contains(caught)),
            "the checker missed {caught:?}: {violations:#?}"
        );
    }
}

/// A read of a name whose last change is durable answers at once, while
/// another name's grant waits for the disk: a reply waits for the changes
/// of what it shows, not for everyone's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_a_quiet_name_waits_for_nobody_else() {
    let synced = Synced::default();
    let disk = SimulatedDisk::new(synced.clone(), false);
    let service = start(&disk, &synced);
    for (name, options) in [("quiet", persistent(0)), ("quiet-shared", shared())] {
        synced_while(&disk, service.lock("ns", name, "q", 600_000, options))
            .await
            .unwrap();
    }
    let waiting = {
        let service = service.clone();
        tokio::spawn(async move {
            drop(
                service
                    .lock("ns", "loud", "holder", 600_000, persistent(0))
                    .await,
            );
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    for name in ["quiet", "quiet-shared"] {
        let read = tokio::time::timeout(READ_WINDOW, service.get("ns", name)).await;
        let held =
            read.unwrap_or_else(|_| panic!("a get of {name:?} waited for another name's write"));
        assert_eq!(held.unwrap().map(|info| info.owner), Some("q".to_string()));
        let busy = tokio::time::timeout(
            READ_WINDOW,
            service.lock("ns", name, "other", 1_000, persistent(0)),
        )
        .await
        .unwrap_or_else(|_| panic!("a busy answer about {name:?} waited for another name's write"));
        assert!(matches!(busy, Err(LockError::Busy(_))), "{busy:?}");
    }
    // The loud name's own readers do wait.
    let loud = tokio::time::timeout(READ_WINDOW, service.get("ns", "loud")).await;
    assert!(
        loud.is_err(),
        "a get of a name whose grant waits answered: {loud:?}"
    );
    disk.sync();
    waiting.await.unwrap();
}

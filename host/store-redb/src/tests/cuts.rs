//! A log cut at every byte of its last records, and damage in its middle.

use lockd_core::Claim;
use std::collections::BTreeMap;
use std::path::Path;

use lockd_core::{Journal as _, JournalOp, Key, LeaseRecord, Record};

use super::{copy_store, layout, scratch, segments};
use crate::log::LogConfig;
use crate::{OpenError, RedbJournal};

fn keeping_the_log() -> LogConfig {
    LogConfig {
        checkpoints: false,
        ..LogConfig::default()
    }
}

fn record(token: u64) -> Record {
    Record {
        value: None,
        claim: Claim::Exclusive,
        owner: format!("owner-{token}"),
        token,
        expires_at_ms: 1 << 50,
    }
}

/// One holder of a name held shared or of a semaphore.
fn share(owner: &str, token: u64, claim: Claim) -> Record {
    Record {
        value: None,
        claim,
        owner: owner.to_string(),
        token,
        expires_at_ms: 1 << 50,
    }
}

/// Ops of which every one changes the state, so that a recovery with one
/// op more or fewer than it should have is seen. The last seven (those cut
/// at every byte) grant, extend and release shares beside locks.
fn ops() -> Vec<JournalOp> {
    let key = |name: &str| Key::new("ns", name);
    let lease = LeaseRecord {
        ttl_ms: 1_000,
        expires_at_ms: 1 << 50,
    };
    let permit = Claim::Permit { permits: 3 };
    let extended = Record {
        expires_at_ms: 1 << 51,
        ..share("r2", 4, Claim::Shared)
    };
    vec![
        JournalOp::ReserveTokens { up_to: 100 },
        JournalOp::Put(key("a"), record(1)),
        JournalOp::PutLease(key("lease"), lease),
        JournalOp::PutShare(key("read"), share("r1", 2, Claim::Shared)),
        JournalOp::Put(key("b"), record(3)),
        JournalOp::ReserveTokens { up_to: 200 },
        JournalOp::Delete(key("a")),
        JournalOp::PutShare(key("read"), share("r2", 4, Claim::Shared)),
        JournalOp::Batch(vec![
            JournalOp::Put(key("c"), record(5)),
            JournalOp::Delete(key("b")),
            JournalOp::PutShare(key("sem"), share("p1", 6, permit)),
        ]),
        JournalOp::DeleteLease(key("lease")),
        JournalOp::DeleteShare(key("read"), "r1".to_string()),
        JournalOp::PutShare(key("read"), extended),
        JournalOp::ReserveTokens { up_to: 300 },
        JournalOp::PutShare(key("sem"), share("p2", 7, permit)),
        JournalOp::Put(key("d"), record(8)),
        JournalOp::DeleteShare(key("sem"), "p1".to_string()),
    ]
}

#[derive(Debug, Default, PartialEq, Eq)]
struct State {
    locks: BTreeMap<Key, Record>,
    shares: BTreeMap<(Key, String), Record>,
    leases: BTreeMap<Key, LeaseRecord>,
    reserved: u64,
}

impl State {
    fn apply(&mut self, op: &JournalOp) {
        match op {
            JournalOp::Put(key, record) => drop(self.locks.insert(key.clone(), record.clone())),
            JournalOp::Delete(key) => drop(self.locks.remove(key)),
            JournalOp::PutShare(key, record) => drop(
                self.shares
                    .insert((key.clone(), record.owner.clone()), record.clone()),
            ),
            JournalOp::DeleteShare(key, owner) => {
                drop(self.shares.remove(&(key.clone(), owner.clone())))
            }
            JournalOp::PutLease(key, lease) => drop(self.leases.insert(key.clone(), *lease)),
            JournalOp::DeleteLease(key) => drop(self.leases.remove(key)),
            JournalOp::Batch(ops) => ops.iter().for_each(|op| self.apply(op)),
            JournalOp::ReserveTokens { up_to } => self.reserved = self.reserved.max(*up_to),
        }
    }

    fn after(ops: &[JournalOp]) -> State {
        let mut state = State::default();
        ops.iter().for_each(|op| state.apply(op));
        state
    }

    fn recovered(path: &Path) -> Result<State, OpenError> {
        let (journal, recovered) = RedbJournal::open_configured(path, keeping_the_log())?;
        drop(journal);
        Ok(State {
            locks: recovered.locks.into_iter().collect(),
            shares: recovered
                .shares
                .into_iter()
                .map(|(key, record)| ((key, record.owner.clone()), record))
                .collect(),
            leases: recovered.leases.into_iter().collect(),
            reserved: recovered.reserved_up_to,
        })
    }
}

/// Writes `ops` through a journal that keeps its log, the last four in one
/// commit (a frame of several records), and closes it.
fn write_store(path: &Path, ops: &[JournalOp], config: LogConfig) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (journal, _) = RedbJournal::open_configured(path, config).unwrap();
    let (alone, together) = ops.split_at(ops.len().saturating_sub(4));
    for op in alone {
        runtime.block_on(journal.submit(op.clone()).wait()).unwrap();
    }
    let tickets: Vec<_> = together
        .iter()
        .map(|op| journal.submit(op.clone()))
        .collect();
    for ticket in tickets {
        runtime.block_on(ticket.wait()).unwrap();
    }
}

/// The store's log cut at every byte offset of its last seven records
/// (truncated there, or zeroed from there on, as a preallocated segment is
/// after a crash) opens without error, with exactly the ops whose records
/// are whole: never one more, never one fewer, never a lower token
/// reservation. About 900 opens of a copy on tmpfs: a few seconds.
#[test]
fn a_log_cut_at_every_byte_of_its_last_records_recovers_what_is_whole() {
    let ops = ops();
    for m in 0..ops.len() {
        assert_ne!(State::after(&ops[..m]), State::after(&ops[..m + 1]));
    }
    // The last four ops are submitted together, but on a busy machine the
    // writer may still commit them one at a time: write until they share a
    // frame.
    let (_dir, store, segment, layout) = (0..10)
        .find_map(|_| {
            let dir = scratch();
            let store = dir.path().join("locks.redb");
            write_store(&store, &ops, keeping_the_log());
            let [segment] = &segments(&store)[..] else {
                panic!("expected one segment: {:?}", segments(&store));
            };
            let layout = layout(segment);
            assert_eq!(layout.record_ends.len(), ops.len());
            let segment = segment.clone();
            (layout.frames.len() < ops.len()).then_some((dir, store, segment, layout))
        })
        .expect("no frame of several records in 10 tries");
    let from = layout.record_ends[ops.len() - 8];
    let original = std::fs::read(&segment).unwrap();
    let mut opened = 0;
    for cut in from..=layout.end {
        for zeroed in [false, true] {
            // Zeroing bytes that were zeros changes nothing: a record
            // ending in them stays whole.
            let intact_to = if zeroed {
                original[cut..layout.end]
                    .iter()
                    .position(|&b| b != 0)
                    .map_or(layout.end, |at| cut + at)
            } else {
                cut
            };
            let whole = layout
                .record_ends
                .iter()
                .filter(|&&end| end <= intact_to)
                .count();
            let expected = State::after(&ops[..whole]);
            let image = scratch();
            let copy = copy_store(&store, image.path());
            let segment = &segments(&copy)[0];
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(segment)
                .unwrap();
            if zeroed {
                use std::os::unix::fs::FileExt as _;
                file.write_all_at(&vec![0; layout.end - cut], cut as u64)
                    .unwrap();
            } else {
                file.set_len(cut as u64).unwrap();
            }
            let state = State::recovered(&copy)
                .unwrap_or_else(|e| panic!("cut at {cut} (zeroed {zeroed}): {e}"));
            assert_eq!(state, expected, "cut at {cut} (zeroed {zeroed})");
            // The reservation synced before the cut records stays.
            assert!(state.reserved >= 100, "cut at {cut}: reservation went back");
            opened += 1;
        }
    }
    assert!(opened > 300, "{opened}");
}

/// A damaged record, frame header or record length with commits after it
/// in the segment is corruption: the open is refused, naming the segment
/// and the offset, and nothing is applied or deleted (the damage undone,
/// the store opens with every op).
#[test]
fn damage_followed_by_commits_is_refused() {
    let ops = ops();
    let dir = scratch();
    let store = dir.path().join("locks.redb");
    write_store(&store, &ops, keeping_the_log());
    let layout = layout(&segments(&store)[0]);
    let frame = layout.frames[3];
    let record_payload = frame + crate::log::format::FRAME_HEADER + 8 + 3;
    for (what, at) in [
        ("a frame header", frame + 5),
        ("a record length", frame + crate::log::format::FRAME_HEADER),
        ("a record", record_payload),
    ] {
        let image = scratch();
        let copy = copy_store(&store, image.path());
        let segment = segments(&copy)[0].clone();
        let mut bytes = std::fs::read(&segment).unwrap();
        bytes[at] ^= 0x40;
        std::fs::write(&segment, &bytes).unwrap();
        let err = State::recovered(&copy).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, OpenError::Corrupt { .. }), "{what}: {err:?}");
        assert!(
            message.contains(&segment.display().to_string()) && message.contains("byte"),
            "{what}: {message}"
        );
        assert!(std::fs::read(&segment).unwrap() == bytes, "{what}: changed");
        bytes[at] ^= 0x40;
        std::fs::write(&segment, &bytes).unwrap();
        assert_eq!(
            State::recovered(&copy).unwrap(),
            State::after(&ops),
            "{what}"
        );
    }
}

/// Small segments, kept: a log of several segments.
fn small_segments() -> LogConfig {
    LogConfig {
        first_segment: 512,
        max_segment: 512,
        ..keeping_the_log()
    }
}

/// A segment lost from the middle of the log, or the last commit of a
/// segment damaged while the next segment goes on from it, is refused: the
/// commits after it prove it had been acknowledged.
#[test]
fn a_gap_between_segments_is_refused() {
    // Locks, and every third op a share, across segments.
    let ops: Vec<_> = (1..=40)
        .map(|i| {
            let key = Key::new("ns", format!("k{i}").as_str());
            match i % 3 {
                0 => JournalOp::PutShare(key, share(&format!("r{i}"), i, Claim::Shared)),
                _ => JournalOp::Put(key, record(i)),
            }
        })
        .collect();
    let dir = scratch();
    let store = dir.path().join("locks.redb");
    write_store(&store, &ops, small_segments());
    let all = segments(&store);
    assert!(all.len() >= 4, "{all:?}");
    // Intact, it opens with everything.
    let image = scratch();
    let copy = copy_store(&store, image.path());
    assert_eq!(State::recovered(&copy).unwrap(), State::after(&ops));

    let image = scratch();
    let copy = copy_store(&store, image.path());
    std::fs::remove_file(&segments(&copy)[1]).unwrap();
    let message = State::recovered(&copy).unwrap_err().to_string();
    assert!(message.contains("missing"), "{message}");

    let image = scratch();
    let copy = copy_store(&store, image.path());
    let second = segments(&copy)[1].clone();
    let last_frame = *layout(&second).frames.last().unwrap();
    let mut bytes = std::fs::read(&second).unwrap();
    bytes[last_frame + 2] ^= 1;
    std::fs::write(&second, &bytes).unwrap();
    let message = State::recovered(&copy).unwrap_err().to_string();
    assert!(message.contains("commits are missing"), "{message}");
}

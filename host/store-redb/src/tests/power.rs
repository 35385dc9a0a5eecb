//! The power cut at the Nth sync: a test backend for the log's writes and
//! syncs keeps what is written in memory until it is synced; at the Nth
//! sync it persists only a part of it (a torn write) and nothing after.
//! For every N in a range, every acknowledged grant and release survives
//! the reopen and tokens never go backwards: of locks, driven through the
//! engine, and of shares (holders of names held shared and of semaphores),
//! written through the journal.

use lockd_core::Claim;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use lockd_core::{
    Durability, EngineOptions, Journal as _, JournalOp, Key, Limits, LockError, LockOptions,
    LockService, Record, SystemClock,
};

use super::scratch;
use crate::log::{LogConfig, LogIo};
use crate::RedbJournal;

struct Cut {
    syncs: u64,
    cut_at: u64,
    /// Bytes of the unsynced writes that reach the disk at the cut.
    keep: usize,
    /// Report the cut sync, and everything after, as done: a disk that
    /// lies (the negative control).
    lies: bool,
    cut: bool,
    unsynced: Vec<(File, u64, Vec<u8>)>,
}

struct PowerCut(Mutex<Cut>);

impl PowerCut {
    fn new(cut_at: u64, keep: usize, lies: bool) -> Arc<PowerCut> {
        Arc::new(PowerCut(Mutex::new(Cut {
            syncs: 0,
            cut_at,
            keep,
            lies,
            cut: false,
            unsynced: Vec::new(),
        })))
    }

    fn was_cut(&self) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).cut
    }

    fn after_cut(cut: &Cut) -> io::Result<()> {
        if cut.lies {
            Ok(())
        } else {
            Err(io::Error::other("the power was cut"))
        }
    }
}

impl LogIo for PowerCut {
    fn write_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
        let mut cut = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if cut.cut {
            return PowerCut::after_cut(&cut);
        }
        cut.unsynced
            .push((file.try_clone()?, offset, bytes.to_vec()));
        Ok(())
    }

    fn sync(&self, _file: &File) -> io::Result<()> {
        let mut cut = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if cut.cut {
            return PowerCut::after_cut(&cut);
        }
        cut.syncs += 1;
        let cutting = cut.syncs == cut.cut_at;
        let mut budget = if cutting { cut.keep } else { usize::MAX };
        for (file, offset, bytes) in std::mem::take(&mut cut.unsynced) {
            let n = bytes.len().min(budget);
            file.write_all_at(&bytes[..n], offset)?;
            budget -= n;
        }
        if cutting {
            cut.cut = true;
            return PowerCut::after_cut(&cut);
        }
        Ok(())
    }
}

/// What callers were told: per name, the last acknowledged state (held with
/// this token, or free), and the names whose last operation failed (its
/// outcome is unknown).
#[derive(Default)]
struct Told {
    acknowledged: HashMap<String, Option<u64>>,
    unknown: Vec<String>,
    highest_token: u64,
}

const PERSISTENT: LockOptions = LockOptions {
    claim: Claim::Exclusive,
    lock_delay_ms: 0,
    wait_ms: 0,
    durability: Durability::Persistent,
    quota: None,
    refuse_relock: false,
};

/// Three callers, each locking and unlocking its own four names in turn,
/// until the first failure.
async fn drive(service: &LockService, power: &PowerCut) -> Told {
    let callers = (0..3).map(|caller| {
        let service = service.clone();
        async move {
            let mut told = Told::default();
            let mut held: HashMap<String, u64> = HashMap::new();
            for step in 0..16 {
                let name = format!("c{caller}-k{}", step % 4);
                let outcome = match held.get(&name) {
                    Some(&token) => service
                        .unlock("ns", &name, "o", Some(token))
                        .await
                        .map(|()| None),
                    None => service
                        .lock("ns", &name, "o", 600_000, PERSISTENT)
                        .await
                        .map(|grant| Some(grant.fencing_token)),
                };
                match outcome {
                    Ok(state) => {
                        match state {
                            Some(token) => {
                                held.insert(name.clone(), token);
                                told.highest_token = told.highest_token.max(token);
                            }
                            None => drop(held.remove(&name)),
                        }
                        told.acknowledged.insert(name, state);
                    }
                    Err(LockError::Unavailable(_)) => {
                        told.unknown.push(name);
                        break;
                    }
                    Err(e) => panic!("unexpected {e:?}"),
                }
            }
            told
        }
    });
    let mut told = Told::default();
    for caller in futures_join(callers.collect()).await {
        told.acknowledged.extend(caller.acknowledged);
        told.unknown.extend(caller.unknown);
        told.highest_token = told.highest_token.max(caller.highest_token);
    }
    let _ = power;
    told
}

async fn futures_join<F: std::future::Future<Output = Told> + Send + 'static>(
    callers: Vec<F>,
) -> Vec<Told> {
    let tasks: Vec<_> = callers.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.unwrap());
    }
    out
}

/// Runs the callers on a store whose power is cut at sync `cut_at`, then
/// reopens it on the real disk and checks what it holds against what the
/// callers were told.
fn cut_and_check(dir: &Path, cut_at: u64, keep: usize, lies: bool) -> Result<bool, String> {
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    };
    let store = dir.join("locks.redb");
    let power = PowerCut::new(cut_at, keep, lies);
    let config = LogConfig {
        first_segment: 1 << 10,
        max_segment: 2 << 10,
        io: power.clone(),
        ..LogConfig::default()
    };
    // The first process's runtime goes with it: its tasks hold the store.
    let told = runtime().block_on(async {
        let engine = crate::open_configured(
            &store,
            Arc::new(SystemClock),
            EngineOptions::default(),
            config,
        )
        .unwrap()
        .engine;
        let service = LockService::new(engine, Limits::default());
        drive(&service, &power).await
    });
    let was_cut = power.was_cut();
    runtime().block_on(async {
        let engine = crate::open(&store).map_err(|e| format!("reopen: {e}"))?;
        let service = LockService::new(engine, Limits::default());
        for (name, state) in &told.acknowledged {
            if told.unknown.contains(name) {
                continue;
            }
            let held = service
                .get("ns", name)
                .await
                .map_err(|e| e.to_string())?
                .map(|info| info.fencing_token);
            if held != *state {
                return Err(format!(
                    "{name}: acknowledged {state:?}, after the cut at sync {cut_at} {held:?}"
                ));
            }
        }
        let next = service
            .lock("ns", "after", "o", 1_000, PERSISTENT)
            .await
            .map_err(|e| e.to_string())?;
        if next.fencing_token <= told.highest_token {
            return Err(format!(
                "token went back: {} after {} (cut at sync {cut_at})",
                next.fencing_token, told.highest_token
            ));
        }
        Ok(was_cut)
    })
}

/// Runs `check` with a cut at sync N for every N from 1 until past the end
/// of the run, keeping a varying part of the unsynced bytes (none, a torn
/// part, all of them); returns the last N.
fn cut_at_every_sync(check: fn(&Path, u64, usize, bool) -> Result<bool, String>) -> u64 {
    let mut cut_at = 0;
    loop {
        cut_at += 1;
        let mut cut = false;
        for keep in [0, 37, usize::MAX] {
            let dir = scratch();
            match check(dir.path(), cut_at, keep, false) {
                Ok(was_cut) => cut |= was_cut,
                Err(why) => panic!("cut at sync {cut_at}, keeping {keep} bytes: {why}"),
            }
        }
        if !cut {
            // Every run ended before its Nth sync.
            return cut_at;
        }
        assert!(cut_at < 500, "the runs never end");
    }
}

/// For every N from 1 until past the end of the run, cut at sync N,
/// keeping a varying part of the unsynced bytes (none, a torn part, all of
/// them): nothing acknowledged is lost, tokens go on rising. The runs cover
/// commit syncs, segment creation syncs, rotations and checkpoints (1-2 KiB
/// segments). Some 100-150 short runs on tmpfs (the number of syncs per run
/// depends on how commits group): 5-25 s.
#[test]
fn a_power_cut_at_any_sync_loses_nothing_acknowledged() {
    let cut_at = cut_at_every_sync(cut_and_check);
    assert!(
        cut_at > 20,
        "runs of {cut_at} syncs are too short to cover rotations"
    );
}

/// Negative control: a disk that reports the cut sync, and every one after
/// it, as done is caught: acknowledged grants are lost, or the store cannot
/// even be reopened. (A cut past the end of a run, which depends on how
/// commits group, loses nothing: not every N is caught.)
#[test]
fn a_disk_that_lies_about_its_syncs_is_caught() {
    let caught = (5..=30)
        .filter(|&cut_at| {
            let dir = scratch();
            cut_and_check(dir.path(), cut_at, 0, true).is_err()
        })
        .count();
    assert!(caught >= 10, "caught {caught} of 26");
}

/// What share writers were told: per holder (name and owner), the last
/// acknowledged record (token and expiry) or none, and the holders whose
/// last write failed (its outcome is unknown).
#[derive(Default)]
struct ToldShares {
    acknowledged: HashMap<(String, String), Option<(u64, u64)>>,
    unknown: Vec<(String, String)>,
}

/// Three writers, each granting, extending and releasing two holders of
/// each of its two names (one held shared, one a semaphore of 3 permits)
/// in turn, until the first failure. Expiries are ten minutes ahead of the
/// wall clock, so the reopen by the system clock keeps them.
async fn drive_shares(journal: Arc<RedbJournal>) -> ToldShares {
    let ahead = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 600_000;
    let writers = (0..3u64).map(|writer| {
        let journal = journal.clone();
        tokio::spawn(async move {
            let mut told = ToldShares::default();
            let mut held: HashMap<(String, String), (u64, u64)> = HashMap::new();
            for step in 0..16u64 {
                let (name, claim) = match step % 2 {
                    0 => (format!("w{writer}-read"), Claim::Shared),
                    _ => (format!("w{writer}-sem"), Claim::Permit { permits: 3 }),
                };
                let holder = (name.clone(), format!("o{}", step / 2 % 2));
                let key = Key::new("ns", name.as_str());
                // Grant, extend, release, over and over; tokens unique.
                let (op, state) = match held.get(&holder) {
                    None => {
                        let record = (writer * 100 + step + 1, ahead + step);
                        let put = JournalOp::PutShare(
                            key,
                            Record {
                                value: None,
                                claim,
                                owner: holder.1.clone(),
                                token: record.0,
                                expires_at_ms: record.1,
                            },
                        );
                        (put, Some(record))
                    }
                    Some(&(token, expires)) if expires < ahead + 1_000 => {
                        let record = (token, expires + 1_000);
                        let extend = JournalOp::PutShare(
                            key,
                            Record {
                                value: None,
                                claim,
                                owner: holder.1.clone(),
                                token,
                                expires_at_ms: record.1,
                            },
                        );
                        (extend, Some(record))
                    }
                    Some(_) => (JournalOp::DeleteShare(key, holder.1.clone()), None),
                };
                match journal.submit(op).wait().await {
                    Ok(()) => {
                        match state {
                            Some(record) => drop(held.insert(holder.clone(), record)),
                            None => drop(held.remove(&holder)),
                        }
                        told.acknowledged.insert(holder, state);
                    }
                    Err(LockError::Unavailable(_)) => {
                        told.unknown.push(holder);
                        break;
                    }
                    Err(e) => panic!("unexpected {e:?}"),
                }
            }
            told
        })
    });
    let mut told = ToldShares::default();
    for writer in writers.collect::<Vec<_>>() {
        let writer = writer.await.unwrap();
        told.acknowledged.extend(writer.acknowledged);
        told.unknown.extend(writer.unknown);
    }
    told
}

/// Writes shares through a journal whose power is cut at sync `cut_at`,
/// then reopens it on the real disk and checks the recovered shares
/// against what the writers were told.
fn cut_and_check_shares(dir: &Path, cut_at: u64, keep: usize, lies: bool) -> Result<bool, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = dir.join("locks.redb");
    let power = PowerCut::new(cut_at, keep, lies);
    let config = LogConfig {
        first_segment: 1 << 10,
        max_segment: 2 << 10,
        io: power.clone(),
        ..LogConfig::default()
    };
    let (journal, _) = RedbJournal::open_configured(&store, config).unwrap();
    let journal = Arc::new(journal);
    let told = runtime.block_on(drive_shares(journal.clone()));
    // Dropping the journal joins its threads and lets go of the file.
    drop(journal);
    let was_cut = power.was_cut();
    let (_, recovered) = RedbJournal::open(&store).map_err(|e| format!("reopen: {e}"))?;
    let shares: HashMap<(String, String), (u64, u64)> = recovered
        .shares
        .iter()
        .map(|(key, record)| {
            let holder = (key.name.to_string(), record.owner.clone());
            (holder, (record.token, record.expires_at_ms))
        })
        .collect();
    for (holder, state) in &told.acknowledged {
        if told.unknown.contains(holder) {
            continue;
        }
        let recovered = shares.get(holder).copied();
        if recovered != *state {
            return Err(format!(
                "{holder:?}: acknowledged {state:?}, after the cut at sync {cut_at} {recovered:?}"
            ));
        }
    }
    // The writers reserve no tokens (the engine would): the next token
    // rests on the records alone, above every held share's.
    let held = told
        .acknowledged
        .values()
        .flatten()
        .map(|&(token, _)| token);
    if let Some(highest) = held.max() {
        if recovered.next_token <= highest {
            return Err(format!(
                "token went back: the next is {} below a held share's {highest} (cut at sync \
                 {cut_at})",
                recovered.next_token
            ));
        }
    }
    Ok(was_cut)
}

/// The power cut at every sync of share writes: every acknowledged grant,
/// extend and release of a holder survives, and tokens resume above every
/// share still held. Some 100 short runs on tmpfs: 2-10 s.
#[test]
fn a_power_cut_at_any_sync_loses_no_acknowledged_share() {
    let cut_at = cut_at_every_sync(cut_and_check_shares);
    assert!(
        cut_at > 20,
        "runs of {cut_at} syncs are too short to cover rotations"
    );
}

/// Negative control of the shares' check: a disk that lies about its
/// syncs is caught.
#[test]
fn a_disk_that_lies_about_share_syncs_is_caught() {
    let caught = (5..=30)
        .filter(|&cut_at| {
            let dir = scratch();
            cut_and_check_shares(dir.path(), cut_at, 0, true).is_err()
        })
        .count();
    assert!(caught >= 10, "caught {caught} of 26");
}

//! The power cut at the Nth sync: a test backend for the log's writes and
//! syncs keeps what is written in memory until it is synced; at the Nth
//! sync it persists only a part of it (a torn write) and nothing after.
//! For every N in a range, every acknowledged grant and release survives
//! the reopen and tokens never go backwards.

use lockd_core::Claim;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use lockd_core::{
    Durability, EngineOptions, Limits, LockError, LockOptions, LockService, SystemClock,
};

use super::scratch;
use crate::log::{LogConfig, LogIo};

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
        .unwrap();
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

/// For every N from 1 until past the end of the run, cut at sync N,
/// keeping a varying part of the unsynced bytes (none, a torn part, all of
/// them): nothing acknowledged is lost, tokens go on rising. The runs cover
/// commit syncs, segment creation syncs, rotations and checkpoints (1-2 KiB
/// segments). Some 100-150 short runs on tmpfs (the number of syncs per run
/// depends on how commits group): 5-25 s.
#[test]
fn a_power_cut_at_any_sync_loses_nothing_acknowledged() {
    let mut cut_at = 0;
    loop {
        cut_at += 1;
        let mut cut = false;
        for keep in [0, 37, usize::MAX] {
            let dir = scratch();
            match cut_and_check(dir.path(), cut_at, keep, false) {
                Ok(was_cut) => cut |= was_cut,
                Err(why) => panic!("cut at sync {cut_at}, keeping {keep} bytes: {why}"),
            }
        }
        if !cut {
            // Every run ended before its Nth sync.
            break;
        }
        assert!(cut_at < 500, "the runs never end");
    }
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

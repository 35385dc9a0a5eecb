//! Fuzzes the lock stores against the reference model: an `Arbitrary`
//! sequence of up to `MAX_OPS` operations (lock, unlock, extend, get, list,
//! guard ops, clock moves, invalid input, and crash-and-reopen) runs on the
//! memory store and on a redb store in a temporary directory, and every
//! reply must be one `lockd_test_support::model::Model` allows. A disagreement
//! panics with the step, the call, the expected and actual replies.
#![no_main]

use std::path::{Path, PathBuf};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use lockd_core::Durability;
use lockd_test_support::model::{self, BadArg, InvalidCall, Op, TokenArg};
use lockd_test_support::{MemoryFactory, RedbFactory};

/// The fuzzer's view of an [`Op`]: small integers, mapped into the same
/// ranges the proptest generator uses.
#[derive(Arbitrary, Debug)]
enum FuzzOp {
    Lock {
        name: u8,
        owner: u8,
        ttl: u16,
        persistent: bool,
    },
    Unlock {
        name: u8,
        owner: u8,
        token: u8,
    },
    Extend {
        name: u8,
        owner: u8,
        ttl: u16,
    },
    Get {
        name: u8,
    },
    List,
    GuardAcquire {
        name: u8,
        ttl: u16,
        persistent: bool,
    },
    GuardRelease {
        guard: u8,
    },
    GuardIsHeld {
        guard: u8,
    },
    GuardDrop {
        guard: u8,
    },
    Advance {
        ms: u16,
    },
    Restart,
    Invalid {
        call: u8,
        bad: u8,
        name: u8,
        owner: u8,
    },
}

fn ttl(raw: u16) -> u64 {
    1 + u64::from(raw) % model::MAX_GEN_TTL_MS
}

fn durability(persistent: bool) -> Durability {
    if persistent {
        Durability::Persistent
    } else {
        Durability::Ephemeral
    }
}

impl From<&FuzzOp> for Op {
    fn from(op: &FuzzOp) -> Op {
        match *op {
            FuzzOp::Lock {
                name,
                owner,
                ttl: t,
                persistent,
            } => Op::Lock {
                name: name.into(),
                owner: owner.into(),
                ttl_ms: ttl(t),
                durability: durability(persistent),
            },
            FuzzOp::Unlock { name, owner, token } => Op::Unlock {
                name: name.into(),
                owner: owner.into(),
                token: [
                    TokenArg::None,
                    TokenArg::Current,
                    TokenArg::Stale,
                    TokenArg::Future,
                ][usize::from(token) % 4],
            },
            FuzzOp::Extend {
                name,
                owner,
                ttl: t,
            } => Op::Extend {
                name: name.into(),
                owner: owner.into(),
                ttl_ms: ttl(t),
            },
            FuzzOp::Get { name } => Op::Get { name: name.into() },
            FuzzOp::List => Op::List,
            FuzzOp::GuardAcquire {
                name,
                ttl: t,
                persistent,
            } => Op::GuardAcquire {
                name: name.into(),
                ttl_ms: ttl(t),
                durability: durability(persistent),
            },
            FuzzOp::GuardRelease { guard } => Op::GuardRelease {
                guard: guard.into(),
            },
            FuzzOp::GuardIsHeld { guard } => Op::GuardIsHeld {
                guard: guard.into(),
            },
            FuzzOp::GuardDrop { guard } => Op::GuardDrop {
                guard: guard.into(),
            },
            FuzzOp::Advance { ms } => Op::Advance {
                ms: u64::from(ms) % (model::MAX_GEN_ADVANCE_MS + 1),
            },
            FuzzOp::Restart => Op::Restart,
            FuzzOp::Invalid {
                call,
                bad,
                name,
                owner,
            } => Op::Invalid {
                call: [
                    InvalidCall::Lock,
                    InvalidCall::Unlock,
                    InvalidCall::Extend,
                    InvalidCall::Get,
                ][usize::from(call) % 4],
                bad: [
                    BadArg::EmptyName,
                    BadArg::LongName,
                    BadArg::EmptyOwner,
                    BadArg::LongOwner,
                    BadArg::ZeroTtl,
                    BadArg::LongTtl,
                    BadArg::HugeTtl,
                ][usize::from(bad) % 7],
                name: name.into(),
                owner: owner.into(),
            },
        }
    }
}

/// A redb store, emptied for each input: a copy of a pristine empty store
/// made once per process (creating a redb file costs several times more than
/// copying one), in a temporary directory on tmpfs when there is one.
struct Scratch {
    _dir: tempfile::TempDir,
    pristine: PathBuf,
    path: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let pristine = dir.path().join("pristine.redb");
        // Opening creates the file and its tables; dropping closes it.
        drop(lockd_redb::RedbJournal::open(&pristine).unwrap());
        let path = dir.path().join("locks.redb");
        Scratch {
            _dir: dir,
            pristine,
            path,
        }
    }

    /// An empty store at `self.path`.
    fn fresh(&self) -> RedbFactory {
        std::fs::copy(&self.pristine, &self.path).unwrap();
        RedbFactory::at(&self.path)
    }
}

thread_local! {
    static SCRATCH: Scratch = Scratch::new();
}

fuzz_target!(|input: Vec<FuzzOp>| {
    let ops: Vec<Op> = input.iter().take(model::MAX_OPS).map(Op::from).collect();
    // A runtime per input: current-thread, so no store task holds a handle
    // across a restart, and dropped at the end, so every task (the purge
    // loops) is freed with the input and LeakSanitizer sees no leak.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // The memory store keeps nothing, so a restart there empties it.
    if let Err(e) = rt.block_on(model::run(&MemoryFactory, &ops)) {
        panic!("memory store: {e}");
    }
    // Without a restart, the journal is unobservable: the redb run would
    // repeat the memory run's engine code at many times its cost.
    if ops.contains(&Op::Restart) {
        let redb = SCRATCH.with(Scratch::fresh);
        if let Err(e) = rt.block_on(model::run(&redb, &ops)) {
            panic!("redb store: {e}");
        }
    }
});

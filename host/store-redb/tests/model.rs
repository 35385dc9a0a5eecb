//! Model-based test of the redb store: random sequences of lock, unlock,
//! extend, get, list, guard and clock operations *and crash-and-reopen*, each
//! reply compared with `lockd_test_support::model` (see its module docs for the
//! rules). A reopen drops every handle (the engine and its journal, whose
//! drop joins the writer thread) and opens the same file with the same
//! `ManualClock`: persistent locks must come back with owner, token and
//! expiry, ephemeral ones must be gone, and tokens must keep rising.
//!
//! `PROPTEST_CASES` overrides the number of sequences (default 2,000).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lockd_core::{BoxFuture, LockBackend, ManualClock};
use lockd_test_support::model::{self, Op};
use lockd_test_support::{RedbFactory, StoreFactory};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestError, TestRunner};

/// Sequences run by default; with the memory test's 8,000, CI runs 10,000.
const CASES: u32 = 2_000;

/// A fresh store file per sequence, on tmpfs when there is one: the model
/// checks semantics across drop-and-reopen, not the disk, and fsync on tmpfs
/// costs nothing.
#[test]
fn redb_store_matches_the_model_across_restarts() {
    let tally = model::check_against_model("redb", CASES, true, true, RedbFactory::on_tmpfs);
    // Restarts with live locks are what this store adds to the model run.
    assert!(tally.restarts > 0 && tally.survived_restart > 0, "{tally}");
    assert!(tally.leases_survived_restart > 0, "{tally}");
}

/// A hand-written election sequence across restarts (rule 16): a leader
/// and its proclaimed value come back, a stale token proclaims nothing, the
/// election keeps its name from locks and semaphores, an ephemeral
/// leadership is gone after the restart, and a new leader's token is above
/// every one before.
#[test]
fn a_fixed_election_sequence_matches_the_model() {
    use lockd_core::Claim::Permit;
    use lockd_core::Durability::{Ephemeral, Persistent};
    use lockd_test_support::model::TokenArg;
    let campaign = |name, owner, value, durability| Op::Campaign {
        name,
        owner,
        value,
        ttl_ms: 1_000,
        durability,
    };
    let proclaim = |owner, token, value| Op::Proclaim {
        name: 0,
        owner,
        token,
        value,
    };
    let ops = vec![
        campaign(0, 0, 1, Persistent),
        campaign(0, 1, 0, Persistent),
        proclaim(model::HOLDER, TokenArg::Current, 2),
        proclaim(1, TokenArg::Current, 0),
        proclaim(0, TokenArg::Future, 0),
        // The leader campaigns again: same token, its new value.
        campaign(0, 0, 0, Persistent),
        Op::Leader { name: 0 },
        campaign(1, 2, 1, Ephemeral),
        Op::Advance { ms: 300 },
        Op::Restart,
        Op::Leader { name: 0 },
        Op::Leader { name: 1 },
        Op::Describe { name: 0 },
        Op::List,
        Op::Lock {
            name: 0,
            owner: 1,
            ttl_ms: 1_000,
            durability: Persistent,
        },
        Op::LockAs {
            name: 0,
            owner: 1,
            claim: Permit { permits: 2 },
            ttl_ms: 1_000,
            durability: Persistent,
        },
        Op::Lock {
            name: 2,
            owner: 1,
            ttl_ms: 1_000,
            durability: Persistent,
        },
        campaign(2, 0, 1, Persistent),
        Op::Leader { name: 2 },
        // One byte over the value's limit.
        campaign(1, 0, model::values().len(), Persistent),
        Op::Advance { ms: 1_000 },
        Op::Leader { name: 0 },
        campaign(0, 1, 1, Persistent),
        Op::Restart,
        Op::Leader { name: 0 },
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let tally = runtime
        .block_on(model::run(&RedbFactory::on_tmpfs(), &ops))
        .unwrap();
    assert_eq!((tally.leaders, tally.proclaimed), (3, 1), "{tally}");
    assert_eq!(tally.leader_reads, 3, "{tally}");
    assert_eq!(tally.survived_restart, 2, "{tally}");
}

/// A hand-written lease restart sequence: a persistent lease and its locks
/// come back with the lease's refreshed expiry (past the expiry its locks
/// were written with), an ephemeral lease and its lock do not, and a revoke
/// after the restart stays revoked across the next one.
#[test]
fn a_fixed_lease_restart_sequence_matches_the_model() {
    use lockd_core::Durability::{Ephemeral, Persistent};
    let ops = vec![
        Op::LeaseGrant {
            ttl_ms: 1_000,
            durability: Persistent,
        },
        Op::LeaseLock { name: 0, lease: 0 },
        Op::LeaseLock { name: 1, lease: 0 },
        Op::LeaseGrant {
            ttl_ms: 2_000,
            durability: Ephemeral,
        },
        // Lease 0 is now the ephemeral one, 1 the persistent one.
        Op::LeaseLock { name: 2, lease: 0 },
        Op::Advance { ms: 500 },
        Op::LeaseRefresh { lease: 1 },
        Op::Advance { ms: 600 },
        Op::Restart,
        Op::List,
        Op::LeaseGet { lease: 1 },
        Op::LeaseGet { lease: 0 },
        Op::LeaseLock { name: 2, lease: 0 },
        Op::Lock {
            name: 2,
            owner: 0,
            ttl_ms: 1_000,
            durability: Persistent,
        },
        Op::LeaseRevoke { lease: 1 },
        Op::Restart,
        Op::List,
        Op::LeaseRefresh { lease: 1 },
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let tally = runtime
        .block_on(model::run(&RedbFactory::on_tmpfs(), &ops))
        .unwrap();
    assert_eq!(tally.lease_locks, 3, "{tally}");
    assert_eq!(tally.survived_restart, 3, "{tally}");
    assert_eq!(tally.leases_survived_restart, 1, "{tally}");
    assert_eq!(tally.lease_reads_live, 1, "{tally}");
    assert_eq!(tally.lease_revoked_locks, 2, "{tally}");
    assert_eq!(tally.lease_not_live, 2, "{tally}");
}

/// A hand-written restart sequence: a persistent lock comes back with its
/// token and expiry, an ephemeral one does not, an expired one stays gone,
/// and the next grant's token is above all of them.
#[test]
fn a_fixed_restart_sequence_matches_the_model() {
    use lockd_core::Durability::{Ephemeral, Persistent};
    use lockd_test_support::model::TokenArg;
    let ops = vec![
        Op::Lock {
            name: 0,
            owner: 0,
            ttl_ms: 1_000,
            durability: Persistent,
        },
        Op::Lock {
            name: 1,
            owner: 1,
            ttl_ms: 1_000,
            durability: Ephemeral,
        },
        Op::Lock {
            name: 2,
            owner: 2,
            ttl_ms: 10,
            durability: Persistent,
        },
        Op::Advance { ms: 10 },
        Op::Restart,
        Op::List,
        Op::Lock {
            name: 1,
            owner: 2,
            ttl_ms: 1_000,
            durability: Ephemeral,
        },
        Op::Restart,
        Op::Lock {
            name: 1,
            owner: 0,
            ttl_ms: 1_000,
            durability: Persistent,
        },
        Op::Unlock {
            name: 0,
            owner: 0,
            token: TokenArg::Current,
        },
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let tally = runtime
        .block_on(model::run(&RedbFactory::on_tmpfs(), &ops))
        .unwrap();
    assert_eq!(tally.fresh, 5, "{tally}");
    assert_eq!(tally.survived_restart, 2, "{tally}");
    assert_eq!(tally.unlocked, 1, "{tally}");
}

/// Negative control: a store that loses its file and its log in a crash (as
/// if nothing had been synced) must be caught — lost persistent locks, and tokens that
/// start again from the bottom.
#[test]
fn a_store_that_loses_its_file_is_caught() {
    struct LosesFile {
        redb: RedbFactory,
        opened: AtomicBool,
    }
    impl StoreFactory for LosesFile {
        fn open(&self, clock: ManualClock) -> BoxFuture<'_, Arc<dyn LockBackend>> {
            if self.opened.swap(true, Ordering::Relaxed) {
                std::fs::remove_file(self.redb.path()).unwrap();
                let _ = std::fs::remove_dir_all(lockd_redb::log_dir(self.redb.path()));
            }
            self.redb.open(clock)
        }
        fn keeps_persistent_locks(&self) -> bool {
            true
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let config = Config {
        cases: 2_000,
        failure_persistence: None,
        ..Config::default()
    };
    let result = TestRunner::new(config).run(&model::ops(true), |ops: Vec<Op>| {
        let store = LosesFile {
            redb: RedbFactory::on_tmpfs(),
            opened: AtomicBool::new(false),
        };
        runtime
            .block_on(model::run(&store, &ops))
            .map(drop)
            .map_err(TestCaseError::fail)
    });
    match result {
        Err(TestError::Fail(reason, minimal)) => {
            eprintln!("lost file caught; minimal sequence {minimal:?}:\n{reason}");
        }
        other => panic!("a lost store file was not caught: {other:?}"),
    }
}

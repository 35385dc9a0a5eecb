//! Behaviour of the redb store beyond the shared contract: group commit,
//! and refusing files it cannot trust.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use lockd_core::{Engine, EngineOptions, Limits, LockOptions, LockService, SystemClock};
use lockd_redb::{OpenError, RedbJournal};

/// Concurrent persistent operations share fsyncs: 200 callers, far fewer
/// commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_operations_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, recovered) = RedbJournal::open(dir.path().join("locks.redb")).unwrap();
    let stats = journal.stats();
    let engine = Engine::new(
        Arc::new(journal),
        recovered,
        Arc::new(SystemClock),
        EngineOptions::default(),
    );
    let service = LockService::new(engine, Limits::default());
    // Warm up: the first grant also reserves a block of tokens.
    service
        .lock("ns", "warm", "o", 10_000, LockOptions::default())
        .await
        .unwrap();
    let before = stats.commits.load(Ordering::Relaxed);
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let service = service.clone();
            tokio::spawn(async move {
                service
                    .lock("ns", &format!("n{i}"), "o", 10_000, LockOptions::default())
                    .await
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let commits = stats.commits.load(Ordering::Relaxed) - before;
    assert!(commits >= 1);
    assert!(
        commits <= 100,
        "200 grants took {commits} commits: no group commit"
    );
    assert_eq!(stats.failed_commits.load(Ordering::Relaxed), 0);
}

/// A file that is not a store is refused with its path named, and left as
/// it was.
#[tokio::test]
async fn garbage_file_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.redb");
    let garbage = vec![0x5au8; 64 * 1024];
    std::fs::write(&path, &garbage).unwrap();
    let err = lockd_redb::open(&path).unwrap_err();
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("move it aside"), "{message}");
    assert_eq!(std::fs::read(&path).unwrap(), garbage);
}

/// A store cut short (a torn copy, a full disk during a copy) is refused,
/// never silently reset.
#[tokio::test]
async fn truncated_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.redb");
    {
        let service = LockService::new(lockd_redb::open(&path).unwrap(), Limits::default());
        for i in 0..50 {
            service
                .lock("ns", &format!("n{i}"), "o", 60_000, LockOptions::default())
                .await
                .unwrap();
        }
    }
    let len = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len / 3).unwrap();
    drop(file);
    match lockd_redb::open(&path) {
        Err(e) => {
            eprintln!("truncated store refused: {e}");
            assert!(e.to_string().contains(&path.display().to_string()), "{e}")
        }
        Ok(engine) => {
            // If redb can repair it, every lock must still be there: a
            // repaired store that lost acknowledged locks would be a reset.
            let service = LockService::new(engine, Limits::default());
            for i in 0..50 {
                assert!(service.get("ns", &format!("n{i}")).await.unwrap().is_some());
            }
        }
    }
}

/// Two lockd processes on one file would break mutual exclusion; the second
/// open is refused with advice.
#[tokio::test]
async fn store_in_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.redb");
    let _first = lockd_redb::open(&path).unwrap();
    let err = lockd_redb::open(&path).unwrap_err();
    assert!(matches!(err, OpenError::InUse { .. }), "{err:?}");
    assert!(err.to_string().contains("in use"), "{err}");
}

//! Behaviour of the redb store beyond the shared contract: group commit,
//! and refusing files it cannot trust.

use lockd_core::Claim;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use lockd_core::{Engine, EngineOptions, Limits, LockOptions, LockService, SystemClock};
use lockd_redb::{OpenError, RedbJournal};

const EPHEMERAL: LockOptions = LockOptions {
    claim: Claim::Exclusive,
    lock_delay_ms: 0,
    wait_ms: 0,
    durability: lockd_core::Durability::Ephemeral,
    quota: None,
    refuse_relock: false,
};

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
    assert!(message.contains("aside"), "{message}");
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

/// A store file in the format before the log (redb's tables alone, no log
/// directory), written here with redb as that version wrote it, opens as it
/// is: its lock keeps owner and token, tokens resume above its reservation,
/// and after a clean close the file alone again holds everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_a_log_opens_as_it_is() {
    use redb::TableDefinition;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.redb");
    let expires_at_ms = a_minute_from_now_ms();
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut locks = txn
                .open_table(TableDefinition::<&[u8], &[u8]>::new("locks"))
                .unwrap();
            // `u16 BE namespace length | namespace | name` ->
            // `1 | u64 BE token | u64 BE expires_at_ms | owner`.
            let key = [&[0u8, 2][..], b"ns", b"held"].concat();
            let value = [
                &[1u8][..],
                &42u64.to_be_bytes(),
                &expires_at_ms.to_be_bytes(),
                b"old-holder",
            ]
            .concat();
            locks.insert(key.as_slice(), value.as_slice()).unwrap();
            let mut meta = txn
                .open_table(TableDefinition::<&str, u64>::new("meta"))
                .unwrap();
            meta.insert("tokens_reserved", 1_000).unwrap();
        }
        txn.commit().unwrap();
    }
    let log = lockd_redb::log_dir(&path);
    assert!(!log.exists());
    let mut last = 1_000;
    for _ in 0..2 {
        let service = reopen_when_closed(&path).await;
        let held = service.get("ns", "held").await.unwrap().unwrap();
        assert_eq!(
            (held.owner.as_str(), held.fencing_token),
            ("old-holder", 42)
        );
        let grant = service
            .lock("ns", "new", "o", 60_000, LockOptions::default())
            .await
            .unwrap();
        assert!(grant.fencing_token > last, "{}", grant.fencing_token);
        last = grant.fencing_token;
        service.unlock("ns", "new", "o", None).await.unwrap();
    }
    // Closed cleanly: the log is checkpointed and gone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::fs::read_dir(&log).unwrap().next().is_some() {
        assert!(std::time::Instant::now() < deadline, "the log was left");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
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

/// A store written before tokens followed the clock, whose names carry
/// tokens near 1.8e18 (written here through the journal, as that version
/// wrote them): opened now, its held lock keeps its exact token, and every
/// later grant, of those names and of new ones, is larger, at once (the
/// clock ceiling does not stall a counter resumed above it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_tokens_above_the_clock_keeps_rising() {
    use lockd_core::{Journal as _, JournalOp, Key, Record};

    const OLD: u64 = 1_795_627_369_420_013_901;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.redb");
    let expires_at_ms = a_minute_from_now_ms();
    {
        let (journal, _) = RedbJournal::open(&path).unwrap();
        let put = |name: &str, token: u64| {
            JournalOp::Put(
                Key::new("ns", name),
                Record {
                    claim: Claim::Exclusive,
                    owner: "old-holder".to_string(),
                    token,
                    expires_at_ms,
                },
            )
        };
        journal
            .submit(JournalOp::Batch(vec![
                JournalOp::ReserveTokens { up_to: OLD + 16 },
                put("acct", OLD),
                // A record above the reservation: its batch reached the disk
                // before the reservation covering it.
                put("ledger", OLD + 40),
            ]))
            .wait()
            .await
            .unwrap();
    }
    let service = LockService::new(lockd_redb::open(&path).unwrap(), Limits::default());
    let held = service.get("ns", "acct").await.unwrap().unwrap();
    assert_eq!(
        (held.owner.as_str(), held.fencing_token),
        ("old-holder", OLD)
    );
    service
        .unlock("ns", "acct", "old-holder", Some(OLD))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let again = service
        .lock("ns", "acct", "new-holder", 10_000, LockOptions::default())
        .await
        .unwrap();
    assert!(again.fencing_token > OLD + 40, "{}", again.fencing_token);
    let mut last = again.fencing_token;
    for i in 0..100 {
        let g = service
            .lock("ns", &format!("n{i}"), "o", 10_000, EPHEMERAL)
            .await
            .unwrap();
        assert!(g.fencing_token > last);
        last = g.fencing_token;
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "grants stalled: {:?}",
        started.elapsed()
    );
    // And across a restart.
    drop(service);
    let service = reopen_when_closed(&path).await;
    let after = service
        .lock("ns", "ledger-2", "o", 10_000, EPHEMERAL)
        .await
        .unwrap();
    assert!(after.fencing_token > last);
}

/// A fresh store issues small tokens, exact as doubles, and they stay small
/// across restarts (each one skips at most a reservation block, 2^20).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_store_issues_tokens_exact_as_doubles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.redb");
    let mut last = 0;
    for _ in 0..3 {
        let service = reopen_when_closed(&path).await;
        for durability in [EPHEMERAL, LockOptions::default()] {
            let g = service
                .lock("ns", "t", "o", 10_000, durability)
                .await
                .unwrap();
            assert!(g.fencing_token > last);
            last = g.fencing_token;
            service.unlock("ns", "t", "o", None).await.unwrap();
        }
    }
    assert!(last < 4 << 20, "{last}");
}

/// Opens the store once the previous handle has let go of the file.
async fn reopen_when_closed(path: &std::path::Path) -> LockService {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match lockd_redb::open(path) {
            Ok(engine) => return LockService::new(engine, Limits::default()),
            Err(OpenError::InUse { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            Err(e) => panic!("reopening {}: {e}", path.display()),
        }
    }
}

/// A lock record's expiry one minute from now, Unix epoch milliseconds.
fn a_minute_from_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 60_000
}

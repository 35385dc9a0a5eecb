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
                    value: None,
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

/// One holder of a name held shared or of a semaphore, as the journal
/// keeps it.
fn share(owner: &str, token: u64, claim: Claim, expires_at_ms: u64) -> lockd_core::Record {
    lockd_core::Record {
        value: None,
        claim,
        owner: owner.to_string(),
        token,
        expires_at_ms,
    }
}

/// Shares of two names (one held shared, one a semaphore), one of them
/// released, one expired: reopened, exactly the live holders come back,
/// each with its owner, token, expiry and claim; the expired one's record
/// is deleted, and tokens resume above it all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_are_recovered_live_and_expired_ones_dropped() {
    use lockd_core::{Journal as _, JournalOp, Key};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.redb");
    let ahead = a_minute_from_now_ms();
    let past = ahead - 120_000;
    let permit = Claim::Permit { permits: 3 };
    let key = |name: &str| Key::new("ns", name);
    {
        let (journal, recovered) = RedbJournal::open(&path).unwrap();
        assert!(recovered.shares.is_empty());
        let ops = [
            JournalOp::PutShare(key("read"), share("r1", 10, Claim::Shared, ahead)),
            JournalOp::PutShare(key("read"), share("r2", 11, Claim::Shared, ahead)),
            JournalOp::PutShare(key("sem"), share("p1", 12, permit, ahead + 1)),
            JournalOp::Batch(vec![
                JournalOp::PutShare(key("sem"), share("p2", 13, permit, ahead + 2)),
                JournalOp::DeleteShare(key("read"), "r2".to_string()),
            ]),
            JournalOp::PutShare(key("sem"), share("gone", 99, permit, past)),
        ];
        for op in ops {
            journal.submit(op).wait().await.unwrap();
        }
    }
    let (journal, recovered) = open_journal_when_closed(&path).await;
    let mut shares = recovered.shares.clone();
    shares.sort_by_key(|(_, record)| record.token);
    assert_eq!(
        shares,
        [
            (key("read"), share("r1", 10, Claim::Shared, ahead)),
            (key("sem"), share("p1", 12, permit, ahead + 1)),
            (key("sem"), share("p2", 13, permit, ahead + 2)),
        ]
    );
    assert!(recovered.locks.is_empty());
    assert!(recovered.next_token > 99, "{}", recovered.next_token);
    drop(journal);
    // The expired holder's record was deleted, the others kept.
    assert_eq!(share_rows(&path).await, 3);
}

/// The engine's clock decides what expired, as for locks: a share live by
/// the wall clock but past on the engine's clock is deleted at open, and
/// the engine's tokens resume above every share's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_expire_by_the_engines_clock() {
    use lockd_core::{Journal as _, JournalOp, Key, ManualClock};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.redb");
    let ahead = a_minute_from_now_ms();
    {
        let (journal, _) = RedbJournal::open(&path).unwrap();
        for (owner, token, expires) in [("soon", 500, ahead), ("later", 7, ahead + 60_000)] {
            let op = JournalOp::PutShare(
                Key::new("ns", "read"),
                share(owner, token, Claim::Shared, expires),
            );
            journal.submit(op).wait().await.unwrap();
        }
    }
    // The engine's clock stands past "soon"'s expiry, before "later"'s.
    let clock = ManualClock::new(ahead + 1);
    let engine = loop {
        match lockd_redb::open_with(&path, Arc::new(clock.clone()), EngineOptions::default()) {
            Ok(engine) => break engine,
            Err(OpenError::InUse { .. }) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await
            }
            Err(e) => panic!("{e}"),
        }
    };
    let service = LockService::new(engine, Limits::default());
    let grant = service
        .lock("ns", "other", "o", 10_000, LockOptions::default())
        .await
        .unwrap();
    assert!(grant.fencing_token > 500, "{}", grant.fencing_token);
    drop(service);
    assert_eq!(share_rows(&path).await, 1);
    let (_, recovered) = open_journal_when_closed(&path).await;
    let owners: Vec<_> = recovered
        .shares
        .iter()
        .map(|(_, r)| r.owner.as_str())
        .collect();
    assert_eq!(owners, ["later"]);
}

/// A share record whose claim this lockd does not know (written by a later
/// version, or damaged) is refused at open with the file and the claim
/// named, and the record kept.
#[tokio::test]
async fn a_share_of_an_unknown_claim_is_refused() {
    use redb::TableDefinition;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.redb");
    drop(RedbJournal::open(&path).unwrap());
    {
        let db = open_db_when_closed(&path).await;
        let txn = db.begin_write().unwrap();
        {
            let mut shares = txn
                .open_table(TableDefinition::<&[u8], &[u8]>::new("shares"))
                .unwrap();
            // `u16 BE namespace length | namespace | u32 BE name length |
            // name | owner` -> `1 | u64 BE token | u64 BE expires_at_ms |
            // claim`, the claim 9.
            let key = [&[0u8, 2][..], b"ns", &[0, 0, 0, 4], b"read", b"owner"].concat();
            let value = [
                &[1u8][..],
                &7u64.to_be_bytes(),
                &a_minute_from_now_ms().to_be_bytes(),
                &[9],
            ]
            .concat();
            shares.insert(key.as_slice(), value.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let err = lockd_redb::open(&path).unwrap_err();
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("claim is 9"), "{message}");
    let err = RedbJournal::open(&path).unwrap_err();
    assert!(err.to_string().contains("claim is 9"), "{err}");
    assert_eq!(share_rows(&path).await, 1);
}

/// A record whose claim its table cannot keep (an exclusive share, a lock
/// record held shared) is refused before it is written: its ticket fails
/// and nothing of it is recovered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_the_wrong_claim_is_refused_not_stored() {
    use lockd_core::{Journal as _, JournalOp, Key};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.redb");
    let ahead = a_minute_from_now_ms();
    {
        let (journal, _) = RedbJournal::open(&path).unwrap();
        let exclusive_share =
            JournalOp::PutShare(Key::new("ns", "a"), share("o", 1, Claim::Exclusive, ahead));
        let shared_lock = JournalOp::Batch(vec![JournalOp::Put(
            Key::new("ns", "b"),
            share("o", 2, Claim::Shared, ahead),
        )]);
        for op in [exclusive_share, shared_lock] {
            let err = journal.submit(op).wait().await.unwrap_err();
            assert!(err.to_string().contains("cannot keep"), "{err}");
        }
        journal
            .submit(JournalOp::PutShare(
                Key::new("ns", "c"),
                share("o", 3, Claim::Shared, ahead),
            ))
            .wait()
            .await
            .unwrap();
    }
    let (_, recovered) = open_journal_when_closed(&path).await;
    assert!(recovered.locks.is_empty());
    let names: Vec<_> = recovered.shares.iter().map(|(k, _)| &*k.name).collect();
    assert_eq!(names, ["c"]);
}

/// Opens the journal once the previous handle has let go of the file.
async fn open_journal_when_closed(path: &std::path::Path) -> (RedbJournal, lockd_core::Recovered) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match RedbJournal::open(path) {
            Ok(opened) => return opened,
            Err(OpenError::InUse { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            Err(e) => panic!("reopening {}: {e}", path.display()),
        }
    }
}

/// The store file opened with redb itself, once lockd has let go of it.
async fn open_db_when_closed(path: &std::path::Path) -> redb::Database {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match redb::Database::create(path) {
            Ok(db) => return db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen)
                if std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            Err(e) => panic!("opening {}: {e}", path.display()),
        }
    }
}

/// How many rows the `shares` table holds (the store closed cleanly: its
/// log is checkpointed).
async fn share_rows(path: &std::path::Path) -> u64 {
    use redb::{ReadableDatabase as _, ReadableTableMetadata as _, TableDefinition};

    let db = open_db_when_closed(path).await;
    let txn = db.begin_read().unwrap();
    let table = txn
        .open_table(TableDefinition::<&[u8], &[u8]>::new("shares"))
        .unwrap();
    table.len().unwrap()
}

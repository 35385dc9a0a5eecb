//! Format 1: the store as lockd wrote it before stores carried a format
//! version. `tests/fixtures/format-v1/locks.redb` was written by
//! `examples/write_format_fixture.rs` with the code of that time, and is
//! committed as it came out; every later lockd must open it with every lock
//! intact.

use std::time::Duration;

use lockd_core::{Claim, Durability, Limits, LockOptions, LockService};

/// 2200-01-01T00:00:00Z, Unix epoch milliseconds: the fixture's clock, so
/// that its expiries (an hour later) are still ahead when it is opened.
const YEAR_2200_MS: u64 = 7_258_118_400_000;
const HOUR_MS: u64 = 3_600_000;

/// The lease id the fixture's lease got (ids are random).
const FIXTURE_LEASE: &str = "lease-2aaecc486fc77475b197a35eff1e5da9";
/// Every expiry in the fixture: its clock's now plus an hour.
const FIXTURE_EXPIRY_MS: u64 = YEAR_2200_MS + HOUR_MS;

/// A copy of the fixture in a fresh directory (opening a store writes to
/// it: the committed file is never opened in place).
fn fixture_copy() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.redb");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/format-v1/locks.redb");
    std::fs::copy(fixture, &path).unwrap();
    (dir, path)
}

/// A store of format 1 opens with every lock as it was written: each
/// holder's owner, token, expiry, claim and durability, the leader's value,
/// the lease and its locks; and the next grant's token is above them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_format_v1_fixture_opens_with_every_lock() {
    let (_dir, path) = fixture_copy();
    let service = LockService::new(lockd_redb::open(&path).unwrap(), Limits::default());
    check_fixture_state(&service).await;
    let grant = service
        .lock("app", "new", "o", 10_000, LockOptions::default())
        .await
        .unwrap();
    assert!(grant.fencing_token > 9, "{}", grant.fencing_token);
    // Opening upgraded the file in place: it records format 1 now, and
    // nothing else changed (it opens as it did, again).
    drop(service);
    assert_eq!(format_version(&path).await, Some(1));
    let service = reopen(&path).await;
    check_fixture_state(&service).await;
}

/// A store of a newer format is refused before anything is written,
/// naming both versions; so is a log segment of a newer format.
#[tokio::test]
async fn a_newer_format_is_refused_untouched() {
    let (_dir, path) = fixture_copy();
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert("format_version", 3)
            .unwrap();
        txn.commit().unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = lockd_redb::open(&path).unwrap_err();
    assert!(
        matches!(
            err,
            lockd_redb::OpenError::NewerFormat {
                found: 3,
                supported: 1,
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "{}: it has format version 3; this lockd reads up to 1",
            path.display()
        )),
        "{message}"
    );
    assert!(lockd_redb::RedbJournal::open(&path).is_err());
    assert!(std::fs::read(&path).unwrap() == before, "the file changed");
}

const META: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");

/// The `format_version` the store file records, once lockd let go of it.
async fn format_version(path: &std::path::Path) -> Option<u64> {
    use redb::ReadableDatabase as _;

    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let db = loop {
        match redb::Database::open(path) {
            Ok(db) => break db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen)
                if std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            Err(e) => panic!("{e}"),
        }
    };
    let txn = db.begin_read().unwrap();
    let meta = txn.open_table(META).unwrap();
    let version = meta.get("format_version").unwrap().map(|v| v.value());
    version
}

/// Opens the store once the previous handle has let go of the file.
async fn reopen(path: &std::path::Path) -> LockService {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match lockd_redb::open(path) {
            Ok(engine) => return LockService::new(engine, Limits::default()),
            Err(lockd_redb::OpenError::InUse { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("reopening {}: {e}", path.display()),
        }
    }
}

/// Checks every holder the fixture holds, through `service`.
async fn check_fixture_state(service: &LockService) {
    let exclusive = |owner: &str, token| (owner.to_string(), token, Claim::Exclusive);
    for (name, owner, token) in [("orders", "worker-1", 1), ("ledger", "worker-2", 2)] {
        let info = service.get("app", name).await.unwrap().unwrap();
        assert_eq!(
            (
                info.owner,
                info.fencing_token,
                info.expires_at_ms,
                info.durability
            ),
            (
                owner.to_string(),
                token,
                FIXTURE_EXPIRY_MS,
                Durability::Persistent
            ),
            "app/{name}"
        );
        let holders = holders(service, "app", name).await;
        assert_eq!(holders, [exclusive(owner, token)], "app/{name}");
    }
    let shared = |owner: &str, token| (owner.to_string(), token, Claim::Shared);
    assert_eq!(
        holders(service, "app", "config").await,
        [shared("reader-a", 3), shared("reader-b", 4)]
    );
    let permit = |owner: &str, token| (owner.to_string(), token, Claim::Permit { permits: 3 });
    assert_eq!(
        holders(service, "app", "pool").await,
        [permit("slot-1", 5), permit("slot-2", 6)]
    );
    let leader = service.leader("app", "primary").await.unwrap().unwrap();
    assert_eq!(
        (
            leader.info.owner.as_str(),
            leader.info.fencing_token,
            leader.info.expires_at_ms,
            leader.value.as_str()
        ),
        ("node-a", 7, FIXTURE_EXPIRY_MS, "10.0.0.7:8080")
    );
    let lease = service
        .get_lease("jobs", FIXTURE_LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            lease.ttl_ms,
            lease.expires_at_ms,
            lease.durability,
            lease.locks
        ),
        (
            HOUR_MS,
            FIXTURE_EXPIRY_MS,
            Durability::Persistent,
            vec!["batch-1".to_string(), "batch-2".to_string()]
        )
    );
    for (name, token) in [("batch-1", 8), ("batch-2", 9)] {
        let info = service.get("jobs", name).await.unwrap().unwrap();
        assert_eq!(
            (info.owner.as_str(), info.fencing_token, info.expires_at_ms),
            (FIXTURE_LEASE, token, FIXTURE_EXPIRY_MS),
            "jobs/{name}"
        );
    }
}

/// The holders of a name: owner, token and claim, by token; every one
/// expiring when the fixture's locks do.
async fn holders(service: &LockService, namespace: &str, name: &str) -> Vec<(String, u64, Claim)> {
    let state = service.describe(namespace, name).await.unwrap();
    let mut holders: Vec<_> = state
        .holders
        .into_iter()
        .inspect(|h| {
            assert_eq!(
                h.info.expires_at_ms, FIXTURE_EXPIRY_MS,
                "{namespace}/{name}"
            );
            assert_eq!(
                h.info.durability,
                Durability::Persistent,
                "{namespace}/{name}"
            );
        })
        .map(|h| (h.info.owner, h.info.fencing_token, h.claim))
        .collect();
    holders.sort_by_key(|h| h.1);
    holders
}

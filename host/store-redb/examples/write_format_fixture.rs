//! Writes a store like the committed format-1 fixture
//! (`tests/fixtures/format-v1/`): `LOCKD_WRITE_FIXTURE=<dir> cargo run -p
//! lockd-redb --example write_format_fixture`. The committed file was written
//! by this program before stores carried a format version; today's build
//! writes the same records plus the version marker.

use std::sync::Arc;
use std::time::Duration;

use lockd_core::{Claim, Durability, EngineOptions, Limits, LockOptions, LockService, ManualClock};

/// 2200-01-01T00:00:00Z, Unix epoch milliseconds: the fixture's clock, so
/// that its expiries (an hour later) are still ahead when it is opened.
const YEAR_2200_MS: u64 = 7_258_118_400_000;
const HOUR_MS: u64 = 3_600_000;

/// Writes the fixture into `$LOCKD_WRITE_FIXTURE/locks.redb`: persistent
/// exclusive locks, a name held shared by two readers, two permits of a
/// semaphore, an election's leader with its value, and a lease holding two
/// locks, all granted on a clock set to the year 2200, then a clean close.
/// Lock-delays are not persisted by any store, so there is none to write.
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let out = std::path::PathBuf::from(
        std::env::var("LOCKD_WRITE_FIXTURE").expect("LOCKD_WRITE_FIXTURE names the output dir"),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.redb");
    let clock = ManualClock::new(YEAR_2200_MS);
    let engine = lockd_redb::open_with(&path, Arc::new(clock), EngineOptions::default()).unwrap();
    let service = LockService::new(engine, Limits::default());
    let persistent = LockOptions::default();
    let with = |claim| LockOptions {
        claim,
        ..persistent
    };
    let mut lines = Vec::new();
    for (name, owner, options) in [
        ("orders", "worker-1", persistent),
        ("ledger", "worker-2", persistent),
        ("config", "reader-a", with(Claim::Shared)),
        ("config", "reader-b", with(Claim::Shared)),
        ("pool", "slot-1", with(Claim::Permit { permits: 3 })),
        ("pool", "slot-2", with(Claim::Permit { permits: 3 })),
    ] {
        let grant = service
            .lock("app", name, owner, HOUR_MS, options)
            .await
            .unwrap();
        lines.push(format!(
            "lock app/{name} {owner} {:?} token={} expires={}",
            options.claim, grant.fencing_token, grant.expires_at_ms
        ));
    }
    let leader = service
        .campaign(
            "app",
            "primary",
            "node-a",
            "10.0.0.7:8080",
            HOUR_MS,
            persistent,
        )
        .await
        .unwrap();
    lines.push(format!(
        "leader app/primary node-a token={} expires={}",
        leader.fencing_token, leader.expires_at_ms
    ));
    let lease = service
        .grant_lease("jobs", HOUR_MS, Durability::Persistent)
        .await
        .unwrap();
    lines.push(format!(
        "lease jobs/{} expires={}",
        lease.id, lease.expires_at_ms
    ));
    for name in ["batch-1", "batch-2"] {
        let grant = service
            .lock_in_lease("jobs", name, &lease.id, 0)
            .await
            .unwrap();
        lines.push(format!(
            "lock jobs/{name} {} token={} expires={}",
            lease.id, grant.fencing_token, grant.expires_at_ms
        ));
    }
    drop(service);
    // A clean close: once the file is free again, the log is checkpointed
    // and empty, and the store file alone holds everything.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match lockd_redb::RedbJournal::open(&path) {
            Ok(journal) => {
                drop(journal);
                break;
            }
            Err(lockd_redb::OpenError::InUse { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let wal = lockd_redb::log_dir(&path);
    assert!(std::fs::read_dir(&wal).unwrap().next().is_none());
    std::fs::create_dir_all(&out).unwrap();
    std::fs::copy(&path, out.join("locks.redb")).unwrap();
    for line in lines {
        println!("{line}");
    }
}

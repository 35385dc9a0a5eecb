//! Snapshots of a serving store and restores from them: every record comes
//! back, a damaged snapshot or a non-empty target is refused leaving
//! nothing behind, and no fencing token ever goes backwards, with negative
//! controls showing that a restore which did not raise the token floor
//! would hand out tokens already granted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lockd_core::{Claim, Durability, EngineOptions, Limits, LockOptions, LockService, ManualClock};
use lockd_redb::snapshot::{self, RestoreError, RestoreOptions};
use lockd_redb::{OpenError, Store};

const EPHEMERAL: LockOptions = LockOptions {
    claim: Claim::Exclusive,
    lock_delay_ms: 0,
    wait_ms: 0,
    durability: Durability::Ephemeral,
    quota: None,
    refuse_relock: false,
};
const MINUTE_MS: u64 = 60_000;

/// A fresh directory, on tmpfs when there is one.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .unwrap()
}

/// Opens the store once any previous handle has let go of the file.
async fn open(path: &Path, options: EngineOptions) -> Store {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match Store::open_with(path, Arc::new(lockd_core::SystemClock), options.clone()) {
            Ok(store) => return store,
            Err(OpenError::InUse { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("opening {}: {e}", path.display()),
        }
    }
}

/// Waits until no handle has the store open (an engine lets go of it once
/// its tasks end), opening and closing its journal alone.
async fn wait_closed(path: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match lockd_redb::RedbJournal::open(path) {
            Ok((journal, _)) => return drop(journal),
            Err(OpenError::InUse { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("opening {}: {e}", path.display()),
        }
    }
}

fn service(store: &Store) -> LockService {
    LockService::new(store.engine().clone(), Limits::default())
}

/// Saves a snapshot of `store` into `file`, off the executor.
async fn save(store: &Store, file: &Path) -> snapshot::SnapshotReport {
    let (store, file) = (store.clone(), file.to_path_buf());
    tokio::task::spawn_blocking(move || snapshot::save_to(&store, &file))
        .await
        .unwrap()
        .unwrap()
}

fn wall_clock_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// Every holder of a name: owner, token, claim and expiry, by token.
async fn holders(service: &LockService, ns: &str, name: &str) -> Vec<(String, u64, Claim, u64)> {
    let mut holders: Vec<_> = service
        .describe(ns, name)
        .await
        .unwrap()
        .holders
        .into_iter()
        .map(|h| {
            (
                h.info.owner,
                h.info.fencing_token,
                h.claim,
                h.info.expires_at_ms,
            )
        })
        .collect();
    holders.sort_by_key(|h| h.1);
    holders
}

/// Locks of every kind in `service`: two exclusive, one held shared twice,
/// a semaphore's two permits, an election's leader with its value, and a
/// lease holding two locks. Returns the lease's id.
async fn hold_one_of_each(service: &LockService) -> String {
    let with = |claim| LockOptions {
        claim,
        ..LockOptions::default()
    };
    for (name, owner, options) in [
        ("orders", "worker-1", LockOptions::default()),
        ("ledger", "worker-2", LockOptions::default()),
        ("config", "reader-a", with(Claim::Shared)),
        ("config", "reader-b", with(Claim::Shared)),
        ("pool", "slot-1", with(Claim::Permit { permits: 3 })),
        ("pool", "slot-2", with(Claim::Permit { permits: 3 })),
    ] {
        service
            .lock("app", name, owner, 10 * MINUTE_MS, options)
            .await
            .unwrap();
    }
    service
        .campaign(
            "app",
            "primary",
            "node-a",
            "10.0.0.7:8080",
            10 * MINUTE_MS,
            LockOptions::default(),
        )
        .await
        .unwrap();
    let lease = service
        .grant_lease("jobs", 10 * MINUTE_MS, Durability::Persistent)
        .await
        .unwrap();
    for name in ["batch-1", "batch-2"] {
        service
            .lock_in_lease("jobs", name, &lease.id, 0)
            .await
            .unwrap();
    }
    lease.id
}

/// Everything [`hold_one_of_each`] holds, as `service` shows it.
async fn state(service: &LockService, lease: &str) -> String {
    let mut out = String::new();
    for (ns, name) in [
        ("app", "orders"),
        ("app", "ledger"),
        ("app", "config"),
        ("app", "pool"),
        ("app", "primary"),
        ("jobs", "batch-1"),
        ("jobs", "batch-2"),
    ] {
        out += &format!("{ns}/{name}: {:?}\n", holders(service, ns, name).await);
    }
    let leader = service.leader("app", "primary").await.unwrap().unwrap();
    out += &format!("leader: {} {}\n", leader.info.owner, leader.value);
    let lease = service.get_lease("jobs", lease).await.unwrap().unwrap();
    out += &format!(
        "lease: {} {} {:?}\n",
        lease.ttl_ms, lease.expires_at_ms, lease.locks
    );
    out
}

/// A snapshot of a serving store restores every record as it was: owners,
/// tokens, expiries, claims, the leader's value, the lease and its locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_restores_every_record() {
    let dir = scratch();
    let live = open(&dir.path().join("live.redb"), EngineOptions::default()).await;
    let lease = hold_one_of_each(&service(&live)).await;
    let before = state(&service(&live), &lease).await;
    let file = dir.path().join("snap.lockd");
    let saved = save(&live, &file).await;
    assert_eq!(
        (saved.locks, saved.shares, saved.leases),
        (4, 5, 1),
        "{saved}"
    );
    drop(live);
    let verified = snapshot::verify(&file).unwrap();
    assert_eq!(
        (verified.locks, verified.shares, verified.leases),
        (4, 5, 1)
    );
    assert_eq!(verified.highest_token, saved.highest_token);
    let target = dir.path().join("restored/locks.redb");
    let restored = snapshot::restore(&file, &target, RestoreOptions::default()).unwrap();
    assert_eq!(restored.store.as_deref(), Some(target.as_path()));
    eprintln!("{saved}\n{restored}");
    let store = open(&target, EngineOptions::default()).await;
    assert_eq!(state(&service(&store), &lease).await, before);
    let check = lockd_redb::check(dir.path().join("live.redb")).unwrap();
    assert!(check.is_intact(), "{check}");
}

/// While lock calls go on, a snapshot holds every grant acknowledged before
/// it was called, each with its owner and token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_under_traffic_holds_everything_acknowledged_before_it() {
    let dir = scratch();
    let live = open(&dir.path().join("live.redb"), EngineOptions::default()).await;
    let granted = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let (service, granted, stop) = (service(&live), granted.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let name = format!("w{w}-{i}");
                    let grant = service
                        .lock("ns", &name, "o", 10 * MINUTE_MS, LockOptions::default())
                        .await
                        .unwrap();
                    granted.lock().unwrap().push((name, grant.fencing_token));
                    i += 1;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let acknowledged = granted.lock().unwrap().clone();
    let file = dir.path().join("snap.lockd");
    let saved = save(&live, &file).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    assert!(acknowledged.len() > 50, "{}", acknowledged.len());
    assert!(saved.locks >= acknowledged.len() as u64, "{saved}");
    drop(live);
    let target = dir.path().join("restored.redb");
    snapshot::restore(&file, &target, RestoreOptions::default()).unwrap();
    let restored = service(&open(&target, EngineOptions::default()).await);
    for (name, token) in &acknowledged {
        let info = restored.get("ns", name).await.unwrap();
        assert_eq!(info.map(|i| i.fencing_token), Some(*token), "{name}");
    }
}

/// A store whose tokens run above the wall clock, as every store does
/// after a restore: an empty store's snapshot restored into `path`.
async fn a_store_above_the_clock(dir: &Path, path: &Path) {
    let seed = dir.join("seed.redb");
    let file = dir.join("seed.lockd");
    save(&open(&seed, EngineOptions::default()).await, &file).await;
    let report = snapshot::restore(&file, path, RestoreOptions::default()).unwrap();
    assert!(
        report.token_floor > wall_clock_us() + 3_000_000_000,
        "{report}"
    );
}

/// The lowest token a store's next grant gets.
async fn next_grant(path: &Path) -> u64 {
    let store = open(path, EngineOptions::default()).await;
    service(&store)
        .lock(
            "ns",
            "after-restore",
            "o",
            MINUTE_MS,
            LockOptions::default(),
        )
        .await
        .unwrap()
        .fencing_token
}

/// Restores `file` into `path` the naive way, for the negative controls:
/// the records restored, but the token floor left at the snapshot's
/// reservation (never a user option: the test writes it itself).
fn restore_naively(file: &Path, path: &Path, reserved: u64) {
    snapshot::restore(file, path, RestoreOptions::default()).unwrap();
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(redb::TableDefinition::<&str, u64>::new("meta"))
        .unwrap()
        .insert("tokens_reserved", reserved)
        .unwrap();
    txn.commit().unwrap();
}

/// A snapshot, then thousands of grants on the live store (its tokens
/// above the wall clock, its reservation block small): restored, on a clock
/// in step and on one half an hour behind, the next grant is above every
/// token the live store granted. Restored naively, it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_resumes_above_every_token_granted_after_the_snapshot() {
    let dir = scratch();
    let live_path = dir.path().join("live.redb");
    a_store_above_the_clock(dir.path(), &live_path).await;
    let small_blocks = EngineOptions {
        token_block: 16,
        ..EngineOptions::default()
    };
    let live = open(&live_path, small_blocks).await;
    let lock_service = service(&live);
    for i in 0..20 {
        lock_service
            .lock(
                "ns",
                &format!("held-{i}"),
                "o",
                10 * MINUTE_MS,
                LockOptions::default(),
            )
            .await
            .unwrap();
    }
    let file = dir.path().join("snap.lockd");
    let saved = save(&live, &file).await;
    let mut max_seen = 0;
    for i in 0..3_000 {
        let grant = lock_service
            .lock("ns", &format!("after-{i}"), "o", MINUTE_MS, EPHEMERAL)
            .await
            .unwrap();
        max_seen = max_seen.max(grant.fencing_token);
    }
    assert!(max_seen > saved.tokens_reserved, "{max_seen} {saved}");
    assert!(
        max_seen > wall_clock_us(),
        "tokens below the clock: {max_seen}"
    );
    drop((lock_service, live));
    let behind = ManualClock::new(wall_clock_us() / 1_000 - 30 * MINUTE_MS);
    for (name, options) in [
        ("in-step.redb", RestoreOptions::default()),
        (
            "behind.redb",
            RestoreOptions::default().with_clock(Arc::new(behind)),
        ),
    ] {
        let path = dir.path().join(name);
        let report = snapshot::restore(&file, &path, options).unwrap();
        let token = next_grant(&path).await;
        assert!(token > max_seen, "{name}: {token} <= {max_seen}\n{report}");
    }
    let naive = dir.path().join("naive.redb");
    restore_naively(&file, &naive, saved.tokens_reserved);
    let token = next_grant(&naive).await;
    assert!(
        token <= max_seen,
        "the negative control did not go back: {token}"
    );
}

/// The old store restarted three times after the snapshot, each restart
/// skipping a reservation block (here 2^26): the default skew allowance
/// covers it; a restore without any allowance goes backwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_of_the_old_store_are_covered_by_the_skew_allowance() {
    let dir = scratch();
    let live_path = dir.path().join("live.redb");
    a_store_above_the_clock(dir.path(), &live_path).await;
    let big_blocks = EngineOptions {
        token_block: 1 << 26,
        ..EngineOptions::default()
    };
    let live = open(&live_path, big_blocks.clone()).await;
    service(&live)
        .lock("ns", "held", "o", 10 * MINUTE_MS, LockOptions::default())
        .await
        .unwrap();
    let file = dir.path().join("snap.lockd");
    let saved = save(&live, &file).await;
    drop(live);
    let mut max_seen = 0;
    for _ in 0..3 {
        let live = open(&live_path, big_blocks.clone()).await;
        let grant = service(&live)
            .lock("ns", "restart", "o", MINUTE_MS, EPHEMERAL)
            .await
            .unwrap();
        max_seen = max_seen.max(grant.fencing_token);
    }
    assert!(
        max_seen > saved.token_ceiling + (1 << 27),
        "{max_seen} {saved}"
    );
    let restored = dir.path().join("restored.redb");
    snapshot::restore(&file, &restored, RestoreOptions::default()).unwrap();
    assert!(next_grant(&restored).await > max_seen);
    let without = dir.path().join("without.redb");
    let options = RestoreOptions::default().with_skew_allowance(Duration::ZERO);
    snapshot::restore(&file, &without, options).unwrap();
    let token = next_grant(&without).await;
    assert!(
        token <= max_seen,
        "the negative control did not go back: {token}"
    );
}

/// Every file under `dir`, for checking that a refused restore left
/// nothing behind.
fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            all.extend(listing(&path));
        }
        all.push(path);
    }
    all.sort();
    all
}

/// A damaged, cut-short, foreign, empty or newer snapshot is refused with
/// what is wrong named, and no target is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_snapshot_is_refused_and_nothing_is_written() {
    let scratch = scratch();
    let live = open(&scratch.path().join("live.redb"), EngineOptions::default()).await;
    hold_one_of_each(&service(&live)).await;
    let good = scratch.path().join("good.lockd");
    save(&live, &good).await;
    let bytes = std::fs::read(&good).unwrap();
    let dir = scratch.path().join("cases");
    std::fs::create_dir(&dir).unwrap();
    let dir = dir.as_path();
    let mut cases: Vec<(String, Vec<u8>, &str)> = vec![
        (
            "empty".into(),
            Vec::new(),
            "is not a lockd snapshot: it is empty",
        ),
        (
            "foreign".into(),
            b"SQLite format 3\0 and more".to_vec(),
            "another program's file",
        ),
    ];
    let mut newer = bytes.clone();
    newer[16] = 3;
    cases.push((
        "newer".into(),
        newer,
        "has format version 3; this lockd reads up to 1",
    ));
    for cut in [1, 20, 52, 60, bytes.len() / 2, bytes.len() - 1] {
        cases.push((format!("cut-{cut}"), bytes[..cut].to_vec(), "cut short"));
    }
    for at in [30, 60, bytes.len() / 2, bytes.len() - 10] {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x08;
        cases.push((format!("flip-{at}"), flipped, "is damaged"));
    }
    let mut longer = bytes.clone();
    longer.push(0);
    cases.push(("trailing".into(), longer, "bytes follow its end"));
    let before = listing(dir);
    for (name, content, expected) in cases {
        let file = dir.join(format!("{name}.lockd"));
        std::fs::write(&file, &content).unwrap();
        let target = dir.join(format!("{name}.redb"));
        let err = snapshot::restore(&file, &target, RestoreOptions::default()).unwrap_err();
        let message = err.to_string();
        assert!(message.contains(expected), "{name}: {message}");
        assert!(
            message.contains(&file.display().to_string()),
            "{name}: {message}"
        );
        assert!(snapshot::verify(&file).is_err(), "{name}");
        std::fs::remove_file(&file).unwrap();
        assert_eq!(listing(dir), before, "{name} left files behind");
    }
    let err = snapshot::restore(dir, dir.join("x.redb"), RestoreOptions::default()).unwrap_err();
    assert!(matches!(err, RestoreError::NotASnapshot { .. }), "{err}");
}

/// A target store with a record, a non-empty log directory, or a store in
/// use is refused and left as it was; an empty store is restored over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_is_not_empty_is_refused_untouched() {
    let dir = scratch();
    let file = dir.path().join("snap.lockd");
    {
        let live = open(&dir.path().join("live.redb"), EngineOptions::default()).await;
        hold_one_of_each(&service(&live)).await;
        save(&live, &file).await;
    }
    let restore = |target: &Path| snapshot::restore(&file, target, RestoreOptions::default());

    // A store holding a lock, closed.
    let held = dir.path().join("held.redb");
    {
        let store = open(&held, EngineOptions::default()).await;
        service(&store)
            .lock("ns", "mine", "o", MINUTE_MS, LockOptions::default())
            .await
            .unwrap();
    }
    wait_closed(&held).await;
    let before = std::fs::read(&held).unwrap();
    let err = restore(&held).unwrap_err();
    assert!(matches!(err, RestoreError::TargetNotEmpty { .. }), "{err}");
    assert!(err.to_string().contains("1 lock records"), "{err}");
    assert!(std::fs::read(&held).unwrap() == before);

    // A store in use.
    let in_use = dir.path().join("in-use.redb");
    let serving = open(&in_use, EngineOptions::default()).await;
    let err = restore(&in_use).unwrap_err();
    assert!(matches!(err, RestoreError::TargetInUse { .. }), "{err}");
    drop(serving);

    // A log directory with a segment in it.
    let logged = dir.path().join("logged.redb");
    std::fs::create_dir_all(lockd_redb::log_dir(&logged)).unwrap();
    std::fs::write(
        lockd_redb::log_dir(&logged).join("0000000000000001.seg"),
        b"x",
    )
    .unwrap();
    let err = restore(&logged).unwrap_err();
    assert!(
        err.to_string().contains("log directory holds 1 files"),
        "{err}"
    );
    assert!(!logged.exists());

    // An empty store (opened once, nothing granted) is restored over.
    let empty = dir.path().join("empty.redb");
    drop(open(&empty, EngineOptions::default()).await);
    wait_closed(&empty).await;
    let report = restore(&empty).unwrap();
    assert_eq!(report.locks, 4);
}

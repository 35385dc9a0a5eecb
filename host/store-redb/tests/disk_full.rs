//! A full disk under the store (a real tmpfs filled to the brim): persistent
//! operations and reads answer `unavailable`, nothing acknowledged is lost,
//! ephemeral locks keep working, and the store recovers by itself when space
//! returns.
//!
//! Mounting a tmpfs needs root, which is how CI and the development machines
//! of this project run.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use lockd_core::{
    Durability, Engine, EngineOptions, Limits, LockError, LockOptions, LockService, SystemClock,
};
use lockd_redb::RedbJournal;

/// A small tmpfs, unmounted on drop.
struct Tmpfs {
    _dir: tempfile::TempDir,
    mount: PathBuf,
}

impl Tmpfs {
    fn new(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mount)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "mounting a tmpfs failed (this test needs root)"
        );
        Tmpfs { _dir: dir, mount }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

/// Writes until the file system says it is full.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 64 << 10];
    loop {
        if f.write_all(&chunk).and_then(|()| f.sync_all()).is_err() {
            break;
        }
    }
    // Leave no slack at all: fill byte by byte what the chunks could not.
    while f.write_all(&[0]).and_then(|()| f.sync_all()).is_ok() {}
    path
}

fn persistent() -> LockOptions {
    LockOptions::default()
}

fn ephemeral() -> LockOptions {
    LockOptions {
        durability: Durability::Ephemeral,
        ..LockOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_is_unavailable_then_recovers_with_nothing_lost() {
    let fs = Tmpfs::new("4m");
    let path = fs.mount.join("locks.redb");
    let (journal, recovered) = RedbJournal::open(&path).unwrap();
    let stats = journal.stats();
    let engine = Engine::new(
        Arc::new(journal),
        recovered,
        Arc::new(SystemClock),
        EngineOptions::default(),
    );
    let service = LockService::new(engine, Limits::default());

    let before = service
        .lock("ns", "before", "o", 600_000, persistent())
        .await
        .unwrap();
    let filler = fill(&fs.mount);

    // Persistent grants until the store cannot grow any more. Each one is
    // either acknowledged (and must survive) or unavailable (and must not
    // appear).
    let owner = "o".repeat(200);
    let mut acknowledged = vec![("before".to_string(), before.fencing_token)];
    let mut refused = Vec::new();
    for i in 0..20_000 {
        let name = format!("n{i:05}");
        match service
            .lock("ns", &name, &owner, 600_000, persistent())
            .await
        {
            Ok(g) => acknowledged.push((name, g.fencing_token)),
            Err(LockError::Unavailable(message)) => {
                assert!(message.contains("lock store"), "{message}");
                refused.push(name);
                if refused.len() == 3 {
                    break;
                }
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert!(!refused.is_empty(), "the disk never filled up");
    // Reads show state, and while the store cannot write it cannot vouch
    // that what memory shows would survive a crash: they answer unavailable
    // (docs/contract.md#c10-durability).
    for name in &refused {
        assert!(
            matches!(
                service.get("ns", name).await,
                Err(LockError::Unavailable(_))
            ),
            "a read while the disk is full answered as if its state were durable"
        );
    }
    // Ephemeral locks need no disk and keep working.
    let e = service
        .lock("ns", "eph", "o", 600_000, ephemeral())
        .await
        .unwrap();
    assert!(e.fencing_token > before.fencing_token);
    // An unlock is a delete, which redb may fit into pages the file already
    // has, so on a full disk it may succeed or answer `unavailable`. An
    // acknowledged unlock must survive the restart; an unavailable one has an
    // unknown outcome, and the restart must agree with what the live store
    // showed once it could write again (the failed ops are written first).
    let unlock = service.unlock("ns", "before", "o", None).await;
    let unlocked = match unlock {
        Ok(()) => true,
        Err(LockError::Unavailable(_)) => false,
        Err(e) => panic!("unexpected {e:?}"),
    };
    acknowledged.retain(|(name, _)| name != "before");

    // Space returns: the store reopens itself and writes again.
    std::fs::remove_file(filler).unwrap();
    let after = service
        .lock("ns", "after", "o", 600_000, persistent())
        .await
        .unwrap();
    assert!(after.fencing_token > e.fencing_token);
    for name in &refused {
        assert_eq!(
            service.get("ns", name).await.unwrap(),
            None,
            "a refused grant is held"
        );
    }
    assert!(service.get("ns", "eph").await.unwrap().is_some());
    let before_shown = service.get("ns", "before").await.unwrap();
    if unlocked {
        assert_eq!(before_shown, None, "an acknowledged unlock shows a holder");
    }
    acknowledged.push(("after".to_string(), after.fencing_token));
    assert!(stats.reopens.load(Ordering::Relaxed) >= 1);
    let line = format!(
        "disk full: {} grants acknowledged, {} refused, unlock {}, {} failed commits, {} reopens",
        acknowledged.len(),
        refused.len(),
        if unlocked {
            "acknowledged"
        } else {
            "unavailable"
        },
        stats.failed_commits.load(Ordering::Relaxed),
        stats.reopens.load(Ordering::Relaxed)
    );
    eprintln!("{line}");
    lockd_test_support::report(&line);

    // Restart: every acknowledged lock is back, intact (`before` too, unless
    // its unlock was acknowledged); refused grants are not.
    drop(service);
    let service = LockService::new(lockd_redb::open(&path).unwrap(), Limits::default());
    for (name, token) in &acknowledged {
        let info = service
            .get("ns", name)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{name} lost"));
        assert_eq!(info.fencing_token, *token, "{name}");
    }
    for name in &refused {
        assert_eq!(service.get("ns", name).await.unwrap(), None);
    }
    assert_eq!(
        service.get("ns", "before").await.unwrap(),
        before_shown,
        "the restart disagrees with what the store showed before it (unlock {})",
        if unlocked {
            "acknowledged"
        } else {
            "unavailable"
        }
    );
    assert_eq!(service.get("ns", "eph").await.unwrap(), None);
    let next = service
        .lock("ns", "next", "o", 1_000, persistent())
        .await
        .unwrap();
    assert!(next.fencing_token > after.fencing_token);
}

//! A snapshot's cut while the store cannot write: it fails, naming why,
//! and lock traffic is not held up; once writes succeed again, a snapshot
//! holds everything acknowledged.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lockd_core::{EngineOptions, Limits, LockOptions, LockService, SystemClock};

use super::scratch;
use crate::log::{FileIo, LogConfig, LogIo};

/// The log's files, failing every write and sync while `failing`.
#[derive(Default)]
struct Flaky {
    failing: AtomicBool,
}

impl LogIo for Flaky {
    fn write_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected write failure"));
        }
        FileIo.write_at(file, bytes, offset)
    }

    fn sync(&self, file: &File) -> io::Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected sync failure"));
        }
        FileIo.sync(file)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_while_writes_fail_fails_and_the_next_one_holds_everything() {
    let dir = scratch();
    let flaky = Arc::new(Flaky::default());
    let config = LogConfig {
        io: flaky.clone(),
        ..LogConfig::default()
    };
    let store = crate::open_configured(
        &dir.path().join("locks.redb"),
        Arc::new(SystemClock),
        EngineOptions::default(),
        config,
    )
    .unwrap();
    let service = LockService::new(store.engine().clone(), Limits::default());
    let lock = |name: &'static str| {
        let service = service.clone();
        async move {
            service
                .lock("ns", name, "o", 60_000, LockOptions::default())
                .await
        }
    };
    let held = lock("held").await.unwrap();
    flaky.failing.store(true, Ordering::SeqCst);
    assert!(lock("refused").await.is_err());
    let saving = store.clone();
    let err = tokio::task::spawn_blocking(move || crate::snapshot::save(&saving, Vec::new()))
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("injected"), "{err}");
    flaky.failing.store(false, Ordering::SeqCst);
    let after = lock("after").await.unwrap();
    let saving = store.clone();
    let (report, bytes) = tokio::task::spawn_blocking(move || {
        let mut bytes = Vec::new();
        let report = crate::snapshot::save(&saving, &mut bytes).unwrap();
        (report, bytes)
    })
    .await
    .unwrap();
    assert!(report.locks >= 2, "{report}");
    assert_eq!(report.bytes, bytes.len() as u64);
    assert!(report.highest_token >= Some(after.fencing_token.max(held.fencing_token)));
}

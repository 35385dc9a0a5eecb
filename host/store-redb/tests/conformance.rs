//! The redb store against the lock contract (lockd_core::conformance).

use std::path::PathBuf;
use std::sync::Arc;

use lockd_core::conformance::StoreFactory;
use lockd_core::{BoxFuture, EngineOptions, LockBackend, ManualClock};

struct Redb {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Redb {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store").join("locks.redb");
        Redb { _dir: dir, path }
    }
}

impl StoreFactory for Redb {
    fn open(&self, clock: ManualClock) -> BoxFuture<'_, Arc<dyn LockBackend>> {
        Box::pin(async move {
            let engine: Arc<dyn LockBackend> =
                lockd_redb::open_with(&self.path, Arc::new(clock), EngineOptions::default())
                    .unwrap();
            engine
        })
    }

    fn keeps_persistent_locks(&self) -> bool {
        true
    }
}

lockd_core::conformance_tests!(Redb::new());

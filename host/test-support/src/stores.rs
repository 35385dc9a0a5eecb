//! The stores under test, as [`StoreFactory`]s.

use std::sync::Arc;

use lockd_core::{
    BoxFuture, Engine, EngineOptions, LockBackend, ManualClock, NullJournal, Recovered,
};

use crate::StoreFactory;

/// The `memory` store, reopened empty.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryFactory;

impl StoreFactory for MemoryFactory {
    fn open(&self, clock: ManualClock) -> BoxFuture<'_, Arc<dyn LockBackend>> {
        Box::pin(async move {
            let engine: Arc<dyn LockBackend> = Engine::new(
                Arc::new(NullJournal),
                Recovered::in_memory(),
                Arc::new(clock),
                EngineOptions::default(),
            );
            engine
        })
    }

    fn keeps_persistent_locks(&self) -> bool {
        false
    }
}

#[cfg(feature = "redb")]
pub use self::redb::RedbFactory;

#[cfg(feature = "redb")]
mod redb {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use lockd_core::{BoxFuture, EngineOptions, LockBackend, ManualClock};

    use crate::StoreFactory;

    /// The redb store: one file, reopened (after a restart) from what was
    /// synced to it.
    #[derive(Debug)]
    pub struct RedbFactory {
        /// The temporary directory holding the file, when the factory made it.
        _dir: Option<tempfile::TempDir>,
        path: PathBuf,
    }

    impl RedbFactory {
        /// `store/locks.redb` in a fresh temporary directory on disk: the
        /// first open creates the missing `store` directory and the file.
        pub fn new() -> Self {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let path = dir.path().join("store").join("locks.redb");
            RedbFactory {
                _dir: Some(dir),
                path,
            }
        }

        /// `locks.redb` in a fresh temporary directory, on tmpfs
        /// (`/dev/shm`) when there is one: for runs that check semantics
        /// across drop-and-reopen, not the disk, where fsync on tmpfs costs
        /// nothing.
        pub fn on_tmpfs() -> Self {
            let shm = Path::new("/dev/shm");
            let dir = if shm.is_dir() {
                tempfile::tempdir_in(shm)
            } else {
                tempfile::tempdir()
            }
            .expect("a temporary directory");
            let path = dir.path().join("locks.redb");
            RedbFactory {
                _dir: Some(dir),
                path,
            }
        }

        /// The store file at `path`, whose directory the caller owns.
        pub fn at(path: impl Into<PathBuf>) -> Self {
            RedbFactory {
                _dir: None,
                path: path.into(),
            }
        }

        /// The store file.
        pub fn path(&self) -> &Path {
            &self.path
        }
    }

    impl Default for RedbFactory {
        fn default() -> Self {
            RedbFactory::new()
        }
    }

    impl StoreFactory for RedbFactory {
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
}

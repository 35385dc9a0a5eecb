//! What every case shares: the store under test ([`StoreFactory`]), the
//! clock's start, and small helpers.

use std::sync::Arc;

use lockd_core::{
    BoxFuture, Durability, Limits, LockBackend, LockError, LockOptions, LockService, ManualClock,
};

/// A clock reading in 2023, far from any overflow.
pub const START_MS: u64 = 1_700_000_000_000;

/// Opens the store under test.
pub trait StoreFactory: Send + Sync + 'static {
    /// Opens the store, or reopens it after every earlier handle was dropped
    /// (a restart), using `clock`.
    fn open(&self, clock: ManualClock) -> BoxFuture<'_, Arc<dyn LockBackend>>;
    /// Whether persistent locks survive a reopen.
    fn keeps_persistent_locks(&self) -> bool;
}

/// The namespace of every case.
pub(super) const NS: &str = "test";

pub(super) fn opts(wait_ms: u64, durability: Durability) -> LockOptions {
    LockOptions {
        wait_ms,
        durability,
        ..LockOptions::default()
    }
}

pub(super) fn persistent() -> LockOptions {
    opts(0, Durability::Persistent)
}

pub(super) async fn open(factory: &dyn StoreFactory, clock: &ManualClock) -> LockService {
    LockService::new(factory.open(clock.clone()).await, Limits::default())
}

/// Lets the tasks a case spawned run up to their first wait, so that a
/// waiter has joined its queue: each store orders its callers inside the
/// call (the engine's queue, etcd's per-name turns), so turns of the
/// scheduler are enough, not wall-clock time.
pub(super) async fn settle_tasks() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// The error of a call expected to fail.
pub(super) fn lease_key_error(result: Result<impl std::fmt::Debug, LockError>) -> LockError {
    match result {
        Err(e) => e,
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

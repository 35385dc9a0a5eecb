//! The trait a lock store implements.

use std::future::Future;
use std::pin::Pin;

use crate::error::LockError;
use crate::metrics::BackendStats;
use crate::types::{Grant, Key, ListedLock, LockInfo, LockOptions};

/// A boxed, sendable future, so that [`LockBackend`] stays object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A lock store. Arguments reach it already validated by
/// [`LockService`](crate::LockService); it owns the semantics of docs/contract.md:
/// idempotent re-lock, owner- and token-checked unlock and extend, expiry on
/// every read, a FIFO wait queue, and fencing tokens that never go backwards.
pub trait LockBackend: Send + Sync + 'static {
    /// Grants `key` to `owner` for `ttl_ms`, waiting up to `options.wait_ms`.
    fn lock<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> BoxFuture<'a, Result<Grant, LockError>>;

    /// Releases `key` if `owner` holds it under `token` (when given).
    fn unlock<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        token: Option<u64>,
    ) -> BoxFuture<'a, Result<(), LockError>>;

    /// Moves the expiry of a lock held by `owner` to now + `ttl_ms`.
    fn extend<'a>(
        &'a self,
        key: &'a Key,
        owner: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<Grant, LockError>>;

    /// The live holder of `key`, if any.
    fn get<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<LockInfo>, LockError>>;

    /// Live locks of `namespace` whose name starts with `prefix`, by name.
    fn list<'a>(
        &'a self,
        namespace: &'a str,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ListedLock>, LockError>>;

    /// Releases `key` if `owner` still holds it under `token`, without
    /// waiting for the outcome. Drop paths use it (a guard dropped with its
    /// instance), where nothing can await. Best effort: the TTL is the
    /// safety net.
    fn release_detached(&self, key: Key, owner: String, token: u64);

    /// Gauges and counters for metrics. Called at scrape time, not on any
    /// hot path.
    fn stats(&self) -> BackendStats;
}

//! The conformance suite: the lock contract of docs/contract.md, run against any
//! [`LockBackend`] through a [`LockService`].
//!
//! A backend crate runs it with one macro call in a test file:
//!
//! ```text
//! lockd_testing::conformance_tests!(MyFactory::new());
//! ```
//!
//! Time is a [`ManualClock`]: expiry and wait timeouts are tested by moving
//! the clock, never by sleeping.

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

/// Generates one `#[tokio::test]` per conformance case for `$factory`, an
/// expression of a type implementing [`StoreFactory`].
#[macro_export]
macro_rules! conformance_tests {
    ($factory:expr) => {
        $crate::conformance_tests!(@cases $factory;
            grant_busy_and_idempotent_relock,
            unlock_checks_owner_and_token,
            extend_checks_owner_and_keeps_token,
            tokens_rise_strictly,
            expiry_frees_the_lock,
            stale_unlock_never_releases_newer_grant,
            waiters_are_served_first_in_first_out,
            wait_times_out_with_busy,
            waiter_is_woken_by_expiry,
            dropped_waiter_leaves_the_queue,
            thousands_of_waiters,
            invalid_input_changes_nothing,
            namespaces_are_isolated,
            list_filters_by_namespace_and_prefix,
            persistent_locks_survive_restart,
            tokens_rise_across_restart,
            expired_locks_stay_gone_after_restart,
            release_detached_checks_the_token,
            lease_refresh_moves_every_lock,
            lease_revoke_releases_all_and_hands_off,
            lease_expiry_releases_all_and_hands_off,
            lease_locks_wait_in_the_queue,
            dead_or_foreign_leases_are_not_held,
            leases_across_restart,
            force_unlock_hands_to_the_queue_head,
            events_report_every_change,
            listing_shows_grant_time_and_queue_length,
        );
    };
    (@cases $factory:expr; $($case:ident,)*) => {
        $(
            #[tokio::test]
            async fn $case() {
                let factory = $factory;
                $crate::conformance::$case(&factory).await;
            }
        )*
    };
}

const NS: &str = "test";

fn opts(wait_ms: u64, durability: Durability) -> LockOptions {
    LockOptions {
        wait_ms,
        durability,
        ..LockOptions::default()
    }
}

fn persistent() -> LockOptions {
    opts(0, Durability::Persistent)
}

async fn open(factory: &dyn StoreFactory, clock: &ManualClock) -> LockService {
    LockService::new(factory.open(clock.clone()).await, Limits::default())
}

async fn settle_tasks() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// The error of a call expected to fail.
fn lease_key_error(result: Result<impl std::fmt::Debug, LockError>) -> LockError {
    match result {
        Err(e) => e,
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

mod events;
mod leases;
mod locks;
mod restarts;
mod waiters;

pub use events::*;
pub use leases::*;
pub use locks::*;
pub use restarts::*;
pub use waiters::*;

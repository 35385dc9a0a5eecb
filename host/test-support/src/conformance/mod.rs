//! The conformance suite: the lock contract of docs/contract.md, run against any
//! [`lockd_core::LockBackend`] through a [`lockd_core::LockService`].
//!
//! A backend crate runs it with one macro call in a test file:
//!
//! ```text
//! lockd_test_support::conformance_tests!(MyFactory::new());
//! ```
//!
//! Time is a [`lockd_core::ManualClock`]: expiry and wait timeouts are tested by moving
//! the clock, never by sleeping.

mod claims;
mod events;
mod leases;
mod locks;
mod restarts;
mod support;
mod waiters;

pub use claims::*;
pub use events::*;
pub use leases::*;
pub use locks::*;
pub use restarts::*;
pub use support::{StoreFactory, START_MS};
pub use waiters::*;

/// Generates one `#[tokio::test]` per case of shared locks, semaphores,
/// lock-delay and elections (docs/contract.md C21 to C24) for `$factory`, a store whose
/// `supports_claims()` is true.
#[macro_export]
macro_rules! claims_conformance_tests {
    ($factory:expr) => {
        $crate::conformance_tests!(@cases $factory;
            shared_holders_exclude_the_exclusive,
            an_exclusive_waiter_stops_later_readers,
            shared_grants_are_each_their_own,
            a_semaphore_never_exceeds_its_permits,
            force_unlock_releases_every_shared_holder,
            lock_delay_holds_back_an_ended_grant,
            shared_grants_and_permits_survive_restart,
            candidates_lead_in_turn,
            elections_keep_to_their_names,
            leaders_survive_restart,
            readers_behind_a_writer_enter_together,
            a_lease_lock_waits_behind_readers,
        );
    };
}

/// Generates one `#[tokio::test]` per conformance case for `$factory`, an
/// expression of a type implementing [`StoreFactory`].
#[macro_export]
macro_rules! conformance_tests {
    ($factory:expr) => {
        $crate::conformance_tests!(@cases $factory;
            grant_busy_and_idempotent_relock,
            relock_refused_when_asked,
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
            namespaces_list_holders_and_waiters,
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

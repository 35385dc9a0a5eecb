//! The memory store against the conformance suite.

lockd_test_support::conformance_tests!(lockd_test_support::MemoryFactory);

mod claims {
    lockd_test_support::claims_conformance_tests!(lockd_test_support::MemoryFactory);
}

#[tokio::test]
async fn wall_clock_steps_move_no_deadline() {
    lockd_test_support::conformance::wall_clock_steps_move_no_deadline(
        &lockd_test_support::MemoryFactory,
    )
    .await;
}

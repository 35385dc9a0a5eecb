//! The memory store against the conformance suite.

lockd_testing::conformance_tests!(lockd_testing::MemoryFactory);

mod claims {
    lockd_testing::claims_conformance_tests!(lockd_testing::MemoryFactory);
}

#[tokio::test]
async fn wall_clock_steps_move_no_deadline() {
    lockd_testing::conformance::wall_clock_steps_move_no_deadline(&lockd_testing::MemoryFactory)
        .await;
}

//! The memory store against the conformance suite.

lockd_testing::conformance_tests!(lockd_testing::MemoryFactory);

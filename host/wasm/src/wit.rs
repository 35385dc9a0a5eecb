//! The one `bindgen!` of the capability. Private: embedders use
//! [`add_to_linker`](crate::add_to_linker), not the generated items. Named
//! `wit` so that its generated root (`lockd::lock::...`, from the WIT
//! package) is not mistaken for the `lockd` crate.
//!
//! The WIT is read from the crate's own `wit/`, a copy of the repository's
//! `wit/` (a published crate carries nothing from outside its directory);
//! `host/test-support/tests/packaged_copies.rs` fails when the two differ.

wasmtime::component::bindgen!({
    path: "wit",
    world: "lockd:lock/imports",
    // Async so that a waiting `lock` suspends only its guest; trappable so
    // that a host bug (such as a bad resource handle) traps instead of
    // panicking.
    imports: { default: async | trappable },
    with: {
        "lockd:lock/guards.guard": crate::resources::Guard,
        "lockd:lock/leases.lease": crate::resources::Lease,
        "lockd:lock/holds.hold": crate::resources::Hold,
        "lockd:lock/elections.leadership": crate::resources::Leadership,
        "lockd:lock/elections.leader-watch": crate::watch::LeaderWatch,
        // The embedder's WASI implementation owns `wasi:io`; a pollable
        // this capability hands out is one of its `DynPollable`s.
        "wasi:io": wasmtime_wasi_io::bindings::wasi::io,
    },
});

// `self::`: the generated module, never the `lockd` crate.
pub(crate) use self::lockd::lock::{
    elections, guards, holds, leases, locks, rwlocks, semaphores, types,
};

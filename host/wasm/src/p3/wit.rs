//! The one `bindgen!` of `lockd:lock@0.2.0`, the WASI 0.3 package. Private:
//! embedders use [`add_to_linker`](crate::p3::add_to_linker). The WIT is the
//! crate's copy of the repository's `wit/p3` (see `crate::wit`).

wasmtime::component::bindgen!({
    path: "wit/p3",
    world: "lockd:lock/imports@0.2.0",
    // The WIT's `async func`s take an `Accessor` already (they run
    // concurrently with the instance's other tasks). The other functions
    // answer from host state without awaiting anything; `lost` needs the
    // store to make its future. Trappable so that a host bug (a bad resource
    // handle) traps instead of panicking.
    imports: {
        "lockd:lock/guards.[method]guard.lost": store | trappable,
        "lockd:lock/leases.[method]lease.lost": store | trappable,
        "lockd:lock/holds.[method]hold.lost": store | trappable,
        "lockd:lock/elections.[method]leadership.lost": store | trappable,
        default: trappable,
    },
    with: {
        "lockd:lock/guards.guard": crate::resources::Guard,
        "lockd:lock/leases.lease": crate::resources::Lease,
        "lockd:lock/holds.hold": crate::resources::Hold,
        "lockd:lock/elections.leadership": crate::resources::Leadership,
        "lockd:lock/elections.leader-watch": crate::watch::LeaderWatch,
    },
});

// `self::`: the generated module, never the `lockd` crate.
pub(crate) use self::lockd::lock::{
    elections, guards, holds, leases, locks, rwlocks, semaphores, types,
};

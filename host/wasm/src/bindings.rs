//! The one `bindgen!` of the capability. Private: embedders use
//! [`add_to_linker`](crate::add_to_linker), not the generated items.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "lockd:lock/imports",
    // Async so that a waiting `lock` suspends only its guest; trappable so
    // that a host bug (such as a bad resource handle) traps instead of
    // panicking.
    imports: { default: async | trappable },
    with: {
        "lockd:lock/guards.guard": crate::guard::Guard,
    },
});

pub(crate) use lockd::lock::{guards, locks, types};

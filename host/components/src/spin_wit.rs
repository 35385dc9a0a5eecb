//! The `bindgen!`s of Spin's key-value and variables interfaces, one per
//! version Spin's SDKs import. Private: [`crate::key_value`] and
//! [`crate::variables`] implement them.

/// `fermyon:spin/key-value@2.0.0` and `fermyon:spin/variables@2.0.0`, as
/// spin-sdk 5.2 guests (WASI 0.2) import them (WIT in the crate's `wit/spin/v2`).
pub(crate) mod v2 {
    wasmtime::component::bindgen!({
        path: "wit/spin/v2",
        world: "fermyon:spin/lockd-host",
        // Async so that a store read or write on disk suspends only its
        // guest; trappable so that a host bug (a bad resource handle) traps.
        imports: { default: async | trappable },
        with: {
            "fermyon:spin/key-value.store": crate::key_value::stores::OpenStore,
        },
    });

    pub(crate) use self::fermyon::spin::{key_value, variables};
}

/// `spin:key-value/key-value@3.0.0` and `spin:variables/variables@3.0.0`,
/// as spin-sdk 7.0 guests (WASI 0.3) import them (WIT in the crate's `wit/spin/v3`).
pub(crate) mod v3 {
    wasmtime::component::bindgen!({
        path: "wit/spin/v3",
        world: "lockd:spin-p3/host",
        // The WIT's `async func`s take an `Accessor` (they run concurrently
        // with the instance's other tasks); trappable as above.
        imports: { default: trappable },
        with: {
            "spin:key-value/key-value.store": crate::key_value::stores::OpenStore,
        },
    });

    pub(crate) use self::spin::key_value::key_value;
    pub(crate) use self::spin::variables::variables;
}

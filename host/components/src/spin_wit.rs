//! The one `bindgen!` of Spin's key-value and variables interfaces as
//! spin-sdk 5.2 guests import them (`fermyon:spin/key-value@2.0.0`,
//! `fermyon:spin/variables@2.0.0`; WIT in the repository's `wit/spin/v2`).
//! Private: [`crate::key_value`] and [`crate::variables`] implement them.

wasmtime::component::bindgen!({
    path: "../../wit/spin/v2",
    world: "fermyon:spin/lockd-host",
    // Async so that a store read or write on disk suspends only its guest;
    // trappable so that a host bug (a bad resource handle) traps.
    imports: { default: async | trappable },
    with: {
        "fermyon:spin/key-value.store": crate::key_value::OpenStore,
    },
});

pub(crate) use self::fermyon::spin::{key_value, variables};

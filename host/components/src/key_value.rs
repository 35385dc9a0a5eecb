//! Spin's key-value stores for the components `lockd up` serves
//! (`fermyon:spin/key-value@2.0.0` for spin-sdk 5.2,
//! `spin:key-value/key-value@3.0.0` for spin-sdk 7.0), kept beside the locks.
//!
//! - A component lists the store labels it may open in spin.toml
//!   (`key_value_stores = ["default", ...]`). Opening a label it does not
//!   list answers `access-denied`; a label the server has no store for,
//!   `no-such-store` (as Spin's host does).
//! - `default` needs no configuration; any other label a component lists
//!   must be declared in lockd.toml (`[key_value_store.<label>]`,
//!   `type = "lockd"`), or the app is refused at start, naming the label and
//!   the component.
//! - Where the data lives follows the lock store: a redb file beside a
//!   `redb:` store ([`lockd_kv::redb`], durable before `set` returns), the
//!   same etcd cluster for `etcd:`, under a prefix of its own
//!   ([`lockd_kv::etcd`], shared by every host), memory for `memory`. The stores of one label are shared by every
//!   component that lists it.
//! - Guest input is bounded: key and value sizes, the bytes a store holds
//!   (lockd.toml's `max_key_bytes`, `max_value_bytes`, `max_store_bytes`),
//!   and the stores one instance keeps open ([`MAX_OPEN_STORES`],
//!   `store-table-full`). A write past a limit answers `other("...")`
//!   naming it, never a trap.
//!
//! The dispatch here owns those checks; a [`Backend`] only keeps bytes.

mod host;
mod host_p3;
pub(crate) mod stores;

use wasmtime::component::Linker;

pub(crate) use host::{KvCtx, KvCtxView, KvView};
pub use lockd_kv::{Backend, EtcdKvBackend, MemoryBackend, RedbBackend};
pub use stores::{
    KeyValueStores, KvLimits, LabeledStore, OpenStore, DEFAULT_LABEL, MAX_OPEN_STORES,
};

/// Adds Spin's key-value interfaces, `fermyon:spin/key-value@2.0.0` and
/// `spin:key-value/key-value@3.0.0`, to `linker`.
pub(crate) fn add_to_linker<T: KvView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    host::add_to_linker(linker)?;
    host_p3::add_to_linker(linker)
}

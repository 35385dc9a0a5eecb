//! `spin:key-value/key-value@3.0.0` (spin-sdk 7.0, WASI 0.3): the same
//! stores, checks and open-store table as [`super::host`]'s 2.0.0, as
//! `async func`s. Each call copies its store out of the instance's state
//! and lets go of it before awaiting, so the instance's other tasks run
//! while a write waits for its commit. `get-keys` answers a stream of the
//! keys and a future of the call's outcome, as the WIT has it.

use wasmtime::component::{Accessor, FutureReader, Linker, Resource, StreamReader};

use super::host::{HasKv, KvCtxView, KvView, Refused};
use super::stores::{LabeledStore, OpenStore};
use crate::spin_wit::v3::key_value::{self, Error};

type KvResult<T> = wasmtime::Result<Result<T, Error>>;

/// Adds `spin:key-value/key-value@3.0.0` to `linker`.
pub(super) fn add_to_linker<T: KvView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    key_value::add_to_linker::<T, HasKv>(linker, T::kv_ctx)
}

fn refused_to_v3(refused: Refused) -> Error {
    match refused {
        Refused::AccessDenied => Error::AccessDenied,
        Refused::NoSuchStore => Error::NoSuchStore,
        Refused::StoreTableFull => Error::StoreTableFull,
    }
}

/// The store behind `store`, copied out of the instance's state.
fn store_of<U>(
    accessor: &Accessor<U, HasKv>,
    store: &Resource<OpenStore>,
) -> wasmtime::Result<LabeledStore> {
    accessor.with(|mut access| access.get().store(store))
}

impl key_value::Host for KvCtxView<'_> {}

impl key_value::HostStore for KvCtxView<'_> {
    fn drop(&mut self, store: Resource<OpenStore>) -> wasmtime::Result<()> {
        self.close_store(store)
    }
}

impl<U> key_value::HostStoreWithStore<U> for HasKv {
    async fn open(accessor: &Accessor<U, Self>, label: String) -> KvResult<Resource<OpenStore>> {
        accessor.with(|mut access| Ok(access.get().open_store(&label)?.map_err(refused_to_v3)))
    }

    async fn get(
        accessor: &Accessor<U, Self>,
        store: Resource<OpenStore>,
        key: String,
    ) -> KvResult<Option<Vec<u8>>> {
        let store = store_of(accessor, &store)?;
        Ok(store.get(key).await.map_err(Error::Other))
    }

    async fn set(
        accessor: &Accessor<U, Self>,
        store: Resource<OpenStore>,
        key: String,
        value: Vec<u8>,
    ) -> KvResult<()> {
        let store = store_of(accessor, &store)?;
        Ok(store.set(key, value).await.map_err(Error::Other))
    }

    async fn delete(
        accessor: &Accessor<U, Self>,
        store: Resource<OpenStore>,
        key: String,
    ) -> KvResult<()> {
        let store = store_of(accessor, &store)?;
        Ok(store.delete(key).await.map_err(Error::Other))
    }

    async fn exists(
        accessor: &Accessor<U, Self>,
        store: Resource<OpenStore>,
        key: String,
    ) -> KvResult<bool> {
        let store = store_of(accessor, &store)?;
        Ok(store.exists(key).await.map_err(Error::Other))
    }

    async fn get_keys(
        accessor: &Accessor<U, Self>,
        store: Resource<OpenStore>,
    ) -> wasmtime::Result<(StreamReader<String>, FutureReader<Result<(), Error>>)> {
        let store = store_of(accessor, &store)?;
        // The keys are read whole first: a store's keys are bounded by
        // its max_store_bytes, and a snapshot cannot change under the
        // guest as it reads the stream.
        let (keys, outcome) = match store.keys().await {
            Ok(keys) => (keys, Ok(())),
            Err(why) => (Vec::new(), Err(Error::Other(why))),
        };
        accessor.with(|mut access| {
            let keys = StreamReader::new(&mut access, keys)?;
            let outcome =
                FutureReader::new(
                    &mut access,
                    async move { Ok::<_, wasmtime::Error>(outcome) },
                )?;
            Ok((keys, outcome))
        })
    }
}

//! `fermyon:spin/key-value@2.0.0` on a store's data: the per-instance
//! context (the labels the component lists, its open stores), the view the
//! generated host traits are implemented on, and the one function that
//! maps a failure to the WIT error.

use std::sync::Arc;

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};

use super::stores::{KeyValueStores, LabeledStore, OpenStore, MAX_OPEN_STORES};
use crate::spin_wit::v2::key_value::{self, Error};

/// One instance's key-value state.
#[derive(Clone, Debug, Default)]
pub(crate) struct KvCtx {
    stores: Arc<KeyValueStores>,
    /// The labels the component lists in `key_value_stores`.
    allowed: Arc<Vec<String>>,
    /// Stores open now in this instance.
    open: usize,
}

impl KvCtx {
    pub(crate) fn new(stores: Arc<KeyValueStores>, allowed: Arc<Vec<String>>) -> KvCtx {
        KvCtx {
            stores,
            allowed,
            open: 0,
        }
    }
}

/// What the host functions see.
pub(crate) struct KvCtxView<'a> {
    pub(crate) ctx: &'a mut KvCtx,
    pub(crate) table: &'a mut ResourceTable,
}

/// Implemented by a store's data to hand out its [`KvCtx`].
pub(crate) trait KvView: Send {
    fn kv_ctx(&mut self) -> KvCtxView<'_>;
}

pub(super) struct HasKv;

impl HasData for HasKv {
    type Data<'a> = KvCtxView<'a>;
}

/// Adds `fermyon:spin/key-value@2.0.0` to `linker`.
pub(super) fn add_to_linker<T: KvView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    key_value::add_to_linker::<T, HasKv>(linker, T::kv_ctx)
}

type KvResult<T> = wasmtime::Result<Result<T, Error>>;

/// A store's failure as the guest gets it: `other` with the message.
fn other<T>(result: Result<T, String>) -> KvResult<T> {
    Ok(result.map_err(Error::Other))
}

/// Why `open` refused, in no version's words yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// The component does not list the label.
    AccessDenied,
    /// The server has no store of the label.
    NoSuchStore,
    /// The instance has [`MAX_OPEN_STORES`] open.
    StoreTableFull,
}

fn refused_to_v2(refused: Refused) -> Error {
    match refused {
        Refused::AccessDenied => Error::AccessDenied,
        Refused::NoSuchStore => Error::NoSuchStore,
        Refused::StoreTableFull => Error::StoreTableFull,
    }
}

impl KvCtxView<'_> {
    /// The store behind a guest's handle.
    pub(super) fn store(&self, store: &Resource<OpenStore>) -> wasmtime::Result<LabeledStore> {
        Ok(self.table.get(store)?.0.clone())
    }

    /// `open(label)`, for every version.
    pub(super) fn open_store(
        &mut self,
        label: &str,
    ) -> wasmtime::Result<Result<Resource<OpenStore>, Refused>> {
        // Spin's order: a label the component does not list is denied
        // whether or not the server has it, so a guest cannot probe for
        // other components' stores.
        if !self.ctx.allowed.iter().any(|allowed| allowed == label) {
            return Ok(Err(Refused::AccessDenied));
        }
        let Some(store) = self.ctx.stores.get(label) else {
            return Ok(Err(Refused::NoSuchStore));
        };
        if self.ctx.open >= MAX_OPEN_STORES {
            return Ok(Err(Refused::StoreTableFull));
        }
        let resource = self.table.push(OpenStore(store.clone()))?;
        self.ctx.open += 1;
        Ok(Ok(resource))
    }

    /// A guest dropped its handle: its slot is free again.
    pub(super) fn close_store(&mut self, store: Resource<OpenStore>) -> wasmtime::Result<()> {
        self.table.delete(store)?;
        self.ctx.open = self.ctx.open.saturating_sub(1);
        Ok(())
    }
}

impl key_value::Host for KvCtxView<'_> {}

impl key_value::HostStore for KvCtxView<'_> {
    async fn open(&mut self, label: String) -> KvResult<Resource<OpenStore>> {
        Ok(self.open_store(&label)?.map_err(refused_to_v2))
    }

    async fn get(&mut self, store: Resource<OpenStore>, key: String) -> KvResult<Option<Vec<u8>>> {
        other(self.store(&store)?.get(key).await)
    }

    async fn set(
        &mut self,
        store: Resource<OpenStore>,
        key: String,
        value: Vec<u8>,
    ) -> KvResult<()> {
        other(self.store(&store)?.set(key, value).await)
    }

    async fn delete(&mut self, store: Resource<OpenStore>, key: String) -> KvResult<()> {
        other(self.store(&store)?.delete(key).await)
    }

    async fn exists(&mut self, store: Resource<OpenStore>, key: String) -> KvResult<bool> {
        other(self.store(&store)?.exists(key).await)
    }

    async fn get_keys(&mut self, store: Resource<OpenStore>) -> KvResult<Vec<String>> {
        other(self.store(&store)?.keys().await)
    }

    async fn drop(&mut self, store: Resource<OpenStore>) -> wasmtime::Result<()> {
        self.close_store(store)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::spin_wit::v2::key_value::HostStore as _;
    use lockd_server::config::LockdConfig;
    use lockd_server::store::StoreSpec;

    /// A context whose component lists `default` and `private` (the server
    /// has both) and `missing` (which the server was not asked for).
    fn ctx() -> KvCtx {
        let config: LockdConfig =
            toml::from_str("[key_value_store.private]\ntype = \"lockd\"\n").unwrap();
        let wanted = BTreeMap::from([
            ("default".to_string(), vec!["a".to_string()]),
            ("private".to_string(), vec!["b".to_string()]),
        ]);
        let stores = KeyValueStores::open(&wanted, &config, &StoreSpec::Memory).unwrap();
        KvCtx::new(
            Arc::new(stores),
            Arc::new(vec!["default".to_string(), "missing".to_string()]),
        )
    }

    #[tokio::test]
    async fn open_answers_spins_errors() {
        let (mut ctx, mut table) = (ctx(), ResourceTable::new());
        let mut view = KvCtxView {
            ctx: &mut ctx,
            table: &mut table,
        };
        let store = view.open("default".into()).await.unwrap().unwrap();
        view.set(store, "k".into(), b"v".to_vec())
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(
            view.open("private".into()).await.unwrap(),
            Err(Error::AccessDenied)
        ));
        // Listed but not served: no such store. Neither listed nor served:
        // denied, as Spin answers.
        assert!(matches!(
            view.open("missing".into()).await.unwrap(),
            Err(Error::NoSuchStore)
        ));
        assert!(matches!(
            view.open("nope".into()).await.unwrap(),
            Err(Error::AccessDenied)
        ));
    }

    #[tokio::test]
    async fn the_open_store_table_is_bounded_and_drop_frees_a_slot() {
        let (mut ctx, mut table) = (ctx(), ResourceTable::new());
        let mut view = KvCtxView {
            ctx: &mut ctx,
            table: &mut table,
        };
        let mut open = Vec::new();
        for _ in 0..MAX_OPEN_STORES {
            open.push(view.open("default".into()).await.unwrap().unwrap());
        }
        assert!(matches!(
            view.open("default".into()).await.unwrap(),
            Err(Error::StoreTableFull)
        ));
        view.drop(open.pop().unwrap()).await.unwrap();
        assert!(view.open("default".into()).await.unwrap().is_ok());
    }
}

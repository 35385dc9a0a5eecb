//! The Ctx / View pair through which the capability reaches its state.

use std::collections::HashMap;

use lockd_core::LockService;
use wasmtime::component::{HasData, Linker, ResourceTable};

use crate::bindings;

/// Default cap on guards one instance may hold at once.
pub const DEFAULT_MAX_GUARDS: usize = 4096;

/// Per-instance lock state: the service, the namespace the host assigned,
/// and the guards still held.
pub struct LockCtx {
    pub(crate) service: LockService,
    pub(crate) namespace: String,
    /// Guards not yet released, by id: released when this context drops.
    pub(crate) live_guards: HashMap<u64, (String, String, u64)>,
    pub(crate) next_guard_id: u64,
    pub(crate) max_guards: usize,
}

impl std::fmt::Debug for LockCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockCtx")
            .field("namespace", &self.namespace)
            .field("live_guards", &self.live_guards.len())
            .finish_non_exhaustive()
    }
}

impl LockCtx {
    /// A context whose guest sees only the locks of `namespace`.
    pub fn new(service: LockService, namespace: impl Into<String>) -> Self {
        LockCtx {
            service,
            namespace: namespace.into(),
            live_guards: HashMap::new(),
            next_guard_id: 0,
            max_guards: DEFAULT_MAX_GUARDS,
        }
    }

    /// Caps the guards this instance may hold at once (default
    /// [`DEFAULT_MAX_GUARDS`]); past it, `acquire` answers `denied`.
    pub fn with_max_guards(mut self, max: usize) -> Self {
        self.max_guards = max;
        self
    }

    /// The namespace of this instance.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// How many guards this instance still holds.
    pub fn live_guards(&self) -> usize {
        self.live_guards.len()
    }
}

impl Drop for LockCtx {
    /// The instance is gone (returned, trapped, or was dropped mid-call):
    /// release what its guards still hold. Nothing can be awaited here, so
    /// the release is detached; the TTL remains the safety net.
    fn drop(&mut self) {
        for (_, (name, owner, token)) in self.live_guards.drain() {
            self.service
                .release_detached(&self.namespace, &name, &owner, token);
        }
    }
}

/// What host functions see: the context and the store's resource table.
pub struct LockCtxView<'a> {
    /// This instance's lock state.
    pub ctx: &'a mut LockCtx,
    /// The store's resource table, shared with WASI.
    pub table: &'a mut ResourceTable,
}

impl std::fmt::Debug for LockCtxView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockCtxView")
            .field("ctx", &self.ctx)
            .finish_non_exhaustive()
    }
}

/// Implemented by the embedder's store data to expose its [`LockCtx`].
pub trait LockView: Send {
    /// The lock context and resource table of this store.
    fn lock_ctx(&mut self) -> LockCtxView<'_>;
}

struct HasLockCtx;

impl HasData for HasLockCtx {
    type Data<'a> = LockCtxView<'a>;
}

/// Adds `lockd:lock/locks` and `lockd:lock/guards` to `linker`.
pub fn add_to_linker<T: LockView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    bindings::Imports::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)
}

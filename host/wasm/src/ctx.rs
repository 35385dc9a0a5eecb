//! The Ctx / View pair through which the capability reaches its state.

use std::collections::{HashMap, HashSet};

use lockd_core::{LockError, LockService};
use wasmtime::component::{HasData, Linker, ResourceTable};

use crate::bindings;

/// Default cap on guards and leases one instance may hold at once.
pub const DEFAULT_MAX_GUARDS: usize = 4096;

/// Per-instance lock state: the service, the namespace the host assigned,
/// and the guards still held.
pub struct LockCtx {
    pub(crate) service: LockService,
    pub(crate) namespace: String,
    /// Guards not yet released, by id: released when this context drops.
    pub(crate) live_guards: HashMap<u64, (String, String, u64)>,
    /// Leases not yet revoked, by id: revoked when this context drops.
    pub(crate) live_leases: HashSet<String>,
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
            live_leases: HashSet::new(),
            next_guard_id: 0,
            max_guards: DEFAULT_MAX_GUARDS,
        }
    }

    /// Caps the guards and leases this instance may hold at once (default
    /// [`DEFAULT_MAX_GUARDS`]); past it, `acquire` and `grant` answer
    /// `denied`.
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

    /// How many leases this instance still holds.
    pub fn live_leases(&self) -> usize {
        self.live_leases.len()
    }

    /// `denied` once the instance holds as many guards and leases as allowed.
    pub(crate) fn check_room(&self) -> Result<(), LockError> {
        if self.live_guards.len() + self.live_leases.len() >= self.max_guards {
            return Err(LockError::Denied(format!(
                "this instance already holds {} guards and leases, the most allowed",
                self.max_guards
            )));
        }
        Ok(())
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
        if self.live_leases.is_empty() {
            return;
        }
        // A revoke must be awaited; hand it to the runtime the instance ran
        // on. Without one (a synchronous embedder), the TTL takes over.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for id in self.live_leases.drain() {
            let service = self.service.clone();
            let namespace = self.namespace.clone();
            runtime.spawn(async move {
                let _ = service.revoke_lease(&namespace, &id).await;
            });
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

/// Adds `lockd:lock/locks`, `lockd:lock/guards` and `lockd:lock/leases` to
/// `linker`.
///
/// `subscribe-lost` hands out `wasi:io/poll` pollables, so the linker needs
/// `wasi:io` too, from wasmtime-wasi (`wasmtime_wasi::p2::add_to_linker_async`
/// adds it with the rest of WASI). Keep-alive runs on the tokio runtime the
/// instance is called from.
pub fn add_to_linker<T: LockView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    bindings::types::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    bindings::locks::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    bindings::guards::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    bindings::leases::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)
}

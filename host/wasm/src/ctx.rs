//! The Ctx / View pair through which the capability reaches its state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use lockd_core::{LockError, LockService};
use wasmtime::component::{GuestTaskId, HasData, Linker, ResourceTable};

use crate::abandon::AbandonWatch;

use crate::resources::Slot;
use crate::wit;

/// Default cap on the resources one instance may hold at once: guards,
/// holds, leaderships and leader watches (counted together) and leases.
pub const DEFAULT_MAX_GUARDS: usize = 4096;

/// Per-instance lock state: the service, the namespace the host assigned,
/// and how many guards and leases the instance holds. The guards and leases
/// themselves live in the store's resource table and give back what they
/// hold when dropped, with the table when the instance ends.
pub struct LockCtx {
    pub(crate) service: LockService,
    pub(crate) namespace: String,
    /// Guards, holds, leaderships and leader watches not yet released,
    /// counted by their [`Slot`]s.
    live_guards: Arc<AtomicUsize>,
    /// Leases not yet revoked, counted by their [`Slot`]s.
    live_leases: Arc<AtomicUsize>,
    max_guards: usize,
    /// The guest tasks the embedder may abandon, by the task it called
    /// (`lockd:lock@0.2.0` waits only; see [`crate::p3::Abandon`]).
    abandonable: HashMap<GuestTaskId, AbandonWatch>,
}

impl std::fmt::Debug for LockCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockCtx")
            .field("namespace", &self.namespace)
            .field("live_guards", &self.live_guards())
            .finish_non_exhaustive()
    }
}

impl LockCtx {
    /// A context whose guest sees only the locks of `namespace`.
    pub fn new(service: LockService, namespace: impl Into<String>) -> Self {
        LockCtx {
            service,
            namespace: namespace.into(),
            live_guards: Arc::default(),
            live_leases: Arc::default(),
            max_guards: DEFAULT_MAX_GUARDS,
            abandonable: HashMap::new(),
        }
    }

    /// Caps the guards, holds, leaderships, leader watches and leases this
    /// instance may hold at once (default [`DEFAULT_MAX_GUARDS`]); past it,
    /// `acquire`, `campaign`, `open` and `grant` answer `denied`.
    pub fn with_max_guards(mut self, max: usize) -> Self {
        self.max_guards = max;
        self
    }

    /// Ties guest task `task` (an export call the embedder started) to
    /// `watch`: once its [`crate::p3::Abandon`] abandons it, the
    /// `lockd:lock@0.2.0` calls of the task and its subtasks that wait in a
    /// queue leave it and answer `denied`.
    pub fn abandon_task_on(&mut self, task: GuestTaskId, watch: AbandonWatch) {
        // Forget the tasks whose requests ended normally. Abandoned ones
        // stay: their task may still be running.
        self.abandonable.retain(|_, watch| !watch.is_settled());
        self.abandonable.insert(task, watch);
    }

    /// The watch registered for `task`, if any.
    pub(crate) fn abandon_watch(&self, task: GuestTaskId) -> Option<AbandonWatch> {
        self.abandonable.get(&task).cloned()
    }

    /// The namespace of this instance.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// How many guards this instance still holds.
    pub fn live_guards(&self) -> usize {
        self.live_guards.load(Ordering::Relaxed)
    }

    /// How many leases this instance still holds.
    pub fn live_leases(&self) -> usize {
        self.live_leases.load(Ordering::Relaxed)
    }

    /// A place for one more guard, or `denied` once the instance holds as
    /// many guards and leases as allowed.
    pub(crate) fn guard_slot(&self) -> Result<Slot, LockError> {
        self.check_room()?;
        Ok(Slot::take(&self.live_guards))
    }

    /// A place for one more lease, or `denied` as for guards.
    pub(crate) fn lease_slot(&self) -> Result<Slot, LockError> {
        self.check_room()?;
        Ok(Slot::take(&self.live_leases))
    }

    fn check_room(&self) -> Result<(), LockError> {
        if self.live_guards() + self.live_leases() >= self.max_guards {
            return Err(LockError::Denied(format!(
                "this instance already holds {} guards and leases, the most allowed",
                self.max_guards
            )));
        }
        Ok(())
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

pub(crate) struct HasLockCtx;

impl HasData for HasLockCtx {
    type Data<'a> = LockCtxView<'a>;
}

/// Adds the interfaces of the `lockd:lock` world `imports` to `linker`:
/// `locks`, `guards`, `leases`, `rwlocks`, `semaphores`, `holds` and
/// `elections`.
///
/// `subscribe-lost` hands out `wasi:io/poll` pollables, so the linker needs
/// `wasi:io` too, from wasmtime-wasi (`wasmtime_wasi::p2::add_to_linker_async`
/// adds it with the rest of WASI). Keep-alive runs on the tokio runtime the
/// instance is called from.
pub fn add_to_linker<T: LockView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    wit::types::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    wit::locks::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    wit::guards::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    wit::leases::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    wit::rwlocks::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    wit::semaphores::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    wit::holds::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    wit::elections::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)
}

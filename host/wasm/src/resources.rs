//! The host state behind the guest's `guard`, `hold`, `leadership` and
//! `lease` resources, the types `bindgen!`'s `with:` names.
//!
//! Each resource gives back what it holds when it is dropped: by the guest,
//! or with the store's resource table when the instance ends (it returned,
//! trapped, or was dropped mid-call). So the resources are the only record
//! of what an instance holds; the instance keeps just a count of them, for
//! its cap.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use lockd_core::keepalive::{Holding, Terms};
use lockd_core::{Claim, Grant, LockError, LockService};

use crate::liveness::{end, held_until, now_ms, terms, Cause, Ending, Monitor, Subject};

/// One guard's or lease's place under its instance's cap, counted in the
/// count it was taken from until it is dropped.
#[derive(Debug)]
pub(crate) struct Slot(Arc<AtomicUsize>);

impl Slot {
    pub(crate) fn take(count: &Arc<AtomicUsize>) -> Slot {
        count.fetch_add(1, Ordering::Relaxed);
        Slot(count.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One grant as the store knows it: its name, the owner the host generated,
/// its token and what it claims, with its terms and lost flag. Cheap to
/// clone, so that a WASI 0.3 call can await the store without borrowing the
/// resource table.
#[derive(Clone, Debug)]
pub(crate) struct Granted {
    service: LockService,
    namespace: String,
    pub(crate) name: String,
    pub(crate) owner: String,
    pub(crate) token: u64,
    /// Exclusive, shared, a permit or a leadership: how the store shows
    /// whether this grant still holds.
    pub(crate) claim: Claim,
    /// Its terms and lost flag, shared with the monitor and lost signals.
    pub(crate) holding: Arc<Holding>,
    /// Who ended it, for the WASI 0.3 `lost` future.
    pub(crate) ending: Arc<Ending>,
}

impl Granted {
    /// Whether the store shows this grant (owner and token) holding: false
    /// once lost, and false when the store cannot answer (a caller acting
    /// on `true` must be right).
    pub(crate) async fn is_held_in_store(&self) -> bool {
        if self.holding.is_lost() {
            return false;
        }
        matches!(
            held_until(
                &self.service,
                (&self.namespace, &self.name),
                (&self.owner, self.token),
                self.claim
            )
            .await,
            Ok(Some(_))
        )
    }

    /// Gives the grant back, awaiting the store's answer. Not-held or
    /// not-owner means it was lost already.
    pub(crate) async fn unlock(&self) -> Result<(), LockError> {
        self.service
            .unlock(&self.namespace, &self.name, &self.owner, Some(self.token))
            .await
    }

    /// Moves its expiry to now + `ttl_ms`, and its terms with it.
    pub(crate) async fn extend(&self, ttl_ms: u64) -> Result<Grant, LockError> {
        let sent_at_ms = now_ms();
        let grant = self
            .service
            .extend(&self.namespace, &self.name, &self.owner, ttl_ms)
            .await?;
        self.holding
            .renewed(terms(sent_at_ms, ttl_ms, grant.expires_at_ms));
        Ok(grant)
    }

    /// The service and namespace it was granted in.
    pub(crate) fn place(&self) -> (&LockService, &str) {
        (&self.service, &self.namespace)
    }
}

/// One grant held by a resource (a guard, a hold or a leadership), with its
/// monitor and its place under the cap. Gives the grant back when dropped
/// unless it was released.
#[derive(Debug)]
pub(crate) struct HeldGrant {
    granted: Granted,
    /// Renews it (keep-alive) or watches it (once a guest subscribed to its
    /// loss); none until either is asked for. Aborted with the grant.
    monitor: Option<Monitor>,
    /// Its place under the cap while it holds; none once released.
    slot: Option<Slot>,
}

impl std::ops::Deref for HeldGrant {
    type Target = Granted;

    fn deref(&self) -> &Granted {
        &self.granted
    }
}

impl HeldGrant {
    /// The grant of `name` just made to `owner` under `token` for `claim`,
    /// on `terms`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        service: LockService,
        namespace: String,
        name: String,
        owner: String,
        (token, claim): (u64, Claim),
        terms: Terms,
        slot: Slot,
    ) -> HeldGrant {
        HeldGrant {
            granted: Granted {
                service,
                namespace,
                name,
                owner,
                token,
                claim,
                holding: Arc::new(Holding::new(terms)),
                ending: Arc::default(),
            },
            monitor: None,
            slot: Some(slot),
        }
    }

    fn start_monitor(&mut self, keep_alive: bool) {
        let g = &self.granted;
        let subject = Subject::Grant {
            namespace: g.namespace.clone(),
            name: g.name.clone(),
            owner: g.owner.clone(),
            token: g.token,
            claim: g.claim,
        };
        let monitor = Monitor::start(
            g.service.clone(),
            (g.holding.clone(), g.ending.clone()),
            subject,
            keep_alive,
        );
        self.monitor = Some(monitor);
    }

    /// Renews it from now on, by the core's keep-alive rule, until it is
    /// lost.
    pub(crate) fn keep_alive(&mut self) {
        self.start_monitor(true);
    }

    /// Watches its expiry from now on, unless it is watched already (kept
    /// alive) or holds nothing.
    pub(crate) fn watch(&mut self) {
        if self.monitor.is_none() && !self.is_released() && !self.holding.is_lost() {
            self.start_monitor(false);
        }
    }

    pub(crate) fn is_released(&self) -> bool {
        self.slot.is_none()
    }

    /// The grant itself, to await the store with after the resource table
    /// is let go.
    pub(crate) fn granted(&self) -> &Granted {
        &self.granted
    }

    /// Whether the store shows this grant holding; false once released or
    /// lost (see [`Granted::is_held_in_store`]).
    pub(crate) async fn is_held(&self) -> bool {
        !self.is_released() && self.granted.is_held_in_store().await
    }

    /// It holds nothing any more: stop renewing it, free its place under
    /// the cap, wake its lost signals, and release nothing when dropped.
    pub(crate) fn mark_released(&mut self) {
        self.slot = None;
        self.monitor = None;
        end(&self.granted.holding, &self.granted.ending, Cause::Released);
    }
}

impl Drop for HeldGrant {
    /// Nothing can be awaited here, so the release is detached; the TTL
    /// remains the safety net.
    fn drop(&mut self) {
        let g = &self.granted;
        if !self.is_released() {
            g.service
                .release_detached(&g.namespace, &g.name, &g.owner, g.token);
        }
        end(&g.holding, &g.ending, Cause::Released);
    }
}

/// A lock held through the `guards` interface, as the host keeps it.
#[derive(Debug)]
pub struct Guard(pub(crate) HeldGrant);

/// A shared lock, exclusive lock or permit held through the `holds`
/// interface, as the host keeps it.
#[derive(Debug)]
pub struct Hold(pub(crate) HeldGrant);

/// The leadership of an election held through the `elections` interface,
/// as the host keeps it.
#[derive(Debug)]
pub struct Leadership(pub(crate) HeldGrant);

/// A resource that holds one grant.
pub(crate) trait HoldsGrant: Send + 'static {
    fn grant(&self) -> &HeldGrant;
    fn grant_mut(&mut self) -> &mut HeldGrant;
}

macro_rules! holds_grant {
    ($($t:ident),*) => {$(
        impl HoldsGrant for $t {
            fn grant(&self) -> &HeldGrant {
                &self.0
            }
            fn grant_mut(&mut self) -> &mut HeldGrant {
                &mut self.0
            }
        }
    )*};
}
holds_grant!(Guard, Hold, Leadership);

/// A lease held through the `leases` interface, as the host keeps it.
#[derive(Debug)]
pub struct Lease {
    service: LockService,
    namespace: String,
    pub(crate) id: String,
    /// Its terms and lost flag, shared with the monitor and pollables.
    pub(crate) holding: Arc<Holding>,
    /// Who ended it, for the WASI 0.3 `lost` future.
    pub(crate) ending: Arc<Ending>,
    /// Hears that the lease ended and, with keep-alive, renews it. Aborted
    /// with the lease.
    monitor: Option<Monitor>,
    /// Its place under the cap until it is revoked.
    slot: Option<Slot>,
}

impl Lease {
    /// The lease `id` just granted on `terms`. Always watched, so that it
    /// hears its end (a revoke from elsewhere) without the guest asking;
    /// renewed too if `keep_alive`.
    pub(crate) fn new(
        service: LockService,
        namespace: String,
        id: String,
        terms: Terms,
        keep_alive: bool,
        slot: Slot,
    ) -> Lease {
        let holding = Arc::new(Holding::new(terms));
        let ending = Arc::<Ending>::default();
        let subject = Subject::Lease {
            namespace: namespace.clone(),
            id: id.clone(),
        };
        let monitor = Monitor::start(
            service.clone(),
            (holding.clone(), ending.clone()),
            subject,
            keep_alive,
        );
        Lease {
            service,
            namespace,
            id,
            holding,
            ending,
            monitor: Some(monitor),
            slot: Some(slot),
        }
    }

    pub(crate) fn is_revoked(&self) -> bool {
        self.slot.is_none()
    }

    /// The service and namespace it was granted in.
    pub(crate) fn place(&self) -> (&LockService, &str) {
        (&self.service, &self.namespace)
    }

    /// Ends the lease and releases its locks, awaiting the store's answer.
    pub(crate) async fn revoke(&self) -> Result<u64, LockError> {
        self.ending.set_releasing(true);
        let outcome = self.service.revoke_lease(&self.namespace, &self.id).await;
        if matches!(outcome, Err(LockError::Unavailable(_))) {
            self.ending.set_releasing(false);
        }
        outcome
    }

    /// It holds nothing any more: stop watching it, free its place under
    /// the cap, wake its pollables, and revoke nothing when dropped.
    pub(crate) fn mark_revoked(&mut self) {
        self.slot = None;
        self.monitor = None;
        end(&self.holding, &self.ending, Cause::Released);
    }
}

impl Drop for Lease {
    /// A revoke must be awaited; hand it to the runtime the instance ran on.
    /// Without one (a synchronous embedder), the TTL takes over.
    fn drop(&mut self) {
        if !self.is_revoked() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let service = self.service.clone();
                let namespace = std::mem::take(&mut self.namespace);
                let id = self.id.clone();
                runtime.spawn(async move {
                    let _ = service.revoke_lease(&namespace, &id).await;
                });
            }
        }
        end(&self.holding, &self.ending, Cause::Released);
    }
}

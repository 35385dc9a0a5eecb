//! Keep-alive and the lost signal of guards and leases
//! (docs/contract.md#c17-keep-alive, #c18-lost).
//!
//! A [`Liveness`] is what the host knows of one guard or lease: its expiry
//! and whether it is lost. A [`Monitor`] is the task that renews it (with
//! keep-alive) or watches its expiry (without), and marks it lost. The task
//! belongs to the resource: dropping the resource, or the instance's store,
//! aborts it, so renewal never outlives its holder.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockd_core::{LockError, LockService};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use wasmtime_wasi_io::poll::Pollable;

/// The expiry and lost flag of one guard or lease, shared by the resource,
/// its monitor and its pollables.
#[derive(Debug)]
pub(crate) struct Liveness {
    expires_at_ms: AtomicU64,
    ttl_ms: AtomicU64,
    lost: watch::Sender<bool>,
}

impl Liveness {
    pub(crate) fn new(expires_at_ms: u64, ttl_ms: u64) -> Arc<Liveness> {
        Arc::new(Liveness {
            expires_at_ms: AtomicU64::new(expires_at_ms),
            ttl_ms: AtomicU64::new(ttl_ms),
            lost: watch::Sender::new(false),
        })
    }

    pub(crate) fn expires_at_ms(&self) -> u64 {
        self.expires_at_ms.load(Ordering::Acquire)
    }

    /// Records a renewal: by the guest (`extend`, `refresh`) or keep-alive.
    pub(crate) fn renewed(&self, expires_at_ms: u64, ttl_ms: u64) {
        self.expires_at_ms.store(expires_at_ms, Ordering::Release);
        self.ttl_ms.store(ttl_ms, Ordering::Release);
    }

    fn ttl_ms(&self) -> u64 {
        self.ttl_ms.load(Ordering::Acquire)
    }

    /// It no longer holds: lost, released or revoked. Wakes every pollable.
    pub(crate) fn mark_lost(&self) {
        self.lost.send_replace(true);
    }

    pub(crate) fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// A `wasi:io` pollable, ready once this is lost.
    pub(crate) fn lost_pollable(&self) -> LostPollable {
        LostPollable(self.lost.subscribe())
    }
}

/// The host side of a `subscribe-lost` pollable.
#[derive(Debug)]
pub(crate) struct LostPollable(watch::Receiver<bool>);

#[wasmtime_wasi_io::async_trait]
impl Pollable for LostPollable {
    async fn ready(&mut self) {
        // The sender lives as long as the guard or lease; once that is gone
        // (dropped), it holds nothing, so a closed channel is ready too.
        let _ = self.0.wait_for(|lost| *lost).await;
    }
}

/// What a monitor renews and checks.
#[derive(Debug, Clone)]
pub(crate) enum Subject {
    /// A guard: lock `name` held by `owner` under `token`.
    Guard {
        namespace: String,
        name: String,
        owner: String,
        token: u64,
    },
    /// A lease.
    Lease { namespace: String, id: String },
}

impl Subject {
    /// Renews it for `ttl_ms` (a guard) or its own TTL (a lease): the new
    /// expiry.
    async fn renew(&self, service: &LockService, ttl_ms: u64) -> Result<u64, LockError> {
        match self {
            Subject::Guard {
                namespace,
                name,
                owner,
                ..
            } => service
                .extend(namespace, name, owner, ttl_ms)
                .await
                .map(|g| g.expires_at_ms),
            Subject::Lease { namespace, id } => service.refresh_lease(namespace, id).await,
        }
    }

    /// Its expiry in the store, if it still holds.
    async fn held_until(&self, service: &LockService) -> Result<Option<u64>, LockError> {
        match self {
            Subject::Guard {
                namespace,
                name,
                owner,
                token,
            } => Ok(service
                .get(namespace, name)
                .await?
                .filter(|info| info.owner == *owner && info.fencing_token == *token)
                .map(|info| info.expires_at_ms)),
            Subject::Lease { namespace, id } => Ok(service
                .get_lease(namespace, id)
                .await?
                .map(|info| info.expires_at_ms)),
        }
    }
}

/// The task watching one guard or lease. Aborted when dropped.
#[derive(Debug)]
pub(crate) struct Monitor(JoinHandle<()>);

impl Drop for Monitor {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Monitor {
    /// Starts watching `subject` on the current tokio runtime: renewing it
    /// at a third of its TTL if `keep_alive`, else checking it at its
    /// expiry; and, for a lease, hearing at once that it ended. Marks
    /// `liveness` lost when it no longer holds.
    pub(crate) fn start(
        service: LockService,
        liveness: Arc<Liveness>,
        subject: Subject,
        keep_alive: bool,
    ) -> Monitor {
        Monitor(tokio::spawn(async move {
            let ended = match &subject {
                Subject::Lease { namespace, id } => service.lease_ended(namespace, id),
                Subject::Guard { .. } => Box::pin(std::future::pending()),
            };
            tokio::select! {
                () = ended => {}
                () = watch_until_lost(&service, &liveness, &subject, keep_alive) => {}
                () = force_released(&service, &subject) => {}
            }
            if !liveness.is_lost() {
                tracing::debug!(?subject, "lease or guard lost");
            }
            liveness.mark_lost();
        }))
    }
}

/// Completes when an operator force-releases the subject's lock (for a
/// lease, any of its locks): the holder hears it at once rather than at its
/// next renewal.
async fn force_released(service: &LockService, subject: &Subject) {
    match subject {
        Subject::Guard {
            namespace, owner, ..
        } => service.force_released(namespace, owner).await,
        Subject::Lease { namespace, id } => service.force_released(namespace, id).await,
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

async fn sleep_until_ms(deadline_ms: u64) {
    let wait = deadline_ms.saturating_sub(now_ms());
    tokio::time::sleep(Duration::from_millis(wait)).await;
}

/// Returns once the subject is lost.
async fn watch_until_lost(
    service: &LockService,
    liveness: &Liveness,
    subject: &Subject,
    keep_alive: bool,
) {
    loop {
        if liveness.is_lost() {
            return;
        }
        let expires_at_ms = liveness.expires_at_ms();
        let ttl_ms = liveness.ttl_ms().max(1);
        if !keep_alive {
            sleep_until_ms(expires_at_ms).await;
            if liveness.expires_at_ms() > now_ms() {
                continue; // renewed by the guest meanwhile
            }
            // Renewed elsewhere (the same owner over REST), or gone?
            match subject.held_until(service).await {
                Ok(Some(until)) if until > now_ms() => {
                    liveness.renewed(until, ttl_ms);
                    continue;
                }
                _ => return,
            }
        }
        // Renew a third of the TTL after the last renewal.
        sleep_until_ms(expires_at_ms.saturating_sub(ttl_ms - ttl_ms / 3)).await;
        if liveness.expires_at_ms() != expires_at_ms {
            continue; // the guest renewed it itself
        }
        // Retry a failing renewal a few times per TTL, until the expiry.
        let retry = Duration::from_millis((ttl_ms / 10).clamp(10, 1_000));
        loop {
            match subject.renew(service, ttl_ms).await {
                Ok(until) => {
                    liveness.renewed(until, ttl_ms);
                    break;
                }
                Err(LockError::Unavailable(why)) => {
                    let now = now_ms();
                    if now >= liveness.expires_at_ms() {
                        tracing::warn!(?subject, %why, "keep-alive could not renew before the expiry");
                        return;
                    }
                    let left = Duration::from_millis(liveness.expires_at_ms() - now);
                    tokio::time::sleep(retry.min(left)).await;
                }
                // not-held, not-owner: it is already gone.
                Err(e) => {
                    tracing::debug!(?subject, error = %e, "keep-alive renewal refused");
                    return;
                }
            }
        }
    }
}

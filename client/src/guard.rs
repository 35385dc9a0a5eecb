//! Locks, shared locks and semaphore permits held by a [`Guard`] that
//! renews itself, says when it is lost and releases on drop
//! (docs/contract.md#c14-guards, #c21-shared, #c22-semaphores).

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockd_api::{DurabilityWord, GrantReply, HeldMode, LockMode, LockRequest, Route, Status};
use lockd_core::keepalive::Terms;

use crate::client::{millis, Client, Grant};
use crate::error::Error;
use crate::holding::{now_ms, Hold, LostReason, Subject};
use crate::transport::Retry;

/// The TTL of a lock unless [`LockBuilder::ttl`] says otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// A lock request, made with [`Client::lock`], [`Client::read_lock`] or
/// [`Client::semaphore`]; `.await` it for a [`Guard`].
///
/// The lock is taken for an owner generated like a guest guard's (`guard-`
/// and 32 hex digits of secure random) unless [`LockBuilder::owner`] gives
/// one. The request names its owner, so it is safe to send again to
/// another host when its outcome is unknown (a re-lock answers the same
/// grant, docs/contract.md#c2-relock).
#[derive(Debug)]
#[must_use = "a lock request does nothing until it is awaited"]
pub struct LockBuilder {
    client: Client,
    name: String,
    owner: Option<String>,
    ttl: Duration,
    wait: Duration,
    durability: Option<DurabilityWord>,
    claim: Claim,
    keep_alive: bool,
}

/// What a lock request asks for.
#[derive(Clone, Copy, Debug)]
enum Claim {
    Exclusive,
    Shared,
    Permit(u32),
}

impl Client {
    /// Asks for the exclusive lock `name`.
    ///
    /// ```no_run
    /// # async fn run(client: lockd_native_client::Client) -> Result<(), lockd_native_client::Error> {
    /// use std::time::Duration;
    ///
    /// let guard = client
    ///     .lock("deploy")
    ///     .ttl(Duration::from_secs(10))
    ///     .wait(Duration::from_secs(5))
    ///     .keep_alive()
    ///     .await?;
    /// tokio::select! {
    ///     reason = guard.lost() => eprintln!("lost the lock: {reason}"),
    ///     () = tokio::time::sleep(Duration::from_secs(60)) => guard.release().await?,
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> LockBuilder {
        self.lock_builder(name.into(), Claim::Exclusive)
    }

    /// Asks for a shared (read) lock on `name`, beside other shared holders
    /// (docs/contract.md#c21-shared).
    pub fn read_lock(&self, name: impl Into<String>) -> LockBuilder {
        self.lock_builder(name.into(), Claim::Shared)
    }

    /// Asks for one permit of the semaphore `name` of `permits` permits
    /// (docs/contract.md#c22-semaphores).
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> LockBuilder {
        self.lock_builder(name.into(), Claim::Permit(permits))
    }

    fn lock_builder(&self, name: String, claim: Claim) -> LockBuilder {
        LockBuilder {
            client: self.clone(),
            name,
            owner: None,
            ttl: DEFAULT_TTL,
            wait: Duration::ZERO,
            durability: None,
            claim,
            keep_alive: false,
        }
    }
}

impl LockBuilder {
    /// How long the grant lives unless renewed ([`DEFAULT_TTL`] unless set).
    pub fn ttl(mut self, ttl: Duration) -> LockBuilder {
        self.ttl = ttl;
        self
    }

    /// How long to wait in the name's queue when it is held (0: `busy` at
    /// once, the default).
    pub fn wait(mut self, wait: Duration) -> LockBuilder {
        self.wait = wait;
        self
    }

    /// Whether the grant survives a server restart (the server's default,
    /// persistent, unless set).
    pub fn durability(mut self, durability: DurabilityWord) -> LockBuilder {
        self.durability = Some(durability);
        self
    }

    /// The owner string, instead of a generated one. Callers that must
    /// exclude each other need different owners.
    pub fn owner(mut self, owner: impl Into<String>) -> LockBuilder {
        self.owner = Some(owner.into());
        self
    }

    /// Renews the grant at a third of its TTL for as long as the guard
    /// lives (docs/contract.md#c17-keep-alive).
    pub fn keep_alive(mut self) -> LockBuilder {
        self.keep_alive = true;
        self
    }

    async fn acquire(self) -> Result<Guard, Error> {
        let owner = match self.owner {
            Some(owner) => owner,
            None => generated_id("guard")?,
        };
        let (mode, permits, held) = match self.claim {
            Claim::Exclusive => (None, None, HeldMode::Exclusive),
            Claim::Shared => (Some(LockMode::Shared), None, HeldMode::Shared),
            Claim::Permit(n) => (None, Some(n), HeldMode::Permit),
        };
        let request = LockRequest {
            namespace: self.client.ns(),
            name: self.name.clone(),
            owner: Some(owner.clone()),
            ttl_ms: Some(millis(self.ttl)),
            wait_ms: (!self.wait.is_zero()).then(|| millis(self.wait)),
            durability: self.durability,
            lease_id: None,
            mode,
            permits,
        };
        let sent_at_ms = now_ms();
        let grant: GrantReply = self
            .client
            .call(
                Route::Lock,
                &request,
                Status::Acquired,
                Retry::Safe,
                self.wait,
            )
            .await?;
        let terms = Terms {
            renewed_at_ms: sent_at_ms,
            ttl_ms: millis(self.ttl),
            expires_at_ms: grant.expires_at_ms,
        };
        let subject = Subject::Grant {
            name: self.name.clone(),
            owner: owner.clone(),
            token: grant.fencing_token,
        };
        Ok(Guard {
            hold: Hold::start(self.client.clone(), subject, terms, self.keep_alive),
            client: self.client,
            name: self.name,
            owner,
            fencing_token: grant.fencing_token,
            mode: held,
        })
    }
}

impl IntoFuture for LockBuilder {
    type Output = Result<Guard, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Guard, Error>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.acquire())
    }
}

/// `{prefix}-` and 32 hex digits of secure random, as lockd generates ids.
pub(crate) fn generated_id(prefix: &str) -> Result<String, Error> {
    lockd_core::random_id(prefix).map_err(|e| Error::Config(e.to_string()))
}

/// A held lock, shared lock or permit.
///
/// - With keep-alive it is renewed at a third of its TTL, through any host
///   that answers; [`Guard::lost`] completes when it can no longer be held
///   (a renewal refused, or none succeeded before the lost deadline).
/// - Dropping it releases it: an `unlock` with its token is spawned on the
///   current tokio runtime (outside one nothing is sent, and the TTL ends
///   it). The TTL is the safety net either way.
#[derive(Debug)]
pub struct Guard {
    hold: Hold,
    client: Client,
    name: String,
    owner: String,
    fencing_token: u64,
    mode: HeldMode,
}

impl Guard {
    /// The name held.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The owner string it holds under.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The grant's fencing token: pass it to the resource the lock guards.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// `exclusive`, `shared` or `permit`.
    pub fn mode(&self) -> HeldMode {
        self.mode
    }

    /// When the grant expires unless renewed, as the store last answered:
    /// Unix epoch milliseconds.
    pub fn expires_at_ms(&self) -> u64 {
        self.hold.terms().expires_at_ms
    }

    /// [`Guard::expires_at_ms`] as a time.
    pub fn expires_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.expires_at_ms())
    }

    /// Moves the expiry to now + `ttl`; the token stays. Keep-alive renews
    /// for this TTL from now on. `not_held` or `not_owner` marks it lost.
    pub async fn extend(&self, ttl: Duration) -> Result<Grant, Error> {
        let sent_at_ms = now_ms();
        let grant = self
            .hold
            .note(self.client.extend(&self.name, &self.owner, ttl).await)?;
        if grant.fencing_token != self.fencing_token {
            return self.hold.note(Err(Error::NotOwner {
                message: format!(
                    "{} is held by this owner under another grant now (token {})",
                    self.name, grant.fencing_token
                ),
            }));
        }
        self.hold.renewed(sent_at_ms, ttl, grant.expires_at_ms);
        Ok(grant)
    }

    /// Releases it now: `unlock` with its token. `not_held` or `not_owner`
    /// if it had already ended, which includes a first attempt whose answer
    /// was lost on the way and that was sent again to another host: it is
    /// released either way.
    pub async fn release(self) -> Result<(), Error> {
        self.hold.release().await.map(drop)
    }

    /// Whether the store still shows this grant (false when it cannot
    /// answer).
    pub async fn is_held(&self) -> bool {
        self.hold.is_held().await
    }

    /// Whether it is lost, as far as this process knows (no call).
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Completes with why once it no longer holds. The future does not
    /// borrow the guard: hand it to another task.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.hold.lost()
    }
}

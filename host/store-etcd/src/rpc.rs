//! Sending requests to etcd: the request timeout, which failed requests
//! are sent again, and every failure as `unavailable`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use etcd_client::{Client, GetOptions, GetResponse, Txn, TxnOpResponse, TxnResponse};
use lockd_core::LockError;

use crate::access::Access;
use crate::endpoints::Rotation;

/// The cluster as this backend reaches it: the client, the request
/// timeout, the endpoints in rotation, and how it gets in (TLS, user).
pub(crate) struct Etcd {
    client: Client,
    /// TLS and the user, for the probes and for messages.
    access: Access,
    /// How long any one request may take (`EtcdOptions::request_timeout`).
    request_timeout: Duration,
    /// The endpoints in the client's rotation (see `endpoints.rs`).
    rotation: Rotation,
    /// What etcd said when it last refused lockd's credentials or
    /// permissions, until a request succeeds again (see [`Etcd::refused`]).
    refused: Mutex<Option<String>>,
    /// Whether `refused` holds something: read by every successful request,
    /// so they take the lock only when there is something to clear.
    refused_now: AtomicBool,
    /// Whether a request failed because etcd is out of space (its NOSPACE
    /// alarm), since the last check found no alarm (see `space.rs`).
    out_of_space: AtomicBool,
}

impl Etcd {
    pub(crate) fn new(
        client: Client,
        access: Access,
        endpoints: Vec<String>,
        request_timeout: Duration,
    ) -> Etcd {
        Etcd {
            client,
            rotation: Rotation::new(endpoints, access.tls().cloned()),
            access,
            request_timeout,
            refused: Mutex::new(None),
            refused_now: AtomicBool::new(false),
            out_of_space: AtomicBool::new(false),
        }
    }

    /// Whether a request failed with etcd's "database space exceeded"
    /// since [`Etcd::forget_out_of_space`].
    pub(crate) fn saw_out_of_space(&self) -> bool {
        self.out_of_space.load(Ordering::Acquire)
    }

    /// A check found no NOSPACE alarm: forgets the failures seen before.
    pub(crate) fn forget_out_of_space(&self) {
        self.out_of_space.store(false, Ordering::Release);
    }

    /// What etcd said when it refused lockd's credentials or permissions,
    /// if no request succeeded since (a password changed or a permission
    /// revoked while lockd runs).
    pub(crate) fn refused(&self) -> Option<String> {
        if !self.refused_now.load(Ordering::Acquire) {
            return None;
        }
        self.refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Describes `e`, noting it if it is a refusal of lockd's credentials
    /// or of a write for lack of space.
    fn describe(&self, e: &etcd_client::Error) -> String {
        if out_of_space(e) {
            self.out_of_space.store(true, Ordering::Release);
        }
        match self.access.refusal(e) {
            Some(refusal) => {
                *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(refusal.clone());
                self.refused_now.store(true, Ordering::Release);
                refusal
            }
            None => e.to_string(),
        }
    }

    /// Forgets a noted refusal: a request got through.
    fn accepted(&self) {
        if self.refused_now.swap(false, Ordering::AcqRel) {
            *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn rotation(&self) -> &Rotation {
        &self.rotation
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The failure of `what`, naming the endpoints.
    pub(crate) fn unavailable(&self, what: &str, e: impl std::fmt::Display) -> LockError {
        LockError::Unavailable(format!(
            "etcd {what} failed (endpoints {}): {e}",
            self.rotation.endpoints().join(",")
        ))
    }

    /// Runs an etcd call under the request timeout (see [`call_etcd`]),
    /// mapping every failure to `unavailable`.
    pub(crate) async fn rpc<T, F, Fut>(&self, what: &str, call: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.rpc_with(what, Resend::IfNeverSent, call).await
    }

    async fn rpc_with<T, F, Fut>(&self, what: &str, resend: Resend, call: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        call_etcd(
            what,
            self.request_timeout,
            resend,
            || self.rotation.refused(),
            &|e| self.describe(e),
            call,
        )
        .await
        .inspect(|_| self.accepted())
        .map_err(|e| self.unavailable(what, e))
    }

    /// An etcd call that changes nothing, or nothing more if applied twice
    /// (a read, a compaction), so it is sent again after any transient
    /// failure.
    pub(crate) async fn idempotent_rpc<T, F, Fut>(
        &self,
        what: &str,
        call: F,
    ) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.rpc_with(what, Resend::Reads, call).await
    }

    pub(crate) async fn txn(&self, what: &str, txn: Txn) -> Result<TxnResponse, LockError> {
        self.txn_with(what, Resend::IfNeverSent, txn).await
    }

    /// A transaction of reads only, sent again after any transient failure.
    pub(crate) async fn read_txn(&self, what: &str, txn: Txn) -> Result<TxnResponse, LockError> {
        self.txn_with(what, Resend::Reads, txn).await
    }

    async fn txn_with(
        &self,
        what: &str,
        resend: Resend,
        txn: Txn,
    ) -> Result<TxnResponse, LockError> {
        self.rpc_with(what, resend, || {
            let mut kv = self.client.kv_client();
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await
    }

    /// A range read, sent again after any transient failure.
    pub(crate) async fn range(
        &self,
        what: &str,
        key: Vec<u8>,
        options: Option<GetOptions>,
    ) -> Result<GetResponse, LockError> {
        self.rpc_with(what, Resend::Reads, || {
            let mut kv = self.client.kv_client();
            let (key, options) = (key.clone(), options.clone());
            async move { kv.get(key, options).await }
        })
        .await
    }
}

/// The answers of a transaction's get operations, in order.
pub(crate) fn gets(resp: &TxnResponse) -> Vec<GetResponse> {
    resp.op_responses()
        .into_iter()
        .filter_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g),
            _ => None,
        })
        .collect()
}

/// Whether `e` says the request never reached etcd (the connection to the
/// endpoint picked was refused), so sending it again cannot apply it twice.
/// etcd-client balances over all endpoints and may pick a dead one.
fn never_sent(e: &etcd_client::Error) -> bool {
    let etcd_client::Error::GRpcStatus(status) = e else {
        return false;
    };
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::ConnectionRefused;
        }
        source = err.source();
    }
    false
}

/// Whether `e` is a failure of the connection or of the cluster's
/// availability (a broken stream, no leader), as opposed to an answer.
fn transient(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) => true,
        etcd_client::Error::GRpcStatus(status) => {
            // Cancelled, Unknown (tonic's transport errors), Unavailable; and
            // a member whose copy of the users and roles lags the leader's
            // (just after they changed), which etcd's own client retries.
            matches!(i32::from(status.code()), 1 | 2 | 14)
                || status.message().contains("revision of auth store is old")
        }
        _ => false,
    }
}

/// Which failed calls [`call_etcd`] sends again.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Resend {
    /// Only those that [`never_sent`]: a write that reached a member may
    /// have been applied, so sending it again could apply it twice.
    IfNeverSent,
    /// Also those that failed [`transient`]ly: a read has no effect, so a
    /// read cut off by a member's death is simply read elsewhere.
    Reads,
}

/// Runs `call` (the etcd request `what`) until it answers, sending it again
/// (with a short backoff) as `resend` allows, all within `limit`, and
/// calling `on_refused` for each call an endpoint refused. The error says
/// what went wrong, as `describe` puts etcd's errors.
pub(crate) async fn call_etcd<T, F, Fut>(
    what: &str,
    limit: Duration,
    resend: Resend,
    on_refused: impl Fn(),
    describe: &(dyn Fn(&etcd_client::Error) -> String + Sync),
    mut call: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let mut last = None;
    let attempts = async {
        let mut pause = Duration::from_millis(10);
        let mut attempt: u32 = 1;
        loop {
            match call().await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let refused = never_sent(&e);
                    let resent_read = resend == Resend::Reads && transient(&e);
                    if !refused && !resent_read {
                        return Err(describe(&e));
                    }
                    if refused {
                        on_refused();
                    }
                    attempt = attempt.saturating_add(1);
                    tracing::warn!(
                        op = what,
                        attempt,
                        reason = if refused {
                            "the endpoint refused the connection"
                        } else {
                            "a read failed in transit"
                        },
                        error = %e,
                        "etcd request failed, sending it again"
                    );
                    last = Some(describe(&e));
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(250));
                }
            }
        }
    };
    let outcome = tokio::time::timeout(limit, attempts).await;
    match outcome {
        Ok(result) => result,
        Err(_) => Err({
            // No answer in time: perhaps a member cut off by a partition,
            // which refuses nothing. Have the rotation probe them.
            on_refused();
            match last {
                Some(e) => format!("no answer within {limit:?} (last error: {e})"),
                None => format!("no answer within {limit:?}"),
            }
        }),
    }
}

/// Revokes `lease`. Cleanup: a failure only leaves it to expire.
pub(crate) async fn revoke(client: &Client, lease: i64, limit: Duration) -> Result<(), String> {
    call_etcd(
        "lease revoke",
        limit,
        Resend::IfNeverSent,
        || {},
        &|e| e.to_string(),
        || {
            let mut lc = client.lease_client();
            async move { lc.revoke(lease).await }
        },
    )
    .await
    .map(drop)
}

/// Whether `e` is etcd refusing a write for lack of space (its NOSPACE
/// alarm is raised).
pub(crate) fn out_of_space(e: &etcd_client::Error) -> bool {
    e.to_string().contains("database space exceeded")
}

//! HTTP to a list of lockd hosts with failover.
//!
//! # The failover rule
//! A call tries the host that answered last first, then the others in list
//! order, at most once each per pass.
//! - A call that could **not have been sent** moves on to the next host:
//!   the connection was refused or timed out, DNS failed, the TLS handshake
//!   failed, or the host answered 503 with [`NOT_APPLIED_HEADER`] (it was
//!   draining and touched nothing). A connection that closes before the
//!   request is written is retried by the connection pool itself (hyper's
//!   pool hands an unsent request back).
//! - A call whose **outcome is unknown** (sent, then the connection broke or
//!   timed out; or 503 `unavailable` without the marker) moves on only with
//!   [`Retry::Safe`]; with [`Retry::Never`] it fails with [`Error::Unknown`]
//!   or [`Error::Unavailable`].
//! - When every host failed without sending: [`Error::Unreachable`] naming
//!   each host and why ([`Error::Tls`] when every one failed its handshake).
//! - One pass per call, except a [`Retry::Safe`] call with a
//!   [`Request::deadline`], which passes again after a short backoff until
//!   the deadline.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{Stream, StreamExt as _, TryStreamExt as _};
use lockd_api::{Method, Route};
use serde::Serialize;

use crate::error::{Error, Unreached};
use crate::servers::Servers;

/// The response header a lockd server adds to a 503 it gave before touching
/// the store (it was draining): the request was not applied, so any call may
/// be sent to another host. Its value is `1`.
pub const NOT_APPLIED_HEADER: &str = "lockd-not-applied";

/// How long connecting to one host may take unless the builder says
/// otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The first pause between two passes of a [`Retry::Safe`] call with a
/// deadline; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(20);
/// The longest pause between two passes.
const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// Whether a call whose outcome is unknown may be sent again, to another
/// host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// The call is idempotent by owner (docs/contract.md#c2-relock, #c4,
    /// #c6): a lock by a given owner without `refuse_relock`, an unlock
    /// with its token, an extend, a read, a renewal. Sending it twice is
    /// the same as once.
    Safe,
    /// Sending it twice may do something twice (a lease grant mints a new
    /// id): an unknown outcome is reported, never retried.
    Never,
}

/// One call: method, path (with its query), an optional JSON body, an
/// optional timeout and the [`Retry`] policy.
#[derive(Clone, Debug)]
pub struct Request {
    method: Method,
    path: String,
    body: Option<Bytes>,
    timeout: Option<Duration>,
    retry: Retry,
    deadline: Option<Instant>,
}

impl Request {
    /// A call of `method` to `path_and_query` (`/v1/locks?prefix=a`), with no
    /// body, no timeout, and [`Retry::Never`].
    pub fn new(method: Method, path_and_query: impl Into<String>) -> Request {
        Request {
            method,
            path: path_and_query.into(),
            body: None,
            timeout: None,
            retry: Retry::Never,
            deadline: None,
        }
    }

    /// A call of `route`'s method to its path.
    pub fn route(route: Route) -> Request {
        Request::new(route.method(), route.path())
    }

    /// With `body` as its JSON body.
    pub fn json(mut self, body: &impl Serialize) -> Result<Request, Error> {
        let bytes = serde_json::to_vec(body).map_err(|e| Error::InvalidArgument {
            message: format!("cannot encode the request to {}: {e}", self.path),
        })?;
        self.body = Some(Bytes::from(bytes));
        Ok(self)
    }

    /// With the longest time one attempt may take, connecting included,
    /// until its whole reply is read. A lock that waits in a queue needs its
    /// wait plus a margin.
    pub fn timeout(mut self, timeout: Duration) -> Request {
        self.timeout = Some(timeout);
        self
    }

    /// With `retry` as its policy.
    pub fn retry(mut self, retry: Retry) -> Request {
        self.retry = retry;
        self
    }

    /// With a deadline: a [`Retry::Safe`] call that failed on every host
    /// passes over the list again, after a short backoff, until then. It
    /// changes nothing for [`Retry::Never`].
    pub fn deadline(mut self, deadline: Instant) -> Request {
        self.deadline = Some(deadline);
        self
    }

    /// Its path with its query.
    pub fn path(&self) -> &str {
        &self.path
    }
}

/// A complete answer from one host.
#[derive(Clone, Debug)]
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// The body.
    pub body: Bytes,
    /// The host that answered (its base URL as in [`Servers::urls`]).
    pub server: String,
    /// The `Retry-After` header of a 429.
    pub retry_after: Option<Duration>,
}

/// The body of a streamed answer, read as it comes.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, Error>> + Send>>;

/// An answer whose body is a stream ([`Transport::open`]).
pub struct StreamResponse {
    /// The HTTP status code.
    pub status: u16,
    /// The host that answered.
    pub server: String,
    /// The `Retry-After` header of a 429.
    pub retry_after: Option<Duration>,
    /// The body.
    pub body: ByteStream,
}

impl StreamResponse {
    /// Reads the whole body, for an answer that is not the stream hoped for
    /// (an error body).
    pub async fn collect(mut self) -> Result<Response, Error> {
        let mut body = Vec::new();
        while let Some(chunk) = self.body.next().await {
            body.extend_from_slice(&chunk?);
        }
        Ok(Response {
            status: self.status,
            body: Bytes::from(body),
            server: self.server,
            retry_after: self.retry_after,
        })
    }
}

impl fmt::Debug for StreamResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamResponse")
            .field("status", &self.status)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// Sends calls to a list of lockd hosts with failover (the rule is in the
/// module docs). Cheap to clone; clones share connections and the host
/// that answered last. Its `Debug` never shows the token.
#[derive(Clone)]
pub struct Transport {
    inner: Arc<Inner>,
}

struct Inner {
    servers: Servers,
    http: reqwest::Client,
    /// `Bearer TOKEN`, sent with every call.
    authorization: Option<String>,
    /// The index of the host that answered last: tried first.
    preferred: AtomicUsize,
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("servers", &self.inner.servers)
            .field(
                "token",
                &if self.inner.authorization.is_some() {
                    "<set>"
                } else {
                    "<none>"
                },
            )
            .field("preferred", &self.inner.preferred.load(Ordering::Relaxed))
            .finish()
    }
}

/// Builds a [`Transport`].
#[derive(Clone)]
pub struct TransportBuilder {
    servers: Servers,
    tls: Option<Arc<rustls::ClientConfig>>,
    token: Option<String>,
    connect_timeout: Duration,
}

impl fmt::Debug for TransportBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportBuilder")
            .field("servers", &self.servers)
            .field("tls", &self.tls.is_some())
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl TransportBuilder {
    /// The TLS settings for `https://` hosts: roots, client certificate.
    /// Without them, `https://` hosts are checked against the system's
    /// roots (rustls-platform-verifier) with no client certificate.
    pub fn tls(mut self, config: Arc<rustls::ClientConfig>) -> TransportBuilder {
        self.tls = Some(config);
        self
    }

    /// The bearer token sent with every call (none if empty).
    pub fn token(mut self, token: impl Into<String>) -> TransportBuilder {
        let token = token.into();
        self.token = (!token.is_empty()).then_some(token);
        self
    }

    /// How long connecting to one host may take ([`DEFAULT_CONNECT_TIMEOUT`]
    /// unless set). A host that does not accept in time counts as not sent.
    pub fn connect_timeout(mut self, timeout: Duration) -> TransportBuilder {
        self.connect_timeout = timeout;
        self
    }

    /// The transport. [`Error::Config`] if the TLS settings cannot be used.
    pub fn build(self) -> Result<Transport, Error> {
        let mut http = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true);
        // reqwest is built without a crypto provider of its own: it always
        // gets a configuration, a placeholder (ring, no roots) when no host
        // is https:// and nothing else will use it.
        let mut config = match (self.tls, self.servers.any_https()) {
            (Some(config), _) => (*config).clone(),
            (None, true) => platform_tls()?,
            (None, false) => unused_tls()?,
        };
        if config.alpn_protocols.is_empty() {
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        }
        http = http.use_preconfigured_tls(config);
        let http = http
            .build()
            .map_err(|e| Error::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Transport {
            inner: Arc::new(Inner {
                servers: self.servers,
                http,
                authorization: self.token.map(|t| format!("Bearer {t}")),
                preferred: AtomicUsize::new(0),
            }),
        })
    }
}

/// A TLS configuration checking servers against the system's roots.
fn platform_tls() -> Result<rustls::ClientConfig, Error> {
    use rustls_platform_verifier::BuilderVerifierExt as _;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_platform_verifier())
        .map(|b| b.with_no_client_auth())
        .map_err(|e| Error::Config(format!("cannot set up TLS with the system's roots: {e}")))
}

/// A TLS configuration for a list without `https://` hosts: trusts
/// nothing, and is never used.
fn unused_tls() -> Result<rustls::ClientConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        })
        .map_err(|e| Error::Config(format!("cannot set up TLS: {e}")))
}

/// What one attempt on one host came to.
enum Attempt<T> {
    /// The host answered.
    Answered(T),
    /// Nothing reached the store: try the next host.
    NotSent(Unreached),
    /// Sent; what happened to it is not known.
    Unknown(Error),
}

impl Transport {
    /// A transport to `servers`: no TLS settings, no token, connecting for
    /// at most [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn builder(servers: Servers) -> TransportBuilder {
        TransportBuilder {
            servers,
            tls: None,
            token: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// The hosts.
    pub fn servers(&self) -> &Servers {
        &self.inner.servers
    }

    /// The host tried first by the next call: the one that answered last.
    pub fn preferred_server(&self) -> &str {
        &self.inner.servers.urls()[self.preferred()]
    }

    fn preferred(&self) -> usize {
        self.inner.preferred.load(Ordering::Relaxed) % self.inner.servers.len()
    }

    /// The order of one pass: the preferred host, then the others in list
    /// order.
    fn order(&self) -> impl Iterator<Item = usize> {
        let first = self.preferred();
        std::iter::once(first).chain((0..self.inner.servers.len()).filter(move |i| *i != first))
    }

    /// Sends `request` by the failover rule and reads the whole answer.
    /// Every answer of a host is `Ok`, refusals included (see
    /// [`Response::expect`](crate::Response::expect)), except a 503, which
    /// is failover or an error.
    pub async fn send(&self, request: Request) -> Result<Response, Error> {
        self.with_passes(&request, |index| self.attempt(index, &request))
            .await
    }

    /// Sends `request` by the failover rule and answers as soon as its
    /// headers arrive, the body to be read as it comes. Failover happens only
    /// before that; a stream that breaks later is the caller's to reopen.
    /// No [`Request::timeout`] applies to the body.
    pub async fn open(&self, request: Request) -> Result<StreamResponse, Error> {
        self.with_passes(&request, |index| self.attempt_open(index, &request))
            .await
    }

    /// Passes over the hosts as the rule says, making one attempt per host
    /// with `attempt`.
    async fn with_passes<T, F, Fut>(&self, request: &Request, attempt: F) -> Result<T, Error>
    where
        F: Fn(usize) -> Fut,
        Fut: std::future::Future<Output = Attempt<T>>,
    {
        let mut backoff = FIRST_BACKOFF;
        loop {
            let error = match self.pass(request, &attempt).await {
                Ok(answer) => return Ok(answer),
                Err(error) => error,
            };
            let again = match (request.retry, request.deadline) {
                (Retry::Safe, Some(deadline)) => Instant::now() + backoff < deadline,
                _ => false,
            };
            if !again || matches!(error, Error::Config(_)) {
                return Err(error);
            }
            tracing::debug!(%error, ?backoff, "every lockd host failed; trying again");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One pass over the hosts.
    async fn pass<T, F, Fut>(&self, request: &Request, attempt: &F) -> Result<T, Error>
    where
        F: Fn(usize) -> Fut,
        Fut: std::future::Future<Output = Attempt<T>>,
    {
        let mut unreached = Vec::new();
        let mut unknown = None;
        for index in self.order() {
            match attempt(index).await {
                Attempt::Answered(answer) => {
                    self.inner.preferred.store(index, Ordering::Relaxed);
                    return Ok(answer);
                }
                Attempt::NotSent(failure) => {
                    tracing::debug!(server = %failure.server, reason = %failure.reason,
                        "not sent; trying the next lockd host");
                    unreached.push(failure);
                }
                Attempt::Unknown(error) if request.retry == Retry::Safe => {
                    tracing::debug!(%error, "outcome unknown; a safe call tries the next host");
                    unknown = Some(error);
                }
                Attempt::Unknown(error) => return Err(error),
            }
        }
        // A host that may have applied the call outweighs the ones that
        // surely did not.
        Err(unknown.unwrap_or_else(|| unreachable(unreached)))
    }

    /// The request to host `index`, ready to send.
    fn prepare(&self, index: usize, request: &Request) -> reqwest::RequestBuilder {
        let url = format!("{}{}", self.inner.servers.urls()[index], request.path);
        let method = match request.method {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
        };
        let mut builder = self.inner.http.request(method, url);
        if let Some(authorization) = &self.inner.authorization {
            builder = builder.header(reqwest::header::AUTHORIZATION, authorization);
        }
        if let Some(body) = &request.body {
            builder = builder
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        builder
    }

    async fn attempt(&self, index: usize, request: &Request) -> Attempt<Response> {
        let server = &self.inner.servers.urls()[index];
        let mut builder = self.prepare(index, request);
        if let Some(timeout) = request.timeout {
            builder = builder.timeout(timeout);
        }
        let response = match builder.send().await {
            Ok(response) => response,
            Err(e) => return failed(server, &e),
        };
        let status = response.status().as_u16();
        let not_applied = response.headers().contains_key(NOT_APPLIED_HEADER);
        let retry_after = retry_after(&response);
        let body = match response.bytes().await {
            Ok(body) => body,
            Err(e) => return failed(server, &e),
        };
        if status == 503 {
            return unavailable(server, not_applied, &body);
        }
        Attempt::Answered(Response {
            status,
            body,
            server: server.clone(),
            retry_after,
        })
    }

    async fn attempt_open(&self, index: usize, request: &Request) -> Attempt<StreamResponse> {
        let server = &self.inner.servers.urls()[index];
        let response = match self.prepare(index, request).send().await {
            Ok(response) => response,
            Err(e) => return failed(server, &e),
        };
        let status = response.status().as_u16();
        let retry_after = retry_after(&response);
        if status == 503 {
            let not_applied = response.headers().contains_key(NOT_APPLIED_HEADER);
            return match response.bytes().await {
                Ok(body) => unavailable(server, not_applied, &body),
                Err(e) => failed(server, &e),
            };
        }
        let stream_server = server.clone();
        let body = response.bytes_stream().map_err(move |e| Error::Unknown {
            server: stream_server.clone(),
            reason: format!("the stream broke off: {}", chain(&e)),
        });
        Attempt::Answered(StreamResponse {
            status,
            server: server.clone(),
            retry_after,
            body: Box::pin(body),
        })
    }
}

/// A 503: not sent when the host says nothing was applied, else unknown.
fn unavailable<T>(server: &str, not_applied: bool, body: &[u8]) -> Attempt<T> {
    let message = message_of(body);
    if not_applied {
        Attempt::NotSent(Unreached {
            server: server.to_string(),
            reason: format!("503, not applied: {message}"),
            tls: None,
        })
    } else {
        Attempt::Unknown(Error::Unavailable {
            server: server.to_string(),
            message,
        })
    }
}

/// The `message` of an error body, or the body itself cut short.
fn message_of(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Message {
        message: String,
    }
    match serde_json::from_slice::<Message>(body) {
        Ok(m) => m.message,
        Err(_) => String::from_utf8_lossy(body).chars().take(200).collect(),
    }
}

fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let value = response.headers().get(reqwest::header::RETRY_AFTER)?;
    value
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// What a failed send means for failover.
fn failed<T>(server: &str, error: &reqwest::Error) -> Attempt<T> {
    let server = server.to_string();
    if error.is_builder() {
        // A URL the client cannot use: the same on every retry.
        return Attempt::Unknown(Error::Config(format!(
            "cannot send to {server}: {}",
            chain(error)
        )));
    }
    let tls = rustls_error(error);
    // A TLS failure is not sent whenever it shows: with TLS 1.3 the server
    // checks the client's certificate after the client's handshake is done,
    // so its refusal arrives once the request is written, but the server
    // never read it.
    if error.is_connect() || tls.is_some() {
        let reason = match &tls {
            Some(tls) => format!("TLS handshake failed: {tls}"),
            None if error.is_timeout() => "timed out connecting".to_string(),
            None => connect_reason(error),
        };
        return Attempt::NotSent(Unreached {
            server,
            reason,
            tls,
        });
    }
    let reason = if error.is_timeout() {
        "timed out waiting for the answer".to_string()
    } else {
        chain(error)
    };
    Attempt::Unknown(Error::Unknown { server, reason })
}

/// `connection refused` rather than reqwest's long chain, when it is that.
fn connect_reason(error: &reqwest::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
                _ => io.to_string(),
            };
        }
        source = e.source();
    }
    chain(error)
}

/// The error and its sources, `: `-separated.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let next = e.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = e.source();
    }
    text
}

/// The rustls error inside `error`, if the handshake failed. tokio-rustls
/// wraps it in an `io::Error`, whose `source()` skips it: look inside.
fn rustls_error(error: &reqwest::Error) -> Option<rustls::Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls.clone());
        }
        // io::Errors may wrap each other (hyper around tokio-rustls), and
        // each one's `source()` skips what it wraps: unwrap them all.
        let mut io = e.downcast_ref::<std::io::Error>();
        while let Some(inner) = io.and_then(|io| io.get_ref()) {
            if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
                return Some(tls.clone());
            }
            io = inner.downcast_ref::<std::io::Error>();
        }
        source = e.source();
    }
    alert_in_text(error)
}

/// A TLS alert the server sent, read from the error's text: on the path where
/// a TLS 1.3 server refuses the client's certificate after the handshake, the
/// rustls error reaches reqwest's chain only as text.
fn alert_in_text(error: &reqwest::Error) -> Option<rustls::Error> {
    use rustls::AlertDescription as A;
    let text = chain(error);
    let name = text.split("received fatal alert: ").nth(1)?;
    let name = name.split(|c: char| !c.is_ascii_alphanumeric()).next()?;
    let alert = [
        A::CertificateRequired,
        A::BadCertificate,
        A::UnknownCA,
        A::CertificateUnknown,
        A::CertificateExpired,
        A::CertificateRevoked,
        A::UnsupportedCertificate,
        A::AccessDenied,
        A::HandshakeFailure,
        A::ProtocolVersion,
    ]
    .into_iter()
    .find(|alert| format!("{alert:?}") == name)?;
    Some(rustls::Error::AlertReceived(alert))
}

/// Every host failed before sending: [`Error::Tls`] when all were TLS
/// handshakes, else [`Error::Unreachable`].
fn unreachable(failures: Vec<Unreached>) -> Error {
    if failures.iter().all(|f| f.tls.is_some()) {
        if let Some(first) = failures.first() {
            return Error::Tls {
                server: first.server.clone(),
                source: first.tls.clone().unwrap(),
            };
        }
    }
    Error::Unreachable { failures }
}

#[cfg(test)]
mod tests;

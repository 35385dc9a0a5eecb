//! The [`Client`]: one namespace of a lockd cluster, and the plain calls of
//! the REST API (read, unlock, extend, force-unlock, list).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lockd_api::{
    ExtendRequest, ForceUnlockRequest, FoundReply, FreeReply, GetReply, GetRequest, GrantReply,
    ListQuery, ListReply, ListedLock, ReleasedReply, Route, Status, StatusReply, UnlockRequest,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Error;
use crate::servers::Servers;
use crate::transport::{Request, Retry, Transport, DEFAULT_CONNECT_TIMEOUT};

/// How long a call may take unless [`ClientBuilder::request_timeout`] says
/// otherwise. A lock that waits in a queue gets its wait on top.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A grant: what a lock, an extend or a campaign answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The grant's fencing token (docs/contract.md#c9-tokens).
    pub fencing_token: u64,
    /// When it expires unless renewed: Unix epoch milliseconds.
    pub expires_at_ms: u64,
}

impl From<GrantReply> for Grant {
    fn from(reply: GrantReply) -> Grant {
        Grant {
            fencing_token: reply.fencing_token,
            expires_at_ms: reply.expires_at_ms,
        }
    }
}

/// A client of one lockd cluster, in one namespace. Cheap to clone: clones
/// share the connections and the host that answered last.
///
/// ```no_run
/// # async fn run() -> Result<(), lockd_native_client::Error> {
/// use std::time::Duration;
/// use lockd_native_client::Client;
///
/// let client = Client::builder()
///     .servers(["http://10.0.0.1:7450", "http://10.0.0.2:7450"])
///     .namespace("billing")
///     .build()?;
/// let guard = client.lock("nightly-report").ttl(Duration::from_secs(10)).keep_alive().await?;
/// println!("holding with fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) transport: Transport,
    pub(crate) namespace: Option<String>,
    pub(crate) request_timeout: Duration,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("transport", &self.inner.transport)
            .field("namespace", &self.inner.namespace)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Client`].
#[derive(Default)]
pub struct ClientBuilder {
    servers: Vec<String>,
    token: Option<String>,
    tls: Option<Arc<rustls::ClientConfig>>,
    namespace: Option<String>,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("servers", &self.servers)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("tls", &self.tls.is_some())
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// The hosts, each an `http://` or `https://` URL (see
    /// [`Servers::parse`]); failover goes through them in this order.
    pub fn servers<I, S>(mut self, urls: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.servers = urls.into_iter().map(|u| u.as_ref().to_string()).collect();
        self
    }

    /// The bearer token sent with every call.
    pub fn token(mut self, token: impl Into<String>) -> ClientBuilder {
        self.token = Some(token.into());
        self
    }

    /// The TLS settings for `https://` hosts (roots, a client certificate).
    pub fn tls(mut self, config: Arc<rustls::ClientConfig>) -> ClientBuilder {
        self.tls = Some(config);
        self
    }

    /// The namespace of every call (`default` unless set).
    pub fn namespace(mut self, namespace: impl Into<String>) -> ClientBuilder {
        self.namespace = Some(namespace.into());
        self
    }

    /// How long connecting to one host may take before the next is tried.
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.connect_timeout = Some(timeout);
        self
    }

    /// How long one call to one host may take ([`DEFAULT_REQUEST_TIMEOUT`]
    /// unless set), a lock's wait not counted.
    pub fn request_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.request_timeout = Some(timeout);
        self
    }

    /// The client. [`Error::Config`] for a bad server list (none, empty,
    /// malformed, repeated, or mixing schemes with TLS settings given).
    pub fn build(self) -> Result<Client, Error> {
        if self.servers.is_empty() {
            return Err(Error::Config(
                "no lockd server given; name at least one, e.g. http://127.0.0.1:7450".to_string(),
            ));
        }
        let servers = Servers::from_urls(&self.servers)?;
        servers.check_tls(self.tls.is_some())?;
        let mut transport = Transport::builder(servers)
            .connect_timeout(self.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT));
        if let Some(tls) = self.tls {
            transport = transport.tls(tls);
        }
        if let Some(token) = self.token {
            transport = transport.token(token);
        }
        Ok(Client::from_transport(
            transport.build()?,
            self.namespace,
            self.request_timeout.unwrap_or(DEFAULT_REQUEST_TIMEOUT),
        ))
    }
}

impl Client {
    /// A builder: give it the servers, then [`ClientBuilder::build`].
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A client over a transport made elsewhere (the CLI's), in `namespace`
    /// (`None`: `default`).
    pub fn from_transport(
        transport: Transport,
        namespace: Option<String>,
        request_timeout: Duration,
    ) -> Client {
        Client {
            inner: Arc::new(ClientInner {
                transport,
                namespace,
                request_timeout,
            }),
        }
    }

    /// Its transport, for calls this client has no method for.
    pub fn transport(&self) -> &Transport {
        &self.inner.transport
    }

    /// The namespace it names in every call (`None`: the server's
    /// `default`).
    pub fn namespace(&self) -> Option<&str> {
        self.inner.namespace.as_deref()
    }

    pub(crate) fn ns(&self) -> Option<String> {
        self.inner.namespace.clone()
    }

    /// `POST`s `body` to `route` and reads the answer as `T` if its status
    /// is `expected`. `extra` is added to the request timeout (a wait).
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        route: Route,
        body: &impl Serialize,
        expected: Status,
        retry: Retry,
        extra: Duration,
    ) -> Result<T, Error> {
        let request = Request::route(route)
            .json(body)?
            .retry(retry)
            .timeout(self.inner.request_timeout.saturating_add(extra));
        self.inner
            .transport
            .send(request)
            .await?
            .expect(route, expected)
    }

    /// The holder of `name` (the most recent grant, whatever its mode), or
    /// `None` when it is free (docs/contract.md#c7-get).
    pub async fn get(&self, name: &str) -> Result<Option<FoundReply>, Error> {
        Ok(match self.describe(name).await? {
            GetReply::Found(found) => Some(found),
            GetReply::Free(_) => None,
        })
    }

    /// The full state of `name`: every holder with its mode, the queue's
    /// length, a lock-delay in force.
    pub async fn describe(&self, name: &str) -> Result<GetReply, Error> {
        let body = GetRequest {
            namespace: self.ns(),
            name: name.to_string(),
        };
        let request = Request::route(Route::Get)
            .json(&body)?
            .retry(Retry::Safe)
            .timeout(self.inner.request_timeout);
        let response = self.inner.transport.send(request).await?;
        if response.is_nothing_found(Route::Get) {
            return Ok(GetReply::Free(response.decode::<FreeReply>(Route::Get)?));
        }
        match response.reply(Route::Get)?.status() {
            Status::Found => Ok(GetReply::Found(response.decode(Route::Get)?)),
            _ => Err(response.refusal(Route::Get)),
        }
    }

    /// The live locks whose names start with `prefix`, sorted by name.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ListedLock>, Error> {
        let query = ListQuery {
            namespace: self.ns(),
            prefix: Some(prefix.to_string()),
        };
        let request = Request::new(Route::List.method(), query.path())
            .retry(Retry::Safe)
            .timeout(self.inner.request_timeout);
        let response = self.inner.transport.send(request).await?;
        let reply: ListReply = response.expect(Route::List, Status::Found)?;
        Ok(reply.locks)
    }

    /// Releases `name` held by `owner`; with `fencing_token`, only that
    /// grant (docs/contract.md#c4-unlock, #c5-stale-unlock).
    pub async fn unlock(
        &self,
        name: &str,
        owner: &str,
        fencing_token: Option<u64>,
    ) -> Result<(), Error> {
        let body = UnlockRequest {
            namespace: self.ns(),
            name: name.to_string(),
            owner: owner.to_string(),
            fencing_token,
        };
        // By owner alone a retry could release a later grant of the same
        // owner: only an unlock naming its grant is safe to send twice.
        let retry = match fencing_token {
            Some(_) => Retry::Safe,
            None => Retry::Never,
        };
        let _: StatusReply = self
            .call(
                Route::Unlock,
                &body,
                Status::Unlocked,
                retry,
                Duration::ZERO,
            )
            .await?;
        Ok(())
    }

    /// Moves the expiry of `name` held by `owner` to now + `ttl`
    /// (docs/contract.md#c6-extend).
    pub async fn extend(&self, name: &str, owner: &str, ttl: Duration) -> Result<Grant, Error> {
        let body = ExtendRequest {
            namespace: self.ns(),
            name: name.to_string(),
            owner: owner.to_string(),
            ttl_ms: millis(ttl),
        };
        let grant: GrantReply = self
            .call(
                Route::Extend,
                &body,
                Status::Extended,
                Retry::Safe,
                Duration::ZERO,
            )
            .await?;
        Ok(grant.into())
    }

    /// Releases `name` whoever holds it (docs/contract.md#c19-force-unlock);
    /// answers the holder it released. Needs role `admin` when tokens are
    /// configured.
    pub async fn force_unlock(&self, name: &str) -> Result<ReleasedReply, Error> {
        let body = ForceUnlockRequest {
            namespace: self.ns(),
            name: name.to_string(),
        };
        // Sent twice, the second could release the next holder.
        self.call(
            Route::ForceUnlock,
            &body,
            Status::Released,
            Retry::Never,
            Duration::ZERO,
        )
        .await
    }
}

/// A duration as whole milliseconds, saturating.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_needs_a_good_server_list() {
        for (builder, needle) in [
            (Client::builder(), "no lockd server given"),
            (
                Client::builder().servers(["http://a:1", ""]),
                "entry 2 of 2 of the server list is empty",
            ),
            (
                Client::builder().servers(["http://a:1", "http://a:1/"]),
                "repeats entry 1",
            ),
        ] {
            let error = builder.build().unwrap_err();
            assert!(
                matches!(&error, Error::Config(m) if m.contains(needle)),
                "{error:?}"
            );
        }
        let client = Client::builder()
            .servers(["http://a:1"])
            .token("s3cret")
            .namespace("ns")
            .build()
            .unwrap();
        assert_eq!(client.namespace(), Some("ns"));
        let debug = format!("{client:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
    }
}

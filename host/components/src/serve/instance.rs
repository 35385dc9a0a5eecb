//! What one component instance is made of and bounded by: its limits
//! from lockd.toml's `[limits]`, the recipe of its store (WASI with the
//! component's environment, the lock capability in its namespace, outbound
//! HTTP to the hosts it may reach, the memory cap and epoch deadline), and
//! the request as a guest sees it. Both ways of serving a component (a
//! fresh WASIp2 instance per request in [`super`], reused WASIp3 instances
//! in [`super::p3`]) build their stores here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hyper::Request;
use lockd_core::LockService;
use lockd_server::config::{
    LockdConfig, DEFAULT_INSTANCE_CONCURRENT_REQUESTS, DEFAULT_INSTANCE_MEMORY_BYTES,
    DEFAULT_INSTANCE_REQUESTS, DEFAULT_REQUEST_TIMEOUT_MS, DEFAULT_RESPONSE_BODY_BYTES,
};
use lockd_server::serve::OverTls;
use lockd_wasm::{LockCtx, LockCtxView, LockView};
use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use crate::epoch;
use crate::key_value::{KeyValueStores, KvCtx, KvCtxView, KvView};
use crate::variables::{VariablesCtx, VariablesView};

/// Per-instance bounds.
#[derive(Clone, Copy, Debug)]
pub(super) struct InstanceLimits {
    pub(super) memory_bytes: usize,
    pub(super) timeout: Duration,
    /// Largest response body of a WASIp3 component, which is collected
    /// before it is sent (its store's event loop drives the body).
    pub(super) response_body_bytes: usize,
    /// How many requests one WASIp3 instance serves.
    pub(super) reuse: InstanceReuse,
}

/// How many requests one WASIp3 instance serves: at most
/// `concurrent_requests` at once, `requests` in all (each at least 1).
#[derive(Clone, Copy, Debug)]
pub(super) struct InstanceReuse {
    pub(super) concurrent_requests: usize,
    pub(super) requests: usize,
}

impl InstanceLimits {
    /// The bounds lockd.toml's `[limits]` sets, with the defaults for what
    /// it leaves out.
    pub(super) fn from_config(config: &LockdConfig) -> anyhow::Result<InstanceLimits> {
        let limits = &config.limits;
        Ok(InstanceLimits {
            memory_bytes: limits
                .instance_memory_bytes
                .unwrap_or(DEFAULT_INSTANCE_MEMORY_BYTES),
            timeout: Duration::from_millis(
                limits
                    .request_timeout_ms
                    .unwrap_or(DEFAULT_REQUEST_TIMEOUT_MS),
            ),
            response_body_bytes: limits
                .response_body_bytes
                .unwrap_or(DEFAULT_RESPONSE_BODY_BYTES),
            reuse: InstanceReuse {
                concurrent_requests: at_least_one(
                    "instance_concurrent_requests",
                    limits.instance_concurrent_requests,
                    DEFAULT_INSTANCE_CONCURRENT_REQUESTS,
                )?,
                requests: at_least_one(
                    "instance_requests",
                    limits.instance_requests,
                    DEFAULT_INSTANCE_REQUESTS,
                )?,
            },
        })
    }
}

/// `[limits] key`'s `value`, or `default`; 0 is refused.
fn at_least_one(key: &str, value: Option<usize>, default: usize) -> anyhow::Result<usize> {
    match value {
        Some(0) => anyhow::bail!(
            "[limits] {key} in lockd.toml is 0; it must be at least 1 \
             (1 gives every WASIp3 request an instance of its own)"
        ),
        Some(n) => Ok(n),
        None => Ok(default),
    }
}

/// What every store of one component is made of.
pub(super) struct StoreRecipe {
    pub(super) namespace: String,
    pub(super) service: LockService,
    pub(super) outbound: Arc<Vec<OutboundRule>>,
    /// The manifest's `environment` for this component.
    pub(super) environment: Vec<(String, String)>,
    pub(super) limits: InstanceLimits,
    /// The app's key-value stores, and the labels this component lists.
    pub(super) key_value: Arc<KeyValueStores>,
    pub(super) key_value_labels: Arc<Vec<String>>,
    /// This component's variables, resolved.
    pub(super) variables: Arc<BTreeMap<String, String>>,
}

/// Everything one request's store holds.
pub(super) struct RequestState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    hooks: OutboundHooks,
    table: ResourceTable,
    /// The lock capability (a reused WASIp3 instance tells it which
    /// request's task to abandon).
    pub(super) locks: LockCtx,
    key_value: KvCtx,
    variables: VariablesCtx,
    limits: StoreLimits,
}

impl KvView for RequestState {
    fn kv_ctx(&mut self) -> KvCtxView<'_> {
        KvCtxView {
            ctx: &mut self.key_value,
            table: &mut self.table,
        }
    }
}

impl VariablesView for RequestState {
    fn variables_ctx(&mut self) -> &mut VariablesCtx {
        &mut self.variables
    }
}

impl WasiView for RequestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for RequestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

impl LockView for RequestState {
    fn lock_ctx(&mut self) -> LockCtxView<'_> {
        LockCtxView {
            ctx: &mut self.locks,
            table: &mut self.table,
        }
    }
}

impl StoreRecipe {
    /// A fresh store: WASI with the component's environment, its outbound
    /// rules, its namespace's locks, the memory cap. Its epoch deadline is
    /// the request timeout; a reused (WASIp3) instance changes that.
    pub(super) fn store(&self, engine: &Engine) -> Store<RequestState> {
        let limits = self.limits;
        let state = RequestState {
            wasi: WasiCtxBuilder::new()
                .inherit_stdout()
                .inherit_stderr()
                .envs(&self.environment)
                .build(),
            http: WasiHttpCtx::new(),
            hooks: OutboundHooks {
                rules: self.outbound.clone(),
            },
            table: ResourceTable::new(),
            locks: LockCtx::new(self.service.clone(), self.namespace.clone()),
            key_value: KvCtx::new(self.key_value.clone(), self.key_value_labels.clone()),
            variables: VariablesCtx {
                values: self.variables.clone(),
            },
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes)
                .trap_on_grow_failure(true)
                .build(),
        };
        let mut store = Store::new(engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(epoch::deadline_ticks(limits.timeout));
        store
    }
}

/// Outgoing HTTP requests from components, allowed only to the hosts their
/// `allowed_outbound_hosts` names (none by default).
struct OutboundHooks {
    rules: Arc<Vec<OutboundRule>>,
}

impl WasiHttpHooks for OutboundHooks {
    fn send_request(
        &mut self,
        request: hyper::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn std::future::Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<
        dyn std::future::Future<
                Output = Result<
                    (
                        hyper::Response<wasmtime_wasi_http::WasiBody>,
                        Box<
                            dyn std::future::Future<Output = Result<(), wasmtime_wasi_http::Error>>
                                + Send,
                        >,
                    ),
                    wasmtime_wasi_http::Error,
                >,
            > + Send,
    > {
        drop(fut);
        let uri = request.uri();
        let scheme = uri.scheme_str().unwrap_or("https").to_string();
        let host = uri.host().unwrap_or("").to_ascii_lowercase();
        let port = uri
            .port_u16()
            .unwrap_or(if scheme == "http" { 80 } else { 443 });
        if !self.rules.iter().any(|r| r.allows(&scheme, &host, port)) {
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        Box::new(async move {
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                response.map(http_body_util::BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn std::future::Future<Output = _> + Send>,
            ))
        })
    }
}

/// `req` with the `https` scheme and its `Host` as the authority, if it came
/// over TLS as HTTP/1.1: a WASIp3 guest reads the scheme from the URI, which
/// HTTP/1.1 requests carry as a bare path (HTTP/2 ones are complete).
pub(super) fn with_https_scheme<B>(mut req: Request<B>) -> Request<B> {
    if req.extensions().get::<OverTls>().is_none() || req.uri().scheme().is_some() {
        return req;
    }
    let Some(host) = req
        .headers()
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok())
    else {
        return req;
    };
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    if let Ok(uri) = hyper::Uri::builder()
        .scheme("https")
        .authority(host)
        .path_and_query(path)
        .build()
    {
        *req.uri_mut() = uri;
    }
    req
}

/// One `allowed_outbound_hosts` entry: `scheme://host[:port]`, where each
/// part may be `*` and the host may be `*.suffix`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct OutboundRule {
    scheme: String,
    host: String,
    port: Option<String>,
}

impl OutboundRule {
    pub(super) fn parse(text: &str) -> anyhow::Result<Self> {
        let (scheme, rest) = text
            .split_once("://")
            .with_context(|| format!("{text:?} is not scheme://host[:port]"))?;
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) => (h, Some(p.to_string())),
            None => (rest, None),
        };
        if host.is_empty() {
            anyhow::bail!("{text:?} has no host");
        }
        Ok(OutboundRule {
            scheme: scheme.to_ascii_lowercase(),
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    fn allows(&self, scheme: &str, host: &str, port: u16) -> bool {
        let scheme_ok = self.scheme == "*" || self.scheme == scheme;
        let host_ok = self.host == "*"
            || self.host == host
            || self
                .host
                .strip_prefix("*.")
                .is_some_and(|suffix| host.ends_with(&format!(".{suffix}")));
        let default_port = if scheme == "http" { 80 } else { 443 };
        let port_ok = match self.port.as_deref() {
            Some("*") => true,
            Some(p) => p.parse() == Ok(port),
            None => port == default_port,
        };
        scheme_ok && host_ok && port_ok
    }
}

#[cfg(test)]
mod tests {
    use hyper::Request;

    use super::{at_least_one, with_https_scheme, OutboundRule, OverTls};

    #[test]
    fn instance_reuse_limits_are_at_least_one() {
        assert_eq!(at_least_one("instance_requests", None, 128).unwrap(), 128);
        assert_eq!(at_least_one("instance_requests", Some(1), 128).unwrap(), 1);
        let zero = at_least_one("instance_requests", Some(0), 128).unwrap_err();
        assert!(
            zero.to_string()
                .contains("[limits] instance_requests in lockd.toml is 0"),
            "{zero}"
        );
    }

    #[test]
    fn requests_over_tls_get_the_https_scheme() {
        let over_tls = |uri: &str, host: Option<&str>| {
            let mut req = Request::builder().uri(uri);
            if let Some(host) = host {
                req = req.header("host", host);
            }
            let mut req = req.body(()).unwrap();
            req.extensions_mut().insert(OverTls);
            with_https_scheme(req).uri().to_string()
        };
        assert_eq!(
            over_tls("/jobs/1?x=2", Some("h:8443")),
            "https://h:8443/jobs/1?x=2"
        );
        // HTTP/2's complete URIs, and a request without Host, stay as they are.
        assert_eq!(over_tls("https://a:1/p", Some("b:2")), "https://a:1/p");
        assert_eq!(over_tls("/p", None), "/p");
        // Plain HTTP is left alone.
        let plain = Request::builder()
            .uri("/p")
            .header("host", "h")
            .body(())
            .unwrap();
        assert_eq!(with_https_scheme(plain).uri().to_string(), "/p");
    }

    #[test]
    fn outbound_rules() {
        let rule = |t: &str| OutboundRule::parse(t).unwrap();
        assert!(rule("https://example.com").allows("https", "example.com", 443));
        assert!(!rule("https://example.com").allows("http", "example.com", 80));
        assert!(!rule("https://example.com").allows("https", "example.com", 8443));
        assert!(rule("https://example.com:8443").allows("https", "example.com", 8443));
        assert!(rule("http://*:*").allows("http", "anything", 1234));
        assert!(rule("*://*.example.com:*").allows("https", "api.example.com", 1));
        assert!(!rule("*://*.example.com:*").allows("https", "example.com.evil", 1));
        assert!(OutboundRule::parse("example.com").is_err());
    }
}

//! Who may call what on lockd's own routes (docs/operating.md#authentication).
//!
//! A caller presents a token; the server keeps only each token's SHA-256
//! ([`Credential`]), finds the caller's by hashing what it sent and
//! comparing digests in constant time ([`Credentials::identify`]), and then
//! checks two things in one place before a handler runs: the token's
//! [`Role`] against what the route does ([`Caller::check_route`]), and its
//! namespaces ([`Scope`]) against the namespace the request names
//! ([`Caller::check_namespace`]). A refusal ([`Forbidden`]) names the token
//! and what it lacks, never the secret. A token may also have a rate
//! limit ([`crate::rate_limit`]), checked once per request after the
//! token is known ([`Caller::admit`]).
//!
//! With no token configured at all, every caller is [`Caller::Anyone`] and
//! nothing is checked.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use lockd_api::Route;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::rate_limit::{self, RateLimit, Throttled, TokenLimiter};

/// The name of the credential the server's `--auth-token` (or
/// `LOCKD_AUTH_TOKEN`) makes: an admin token over every namespace.
pub const FLAG_TOKEN_NAME: &str = "auth-token";

/// Bytes of a token made by [`new_token`] (256 bits).
pub const TOKEN_BYTES: usize = 32;

/// What a token may do. Each role may do everything the one before it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Read: get, list, lease get, events, namespaces.
    Reader,
    /// Read, and hold locks: lock, unlock, extend, leases (`lockd exec`).
    Locker,
    /// Everything, force-unlock included.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 3] = [Role::Reader, Role::Locker, Role::Admin];

    /// Its word in lockd.toml.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Locker => "locker",
            Role::Admin => "admin",
        }
    }

    /// The role whose word is `word`; the error lists the words.
    pub fn parse(word: &str) -> Result<Role, String> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == word)
            .ok_or_else(|| format!("role {word:?} is not one of reader, locker, admin"))
    }

    /// The weakest role that may call `route`, and what the call does (for
    /// messages); `None` for a route that needs no token (`/healthz`,
    /// `/livez`, `/readyz`: probes).
    pub fn needed_for(route: Route) -> Option<(Role, &'static str)> {
        Some(match route {
            Route::Healthz | Route::Livez | Route::Readyz => return None,
            Route::Get => (Role::Reader, "get locks"),
            Route::List => (Role::Reader, "list locks"),
            Route::LeaseGet => (Role::Reader, "get leases"),
            Route::Events => (Role::Reader, "read events"),
            Route::Namespaces => (Role::Reader, "list namespaces"),
            Route::Metrics => (Role::Reader, "read /metrics"),
            Route::OpenApi => (Role::Reader, "read /openapi.json"),
            Route::Lock => (Role::Locker, "lock"),
            Route::Unlock => (Role::Locker, "unlock"),
            Route::Extend => (Role::Locker, "extend"),
            Route::LeaseGrant => (Role::Locker, "grant leases"),
            Route::LeaseRefresh => (Role::Locker, "refresh leases"),
            Route::LeaseRevoke => (Role::Locker, "revoke leases"),
            Route::Leader => (Role::Reader, "ask who leads"),
            Route::Campaign => (Role::Locker, "campaign"),
            Route::Proclaim => (Role::Locker, "proclaim"),
            Route::Resign => (Role::Locker, "resign"),
            Route::ForceUnlock => (Role::Admin, "force-unlock"),
            Route::Snapshot => (Role::Admin, "take snapshots"),
        })
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of a token's `namespaces`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespacePattern {
    /// `"*"`: every namespace.
    Every,
    /// `"deploy-*"`: every namespace starting with `deploy-`.
    Prefix(String),
    /// `"ci"`: that namespace only.
    Exact(String),
}

impl NamespacePattern {
    /// Parses an entry: `*`, a prefix ending in `*`, or an exact name. A
    /// `*` anywhere else, or an empty entry, is an error saying so.
    pub fn parse(text: &str) -> Result<NamespacePattern, String> {
        let pattern = match text.strip_suffix('*') {
            _ if text.is_empty() => return Err("a namespace pattern is empty".to_string()),
            Some("") => NamespacePattern::Every,
            Some(prefix) => NamespacePattern::Prefix(prefix.to_string()),
            None => NamespacePattern::Exact(text.to_string()),
        };
        let inner = match &pattern {
            NamespacePattern::Every => "",
            NamespacePattern::Prefix(s) | NamespacePattern::Exact(s) => s,
        };
        if inner.contains('*') {
            return Err(format!(
                "namespace pattern {text:?} has a * that is not at its end; \
                 write an exact name, a prefix ending in *, or \"*\""
            ));
        }
        Ok(pattern)
    }

    fn matches(&self, namespace: &str) -> bool {
        match self {
            NamespacePattern::Every => true,
            NamespacePattern::Prefix(prefix) => namespace.starts_with(prefix.as_str()),
            NamespacePattern::Exact(name) => namespace == name,
        }
    }
}

impl fmt::Display for NamespacePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NamespacePattern::Every => f.write_str("*"),
            NamespacePattern::Prefix(prefix) => write!(f, "{prefix}*"),
            NamespacePattern::Exact(name) => f.write_str(name),
        }
    }
}

/// The namespaces a token may use. Cheap to clone (an event stream keeps
/// one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope(Arc<[NamespacePattern]>);

impl Scope {
    /// Every namespace.
    pub fn every() -> Scope {
        Scope(Arc::new([NamespacePattern::Every]))
    }

    /// The namespaces `patterns` match.
    pub fn new(patterns: Vec<NamespacePattern>) -> Scope {
        Scope(patterns.into())
    }

    /// Whether `namespace` is one of them.
    pub fn allows(&self, namespace: &str) -> bool {
        self.0.iter().any(|p| p.matches(namespace))
    }

    /// Whether it is every namespace (`"*"`).
    pub fn is_every(&self) -> bool {
        self.0.contains(&NamespacePattern::Every)
    }

    /// The exact names among the patterns.
    pub fn exact_names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|p| match p {
            NamespacePattern::Exact(name) => Some(name.as_str()),
            _ => None,
        })
    }
}

/// `ci, deploy-*`
impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pattern) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{pattern}")?;
        }
        Ok(())
    }
}

/// A token the server accepts: its name, the SHA-256 of its secret, its
/// namespaces, its role and its rate limit. Its `Debug` leaves the digest
/// out. Clones share the rate limit's bucket.
#[derive(Clone)]
pub struct Credential {
    name: String,
    digest: [u8; 32],
    scope: Scope,
    role: Role,
    limiter: TokenLimiter,
}

impl Credential {
    /// The token whose SHA-256 is `digest`.
    pub fn new(name: impl Into<String>, digest: [u8; 32], scope: Scope, role: Role) -> Self {
        Credential {
            name: name.into(),
            digest,
            scope,
            role,
            limiter: TokenLimiter::default(),
        }
    }

    /// This credential limited to `limit` (`None`: no limit), with a full
    /// bucket.
    pub fn with_rate_limit(mut self, limit: Option<RateLimit>) -> Self {
        self.limiter = TokenLimiter::new(limit);
        self
    }

    /// Its rate limit, if it has one.
    pub fn rate_limit(&self) -> Option<RateLimit> {
        self.limiter.limit()
    }

    /// Its rate limiter: the bucket and the count of refused requests.
    pub fn limiter(&self) -> &TokenLimiter {
        &self.limiter
    }

    /// The credential of the server's `--auth-token`: admin over `"*"`.
    pub fn from_flag(token: &str) -> Self {
        Credential::new(FLAG_TOKEN_NAME, digest(token), Scope::every(), Role::Admin)
    }

    /// Its name, as logs and messages show it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its namespaces.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Its role.
    pub fn role(&self) -> Role {
        self.role
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("name", &self.name)
            .field("scope", &self.scope.to_string())
            .field("role", &self.role)
            .field("rate_limit", &self.limiter.limit())
            .finish_non_exhaustive()
    }
}

/// Every token the server accepts; none means no authentication.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    tokens: Vec<Credential>,
}

impl Credentials {
    /// These tokens (names are unique: lockd.toml's validation sees to it).
    pub fn new(tokens: Vec<Credential>) -> Self {
        Credentials { tokens }
    }

    /// Whether no token is configured: every caller may do everything.
    pub fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The tokens.
    pub fn tokens(&self) -> &[Credential] {
        &self.tokens
    }

    /// The credential whose token is `token`. The digest of `token` is
    /// compared with every credential's in constant time, so the time taken
    /// tells nothing of how close a guess came, nor which entry matched.
    pub fn identify(&self, token: &str) -> Option<&Credential> {
        let given = digest(token);
        let mut found = None;
        for credential in &self.tokens {
            if bool::from(credential.digest.ct_eq(&given)) {
                found = Some(credential);
            }
        }
        found
    }

    /// Carries the rate limiters of `previous` (the set in force until now)
    /// over to these tokens, by name: a token whose limit is unchanged keeps
    /// its bucket, one whose limit changed starts with a fresh one, and each
    /// name's count of refusals goes on. Returns the names whose limit
    /// changed (new names not among them), with their new limits.
    pub fn carry_over(&mut self, previous: &Credentials) -> Vec<(&str, Option<RateLimit>)> {
        let mut changed = Vec::new();
        for credential in &mut self.tokens {
            let Some(old) = previous.tokens.iter().find(|c| c.name == credential.name) else {
                continue;
            };
            if credential.limiter.carry_over(&old.limiter) {
                changed.push((credential.name.as_str(), credential.limiter.limit()));
            }
        }
        changed
    }

    /// Appends the rate-limit metrics of these tokens to `out`
    /// ([`rate_limit::render_metrics`]): refusals by token name, and each
    /// limit.
    pub fn render_rate_limits(&self, out: &mut String) {
        let tokens = self.tokens.iter().map(|c| (c.name(), c.limiter()));
        rate_limit::render_metrics(tokens, out);
    }
}

/// The tokens in force while the server runs: SIGHUP replaces them with
/// lockd.toml's (`lockd serve`), and every request is checked against the
/// set current when it arrives. Clones share one set.
#[derive(Clone, Debug, Default)]
pub struct LiveCredentials(Arc<RwLock<Arc<Credentials>>>);

impl LiveCredentials {
    /// `credentials` in force.
    pub fn new(credentials: Credentials) -> Self {
        LiveCredentials(Arc::new(RwLock::new(Arc::new(credentials))))
    }

    /// The tokens in force now.
    pub fn current(&self) -> Arc<Credentials> {
        // A panic while the lock was held cannot leave a half-written set:
        // a set is replaced whole.
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts `next` in force for every request from now on (requests under
    /// way keep the set they started with). Refused when it would turn
    /// authentication off (tokens now, none in `next`): an edit that
    /// dropped the last `[[auth.tokens]]` entry must not open every
    /// namespace to anyone; a restart can. Rate limits carry over by name
    /// ([`Credentials::carry_over`]); each changed one is logged.
    pub fn replace(&self, mut next: Credentials) -> Result<(), String> {
        let mut current = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if next.is_open() && !current.is_open() {
            return Err(
                "the new configuration has no token, which would let anyone call \
                        anything; restart the server to turn authentication off"
                    .to_string(),
            );
        }
        for (name, limit) in next.carry_over(&current) {
            match limit {
                Some(limit) => tracing::info!(
                    token = name,
                    %limit,
                    "rate limit changed; the token starts with a full bucket"
                ),
                None => tracing::info!(token = name, "rate limit removed"),
            }
        }
        *current = Arc::new(next);
        Ok(())
    }
}

/// The header Dapr's SDKs send their token in (`DAPR_API_TOKEN`).
pub const DAPR_TOKEN_HEADER: &str = "dapr-api-token";

/// The token a request presents in its headers: `Authorization: Bearer T`,
/// else `dapr-api-token: T`. `None` if it presents neither.
pub fn token_from_headers(headers: &hyper::HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then_some(token.trim_start())
        });
    bearer.or_else(|| {
        headers
            .get(DAPR_TOKEN_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    })
}

/// Why a request is not authenticated (401 `unauthorized`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unauthenticated {
    /// It presents no token.
    Missing,
    /// It presents a token the server does not know.
    Unknown,
}

impl Unauthenticated {
    /// What the refusal says, for the client (never the token).
    pub fn message(self) -> &'static str {
        match self {
            Unauthenticated::Missing => {
                "this server requires a bearer token: send 'Authorization: Bearer <token>' \
                 (the lockd CLI takes --auth-token or LOCKD_AUTH_TOKEN)"
            }
            Unauthenticated::Unknown => {
                "the bearer token is wrong (not one this server knows); use a token of its \
                 --auth-token or of lockd.toml's [[auth.tokens]]"
            }
        }
    }

    /// A word for log lines.
    pub fn reason(self) -> &'static str {
        match self {
            Unauthenticated::Missing => "no token",
            Unauthenticated::Unknown => "unknown token",
        }
    }
}

impl Credentials {
    /// The caller of a request that presents `token` (from
    /// [`token_from_headers`], or a query parameter where one is allowed).
    /// With no token configured, [`Caller::Anyone`] whatever it presents.
    pub fn authenticate(&self, token: Option<&str>) -> Result<Caller<'_>, Unauthenticated> {
        if self.is_open() {
            return Ok(Caller::Anyone);
        }
        let token = token.ok_or(Unauthenticated::Missing)?;
        self.identify(token)
            .map(Caller::Token)
            .ok_or(Unauthenticated::Unknown)
    }
}

/// Who is calling, once the token is known.
#[derive(Clone, Copy, Debug)]
pub enum Caller<'a> {
    /// No token is configured: anyone may do anything.
    Anyone,
    /// The caller presented this token.
    Token(&'a Credential),
}

/// A known token asked for something outside its role or namespaces: the
/// message of a 403 `forbidden`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forbidden(pub String);

impl fmt::Display for Forbidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'a> Caller<'a> {
    /// The token's name for logs, `anyone` without authentication.
    pub fn name(&self) -> &'a str {
        match self {
            Caller::Anyone => "anyone",
            Caller::Token(credential) => credential.name(),
        }
    }

    /// Whether the caller may call `route` at all: its role, and for
    /// `/metrics` (which counts every namespace) namespaces `"*"`.
    pub fn check_route(&self, route: Route) -> Result<(), Forbidden> {
        let (Caller::Token(credential), Some((needed, what))) = (self, Role::needed_for(route))
        else {
            return Ok(());
        };
        if credential.role < needed {
            return Err(Forbidden(format!(
                "token {:?} (role {}) may not {what}; it needs role {needed}",
                credential.name, credential.role
            )));
        }
        if route == Route::Metrics && !credential.scope.is_every() {
            return Err(Forbidden(format!(
                "token {:?} may not read /metrics, which counts every namespace; \
                 it needs namespaces [\"*\"] (its namespaces are {})",
                credential.name, credential.scope
            )));
        }
        Ok(())
    }

    /// Whether the caller's token is within its rate limit now: takes one
    /// request from its bucket, or refuses it (counted). Always admitted
    /// without a token ([`Caller::Anyone`]) or a limit.
    pub fn admit(&self) -> Result<(), Throttled> {
        match self {
            Caller::Anyone => Ok(()),
            Caller::Token(credential) => credential.limiter.admit(),
        }
    }

    /// Whether the caller may use `namespace`.
    pub fn check_namespace(&self, namespace: &str) -> Result<(), Forbidden> {
        match self {
            Caller::Token(credential) if !credential.scope.allows(namespace) => {
                Err(Forbidden(format!(
                    "token {:?} may not use namespace {namespace:?}; its namespaces are {}",
                    credential.name, credential.scope
                )))
            }
            _ => Ok(()),
        }
    }

    /// The namespaces the caller may see; `None` for every namespace.
    pub fn scope(&self) -> Option<&'a Scope> {
        match self {
            Caller::Token(credential) if !credential.scope.is_every() => Some(&credential.scope),
            _ => None,
        }
    }
}

/// The SHA-256 of `token`.
pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// `bytes` as lower-case hex.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The 32 bytes that 64 hex digits (either case) spell; `None` for
/// anything else.
pub fn digest_from_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// A new random token: [`TOKEN_BYTES`] bytes from the operating system's
/// generator, as 64 lower-case hex digits.
pub fn new_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("the operating system's random generator failed: {e}"))?;
    Ok(to_hex(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(patterns: &[&str]) -> Scope {
        Scope::new(
            patterns
                .iter()
                .map(|p| NamespacePattern::parse(p).unwrap())
                .collect(),
        )
    }

    #[test]
    fn patterns_match_exact_names_prefixes_and_everything() {
        let s = scope(&["ci", "deploy-*"]);
        assert!(s.allows("ci") && s.allows("deploy-") && s.allows("deploy-prod"));
        assert!(!s.allows("ci2") && !s.allows("c") && !s.allows("deploy") && !s.allows(""));
        assert!(!s.is_every());
        assert_eq!(s.to_string(), "ci, deploy-*");
        assert_eq!(s.exact_names().collect::<Vec<_>>(), ["ci"]);
        let every = scope(&["*"]);
        assert!(every.is_every() && every.allows("anything") && every.allows(""));
        for bad in ["", "de*ploy", "**", "*x"] {
            assert!(NamespacePattern::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tokens_are_found_by_their_digest() {
        let ci = Credential::new("ci", digest("secret-ci"), scope(&["ci"]), Role::Locker);
        let credentials = Credentials::new(vec![ci, Credential::from_flag("root")]);
        assert_eq!(credentials.identify("secret-ci").unwrap().name(), "ci");
        assert_eq!(
            credentials.identify("root").unwrap().name(),
            FLAG_TOKEN_NAME
        );
        assert!(credentials.identify("secret-c").is_none());
        assert!(credentials.identify("").is_none());
        // The Debug of a credential has neither secret nor digest.
        let debug = format!("{credentials:?}");
        assert!(!debug.contains(&to_hex(&digest("secret-ci"))), "{debug}");
    }

    #[test]
    fn roles_and_namespaces_are_checked_with_messages_naming_the_lack() {
        let reader = Credential::new("ci", [0; 32], scope(&["ci", "deploy-*"]), Role::Reader);
        let caller = Caller::Token(&reader);
        assert_eq!(
            caller.check_route(Route::Lock).unwrap_err().0,
            "token \"ci\" (role reader) may not lock; it needs role locker"
        );
        assert!(caller.check_route(Route::List).is_ok());
        assert!(caller.check_route(Route::Healthz).is_ok());
        assert!(caller
            .check_route(Route::Metrics)
            .unwrap_err()
            .0
            .contains("needs namespaces [\"*\"]"));
        assert_eq!(
            caller.check_namespace("prod").unwrap_err().0,
            "token \"ci\" may not use namespace \"prod\"; its namespaces are ci, deploy-*"
        );
        assert!(caller.check_namespace("deploy-x").is_ok());
        let admin = Credential::from_flag("x");
        assert!(Caller::Token(&admin)
            .check_route(Route::ForceUnlock)
            .is_ok());
        assert!(Caller::Token(&admin).check_route(Route::Metrics).is_ok());
        assert!(Caller::Token(&admin).scope().is_none());
        assert!(Caller::Anyone.check_route(Route::ForceUnlock).is_ok());
        assert!(Caller::Anyone.check_namespace("x").is_ok());
        for route in Route::ALL {
            let needed = Role::needed_for(route);
            let probe = matches!(route, Route::Healthz | Route::Livez | Route::Readyz);
            assert_eq!(needed.is_none(), probe, "{route}");
        }
    }

    #[test]
    fn hex_round_trips_and_new_tokens_are_256_bits() {
        let d = digest("abc");
        assert_eq!(
            to_hex(&d),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(digest_from_hex(&to_hex(&d)), Some(d));
        assert_eq!(digest_from_hex(&to_hex(&d).to_uppercase()), Some(d));
        assert_eq!(digest_from_hex(&to_hex(&d)[1..]), None);
        assert_eq!(digest_from_hex(&format!("{}g", &to_hex(&d)[1..])), None);
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_eq!(a.len(), 64);
        assert!(digest_from_hex(&a).is_some());
        assert_ne!(a, b);
    }
}

//! Where the server is and how to talk to it: `LOCKD_URL`,
//! `LOCKD_NAMESPACE` and `LOCKD_AUTH_TOKEN` from the component's environment
//! (which each client reads through its own WASI release).

use lockd_api::{Route, DEFAULT_NAMESPACE};

/// Where the server is and how to talk to it, read once per instance. Its
/// `Debug` shows whether a token is set, never the token.
pub struct Config {
    /// `LOCKD_URL` as given, for messages.
    pub url: String,
    /// `https://` rather than `http://`.
    pub https: bool,
    /// The URL's authority, `HOST[:PORT]`.
    pub authority: String,
    /// The URL's path without its trailing slash ("" for none): routes are
    /// appended to it, so a server behind a path prefix works.
    base_path: String,
    pub(crate) namespace: String,
    /// `LOCKD_AUTH_TOKEN`, unless unset or empty.
    auth_token: Option<String>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("url", &self.url)
            .field("https", &self.https)
            .field("authority", &self.authority)
            .field("base_path", &self.base_path)
            .field("namespace", &self.namespace)
            .field(
                "auth_token",
                &self.auth_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl Config {
    /// The configuration in `env` (the component's environment; an empty
    /// value counts as unset), or the `unavailable` message every call
    /// answers.
    pub fn from_env(env: &[(String, String)]) -> Result<Config, String> {
        let var = |name: &str| {
            env.iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.as_str())
                .filter(|value| !value.is_empty())
        };
        let Some(url) = var("LOCKD_URL") else {
            return Err(
                "LOCKD_URL is not set: the lockd client component needs the URL of a \
                        lockd server in its environment (for example \
                        LOCKD_URL=http://127.0.0.1:7450)"
                    .to_owned(),
            );
        };
        let (https, authority, base_path) = parse_url(url)?;
        Ok(Config {
            url: url.to_owned(),
            https,
            authority,
            base_path,
            namespace: var("LOCKD_NAMESPACE")
                .unwrap_or(DEFAULT_NAMESPACE)
                .to_owned(),
            auth_token: var("LOCKD_AUTH_TOKEN").map(str::to_owned),
        })
    }

    /// The path and query of `route` on this server.
    pub fn path(&self, route: Route) -> String {
        format!("{}{}", self.base_path, route.path())
    }

    /// The headers of every request: JSON, and the bearer token if set.
    pub fn headers(&self) -> Vec<(String, Vec<u8>)> {
        let mut headers = vec![("content-type".to_owned(), b"application/json".to_vec())];
        if let Some(token) = &self.auth_token {
            headers.push((
                "authorization".to_owned(),
                format!("Bearer {token}").into_bytes(),
            ));
        }
        headers
    }
}

/// `http://HOST:PORT[/PATH]`, `https://...`, or a bare `HOST:PORT` (taken as
/// `http://`, like the lockd CLI's `--server`): whether it is `https`, the
/// authority and the path.
fn parse_url(url: &str) -> Result<(bool, String, String), String> {
    let (https, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if url.contains("://") {
        return Err(format!(
            "LOCKD_URL={url:?} is not an http:// or https:// URL"
        ));
    } else {
        (false, url)
    };
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    if authority.is_empty() || path.starts_with(['?', '#']) {
        return Err(format!(
            "LOCKD_URL={url:?} is not of the form http://HOST:PORT[/PATH]"
        ));
    }
    Ok((
        https,
        authority.to_owned(),
        path.trim_end_matches('/').to_owned(),
    ))
}

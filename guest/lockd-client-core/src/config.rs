//! Where the servers are and how to talk to them: `LOCKD_URL` (one URL or
//! several, comma-separated), `LOCKD_NAMESPACE` and `LOCKD_AUTH_TOKEN` from
//! the component's environment (which each client reads through its own
//! WASI release).

use std::sync::atomic::{AtomicUsize, Ordering};

use lockd_api::{Route, DEFAULT_NAMESPACE};

/// Where the servers are and how to talk to them, read once per instance.
/// Its `Debug` shows whether a token is set, never the token.
pub struct Config {
    /// The hosts of `LOCKD_URL`, in its order: at least one, all `http://`
    /// or all `https://`.
    pub servers: Vec<Server>,
    /// The index in `servers` of the host that answered last: a call tries
    /// it first ([`crate::call`]). Atomic only because the configuration is
    /// kept in a `static`; a component instance runs on one thread.
    last_answered: AtomicUsize,
    pub(crate) namespace: String,
    /// `LOCKD_AUTH_TOKEN`, unless unset or empty.
    auth_token: Option<String>,
}

/// One host of `LOCKD_URL`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    /// The entry as given, for messages.
    pub url: String,
    /// `https://` rather than `http://`.
    pub https: bool,
    /// The URL's authority, `HOST[:PORT]`.
    pub authority: String,
    /// The URL's path without its trailing slash ("" for none): routes are
    /// appended to it, so a server behind a path prefix works.
    base_path: String,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("servers", &self.servers)
            .field("last_answered", &self.last_answered)
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
                        LOCKD_URL=http://127.0.0.1:7450, or several hosts of one \
                        cluster: LOCKD_URL=http://10.0.0.1:7450,http://10.0.0.2:7450)"
                    .to_owned(),
            );
        };
        Ok(Config {
            servers: parse_urls(url)?,
            last_answered: AtomicUsize::new(0),
            namespace: var("LOCKD_NAMESPACE")
                .unwrap_or(DEFAULT_NAMESPACE)
                .to_owned(),
            auth_token: var("LOCKD_AUTH_TOKEN").map(str::to_owned),
        })
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

    /// The index of the host that answered last (the first one before any
    /// answer).
    pub(crate) fn last_answered(&self) -> usize {
        self.last_answered.load(Ordering::Relaxed) % self.servers.len()
    }

    /// Remembers that the host at `index` answered.
    pub(crate) fn answered(&self, index: usize) {
        self.last_answered.store(index, Ordering::Relaxed);
    }
}

impl Server {
    /// The path and query of `route` on this server.
    pub fn path(&self, route: Route) -> String {
        format!("{}{}", self.base_path, route.path())
    }
}

/// `LOCKD_URL`: one entry or several separated by commas (spaces around an
/// entry are ignored), every one an `http://` or `https://` URL, or a bare
/// `HOST:PORT` (taken as `http://`); `http://` and `https://` not mixed, so
/// a call never falls back from TLS to plain text.
fn parse_urls(value: &str) -> Result<Vec<Server>, String> {
    let entries: Vec<&str> = value.split(',').map(str::trim).collect();
    let several = entries.len() > 1;
    let mut servers = Vec::with_capacity(entries.len());
    for (at, entry) in entries.iter().enumerate() {
        let server = parse_url(entry).map_err(|problem| {
            if several {
                format!(
                    "LOCKD_URL={value:?}: entry {} ({entry:?}) {problem}",
                    at + 1
                )
            } else {
                format!("LOCKD_URL={value:?} {problem}")
            }
        })?;
        if let Some(first) = servers
            .first()
            .filter(|first: &&Server| first.https != server.https)
        {
            return Err(format!(
                "LOCKD_URL={value:?}: entry {} ({entry:?}) is {} but entry 1 ({:?}) is {}: \
                 list hosts of one scheme, so that no call falls back from TLS to plain text",
                at + 1,
                scheme(server.https),
                first.url,
                scheme(first.https),
            ));
        }
        servers.push(server);
    }
    Ok(servers)
}

fn scheme(https: bool) -> &'static str {
    if https {
        "https://"
    } else {
        "http://"
    }
}

/// `http://HOST:PORT[/PATH]`, `https://...`, or a bare `HOST:PORT` (taken as
/// `http://`, like the lockd CLI's `--server`); the error completes a
/// sentence naming the entry.
fn parse_url(url: &str) -> Result<Server, String> {
    if url.is_empty() {
        return Err("is empty".to_owned());
    }
    let (https, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if url.contains("://") {
        return Err("is not an http:// or https:// URL".to_owned());
    } else {
        (false, url)
    };
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    if authority.is_empty()
        || authority.contains(char::is_whitespace)
        || path.starts_with(['?', '#'])
    {
        return Err("is not of the form http://HOST:PORT[/PATH]".to_owned());
    }
    Ok(Server {
        url: url.to_owned(),
        https,
        authority: authority.to_owned(),
        base_path: path.trim_end_matches('/').to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> Result<Config, String> {
        Config::from_env(&[("LOCKD_URL".to_owned(), url.to_owned())])
    }

    fn hosts(url: &str) -> Vec<(bool, String, String)> {
        config(url)
            .unwrap()
            .servers
            .into_iter()
            .map(|s| (s.https, s.authority, s.base_path))
            .collect()
    }

    fn refusal(url: &str) -> String {
        config(url).unwrap_err()
    }

    #[test]
    fn one_url_is_one_host() {
        assert_eq!(
            hosts("http://127.0.0.1:7450"),
            [(false, "127.0.0.1:7450".to_owned(), String::new())]
        );
        assert_eq!(
            hosts("https://lockd.example/base/"),
            [(true, "lockd.example".to_owned(), "/base".to_owned())]
        );
        assert_eq!(
            hosts("127.0.0.1:7450"),
            [(false, "127.0.0.1:7450".to_owned(), String::new())]
        );
    }

    #[test]
    fn several_urls_keep_their_order() {
        assert_eq!(
            hosts("http://a:1, b:2 ,http://c:3/p"),
            [
                (false, "a:1".to_owned(), String::new()),
                (false, "b:2".to_owned(), String::new()),
                (false, "c:3".to_owned(), "/p".to_owned()),
            ]
        );
        let config = config("https://a:1,https://b:2").unwrap();
        assert_eq!(config.servers[1].url, "https://b:2");
        assert_eq!(config.servers[1].path(Route::Lock), "/v1/locks/lock");
        assert_eq!(config.last_answered(), 0);
        config.answered(1);
        assert_eq!(config.last_answered(), 1);
    }

    #[test]
    fn a_bad_entry_is_refused_by_its_place() {
        let message = refusal("http://a:1,,http://b:2");
        assert!(message.contains("entry 2 (\"\") is empty"), "{message}");
        let message = refusal("http://a:1,");
        assert!(message.contains("entry 2 (\"\") is empty"), "{message}");
        let message = refusal("http://a:1,ftp://b:2");
        assert!(
            message.contains("entry 2 (\"ftp://b:2\") is not an http:// or https:// URL"),
            "{message}"
        );
        let message = refusal("http://a:1,http://?x");
        assert!(message.contains("entry 2 (\"http://?x\")"), "{message}");
        let message = refusal("http://a b:1");
        assert!(message.contains("is not of the form"), "{message}");
        // One entry: the message reads as before, without a position.
        let message = refusal("ftp://a:1");
        assert_eq!(
            message,
            "LOCKD_URL=\"ftp://a:1\" is not an http:// or https:// URL"
        );
    }

    #[test]
    fn http_and_https_are_not_mixed() {
        let message = refusal("https://a:1,http://b:2");
        assert!(
            message.contains(
                "entry 2 (\"http://b:2\") is http:// but entry 1 (\"https://a:1\") is https://"
            ),
            "{message}"
        );
        // A bare HOST:PORT is http://.
        let message = refusal("https://a:1,b:2");
        assert!(
            message.contains("entry 2 (\"b:2\") is http://"),
            "{message}"
        );
        // The negative control: one scheme throughout is fine.
        assert_eq!(hosts("http://a:1,b:2").len(), 2);
    }

    #[test]
    fn missing_url_says_how_to_set_it() {
        let message = Config::from_env(&[]).unwrap_err();
        assert!(message.starts_with("LOCKD_URL is not set"), "{message}");
        let message = refusal("");
        assert!(message.starts_with("LOCKD_URL is not set"), "{message}");
    }

    #[test]
    fn debug_hides_the_token() {
        let config = Config::from_env(&[
            ("LOCKD_URL".to_owned(), "http://a:1".to_owned()),
            ("LOCKD_AUTH_TOKEN".to_owned(), "s3cret".to_owned()),
        ])
        .unwrap();
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("s3cret") && shown.contains("<redacted>"),
            "{shown}"
        );
    }
}

//! The list of lockd hosts a client speaks to, parsed and checked once.

use std::fmt;

use reqwest::Url;

use crate::error::Error;

/// The lockd hosts of one cluster, in the order given: `http://` or
/// `https://` URLs, each with an optional path prefix (lockd behind a
/// reverse proxy at `https://proxy/lockd`).
///
/// ```
/// use lockd_native_client::Servers;
///
/// let servers = Servers::parse("http://10.0.0.1:7450, https://lockd.example/api/").unwrap();
/// assert_eq!(servers.urls(), ["http://10.0.0.1:7450", "https://lockd.example/api"]);
/// assert!(Servers::parse("http://a:7450,,http://b:7450").is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Servers {
    /// Each host's base URL, without a trailing slash; a request's path is
    /// appended to it as it is.
    urls: Vec<String>,
}

impl Servers {
    /// Parses a comma-separated list of URLs. Spaces around an entry are
    /// ignored, a trailing slash is trimmed, and a bare `host:port` means
    /// `http://host:port` (as the CLI's `--server` always accepted). An
    /// empty entry, one that is not an `http`/`https` URL with a host (or
    /// carries a query, a fragment or a user name) and a duplicate are
    /// [`Error::Config`] naming the entry and its position.
    pub fn parse(list: &str) -> Result<Servers, Error> {
        let mut urls: Vec<String> = Vec::new();
        let entries: Vec<&str> = list.split(',').collect();
        for (index, entry) in entries.iter().enumerate() {
            let position = Position {
                index,
                count: entries.len(),
            };
            let url = parse_entry(entry.trim(), position)?;
            if let Some(first) = urls.iter().position(|u| *u == url) {
                return Err(Error::Config(format!(
                    "{position} of the server list, {:?}, repeats entry {} ({url}); \
                     name each host once",
                    entry.trim(),
                    first + 1
                )));
            }
            urls.push(url);
        }
        Ok(Servers { urls })
    }

    /// The hosts of `urls`, each checked as one entry of [`Servers::parse`].
    pub fn from_urls<I, S>(urls: I) -> Result<Servers, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls: Vec<String> = urls.into_iter().map(|u| u.as_ref().to_string()).collect();
        if urls.iter().any(|u| u.contains(',')) {
            return Err(Error::Config(format!(
                "a server URL contains a comma: {:?}; give one URL per entry",
                urls.iter().find(|u| u.contains(',')).unwrap()
            )));
        }
        Servers::parse(&urls.join(","))
    }

    /// Refuses a list that mixes `http://` and `https://` hosts when TLS
    /// options (a CA, a client certificate) are given: the plain hosts would
    /// silently go without them. The error names the first entry whose
    /// scheme differs from the first host's.
    pub fn check_tls(&self, tls_options_given: bool) -> Result<(), Error> {
        if !tls_options_given {
            return Ok(());
        }
        let Some(first) = self.urls.first() else {
            return Ok(());
        };
        let first_https = is_https(first);
        match self
            .urls
            .iter()
            .enumerate()
            .find(|(_, url)| is_https(url) != first_https)
        {
            None => Ok(()),
            Some((index, url)) => {
                let position = Position {
                    index,
                    count: self.urls.len(),
                };
                Err(Error::Config(format!(
                    "{position} of the server list, {url}, is {} while {first} is {}; \
                     with TLS options (CA, client certificate) the hosts must not mix http:// and https://",
                    scheme_name(url),
                    scheme_name(first)
                )))
            }
        }
    }

    /// Each host's base URL, in the order given.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// How many hosts there are (at least one).
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Always false: a parsed list has at least one host.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// Whether any host is `https://`.
    pub fn any_https(&self) -> bool {
        self.urls.iter().any(|u| is_https(u))
    }
}

/// `http://a:7450, http://b:7450`
impl fmt::Display for Servers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.urls.join(", "))
    }
}

impl fmt::Debug for Servers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.urls).finish()
    }
}

/// Where an entry stands in the list, as messages say it.
#[derive(Clone, Copy)]
struct Position {
    index: usize,
    count: usize,
}

/// `entry 2 of 3`
impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "entry {} of {}", self.index + 1, self.count)
    }
}

fn is_https(url: &str) -> bool {
    url.starts_with("https://")
}

fn scheme_name(url: &str) -> &'static str {
    if is_https(url) {
        "https://"
    } else {
        "http://"
    }
}

/// One entry as its normalized base URL.
fn parse_entry(entry: &str, position: Position) -> Result<String, Error> {
    let bad = |why: &str| {
        Error::Config(format!(
            "{position} of the server list, {entry:?}, {why}; use for example http://127.0.0.1:7450"
        ))
    };
    if entry.is_empty() {
        return Err(Error::Config(format!(
            "{position} of the server list is empty; separate hosts with single commas"
        )));
    }
    let with_scheme = if entry.contains("://") {
        entry.to_string()
    } else {
        format!("http://{entry}")
    };
    let url = Url::parse(&with_scheme).map_err(|e| bad(&format!("is not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("is not an http:// or https:// URL"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("names no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("has a query or a fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad(
            "carries a user name; give a bearer token instead, never in a URL",
        ));
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_error(list: &str) -> String {
        match Servers::parse(list) {
            Err(Error::Config(message)) => message,
            other => panic!("{list:?}: {other:?}"),
        }
    }

    #[test]
    fn good_lists_are_normalized() {
        for (list, urls) in [
            ("http://127.0.0.1:7450", vec!["http://127.0.0.1:7450"]),
            ("http://127.0.0.1:7450/", vec!["http://127.0.0.1:7450"]),
            ("127.0.0.1:7450", vec!["http://127.0.0.1:7450"]),
            (
                " http://a:1 ,https://B:2/lockd/ ",
                vec!["http://a:1", "https://b:2/lockd"],
            ),
            (
                "http://[::1]:7450,http://localhost:7451",
                vec!["http://[::1]:7450", "http://localhost:7451"],
            ),
        ] {
            let servers = Servers::parse(list).unwrap();
            assert_eq!(servers.urls(), urls, "{list}");
            assert_eq!(servers.len(), urls.len());
            assert!(!servers.is_empty());
        }
        let servers = Servers::from_urls(["http://a:1", "http://b:1/"]).unwrap();
        assert_eq!(servers.to_string(), "http://a:1, http://b:1");
    }

    #[test]
    fn bad_entries_are_named_with_their_position() {
        for (list, needle) in [
            ("", "entry 1 of 1 of the server list is empty"),
            ("http://a:1,", "entry 2 of 2 of the server list is empty"),
            (
                "http://a:1,,http://b:1",
                "entry 2 of 3 of the server list is empty",
            ),
            (
                "http://a:1,ftp://b:1",
                "entry 2 of 2 of the server list, \"ftp://b:1\", is not an http:// or https:// URL",
            ),
            (
                "http://",
                "entry 1 of 1 of the server list, \"http://\", is not a URL",
            ),
            ("http://a:99999", "\"http://a:99999\", is not a URL"),
            ("http://a b:1", "\"http://a b:1\", is not a URL"),
            ("http://a:1/?x=1", "has a query or a fragment"),
            ("http://a:1/#f", "has a query or a fragment"),
            ("http://u:p@a:1", "carries a user name"),
            (
                "http://a:1,http://b:1,http://a:1/",
                "entry 3 of 3 of the server list, \"http://a:1/\", repeats entry 1",
            ),
            (
                "a:1,http://A:1",
                "entry 2 of 2 of the server list, \"http://A:1\", repeats entry 1",
            ),
        ] {
            let message = config_error(list);
            assert!(message.contains(needle), "{list:?}: {message}");
        }
        assert!(matches!(
            Servers::from_urls(["http://a:1,http://b:1"]),
            Err(Error::Config(m)) if m.contains("comma")
        ));
    }

    #[test]
    fn tls_options_refuse_a_mixed_list() {
        let mixed = Servers::parse("https://a:1,https://b:1,http://c:1").unwrap();
        mixed.check_tls(false).unwrap();
        let Err(Error::Config(message)) = mixed.check_tls(true) else {
            panic!("a mixed list passed");
        };
        assert!(
            message.starts_with("entry 3 of 3 of the server list, http://c:1, is http://"),
            "{message}"
        );
        Servers::parse("https://a:1,https://b:1")
            .unwrap()
            .check_tls(true)
            .unwrap();
        Servers::parse("http://a:1,http://b:1")
            .unwrap()
            .check_tls(true)
            .unwrap();
        assert!(mixed.any_https());
        assert!(!Servers::parse("http://a:1").unwrap().any_https());
    }
}

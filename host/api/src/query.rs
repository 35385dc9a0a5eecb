//! The query strings of `GET /v1/locks` and `GET /v1/events`,
//! `application/x-www-form-urlencoded` through the `percent-encoding`
//! crate.
//!
//! Like unknown fields in a body, unknown and repeated parameters are
//! refused, and so are a malformed escape (`%zz`) and an escape that does
//! not decode to UTF-8, which a lenient decoder would let through changed.

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::route::Route;

/// What a query value keeps unescaped: RFC 3986's unreserved characters
/// (`A-Z a-z 0-9 - . _ ~`); everything else becomes `%XX`.
const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The query of `GET /v1/locks`: `?namespace=&prefix=`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// The namespace; `default` if `None`.
    pub namespace: Option<String>,
    /// Only names starting with this; all if `None`.
    pub prefix: Option<String>,
}

impl ListQuery {
    /// Parses a query string (without the `?`).
    pub fn parse(query: &str) -> Result<ListQuery, String> {
        let mut parsed = ListQuery::default();
        fill(
            query,
            &mut [
                ("namespace", &mut parsed.namespace),
                ("prefix", &mut parsed.prefix),
            ],
        )?;
        Ok(parsed)
    }

    /// The path and query to request: `/v1/locks?namespace=a%2Fb&prefix=job`.
    pub fn path(&self) -> String {
        with_query(
            Route::List,
            &[("namespace", &self.namespace), ("prefix", &self.prefix)],
        )
    }
}

/// The query of `GET /v1/events`: `?namespace=&prefix=&after=&access_token=`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// Only events of this namespace; every namespace if `None`.
    pub namespace: Option<String>,
    /// Only events whose name starts with this; all if `None`.
    pub prefix: Option<String>,
    /// Resume after this event position (an event's SSE `id:`, as the
    /// `Last-Event-ID` header also gives it): the events after it first,
    /// or a `gap` event when the server cannot tell them.
    pub after: Option<String>,
    /// The bearer token, for clients that cannot send headers (a browser's
    /// `EventSource`); the `Authorization` header wins when both are given.
    pub access_token: Option<String>,
}

impl EventQuery {
    /// Parses a query string (without the `?`).
    pub fn parse(query: &str) -> Result<EventQuery, String> {
        let mut parsed = EventQuery::default();
        fill(
            query,
            &mut [
                ("namespace", &mut parsed.namespace),
                ("prefix", &mut parsed.prefix),
                ("after", &mut parsed.after),
                ("access_token", &mut parsed.access_token),
            ],
        )?;
        Ok(parsed)
    }

    /// The path and query to request, without the token (which a client
    /// that can should send as a header).
    pub fn path(&self) -> String {
        with_query(
            Route::Events,
            &[
                ("namespace", &self.namespace),
                ("prefix", &self.prefix),
                ("after", &self.after),
            ],
        )
    }
}

/// `route`'s path with the given parameters as its query.
fn with_query(route: Route, params: &[(&str, &Option<String>)]) -> String {
    let pairs: Vec<String> = params
        .iter()
        .filter_map(|(key, value)| {
            let value = value.as_deref()?;
            Some(format!("{key}={}", utf8_percent_encode(value, ESCAPED)))
        })
        .collect();
    if pairs.is_empty() {
        route.path().to_string()
    } else {
        format!("{}?{}", route.path(), pairs.join("&"))
    }
}

/// Fills each parameter's slot from `query`.
fn fill(query: &str, slots: &mut [(&str, &mut Option<String>)]) -> Result<(), String> {
    for (key, value) in parse_pairs(query)? {
        let Some((_, slot)) = slots.iter_mut().find(|(name, _)| *name == key) else {
            let names: Vec<&str> = slots.iter().map(|(name, _)| *name).collect();
            let expected = match names.split_last() {
                Some((last, [])) => (*last).to_string(),
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => "none".to_string(),
            };
            return Err(format!(
                "unknown query parameter {key:?}; expected {expected}"
            ));
        };
        if slot.replace(value).is_some() {
            return Err(format!("query parameter {key:?} given twice"));
        }
    }
    Ok(())
}

/// Splits a query into decoded pairs; a key without `=` has the value "".
fn parse_pairs(query: &str) -> Result<Vec<(String, String)>, String> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(key)?, decode(value)?))
        })
        .collect()
}

/// Decodes one component: `+` is a space, `%XX` a byte, and the bytes must
/// be UTF-8.
fn decode(component: &str) -> Result<String, String> {
    // percent_decode_str passes a malformed escape through as it is; the
    // API refuses it, as it refuses any input it would have to guess at.
    let bytes = component.as_bytes();
    let well_formed = component.match_indices('%').all(|(at, _)| {
        bytes
            .get(at + 1..at + 3)
            .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    if !well_formed {
        return Err(format!("bad percent-encoding in query {component:?}"));
    }
    let spaced = component.replace('+', " ");
    percent_decode_str(&spaced)
        .decode_utf8()
        .map(|value| value.into_owned())
        .map_err(|_| format!("query value {component:?} is not UTF-8 once decoded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_queries() {
        assert_eq!(
            parse_pairs("namespace=a%2Fb&prefix=job+1%20x").unwrap(),
            vec![
                ("namespace".to_string(), "a/b".to_string()),
                ("prefix".to_string(), "job 1 x".to_string())
            ]
        );
        assert_eq!(parse_pairs("").unwrap(), vec![]);
        assert_eq!(
            parse_pairs("prefix").unwrap(),
            vec![("prefix".to_string(), String::new())]
        );
        assert_eq!(
            parse_pairs("prefix=%C3%A9").unwrap()[0].1,
            "\u{e9}".to_string()
        );
        // An escaped `+` is a plus.
        assert_eq!(parse_pairs("prefix=a%2Bb").unwrap()[0].1, "a+b");
        assert!(parse_pairs("prefix=%zz").is_err());
        assert!(parse_pairs("prefix=%4").is_err());
        assert!(parse_pairs("prefix=%ff").is_err());
    }

    #[test]
    fn encodes_and_decodes_as_a_pair() {
        let encode = |s: &str| utf8_percent_encode(s, ESCAPED).to_string();
        assert_eq!(encode("a/b c&d=é"), "a%2Fb%20c%26d%3D%C3%A9");
        assert_eq!(encode("job-1_x.y~"), "job-1_x.y~");
        for s in ["", "a/b c&d=é+%", "job-1_x.y~", "\u{1F512} lock?#"] {
            assert_eq!(decode(&encode(s)).unwrap(), s, "{s}");
        }
    }

    #[test]
    fn list_queries_round_trip() {
        let q = ListQuery {
            namespace: Some("a/b".to_string()),
            prefix: Some("job 1&".to_string()),
        };
        assert_eq!(q.path(), "/v1/locks?namespace=a%2Fb&prefix=job%201%26");
        let path = q.path();
        let query = path.strip_prefix("/v1/locks?").unwrap();
        assert_eq!(ListQuery::parse(query).unwrap(), q);
        assert_eq!(ListQuery::default().path(), "/v1/locks");
        assert_eq!(ListQuery::parse("").unwrap(), ListQuery::default());
        assert_eq!(
            ListQuery::parse("names=x").unwrap_err(),
            "unknown query parameter \"names\"; expected namespace or prefix"
        );
        assert!(ListQuery::parse("prefix=a&prefix=b")
            .unwrap_err()
            .contains("given twice"));
    }

    #[test]
    fn event_queries_round_trip_without_the_token() {
        let q = EventQuery {
            namespace: Some("ns".to_string()),
            prefix: None,
            after: Some("41.2".to_string()),
            access_token: Some("s3cret".to_string()),
        };
        assert_eq!(q.path(), "/v1/events?namespace=ns&after=41.2");
        assert_eq!(
            EventQuery::parse("namespace=ns&after=41.2&access_token=s3cret").unwrap(),
            q
        );
        assert!(EventQuery::parse("prefix=%zz")
            .unwrap_err()
            .contains("bad percent-encoding"));
        assert_eq!(
            EventQuery::parse("names=x").unwrap_err(),
            "unknown query parameter \"names\"; expected namespace, prefix, after or access_token"
        );
    }
}

//! Request bodies and query strings of the REST API. Unknown fields are
//! errors, so a misspelt `wait_ms` is refused rather than ignored.

use lockd_core::Durability;
use serde::Deserialize;

/// `POST /v1/locks/lock`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LockRequest {
    pub namespace: Option<String>,
    pub name: String,
    pub owner: String,
    pub ttl_ms: u64,
    pub wait_ms: Option<u64>,
    pub durability: Option<DurabilityWire>,
}

/// `POST /v1/locks/unlock`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UnlockRequest {
    pub namespace: Option<String>,
    pub name: String,
    pub owner: String,
    pub fencing_token: Option<u64>,
}

/// `POST /v1/locks/extend`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExtendRequest {
    pub namespace: Option<String>,
    pub name: String,
    pub owner: String,
    pub ttl_ms: u64,
}

/// `POST /v1/locks/get`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GetRequest {
    pub namespace: Option<String>,
    pub name: String,
}

/// `durability` as it is spelt on the wire.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum DurabilityWire {
    Persistent,
    Ephemeral,
}

impl From<DurabilityWire> for Durability {
    fn from(d: DurabilityWire) -> Self {
        match d {
            DurabilityWire::Persistent => Durability::Persistent,
            DurabilityWire::Ephemeral => Durability::Ephemeral,
        }
    }
}

/// Splits an `application/x-www-form-urlencoded` query into decoded pairs.
pub(super) fn parse_query(query: &str) -> Result<Vec<(String, String)>, String> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(key)?, decode(value)?))
        })
        .collect()
}

/// Percent-decodes one query component (`+` is a space).
fn decode(s: &str) -> Result<String, String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = [bytes.next(), bytes.next()];
                let byte = match hex {
                    [Some(h), Some(l)] => hex_value(h).zip(hex_value(l)).map(|(h, l)| h << 4 | l),
                    _ => None,
                };
                out.push(byte.ok_or_else(|| format!("bad percent-encoding in query {s:?}"))?);
            }
            b => out.push(b),
        }
    }
    String::from_utf8(out).map_err(|_| format!("query value {s:?} is not UTF-8 once decoded"))
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_queries() {
        assert_eq!(
            parse_query("namespace=a%2Fb&prefix=job+1%20x").unwrap(),
            vec![
                ("namespace".to_string(), "a/b".to_string()),
                ("prefix".to_string(), "job 1 x".to_string())
            ]
        );
        assert_eq!(parse_query("").unwrap(), vec![]);
        assert_eq!(
            parse_query("prefix").unwrap(),
            vec![("prefix".to_string(), String::new())]
        );
        assert_eq!(
            parse_query("prefix=%C3%A9").unwrap()[0].1,
            "\u{e9}".to_string()
        );
        assert!(parse_query("prefix=%zz").is_err());
        assert!(parse_query("prefix=%4").is_err());
        assert!(parse_query("prefix=%ff").is_err());
    }

    #[test]
    fn rejects_unknown_fields_and_bad_numbers() {
        let ok: LockRequest =
            serde_json::from_str(r#"{"name":"a","owner":"o","ttl_ms":1,"durability":"ephemeral"}"#)
                .unwrap();
        assert!(matches!(ok.durability, Some(DurabilityWire::Ephemeral)));
        for bad in [
            r#"{"name":"a","owner":"o","ttl_ms":1,"wait":5}"#,
            r#"{"name":"a","owner":"o","ttl_ms":-1}"#,
            r#"{"name":"a","owner":"o","ttl_ms":1.5}"#,
            r#"{"name":"a","owner":"o","ttl_ms":18446744073709551616}"#,
            r#"{"name":"a","owner":"o","ttl_ms":"10"}"#,
            r#"{"name":"a","owner":"o","ttl_ms":1,"durability":"forever"}"#,
            r#"{"name":1,"owner":"o","ttl_ms":1}"#,
            r#"{"owner":"o","ttl_ms":1}"#,
        ] {
            assert!(serde_json::from_str::<LockRequest>(bad).is_err(), "{bad}");
        }
    }
}

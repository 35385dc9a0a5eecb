//! What the compatibility surfaces share about a request: its body read
//! by lockd-server's one reader and decoded as Dapr and Kahuna decode
//! theirs, the reader's refusals in their words, and the request span's
//! fields.

use lockd_server::body::{decode_json, BodyError, JsonError, MAX_BODY_BYTES};
use serde::de::DeserializeOwned;

/// The one reader's refusal of a body, in the compatibility routes' words.
pub(crate) fn body_words(e: &BodyError) -> String {
    match e {
        BodyError::TooLarge => format!("the body is over {MAX_BODY_BYTES} bytes"),
        BodyError::Unreadable(why) => why.clone(),
        BodyError::Json(e) => json_words(e),
    }
}

/// A decoding error in the compatibility routes' words: the field, then
/// serde's message (`expiryInSeconds: invalid type ...`).
fn json_words(e: &JsonError) -> String {
    match e.field() {
        Some(field) => format!("{field}: {}", e.message()),
        None => e.message().to_string(),
    }
}

/// Decodes `body`, a JSON object, into `T` with the one reader's decoder
/// ([`decode_json`]); the error ([`json_words`]) names the field, or says
/// the body is not a JSON object. An array is refused although serde would
/// bind a struct from one by position: neither Dapr's protojson nor
/// Kahuna's System.Text.Json does.
pub(crate) fn decode_object<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let first = body
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'{') {
        return Err("the body is not a JSON object".to_string());
    }
    decode_json(body).map_err(|e| json_words(&e))
}

/// Records what the request span (opened by the server for every request)
/// shows.
pub(crate) fn record(route: &'static str, namespace: &str, outcome: &str) {
    let span = tracing::Span::current();
    span.record("route", route);
    span.record("namespace", namespace);
    span.record("outcome", outcome);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_errors_name_the_field() {
        #[derive(serde::Deserialize, Debug)]
        struct T {
            n: u8,
        }
        let e = decode_object::<T>(br#"{"n": "x"}"#).unwrap_err();
        assert!(e.starts_with("n: invalid type"), "{e}");
        let e = decode_object::<T>(b"{not json").unwrap_err();
        assert_eq!(e, "key must be a string at line 1 column 2");
        assert!(decode_object::<T>(br#"{"n": 1} x"#).is_err());
        assert_eq!(decode_object::<T>(b" \n{\"n\": 1}").unwrap().n, 1);
        for not_an_object in [
            &b"[1]"[..],
            b"[null, null]",
            b"not json",
            b"1",
            b"null",
            b"\"n\"",
            b"",
        ] {
            let e = decode_object::<T>(not_an_object).unwrap_err();
            assert_eq!(e, "the body is not a JSON object");
        }
    }
}

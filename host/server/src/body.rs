//! Bodies: the one response body type every route of the listener answers
//! with ([`Body`]), and the one reader of request bodies ([`read_body`],
//! [`read_json`]): at most [`MAX_BODY_BYTES`], declared or sent, and JSON
//! decoded with the path of the field a value does not fit.
//!
//! A reader's error says what went wrong ([`BodyError`], [`JsonError`]);
//! each surface words it in its own reply. Its `Display` is the REST API's
//! wording; the compatibility routes (`lockd-compat`) map it to Dapr's and
//! Kahuna's.

use std::error::Error as StdError;
use std::fmt;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full, LengthLimitError, Limited};
use hyper::header;
use hyper::Request;
use serde::de::DeserializeOwned;

pub use lockd_api::MAX_BODY_BYTES;

/// Every response body lockd serves.
pub type Body = UnsyncBoxBody<Bytes, anyhow::Error>;

/// A complete body from bytes.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// Why a request body was not read into what the route takes.
#[derive(Debug)]
pub enum BodyError {
    /// Over [`MAX_BODY_BYTES`], declared or sent. The rest of the body is
    /// never read, so the connection cannot be reused.
    TooLarge,
    /// The connection failed mid-body.
    Unreadable(String),
    /// The bytes are not the JSON the route takes.
    Json(JsonError),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::TooLarge => write!(f, "body over {MAX_BODY_BYTES} bytes"),
            BodyError::Unreadable(why) => write!(f, "cannot read the request body: {why}"),
            BodyError::Json(e) => write!(f, "invalid request body: {e}"),
        }
    }
}

impl StdError for BodyError {}

/// Why bytes did not decode as JSON into the type asked for. A value of the
/// wrong type or range is named by its field ([`JsonError::field`]); serde
/// names only unknown and missing fields itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    field: Option<String>,
    message: String,
}

impl JsonError {
    /// The path of the field whose value does not fit (`permits`,
    /// `locks[0].fencing_token`), if the error is about one.
    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// What is wrong, as serde_json says it, without the field.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The REST API's wording: `` `permits`: invalid value: ... ``, or the
/// message alone.
impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "`{field}`: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl StdError for JsonError {}

/// Reads the body of `req`, at most [`MAX_BODY_BYTES`]: a larger declared
/// `Content-Length` is refused before a byte is read.
pub async fn read_body<B>(req: Request<B>) -> Result<Bytes, BodyError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(BodyError::TooLarge);
    }
    match Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(BodyError::TooLarge),
        Err(e) => Err(BodyError::Unreadable(e.to_string())),
    }
}

/// Decodes `bytes`, one JSON value and nothing after it, into `T`.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, JsonError> {
    let mut json = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut json).map_err(|e| {
        let path = e.path().to_string();
        let named = e.path().iter().next().is_some();
        let e = e.into_inner();
        // Only a value of the wrong type or range has a field to name; a
        // syntax error's path would be serde_path_to_error's `?`.
        JsonError {
            field: (e.is_data() && named).then_some(path),
            message: e.to_string(),
        }
    })?;
    json.end().map_err(|e| JsonError {
        field: None,
        message: e.to_string(),
    })?;
    Ok(value)
}

/// Reads the body of `req` ([`read_body`]) and decodes it into `T`
/// ([`decode_json`]).
pub async fn read_json<T, B>(req: Request<B>) -> Result<T, BodyError>
where
    T: DeserializeOwned,
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let bytes = read_body(req).await?;
    decode_json(&bytes).map_err(BodyError::Json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct T {
        #[allow(dead_code)]
        n: u8,
    }

    #[test]
    fn decode_errors_name_the_field_of_a_value_that_does_not_fit() {
        let e = decode_json::<T>(br#"{"n": "x"}"#).unwrap_err();
        assert_eq!(e.field(), Some("n"));
        assert!(e.message().starts_with("invalid type"), "{e}");
        assert!(e.to_string().starts_with("`n`: invalid type"), "{e}");
        let e = decode_json::<T>(b"{not json").unwrap_err();
        assert_eq!(e.field(), None);
        assert_eq!(e.to_string(), "key must be a string at line 1 column 2");
        let e = decode_json::<T>(br#"{"m": 1}"#).unwrap_err();
        assert_eq!(e.to_string(), "missing field `n` at line 1 column 8");
        assert!(decode_json::<T>(br#"{"n": 1} x"#).is_err());
    }

    #[test]
    fn body_errors_read_as_the_rest_api_words_them() {
        assert_eq!(BodyError::TooLarge.to_string(), "body over 1048576 bytes");
        let json = decode_json::<T>(b"").unwrap_err();
        assert_eq!(
            BodyError::Json(json).to_string(),
            "invalid request body: EOF while parsing a value at line 1 column 0"
        );
    }

    #[test]
    fn a_declared_length_over_the_limit_is_refused_unread() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let req = Request::builder()
            .header(header::CONTENT_LENGTH, (MAX_BODY_BYTES + 1).to_string())
            .body(full(""))
            .unwrap();
        let read = rt.block_on(read_body(req));
        assert!(matches!(read, Err(BodyError::TooLarge)), "{read:?}");
    }
}

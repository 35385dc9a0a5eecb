//! The web page at `/ui/` (docs/reference.md#the-web-page): three files embedded
//! in the binary, served without a token (they hold no data; every call the
//! page makes to the API carries the token).

use hyper::header::{self, HeaderValue};
use hyper::{Method, Response, StatusCode};
use serde::Serialize;

use crate::body::{full, Body};

/// The page's own path.
pub const UI_PATH: &str = "/ui/";

const ASSETS: [(&str, &str, &str); 3] = [
    (
        "/ui/",
        "text/html; charset=utf-8",
        include_str!("ui/index.html"),
    ),
    (
        "/ui/app.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/app.js"),
    ),
    (
        "/ui/style.css",
        "text/css; charset=utf-8",
        include_str!("ui/style.css"),
    ),
];

/// Whether `path` is the page's: `/ui` or under `/ui/`.
pub fn owns(path: &str) -> bool {
    path == "/ui" || path.starts_with(UI_PATH)
}

/// Answers a request for one of the page's paths.
pub fn handle(method: &Method, path: &str) -> Response<Body> {
    if path == "/ui" || path == "/ui/index.html" {
        return redirect(UI_PATH);
    }
    let Some((_, content_type, text)) = ASSETS.iter().find(|(p, _, _)| *p == path) else {
        return plain(StatusCode::NOT_FOUND, "no such file of the web page");
    };
    if method != Method::GET && method != Method::HEAD {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "the web page takes GET");
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let mut response = Response::new(full(*text));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Nothing from another host, no inline script, no framing.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// `302 Found` to `location`.
pub fn redirect(location: &'static str) -> Response<Body> {
    let mut response = Response::new(full(""));
    *response.status_mut() = StatusCode::FOUND;
    response
        .headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(location));
    response
}

/// The body of the page's refusals, whose status word is always
/// `not_found`.
#[derive(Serialize)]
struct Refusal<'a> {
    message: &'a str,
    status: &'static str,
}

fn plain(code: StatusCode, message: &str) -> Response<Body> {
    let body = Refusal {
        message,
        status: "not_found",
    };
    let mut response = Response::new(full(serde_json::to_string(&body).unwrap_or_default()));
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_served_and_refers_only_to_its_own_host() {
        for (path, content_type, text) in ASSETS {
            let response = handle(&Method::GET, path);
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            assert_eq!(response.headers()[header::CONTENT_TYPE], content_type);
            assert!(
                !text.contains("http://") && !text.contains("https://"),
                "{path}"
            );
            assert!(!text.contains("//cdn"), "{path}");
        }
        assert_eq!(handle(&Method::GET, "/ui").status(), StatusCode::FOUND);
        assert_eq!(
            handle(&Method::GET, "/ui/nope.js").status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            handle(&Method::POST, "/ui/app.js").status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert!(owns("/ui") && owns("/ui/app.js") && !owns("/uix") && !owns("/"));
    }

    #[test]
    fn refusals_are_json_with_the_message_first() {
        use http_body_util::BodyExt as _;
        let response = handle(&Method::GET, "/ui/nope.js");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bytes = rt
            .block_on(response.into_body().collect())
            .unwrap()
            .to_bytes();
        assert_eq!(
            bytes,
            r#"{"message":"no such file of the web page","status":"not_found"}"#
        );
    }
}

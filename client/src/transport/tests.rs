//! The failover rule against small fake hosts on 127.0.0.1: each answers in
//! one fixed way, so every branch of the rule is seen.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use super::*;

/// How a fake host answers every request.
#[derive(Clone, Copy)]
enum Behaviour {
    /// 200 with a `found` body naming the Authorization header it got.
    Ok,
    /// 503 `unavailable`, with or without the not-applied marker.
    Unavailable { not_applied: bool },
    /// Reads the request, then closes without a word.
    HangUp,
}

struct FakeHost {
    url: String,
    requests: Arc<AtomicUsize>,
}

async fn fake(behaviour: Behaviour) -> FakeHost {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve_on(listener, behaviour)
}

fn serve_on(listener: TcpListener, behaviour: Behaviour) -> FakeHost {
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                // One request per connection; the whole of it is small.
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !complete(&request) {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                counter.fetch_add(1, Ordering::SeqCst);
                let text = String::from_utf8_lossy(&request).to_lowercase();
                let auth = text.contains("authorization: bearer s3cret");
                let (status, extra, body) = match behaviour {
                    Behaviour::Ok => (
                        "200 OK",
                        "",
                        format!(r#"{{"status":"found","auth":{auth}}}"#),
                    ),
                    Behaviour::Unavailable { not_applied } => (
                        "503 Service Unavailable",
                        if not_applied {
                            "lockd-not-applied: 1\r\n"
                        } else {
                            ""
                        },
                        r#"{"message":"unavailable: draining","status":"unavailable"}"#.to_string(),
                    ),
                    Behaviour::HangUp => return,
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    FakeHost { url, requests }
}

/// Whether `request` holds its headers and its whole body.
fn complete(request: &[u8]) -> bool {
    let text = String::from_utf8_lossy(request);
    let Some(end) = text.find("\r\n\r\n") else {
        return false;
    };
    let length = text[..end]
        .lines()
        .find_map(|l| {
            l.to_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    request.len() >= end + 4 + length
}

/// A URL nothing listens on.
async fn dead() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

fn transport(urls: &[&str]) -> Transport {
    Transport::builder(Servers::from_urls(urls).unwrap())
        .token("s3cret")
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

fn get() -> Request {
    Request::route(Route::Get)
        .json(&lockd_api::GetRequest {
            namespace: None,
            name: "a".to_string(),
        })
        .unwrap()
        .timeout(Duration::from_secs(5))
}

#[tokio::test]
async fn a_dead_host_is_skipped_and_the_one_that_answered_is_tried_first() {
    let dead = dead().await;
    let good = fake(Behaviour::Ok).await;
    let transport = transport(&[&dead, &good.url]);
    assert_eq!(transport.preferred_server(), dead);
    let response = transport.send(get()).await.unwrap();
    assert_eq!(
        (response.status, response.server.as_str()),
        (200, good.url.as_str())
    );
    // The token went with it, and Debug never shows it.
    assert!(String::from_utf8_lossy(&response.body).contains(r#""auth":true"#));
    let debug = format!("{transport:?}");
    assert!(
        !debug.contains("s3cret") && debug.contains("<set>"),
        "{debug}"
    );
    assert_eq!(transport.preferred_server(), good.url);
    transport.send(get()).await.unwrap();
    assert_eq!(good.requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_draining_host_passes_any_call_on() {
    let draining = fake(Behaviour::Unavailable { not_applied: true }).await;
    let good = fake(Behaviour::Ok).await;
    let transport = transport(&[&draining.url, &good.url]);
    let response = transport.send(get().retry(Retry::Never)).await.unwrap();
    assert_eq!(response.server, good.url);
    assert_eq!(draining.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_unknown_outcome_moves_on_only_when_safe() {
    for broken in [
        fake(Behaviour::HangUp).await,
        fake(Behaviour::Unavailable { not_applied: false }).await,
    ] {
        let good = fake(Behaviour::Ok).await;
        let transport = transport(&[&broken.url, &good.url]);
        let error = transport.send(get().retry(Retry::Never)).await.unwrap_err();
        assert!(error.outcome_unknown(), "{error:?}");
        assert!(error.to_string().contains(&broken.url), "{error}");
        assert_eq!(good.requests.load(Ordering::SeqCst), 0);
        let response = transport.send(get().retry(Retry::Safe)).await.unwrap();
        assert_eq!(response.server, good.url);
    }
}

#[tokio::test]
async fn every_host_down_names_each_once_per_pass() {
    let (a, b) = (dead().await, dead().await);
    let transport = transport(&[&a, &b]);
    let started = Instant::now();
    let error = transport.send(get().retry(Retry::Safe)).await.unwrap_err();
    let Error::Unreachable { failures } = &error else {
        panic!("{error:?}");
    };
    let servers: Vec<&str> = failures.iter().map(|f| f.server.as_str()).collect();
    assert_eq!(servers, [a.as_str(), b.as_str()]);
    assert!(
        failures.iter().all(|f| f.reason == "connection refused"),
        "{error}"
    );
    // Without a deadline, one pass: no backoff loop.
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_safe_call_with_a_deadline_waits_for_a_host_to_come_back() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let url = format!("http://{addr}");
    let transport = transport(&[&url]);
    // No deadline, or not a safe call: one pass, refused.
    assert!(matches!(
        transport.send(get().retry(Retry::Safe)).await,
        Err(Error::Unreachable { .. })
    ));
    let deadline = Instant::now() + Duration::from_secs(10);
    assert!(matches!(
        transport
            .send(get().retry(Retry::Never).deadline(deadline))
            .await,
        Err(Error::Unreachable { .. })
    ));
    let revive = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        serve_on(TcpListener::bind(addr).await.unwrap(), Behaviour::Ok)
    });
    let started = Instant::now();
    let response = transport
        .send(get().retry(Retry::Safe).deadline(deadline))
        .await
        .unwrap();
    assert_eq!(response.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(revive.await.unwrap().requests.load(Ordering::SeqCst), 1);
    // And a deadline that passes ends the passes.
    let gone = dead().await;
    let transport = self::transport(&[&gone]);
    let started = Instant::now();
    let error = transport
        .send(
            get()
                .retry(Retry::Safe)
                .deadline(Instant::now() + Duration::from_millis(300)),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Unreachable { .. }), "{error:?}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[tokio::test]
async fn a_stream_fails_over_before_its_first_byte() {
    let dead = dead().await;
    let good = fake(Behaviour::Ok).await;
    let transport = transport(&[&dead, &good.url]);
    let opened = transport
        .open(Request::new(Method::Get, "/v1/events"))
        .await
        .unwrap();
    assert_eq!(
        (opened.status, opened.server.as_str()),
        (200, good.url.as_str())
    );
    let whole = opened.collect().await.unwrap();
    assert!(String::from_utf8_lossy(&whole.body).starts_with(r#"{"status":"found""#));
}

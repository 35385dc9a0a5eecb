//! Abusive HTTP clients: an oversized request head, and slow-loris clients
//! that trickle headers and never finish. The server refuses the first,
//! disconnects the second after its header timeout, and keeps serving
//! everyone else throughout.

mod lockd_server;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::lockd_server::Server;
use ::lockd_server::serve::{HEADER_READ_TIMEOUT, MAX_HEAD_BYTES};

#[test]
fn oversized_head_is_refused_and_the_server_keeps_serving() {
    let server = Server::start(&[]);
    let mut conn = TcpStream::connect(server.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let huge = "x".repeat(MAX_HEAD_BYTES * 2);
    let head = format!("GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: {huge}\r\n\r\n");
    // The server may close before reading it all; that is a refusal too.
    let _ = conn.write_all(head.as_bytes());
    let mut reply = Vec::new();
    let _ = conn.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    assert!(
        reply.is_empty() || reply.starts_with("HTTP/1.1 431"),
        "an oversized head was answered: {reply:.200}"
    );
    server.assert_healthy();
}

#[test]
fn slow_loris_clients_are_cut_off_and_others_are_served() {
    let server = Server::start(&[]);
    let started = Instant::now();
    // 64 clients that send part of a head and then stall.
    let mut stalled: Vec<TcpStream> = (0..64)
        .map(|_| {
            let mut c = TcpStream::connect(server.addr).unwrap();
            c.write_all(b"POST /v1/locks/get HTTP/1.1\r\nHost: t\r\nX-Slow: ")
                .unwrap();
            c
        })
        .collect();
    // Meanwhile everyone else is served promptly.
    for _ in 0..5 {
        let t = Instant::now();
        server.assert_healthy();
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "a normal request took {:?}",
            t.elapsed()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Every stalled client is disconnected once its header time runs out.
    let limit = HEADER_READ_TIMEOUT + Duration::from_secs(10);
    for c in &mut stalled {
        c.set_read_timeout(Some(
            limit
                .saturating_sub(started.elapsed())
                .max(Duration::from_millis(10)),
        ))
        .unwrap();
        let mut buf = [0u8; 512];
        match c.read(&mut buf) {
            // Closed (0 bytes), or a 408 before closing: either way, cut off.
            Ok(n) => {
                assert!(n == 0 || String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"))
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("a stalled client was not cut off within {limit:?}: {e}"),
        }
    }
    assert!(started.elapsed() >= HEADER_READ_TIMEOUT - Duration::from_secs(1));
    server.assert_healthy();
}

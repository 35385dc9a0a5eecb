//! `edge-wait-p3` (spin-sdk 7, `wasi:http/handler@0.3.0`) under `lockd serve`,
//! importing `lockd:lock@0.2.0`: a request waits seconds for a lock while
//! its instance goes on working (the guest's ticker) and other requests to
//! the component are answered.

use std::time::{Duration, Instant};

use lockd_core::LockOptions;

use super::{json, request, serve, wasm};

/// The component id, which is also its namespace.
const ID: &str = "edge-wait-p3";
/// How long the host holds the locks the guest waits for.
const HELD_FOR: Duration = Duration::from_millis(2_000);

/// Two `POST /wait/{id}` wait at once for locks the host holds for
/// [`HELD_FOR`]: one through 0.2.0's `async func lock`, one through 0.1.0's
/// synchronous `lock` (the negative control). Meanwhile `GET`s to the same
/// component are timed. Both POSTs get their lock once the host lets go;
/// only the 0.2.0 one kept its instance ticking during the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn edge_wait_p3() {
    let app = serve(&[("/wait/...", ID, wasm(lockd_tests::EDGE_WAIT_P3))], "").await;
    let service = app.service.clone();
    for name in ["wait/async", "wait/sync"] {
        service
            .lock(ID, name, "host", 60_000, LockOptions::default())
            .await
            .unwrap();
    }
    let addr = app.addr;
    let waiters = ["0.2.0", "0.1.0"].map(|via| {
        let name = if via == "0.2.0" { "async" } else { "sync" };
        tokio::spawn(async move {
            request(
                addr,
                "POST",
                format!("/wait/{name}?wait_ms=20000&via={via}"),
            )
            .await
        })
    });

    // Timed from when both wait in their queues, however long the
    // instances took to start.
    let deadline = Instant::now() + Duration::from_secs(10);
    for name in ["wait/async", "wait/sync"] {
        while service.describe(ID, name).await.unwrap().waiters != 1 {
            assert!(
                Instant::now() < deadline,
                "the guest never queued for {name}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    // The other requests, while both wait: each answered at once, and each
    // sees the host still holding the lock.
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut answered = 0;
    while started.elapsed() < HELD_FOR - Duration::from_millis(500) {
        let sent = Instant::now();
        let (status, body) = request(addr, "GET", "/wait/async").await;
        slowest = slowest.max(sent.elapsed());
        assert_eq!(status, 200, "{body}");
        assert_eq!(json(&body)["owner"], "host", "{body}");
        answered += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(answered >= 5, "only {answered} requests answered");
    assert!(
        slowest < Duration::from_millis(750),
        "a request took {slowest:?} while another waited for a lock"
    );
    tokio::time::sleep(HELD_FOR.saturating_sub(started.elapsed())).await;
    for name in ["wait/async", "wait/sync"] {
        service.unlock(ID, name, "host", None).await.unwrap();
    }

    let [v2, v1] = waiters;
    let (status, body) = v2.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let v2 = json(&body);
    let (status, body) = v1.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let v1 = json(&body);
    eprintln!(
        "edge-wait-p3: other requests {answered}, slowest {slowest:?}; 0.2.0 {v2}; 0.1.0 {v1}"
    );
    for done in [&v2, &v1] {
        assert_eq!(done["status"], "done", "{done}");
        assert!(done["fencing_token"].as_u64().is_some(), "{done}");
        assert!(
            done["waited_ms"].as_u64().unwrap() >= HELD_FOR.as_millis() as u64,
            "did not wait for the host: {done}"
        );
    }
    // 0.2.0: the ticker (20 ms sleeps) ran through the whole wait.
    let waited = v2["waited_ms"].as_u64().unwrap();
    assert!(
        v2["longest_tick_gap_ms"].as_u64().unwrap() < 500.min(waited / 2),
        "the instance stalled while its lock call waited: {v2}"
    );
    assert!(v2["ticks"].as_u64().unwrap() >= 10, "{v2}");
    // 0.1.0, the negative control: the synchronous call held the instance,
    // so the ticker stood still for (nearly) the whole wait.
    assert!(
        v1["longest_tick_gap_ms"].as_u64().unwrap() >= HELD_FOR.as_millis() as u64,
        "a synchronous wait did not hold the instance: {v1}"
    );
    // Each released its lock.
    for name in ["wait/async", "wait/sync"] {
        assert_eq!(service.get(ID, name).await.unwrap(), None, "{name} held");
    }
}

//! `edge-wait-p3` (spin-sdk 7, `wasi:http/handler@0.3.0`) under `lockd serve`,
//! importing `lockd:lock@0.2.0`: one instance serves a request that waits
//! seconds for a lock and, meanwhile, other requests; a request given up
//! while it waits leaves the lock's queue.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lockd_core::{LockOptions, LockService};
use serde_json::Value;
use tokio::task::JoinHandle;

use super::{json, request, serve, wasm};

/// The component id, which is also its namespace.
const ID: &str = "edge-wait-p3";
/// How long the host holds the locks the guest waits for.
const HELD_FOR: Duration = Duration::from_millis(2_000);
/// The slowest answer that still counts as "not held up by the wait": far
/// below [`HELD_FOR`].
const PROMPT: Duration = Duration::from_millis(750);
/// Instance reuse as lockd.toml sets it (these are the defaults, spelt out).
const REUSE: &str = "[limits]\ninstance_concurrent_requests = 16\ninstance_requests = 128\n";

/// One request sent while another waited: how long its answer took and
/// which instance gave it.
#[derive(Debug)]
struct Sample {
    latency: Duration,
    instance: u64,
}

/// The checker: were the requests sent during the wait answered promptly,
/// and by the waiting instance itself? `Ok` with a summary, or `Err` naming
/// what failed.
///
/// Most, not all, must come from the waiting instance: lockd may start
/// another instance for a request that arrives while the waiting one is
/// briefly busy (say, still finishing the previous request), which is no
/// stall. A held instance serves none.
fn served_beside_the_wait(waiting: u64, samples: &[Sample]) -> Result<String, String> {
    let on_waiting = samples.iter().filter(|s| s.instance == waiting).count();
    let slowest = samples.iter().map(|s| s.latency).max().unwrap_or_default();
    let mut latencies: Vec<_> = samples.iter().map(|s| s.latency).collect();
    latencies.sort();
    let median = latencies
        .get(latencies.len() / 2)
        .copied()
        .unwrap_or_default();
    let summary = format!(
        "{} requests, {on_waiting} by the waiting instance, median {median:?}, slowest {slowest:?}",
        samples.len()
    );
    if samples.len() < 5 {
        return Err(format!("too few requests answered: {summary}"));
    }
    if on_waiting * 5 < samples.len() * 4 {
        return Err(format!(
            "fewer than 80% served by the waiting instance: {summary}"
        ));
    }
    if slowest >= PROMPT {
        return Err(format!("held up by the wait: {summary}"));
    }
    Ok(summary)
}

/// Starts `POST /wait/{name}?via=...` and returns once the guest waits in
/// the lock's queue.
async fn start_waiter(app: &super::Running, name: &str, via: &str) -> JoinHandle<(u16, String)> {
    let addr = app.addr;
    let path = format!("/wait/{name}?wait_ms=20000&via={via}");
    let waiter = tokio::spawn(async move { request(addr, "POST", path).await });
    wait_for_waiters(&app.service, &format!("wait/{name}"), 1).await;
    waiter
}

/// Waits (up to 5 s) until `name` has `n` waiters; returns how long it took.
async fn wait_for_waiters(service: &LockService, name: &str, n: u64) -> Duration {
    let start = Instant::now();
    while service.describe(ID, name).await.unwrap().waiters != n {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{name} never had {n} waiters"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

/// `GET /wait/{name}` one after another until `until`, each timed.
async fn sample_until(addr: SocketAddr, name: &str, until: Instant) -> Vec<Sample> {
    let mut samples = Vec::new();
    while Instant::now() < until {
        let sent = Instant::now();
        let (status, body) = request(addr, "GET", format!("/wait/{name}")).await;
        let latency = sent.elapsed();
        assert_eq!(status, 200, "{body}");
        let body = json(&body);
        assert_eq!(body["owner"], "host", "{body}");
        samples.push(Sample {
            latency,
            instance: instance_of(&body),
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    samples
}

fn instance_of(body: &Value) -> u64 {
    body["instance"]
        .as_u64()
        .unwrap_or_else(|| panic!("no instance id: {body}"))
}

/// The answer of a waiter that got its lock once the host let go.
async fn done(waiter: JoinHandle<(u16, String)>) -> Value {
    let (status, body) = waiter.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let done = json(&body);
    assert_eq!(done["status"], "done", "{done}");
    assert!(
        done["waited_ms"].as_u64().unwrap() >= HELD_FOR.as_millis() as u64,
        "did not wait for the host: {done}"
    );
    done
}

/// With instance reuse on: request A awaits (0.2.0 `async func lock`) a
/// lock the host holds for [`HELD_FOR`], while `GET`s to the component are
/// answered promptly by A's own instance (they carry its instance id).
///
/// The negative control runs the same measurement while request C waits
/// through 0.1.0's synchronous `lock`, which holds C's whole instance: its
/// ticker stands still, the instance serves none of the `GET`s (lockd
/// sends them to another instance, as it does not take new requests while
/// held), and the checker must fail it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn edge_wait_p3() {
    let app = serve(
        &[("/wait/...", ID, wasm(lockd_guest_tests::EDGE_WAIT_P3))],
        REUSE,
    )
    .await;
    let service = app.service.clone();
    for name in ["wait/a", "wait/sync"] {
        service
            .lock(ID, name, "host", 60_000, LockOptions::default())
            .await
            .unwrap();
    }

    // A waits; the others are timed while it does.
    let a = start_waiter(&app, "a", "0.2.0").await;
    let held_until = Instant::now() + HELD_FOR;
    let samples = sample_until(app.addr, "a", held_until - Duration::from_millis(500)).await;
    tokio::time::sleep(held_until.saturating_duration_since(Instant::now())).await;
    service.unlock(ID, "wait/a", "host", None).await.unwrap();
    let a = done(a).await;
    let verdict = served_beside_the_wait(instance_of(&a), &samples);
    // The instance went on working inside A too: its ticker (20 ms sleeps)
    // ran through the whole wait.
    let waited = a["waited_ms"].as_u64().unwrap();
    assert!(
        a["longest_tick_gap_ms"].as_u64().unwrap() < 500.min(waited / 2),
        "the instance stalled while its lock call waited: {a}"
    );

    // The control: C waits through 0.1.0, the same measurement meanwhile.
    let sync = start_waiter(&app, "sync", "0.1.0").await;
    let held_until = Instant::now() + HELD_FOR;
    let control = sample_until(app.addr, "sync", held_until - Duration::from_millis(500)).await;
    tokio::time::sleep(held_until.saturating_duration_since(Instant::now())).await;
    service.unlock(ID, "wait/sync", "host", None).await.unwrap();
    let sync = done(sync).await;
    let control_verdict = served_beside_the_wait(instance_of(&sync), &control);
    let line = format!(
        "edge-wait-p3 reuse: while a 0.2.0 lock call waited {HELD_FOR:?}: {verdict:?}; \
         control, a 0.1.0 synchronous wait: {control_verdict:?}, its instance stood still {} ms",
        sync["longest_tick_gap_ms"]
    );
    eprintln!("{line}");
    lockd_test_support::report(&line);
    verdict.unwrap();
    assert!(control_verdict.is_err(), "the checker missed a stall");
    assert!(
        sync["longest_tick_gap_ms"].as_u64().unwrap() >= HELD_FOR.as_millis() as u64,
        "a synchronous wait did not hold its instance: {sync}"
    );
    for name in ["wait/a", "wait/sync"] {
        assert_eq!(service.get(ID, name).await.unwrap(), None, "{name} held");
    }
}

/// A request whose client goes away while it waits (0.2.0) in a reused
/// instance: its wait leaves the lock's queue (a connected waiter, the
/// control, stays queued), the instance goes on serving, and once the host
/// lets go the next taker gets the lock at once: no phantom holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_wait_p3_given_up_wait_leaves_the_queue() {
    use tokio::io::AsyncWriteExt as _;

    let app = serve(
        &[("/wait/...", ID, wasm(lockd_guest_tests::EDGE_WAIT_P3))],
        REUSE,
    )
    .await;
    let service = app.service.clone();
    let name = "wait/gone";
    service
        .lock(ID, name, "host", 60_000, LockOptions::default())
        .await
        .unwrap();
    let mut client = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "POST /wait/gone?wait_ms=20000 HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\n\r\n",
        app.addr
    );
    client.write_all(head.as_bytes()).await.unwrap();
    wait_for_waiters(&service, name, 1).await;
    // Control: while its client is connected, the waiter stays queued.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(service.describe(ID, name).await.unwrap().waiters, 1);

    drop(client);
    let left_after = wait_for_waiters(&service, name, 0).await;
    // The instance serves on.
    let (status, body) = request(app.addr, "GET", "/wait/gone").await;
    assert_eq!((status, json(&body)["owner"].as_str()), (200, Some("host")));

    service.unlock(ID, name, "host", None).await.unwrap();
    let next = service
        .lock(ID, name, "next", 10_000, LockOptions::default())
        .await
        .expect("the lock went to a waiter that was given up");
    // And it stays so: the given-up task is never granted it later.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let info = service.get(ID, name).await.unwrap().expect("held");
    assert_eq!(
        (info.owner.as_str(), info.fencing_token),
        ("next", next.fencing_token)
    );
    assert_eq!(service.describe(ID, name).await.unwrap().waiters, 0);
    let line = format!("edge-wait-p3 given up: the waiter left the queue {left_after:?} after its client went away");
    eprintln!("{line}");
    lockd_test_support::report(&line);
}

/// Failures in a reused instance: a trap answers 500; past
/// `request_timeout_ms`, a request still waiting for a lock answers 500
/// and its wait leaves the queue; a runaway guest (a loop that never yields) answers 500 too, its
/// instance is dropped rather than left spinning, and the component serves
/// on.
///
/// The runtime's threads carry a name of their own, so that the CPU they
/// use afterwards can be told from that of the tests running beside.
#[test]
fn edge_wait_p3_failures_end_in_500_and_bounded_instances() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(THREADS)
        .enable_all()
        .build()
        .unwrap()
        .block_on(failures_end_in_500_and_bounded_instances());
}

/// The name of [`edge_wait_p3_failures_end_in_500_and_bounded_instances`]'s threads
/// (15 bytes: Linux keeps no more of a thread's name).
const THREADS: &str = "ew-timeout-test";

async fn failures_end_in_500_and_bounded_instances() {
    const TIMEOUT: Duration = Duration::from_millis(1_000);
    let limits = format!("{REUSE}request_timeout_ms = {}\n", TIMEOUT.as_millis());
    let app = serve(
        &[("/wait/...", ID, wasm(lockd_guest_tests::EDGE_WAIT_P3))],
        &limits,
    )
    .await;
    let service = app.service.clone();
    service
        .lock(ID, "wait/slow", "host", 60_000, LockOptions::default())
        .await
        .unwrap();

    // A trap answers 500 at once.
    let (status, body) = request(app.addr, "POST", "/wait/slow?via=trap").await;
    assert_eq!(status, 500, "trap: {body}");
    assert!(body.contains("trapped"), "trap: {body}");

    for via in ["0.2.0", "spin"] {
        let sent = Instant::now();
        let (status, body) = request(
            app.addr,
            "POST",
            format!("/wait/slow?wait_ms=20000&via={via}"),
        )
        .await;
        let took = sent.elapsed();
        assert_eq!(status, 500, "{via}: {body}");
        assert!(body.contains("timed out"), "{via}: {body}");
        assert!(
            took >= TIMEOUT && took < TIMEOUT * 3,
            "{via}: answered after {took:?}"
        );
        eprintln!("edge-wait-p3 timeout: via {via} answered 500 after {took:?}");
        // The wait that timed out left the queue; the component serves on.
        wait_for_waiters(&service, "wait/slow", 0).await;
        let (status, body) = request(app.addr, "GET", "/wait/slow").await;
        assert_eq!((status, json(&body)["owner"].as_str()), (200, Some("host")));
    }
    // The runaway's instance was dropped, not left spinning: this test's
    // threads are nearly idle (a spinning guest keeps one busy). It may
    // have taken the GET sent after it (it yields every epoch tick), and
    // then lives at most a timeout past that GET.
    tokio::time::sleep(TIMEOUT + Duration::from_millis(300)).await;
    let (cpu_before, wall) = (threads_cpu(), Instant::now());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let busy = (threads_cpu() - cpu_before).as_secs_f64() / wall.elapsed().as_secs_f64();
    eprintln!(
        "edge-wait-p3 timeout: afterwards the server used {:.0}% of a core",
        busy * 100.0
    );
    assert!(
        busy < 0.25,
        "a runaway instance is still running ({busy:.2} cores)"
    );
}

/// CPU time (user and system) used by the threads named [`THREADS`].
fn threads_cpu() -> Duration {
    let mut ticks = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != THREADS {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // The fields after the thread's name (in parentheses); utime and
        // stime are fields 14 and 15 of the line, in clock ticks (100 a
        // second on Linux).
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        ticks += fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    }
    Duration::from_millis(ticks * 10)
}

//! Rate limits per token (`rate_per_sec`, `burst` on `[[auth.tokens]]`)
//! against the real `lockd` binary: the limit held with 429
//! `rate_limited`, `Retry-After` and the JSON error body; other tokens
//! unaffected; refusals counted by token name in `/metrics`; SIGHUP putting
//! a new limit in force (a fresh bucket for a changed limit, the same one
//! for an unchanged limit) and refusing bad values with the old limits left
//! in force; bad values refused at start; and a token flooding the server
//! while another token's lock calls and an event stream go on as usual.

mod lockd_server;

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::lockd_server::{lockd_in_dir, metric_value, request, Reply, Server};
use ::lockd_server::auth::{digest, to_hex};
use serde_json::{json, Value};

const CI: &str = "ci-4f1d8a0b6c2e4b7d9e35";
const OPS: &str = "ops-9a2c5e7f1b3d4c6e8a01";
const STEADY: &str = "steady-6b0e3c9d2a7f4e18b5c4";
const FLOOD: &str = "flood-1c7e9b3a5d2f4a6c8e90";
const WORKER: &str = "worker-3e5a7c9b1d4f6e8a0c27";
const WATCH: &str = "watch-8d2b4f6a0c3e5b7d9f14";

/// An `[[auth.tokens]]` entry; `limits` is its `rate_per_sec` and `burst`
/// lines, if any.
fn entry(name: &str, token: &str, namespaces: &str, role: &str, limits: &str) -> String {
    format!(
        "[[auth.tokens]]\nname = {name:?}\nsha256 = {:?}\nnamespaces = {namespaces}\n\
         role = {role:?}\n{limits}\n",
        to_hex(&digest(token))
    )
}

/// `ops`: an admin over every namespace without a limit, to read /metrics.
fn ops() -> String {
    entry("ops", OPS, r#"["*"]"#, "admin", "")
}

fn lock(server: &Server, namespace: &str, name: &str, token: &str) -> Reply {
    let body = json!({"namespace": namespace, "name": name, "owner": "o", "ttl_ms": 60_000});
    request(
        "POST",
        &server.url,
        "/v1/locks/lock",
        Some(&body.to_string()),
        Some(token),
    )
}

fn metrics(server: &Server) -> String {
    let r = request("GET", &server.url, "/metrics", None, Some(OPS));
    assert_eq!(r.code, 200, "{}", r.body);
    r.body
}

/// The refused count of `token` in `/metrics`.
fn refused(server: &Server, token: &str) -> u64 {
    let series = format!("lockd_rate_limited_total{{token=\"{token}\"}}");
    metric_value(&metrics(server), &series)
}

/// Checks that `r` is the 429 of `token`, and returns its `Retry-After`.
fn assert_rate_limited(r: &Reply, token: &str) -> u64 {
    assert_eq!((r.code, r.status()), (429, "rate_limited"), "{}", r.body);
    let keys: Vec<&String> = r.json.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["message", "status"], "{}", r.body);
    assert!(
        r.message()
            .starts_with(&format!("token {token:?} is over its rate limit (")),
        "{}",
        r.body
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    let retry: u64 = r
        .header("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After: {r:?}"))
        .parse()
        .unwrap();
    assert!(retry >= 1, "{r:?}");
    retry
}

/// Sends SIGHUP to `server`.
fn hangup(server: &Server) {
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// Waits up to 10 s for `done`.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "not within 10 s: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start(dir: &Path, config: &str) -> Server {
    std::fs::write(dir.join("lockd.toml"), config).unwrap();
    Server::start_in(Some(dir), &["--store", "memory"], &[])
}

#[test]
fn a_token_over_its_limit_is_refused_with_429_and_others_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let config = entry(
        "ci",
        CI,
        r#"["ci"]"#,
        "locker",
        "rate_per_sec = 5\nburst = 5",
    ) + &ops();
    let server = start(dir.path(), &config);
    let begun = Instant::now();
    for i in 0..5 {
        let r = lock(&server, "ci", &format!("l{i}"), CI);
        assert_eq!(r.code, 200, "call {i}: {}", r.body);
    }
    // The 6th immediate call is refused (one more may pass if the calls
    // took over 200 ms, a token's refill time).
    let mut passed = 5;
    let refusal = loop {
        let r = lock(&server, "ci", &format!("l{passed}"), CI);
        if r.code != 200 {
            break r;
        }
        passed += 1;
    };
    let allowed = 5.0 + begun.elapsed().as_secs_f64() * 5.0;
    assert!(f64::from(passed) <= allowed.ceil(), "{passed} calls passed");
    let retry = assert_rate_limited(&refusal, "ci");
    assert!(
        refusal.message().contains("(5 requests a second, burst 5)"),
        "{}",
        refusal.body
    );
    // Any route of the token is refused, before its body is even read.
    let r = request("POST", &server.url, "/v1/locks/get", Some("{"), Some(CI));
    assert_rate_limited(&r, "ci");
    // Another token, /healthz, and the refused names are untouched.
    for i in 0..20 {
        assert_eq!(lock(&server, "ci", &format!("ops{i}"), OPS).code, 200);
    }
    assert_eq!(
        request("GET", &server.url, "/healthz", None, None).code,
        200
    );
    let r = request(
        "POST",
        &server.url,
        "/v1/locks/get",
        Some(&json!({"namespace": "ci", "name": format!("l{passed}")}).to_string()),
        Some(OPS),
    );
    assert_eq!(r.status(), "not_found", "{}", r.body);
    // Counted by name; every configured token has its series.
    assert_eq!(refused(&server, "ci"), 2);
    assert_eq!(refused(&server, "ops"), 0);
    let text = metrics(&server);
    assert_eq!(
        metric_value(&text, "lockd_rate_limit_per_second{token=\"ci\"}"),
        5
    );
    assert_eq!(
        metric_value(&text, "lockd_rate_limit_burst{token=\"ci\"}"),
        5
    );
    assert!(!text.contains("lockd_rate_limit_burst{token=\"ops\"}"));
    // After the wait, the token is allowed again.
    std::thread::sleep(Duration::from_secs(retry));
    assert_eq!(lock(&server, "ci", "after", CI).code, 200);
}

/// The config of the reload test: `ci` with `ci_limits`, `steady` with a
/// limit that never changes, `ops` without one.
fn reload_config(ci_limits: &str) -> String {
    entry("ci", CI, r#"["ci"]"#, "locker", ci_limits)
        + &entry(
            "steady",
            STEADY,
            r#"["ci"]"#,
            "locker",
            "rate_per_sec = 0.05\nburst = 2",
        )
        + &ops()
}

const RATE: &str = "rate_per_sec must be a positive number";
const BURST: &str = "burst must be a positive whole number";

/// Bad `rate_per_sec` and `burst` lines for `ci`, with what the refusal
/// says after `[[auth.tokens]] entry 1 (name "ci"): `.
const BAD_LIMITS: [(&str, &str); 9] = [
    ("rate_per_sec = 0", RATE),
    ("rate_per_sec = -2.5", RATE),
    ("rate_per_sec = nan", RATE),
    (
        "rate_per_sec = \"fast\"",
        "rate_per_sec must be a positive number of requests a second, not the string \"fast\"",
    ),
    ("rate_per_sec = 5\nburst = 0", BURST),
    ("rate_per_sec = 5\nburst = -1", BURST),
    ("rate_per_sec = 5\nburst = 1.5", BURST),
    ("rate_per_sec = 5\nburst = \"5\"", BURST),
    ("burst = 5", "burst is set without rate_per_sec"),
];

#[test]
fn sighup_puts_new_limits_in_force_and_refuses_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("lockd.toml");
    let log = dir.path().join("stderr.log");
    std::fs::write(&toml, reload_config("rate_per_sec = 1\nburst = 1")).unwrap();
    let server = Server::start_logging_to(&log, Some(dir.path()), &["--store", "memory"]);
    let logged = |line: &str| std::fs::read_to_string(&log).unwrap().matches(line).count();
    assert_eq!(lock(&server, "ci", "a", CI).code, 200);
    assert_rate_limited(&lock(&server, "ci", "b", CI), "ci");
    for name in ["s1", "s2"] {
        assert_eq!(lock(&server, "ci", name, STEADY).code, 200);
    }
    assert_rate_limited(&lock(&server, "ci", "s3", STEADY), "steady");

    // A higher limit for ci: a fresh, full bucket of 20. steady's limit is
    // the same, so it keeps its bucket, still empty (a token every 20 s).
    std::fs::write(&toml, reload_config("rate_per_sec = 2\nburst = 20")).unwrap();
    hangup(&server);
    eventually("the new limit in force", || {
        metric_value(&metrics(&server), "lockd_rate_limit_burst{token=\"ci\"}") == 20
    });
    for i in 0..20 {
        let r = lock(&server, "ci", &format!("c{i}"), CI);
        assert_eq!(r.code, 200, "call {i} after the reload: {}", r.body);
    }
    assert_rate_limited(&lock(&server, "ci", "c20", CI), "ci");
    assert_rate_limited(&lock(&server, "ci", "s4", STEADY), "steady");
    // The counts go on across the reload.
    assert_eq!((refused(&server, "ci"), refused(&server, "steady")), (2, 2));
    assert_eq!(logged("tokens reloaded"), 1);
    assert_eq!(logged("rate limit changed"), 1);

    // Each bad value: logged, and the limits in force stay.
    for (i, (limits, said)) in BAD_LIMITS.iter().enumerate() {
        std::fs::write(&toml, reload_config(limits)).unwrap();
        hangup(&server);
        eventually("the refusal logged", || {
            logged("tokens not reloaded") == i + 1
        });
        let text = std::fs::read_to_string(&log).unwrap();
        let line = text.lines().rfind(|l| l.contains("tokens not reloaded"));
        let line = line.unwrap();
        assert!(
            line.contains("[[auth.tokens]] entry 1 (name \\\"ci\\\"): ")
                || line.contains("[[auth.tokens]] entry 1 (name \"ci\"): "),
            "{limits}: {line}"
        );
        assert!(line.contains(said), "{limits}: {line}");
        let text = metrics(&server);
        assert_eq!(
            metric_value(&text, "lockd_rate_limit_burst{token=\"ci\"}"),
            20
        );
        assert_eq!(
            metric_value(&text, "lockd_rate_limit_per_second{token=\"ci\"}"),
            2
        );
    }
    let text = std::fs::read_to_string(&log).unwrap();
    for token in [CI, OPS, STEADY] {
        assert!(!text.contains(token), "a token in the log:\n{text}");
    }
    assert_eq!(logged("tokens reloaded"), 1);
}

#[test]
fn bad_limits_stop_the_server_at_start_naming_the_token_and_key() {
    for (limits, said) in BAD_LIMITS {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lockd.toml"), reload_config(limits)).unwrap();
        let run = lockd_in_dir(
            Some(dir.path()),
            &["serve", "--store", "memory", "--listen", "127.0.0.1:0"],
            &[],
        );
        assert_eq!(run.code, Some(2), "{limits}: {run:?}");
        let expected = format!("[[auth.tokens]] entry 1 (name \"ci\"): {said}");
        assert!(run.stderr.contains(&expected), "{limits}: {run:?}");
        assert!(!run.stderr.contains(&to_hex(&digest(CI))), "{run:?}");
    }
}

/// A `GET /v1/events` stream read line by line on a thread.
struct EventStream {
    lines: mpsc::Receiver<String>,
}

impl EventStream {
    fn open(server: &Server, path: &str, token: &str) -> EventStream {
        let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
        let body = agent
            .get(format!("{}{path}", server.url))
            .header("Authorization", format!("Bearer {token}"))
            .call()
            .unwrap()
            .into_body();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(body.into_reader()).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stream = EventStream { lines };
        assert_eq!(stream.next_line(), ": lockd events");
        stream
    }

    fn next_line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(10))
            .expect("the event stream went quiet for 10 s")
    }

    /// The names of the next `n` `acquired` events.
    fn acquired(&self, n: usize) -> Vec<String> {
        let mut names = Vec::new();
        while names.len() < n {
            let line = self.next_line();
            let Some(data) = line.strip_prefix("data: ") else {
                continue;
            };
            let event: Value = serde_json::from_str(data).unwrap();
            if event["type"] == "acquired" {
                names.push(event["name"].as_str().unwrap().to_string());
            }
        }
        names
    }
}

/// How many flooding threads, and requests each sends at most.
const FLOODERS: usize = 4;
const FLOOD_EACH: usize = 500;
/// The flood stops here even if not every request was sent.
const FLOOD_FOR: Duration = Duration::from_secs(5);

/// One flooding thread: up to [`FLOOD_EACH`] lock calls of `flood` over one
/// keep-alive agent, until `until`. Returns (200s, 429s, others).
fn flood(url: String, thread: usize, until: Instant) -> (u64, u64, u64) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut counts = (0, 0, 0);
    for i in 0..FLOOD_EACH {
        if Instant::now() >= until {
            break;
        }
        let body = json!({"namespace": "flood", "name": format!("f{thread}-{i}"),
                          "owner": "o", "ttl_ms": 60_000});
        let code = agent
            .post(format!("{url}/v1/locks/lock"))
            .header("Authorization", format!("Bearer {FLOOD}"))
            .content_type("application/json")
            .send(body.to_string())
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        match code {
            200 => counts.0 += 1,
            429 => counts.1 += 1,
            _ => counts.2 += 1,
        }
    }
    counts
}

/// `worker`'s lock and unlock of `name`: the time of the lock call.
fn worker_round_trip(server: &Server, name: &str) -> Duration {
    let begun = Instant::now();
    let r = lock(server, "work", name, WORKER);
    let took = begun.elapsed();
    assert_eq!(r.code, 200, "{name}: {}", r.body);
    let body = json!({"namespace": "work", "name": name, "owner": "o",
                      "fencing_token": r.json["fencing_token"]});
    let r = request(
        "POST",
        &server.url,
        "/v1/locks/unlock",
        Some(&body.to_string()),
        Some(WORKER),
    );
    assert_eq!(r.code, 200, "{name}: {}", r.body);
    took
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// The sum of `lockd_operations_total{op="lock",...}`: lock calls the
/// service answered.
fn lock_operations(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.strip_prefix("lockd_operations_total{op=\"lock\","))
        .map(|rest| rest.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum()
}

#[test]
fn a_flooding_token_starves_neither_other_tokens_nor_an_event_stream() {
    let dir = tempfile::tempdir().unwrap();
    let config = entry(
        "flood",
        FLOOD,
        r#"["flood"]"#,
        "locker",
        "rate_per_sec = 50\nburst = 50",
    ) + &entry("worker", WORKER, r#"["work"]"#, "locker", "")
        // One request every 1000 s: the stream's opening is the only one.
        + &entry("watch", WATCH, r#"["*"]"#, "reader", "rate_per_sec = 0.001")
        + &ops();
    let server = start(dir.path(), &config);
    let before: Vec<Duration> = (0..20)
        .map(|i| worker_round_trip(&server, &format!("before-{i}")))
        .collect();
    let stream = EventStream::open(&server, "/v1/events?namespace=work", WATCH);
    // The stream took watch's one request; it stays open and carries every
    // event (a stream is one request, when it opens, not one per event).
    let r = request("GET", &server.url, "/v1/namespaces", None, Some(WATCH));
    assert_rate_limited(&r, "watch");
    let ops_before = lock_operations(&metrics(&server));

    let begun = Instant::now();
    let until = begun + FLOOD_FOR;
    let flooders: Vec<_> = (0..FLOODERS)
        .map(|t| {
            let url = server.url.clone();
            std::thread::spawn(move || flood(url, t, until))
        })
        .collect();
    let mut during = Vec::new();
    while during.len() < 20 || flooders.iter().any(|f| !f.is_finished()) {
        let name = format!("during-{}", during.len());
        during.push(worker_round_trip(&server, &name));
    }
    let flood_took = begun.elapsed();
    let (ok, limited, other) = flooders
        .into_iter()
        .map(|f| f.join().unwrap())
        .fold((0, 0, 0), |a, c| (a.0 + c.0, a.1 + c.1, a.2 + c.2));
    let sent = ok + limited + other;
    let (before_p50, during_p50) = (median(before), median(during.clone()));
    let during_max = during.iter().max().copied().unwrap();
    eprintln!(
        "flood: {sent} requests in {flood_took:.2?} ({ok} admitted, {limited} refused); \
         worker: {} lock calls, median {before_p50:.2?} before and {during_p50:.2?} \
         during, slowest {during_max:.2?}",
        during.len()
    );
    assert_eq!(other, 0, "every flood request is 200 or 429");
    assert!(sent >= 1000, "the flood sent only {sent} requests");
    // At most the burst and the rate over the flood's time (and a little
    // for the rounding of time) were admitted.
    let admitted = 50.0 + 50.0 * flood_took.as_secs_f64() + 5.0;
    assert!((ok as f64) <= admitted, "{ok} admitted");
    assert!(limited > 0);
    // Refused before any work: the service answered only the admitted
    // lock calls and the worker's.
    let text = metrics(&server);
    assert_eq!(
        lock_operations(&text) - ops_before,
        ok + during.len() as u64
    );
    assert_eq!(
        metric_value(&text, "lockd_rate_limited_total{token=\"flood\"}"),
        limited
    );
    assert_eq!(
        metric_value(&text, "lockd_rate_limited_total{token=\"worker\"}"),
        0
    );
    // The worker saw no refusal and no slowdown worth the name.
    assert!(
        during_max < Duration::from_secs(1),
        "slowest: {during_max:?}"
    );
    assert!(
        during_p50 < (before_p50 * 10).max(Duration::from_millis(50)),
        "median {during_p50:?} during, {before_p50:?} before"
    );
    // The stream carried every one of the worker's locks, in order.
    let names = stream.acquired(during.len());
    let expected: Vec<String> = (0..during.len()).map(|i| format!("during-{i}")).collect();
    assert_eq!(names, expected);
    assert_eq!(metric_value(&text, "lockd_event_streams"), 1);
}

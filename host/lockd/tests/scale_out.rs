//! Many lockd hosts, one etcd (docs/operating.md#etcd): three etcd members
//! and two `lockd serve --store etcd:<all three>` processes on loopback, each
//! host in its own working directory, driven over REST.
//!
//! - a holder on host A makes host B answer `busy` with A's owner and token;
//! - the same through the example app's edge function, served by both hosts
//!   (`lockd up`): a job running on A makes the job on B answer `busy`;
//! - an unlock on A wakes B's waiter at once, with a higher token;
//! - A SIGKILLed while holding a persistent lock: B gets it at the lock's
//!   expiry (not before, and not at the end of its etcd lease);
//! - the etcd leader SIGKILLed under load from both hosts: calls go on, some
//!   answer `unavailable` during the election, and the history checker
//!   (`lockd_test_support::history`) finds no violation.
//!
//! The figures printed by `leader_loss_under_load_keeps_the_contract` go into
//! docs/operating.md#etcd. The etcd members and lockd processes are SIGKILLed on
//! drop, panics included.

mod lockd_server;
mod recorded_client;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::lockd_server::{request, Reply, Server};
use lockd_test_support::etcd::EtcdCluster;
use lockd_test_support::history::{check_report, History, Outcome, Recorder};
use recorded_client::{Client, Rng, Target};
use serde_json::json;

/// Per-host settings, written to each host's `lockd.toml`: shorter etcd
/// timeouts than the defaults, so calls cut off by the election answer
/// `unavailable` within the clients' own timeouts. The lease slack keeps its
/// 5 s default, so a lease outlives its lock by seconds (see
/// `a_dead_hosts_lock_passes_on_at_its_expiry`).
const LOCKD_TOML: &str = "[etcd]\n\
                          dial_timeout_ms = 2000\n\
                          request_timeout_ms = 2000\n";

/// How far a host's expiry may be from the test's own clock (all on one
/// machine, so only rounding and scheduling).
const SKEW_MS: u64 = 50;

/// Three etcd members and `hosts` lockd processes using all of them.
struct ScaleOut {
    // Hosts first: they are dropped (killed) before etcd goes away.
    hosts: Vec<Server>,
    etcd: EtcdCluster,
    _dirs: Vec<tempfile::TempDir>,
}

impl ScaleOut {
    /// `hosts` times `lockd serve`: the REST API only.
    fn start(hosts: usize) -> ScaleOut {
        ScaleOut::start_with(hosts, None)
    }

    /// `hosts` times `lockd up` in a directory holding `manifest` as its
    /// `spin.toml`: the app's edge functions next to the REST API.
    fn start_with(hosts: usize, manifest: Option<&str>) -> ScaleOut {
        let etcd = EtcdCluster::start_members(3).expect("etcd did not start");
        let store = format!("etcd:{}", etcd.endpoints().join(","));
        let mut dirs = Vec::new();
        let hosts = (0..hosts)
            .map(|_| {
                let dir = tempfile::tempdir().unwrap();
                std::fs::write(dir.path().join("lockd.toml"), LOCKD_TOML).unwrap();
                let server = match manifest {
                    None => Server::start_in(Some(dir.path()), &["--store", &store], &[]),
                    Some(manifest) => {
                        std::fs::write(dir.path().join("spin.toml"), manifest).unwrap();
                        Server::up_in(dir.path(), &["--store", &store])
                    }
                };
                dirs.push(dir);
                server
            })
            .collect();
        ScaleOut {
            hosts,
            etcd,
            _dirs: dirs,
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A successful grant.
#[derive(Debug, Clone, Copy)]
struct Granted {
    token: u64,
    expires_at_ms: u64,
}

fn lock_body(name: &str, owner: &str, ttl_ms: u64, wait_ms: u64) -> String {
    json!({"name": name, "owner": owner, "ttl_ms": ttl_ms, "wait_ms": wait_ms}).to_string()
}

fn granted(r: &Reply) -> Granted {
    assert_eq!((r.code, r.status()), (200, "acquired"), "{}", r.body);
    Granted {
        token: r.json["fencing_token"].as_u64().unwrap(),
        expires_at_ms: r.json["expires_at_ms"].as_u64().unwrap(),
    }
}

fn lock(host: &Server, name: &str, owner: &str, ttl_ms: u64) -> Granted {
    granted(&host.post("/v1/locks/lock", &lock_body(name, owner, ttl_ms, 0)))
}

#[test]
fn a_holder_on_one_host_makes_the_other_answer_busy() {
    let cluster = ScaleOut::start(2);
    let (a, b) = (&cluster.hosts[0], &cluster.hosts[1]);
    let alice = lock(a, "shared", "alice", 60_000);

    let r = b.post("/v1/locks/lock", &lock_body("shared", "bob", 60_000, 0));
    assert_eq!((r.code, r.status()), (409, "busy"), "{}", r.body);
    assert_eq!(r.json["owner"], "alice");
    assert_eq!(r.json["fencing_token"], alice.token);
    assert_eq!(r.json["expires_at_ms"], alice.expires_at_ms);

    // B sees the same holder and cannot release it, even with the token.
    let r = b.post_json("/v1/locks/get", &json!({"name": "shared"}));
    assert_eq!((r.code, r.status()), (200, "found"), "{}", r.body);
    assert_eq!(r.json["owner"], "alice");
    assert_eq!(r.json["fencing_token"], alice.token);
    let r = b.post_json(
        "/v1/locks/unlock",
        &json!({"name": "shared", "owner": "bob", "fencing_token": alice.token}),
    );
    assert_eq!((r.code, r.status()), (409, "not_owner"), "{}", r.body);

    // Alice may release it through B: the lock lives in etcd, not on A.
    let r = b.post_json(
        "/v1/locks/unlock",
        &json!({"name": "shared", "owner": "alice", "fencing_token": alice.token}),
    );
    assert_eq!((r.code, r.status()), (200, "unlocked"), "{}", r.body);
    let bob = lock(b, "shared", "bob", 60_000);
    assert!(bob.token > alice.token, "{bob:?} after {alice:?}");
}

/// The example app's job runner (`guest/edge-jobs`, a Spin HTTP component
/// that holds `job/{id}` for about 200 ms while it works), served by both
/// hosts from one build.
fn edge_jobs_manifest() -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let status = Command::new("bash")
        .arg(repo.join("guest/build-all.sh"))
        .arg("edge-jobs")
        .status()
        .unwrap();
    assert!(status.success(), "building edge-jobs: {status}");
    let wasm = repo
        .join("target/guests/edge-jobs.wasm")
        .canonicalize()
        .unwrap();
    format!(
        "spin_manifest_version = 2\n\
         [application]\nname = \"scale-out\"\n\
         [[trigger.http]]\nroute = \"/jobs/...\"\ncomponent = \"edge-jobs\"\n\
         [component.edge-jobs]\nsource = '{}'\n",
        wasm.display()
    )
}

#[test]
fn an_edge_function_on_one_host_makes_the_other_answer_busy() {
    let cluster = ScaleOut::start_with(2, Some(&edge_jobs_manifest()));
    let (a, b) = (&cluster.hosts[0], &cluster.hosts[1]);
    // A round is lost (and retried under a new id) only if A's 200 ms job
    // ends before B's call gets to etcd.
    let mut busy_rounds = 0;
    for round in 0..5 {
        let path = format!("/jobs/round-{round}");
        let (a_reply, seen_on_b, b_reply) = thread::scope(|s| {
            let job = s.spawn(|| a.post(&path, ""));
            // B's own instance of the function reads the lock A's instance
            // took: the grant lives in etcd.
            let deadline = Instant::now() + Duration::from_secs(10);
            let seen = loop {
                let r = b.get(&path);
                assert_eq!(r.code, 200, "GET on B: {}", r.body);
                if r.json["status"] == "held" {
                    break r;
                }
                assert!(Instant::now() < deadline, "B never saw A's job: {}", r.body);
                thread::sleep(Duration::from_millis(5));
            };
            let b_reply = b.post(&path, "");
            (job.join().unwrap(), seen, b_reply)
        });
        assert_eq!(
            (a_reply.code, a_reply.json["status"].as_str()),
            (200, Some("done")),
            "{}",
            a_reply.body
        );
        let a_token = a_reply.json["fencing_token"].as_u64().unwrap();
        assert_eq!(
            seen_on_b.json["fencing_token"], a_token,
            "{}",
            seen_on_b.body
        );
        let a_owner = seen_on_b.json["owner"].as_str().unwrap();
        assert!(a_owner.starts_with("edge-"), "{}", seen_on_b.body);

        if b_reply.code == 409 {
            assert_eq!(b_reply.json["status"], "busy", "{}", b_reply.body);
            assert_eq!(b_reply.json["holder"], a_owner, "{}", b_reply.body);
            busy_rounds += 1;
            // A's job is over, so B's now runs, with a later token.
            let again = b.post(&path, "");
            assert_eq!(again.code, 200, "{}", again.body);
            let b_token = again.json["fencing_token"].as_u64().unwrap();
            assert!(b_token > a_token, "B's token {b_token} after A's {a_token}");
            break;
        }
        // B came after A's unlock: its job ran, after A's.
        assert_eq!(b_reply.code, 200, "{}", b_reply.body);
        let b_token = b_reply.json["fencing_token"].as_u64().unwrap();
        assert!(b_token > a_token, "B's token {b_token} after A's {a_token}");
        println!("round {round}: A's job ended before B's call; again");
    }
    assert_eq!(busy_rounds, 1, "B never called while A's job ran");
    assert_eq!(a.get("/jobs/round-0").json["status"], "free");
}

#[test]
fn an_unlock_on_one_host_wakes_a_waiter_on_the_other() {
    // TTLs of a minute: a grant within seconds can only come from the unlock.
    const TTL_MS: u64 = 60_000;
    let cluster = ScaleOut::start(2);
    let (a, b) = (&cluster.hosts[0], &cluster.hosts[1]);
    let alice = lock(a, "queue", "alice", TTL_MS);

    let b_url = b.url.clone();
    let waiter = thread::spawn(move || {
        let r = request(
            "POST",
            &b_url,
            "/v1/locks/lock",
            Some(&lock_body("queue", "bob", TTL_MS, 30_000)),
            None,
        );
        (r, Instant::now())
    });
    // A counts the waiter keys in etcd: B's waiter is queued cluster-wide.
    a.wait_for_waiters(1);

    let r = a.post_json(
        "/v1/locks/unlock",
        &json!({"name": "queue", "owner": "alice", "fencing_token": alice.token}),
    );
    assert_eq!((r.code, r.status()), (200, "unlocked"), "{}", r.body);
    let unlocked = Instant::now();
    let (reply, answered) = waiter.join().unwrap();
    let bob = granted(&reply);
    let woken_after = answered.saturating_duration_since(unlocked);
    println!("B's waiter answered {woken_after:?} after A's unlock returned");
    assert!(bob.token > alice.token, "{bob:?} after {alice:?}");
    assert!(
        woken_after < Duration::from_secs(2),
        "B was woken {woken_after:?} after the unlock"
    );
    // The grant's expiry is counted from the hand-off, not from the call.
    assert!(bob.expires_at_ms + SKEW_MS >= now_ms() + TTL_MS - 2_000);
    let r = a.post_json("/v1/locks/get", &json!({"name": "queue"}));
    assert_eq!(r.json["owner"], "bob", "{}", r.body);
    a.wait_for_waiters(0);
}

#[test]
fn a_dead_hosts_lock_passes_on_at_its_expiry() {
    // Long enough to kill host A and ask host B before the expiry, on a
    // busy machine too.
    const TTL_MS: u64 = 4_000;
    let mut cluster = ScaleOut::start(2);
    let alice = lock(&cluster.hosts[0], "job", "alice", TTL_MS);
    cluster.hosts[0].kill();

    let b = &cluster.hosts[1];
    // The dead host's lock is still held until its expiry.
    let r = b.post_json("/v1/locks/get", &json!({"name": "job"}));
    assert!(
        now_ms() < alice.expires_at_ms,
        "the test machine was too slow"
    );
    assert_eq!((r.code, r.status()), (200, "found"), "{}", r.body);
    assert_eq!(r.json["owner"], "alice");

    let r = b.post("/v1/locks/lock", &lock_body("job", "bob", 10_000, 15_000));
    let answered_ms = now_ms();
    let bob = granted(&r);
    let after_expiry = answered_ms as i64 - alice.expires_at_ms as i64;
    println!(
        "B's waiter got the dead host's lock {after_expiry} ms after its expires_at_ms \
         (TTL {TTL_MS} ms; its etcd lease would end about {} ms after the grant)",
        TTL_MS + 5_000
    );
    assert!(bob.token > alice.token, "{bob:?} after {alice:?}");
    assert!(
        answered_ms + SKEW_MS >= alice.expires_at_ms,
        "granted {} ms before the expiry",
        -after_expiry
    );
    // The record's expiry is the authority, so the waiter does not wait for
    // etcd to delete the key when the lease (TTL + 5 s slack) runs out.
    assert!(
        after_expiry < 1_500,
        "granted {after_expiry} ms after the expiry: waited for the lease?"
    );
}

/// What the load run measured.
#[derive(Debug)]
struct LoadRun {
    history: History,
    /// Recorder-clock times of the leader's SIGKILL (started, done).
    kill_ms: (u64, u64),
    /// From the kill until the cluster named a leader (a new one if the
    /// leader was killed).
    leader_after: Duration,
    unavailable: u64,
    unexpected: Vec<String>,
}

/// Which etcd member the load runs lose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Victim {
    /// The leader: calls stall for an election.
    Leader,
    /// A follower: the leader and quorum stay, but each host's client loses
    /// one of its three endpoints.
    Follower,
}

#[test]
fn leader_loss_under_load_keeps_the_contract() {
    member_loss_under_load(Victim::Leader);
}

#[test]
fn follower_loss_under_load_keeps_the_contract() {
    member_loss_under_load(Victim::Follower);
}

fn member_loss_under_load(victim: Victim) {
    const CLIENTS_PER_HOST: u32 = 4;
    const HOT: usize = 3;
    const COLD: usize = 6;
    let before_kill = Duration::from_millis(2_500);
    let after_kill = Duration::from_millis(6_000);
    let seed = now_ms();

    let mut cluster = ScaleOut::start(2);
    let started = Instant::now();
    let run = load_with_member_kill(
        &mut cluster,
        victim,
        CLIENTS_PER_HOST,
        HOT,
        COLD,
        seed,
        before_kill,
        after_kill,
    );
    let elapsed = started.elapsed();
    let report = check_report(&run.history);

    let (kill_started, kill_done) = run.kill_ms;
    let ops = &run.history.ops;
    let after: Vec<_> = ops.iter().filter(|o| o.invoke_ms >= kill_done).collect();
    let succeeded_after = after
        .iter()
        .filter(|o| !matches!(o.outcome, Outcome::Unknown))
        .count();
    // The election gap as clients saw it: from the kill to the first call
    // invoked after it that got a definite answer, and the span in which
    // calls got unknown outcomes.
    let first_answer_after = after
        .iter()
        .filter(|o| !matches!(o.outcome, Outcome::Unknown))
        .map(|o| o.complete_ms)
        .min();
    let unknown: Vec<_> = ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Unknown))
        .collect();
    let unknown_span = unknown
        .iter()
        .map(|o| o.invoke_ms)
        .min()
        .zip(unknown.iter().map(|o| o.complete_ms).max());
    let gap_ms = first_answer_after.map(|t| t.saturating_sub(kill_started));

    let what = match victim {
        Victim::Leader => "leader",
        Victim::Follower => "follower",
    };
    println!("== etcd {what} SIGKILLed under load, seed {seed}");
    print!("{}", run.history.summary());
    println!("coverage: {}", report.coverage);
    println!(
        "unavailable answers: {}, unexpected answers: {}",
        run.unavailable,
        run.unexpected.len()
    );
    for u in run.unexpected.iter().take(10) {
        println!("  {u}");
    }
    println!(
        "{what} kill at +{} ms; leader named {:?} after the kill; first definite answer \
         {gap_ms:?} ms after the kill; unknown outcomes between {:?} (relative to the kill)",
        kill_started.saturating_sub(ops.iter().map(|o| o.invoke_ms).min().unwrap_or(0)),
        run.leader_after,
        unknown_span.map(|(lo, hi)| (
            lo as i64 - kill_started as i64,
            hi as i64 - kill_started as i64
        )),
    );
    println!("violations: {}", report.violations.len());
    for v in report.violations.iter().take(30) {
        println!("  {v}");
    }
    let figures = format!(
        "| 2 hosts x {CLIENTS_PER_HOST} clients, {HOT} hot + {COLD} cold names | {} operations \
         ({} after the kill, {succeeded_after} of them answered) | {} unavailable | gap \
         {} ms (leader seen after {} ms) | {} calls judged, {} token comparisons | {} \
         violations | {:.1} s |",
        ops.len(),
        after.len(),
        run.unavailable,
        gap_ms.map_or("?".to_string(), |g| g.to_string()),
        run.leader_after.as_millis(),
        report.coverage.calls_judged,
        report.coverage.token_comparisons,
        report.violations.len(),
        elapsed.as_secs_f64()
    );
    println!("{figures}");
    lockd_test_support::report(&format!("etcd {what} kill under load: {figures}"));

    if !report.violations.is_empty() {
        let mut sorted = ops.clone();
        sorted.sort_by_key(|o| (o.invoke_ms, o.complete_ms));
        let text: String = sorted
            .iter()
            .map(|o| format!("{} {o}\n", o.name))
            .collect::<String>()
            + &format!("{what} kill [{kill_started}..{kill_done}]\n")
            + &report
                .violations
                .iter()
                .map(|v| format!("violation: {v}\n"))
                .collect::<String>();
        let path = std::env::temp_dir().join(format!("lockd-scale-out-{seed}.history"));
        std::fs::write(&path, text).unwrap();
        panic!(
            "{} violations (seed {seed}); the history is in {}",
            report.violations.len(),
            path.display()
        );
    }
    assert!(
        run.unexpected.is_empty(),
        "unexpected answers: {:?}",
        run.unexpected
    );
    // Service went on after the kill, on both hosts: each answers, and
    // grants. How the grants split between the hosts is the race of their
    // clients for the hot names (a host's clients may mostly meet `busy`
    // when the election took most of the window), so each host's bar is on
    // definite answers, with at least one grant.
    assert!(
        succeeded_after >= 100,
        "only {succeeded_after} calls answered after the {what} was killed"
    );
    for host in 0..cluster.hosts.len() as u32 {
        let on_host: Vec<_> = after
            .iter()
            .filter(|o| o.client / CLIENTS_PER_HOST == host)
            .filter(|o| !matches!(o.outcome, Outcome::Unknown))
            .collect();
        let granted = on_host
            .iter()
            .filter(|o| matches!(o.outcome, Outcome::Ok { .. }))
            .count();
        assert!(
            on_host.len() >= 10 && granted >= 1,
            "host {host} answered {} calls after the kill, {granted} of them grants",
            on_host.len()
        );
    }
    // A clean result means something only if the checker could judge a lot.
    assert!(report.coverage.calls_judged >= 100, "{}", report.coverage);
    assert!(
        report.coverage.token_comparisons >= 300,
        "{}",
        report.coverage
    );
    assert!(
        gap_ms.is_some_and(|g| g < 10_000),
        "no definite answer within 10 s of the kill"
    );
}

/// Runs `clients_per_host` recorded clients against each host, SIGKILLs
/// the etcd member `victim` after `before_kill`, and stops the clients
/// `after_kill` later.
#[allow(clippy::too_many_arguments)]
fn load_with_member_kill(
    cluster: &mut ScaleOut,
    victim: Victim,
    clients_per_host: u32,
    hot: usize,
    cold: usize,
    seed: u64,
    before_kill: Duration,
    after_kill: Duration,
) -> LoadRun {
    let recorder = Arc::new(Recorder::new());
    let stop = Arc::new(AtomicBool::new(false));
    let unavailable = Arc::new(AtomicU64::new(0));
    let not_sent = Arc::new(AtomicU64::new(0));
    let unexpected = Arc::new(Mutex::new(Vec::new()));
    let names: Arc<Vec<String>> = Arc::new(
        (0..hot)
            .map(|i| format!("hot/{i}"))
            .chain((0..cold).map(|i| format!("cold/{i}")))
            .collect(),
    );
    let mut threads = Vec::new();
    for (h, host) in cluster.hosts.iter().enumerate() {
        let target = Target::fixed(host.addr.port());
        for c in 0..clients_per_host {
            let id = h as u32 * clients_per_host + c;
            let client = Client {
                id,
                owner: format!("client-{id}"),
                rng: Rng::new(seed ^ (u64::from(id) + 1).wrapping_mul(0x2545_f491_4f6c_dd1d)),
                recorder: recorder.clone(),
                target: target.clone(),
                not_sent: not_sent.clone(),
                unavailable: unavailable.clone(),
                unexpected: unexpected.clone(),
                agent: None,
                incarnation: 0,
            };
            let (names, stop) = (names.clone(), stop.clone());
            threads.push(thread::spawn(move || client.run(&names, hot, &stop)));
        }
    }
    // Stops and joins the clients even if the kill below panics, so no
    // thread outlives the test's processes.
    struct StopOnDrop(Arc<AtomicBool>, Vec<thread::JoinHandle<()>>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
            for t in self.1.drain(..) {
                let _ = t.join();
            }
        }
    }
    let clients = StopOnDrop(stop, threads);

    thread::sleep(before_kill);
    let leader = cluster
        .etcd
        .wait_for_leader(Duration::from_secs(5))
        .expect("no etcd leader before the kill");
    let member = match victim {
        Victim::Leader => leader,
        Victim::Follower => (leader + 1) % 3,
    };
    // Not recorded as a `Kill`: the lockd processes that received the calls
    // live on, and a proposal the old leader replicated may still commit
    // after its caller was told `unavailable`. Unknown outcomes therefore
    // stay open-ended, which only weakens the checks.
    let kill_started = recorder.clock().floor_ms();
    let killed = Instant::now();
    cluster.etcd.kill_member(member);
    let kill_done = recorder.clock().ceil_ms();
    let new_leader = cluster
        .etcd
        .wait_for_leader(Duration::from_secs(15))
        .expect("no etcd leader after the kill");
    let leader_after = killed.elapsed();
    match victim {
        Victim::Leader => assert_ne!(new_leader, leader),
        // Only the loss of its leader makes a cluster elect one.
        Victim::Follower => assert_eq!(new_leader, leader),
    }
    let rest = after_kill.saturating_sub(killed.elapsed());
    thread::sleep(rest);
    drop(clients);

    let history = recorder.history();
    let unexpected = unexpected.lock().unwrap().clone();
    assert_eq!(
        not_sent.load(Ordering::SeqCst),
        0,
        "a lockd host refused connections"
    );
    LoadRun {
        history,
        kill_ms: (kill_started, kill_done),
        leader_after,
        unavailable: unavailable.load(Ordering::SeqCst),
        unexpected,
    }
}

/// `GET /v1/events` on host B, read line by line on a thread: the data
/// lines of events (heartbeats and comments skipped).
fn event_stream(host: &Server) -> std::sync::mpsc::Receiver<serde_json::Value> {
    use std::io::BufRead as _;
    let response = ureq::get(format!("{}/v1/events?namespace=default", host.url))
        .call()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut lines = std::io::BufReader::new(response.into_body().into_reader());
    // The stream is open once its opening comment arrives.
    let mut first = String::new();
    lines.read_line(&mut first).unwrap();
    assert!(first.starts_with(": lockd events"), "{first:?}");
    thread::spawn(move || {
        let mut line = String::new();
        loop {
            line.clear();
            match lines.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if let Some(data) = line.trim_end().strip_prefix("data: ") {
                let event = serde_json::from_str(data).unwrap();
                if tx.send(event).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// The next event of `kind` about `name` on `events`, within 10 s.
fn expect_event(
    events: &std::sync::mpsc::Receiver<serde_json::Value>,
    kind: &str,
    name: &str,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = events
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no {kind} event for {name} within 10 s"));
        if event["type"] == kind && event["name"] == name {
            return event;
        }
    }
}

/// Events come from etcd: a change made through host A shows on host B's
/// event stream, with A's owner and token (docs/reference.md#events).
#[test]
fn events_made_on_one_host_arrive_on_the_others_stream() {
    let cluster = ScaleOut::start(2);
    let (a, b) = (&cluster.hosts[0], &cluster.hosts[1]);
    let events = event_stream(b);

    let alice = lock(a, "seen", "alice", 60_000);
    let acquired = expect_event(&events, "acquired", "seen");
    assert_eq!(acquired["owner"], "alice");
    assert_eq!(acquired["fencing_token"], alice.token);

    let r = a.post_json("/v1/locks/force-unlock", &json!({"name": "seen"}));
    assert_eq!((r.code, r.status()), (200, "released"), "{}", r.body);
    let forced = expect_event(&events, "force_released", "seen");
    assert_eq!(forced["owner"], "alice");
    assert_eq!(forced["fencing_token"], alice.token);

    let r = a.post_json("/v1/leases/grant", &json!({"ttl_ms": 60_000}));
    assert_eq!((r.code, r.status()), (200, "granted"), "{}", r.body);
    let lease = r.json["lease_id"].as_str().unwrap().to_string();
    expect_event(&events, "lease_granted", &lease);
    let r = a.post_json("/v1/leases/revoke", &json!({"lease_id": lease}));
    assert_eq!((r.code, r.status()), (200, "revoked"), "{}", r.body);
    expect_event(&events, "lease_revoked", &lease);
}

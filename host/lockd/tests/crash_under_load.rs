//! Kill -9 under load (the reliability issue, §1): `lockd serve` on the redb
//! store, driven over REST by 16 concurrent clients on 4 hot and 40 cold
//! names (lock with and without wait, relock, extend, unlock with token,
//! get, all persistent), is SIGKILLed at random moments and restarted on the
//! same store. Every call is recorded with a common clock, and the history
//! checker (`lockd_tests::history`, whose module docs state the rules) must
//! find no lost grant, no token going backwards, no overlap and no
//! out-of-order wake.
//!
//! Before each kill a *sentinel* client takes a long persistent lock, and
//! reads it back after the restart, so every kill is followed by at least one
//! call the checker judges against a lease acknowledged before it.
//!
//! `LOCKD_CRASH_SEED=N` replays a run's random choices (thread timing still
//! differs). The figures printed at the end go into `docs/reliability.md`.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lockd_tests::history::{check_report, OpKind, Outcome, Recorder, Report, Rule};
use serde_json::{json, Value};

/// The shape of one run.
#[derive(Clone, Debug)]
struct Plan {
    /// `--store` for the server.
    store: String,
    clients: u32,
    hot: usize,
    cold: usize,
    kills: usize,
    /// Load between two kills, drawn uniformly from this range (ms).
    between_kills_ms: (u64, u64),
    /// Load after the last restart before the clients stop.
    tail: Duration,
    seed: u64,
}

/// What a run did.
#[derive(Debug)]
struct Outcomes {
    report: Report,
    summary: String,
    kills: usize,
    restarts_same_port: usize,
    not_sent: u64,
    unexpected: Vec<String>,
    elapsed: Duration,
}

const SENTINEL: &str = "sentinel";
/// The sentinel's lock outlives any restart of the run.
const SENTINEL_TTL_MS: u64 = 20_000;

#[test]
fn kill_minus_nine_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("redb:{}", dir.path().join("locks.redb").display());
    let plan = Plan {
        store,
        clients: 16,
        hot: 4,
        cold: 40,
        kills: 22,
        between_kills_ms: (300, 2_200),
        tail: Duration::from_millis(1_500),
        seed: seed(),
    };
    let run = run(&plan, dir.path());
    let violations = &run.report.violations;
    let coverage = &run.report.coverage;
    print_report(&plan, &run);

    if !violations.is_empty() || !run.unexpected.is_empty() {
        let kept = dir.keep(); // the server logs, for a look
        panic!(
            "{} violations, {} unexpected answers (seed {}: rerun with LOCKD_CRASH_SEED={}; \
             server logs in {})",
            violations.len(),
            run.unexpected.len(),
            plan.seed,
            plan.seed,
            kept.display()
        );
    }
    let failure = |what: &str| format!("{what} (seed {})", plan.seed);
    assert!(run.kills >= 20, "{}", failure("too few kills"));
    // A clean result means something only if the checker could judge a lot.
    assert!(
        coverage.calls_judged_after_kill >= plan.kills,
        "{}",
        failure("too few calls judged across a kill")
    );
    assert!(
        coverage.calls_judged >= 200,
        "{}",
        failure("too few calls judged")
    );
    assert!(
        coverage.token_comparisons >= 1_000,
        "{}",
        failure("too few token comparisons")
    );
    assert!(
        coverage.waits_judged >= 10,
        "{}",
        failure("too few waiters judged")
    );
    assert!(
        run.elapsed < Duration::from_secs(90),
        "{}",
        failure("the run took too long")
    );
}

/// The same harness against `--store memory`, which forgets every lock on a
/// kill: the sentinel's acknowledged lock is gone after each restart, which
/// the checker must report as a lost grant. Shows the harness can fail.
#[test]
fn memory_store_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan {
        store: "memory".to_string(),
        clients: 8,
        hot: 4,
        cold: 10,
        kills: 3,
        between_kills_ms: (500, 900),
        tail: Duration::from_millis(300),
        seed: seed(),
    };
    let run = run(&plan, dir.path());
    print_report(&plan, &run);
    let lost: Vec<_> = run
        .report
        .violations
        .iter()
        .filter(|v| v.rule == Rule::LostGrant && v.name == SENTINEL)
        .collect();
    assert!(
        lost.len() >= plan.kills,
        "the memory store lost the sentinel's lock {} times, yet only {} lost grants of it \
         were found (seed {})",
        plan.kills,
        lost.len(),
        plan.seed
    );
}

fn seed() -> u64 {
    match std::env::var("LOCKD_CRASH_SEED") {
        Ok(s) => s.parse().expect("LOCKD_CRASH_SEED must be a number"),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

fn print_report(plan: &Plan, run: &Outcomes) {
    let r = &run.report;
    println!(
        "== kill -9 under load: store {}, seed {}",
        plan.store, plan.seed
    );
    print!("{}", run.summary);
    println!(
        "kills under load: {} (the history's last kill stops the server at the end), \
         restarts on the same port: {} of {}",
        run.kills, run.restarts_same_port, run.kills
    );
    println!(
        "calls refused while the server was down (not sent, not recorded): {}",
        run.not_sent
    );
    println!("coverage: {}", r.coverage);
    println!("unexpected answers: {}", run.unexpected.len());
    for u in run.unexpected.iter().take(10) {
        println!("  {u}");
    }
    let mut by_rule: std::collections::BTreeMap<String, usize> = Default::default();
    for v in &r.violations {
        *by_rule.entry(v.rule.to_string()).or_default() += 1;
    }
    println!("violations: {} {by_rule:?}", r.violations.len());
    for v in r.violations.iter().take(30) {
        println!("  {v}");
    }
    // The figures for docs/reliability.md.
    let count = |f: &dyn Fn(&str) -> bool| {
        run.summary
            .lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w.len() == 3 && f(w[1])).then(|| w[2].parse::<u64>().unwrap_or(0))
            })
            .sum::<u64>()
    };
    let total = count(&|_| true);
    let unknown = count(&|o| o == "unknown");
    println!("-- figures (docs/reliability.md)");
    let figures = format!(
        "| {} clients, {} hot + {} cold names | {} operations ({} unknown outcome) | {} kills | \
         {} calls judged against a held lease ({} across a kill), {} token comparisons, {} \
         timed-out waiters | {} violations | {:.1} s |",
        plan.clients,
        plan.hot,
        plan.cold,
        total,
        unknown,
        run.kills,
        r.coverage.calls_judged,
        r.coverage.calls_judged_after_kill,
        r.coverage.token_comparisons,
        r.coverage.waits_judged,
        r.violations.len(),
        run.elapsed.as_secs_f64()
    );
    println!("{figures}");
    lockd_tests::report(&format!(
        "kill -9 under load (store {}): {figures}",
        plan.store
    ));
}

/// SplitMix64: small, seedable, good enough to pick operations.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    /// True with probability `percent`%.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Where the server is, and which incarnation it is.
#[derive(Debug, Default)]
struct Target {
    port: AtomicU16,
    /// Bumped on every restart, so clients drop pooled connections.
    incarnation: AtomicU64,
}

/// A `lockd serve` process.
struct Server {
    child: Child,
    port: u16,
}

/// Starts `lockd serve` on `port` (0: any), and waits for its line.
fn start_server(store: &str, port: u16, dir: &Path, n: usize) -> Option<Server> {
    let log = File::create(dir.join(format!("server-{n}.log"))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockd"))
        .arg("serve")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--store", store])
        .current_dir(dir)
        .env_remove("LOCKD_STORE")
        .env_remove("LOCKD_AUTH_TOKEN")
        .env_remove("LOCKD_SERVER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(addr) = line.strip_prefix("lockd listening on http://") {
                let _ = tx.send(addr.trim().to_string());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(addr) => {
            let port = addr.rsplit(':').next().unwrap().parse().unwrap();
            Some(Server { child, port })
        }
        Err(_) => {
            // Exited (the port is taken) or hung.
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

/// Runs `plan`: server, clients, kills; then checks the history.
fn run(plan: &Plan, dir: &Path) -> Outcomes {
    let started = Instant::now();
    let recorder = Arc::new(Recorder::new());
    let target = Arc::new(Target::default());
    let stop = Arc::new(AtomicBool::new(false));
    let not_sent = Arc::new(AtomicU64::new(0));
    let unexpected = Arc::new(Mutex::new(Vec::new()));
    let mut rng = Rng::new(plan.seed);

    let mut server = start_server(&plan.store, 0, dir, 0).expect("lockd serve did not start");
    target.port.store(server.port, Ordering::SeqCst);

    let names: Arc<Vec<String>> = Arc::new(
        (0..plan.hot)
            .map(|i| format!("hot/{i}"))
            .chain((0..plan.cold).map(|i| format!("cold/{i}")))
            .collect(),
    );
    let clients: Vec<_> = (0..plan.clients)
        .map(|id| {
            let client = Client {
                id,
                owner: format!("client-{id}"),
                rng: Rng::new(plan.seed ^ (u64::from(id) + 1).wrapping_mul(0x2545_f491_4f6c_dd1d)),
                recorder: recorder.clone(),
                target: target.clone(),
                not_sent: not_sent.clone(),
                unexpected: unexpected.clone(),
                agent: None,
                incarnation: 0,
            };
            let names = names.clone();
            let hot = plan.hot;
            let stop = stop.clone();
            thread::spawn(move || client.run(&names, hot, &stop))
        })
        .collect();

    // The sentinel: one more client, driven by this thread.
    let mut sentinel = Client {
        id: plan.clients,
        owner: "sentinel".to_string(),
        rng: Rng::new(plan.seed ^ 0x5e47),
        recorder: recorder.clone(),
        target: target.clone(),
        not_sent: not_sent.clone(),
        unexpected: unexpected.clone(),
        agent: None,
        incarnation: 0,
    };

    let mut restarts_same_port = 0;
    for k in 0..plan.kills {
        let (lo, hi) = plan.between_kills_ms;
        thread::sleep(Duration::from_millis(rng.range(lo, hi)));
        let token = match sentinel.call(
            SENTINEL,
            Call::Lock {
                ttl_ms: SENTINEL_TTL_MS,
                wait_ms: 0,
            },
        ) {
            Some(Outcome::Ok { token, .. }) => Some(token),
            _ => None,
        };
        // Let the load go on a little past the sentinel's grant.
        thread::sleep(Duration::from_millis(rng.range(0, 50)));

        let t = recorder.kill_started();
        server.child.kill().unwrap(); // SIGKILL
        server.child.wait().unwrap();
        recorder.kill_done(t);

        let port = server.port;
        server = match start_server(&plan.store, port, dir, k + 1) {
            Some(s) => {
                restarts_same_port += 1;
                s
            }
            None => start_server(&plan.store, 0, dir, k + 1).expect("lockd serve did not restart"),
        };
        target.port.store(server.port, Ordering::SeqCst);
        target.incarnation.fetch_add(1, Ordering::SeqCst);

        // The sentinel's lock survived the kill, and goes away again.
        sentinel.call(SENTINEL, Call::Get);
        if let Some(token) = token {
            sentinel.call(SENTINEL, Call::Unlock { token });
        }
    }
    thread::sleep(plan.tail);
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }
    // A last kill bounds when calls of unknown outcome may take effect.
    let t = recorder.kill_started();
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    recorder.kill_done(t);

    let history = recorder.history();
    let report = check_report(&history);
    let unexpected = unexpected.lock().unwrap().clone();
    Outcomes {
        summary: history.summary(),
        report,
        kills: plan.kills,
        restarts_same_port,
        not_sent: not_sent.load(Ordering::SeqCst),
        unexpected,
        elapsed: started.elapsed(),
    }
}

/// One call a client makes.
#[derive(Clone, Copy, Debug)]
enum Call {
    Lock { ttl_ms: u64, wait_ms: u64 },
    Extend { ttl_ms: u64 },
    Unlock { token: u64 },
    Get,
}

struct Client {
    id: u32,
    owner: String,
    rng: Rng,
    recorder: Arc<Recorder>,
    target: Arc<Target>,
    not_sent: Arc<AtomicU64>,
    unexpected: Arc<Mutex<Vec<String>>>,
    /// Keep-alive connections to the current incarnation.
    agent: Option<ureq::Agent>,
    incarnation: u64,
}

impl Client {
    fn run(mut self, names: &[String], hot: usize, stop: &AtomicBool) {
        // name -> token this client believes it holds.
        let mut held: HashMap<String, u64> = HashMap::new();
        while !stop.load(Ordering::Relaxed) {
            let name = if self.rng.chance(75) {
                &names[self.rng.range(0, hot as u64 - 1) as usize]
            } else {
                &names[self.rng.range(hot as u64, names.len() as u64 - 1) as usize]
            };
            let ttl_ms = self.rng.range(200, 2_000);
            let call = match held.get(name) {
                Some(&token) => match self.rng.next() % 100 {
                    0..=34 => Call::Unlock { token },
                    35..=64 => Call::Extend { ttl_ms },
                    65..=79 => Call::Lock { ttl_ms, wait_ms: 0 },
                    _ => Call::Get,
                },
                None => match self.rng.next() % 100 {
                    0..=29 => Call::Lock { ttl_ms, wait_ms: 0 },
                    30..=59 => Call::Lock {
                        ttl_ms,
                        wait_ms: self.rng.range(50, 400),
                    },
                    _ => Call::Get,
                },
            };
            match self.call(name, call) {
                Some(Outcome::Ok { token, .. }) => {
                    held.insert(name.clone(), token);
                }
                Some(
                    Outcome::Unlocked | Outcome::NotHeld | Outcome::NotOwner | Outcome::Busy { .. },
                ) => {
                    if !matches!(call, Call::Get) {
                        held.remove(name);
                    }
                }
                Some(Outcome::Unknown) | None => {
                    // Retry after a short back-off; the token, if any, is kept
                    // so a later unlock can clean up.
                    thread::sleep(Duration::from_millis(self.rng.range(10, 40)));
                }
                Some(_) => {}
            }
            thread::sleep(Duration::from_millis(self.rng.range(0, 4)));
        }
    }

    /// Makes one call and records it. `None` when it certainly never
    /// reached a server (connection refused): nothing is recorded.
    fn call(&mut self, name: &str, call: Call) -> Option<Outcome> {
        let incarnation = self.target.incarnation.load(Ordering::SeqCst);
        if self.agent.is_none() || incarnation != self.incarnation {
            self.agent = Some(
                ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_connect(Some(Duration::from_millis(500)))
                    .max_idle_connections_per_host(1)
                    .build()
                    .into(),
            );
            self.incarnation = incarnation;
        }
        let port = self.target.port.load(Ordering::SeqCst);
        let (path, body, kind, wait_ms) = match call {
            Call::Lock { ttl_ms, wait_ms } => (
                "lock",
                json!({"name": name, "owner": self.owner, "ttl_ms": ttl_ms, "wait_ms": wait_ms,
                       "durability": "persistent"}),
                OpKind::Lock { ttl_ms, wait_ms },
                wait_ms,
            ),
            Call::Extend { ttl_ms } => (
                "extend",
                json!({"name": name, "owner": self.owner, "ttl_ms": ttl_ms}),
                OpKind::Extend { ttl_ms },
                0,
            ),
            Call::Unlock { token } => (
                "unlock",
                json!({"name": name, "owner": self.owner, "fencing_token": token}),
                OpKind::Unlock { token: Some(token) },
                0,
            ),
            Call::Get => ("get", json!({"name": name}), OpKind::Get, 0),
        };
        let owner = if matches!(call, Call::Get) {
            ""
        } else {
            self.owner.as_str()
        };
        let url = format!("http://127.0.0.1:{port}/v1/locks/{path}");
        let agent = self.agent.as_ref().unwrap();
        let invoke = self.recorder.invoke();
        let result = agent
            .post(&url)
            .config()
            .timeout_global(Some(Duration::from_millis(wait_ms + 3_000)))
            .build()
            .send_json(&body)
            .and_then(|mut r| {
                let code = r.status().as_u16();
                let text = r.body_mut().read_to_string()?;
                Ok((code, text))
            });
        let outcome = match result {
            Ok((code, text)) => match parse(code, &text) {
                Ok(outcome) => outcome,
                Err(()) => {
                    self.unexpected
                        .lock()
                        .unwrap()
                        .push(format!("{path} {body} -> {code} {text}"));
                    Outcome::Unknown
                }
            },
            Err(ureq::Error::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                self.not_sent.fetch_add(1, Ordering::Relaxed);
                self.agent = None;
                thread::sleep(Duration::from_millis(self.rng.range(10, 30)));
                return None;
            }
            Err(_) => {
                // Reset, timeout, broken keep-alive: it may have been sent.
                self.agent = None;
                Outcome::Unknown
            }
        };
        self.recorder
            .complete(self.id, kind, name, owner, invoke, outcome.clone());
        Some(outcome)
    }
}

/// Maps an answer to an outcome; `Err` for anything the contract does not
/// allow here.
fn parse(code: u16, text: &str) -> Result<Outcome, ()> {
    let v: Value = serde_json::from_str(text).map_err(|_| ())?;
    let status = v["status"].as_str().ok_or(())?;
    let token = || v["fencing_token"].as_u64().ok_or(());
    let expires = || v["expires_at_ms"].as_u64().ok_or(());
    let owner = || v["owner"].as_str().map(str::to_string).ok_or(());
    Ok(match (code, status) {
        (200, "acquired" | "extended") => Outcome::Ok {
            token: token()?,
            expires_at_ms: expires()?,
        },
        (200, "unlocked") => Outcome::Unlocked,
        (200, "found") => Outcome::Found {
            owner: owner()?,
            token: token()?,
            expires_at_ms: expires()?,
        },
        (404, "not_found") => Outcome::NotFound,
        (409, "busy") => Outcome::Busy {
            owner: owner()?,
            token: token()?,
            expires_at_ms: expires()?,
        },
        (409, "not_owner") => Outcome::NotOwner,
        (409, "not_held") => Outcome::NotHeld,
        // The store could not complete it: unknown outcome, retry.
        (503, "unavailable") => Outcome::Unknown,
        _ => return Err(()),
    })
}

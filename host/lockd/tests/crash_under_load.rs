//! Kill -9 under load (docs/reliability.md, "Kill -9 under load"): `lockd serve` on the redb
//! store, driven over REST by 16 concurrent clients on 4 hot and 40 cold
//! names (lock with and without wait, relock, extend, unlock with token,
//! get, all persistent) and by lease clients (persistent leases holding 2 to 4
//! locks each: grant, lock under the lease, refresh, lease get, unlock by the
//! lease id, revoke or expiry) and by permit clients (permits of a semaphore
//! of 2 and one of 3: acquire with and without wait, extend, relock, get,
//! release or expiry) and by leader clients (campaigns in one election:
//! with and without wait, keep-alive by extend, a campaign again, get,
//! resignation or expiry), is SIGKILLed at random moments and restarted on the
//! same store. Every call is recorded with a common clock, and the history
//! checker (`lockd_test_support::history`, whose module docs state the rules) must
//! find no lost grant, no token going backwards, no overlap and no
//! out-of-order wake, no lease lock lost before its expiry and none held
//! after its lease's acknowledged revoke, never more permits of a
//! semaphore held than it has, and never two leaders at once.
//!
//! Before each kill a *sentinel* client takes a long persistent lock, and a
//! persistent lease holding two locks, and reads them back after the
//! restart (then refreshes and revokes the lease, and reads its locks
//! again), and a permit of the semaphore of 3, so every kill is followed by calls the checker judges against a
//! lock and a lease acknowledged before it.
//!
//! `LOCKD_CRASH_SEED=N` replays a run's random choices (thread timing still
//! differs). The figures printed at the end go into `docs/reliability.md`.

use std::fs::File;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod recorded_client;

use lockd_test_support::history::{check_report, Outcome, Recorder, Report, Rule};
use recorded_client::{Call, Client, LeaseCall, Rng, Take, Target};

/// The shape of one run.
#[derive(Clone, Debug)]
struct Plan {
    /// `--store` for the server.
    store: String,
    clients: u32,
    /// Clients driving leases ([`Client::run_leases`]), besides `clients`.
    lease_clients: u32,
    /// Clients taking permits of [`SEMAPHORES`] ([`Client::run_claims`]),
    /// besides the others.
    permit_clients: u32,
    /// Clients campaigning in [`ELECTIONS`] ([`Client::run_claims`]),
    /// besides the others.
    leader_clients: u32,
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
/// The semaphores the permit clients share: (name, permits).
const SEMAPHORES: [(&str, u32); 2] = [("sem/2", 2), ("sem/3", 3)];
/// The elections the leader clients campaign in.
const ELECTIONS: [&str; 1] = ["leader/a"];
/// The sentinel's lease holds these two locks across each kill.
const SENTINEL_LEASE_LOCKS: [&str; 2] = ["sentinel-lease/a", "sentinel-lease/b"];

#[test]
fn kill_minus_nine_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("redb:{}", dir.path().join("locks.redb").display());
    let plan = Plan {
        store,
        clients: 16,
        lease_clients: 3,
        permit_clients: 6,
        leader_clients: 2,
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
    // Leases: the sentinel's one per kill, and the lease clients'.
    assert!(
        coverage.lease_grants >= 2 * plan.kills && coverage.revokes >= plan.kills,
        "{}",
        failure("too few leases granted or revoked")
    );
    assert!(
        coverage.lease_locks_with_window >= 4 * plan.kills,
        "{}",
        failure("too few locks judged under a lease")
    );
    assert!(
        coverage.lease_calls_judged >= 100 && coverage.calls_after_revoke >= 2 * plan.kills,
        "{}",
        failure("too few lease calls judged, or calls after a revoke")
    );
    // Semaphores: permits judged across kills, and semaphores certainly
    // full, where one permit too many would be caught.
    assert!(
        coverage.permit_windows >= 200 && coverage.semaphore_full >= 50,
        "{}",
        failure("too few permits judged, or semaphores seen full")
    );
    // Elections: leaderships judged as exclusive grants, across kills.
    assert!(
        coverage.leader_windows >= 20,
        "{}",
        failure("too few leaderships judged")
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
        lease_clients: 1,
        permit_clients: 2,
        leader_clients: 1,
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
    // The sentinel's lease and its locks are gone after each restart too.
    let lost_lease_locks = run
        .report
        .violations
        .iter()
        .filter(|v| v.rule == Rule::LostGrant && SENTINEL_LEASE_LOCKS.contains(&v.name.as_str()))
        .count();
    assert!(
        lost_lease_locks >= plan.kills,
        "the memory store lost the sentinel's lease locks {} times, yet only {lost_lease_locks} \
         lost grants of them were found (seed {})",
        plan.kills,
        plan.seed
    );
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
    let lease_ops = count_kinds(&run.summary, &|k| k.starts_with("l."));
    let figures = format!(
        "| {} clients + {} lease clients, {} hot + {} cold names | {} operations ({} unknown \
         outcome; {} lease calls) | {} kills | \
         {} calls judged against a held lease ({} across a kill), {} token comparisons, {} \
         timed-out waiters; {} leases granted, {} locks under them ({} with a certain window), \
         {} lease calls judged, {} revokes with {} calls judged after them | {} violations | \
         {:.1} s |",
        plan.clients,
        plan.lease_clients,
        plan.hot,
        plan.cold,
        total,
        unknown,
        lease_ops,
        run.kills,
        r.coverage.calls_judged,
        r.coverage.calls_judged_after_kill,
        r.coverage.token_comparisons,
        r.coverage.waits_judged,
        r.coverage.lease_grants,
        r.coverage.lease_locks,
        r.coverage.lease_locks_with_window,
        r.coverage.lease_calls_judged,
        r.coverage.revokes,
        r.coverage.calls_after_revoke,
        r.violations.len(),
        run.elapsed.as_secs_f64()
    );
    println!("{figures}");
    lockd_test_support::report(&format!(
        "kill -9 under load (store {}): {figures}",
        plan.store
    ));
}

/// The calls in a history summary whose kind word passes `kind`.
fn count_kinds(summary: &str, kind: &dyn Fn(&str) -> bool) -> u64 {
    summary
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 3 && kind(w[0])).then(|| w[2].parse::<u64>().unwrap_or(0))
        })
        .sum()
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
    let semaphores: Arc<Vec<(String, Take)>> = Arc::new(
        SEMAPHORES
            .iter()
            .map(|&(name, permits)| (name.to_string(), Take::Permit(permits)))
            .collect(),
    );
    let elections: Arc<Vec<(String, Take)>> = Arc::new(
        ELECTIONS
            .iter()
            .map(|&name| (name.to_string(), Take::Leader))
            .collect(),
    );
    let all_clients = plan.clients + plan.lease_clients + plan.permit_clients + plan.leader_clients;
    let clients: Vec<_> = (0..all_clients)
        .map(|id| {
            let client = Client {
                id,
                owner: format!("client-{id}"),
                rng: Rng::new(plan.seed ^ (u64::from(id) + 1).wrapping_mul(0x2545_f491_4f6c_dd1d)),
                recorder: recorder.clone(),
                target: target.clone(),
                not_sent: not_sent.clone(),
                unavailable: Default::default(),
                unexpected: unexpected.clone(),
                agent: None,
                incarnation: 0,
            };
            let names = names.clone();
            let semaphores = semaphores.clone();
            let elections = elections.clone();
            let hot = plan.hot;
            let stop = stop.clone();
            let leases = id >= plan.clients;
            let permits = id >= plan.clients + plan.lease_clients;
            let leaders = id >= plan.clients + plan.lease_clients + plan.permit_clients;
            thread::spawn(move || {
                if leaders {
                    client.run_claims(&elections, &stop)
                } else if permits {
                    client.run_claims(&semaphores, &stop)
                } else if leases {
                    client.run_leases(&names, hot, &stop)
                } else {
                    client.run(&names, hot, &stop)
                }
            })
        })
        .collect();

    // The sentinel: one more client, driven by this thread.
    let mut sentinel = Client {
        id: all_clients,
        owner: "sentinel".to_string(),
        rng: Rng::new(plan.seed ^ 0x5e47),
        recorder: recorder.clone(),
        target: target.clone(),
        not_sent: not_sent.clone(),
        unavailable: Default::default(),
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
        let lease = match sentinel.lease_call(
            "",
            LeaseCall::Grant {
                ttl_ms: SENTINEL_TTL_MS,
            },
        ) {
            Some(Outcome::LeaseGranted { lease_id, .. }) => {
                for name in SENTINEL_LEASE_LOCKS {
                    sentinel.lock_in_lease(name, &lease_id, SENTINEL_TTL_MS);
                }
                Some(lease_id)
            }
            _ => None,
        };
        // A permit of a semaphore, held across the kill.
        let permit = match sentinel.call(
            SEMAPHORES[1].0,
            Call::Permit {
                ttl_ms: SENTINEL_TTL_MS,
                wait_ms: 500,
                permits: SEMAPHORES[1].1,
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
        // So did its permit, until it gives it back.
        if let Some(token) = permit {
            sentinel.call(SEMAPHORES[1].0, Call::Get);
            sentinel.call(SEMAPHORES[1].0, Call::Unlock { token });
        }
        // So did its lease's locks; the lease refreshes, and once revoked
        // none of them is held.
        if let Some(lease_id) = lease {
            for name in SENTINEL_LEASE_LOCKS {
                sentinel.call(name, Call::Get);
            }
            sentinel.lease_call(&lease_id, LeaseCall::Refresh);
            sentinel.lease_call(&lease_id, LeaseCall::Get);
            sentinel.lease_call(&lease_id, LeaseCall::Revoke);
            for name in SENTINEL_LEASE_LOCKS {
                sentinel.call(name, Call::Get);
            }
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

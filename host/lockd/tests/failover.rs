//! The CLI with several hosts (`--server A,B`): lockd hosts sharing one
//! etcd, one of them SIGKILLed.
//!
//! - `lockd exec --server A,B` keeps its persistent lock when A dies: its
//!   renewals go to B, CMD runs to its end and exec exits 0, and meanwhile a
//!   `lockd lock --wait 0` through B answers `busy` with exec's owner and
//!   token (nobody else gets the lock).
//! - A plain `lockd lock` whose first host is dead succeeds through the
//!   second.
//! - A bad list exits 2 naming the entry, before anything is sent (no server
//!   needed).
//! - Measured and printed (`--nocapture`): from a host's SIGKILL to the
//!   first `lockd get` answered through the next host, and to exec's first
//!   renewal through it (seen as the expiry moving on B; its lateness
//!   against the renewal schedule is the failover's own cost).

mod lockd_server;

use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lockd_server::{closed_port, lockd, now_ms, read_ms, wait_for_file, Background, Server};
use lockd_test_support::etcd::EtcdCluster;
use serde_json::{json, Value};

/// Short etcd timeouts, as in scale_out.rs, so that nothing waits long on a
/// member that is busy.
const LOCKD_TOML: &str = "[etcd]\ndial_timeout_ms = 2000\nrequest_timeout_ms = 2000\n";

/// exec's TTL: renewed every second.
const TTL_MS: u64 = 3_000;

/// lockd hosts on one etcd member; each host in its own directory.
struct Cluster {
    // Hosts first: they are killed before etcd goes away.
    hosts: Vec<Server>,
    store: String,
    dirs: Vec<tempfile::TempDir>,
    _etcd: EtcdCluster,
}

impl Cluster {
    fn start(hosts: usize) -> Cluster {
        let etcd = EtcdCluster::start().expect("etcd did not start");
        let store = format!("etcd:{}", etcd.endpoints().join(","));
        let mut cluster = Cluster {
            hosts: Vec::new(),
            store,
            dirs: Vec::new(),
            _etcd: etcd,
        };
        for _ in 0..hosts {
            cluster.add_host();
        }
        cluster
    }

    /// Starts one more host; answers its index.
    fn add_host(&mut self) -> usize {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lockd.toml"), LOCKD_TOML).unwrap();
        let host = Server::start_in(Some(dir.path()), &["--store", &self.store], &[]);
        self.dirs.push(dir);
        self.hosts.push(host);
        self.hosts.len() - 1
    }

    fn url(&self, host: usize) -> &str {
        &self.hosts[host].url
    }
}

/// The holder of `name` as host `host` answers it: owner, token, expiry.
fn holder(host: &Server, name: &str) -> Option<(String, u64, u64)> {
    let r = host.post_json("/v1/locks/get", &json!({ "name": name }));
    if r.status() != "found" {
        assert_eq!(r.status(), "not_found", "{}", r.body);
        return None;
    }
    Some((
        r.json["owner"].as_str().unwrap().to_string(),
        r.json["fencing_token"].as_u64().unwrap(),
        r.json["expires_at_ms"].as_u64().unwrap(),
    ))
}

/// `lockd exec --server SERVERS --ttl 3s NAME -- sh -c SCRIPT`, its stdout
/// read line by line.
fn exec(servers: &str, name: &str, script: &str) -> Background {
    let ttl = format!("{TTL_MS}ms");
    Background::reading(&[
        "exec", name, "--server", servers, "--ttl", &ttl, "--wait", "0", "--", "sh", "-c", script,
    ])
}

/// Waits (bounded) until `name`'s expiry on `host` moves past `after`;
/// answers the new expiry and when it was seen.
fn next_expiry(host: &Server, name: &str, after: u64, limit: Duration) -> (u64, Instant) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some((_, _, expires)) = holder(host, name) {
            if expires > after {
                return (expires, Instant::now());
            }
        }
        assert!(
            Instant::now() < deadline,
            "{name}'s expiry did not move past {after} within {limit:?}"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

#[test]
fn exec_keeps_its_lock_when_its_host_dies() {
    let mut cluster = Cluster::start(2);
    let servers = format!("{},{}", cluster.url(0), cluster.url(1));

    // A plain lock whose first host is dead goes to the second.
    let dead = format!("http://127.0.0.1:{}", closed_port());
    let both = format!("{dead},{}", cluster.url(1));
    let run = lockd(
        &[
            "lock", "plain", "--owner", "o", "--ttl", "1m", "--server", &both,
        ],
        &[],
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.starts_with("acquired plain token "), "{run:?}");
    assert_eq!(holder(&cluster.hosts[1], "plain").unwrap().0, "o");

    let dir = tempfile::tempdir().unwrap();
    let held = dir.path().join("held");
    let script = format!(
        "echo \"$LOCKD_OWNER $LOCKD_FENCING_TOKEN\" > {0}.tmp && mv {0}.tmp {0}; sleep 8; echo done",
        held.display()
    );
    let mut exec = exec(&servers, "job", &script);
    wait_for_file(&held);
    let text = std::fs::read_to_string(&held).unwrap();
    let (owner, token) = text.trim().split_once(' ').unwrap();
    let token: u64 = token.parse().unwrap();
    assert_eq!(holder(&cluster.hosts[1], "job").unwrap().0, owner);

    cluster.hosts[0].kill();
    let killed_at = Instant::now();
    // Until CMD ends (about 8 s after it started; bounded): B always shows
    // exec's grant, and another owner is refused with it. Past the first
    // TTL after the kill, only renewals through B can have kept it.
    let mut checks = 0;
    while killed_at.elapsed() < Duration::from_millis(6_500) {
        let run = lockd(
            &[
                "lock", "job", "--owner", "intruder", "--ttl", "1s", "--wait", "0", "--format",
                "json", "--server", &servers,
            ],
            &[],
        );
        assert_eq!(run.code, Some(1), "{run:?}");
        let busy: Value = serde_json::from_str(run.stdout.trim()).unwrap();
        assert_eq!(busy["status"], "busy", "{busy}");
        assert_eq!(busy["owner"], owner, "{busy}");
        assert_eq!(busy["fencing_token"], token, "{busy}");
        checks += 1;
        thread::sleep(Duration::from_millis(400));
    }
    assert!(checks >= 5, "only {checks} checks");
    assert_eq!(exec.next_line(Duration::from_secs(10)), "done");
    let (code, stderr) = exec.finish(Duration::from_secs(10));
    assert_eq!(code, Some(0), "{stderr}");
    // Released with its token on the way out, through B.
    assert_eq!(holder(&cluster.hosts[1], "job"), None);
}

#[test]
fn a_bad_server_list_exits_2_naming_the_entry() {
    let port = closed_port();
    let good = format!("http://127.0.0.1:{port}");
    for (list, needle) in [
        (
            format!("{good},,{good}"),
            "entry 2 of 3 of the server list is empty",
        ),
        (
            format!("{good},ftp://127.0.0.1:{port}"),
            "entry 2 of 2 of the server list, \"ftp://",
        ),
        (format!("{good},http://"), "entry 2 of 2"),
    ] {
        for args in [
            &["get", "x"][..],
            &["lock", "x", "--owner", "o", "--ttl", "1s"],
            &["watch"],
            &["exec", "x", "--", "true"],
        ] {
            let mut all = args.to_vec();
            let position = if args[0] == "exec" { 2 } else { all.len() };
            all.splice(position..position, ["--server", list.as_str()]);
            let run = lockd(&all, &[]);
            assert_eq!(run.code, Some(2), "{all:?}: {run:?}");
            let line = run.one_stderr_line();
            assert!(
                line.contains("--server") && line.contains(needle),
                "{all:?}: {line}"
            );
        }
    }
    // TLS options given: http:// beside https:// is refused, naming it.
    let mixed = format!("https://127.0.0.1:{port},{good}");
    let run = lockd(
        &[
            "get",
            "x",
            "--server",
            &mixed,
            "--cacert",
            "/nonexistent.pem",
        ],
        &[],
    );
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.one_stderr_line().contains(&format!(
            "entry 2 of 2 of the server list, {good}, is http://"
        )),
        "{run:?}"
    );
}

/// One measured failover: exec holds `name` through `a,b` (a fresh host
/// `a`), `a` is SIGKILLed right after a renewal was seen on `b`, and a
/// `lockd get --server a,b` is started at once. Answers (kill → the get's
/// exit 0, kill → the first renewal seen on `b`, that renewal's lateness
/// against its schedule), in ms.
fn measure_once(cluster: &mut Cluster, b: usize, run: usize) -> (u64, u64, u64) {
    let a = cluster.add_host();
    let servers = format!("{},{}", cluster.url(a), cluster.url(b));
    let name = format!("measured-{run}");
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let script = format!(
        "date +%s%3N > {0}.tmp && mv {0}.tmp {0}; sleep 3",
        started.display()
    );
    let mut exec = exec(&servers, &name, &script);
    wait_for_file(&started);
    assert!(read_ms(&started) <= now_ms());
    // Kill just after a renewal (through `a`) is seen: the next is due a
    // third of the TTL after it.
    let (_, _, first) = holder(&cluster.hosts[b], &name).unwrap();
    let (before, _) = next_expiry(&cluster.hosts[b], &name, first, Duration::from_secs(3));
    cluster.hosts[a].kill();
    let killed_at = Instant::now();
    let get = spawn_lockd(&["get", &name, "--server", &servers]);
    let get = thread::spawn(move || {
        let output = get.wait_with_output().unwrap();
        (output, Instant::now())
    });
    let (after, renewed_at) = next_expiry(
        &cluster.hosts[b],
        &name,
        before,
        Duration::from_millis(TTL_MS),
    );
    let (output, got_at) = get.join().unwrap();
    assert!(output.status.success(), "{output:?}");
    let (code, stderr) = exec.finish(Duration::from_secs(10));
    assert_eq!(code, Some(0), "{stderr}");
    let renewal_ms = renewed_at.duration_since(killed_at).as_millis() as u64;
    // Both expiries are the server's now + TTL: their distance less the
    // renewal interval is how late the renewal came.
    let late_ms = (after - before).saturating_sub(TTL_MS / 3);
    let get_ms = got_at.duration_since(killed_at).as_millis() as u64;
    (get_ms, renewal_ms, late_ms)
}

/// `lockd ARGS` in the background, output captured.
fn spawn_lockd(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_lockd"))
        .args(args)
        .env_remove("LOCKD_SERVER")
        .env_remove("LOCKD_AUTH_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn failover_times() {
    let mut cluster = Cluster::start(1);
    let mut gets = Vec::new();
    let mut renewals = Vec::new();
    let mut lateness = Vec::new();
    for run in 0..5 {
        let (get_ms, renewal_ms, late_ms) = measure_once(&mut cluster, 0, run);
        println!("run {run}: get {get_ms} ms, renewal {renewal_ms} ms (late by {late_ms} ms)");
        gets.push(get_ms);
        renewals.push(renewal_ms);
        lateness.push(late_ms);
    }
    println!(
        "failover, median of 5 (TTL {TTL_MS} ms, renewals every {} ms): kill -> lockd get \
         answered through the next host {} ms; kill -> exec's first renewal through it {} ms, \
         {} ms later than its schedule",
        TTL_MS / 3,
        median(gets),
        median(renewals),
        median(lateness.clone())
    );
    // The renewal after the kill must come well within the TTL's margin:
    // failover costs next to nothing when the host is gone (refused).
    assert!(median(lateness) < TTL_MS / 3, "renewals came late");
}

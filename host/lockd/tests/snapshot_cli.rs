//! `lockd snapshot save | restore` and `lockd store check` against real
//! `lockd serve` processes on throwaway redb stores: a snapshot taken while
//! locks keep being granted restores every holder with its owner and token,
//! and tokens resume above every token granted before the old server
//! stopped; the route is an admin's; restore refuses a non-empty target and
//! a damaged snapshot; check names what is wrong and changes nothing.

mod lockd_server;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::lockd_server::{lockd, lockd_in_dir, request, Reply, Run, Server};
use ::lockd_server::auth::{digest, to_hex};
use serde_json::{json, Value};

/// The server's `--auth-token`: an admin over every namespace.
const ROOT: &str = "root-6f0c2a9e41d84b7e93a5";
/// A locker over every namespace.
const LOCKER: &str = "locker-3b8e5d17c2a04f69b1d0";
/// An admin over `ci` only.
const ADMIN_CI: &str = "admin-ci-9d4f1e6a0b7c4253a8e2";

/// The longest a loop of this file runs.
const LOOP_DEADLINE: Duration = Duration::from_secs(60);

/// `lockd ARGS --server URL --auth-token ROOT`.
fn cli(server: &Server, args: &[&str]) -> Run {
    cli_as(server, ROOT, args)
}

/// `lockd ARGS --server URL --auth-token TOKEN`.
fn cli_as(server: &Server, token: &str, args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.extend(["--server", &server.url, "--auth-token", token]);
    lockd(&all, &[])
}

fn assert_ok(run: &Run) {
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stderr.is_empty(), "{run:?}");
}

/// Asserts exit `code` and one stderr line containing every needle.
fn assert_fails(run: &Run, code: i32, needles: &[&str]) {
    assert_eq!(run.code, Some(code), "{run:?}");
    let line = run.one_stderr_line();
    assert!(line.starts_with("lockd: "), "{line}");
    for needle in needles {
        assert!(line.contains(needle), "{needle:?} not in {line:?}");
    }
}

/// `lockd serve --store redb:STORE --auth-token ROOT` in `dir`.
fn serve(dir: &Path, store: &Path) -> Server {
    let spec = format!("redb:{}", store.display());
    Server::start_in(Some(dir), &["--store", &spec, "--auth-token", ROOT], &[])
}

/// Stops `server` as an operator does (SIGTERM) and waits for it.
fn stop(mut server: Server) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = server.wait_exit();
    assert_eq!(status.code(), Some(0), "{status}");
}

fn post(server: &Server, path: &str, body: Value) -> Reply {
    request(
        "POST",
        &server.url,
        path,
        Some(&body.to_string()),
        Some(ROOT),
    )
}

/// The fencing token of a successful grant reply.
fn token_of(reply: &Reply) -> u64 {
    assert_eq!(reply.code, 200, "{}", reply.body);
    reply.json["fencing_token"].as_u64().unwrap()
}

/// The token in a CLI line `... token N ...`.
fn token_in(line: &str) -> u64 {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "token").unwrap();
    words[at + 1].parse().unwrap()
}

/// `lockd get NAME`'s lines without their expiry, sorted: who holds it,
/// how, and under which token.
fn holders(server: &Server, name: &str) -> Vec<String> {
    let run = cli(server, &["get", name]);
    assert_ok(&run);
    let mut lines: Vec<String> = run
        .stdout
        .lines()
        .map(|line| line.split(" expires in ").next().unwrap().to_string())
        .collect();
    lines.sort();
    lines
}

/// Holds a lock of every kind, persistent; the names, and every token.
fn hold_one_of_each(server: &Server) -> (Vec<String>, Vec<u64>) {
    let mut tokens = Vec::new();
    let run = cli(server, &["lock", "ex", "--owner", "o1", "--ttl", "10m"]);
    assert_ok(&run);
    tokens.push(token_in(&run.stdout));
    for owner in ["r1", "r2"] {
        let run = cli(
            server,
            &["lock", "sh", "--shared", "--owner", owner, "--ttl", "10m"],
        );
        assert_ok(&run);
        tokens.push(token_in(&run.stdout));
    }
    for owner in ["p1", "p2"] {
        let args = [
            "sem",
            "acquire",
            "pool",
            "--permits",
            "3",
            "--owner",
            owner,
            "--ttl",
            "10m",
        ];
        let run = cli(server, &args);
        assert_ok(&run);
        tokens.push(token_in(&run.stdout));
    }
    let run = cli(server, &["lease", "grant", "--ttl", "10m"]);
    assert_ok(&run);
    let lease = run.stdout.trim().to_string();
    let run = cli(server, &["lock", "leased", "--lease", &lease]);
    assert_ok(&run);
    tokens.push(token_in(&run.stdout));
    let campaign =
        json!({"name": "el", "candidate": "c1", "value": "10.0.0.1:80", "ttl_ms": 600_000});
    tokens.push(token_of(&post(server, "/v1/elections/campaign", campaign)));
    let names = ["ex", "sh", "pool", "leased", "el"]
        .map(String::from)
        .to_vec();
    (names, tokens)
}

/// Grants persistent locks one after another until told to stop (at most
/// 5000, for at most [`LOOP_DEADLINE`]); counts them and keeps the highest
/// token granted.
struct Background {
    stop: Arc<AtomicBool>,
    granted: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<u64>,
}

impl Background {
    fn start(url: String) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let granted = Arc::new(AtomicU64::new(0));
        let (flag, count) = (stop.clone(), granted.clone());
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut highest = 0;
            for i in 0..5_000 {
                if flag.load(Ordering::Relaxed) || started.elapsed() > LOOP_DEADLINE {
                    break;
                }
                let body = json!({"name": format!("bg-{i}"), "owner": "bg", "ttl_ms": 600_000});
                let reply = request(
                    "POST",
                    &url,
                    "/v1/locks/lock",
                    Some(&body.to_string()),
                    Some(ROOT),
                );
                highest = highest.max(token_of(&reply));
                count.fetch_add(1, Ordering::Relaxed);
            }
            highest
        });
        Background {
            stop,
            granted,
            thread,
        }
    }

    /// Waits (bounded) until it has granted `n` more locks.
    fn wait_for(&self, n: u64) {
        let target = self.granted.load(Ordering::Relaxed) + n;
        let deadline = Instant::now() + LOOP_DEADLINE;
        while self.granted.load(Ordering::Relaxed) < target {
            assert!(Instant::now() < deadline, "the background grants stalled");
            assert!(!self.thread.is_finished(), "the background grants ended");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops it; the highest token it was granted.
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

#[test]
fn a_snapshot_taken_under_load_restores_every_holder_and_tokens_go_on_rising() {
    let dir = tempfile::tempdir().unwrap();
    let (store, restored) = (
        dir.path().join("a/locks.redb"),
        dir.path().join("b/locks.redb"),
    );
    let file = dir.path().join("snapshots/first.snap");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();

    let server = serve(dir.path(), &store);
    let (names, mut tokens) = hold_one_of_each(&server);
    let before: Vec<Vec<String>> = names.iter().map(|n| holders(&server, n)).collect();
    let background = Background::start(server.url.clone());
    background.wait_for(20);
    let run = cli(&server, &["snapshot", "save", file.to_str().unwrap()]);
    assert_ok(&run);
    let line = run.stdout.trim();
    assert_eq!(run.stdout.lines().count(), 1, "{run:?}");
    assert!(
        line.starts_with(&format!("saved snapshot {} of ", file.display()))
            && line.contains(" lock records, ")
            && line.contains(" shared, permit and leader holders, 1 leases, highest token "),
        "{line}"
    );
    let bytes: u64 = line
        .rsplit(", ")
        .next()
        .unwrap()
        .trim_end_matches(" bytes")
        .parse()
        .unwrap();
    assert_eq!(std::fs::metadata(&file).unwrap().len(), bytes);
    let highest_saved: u64 = line
        .split("highest token ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(highest_saved >= *tokens.iter().max().unwrap(), "{line}");
    // Tokens granted after the snapshot count too.
    background.wait_for(20);
    tokens.push(background.finish());
    let json_run = cli(
        &server,
        &[
            "snapshot",
            "save",
            file.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    assert_ok(&json_run);
    let saved: Value = serde_json::from_str(json_run.stdout.trim()).unwrap();
    assert_eq!(saved["leases"], 1, "{saved}");
    stop(server);
    let stopped_at = *tokens.iter().max().unwrap();

    let run = lockd(
        &[
            "store",
            "check",
            "--store",
            &format!("redb:{}", store.display()),
        ],
        &[],
    );
    assert_ok(&run);
    assert!(
        run.stdout
            .starts_with(&format!("lock store {}: intact", store.display())),
        "{run:?}"
    );

    let spec = format!("redb:{}", restored.display());
    let run = lockd(
        &[
            "snapshot",
            "restore",
            file.to_str().unwrap(),
            "--store",
            &spec,
        ],
        &[],
    );
    assert_ok(&run);
    assert!(
        run.stdout.starts_with(&format!(
            "restored lock store {} from snapshot ",
            restored.display()
        )),
        "{run:?}"
    );
    assert!(run.stdout.contains("tokens resume above"), "{run:?}");

    let server = serve(dir.path(), &restored);
    let after: Vec<Vec<String>> = names.iter().map(|n| holders(&server, n)).collect();
    assert_eq!(after, before);
    assert!(after[0][0].starts_with("ex held by o1 token "), "{after:?}");
    assert!(
        after[4][0].starts_with("el held as leader by c1 token "),
        "{after:?}"
    );
    let run = cli(&server, &["leader", "el"]);
    assert_ok(&run);
    assert!(run.stdout.contains("10.0.0.1:80"), "{run:?}");
    let run = cli(&server, &["lock", "fresh", "--owner", "n", "--ttl", "1m"]);
    assert_ok(&run);
    let fresh = token_in(&run.stdout);
    assert!(
        fresh > stopped_at,
        "token {fresh} after restore, {stopped_at} before the stop"
    );
    stop(server);
}

/// A lockd.toml with a locker over every namespace and an admin over `ci`.
fn write_tokens(dir: &Path) {
    let entry = |name: &str, token: &str, namespaces: &str, role: &str| {
        format!(
            "[[auth.tokens]]\nname = {name:?}\nsha256 = {:?}\nnamespaces = {namespaces}\nrole = {role:?}\n\n",
            to_hex(&digest(token))
        )
    };
    let config = entry("locker", LOCKER, r#"["*"]"#, "locker")
        + &entry("admin-ci", ADMIN_CI, r#"["ci"]"#, "admin");
    std::fs::write(dir.join("lockd.toml"), config).unwrap();
}

#[test]
fn only_an_admin_over_every_namespace_takes_a_snapshot_of_a_redb_store() {
    let dir = tempfile::tempdir().unwrap();
    write_tokens(dir.path());
    let server = serve(dir.path(), &dir.path().join("locks.redb"));
    let file = dir.path().join("out.snap");
    let target = file.to_str().unwrap();
    let run = cli_as(&server, LOCKER, &["snapshot", "save", target]);
    assert_fails(
        &run,
        4,
        &[
            "403 forbidden",
            "\"locker\" (role locker) may not take snapshots",
        ],
    );
    let run = cli_as(&server, ADMIN_CI, &["snapshot", "save", target]);
    assert_fails(&run, 4, &["403 forbidden", "which holds every namespace"]);
    let reply = request(
        "POST",
        &server.url,
        "/v1/admin/snapshot",
        None,
        Some(LOCKER),
    );
    assert_eq!(
        (reply.code, reply.status()),
        (403, "forbidden"),
        "{}",
        reply.body
    );
    let reply = request("POST", &server.url, "/v1/admin/snapshot", None, None);
    assert_eq!(
        (reply.code, reply.status()),
        (401, "unauthorized"),
        "{}",
        reply.body
    );
    let reply = request("GET", &server.url, "/v1/admin/snapshot", None, Some(ROOT));
    assert_eq!(reply.code, 405, "{}", reply.body);
    // Nothing was written, not even a temporary file.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !left
            .iter()
            .any(|n| n.to_string_lossy().contains("out.snap")),
        "{left:?}"
    );
    // The admin over every namespace gets the file's bytes.
    let response = ureq::post(format!("{}/v1/admin/snapshot", server.url))
        .header("Authorization", format!("Bearer {ROOT}"))
        .send_empty()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/octet-stream"
    );
    let bytes = response.into_body().read_to_vec().unwrap();
    std::fs::write(&file, &bytes).unwrap();
    let report = lockd_redb::snapshot::verify(&file).unwrap();
    assert_eq!(report.locks, 0, "{report}");
    std::fs::remove_file(&file).unwrap();
    drop(server);

    // A store that is not redb has no snapshot to give.
    let memory = Server::start(&["--auth-token", ROOT]);
    let run = cli(&memory, &["snapshot", "save", target]);
    assert_fails(
        &run,
        2,
        &["not lockd's embedded redb store", "etcdctl snapshot save"],
    );
    assert!(!file.exists());
}

/// A snapshot of a store holding one lock, saved through a server that is
/// then stopped; the store and the snapshot.
fn saved_snapshot(dir: &Path) -> (PathBuf, PathBuf) {
    let store = dir.join("old/locks.redb");
    let file = dir.join("one.snap");
    let server = serve(dir, &store);
    assert_ok(&cli(
        &server,
        &["lock", "kept", "--owner", "o", "--ttl", "10m"],
    ));
    assert_ok(&cli(&server, &["snapshot", "save", file.to_str().unwrap()]));
    stop(server);
    (store, file)
}

#[test]
fn restore_refuses_a_non_empty_target_and_a_damaged_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (store, file) = saved_snapshot(dir.path());
    let restore = |snapshot: &Path, target: &Path| {
        let spec = format!("redb:{}", target.display());
        lockd(
            &[
                "snapshot",
                "restore",
                snapshot.to_str().unwrap(),
                "--store",
                &spec,
            ],
            &[],
        )
    };

    let old = std::fs::read(&store).unwrap();
    let run = restore(&file, &store);
    assert_fails(
        &run,
        1,
        &["will not restore into", "restore into a new path"],
    );
    assert_eq!(std::fs::read(&store).unwrap(), old, "the target changed");

    let whole = std::fs::read(&file).unwrap();
    let cut = dir.path().join("cut.snap");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let target = dir.path().join("new/locks.redb");
    let run = restore(&cut, &target);
    assert_fails(
        &run,
        1,
        &[
            &format!("snapshot {} is damaged", cut.display()),
            "nothing was restored",
        ],
    );
    assert!(
        !target.exists(),
        "a refused restore left {}",
        target.display()
    );

    let other = dir.path().join("notes.txt");
    std::fs::write(&other, "not a snapshot\n").unwrap();
    let run = restore(&other, &target);
    assert_fails(&run, 1, &["is not a lockd snapshot"]);

    let run = lockd(
        &[
            "snapshot",
            "restore",
            file.to_str().unwrap(),
            "--store",
            "memory",
        ],
        &[],
    );
    assert_fails(&run, 2, &["needs --store redb:PATH"]);
    assert!(!target.exists());

    // The whole snapshot restores.
    assert_ok(&restore(&file, &target));
}

#[test]
fn check_names_what_is_wrong_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("locks.redb");
    let spec = |path: &Path| format!("redb:{}", path.display());
    let check = |path: &Path| {
        lockd_in_dir(
            Some(dir.path()),
            &["store", "check", "--store", &spec(path)],
            &[],
        )
    };

    let server = serve(dir.path(), &store);
    assert_ok(&cli(
        &server,
        &["lock", "a", "--owner", "o", "--ttl", "10m"],
    ));
    assert_fails(&check(&store), 3, &["in use by a lockd process"]);
    stop(server);
    let run = check(&store);
    assert_ok(&run);
    assert!(run.stdout.contains("1 lock records"), "{run:?}");

    let cut = dir.path().join("cut.redb");
    let whole = std::fs::read(&store).unwrap();
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let run = check(&cut);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stdout
            .starts_with(&format!("lock store {}: DAMAGED", cut.display())),
        "{run:?}"
    );
    assert!(
        run.stdout.contains(&format!("  - {}: ", cut.display())),
        "{run:?}"
    );
    assert_eq!(
        std::fs::read(&cut).unwrap(),
        &whole[..whole.len() / 2],
        "check changed the file"
    );

    let empty = dir.path().join("empty.redb");
    std::fs::write(&empty, b"").unwrap();
    let other = dir.path().join("other.redb");
    std::fs::write(&other, "[section]\nkey = 1\n".repeat(200)).unwrap();
    let directory = dir.path().join("directory.redb");
    std::fs::create_dir(&directory).unwrap();
    for path in [&empty, &other, &directory, &dir.path().join("nothing.redb")] {
        let run = check(path);
        assert_eq!(run.code, Some(1), "{run:?}");
        assert!(
            run.stdout.contains(&format!("  - {}: ", path.display())),
            "{run:?}"
        );
    }
    assert_eq!(
        std::fs::read(&other).unwrap(),
        "[section]\nkey = 1\n".repeat(200).as_bytes()
    );
    assert_fails(
        &lockd(&["store", "check", "--store", "memory"], &[]),
        2,
        &["needs --store redb:PATH"],
    );
}

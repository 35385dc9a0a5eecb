//! A `lockd run` process holding persistent locks is killed with SIGKILL and
//! its store reopened: every acknowledged lock is back with its owner, token
//! and expiry, and tokens keep rising.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockd_core::{Limits, LockOptions, LockService};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn open(path: &Path) -> LockService {
    LockService::new(lockd_redb::open(path).unwrap(), Limits::default())
}

/// A `lockd run` process holding persistent locks is killed with SIGKILL.
/// The store, reopened, has every lock with its owner, token and expiry,
/// and tokens keep rising; a second killed process changes none of that.
#[test]
fn sigkill_while_holding_persistent_locks() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("locks.redb");
    let spec = format!("redb:{}", store.display());

    let first = hold_then_kill(&spec, &["k/a", "k/b", "k/c"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let highest = rt.block_on(async {
        let service = open(&store);
        for (name, token) in &first {
            let info = service
                .get("hold", name)
                .await
                .unwrap()
                .expect("acknowledged lock lost");
            assert_eq!(
                (info.owner.as_str(), info.fencing_token),
                ("holder", *token)
            );
            assert!(info.expires_at_ms > now_ms() + 30_000);
            assert!(matches!(
                service
                    .lock("hold", name, "intruder", 1_000, LockOptions::default())
                    .await,
                Err(lockd_core::LockError::Busy(_))
            ));
        }
        let max = first.iter().map(|(_, t)| *t).max().unwrap();
        let g = service
            .lock("hold", "k/probe", "probe", 1_000, LockOptions::default())
            .await
            .unwrap();
        assert!(g.fencing_token > max);
        g.fencing_token
    });
    drop(rt);

    // The same owner again: idempotent, same token; a new name: higher token.
    let second = hold_then_kill(&spec, &["k/a", "k/d"]);
    assert_eq!(second[0], first[0]);
    assert!(second[1].1 > highest, "{} after {highest}", second[1].1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let service = open(&store);
        for (name, token) in first.iter().chain(&second) {
            let info = service.get("hold", name).await.unwrap().expect("lock lost");
            assert_eq!(info.fencing_token, *token);
        }
    });
}

/// Starts `lockd run rust-hold NAMES`, waits until it holds them all, kills
/// it with SIGKILL, and returns the tokens it printed.
fn hold_then_kill(spec: &str, names: &[&str]) -> Vec<(String, u64)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockd"))
        .args([
            "run",
            "--store",
            spec,
            "--namespace",
            "hold",
            lockd_guest_tests::RUST_HOLD,
            "--",
        ])
        .args(names)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut held = Vec::new();
    loop {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(120)) else {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("lockd run did not get ready: {}", text(&out.stderr));
        };
        if line == "ready" {
            break;
        }
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some("held"), "{line}");
        let name = words.next().unwrap().to_string();
        held.push((name, words.next().unwrap().parse().unwrap()));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(held.len(), names.len());
    held
}

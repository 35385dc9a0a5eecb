//! The paused holder (docs/fencing.md), against real PostgreSQL 15 and
//! Redis 7 servers this test starts as child processes, through the recipes
//! in contrib/fencing/ and `lockd exec`:
//!
//! 1. A takes `acct` (TTL 600 ms) through `lockd exec`, reads the balance
//!    (100) and is stopped (SIGSTOP of its process group: `lockd exec` and
//!    its command, as a GC pause or a VM migration would stop them) until
//!    its lock has expired on the server;
//! 2. B takes `acct` (a higher token), reads 100 and writes 150;
//! 3. A resumes (SIGCONT) and writes 70 with its old token. Its command
//!    ignores the SIGTERM `lockd exec` sends when it finds the lock lost: the
//!    write was already on its way, as in Kleppmann's scenario.
//!
//! Through the fence, A's write is refused and B's 150 stays. The negative
//! control runs the same with plain writes: A's stale 70 overwrites B's 150.
//! Each test takes a second or two (two runs of at most a few hundred ms of
//! waiting for the TTL, plus starting its server).
//!
//! Without the servers (scripts/setup.sh installs them) a test says so and
//! passes, except under CI (`CI=true`), where it fails.

mod lockd_server;

use std::io::{Read as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::lockd_server::{closed_port, lockd, Server, LOCKD_ENV};
use lockd_test_support::redis::RedisServer;

/// Where Debian's postgresql-15 puts its server binaries.
const POSTGRES_BIN: &str = "/usr/lib/postgresql/15/bin";

/// The recipes, as shipped.
fn contrib(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../contrib/fencing")
        .join(file)
}

/// Says that `what` is missing and the test is skipped; a failure under CI
/// (`CI=true`), where scripts/setup.sh has installed it.
fn skip_without(what: &str) {
    let message = format!("{what} is needed (scripts/setup.sh installs it)");
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("{message}; CI=true, so this is a failure");
    }
    eprintln!("SKIPPED: {message}");
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([&format!("-{sig}"), "--", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{sig} {pid}");
}

fn wait_until(within: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ready() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A server process stopped on drop: SIGINT (PostgreSQL's fast shutdown,
/// Redis' clean exit), then SIGKILL if it lingers.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The store the holders write to, and how a shell under `lockd exec`
/// reads and writes its `acct` balance.
trait Target {
    /// Environment for the scripts.
    fn env(&self) -> Vec<(String, String)>;
    /// A shell command printing the balance.
    fn read(&self) -> String;
    /// A shell command writing `$new` (with `$LOCKD_FENCING_TOKEN` if
    /// `fenced`), failing if the write was refused.
    fn write(&self, fenced: bool) -> String;
    /// Balance 100 and no token seen.
    fn reset(&self);
    /// The balance the store holds.
    fn balance(&self) -> i64;
}

struct Postgres {
    _daemon: Daemon,
    url: String,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Postgres {
    /// `initdb` into a fresh directory and `postgres` on a free loopback
    /// port, as the `postgres` user when this runs as root (PostgreSQL
    /// refuses to run as root).
    fn start() -> Option<Postgres> {
        let bin = Path::new(POSTGRES_BIN);
        if !bin.join("postgres").exists() {
            skip_without(&format!("PostgreSQL 15 ({POSTGRES_BIN}/postgres)"));
            return None;
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pg");
        let as_postgres = running_as_root();
        let command = |program: &str| {
            let path = bin.join(program);
            if as_postgres {
                let mut c = Command::new("setpriv");
                c.args([
                    "--reuid=postgres",
                    "--regid=postgres",
                    "--init-groups",
                    "--",
                ])
                .arg(path);
                c
            } else {
                Command::new(path)
            }
        };
        if as_postgres {
            run(Command::new("chown").args(["postgres:", tmp.path().to_str().unwrap()]));
        }
        run(command("initdb").arg("-D").arg(&dir).args([
            "-U",
            "lockd",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        ]));
        let port = closed_port();
        let daemon = Daemon(
            command("postgres")
                .arg("-D")
                .arg(&dir)
                .args(["-p", &port.to_string(), "-k"])
                .arg(&dir)
                .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let url = format!("postgresql://lockd@127.0.0.1:{port}/postgres");
        let pg = Postgres {
            _daemon: daemon,
            url,
            dir: tmp.path().to_path_buf(),
            _tmp: tmp,
        };
        wait_until(Duration::from_secs(30), "postgres accepting", || {
            pg.psql()
                .args(["-c", "SELECT 1"])
                .output()
                .is_ok_and(|o| o.status.success())
        });
        run(pg.psql().arg("-f").arg(contrib("postgres.sql")));
        run(pg.psql().args([
            "-c",
            "CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL);
             CREATE TABLE reports (month text PRIMARY KEY, body text NOT NULL);",
        ]));
        // What A and B run (pay.sql in contrib/fencing/postgres.sql).
        std::fs::write(
            pg.dir.join("fenced.sql"),
            "BEGIN;\nSELECT lockd_fence('acct', :'token');\n\
             UPDATE accounts SET balance = :balance WHERE id = 'acct';\nCOMMIT;\n",
        )
        .unwrap();
        std::fs::write(
            pg.dir.join("plain.sql"),
            "UPDATE accounts SET balance = :balance WHERE id = 'acct';\n",
        )
        .unwrap();
        Some(pg)
    }

    fn psql(&self) -> Command {
        let mut c = Command::new("psql");
        c.arg(&self.url).args(["-X", "-q", "-v", "ON_ERROR_STOP=1"]);
        c
    }
}

fn running_as_root() -> bool {
    run(Command::new("id").arg("-u")).trim() == "0"
}

impl Target for Postgres {
    fn env(&self) -> Vec<(String, String)> {
        vec![
            ("PG".to_string(), self.url.clone()),
            ("PG_DIR".to_string(), self.dir.display().to_string()),
        ]
    }

    fn read(&self) -> String {
        r#"psql "$PG" -X -tAc "SELECT balance FROM accounts WHERE id = 'acct'""#.to_string()
    }

    fn write(&self, fenced: bool) -> String {
        let file = if fenced { "fenced.sql" } else { "plain.sql" };
        format!(
            r#"psql "$PG" -X -q -v ON_ERROR_STOP=1 -v token="$LOCKD_FENCING_TOKEN" -v balance="$new" -f "$PG_DIR/{file}""#
        )
    }

    fn reset(&self) {
        run(self.psql().args([
            "-c",
            "DELETE FROM lockd_fence; DELETE FROM accounts; \
             INSERT INTO accounts VALUES ('acct', 100);",
        ]));
    }

    fn balance(&self) -> i64 {
        run(self
            .psql()
            .args(["-tAc", "SELECT balance FROM accounts WHERE id = 'acct'"]))
        .trim()
        .parse()
        .unwrap()
    }
}

/// Redis with contrib/fencing/redis.lua loaded.
struct Redis(RedisServer);

impl Redis {
    fn start() -> Option<Redis> {
        let server = RedisServer::start()?;
        server.load_function(&contrib("redis.lua"));
        Some(Redis(server))
    }

    fn call(&self, args: &[&str]) -> String {
        self.0.call(args)
    }
}

impl Target for Redis {
    fn env(&self) -> Vec<(String, String)> {
        vec![("REDIS_PORT".to_string(), self.0.port().to_string())]
    }

    fn read(&self) -> String {
        r#"redis-cli -p "$REDIS_PORT" GET acct"#.to_string()
    }

    fn write(&self, fenced: bool) -> String {
        // redis-cli exits 0 on an error reply: the answer is checked.
        if fenced {
            r#"out=$(redis-cli -p "$REDIS_PORT" FCALL lockd_fenced_set 2 fence:acct acct "$LOCKD_FENCING_TOKEN" "$new"); echo "$out"; [ "$out" = OK ]"#
                .to_string()
        } else {
            r#"out=$(redis-cli -p "$REDIS_PORT" SET acct "$new"); echo "$out"; [ "$out" = OK ]"#
                .to_string()
        }
    }

    fn reset(&self) {
        self.call(&["DEL", "fence:acct"]);
        assert_eq!(self.call(&["SET", "acct", "100"]), "OK");
    }

    fn balance(&self) -> i64 {
        self.call(&["GET", "acct"]).parse().unwrap()
    }
}

/// A holder's script for `lockd exec ... -- sh -c SCRIPT sh DIR ROLE DELTA
/// GATED`: reads the balance, records its token in DIR/ROLE.token, waits
/// for DIR/ROLE.go if GATED is 1, writes balance + DELTA, and records the
/// write's output and status.
fn holder_script(target: &dyn Target, fenced: bool) -> String {
    format!(
        r#"trap '' TERM
dir=$1 role=$2 delta=$3 gated=$4
balance=$({read}) || exit 9
new=$((balance + delta))
echo "$LOCKD_FENCING_TOKEN" > "$dir/$role.token.tmp" && mv "$dir/$role.token.tmp" "$dir/$role.token"
if [ "$gated" = 1 ]; then
    while [ ! -e "$dir/$role.go" ]; do sleep 0.01; done
fi
( {write} ) > "$dir/$role.out" 2>&1
echo $? > "$dir/$role.status"
"#,
        read = target.read(),
        write = target.write(fenced),
    )
}

/// What one run of the scenario left.
#[derive(Debug)]
struct Outcome {
    a_token: u64,
    b_token: u64,
    a_status: String,
    a_out: String,
    a_exit: Option<i32>,
    balance: i64,
}

fn read_file(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

/// The scenario of the module docs, with or without the fence.
fn paused_holder(server: &Server, target: &dyn Target, fenced: bool) -> Outcome {
    target.reset();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = holder_script(target, fenced);
    let env = target.env();

    // A, in its own process group so that one signal stops it whole.
    let mut a = Command::new(env!("CARGO_BIN_EXE_lockd"));
    a.args(["exec", "acct", "--server", &server.url])
        .args(["--ttl", "600ms", "--kill-after", "60s"])
        .args(["--", "sh", "-c", &script, "sh"])
        .arg(d)
        .args(["a", "-30", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    for var in LOCKD_ENV {
        a.env_remove(var);
    }
    a.envs(env.iter().map(|(k, v)| (k, v)));
    let mut a = a.spawn().unwrap();
    let group = format!("-{}", a.id());
    wait_until(Duration::from_secs(20), "A read the balance", || {
        d.join("a.token").exists()
    });
    let a_token: u64 = read_file(&d.join("a.token")).parse().unwrap();
    run(Command::new("kill").args(["-STOP", "--", &group]));
    // Paused past its TTL: the server frees the lock.
    wait_until(Duration::from_secs(5), "A's lock expired", || {
        server.post("/v1/locks/get", r#"{"name":"acct"}"#).status() == "not_found"
    });

    // B takes the lock and writes.
    let mut args = vec!["exec", "acct", "--server", &server.url, "--ttl", "5s"];
    let d_str = d.to_str().unwrap();
    args.extend(["--", "sh", "-c", &script, "sh", d_str, "b", "50", "0"]);
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (&**k, &**v)).collect();
    let b = lockd(&args, &env_refs);
    assert_eq!(b.code, Some(0), "B: {b:?}");
    assert_eq!(
        read_file(&d.join("b.status")),
        "0",
        "B's write: {}",
        read_file(&d.join("b.out"))
    );
    let b_token: u64 = read_file(&d.join("b.token")).parse().unwrap();

    // A wakes and writes with its old token.
    std::fs::write(d.join("a.go"), "").unwrap();
    run(Command::new("kill").args(["-CONT", "--", &group]));
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = a.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            signal(a.id(), "KILL");
            panic!("A did not finish");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut a_stderr = String::new();
    a.stderr
        .take()
        .unwrap()
        .read_to_string(&mut a_stderr)
        .unwrap();
    eprintln!("A's lockd exec said: {a_stderr}");
    Outcome {
        a_token,
        b_token,
        a_status: read_file(&d.join("a.status")),
        a_out: read_file(&d.join("a.out")),
        a_exit: status.code(),
        balance: target.balance(),
    }
}

/// Both runs against one target: fenced, A is refused and B's write stays;
/// plain, A's stale write wins (the negative control).
fn fence_holds_and_plain_writes_lose_updates(target: &dyn Target, refusal: &str) {
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let server = Server::start(&[]);

    let fenced = paused_holder(&server, target, true);
    eprintln!("fenced: {fenced:?}");
    assert!(fenced.b_token > fenced.a_token, "{fenced:?}");
    // The memory store's tokens: the clock in microseconds, exact as doubles.
    assert!(
        fenced.a_token >= started && fenced.b_token < 1 << 53,
        "{fenced:?}"
    );
    assert_eq!(fenced.a_exit, Some(76), "lockd exec saw the lock lost");
    assert_ne!(fenced.a_status, "0", "A's stale write passed the fence");
    assert!(fenced.a_out.contains(refusal), "{fenced:?}");
    assert!(
        fenced.a_out.contains(&fenced.b_token.to_string()),
        "{fenced:?}"
    );
    assert_eq!(fenced.balance, 150, "B's write is what the store holds");

    let plain = paused_holder(&server, target, false);
    eprintln!("plain: {plain:?}");
    assert!(plain.b_token > plain.a_token, "{plain:?}");
    assert_eq!(plain.a_status, "0", "{plain:?}");
    assert_eq!(
        plain.balance, 70,
        "without the fence, A's stale write overwrites B's"
    );
}

/// The fence and an UPDATE in one transaction, the token bound as text (a
/// u64 has no PostgreSQL integer type; `numeric` holds it exactly).
fn fenced_update(
    tx: &mut postgres::Transaction<'_>,
    token: u64,
    balance: i64,
) -> Result<(), postgres::Error> {
    tx.execute(
        "SELECT lockd_fence($1, $2::text::numeric)",
        &[&"acct", &token.to_string()],
    )?;
    tx.execute(
        "UPDATE accounts SET balance = $1 WHERE id = 'acct'",
        &[&balance],
    )?;
    Ok(())
}

/// The PostgreSQL recipe from a program: two holders of `acct` over REST,
/// the first expired before the second took it. The second's transaction
/// holds the fence row, so the first's write waits for it to commit, then
/// fails with SQLSTATE LK001; the second's balance stays.
fn postgres_from_a_program(pg: &Postgres) {
    pg.reset();
    let server = Server::start(&[]);
    let lock = |owner: &str, ttl_ms: u64| -> u64 {
        let reply = server.post(
            "/v1/locks/lock",
            &format!(r#"{{"name":"acct","owner":"{owner}","ttl_ms":{ttl_ms}}}"#),
        );
        assert_eq!(reply.status(), "acquired", "{}", reply.body);
        reply.json["fencing_token"].as_u64().unwrap()
    };
    let first = lock("program-1", 200);
    wait_until(Duration::from_secs(5), "the first grant expired", || {
        server.post("/v1/locks/get", r#"{"name":"acct"}"#).status() == "not_found"
    });
    let second = lock("program-2", 10_000);
    assert!(second > first);

    let mut client = postgres::Client::connect(&pg.url, postgres::NoTls).unwrap();
    let mut tx = client.transaction().unwrap();
    fenced_update(&mut tx, second, 500).unwrap();
    let url = pg.url.clone();
    let late = std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let mut tx = client.transaction().unwrap();
        fenced_update(&mut tx, first, 1).and_then(|()| tx.commit())
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !late.is_finished(),
        "the stale writer did not wait for the fence row"
    );
    tx.commit().unwrap();
    let refused = late.join().unwrap().unwrap_err();
    assert_eq!(refused.code().map(|c| c.code()), Some("LK001"), "{refused}");
    assert_eq!(pg.balance(), 500);
}

#[test]
fn postgres_fence_refuses_the_paused_holder() {
    let Some(pg) = Postgres::start() else { return };
    fence_holds_and_plain_writes_lose_updates(&pg, "stale fencing token");
    postgres_from_a_program(&pg);

    // The INSERT pattern, and tokens compared exactly above 2^53 (where
    // doubles cannot tell 2^53 from 2^53 + 1).
    let insert = |token: &str, body: &str| {
        pg.psql()
            .args([
                "-v",
                &format!("token={token}"),
                "-v",
                &format!("body={body}"),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                child.stdin.take().unwrap().write_all(
                    b"BEGIN;\nSELECT lockd_fence('report:2026-11', :'token');\n\
                      INSERT INTO reports (month, body) VALUES ('2026-11', :'body')\n\
                      ON CONFLICT (month) DO UPDATE SET body = EXCLUDED.body;\nCOMMIT;\n",
                )?;
                child.wait_with_output()
            })
            .unwrap()
    };
    assert!(insert("9007199254740993", "new").status.success());
    let stale = insert("9007199254740992", "stale");
    assert!(!stale.status.success());
    assert!(String::from_utf8_lossy(&stale.stderr).contains("stale fencing token 9007199254740992"));
    let body = run(pg.psql().args(["-tAc", "SELECT body FROM reports"]));
    assert_eq!(body.trim(), "new");
    // A bad token names itself.
    let bad = pg
        .psql()
        .args(["-c", "SELECT lockd_fence('x', 0)"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("must be a lockd fencing token"));
}

#[test]
fn redis_fence_refuses_the_paused_holder() {
    let Some(redis) = Redis::start() else { return };
    fence_holds_and_plain_writes_lose_updates(&redis, "STALE fencing token");

    // From a program, and exact above 2^53.
    redis.reset();
    let fcall = |token: &str, value: &str| {
        redis.call(&[
            "FCALL",
            "lockd_fenced_set",
            "2",
            "fence:acct",
            "acct",
            token,
            value,
        ])
    };
    assert_eq!(fcall("9007199254740993", "1"), "OK");
    assert!(fcall("9007199254740992", "2").starts_with("-STALE"));
    assert_eq!(
        fcall("9007199254740993", "3"),
        "OK",
        "the same token passes"
    );
    assert_eq!(
        fcall("10000000000000000000", "4"),
        "OK",
        "more digits is larger"
    );
    assert!(fcall("9999999999999999999", "5").starts_with("-STALE"));
    assert!(fcall("018446744073709551615", "6").starts_with("-ERR"));
    assert!(fcall("18446744073709551616", "7").starts_with("-ERR"));
    assert_eq!(redis.balance(), 4);
}

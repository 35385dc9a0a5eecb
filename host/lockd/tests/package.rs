//! lockd as it is installed, not as it runs inside this checkout: a copy of
//! the binary outside any `target/` plugs with the client components built
//! into it and serves a manifest of its own directory with `lockd up
//! --build`; the Debian package (scripts/package-deb.sh, of the binary the
//! tests built) holds the hardened unit, the packaged config, completions
//! and man pages, and its binary, run with its config, tells a real
//! `$NOTIFY_SOCKET` `READY=1` only once it answers, pings the watchdog, and
//! says `STOPPING=1` on SIGTERM.

mod lockd_server;

use std::io::{BufRead as _, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::lockd_server::{request, Server};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `bin/lockd` in a fresh directory: the binary cargo built, copied where
/// nothing of the checkout is near it.
fn install() -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let bin = root.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let lockd = bin.join("lockd");
    std::fs::copy(env!("CARGO_BIN_EXE_lockd"), &lockd).unwrap();
    (root, lockd)
}

#[test]
fn an_installed_lockd_plugs_and_serves_outside_the_checkout() {
    let started = Instant::now();
    let (_root, lockd) = install();
    let work = tempfile::tempdir().unwrap();

    // Both client versions come from inside the binary.
    for (app, client) in [
        (lockd_guest_tests::RUST_CONFORMANCE, "lockd-client.wasm"),
        (lockd_guest_tests::RUST_P3, "lockd-client-p3.wasm"),
    ] {
        let out = work.path().join("plugged.wasm");
        let run = Command::new(&lockd)
            .args(["plug", app, "-o", path(&out)])
            .current_dir(work.path())
            .env_remove("LOCKD_CLIENT_WASM")
            .env_remove("LOCKD_CLIENT_P3_WASM")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{app}: {stdout}\n{stderr}");
        assert!(
            stdout.contains(&format!("provided by built-in {client}")),
            "{stdout}"
        );
        let plugged = std::fs::read(&out).unwrap();
        assert!(plugged.starts_with(b"\0asm"), "{}", out.display());
        std::fs::remove_file(&out).unwrap();
    }

    // A manifest in the user's own directory, its component built by the
    // manifest's build command, then served.
    std::fs::copy(
        lockd_guest_tests::EDGE_JOBS,
        work.path().join("jobs.src.wasm"),
    )
    .unwrap();
    std::fs::write(
        work.path().join("spin.toml"),
        r#"spin_manifest_version = 2

[application]
name = "installed"

[[trigger.http]]
route = "/jobs/..."
component = "edge-jobs"

[component.edge-jobs]
source = "out/edge-jobs.wasm"
allowed_outbound_hosts = []
[component.edge-jobs.build]
command = "mkdir -p out && cp jobs.src.wasm out/edge-jobs.wasm"
"#,
    )
    .unwrap();
    let app = Server::up_with(&lockd, work.path(), &["--build", "--store", "memory"]);
    let reply = app.post("/jobs/1", "");
    assert_eq!(reply.code, 200, "{}", reply.body);
    assert_eq!(reply.json["status"], "done", "{}", reply.body);
    assert!(
        reply.json["fencing_token"].as_u64().is_some(),
        "{}",
        reply.body
    );
    eprintln!("installed lockd: plug and up in {:?}", started.elapsed());
}

/// Every file the package must hold.
const PACKAGED: [&str; 9] = [
    "usr/bin/lockd",
    "lib/systemd/system/lockd.service",
    "etc/lockd/lockd.toml",
    "usr/lib/sysusers.d/lockd.conf",
    "usr/share/bash-completion/completions/lockd",
    "usr/share/zsh/vendor-completions/_lockd",
    "usr/share/fish/vendor_completions.d/lockd.fish",
    "usr/share/man/man1/lockd.1.gz",
    "usr/share/man/man1/lockd-serve.1.gz",
];

/// The unit's lines that must be there as written.
const UNIT_LINES: [&str; 12] = [
    "Type=notify",
    "NotifyAccess=main",
    "User=lockd",
    "StateDirectory=lockd",
    "NoNewPrivileges=yes",
    "ProtectSystem=strict",
    "ProtectHome=yes",
    "PrivateTmp=yes",
    "CapabilityBoundingSet=",
    "AmbientCapabilities=",
    "WatchdogSec=30s",
    "ExecStart=/usr/bin/lockd serve --config /etc/lockd/lockd.toml",
];

/// Builds the package of the binary the tests built (gzip, not xz: a
/// few seconds) and unpacks it into a fresh root.
fn package() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("debian");
    let built = Command::new("bash")
        .arg(repo().join("scripts/package-deb.sh"))
        .args(["--binary", env!("CARGO_BIN_EXE_lockd"), "--fast", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&built.stdout);
    assert!(
        built.status.success(),
        "package-deb.sh: {stdout}\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let deb = PathBuf::from(stdout.lines().last().unwrap().trim());
    let name = deb.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("lockd_") && name.ends_with(".deb"),
        "{name}"
    );
    let root = dir.path().join("root");
    let unpacked = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&root)
        .status()
        .unwrap();
    assert!(unpacked.success());
    (dir, deb, root)
}

#[test]
fn the_debian_package_holds_a_hardened_unit_and_its_config() {
    let started = Instant::now();
    let (_dir, deb, root) = package();
    for file in PACKAGED {
        assert!(root.join(file).is_file(), "the package has no /{file}");
    }
    let conffiles = Command::new("dpkg-deb")
        .arg("-I")
        .arg(&deb)
        .arg("conffiles")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&conffiles.stdout).trim(),
        "/etc/lockd/lockd.toml"
    );
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/lockd.service")).unwrap();
    for line in UNIT_LINES {
        assert!(unit.lines().any(|l| l == line), "no `{line}` in\n{unit}");
    }
    let sysusers = std::fs::read_to_string(root.join("usr/lib/sysusers.d/lockd.conf")).unwrap();
    assert!(
        sysusers.lines().any(|l| l.starts_with("u lockd ")),
        "{sysusers}"
    );
    // The packaged config is what the packaged binary accepts: the store in
    // the unit's state directory, everything else commented.
    let config = std::fs::read_to_string(root.join("etc/lockd/lockd.toml")).unwrap();
    assert!(
        config.contains("\nstore = \"redb:/var/lib/lockd/locks.redb\"\n"),
        "{config}"
    );
    verify_unit(&root);
    eprintln!("package built and checked in {:?}", started.elapsed());
}

/// `systemd-analyze verify` on the unit, where systemd-analyze is installed
/// (Debian's `systemd` package). The unit is checked as packaged except for
/// its binary's path, which names the unpacked one: verify insists that
/// ExecStart= exists, and `--root=` would need a whole system's units
/// (sysinit.target) and /bin/kill inside the root. `--man=no`: the man pages
/// the unit names are in the package, not installed here.
fn verify_unit(root: &Path) {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("systemd-analyze is not installed: the unit is not verified");
        return;
    }
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/lockd.service")).unwrap();
    let binary = root.join("usr/bin/lockd");
    let checked = root.join("lockd.service");
    let unit = unit.replace(
        "ExecStart=/usr/bin/lockd ",
        &format!("ExecStart={} ", binary.display()),
    );
    std::fs::write(&checked, unit).unwrap();
    let verified = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&checked)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&verified.stderr);
    assert!(
        verified.status.success(),
        "systemd-analyze verify: {stderr}"
    );
    assert!(
        !stderr.contains("lockd.service"),
        "systemd-analyze verify warns about the unit: {stderr}"
    );
}

/// One datagram from `socket` within `limit`, as text; `None` at the limit.
fn next_notice(socket: &UnixDatagram, limit: Duration) -> Option<String> {
    socket.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    match socket.recv(&mut buf) {
        Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            None
        }
        Err(e) => panic!("reading the notify socket: {e}"),
    }
}

/// The server under test, killed if the test fails before it exits.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn has_line(notice: &str, line: &str) -> bool {
    notice.lines().any(|l| l == line)
}

#[test]
fn the_packaged_lockd_notifies_systemd_when_it_answers_and_when_it_stops() {
    let started = Instant::now();
    let (dir, _deb, root) = package();
    let state = dir.path().join("state");
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    let store = format!("redb:{}", state.join("locks.redb").display());
    let mut command = Command::new(root.join("usr/bin/lockd"));
    for var in lockd_server::LOCKD_ENV {
        command.env_remove(var);
    }
    let mut child = command
        .arg("serve")
        .arg("--config")
        .arg(root.join("etc/lockd/lockd.toml"))
        .args(["--store", &store, "--listen", "127.0.0.1:0"])
        .env("NOTIFY_SOCKET", &socket_path)
        // Pings every 150 ms.
        .env("WATCHDOG_USEC", "300000")
        .env_remove("WATCHDOG_PID")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut child = KillOnDrop(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(addr) = line.strip_prefix("lockd listening on http://") {
                let _ = tx.send(addr.trim().to_string());
            }
        }
    });

    // The first notice is READY=1, and by then lockd answers: ready, not
    // recovering.
    let ready = next_notice(&socket, Duration::from_secs(120)).expect("no READY=1 within 120 s");
    assert!(has_line(&ready, "READY=1"), "{ready:?}");
    let addr = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let readyz = request("GET", &format!("http://{addr}"), "/readyz", None, None);
    assert_eq!(readyz.code, 200, "{}", readyz.body);

    let mut pings = 0;
    let watched = Instant::now();
    while pings < 3 && watched.elapsed() < Duration::from_secs(5) {
        let notice = next_notice(&socket, Duration::from_secs(5)).expect("no watchdog ping");
        assert!(!has_line(&notice, "READY=1"), "READY=1 twice: {notice:?}");
        pings += usize::from(has_line(&notice, "WATCHDOG=1"));
    }
    assert_eq!(pings, 3, "watchdog pings within 5 s");

    let kill = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let stopping = Instant::now();
    let mut said_stopping = false;
    while !said_stopping && stopping.elapsed() < Duration::from_secs(20) {
        match next_notice(&socket, Duration::from_secs(20)) {
            Some(notice) => said_stopping = has_line(&notice, "STOPPING=1"),
            None => break,
        }
    }
    assert!(said_stopping, "no STOPPING=1 within 20 s of SIGTERM");
    let status = child.0.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
    eprintln!("packaged lockd notified in {:?}", started.elapsed());
}

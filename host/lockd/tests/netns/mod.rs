//! Private networks for partition tests (`partitions.rs`): Linux network
//! namespaces joined by veth pairs to one bridge, processes started inside
//! them with `ip netns exec`, and links cut with `ip link set DEV down`.
//!
//! ```text
//!   node namespace  eth0 10.77.0.K/24 ──veth── vNAME ┐
//!   node namespace  eth0 10.77.0.L/24 ──veth── vNAME ┼─ br0   (hub namespace)
//!   ...                                              ┘
//! ```
//!
//! Nothing touches the root namespace: the hub and every node are new
//! namespaces, each interface is created inside its namespace (`ip -n HUB
//! link add … peer name eth0 netns NODE`), so every run may use the same
//! subnet and interface names. Namespace names carry the test process's pid
//! and a per-process counter (`lkp<pid>-<n>-<node>`), so concurrent runs
//! never collide; a new [`Net`] first deletes the namespaces of runs whose
//! process is gone.
//!
//! Cutting a node ([`Net::cut`]) sets the hub's end of its veth down: the
//! node loses carrier and every packet to or from it is dropped silently, as
//! in a real partition (no reset, no refusal). Its own loopback still works,
//! so clients that run in the node's namespace keep reaching a server there.
//!
//! The test process itself stays in the root namespace (the workspace forbids
//! `unsafe`, so it cannot `setns(2)` a thread of its own): it reaches a
//! namespace through a [`Forwarder`], a small Python relay that listens on
//! the root namespace's loopback and, having entered the namespace, connects
//! from inside it. A client talking to a forwarder of node N is, as far as
//! the network goes, a client on N: cutting N cuts it.
//!
//! Processes run under a small `sh` guard ([`NsProcess`]) that SIGKILLs them
//! when the test drops the guard or dies, so nothing outlives the test;
//! [`Net`]'s drop then deletes the namespaces, which removes their
//! interfaces.
#![allow(dead_code)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The subnet every [`Net`] uses (inside its own namespaces).
pub const SUBNET: &str = "10.77.0";

/// Per-process counter for namespace names.
static NEXT_NET: AtomicU32 = AtomicU32::new(0);

/// Runs `ip ARGS`; the error carries its stderr.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip` (iproute2; scripts/setup.sh installs it): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether the CI flag is set (`CI=true`, as CI services set it).
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// One node: a namespace with one address on the bridge.
#[derive(Debug, Clone)]
pub struct Node {
    /// Short name, as given to [`Net::add`].
    pub name: String,
    /// The namespace's name.
    pub ns: String,
    /// Its address on the bridge.
    pub ip: String,
    /// The hub's end of its veth.
    hub_dev: String,
}

/// A hub namespace with a bridge, and the nodes attached to it. Dropping it
/// deletes every namespace it made: drop the processes in them first.
#[derive(Debug)]
pub struct Net {
    prefix: String,
    hub: String,
    nodes: Vec<Node>,
}

impl Net {
    /// A new network, or why not: `ip netns add` needs root (CAP_SYS_ADMIN)
    /// and iproute2. Under CI that is a failure; elsewhere the caller may
    /// skip, saying why (see [`Net::create_or_skip`]).
    pub fn create() -> Result<Net, String> {
        sweep_stale();
        let prefix = format!(
            "lkp{}-{}",
            std::process::id(),
            NEXT_NET.fetch_add(1, Ordering::SeqCst)
        );
        let hub = format!("{prefix}-hub");
        ip(&["netns", "add", &hub])?;
        let net = Net {
            prefix,
            hub,
            nodes: Vec::new(),
        };
        net.hub_ip(&["link", "set", "lo", "up"])?;
        net.hub_ip(&["link", "add", "br0", "type", "bridge"])?;
        net.hub_ip(&["link", "set", "br0", "up"])?;
        Ok(net)
    }

    /// [`Net::create`]; `None` (after printing why) when namespaces cannot
    /// be made here and `CI` is not set; a panic under CI.
    pub fn create_or_skip(test: &str) -> Option<Net> {
        match Net::create() {
            Ok(net) => Some(net),
            Err(e) if under_ci() => panic!(
                "{test}: cannot create network namespaces under CI (CI runs as root with \
                 iproute2, which scripts/setup.sh installs): {e}"
            ),
            Err(e) => {
                // Written to the real stderr, past libtest's capture, so the
                // skip shows in a normal run.
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED {test}: network namespaces are not available here ({e}); \
                     run as root with iproute2 installed (CI=true makes this a failure)"
                );
                None
            }
        }
    }

    fn hub_ip(&self, args: &[&str]) -> Result<(), String> {
        let mut all = vec!["-n", self.hub.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// The prefix of its namespaces' names (`lkp<pid>-<n>`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Adds node `name` with address `SUBNET.host`, linked to the bridge.
    pub fn add(&mut self, name: &str, host: u8) -> Node {
        let node = Node {
            name: name.to_string(),
            ns: format!("{}-{name}", self.prefix),
            ip: format!("{SUBNET}.{host}"),
            hub_dev: format!("v{name}"),
        };
        assert!(node.hub_dev.len() <= 15, "interface name {}", node.hub_dev);
        ip(&["netns", "add", &node.ns]).unwrap();
        // Recorded before the links, so the drop deletes it whatever fails.
        self.nodes.push(node.clone());
        let n = node.ns.as_str();
        self.hub_ip(&[
            "link",
            "add",
            &node.hub_dev,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            n,
        ])
        .unwrap();
        self.hub_ip(&["link", "set", &node.hub_dev, "master", "br0", "up"])
            .unwrap();
        ip(&["-n", n, "link", "set", "lo", "up"]).unwrap();
        let cidr = format!("{}/24", node.ip);
        ip(&["-n", n, "addr", "add", &cidr, "dev", "eth0"]).unwrap();
        ip(&["-n", n, "link", "set", "eth0", "up"]).unwrap();
        node
    }

    /// Cuts `node` off the bridge: every packet to or from it is dropped.
    pub fn cut(&self, node: &Node) {
        self.hub_ip(&["link", "set", &node.hub_dev, "down"])
            .unwrap();
    }

    /// Puts `node` back on the bridge.
    pub fn heal(&self, node: &Node) {
        self.hub_ip(&["link", "set", &node.hub_dev, "up"]).unwrap();
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for node in self.nodes.iter().rev() {
            let _ = ip(&["netns", "del", &node.ns]);
        }
        let _ = ip(&["netns", "del", &self.hub]);
    }
}

/// Deletes namespaces `lkp<pid>-…` whose process is gone (a run that was
/// SIGKILLed and could not clean up; its processes died with it).
fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir("/var/run/netns") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("lkp")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

/// The guard every process runs under: the command runs in the background
/// with the guard's stdin kept on fd 3; a watcher SIGKILLs it once that pipe
/// closes (the test dropped the [`NsProcess`], or died). The guard itself
/// exits with the command, so [`NsProcess::exited`] tells whether the
/// command still runs.
const GUARD: &str =
    "exec 3<&0; \"$@\" 3<&- & pid=$!; (read _ <&3; kill -9 $pid 2>/dev/null) & wait $pid";

/// A process running in a namespace under the guard.
#[derive(Debug)]
pub struct NsProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Its stdout and stderr, unless stdout was taken.
    pub log: PathBuf,
}

impl NsProcess {
    /// Starts `program ARGS` in `ns` (`ip netns exec`; the root namespace
    /// if `None`), in `dir`, with `env`, its stderr (and
    /// its stdout unless `pipe_stdout`) appended to `log`. With
    /// `pipe_stdout`, every stdout line is sent to the returned channel.
    pub fn spawn(
        ns: Option<&str>,
        program: &Path,
        args: &[String],
        dir: &Path,
        env: &[(&str, &str)],
        log: &Path,
        pipe_stdout: bool,
    ) -> (NsProcess, Option<mpsc::Receiver<String>>) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let mut cmd = match ns {
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns, "sh"]);
                cmd
            }
            None => Command::new("sh"),
        };
        cmd.args(["-c", GUARD, "ns-guard"])
            .arg(program)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stderr(file.try_clone().unwrap());
        for var in ["LOCKD_SERVER", "LOCKD_AUTH_TOKEN", "LOCKD_STORE"] {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied());
        if pipe_stdout {
            cmd.stdout(Stdio::piped());
        } else {
            cmd.stdout(file);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let lines = child.stdout.take().map(|stdout| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                // Keep reading, so the process never blocks on a full pipe.
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let _ = tx.send(line);
                }
            });
            rx
        });
        (
            NsProcess {
                child,
                stdin,
                log: log.to_path_buf(),
            },
            lines,
        )
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Waits up to `limit` for it to exit by itself.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + limit;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() > until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The last 3,000 bytes of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut start = text.len().saturating_sub(3000);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        text[start..].to_string()
    }

    /// SIGKILLs it (closing the guard's pipe) and reaps the guard.
    pub fn stop(&mut self) {
        drop(self.stdin.take());
        if self.wait_exit(Duration::from_secs(10)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for NsProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One HTTP/1.0 exchange with `addr` from the calling thread's namespace;
/// the whole answer, or `None` within about 2 s.
pub fn http_exchange(addr: SocketAddr, request: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    Some(answer)
}

/// The relay a [`Forwarder`] runs: `python3 -c RELAY NS MODE PAUSE
/// HOST:PORT...`. It binds one listener per target on 127.0.0.1 in the root
/// namespace (MODE `outside`) or in NS (`inside`), prints their ports (one
/// line each), enters NS (`setns(2)` through ctypes; threads started
/// afterwards inherit it) and relays every accepted connection to its
/// target, connecting from inside NS. While the file PAUSE exists (if not
/// empty), the target's answers are held back.
const RELAY: &str = r#"
import ctypes, os, socket, sys, threading, time
ns, inside, pause, targets = sys.argv[1], sys.argv[2] == "inside", sys.argv[3], sys.argv[4:]
def enter():
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/var/run/netns/" + ns, os.O_RDONLY)
    if libc.setns(fd, 0x40000000) != 0:
        sys.exit("setns " + ns + ": " + os.strerror(ctypes.get_errno()))
if inside:
    enter()
listeners = []
for t in targets:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(256)
    listeners.append((s, t))
if not inside:
    enter()
def copy(src, dst, held=False):
    try:
        while True:
            b = src.recv(65536)
            if not b:
                break
            while held and pause and os.path.exists(pause):
                time.sleep(0.002)
            dst.sendall(b)
    except OSError:
        pass
def serve(conn, host, port):
    try:
        up = socket.create_connection((host, port))
    except OSError:
        conn.close()
        return
    for x in (conn, up):
        x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    back = threading.Thread(target=copy, args=(up, conn, True), daemon=True)
    back.start()
    copy(conn, up)
    for x in (up, conn):
        try:
            x.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    back.join()
    up.close()
    conn.close()
def accept(listener, target):
    host, port = target.rsplit(":", 1)
    while True:
        c, _ = listener.accept()
        threading.Thread(target=serve, args=(c, host, int(port)), daemon=True).start()
for l, t in listeners:
    threading.Thread(target=accept, args=(l, t), daemon=True).start()
    print(l.getsockname()[1], flush=True)
threading.Event().wait()
"#;

/// A relay from the root namespace's loopback into a namespace (see the
/// module docs): connecting to `127.0.0.1:`[`Forwarder::port`]`(i)` connects
/// to the `i`th target from inside the namespace.
#[derive(Debug)]
pub struct Forwarder {
    ports: Vec<u16>,
    _process: NsProcess,
}

impl Forwarder {
    /// Starts a relay into `ns` for each `host:port` of `targets`.
    pub fn start(ns: &str, targets: &[String], log: &Path) -> Forwarder {
        Forwarder::launch(ns, "outside", None, targets, log)
    }

    /// A relay *inside* `ns`, from its loopback to `target`, that holds
    /// back the target's answers while the file `pause` exists.
    pub fn start_inside(ns: &str, target: &str, pause: &Path, log: &Path) -> Forwarder {
        Forwarder::launch(ns, "inside", Some(pause), &[target.to_string()], log)
    }

    fn launch(
        ns: &str,
        mode: &str,
        pause: Option<&Path>,
        targets: &[String],
        log: &Path,
    ) -> Forwarder {
        let pause = pause.map_or(String::new(), |p| p.display().to_string());
        let mut args = vec![
            "-c".to_string(),
            RELAY.to_string(),
            ns.to_string(),
            mode.to_string(),
            pause,
        ];
        args.extend(targets.iter().cloned());
        let dir = log.parent().unwrap();
        let (mut process, lines) =
            NsProcess::spawn(None, Path::new("python3"), &args, dir, &[], log, true);
        let lines = lines.unwrap();
        let mut ports = Vec::new();
        while ports.len() < targets.len() {
            match lines.recv_timeout(Duration::from_secs(20)) {
                Ok(line) => ports.push(line.trim().parse().unwrap()),
                Err(e) => {
                    let status = process.exited();
                    panic!(
                        "relay into {ns} did not start ({e}, {status:?}): {}",
                        process.log_tail()
                    )
                }
            }
        }
        Forwarder {
            ports,
            _process: process,
        }
    }

    /// The root-namespace port of the `i`th target.
    pub fn port(&self, i: usize) -> u16 {
        self.ports[i]
    }
}

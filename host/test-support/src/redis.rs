//! A `redis-server` child process on a free loopback port, with a small
//! RESP client, for the fencing tests (contrib/fencing/redis.lua). Redis 7
//! comes from scripts/setup.sh.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A throwaway Redis without persistence, stopped on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts `redis-server`, or answers `None` after saying why on stderr
    /// when it is not installed (a panic under CI, `CI=true`, where
    /// scripts/setup.sh has installed it).
    pub fn start() -> Option<RedisServer> {
        if Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            let message = "redis-server (Redis 7) is needed (scripts/setup.sh installs it)";
            if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
                panic!("{message}; CI=true, so this is a failure");
            }
            eprintln!("SKIPPED: {message}");
            return None;
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting redis-server");
        let server = RedisServer {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(server)
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Loads the function library at `path` (`FUNCTION LOAD REPLACE`).
    pub fn load_function(&self, path: &Path) {
        let library =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = self.call(&["FUNCTION", "LOAD", "REPLACE", &library]);
        assert!(!name.starts_with('-'), "FUNCTION LOAD: {name}");
    }

    /// One command, as a program sends it: RESP over a fresh connection.
    /// Answers a simple or bulk string as its text (a nil as ""), an integer
    /// as `:N` and an error as `-MESSAGE`.
    pub fn call(&self, args: &[&str]) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connecting to redis");
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            request.extend(format!("${}\r\n", a.len()).bytes());
            request.extend(a.bytes());
            request.extend(b"\r\n");
        }
        stream.write_all(&request).expect("writing to redis");
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).expect("reading from redis");
        let line = line.trim_end().to_string();
        match line.split_at(1) {
            ("+", rest) => rest.to_string(),
            ("$", len) => {
                let Ok(len) = usize::try_from(len.parse::<i64>().unwrap_or(-1)) else {
                    return String::new();
                };
                let mut body = vec![0; len + 2];
                reader.read_exact(&mut body).expect("reading from redis");
                String::from_utf8_lossy(&body[..len]).into_owned()
            }
            _ => line,
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

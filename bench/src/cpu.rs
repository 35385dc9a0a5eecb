//! CPU time over a measured window, split between the load generator and
//! the system under test.
//!
//! On the 2-core machine the suite runs on, a server and its load generator
//! share the cores, so a closed loop's rate is set by the CPU both spend on a
//! pair. The split says which side a difference between two systems comes
//! from: lockd's server (its threads in this process) or a peer's (Redis and
//! etcd run as child processes) against the same lean clients.
//!
//! Figures come from `/proc` (`utime` + `stime`, in clock ticks: 10 ms at
//! the usual 100 Hz, about 1 % of a 5-second window at one core).

use std::collections::HashMap;
use std::time::Duration;

/// The name of the load generator's runtime threads (`Ctx::rt`): with the
/// thread that drives it, what counts as the client.
pub const CLIENT_THREAD: &str = "bench-client";

/// CPU spent during a window.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuSplit {
    /// Every thread of this process but the client's, and every process
    /// descended from it (the peers).
    pub server: Duration,
    /// The client runtime's threads and the main thread.
    pub client: Duration,
}

impl CpuSplit {
    /// Microseconds of CPU per operation, server and client.
    pub fn per_op_us(&self, ops: u64) -> (f64, f64) {
        let ops = ops.max(1) as f64;
        (
            self.server.as_secs_f64() * 1e6 / ops,
            self.client.as_secs_f64() * 1e6 / ops,
        )
    }
}

/// CPU ticks so far of every thread that counts, keyed by (pid, tid).
#[derive(Debug, Default)]
pub struct Snapshot {
    threads: HashMap<(u32, u32), (bool, u64)>,
}

impl Snapshot {
    /// Reads `/proc` now. A thread that cannot be read (it just ended) is
    /// left out; on a system without `/proc` the snapshot is empty.
    pub fn take() -> Snapshot {
        let mut threads = HashMap::new();
        let me = std::process::id();
        for pid in std::iter::once(me).chain(descendants(me)) {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for task in tasks.flatten() {
                let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
                    continue;
                };
                let Some((comm, ticks)) = read_stat(&format!("/proc/{pid}/task/{tid}/stat")) else {
                    continue;
                };
                let client = pid == me && (tid == me || comm == CLIENT_THREAD);
                threads.insert((pid, tid), (client, ticks));
            }
        }
        Snapshot { threads }
    }

    /// What was spent from `earlier` to this snapshot. A thread born in
    /// between counts from zero; one that ended in between is lost, so
    /// take both ends while the workload's threads live.
    pub fn since(&self, earlier: &Snapshot) -> CpuSplit {
        let tick = Duration::from_secs(1) / ticks_per_second();
        let mut split = CpuSplit::default();
        for (id, &(client, ticks)) in &self.threads {
            let before = earlier.threads.get(id).map_or(0, |&(_, t)| t);
            let spent = tick * u32::try_from(ticks.saturating_sub(before)).unwrap_or(u32::MAX);
            if client {
                split.client += spent;
            } else {
                split.server += spent;
            }
        }
        split
    }
}

fn ticks_per_second() -> u32 {
    u32::try_from(rustix::param::clock_ticks_per_second())
        .unwrap_or(100)
        .max(1)
}

/// The command name and `utime + stime` of one `stat` file.
fn read_stat(path: &str) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(path).ok()?;
    let (head, tail) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    // After the command: state (field 3) ... utime (14), stime (15).
    let mut fields = tail.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((comm, utime + stime))
}

/// The processes descended from `root` (the peers this suite started, and
/// theirs).
fn descendants(root: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(u32, u32)> = entries
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command: state (field 3), ppid (4).
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|&&(_, ppid)| ppid == parent)
                .map(|&(pid, _)| pid),
        );
        i += 1;
    }
    found.remove(0);
    found
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_stat_line_gives_its_command_and_ticks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stat");
        // A command may hold spaces and parentheses: it ends at the last ')'.
        let fields: Vec<String> = (3..=20).map(|f| f.to_string()).collect();
        std::fs::write(&path, format!("42 (a b) c)) {}", fields.join(" "))).unwrap();
        let (comm, ticks) = read_stat(path.to_str().unwrap()).unwrap();
        assert_eq!(comm, "a b) c)");
        assert_eq!(ticks, 14 + 15);
    }

    /// A thread named as the client's runtime counts as client time, and
    /// only while it runs (the negative control: idle, the client side
    /// spends next to nothing; in a test process it is that thread and the
    /// idle main thread).
    #[test]
    fn a_busy_client_thread_is_counted_as_the_client() {
        let stop = Arc::new(AtomicBool::new(false));
        let before = Snapshot::take();
        let spinner = std::thread::Builder::new()
            .name(CLIENT_THREAD.into())
            .spawn({
                let stop = stop.clone();
                move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                }
            })
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let busy = loop {
            std::thread::sleep(Duration::from_millis(50));
            let split = Snapshot::take().since(&before);
            if split.client >= Duration::from_millis(100) || Instant::now() > deadline {
                break split;
            }
        };
        stop.store(true, Ordering::Relaxed);
        spinner.join().unwrap();
        assert!(busy.client >= Duration::from_millis(100), "{busy:?}");

        let idle = Snapshot::take();
        std::thread::sleep(Duration::from_millis(300));
        let split = Snapshot::take().since(&idle);
        assert!(split.client < Duration::from_millis(50), "{split:?}");
    }
}

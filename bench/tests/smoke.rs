//! The suite's smoke mode (CI): every workload runs with tiny counts against
//! real peers and prints its table. Figures are not checked: the benchmark is
//! not a timed test. What is checked is that each table is there and that
//! no workload failed (a failed pair stops the suite with an error).

use std::process::Command;

#[test]
fn smoke_run_prints_every_table() {
    let out_file = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_lockd-bench"))
        .args(["--smoke", "--out"])
        .arg(out_file.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "suite failed:\n{stdout}\n{stderr}");
    let report = std::fs::read_to_string(out_file.path()).unwrap();
    assert!(report.contains("fsync regime: "), "{report}");
    for section in [
        "## B1 host call",
        "## B2 durable capability",
        "## B3 edge",
        "## B4 REST",
        "## B5 scale",
        "## B6 etcd mode",
        "## B7 portable",
        "## B8 keep-alive cost",
        "## B9 TLS",
        "## B10 shared locks and semaphores",
        "## B11 churn",
    ] {
        assert!(report.contains(section), "no {section:?} in:\n{report}");
    }
    // B3's closed-loop runs: saturation on every connection, and the REST
    // control beside the functions on one.
    // B6's hosts on a 3-member etcd, with etcd's counters per pair.
    // B10's rows on both stores, and a leader failover on each.
    for part in [
        "Closed loop, 64 keep-alive connections",
        "REST `GET /healthz` (control)",
        "Growing from 1 to 3 lockd hosts on a 3-member etcd cluster",
        "lockd on etcd, 3 hosts (REST)",
        "WAL fsyncs (3 members)",
        "| shared, one name | etcd |",
        "| a permit of a semaphore of 8, one name (waiting in turn) | redb |",
        "### Leader failover",
        "| redb | kill -9 → next leader's grant |",
        // B4's and B9's split of CPU between server and load generator.
        "| server CPU per pair | client CPU per pair |",
        "| etcd | kill -9 → next leader's grant |",
        // B11's rows of the server's figures, and its verdict.
        "| elapsed | pairs/s | mix rounds/s | redb file |",
        "- Verdict, median of the last third",
    ] {
        assert!(report.contains(part), "no {part:?} in:\n{report}");
    }
    // Every peer took part.
    for peer in [
        "Redis appendfsync always",
        "Redis no persistence",
        "etcd single node",
        "Redis appendfsync always, TLS",
        "Redis no persistence, TLS",
    ] {
        assert!(report.contains(peer), "no {peer:?} in:\n{report}");
    }
}

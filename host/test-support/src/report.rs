//! Figures of a test run, on record for CI.

/// Appends `line` to `$LOCKD_REPORT_DIR/report.txt` when that variable is set
/// (`.ci/run` sets it and prints the file), so the figures of a CI run are on
/// record even though the test harness captures test output.
pub fn report(line: &str) {
    use std::io::Write as _;
    let Some(dir) = std::env::var_os("LOCKD_REPORT_DIR") else {
        return;
    };
    let _ = std::fs::create_dir_all(&dir);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::path::Path::new(&dir).join("report.txt"))
    {
        let _ = writeln!(f, "{line}");
    }
}

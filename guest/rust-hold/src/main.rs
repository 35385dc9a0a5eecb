//! Holds persistent locks and then sleeps forever, so a test can SIGKILL the
//! host process while the locks are held and check them after a restart.
//!
//! Usage: `rust-hold <name>...`. Locks each name as owner `holder` for 60 s
//! (persistent) and prints `held <name> <token>` for each, then `ready`. A
//! failed lock prints `FAIL <name>: <error>` and exits 1.

use std::io::Write;
use std::process::exit;
use std::time::Duration;

use lockd_guest::{lock, LockOptions};

fn main() {
    let mut stdout = std::io::stdout();
    for name in std::env::args().skip(1) {
        match lock(
            &name,
            "holder",
            Duration::from_millis(60_000),
            LockOptions::persistent(),
        ) {
            Ok(grant) => println!("held {name} {}", grant.fencing_token),
            Err(e) => {
                println!("FAIL {name}: {e:?}");
                let _ = stdout.flush();
                exit(1);
            }
        }
    }
    let _ = stdout.flush();
    println!("ready");
    let _ = stdout.flush();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

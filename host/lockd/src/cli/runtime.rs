//! The async runtime of the commands that run the server or components
//! (`serve`, `up`, `run`): each builds one inside its own `execute`, so the
//! type of a command says whether it needs one. The client commands block
//! on HTTP and need none; `lockd exec` and `lockd elect` build their own
//! small one ([`super::supervise::execute`]).

use std::future::Future;

/// Runs `work` to completion on a new multi-threaded runtime and returns its
/// exit code; 1 if the runtime cannot start.
pub fn block_on(work: impl Future<Output = i32>) -> i32 {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return 1;
        }
    };
    let code = runtime.block_on(work);
    // The runtime (and with it the store's writer) shuts down before exit.
    drop(runtime);
    code
}

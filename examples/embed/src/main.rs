//! `lockd-example-embed PLUGIN.wasm JOB_ID [WORKER]`: runs one job through a
//! plugin, with locks kept in memory, and prints the fencing token used.

use std::path::PathBuf;
use std::process::ExitCode;

use lockd_core::{Engine, Limits, LockService};
use lockd_example_embed::JobRunner;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(plugin), Some(job)) = (args.next(), args.next()) else {
        eprintln!("usage: lockd-example-embed PLUGIN.wasm JOB_ID [WORKER]");
        return ExitCode::from(2);
    };
    let worker = args.next().unwrap_or_else(|| "example-worker".to_string());
    let service = LockService::new(Engine::memory(), Limits::default());
    let outcome = async {
        let runner = JobRunner::new(&PathBuf::from(plugin), service, "plugins")?;
        runner.run_job(&job, &worker).await
    }
    .await;
    match outcome {
        Ok(Ok(token)) => {
            println!("job {job} done with fencing token {token}");
            ExitCode::SUCCESS
        }
        Ok(Err(refusal)) => {
            println!("job {job} not run: {refusal}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

//! `lockd up --build`: runs the build commands a Spin manifest declares, like
//! `spin up --build`. Apart from the parsing in [`super`], which runs
//! nothing.

use std::process::Command;

use anyhow::{bail, Context as _};

use super::Manifest;

/// Runs every component's `[component.<id>.build] command` of the manifest
/// at `path`, in the component's `workdir` (default: the manifest's
/// directory), like `spin up --build`. Stops at the first failure.
pub fn run_build_commands(path: &std::path::Path) -> anyhow::Result<()> {
    build(&Manifest::load(path)?)
}

/// Runs every build command of `manifest`.
fn build(manifest: &Manifest) -> anyhow::Result<()> {
    for (id, spec) in &manifest.components {
        let Some(build) = &spec.build else { continue };
        let workdir = match &build.workdir {
            Some(w) => manifest.dir.join(w),
            None => manifest.dir.clone(),
        };
        tracing::info!(component = %id, command = %build.command, "building component");
        let status = Command::new("sh")
            .arg("-c")
            .arg(&build.command)
            .current_dir(&workdir)
            .status()
            .with_context(|| format!("running the build command of component {id}"))?;
        if !status.success() {
            bail!(
                "the build command of component {id} failed ({status}): {}",
                build.command
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const APP: &str = r#"
        spin_manifest_version = 2
        [application]
        name = "t"
        [[trigger.http]]
        route = "/jobs/..."
        component = "jobs"
        [component.jobs]
        source = "a.wasm"
        [component.jobs.build]
        command = "echo built > out.txt"
    "#;

    fn build_in_fresh_dir(manifest_text: &str) -> (tempfile::TempDir, anyhow::Result<()>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spin.toml");
        std::fs::write(&path, manifest_text).unwrap();
        let result = build(&Manifest::load(&path).unwrap());
        (dir, result)
    }

    #[test]
    fn runs_commands_in_the_manifest_directory_and_reports_failure() {
        let (dir, built) = build_in_fresh_dir(APP);
        built.unwrap();
        let out = std::fs::read_to_string(dir.path().join("out.txt")).unwrap();
        assert_eq!(out.trim(), "built");

        let (_dir, failing) = build_in_fresh_dir(&APP.replace("echo built > out.txt", "exit 3"));
        let err = failing.unwrap_err().to_string();
        assert!(err.contains("component jobs failed"), "{err}");
    }
}

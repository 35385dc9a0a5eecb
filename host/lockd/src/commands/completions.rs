//! `lockd completions SHELL`: the shell's completion script, generated from
//! the command line's own definition (clap_complete), so it never lists a
//! command or flag lockd does not have.

use clap::Args;
use clap_complete::Shell;

/// Print a shell completion script for lockd.
///
/// bash: `lockd completions bash > /etc/bash_completion.d/lockd` (or
/// `source <(lockd completions bash)` in ~/.bashrc); zsh: into a file
/// `_lockd` on $fpath; fish: into ~/.config/fish/completions/lockd.fish.
/// The Debian package installs all three.
#[derive(Args, Debug)]
pub struct CompletionsCommand {
    /// The shell the script is for.
    #[arg(value_enum)]
    shell: Shell,
}

impl CompletionsCommand {
    /// Writes the script to stdout; exits 0, or 1 if stdout fails.
    pub fn execute(self) -> i32 {
        let mut script = Vec::new();
        clap_complete::generate(self.shell, &mut crate::command(), "lockd", &mut script);
        crate::commands::man::write_stdout(&script, "lockd completions")
    }
}

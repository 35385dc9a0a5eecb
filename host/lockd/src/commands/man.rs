//! `lockd man`: manual pages in roff, generated from the command line's own
//! definition (clap_mangen): lockd(1) on stdout, or with `--dir` one page per
//! command (lockd.1, lockd-serve.1, lockd-lease-acquire.1, ...), which the
//! Debian package installs.

use std::io::Write as _;
use std::path::PathBuf;

use clap::Args;

/// Print lockd's manual page (roff), or write one page per command.
///
/// `lockd man | man -l -` shows it; `lockd man --dir DIR` writes lockd.1
/// and a lockd-COMMAND.1 for every command and subcommand into DIR.
#[derive(Args, Debug)]
pub struct ManCommand {
    /// Write every page into this directory instead of lockd(1) to stdout.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

impl ManCommand {
    /// Exits 0, or 1 with one line on stderr if a page cannot be written.
    pub fn execute(self) -> i32 {
        let command = crate::command();
        match self.dir {
            Some(dir) => match clap_mangen::generate_to(command, &dir) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!(
                        "lockd man: cannot write the pages into {}: {e}",
                        dir.display()
                    );
                    1
                }
            },
            None => {
                let mut page = Vec::new();
                match clap_mangen::Man::new(command).render(&mut page) {
                    Ok(()) => write_stdout(&page, "lockd man"),
                    Err(e) => {
                        eprintln!("lockd man: {e}");
                        1
                    }
                }
            }
        }
    }
}

/// Writes generated text to stdout: 0, or 1 with a line on stderr naming
/// `who` (a closed pipe, a full disk).
pub(crate) fn write_stdout(bytes: &[u8], who: &str) -> i32 {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{who}: cannot write to stdout: {e}");
            1
        }
    }
}

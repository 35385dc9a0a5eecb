//! `lockd --help` is an overview, one line per command under 100
//! characters, with every command listed; `lockd CMD --help` keeps each
//! command's detail. The line check is tried on a sample too, so that it
//! cannot pass by checking nothing. The completion scripts and man pages
//! are generated from the same definition, so they name every command.

mod lockd_server;

use crate::lockd_server::{lockd, Run};

/// Every command `lockd --help` lists, in its order.
const COMMANDS: [&str; 23] = [
    "run",
    "serve",
    "up",
    "plug",
    "lock",
    "unlock",
    "extend",
    "get",
    "ls",
    "force-unlock",
    "watch",
    "lease",
    "sem",
    "token",
    "exec",
    "elect",
    "leader",
    "proclaim",
    "snapshot",
    "store",
    "completions",
    "man",
    "help",
];

/// The longest line an overview may have, in characters.
const WIDTH: usize = 100;

/// Each line of `text` that is `WIDTH` characters or longer.
fn long_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|line| line.chars().count() >= WIDTH)
        .collect()
}

/// The names of the `Commands:` section of a help text, in order.
fn listed_commands(text: &str) -> Vec<&str> {
    text.lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .collect()
}

fn help(args: &[&str]) -> String {
    let run: Run = lockd(args, &[]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stderr.is_empty(), "{run:?}");
    run.stdout
}

#[test]
fn the_overview_is_one_short_line_per_command() {
    let text = help(&["--help"]);
    assert_eq!(long_lines(&text), Vec::<&str>::new(), "{text}");
    assert_eq!(listed_commands(&text), COMMANDS, "{text}");
    // One line each: the line after a command's is the next command's.
    let section: Vec<&str> = text
        .lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take(COMMANDS.len())
        .collect();
    for (line, command) in section.iter().zip(COMMANDS) {
        assert!(
            line.trim_start().starts_with(&format!("{command} ")),
            "{line:?}"
        );
    }
    // `-h` is the same overview.
    assert_eq!(listed_commands(&help(&["-h"])), COMMANDS);
    // So are the lists of the commands that have subcommands.
    for (command, subcommands) in [
        ("lease", &["grant", "refresh", "revoke", "get", "help"][..]),
        ("sem", &["acquire", "release", "extend", "get", "help"]),
        ("token", &["new", "help"]),
        ("snapshot", &["save", "restore", "help"]),
        ("store", &["check", "help"]),
    ] {
        let text = help(&[command, "--help"]);
        assert_eq!(listed_commands(&text), subcommands, "{text}");
        let section = text.split("Commands:").nth(1).unwrap();
        let section = section.split("Options:").next().unwrap();
        assert_eq!(long_lines(section), Vec::<&str>::new(), "{text}");
    }
}

#[test]
fn each_command_keeps_its_detail() {
    let lock = help(&["lock", "--help"]);
    for detail in [
        "Take a lock (durations: 500ms, 10s, 5m, 1h30m; a plain number is ms)",
        "--owner <OWNER>",
        "--ttl <DURATION>",
        "--lease <LEASE_ID>",
        "--namespace <NAMESPACE>",
        "The namespace of the lock",
        "[default: default]",
        "[env: LOCKD_SERVER=]",
    ] {
        assert!(lock.contains(detail), "{detail:?} not in:\n{lock}");
    }
    // A command whose overview line is a summary keeps its whole text.
    for (command, detail) in [
        (
            "exec",
            "Exits 75 (CMD never started) if the lock cannot be taken",
        ),
        ("watch", "3 if the stream ends otherwise"),
        ("serve", "over HTTPS with --tls-cert and --tls-key"),
        ("up", "together with the REST API"),
        (
            "plug",
            "lockd:lock@0.2.0 (WASI 0.3) gets lockd-client-p3.wasm",
        ),
        ("force-unlock", "The head of its queue gets it next"),
    ] {
        let text = help(&[command, "--help"]);
        assert!(text.contains(detail), "{detail:?} not in:\n{text}");
        let summary = help(&[command, "-h"]);
        assert!(summary.lines().next().unwrap().len() < WIDTH, "{summary}");
    }
    // The shared --namespace keeps each command's wording, and its env.
    let proclaim = help(&["proclaim", "--help"]);
    assert!(
        proclaim.contains("The namespace of the election")
            && proclaim.contains("[env: LOCKD_NAMESPACE=]"),
        "{proclaim}"
    );
    let sem = help(&["sem", "acquire", "--help"]);
    assert!(sem.contains("The namespace of the semaphore"), "{sem}");
}

/// The negative control: the checks above find a line too long and a
/// command missing when there is one.
#[test]
fn the_checks_catch_a_long_line_and_a_missing_command() {
    let sample = format!(
        "Usage: lockd [OPTIONS] <COMMAND>\n\nCommands:\n  run   {}\n  lock  Take a lock\n\n\
         Options:\n  -h, --help  Print help\n",
        "x".repeat(120)
    );
    let long = long_lines(&sample);
    assert_eq!(long.len(), 1, "{long:?}");
    assert!(long[0].starts_with("  run "), "{long:?}");
    assert_eq!(listed_commands(&sample), ["run", "lock"]);
    assert_ne!(listed_commands(&sample), COMMANDS);
    // A line of exactly the limit is too long; one shorter is not.
    assert_eq!(long_lines(&"y".repeat(WIDTH)).len(), 1);
    assert!(long_lines(&"y".repeat(WIDTH - 1)).is_empty());
}

#[test]
fn completions_and_man_pages_name_every_command() {
    let commands = &COMMANDS[..COMMANDS.len() - 1];
    let bash = help(&["completions", "bash"]);
    assert!(bash.contains("complete -F _lockd"), "{bash}");
    for shell in ["bash", "zsh", "fish"] {
        let script = help(&["completions", shell]);
        for command in commands {
            assert!(script.contains(command), "{shell}: no {command}");
        }
        // Subcommands and flags too, not just the top level.
        assert!(
            script.contains("acquire") && script.contains("shutdown-timeout"),
            "{shell}"
        );
    }
    let refused = lockd(&["completions", "tcsh"], &[]);
    assert_eq!(refused.code, Some(2), "{refused:?}");

    let page = help(&["man"]);
    assert!(page.starts_with(".ie \\n(.g .ds Aq"), "{page}");
    assert!(page.contains(".TH lockd 1"), "{page}");
    // The SUBCOMMANDS section names each page, roff escaping its dashes.
    for command in commands {
        let reference = format!("lockd\\-{}(1)", command.replace('-', "\\-"));
        assert!(page.contains(&reference), "man: no {reference}");
    }
    let dir = tempfile::tempdir().unwrap();
    let written = lockd(&["man", "--dir", dir.path().to_str().unwrap()], &[]);
    assert_eq!(written.code, Some(0), "{written:?}");
    for command in commands {
        let file = dir.path().join(format!("lockd-{command}.1"));
        let page =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(page.contains(".SH NAME"), "{page}");
    }
    assert!(dir.path().join("lockd-lease-grant.1").is_file());
}

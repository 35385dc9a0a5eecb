//! How a command fails: one line on stderr and an exit code. A leaf: every
//! other CLI module may return a [`Failure`], and this imports none of them.

/// A failed command: the line to print on stderr and the exit code.
#[derive(Debug)]
pub struct Failure {
    /// The process exit code.
    pub code: i32,
    /// The line to print, without the `lockd:` prefix.
    pub message: String,
}

/// A failure with this exit code and message.
pub fn fail(code: i32, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

/// The exit code of a command's outcome; a failure is first printed on
/// stderr as `{prefix}: {message}`.
pub fn exit_code(outcome: Result<i32, Failure>, prefix: &str) -> i32 {
    match outcome {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("{prefix}: {}", failure.message);
            failure.code
        }
    }
}

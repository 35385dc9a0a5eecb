//! The error model shared by every surface. It mirrors the WIT `error`
//! variant one to one, so mapping it is a single `match` in each surface.

use crate::types::LockInfo;

/// Why a lock operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another owner holds the lock, and any wait timed out.
    #[error("lock is held by {:?} (token {})", .0.owner, .0.fencing_token)]
    Busy(LockInfo),
    /// The lock is held by another owner, or the fencing token given is not
    /// the current one.
    #[error("lock is held by another owner or under another fencing token")]
    NotOwner,
    /// Nobody holds the lock.
    #[error("lock is not held")]
    NotHeld,
    /// An argument broke a limit. Nothing changed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Refused by policy, such as a namespace quota.
    #[error("denied: {0}")]
    Denied(String),
    /// The store could not complete the operation; the outcome is unknown.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// What kind of failure a [`LockError`] is, without its details: the status
/// word every surface reports (the REST API's `status`, the CLI's message,
/// the metrics' `outcome` label). This is the one definition of those words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`LockError::Busy`]: `busy`.
    Busy,
    /// [`LockError::NotOwner`]: `not_owner`.
    NotOwner,
    /// [`LockError::NotHeld`]: `not_held`.
    NotHeld,
    /// [`LockError::InvalidArgument`]: `invalid_argument`.
    InvalidArgument,
    /// [`LockError::Denied`]: `denied`.
    Denied,
    /// [`LockError::Unavailable`]: `unavailable`.
    Unavailable,
}

impl ErrorKind {
    /// Every kind, in declaration order (`kind as usize` indexes it).
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::Busy,
        ErrorKind::NotOwner,
        ErrorKind::NotHeld,
        ErrorKind::InvalidArgument,
        ErrorKind::Denied,
        ErrorKind::Unavailable,
    ];

    /// The status word: `busy`, `not_owner`, `not_held`, `invalid_argument`,
    /// `denied` or `unavailable`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Busy => "busy",
            ErrorKind::NotOwner => "not_owner",
            ErrorKind::NotHeld => "not_held",
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::Denied => "denied",
            ErrorKind::Unavailable => "unavailable",
        }
    }

    /// The kind whose word is `word`, if any.
    pub fn from_word(word: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.as_str() == word)
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl LockError {
    /// The kind of this error, whose [`as_str`](ErrorKind::as_str) is its
    /// status word.
    pub fn kind(&self) -> ErrorKind {
        match self {
            LockError::Busy(_) => ErrorKind::Busy,
            LockError::NotOwner => ErrorKind::NotOwner,
            LockError::NotHeld => ErrorKind::NotHeld,
            LockError::InvalidArgument(_) => ErrorKind::InvalidArgument,
            LockError::Denied(_) => ErrorKind::Denied,
            LockError::Unavailable(_) => ErrorKind::Unavailable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Durability, LockInfo};

    /// One error of every variant. The match is exhaustive (this crate may
    /// match its own non-exhaustive enum fully), so a new variant fails to
    /// compile here until it has a kind and a word.
    fn every_error() -> Vec<(LockError, &'static str)> {
        let holder = LockInfo {
            owner: "o".to_string(),
            fencing_token: 7,
            expires_at_ms: 9,
            durability: Durability::Persistent,
        };
        let errors = [
            LockError::Busy(holder),
            LockError::NotOwner,
            LockError::NotHeld,
            LockError::InvalidArgument("x".to_string()),
            LockError::Denied("quota".to_string()),
            LockError::Unavailable("disk".to_string()),
        ];
        errors
            .into_iter()
            .map(|e| {
                let word = match &e {
                    LockError::Busy(_) => "busy",
                    LockError::NotOwner => "not_owner",
                    LockError::NotHeld => "not_held",
                    LockError::InvalidArgument(_) => "invalid_argument",
                    LockError::Denied(_) => "denied",
                    LockError::Unavailable(_) => "unavailable",
                };
                (e, word)
            })
            .collect()
    }

    #[test]
    fn kind_covers_every_variant() {
        let errors = every_error();
        // Every kind is some variant's, and no two variants share one.
        assert_eq!(errors.len(), ErrorKind::ALL.len());
        for (i, (error, word)) in errors.iter().enumerate() {
            let kind = error.kind();
            assert_eq!(kind.as_str(), *word, "{error:?}");
            assert_eq!(kind.to_string(), *word);
            assert_eq!(ErrorKind::ALL[i], kind, "ALL is in declaration order");
            assert_eq!(kind as usize, i);
            assert_eq!(ErrorKind::from_word(word), Some(kind));
        }
        // Distinct variants have distinct kinds: together they are ALL.
        let kinds: Vec<ErrorKind> = errors.iter().map(|(e, _)| e.kind()).collect();
        assert_eq!(kinds, ErrorKind::ALL);
        assert_eq!(ErrorKind::from_word("ok"), None);
        assert_eq!(ErrorKind::from_word("Busy"), None);
    }
}

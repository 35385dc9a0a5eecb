//! The words of the wire: a reply's `status`, a lock's `durability`, a
//! request's and a holder's `mode` and an event's `type`. Each enum spells
//! its words once, in `words!`; `as_str`, `from_word`, `Display` and serde
//! all read them from there, and an unknown word is refused as serde
//! refuses an unknown variant.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Declares a word enum: its variants with their words, `ALL`, `as_str`,
/// `from_word`, `Display` and serde.
macro_rules! words {
    (
        $(#[$meta:meta])*
        $ty:ident, expecting $expecting:literal {
            $( $(#[$variant_meta:meta])* $variant:ident => $word:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $ty {
            $( $(#[$variant_meta])* $variant, )+
        }

        impl $ty {
            /// Every word, in declaration order.
            pub const ALL: [$ty; [$($word),+].len()] = [$($ty::$variant),+];

            /// The word on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $ty::$variant => $word, )+
                }
            }

            /// The value whose word is `word`.
            pub fn from_word(word: &str) -> Option<$ty> {
                $ty::ALL.into_iter().find(|w| w.as_str() == word)
            }

            const WORDS: &'static [&'static str] = &[$($word),+];
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct WordVisitor;
                impl Visitor<'_> for WordVisitor {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: de::Error>(self, word: &str) -> Result<$ty, E> {
                        $ty::from_word(word).ok_or_else(|| E::unknown_variant(word, $ty::WORDS))
                    }
                }
                deserializer.deserialize_str(WordVisitor)
            }
        }
    };
}

words! {
    /// The `status` word of every reply body. The words of lock errors are
    /// lockd-core's `ErrorKind` words (a test of the `core` feature holds
    /// them equal).
    Status, expecting "a lockd status word" {
        /// `acquired`: `lock` granted.
        Acquired => "acquired",
        /// `unlocked`: `unlock` released the lock.
        Unlocked => "unlocked",
        /// `extended`: `extend` moved the expiry.
        Extended => "extended",
        /// `found`: `get` found a holder, `list` answered, or a lease's
        /// `get` found it live.
        Found => "found",
        /// `not_found`: `get` of a free lock, or a path that is not a route
        /// (then with a `message`).
        NotFound => "not_found",
        /// `busy`: another owner holds the lock; the body carries the holder.
        Busy => "busy",
        /// `not_owner`: held by another owner or under another fencing token.
        NotOwner => "not_owner",
        /// `not_held`: nobody holds the lock (or the lease is not live).
        NotHeld => "not_held",
        /// `invalid_argument`: bad input; nothing changed.
        InvalidArgument => "invalid_argument",
        /// `unauthorized`: the bearer token is missing or wrong.
        Unauthorized => "unauthorized",
        /// `forbidden`: a known token outside its namespaces or role; the
        /// message names the token and what it lacks.
        Forbidden => "forbidden",
        /// `rate_limited`: the token is over its rate limit (lockd.toml's
        /// `rate_per_sec`, `burst`); nothing was done. The `Retry-After`
        /// header says when to try again.
        RateLimited => "rate_limited",
        /// `denied`: refused by policy, such as a namespace quota.
        Denied => "denied",
        /// `unavailable`: the store could not complete the operation; the
        /// outcome is unknown.
        Unavailable => "unavailable",
        /// `ok`: `/healthz`.
        Ok => "ok",
        /// `granted`: a lease was granted.
        Granted => "granted",
        /// `refreshed`: a lease's expiry moved.
        Refreshed => "refreshed",
        /// `revoked`: a lease ended and its locks were released.
        Revoked => "revoked",
        /// `released`: a force-unlock released the lock from its holder.
        Released => "released",
        /// `proclaimed`: an election's leader replaced its value.
        Proclaimed => "proclaimed",
        /// `resigned`: a leader stopped leading; the next candidate leads.
        Resigned => "resigned",
    }
}

impl Status {
    /// The response header, with the value `1`, on an `unavailable` (503)
    /// answer given before the request could change anything: the server
    /// is draining (it refused a call that would wait, or answered a
    /// queued one) or still starting. Such a call was not applied, so a
    /// client may send it to another server whatever the call; without the
    /// header, `unavailable` means the outcome is unknown
    /// (docs/contract.md#c13-unavailable).
    pub const NOT_APPLIED_HEADER: &'static str = "lockd-not-applied";

    /// The HTTP code of a reply with this word (docs/reference.md). The server
    /// also answers `invalid_argument` with 405 (wrong method) and 413
    /// (body too large).
    pub const fn http_code(self) -> u16 {
        match self {
            Status::Acquired
            | Status::Unlocked
            | Status::Extended
            | Status::Found
            | Status::Ok
            | Status::Granted
            | Status::Refreshed
            | Status::Revoked
            | Status::Released
            | Status::Proclaimed
            | Status::Resigned => 200,
            Status::InvalidArgument => 400,
            Status::Unauthorized => 401,
            Status::Denied | Status::Forbidden => 403,
            Status::NotFound => 404,
            Status::Busy | Status::NotOwner | Status::NotHeld => 409,
            Status::RateLimited => 429,
            Status::Unavailable => 503,
        }
    }
}

words! {
    /// `durability` as it is spelt on the wire.
    DurabilityWord, expecting "a durability word (persistent or ephemeral)" {
        /// `persistent`: on disk before the call returns.
        Persistent => "persistent",
        /// `ephemeral`: in memory only.
        Ephemeral => "ephemeral",
    }
}

words! {
    /// The `mode` a lock request asks for (docs/contract.md#c21-shared); a
    /// semaphore's permit is asked for with `permits` instead.
    LockMode, expecting "a lock mode (exclusive or shared)" {
        /// `exclusive`: the name alone (the default).
        Exclusive => "exclusive",
        /// `shared`: beside other shared holders (a read lock).
        Shared => "shared",
    }
}

words! {
    /// The `mode` of a grant in a reply or an event: what its holder holds.
    /// The default, for a server older than modes: all its grants were
    /// exclusive.
    #[derive(Default)]
    HeldMode, expecting "a held mode (exclusive, shared, permit or leader)" {
        /// `exclusive`: the name alone.
        #[default]
        Exclusive => "exclusive",
        /// `shared`: beside other shared holders.
        Shared => "shared",
        /// `permit`: one permit of a semaphore
        /// (docs/contract.md#c22-semaphores).
        Permit => "permit",
        /// `leader`: the leadership of an election
        /// (docs/contract.md#c24-elections).
        Leader => "leader",
    }
}

words! {
    /// The `type` of an event of `GET /v1/events` (docs/reference.md#events).
    EventWord, expecting "an event type word" {
        /// A free lock was granted.
        Acquired => "acquired",
        /// A holder moved its expiry (`extend`, a re-lock, a lease refresh).
        Extended => "extended",
        /// The holder released it (`unlock`, a guard's drop, a lease revoke).
        Released => "released",
        /// Its expiry passed.
        Expired => "expired",
        /// It passed from a holder to the head of its queue.
        HandedOff => "handed_off",
        /// An operator released it, whoever held it (`force-unlock`).
        ForceReleased => "force_released",
        /// A lease was granted.
        LeaseGranted => "lease_granted",
        /// A lease was revoked (its locks are released in the same step).
        LeaseRevoked => "lease_revoked",
        /// A lease's expiry passed.
        LeaseExpired => "lease_expired",
        /// An election's leader proclaimed a new value.
        Proclaimed => "proclaimed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_word_round_trips() {
        let mut seen = std::collections::HashSet::new();
        for status in Status::ALL {
            // Exhaustive, so a new status fails to compile until it is here
            // (and in ALL, which the count below checks).
            let (word, code) = match status {
                Status::Acquired => ("acquired", 200),
                Status::Unlocked => ("unlocked", 200),
                Status::Extended => ("extended", 200),
                Status::Found => ("found", 200),
                Status::NotFound => ("not_found", 404),
                Status::Busy => ("busy", 409),
                Status::NotOwner => ("not_owner", 409),
                Status::NotHeld => ("not_held", 409),
                Status::InvalidArgument => ("invalid_argument", 400),
                Status::Unauthorized => ("unauthorized", 401),
                Status::Forbidden => ("forbidden", 403),
                Status::RateLimited => ("rate_limited", 429),
                Status::Denied => ("denied", 403),
                Status::Unavailable => ("unavailable", 503),
                Status::Ok => ("ok", 200),
                Status::Granted => ("granted", 200),
                Status::Refreshed => ("refreshed", 200),
                Status::Revoked => ("revoked", 200),
                Status::Released => ("released", 200),
                Status::Proclaimed => ("proclaimed", 200),
                Status::Resigned => ("resigned", 200),
            };
            assert!(seen.insert(word), "{word} twice");
            assert_eq!(status.as_str(), word);
            assert_eq!(status.to_string(), word);
            assert_eq!(status.http_code(), code, "{word}");
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{word}\""));
            assert_eq!(serde_json::from_str::<Status>(&json).unwrap(), status);
            assert_eq!(Status::from_word(word), Some(status));
        }
        assert_eq!(seen.len(), Status::ALL.len());
        let err = serde_json::from_str::<Status>("\"Busy\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown variant `Busy`"), "{err}");
    }

    #[test]
    fn durability_and_event_words_round_trip() {
        for d in DurabilityWord::ALL {
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{d}\""));
            assert_eq!(serde_json::from_str::<DurabilityWord>(&json).unwrap(), d);
        }
        let forever = serde_json::from_str::<DurabilityWord>("\"forever\"")
            .unwrap_err()
            .to_string();
        assert!(
            forever.contains("unknown variant `forever`, expected `persistent` or `ephemeral`"),
            "{forever}"
        );
        for e in EventWord::ALL {
            let json = serde_json::to_string(&e).unwrap();
            assert_eq!(serde_json::from_str::<EventWord>(&json).unwrap(), e);
        }
        assert!(serde_json::from_str::<EventWord>("\"stolen\"").is_err());
        let mode = serde_json::from_str::<LockMode>("\"read\"")
            .unwrap_err()
            .to_string();
        assert!(
            mode.contains("unknown variant `read`, expected `exclusive` or `shared`"),
            "{mode}"
        );
        for m in HeldMode::ALL {
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(serde_json::from_str::<HeldMode>(&json).unwrap(), m);
        }
    }
}

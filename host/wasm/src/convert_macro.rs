//! The conversions every version of the `lockd:lock` WIT package shares.
//! Each version's `bindgen!` makes its own Rust types of the same WIT
//! records, so the functions are written once here and instantiated in each
//! version's one conversion module (`crate::convert` for 0.1.0,
//! `crate::p3::convert` for 0.2.0), over the `types`, `locks`, `guards` and
//! `rwlocks` modules in scope there.

/// Defines, with visibility `$vis`, `WitResult`, `to_wit` (the one mapping
/// of core errors to WIT errors), `info_to_wit`, `grant_to_wit`,
/// `durability_to_wit`, `durability_from_wit`, `lock_options_from_wit`,
/// `guard_options_from_wit`, `mode_to_wit`, `name_state_to_wit`,
/// `leader_to_wit` and `campaign_options_from_wit`.
macro_rules! wit_conversions {
    ($vis:vis) => {
        /// What a host function with a WIT `result` returns: the outer
        /// error traps (a host bug), the inner one is the guest's to handle.
        $vis type WitResult<T> = wasmtime::Result<Result<T, types::Error>>;

        $vis fn to_wit(error: lockd_core::LockError) -> types::Error {
            use lockd_core::LockError;
            match error {
                LockError::Busy(info) => types::Error::Busy(info_to_wit(info)),
                LockError::NotOwner => types::Error::NotOwner,
                LockError::NotHeld => types::Error::NotHeld,
                LockError::InvalidArgument(m) => types::Error::InvalidArgument(m),
                LockError::Denied(m) => types::Error::Denied(m),
                LockError::Unavailable(m) => types::Error::Unavailable(m),
                // `LockError` is non-exhaustive; a variant added later must
                // not trap.
                other => types::Error::Unavailable(other.to_string()),
            }
        }

        $vis fn info_to_wit(info: lockd_core::LockInfo) -> types::LockInfo {
            types::LockInfo {
                owner: info.owner,
                fencing_token: info.fencing_token,
                expires_at_ms: info.expires_at_ms,
                durability: durability_to_wit(info.durability),
            }
        }

        $vis fn grant_to_wit(grant: lockd_core::Grant) -> types::Grant {
            types::Grant {
                fencing_token: grant.fencing_token,
                expires_at_ms: grant.expires_at_ms,
            }
        }

        $vis fn durability_to_wit(d: lockd_core::Durability) -> types::Durability {
            match d {
                lockd_core::Durability::Persistent => types::Durability::Persistent,
                lockd_core::Durability::Ephemeral => types::Durability::Ephemeral,
            }
        }

        $vis fn durability_from_wit(d: types::Durability) -> lockd_core::Durability {
            match d {
                types::Durability::Persistent => lockd_core::Durability::Persistent,
                types::Durability::Ephemeral => lockd_core::Durability::Ephemeral,
            }
        }

        /// The options of `lock` and `acquire`.
        $vis fn lock_options_from_wit(options: locks::LockOptions) -> lockd_core::LockOptions {
            lockd_core::LockOptions {
                wait_ms: u64::from(options.wait_ms),
                durability: durability_from_wit(options.durability),
                ..lockd_core::LockOptions::default()
            }
        }

        /// The options of a guard's acquire: the lock's options and whether
        /// to keep the guard alive.
        $vis fn guard_options_from_wit(
            options: guards::GuardOptions,
        ) -> (lockd_core::LockOptions, bool) {
            let lock_options = lock_options_from_wit(locks::LockOptions {
                wait_ms: options.wait_ms,
                durability: options.durability,
            });
            (lock_options, options.keep_alive)
        }

        $vis fn mode_to_wit(claim: lockd_core::Claim) -> rwlocks::Mode {
            use lockd_core::Claim;
            match claim {
                Claim::Exclusive => rwlocks::Mode::Exclusive,
                Claim::Shared => rwlocks::Mode::Shared,
                Claim::Permit { .. } => rwlocks::Mode::Permit,
                Claim::Leader => rwlocks::Mode::Leader,
            }
        }

        /// `describe`'s answer: every holder with its mode, and the
        /// semaphore's size when the name is one.
        $vis fn name_state_to_wit(state: lockd_core::NameState) -> rwlocks::NameState {
            let permits = state.holders.iter().find_map(|h| h.claim.permits());
            rwlocks::NameState {
                holders: state
                    .holders
                    .into_iter()
                    .map(|h| rwlocks::Holder {
                        info: info_to_wit(h.info),
                        mode: mode_to_wit(h.claim),
                        acquired_at_ms: h.acquired_at_ms,
                    })
                    .collect(),
                waiters: state.waiters,
                permits,
                lock_delay_until_ms: state.delay_until_ms,
            }
        }
        $vis fn leader_to_wit(leader: lockd_core::Leader) -> elections::LeaderInfo {
            elections::LeaderInfo {
                candidate: leader.info.owner,
                value: leader.value,
                fencing_token: leader.info.fencing_token,
                since_ms: leader.since_ms,
                expires_at_ms: leader.info.expires_at_ms,
                durability: durability_to_wit(leader.info.durability),
            }
        }

        /// The options of `campaign`: the lock's options and whether to
        /// keep the leadership alive.
        $vis fn campaign_options_from_wit(
            options: elections::CampaignOptions,
        ) -> (lockd_core::LockOptions, bool) {
            let lock_options = lock_options_from_wit(locks::LockOptions {
                wait_ms: options.wait_ms,
                durability: options.durability,
            });
            (lock_options, options.keep_alive)
        }
    };
}

pub(crate) use wit_conversions;

//! The conversions between the core's types and a client's WIT types, the
//! same records field for field in `lockd:lock@0.1.0` and `@0.2.0`: each
//! client's `bindgen!` makes its own Rust types of them, so the `From`
//! impls are written once here and expanded in each client's `convert.rs`.

/// Expands, in a client's `convert` module, `wit` (a core result as the
/// WIT's) and the `From` impls between the core's types and the WIT types
/// in scope there under their WIT names: `CampaignOptions`, `LeaderInfo`,
/// `GuardOptions`, `HoldMode`, `LeaseOptions`, `LockOptions`, `Holder`,
/// `Mode`, `NameState`, `Durability`, `Error`, `Grant` and `LockInfo`.
#[macro_export]
macro_rules! wit_conversions {
    () => {
        /// A core result as the WIT's.
        pub(crate) fn wit<T, U: From<T>>(result: Result<T, $crate::Error>) -> Result<U, Error> {
            result.map(U::from).map_err(Error::from)
        }

        impl From<$crate::Error> for Error {
            fn from(error: $crate::Error) -> Self {
                match error {
                    $crate::Error::Busy(holder) => Error::Busy(holder.into()),
                    $crate::Error::NotOwner => Error::NotOwner,
                    $crate::Error::NotHeld => Error::NotHeld,
                    $crate::Error::InvalidArgument(message) => Error::InvalidArgument(message),
                    $crate::Error::Denied(message) => Error::Denied(message),
                    $crate::Error::Unavailable(message) => Error::Unavailable(message),
                }
            }
        }

        impl From<$crate::DurabilityWord> for Durability {
            fn from(word: $crate::DurabilityWord) -> Self {
                match word {
                    $crate::DurabilityWord::Persistent => Durability::Persistent,
                    $crate::DurabilityWord::Ephemeral => Durability::Ephemeral,
                }
            }
        }

        impl From<Durability> for $crate::DurabilityWord {
            fn from(durability: Durability) -> Self {
                match durability {
                    Durability::Persistent => $crate::DurabilityWord::Persistent,
                    Durability::Ephemeral => $crate::DurabilityWord::Ephemeral,
                }
            }
        }

        impl From<$crate::Grant> for Grant {
            fn from(grant: $crate::Grant) -> Self {
                Grant {
                    fencing_token: grant.fencing_token,
                    expires_at_ms: grant.expires_at_ms,
                }
            }
        }

        impl From<$crate::LockInfo> for LockInfo {
            fn from(info: $crate::LockInfo) -> Self {
                LockInfo {
                    owner: info.owner,
                    fencing_token: info.fencing_token,
                    expires_at_ms: info.expires_at_ms,
                    durability: info.durability.into(),
                }
            }
        }

        impl From<LockOptions> for $crate::LockOptions {
            fn from(options: LockOptions) -> Self {
                $crate::LockOptions {
                    wait_ms: options.wait_ms,
                    durability: options.durability.into(),
                }
            }
        }

        impl From<GuardOptions> for $crate::GuardOptions {
            fn from(options: GuardOptions) -> Self {
                $crate::GuardOptions {
                    wait_ms: options.wait_ms,
                    durability: options.durability.into(),
                    keep_alive: options.keep_alive,
                }
            }
        }

        impl From<CampaignOptions> for $crate::GuardOptions {
            fn from(options: CampaignOptions) -> Self {
                $crate::GuardOptions {
                    wait_ms: options.wait_ms,
                    durability: options.durability.into(),
                    keep_alive: options.keep_alive,
                }
            }
        }

        impl From<LeaseOptions> for $crate::LeaseOptions {
            fn from(options: LeaseOptions) -> Self {
                $crate::LeaseOptions {
                    durability: options.durability.into(),
                    keep_alive: options.keep_alive,
                }
            }
        }

        impl From<HoldMode> for $crate::LockClaim {
            fn from(mode: HoldMode) -> Self {
                match mode {
                    HoldMode::Exclusive => $crate::LockClaim::Exclusive,
                    HoldMode::Shared => $crate::LockClaim::Shared,
                }
            }
        }

        impl From<$crate::HeldMode> for Mode {
            fn from(mode: $crate::HeldMode) -> Self {
                match mode {
                    $crate::HeldMode::Exclusive => Mode::Exclusive,
                    $crate::HeldMode::Shared => Mode::Shared,
                    $crate::HeldMode::Permit => Mode::Permit,
                    $crate::HeldMode::Leader => Mode::Leader,
                }
            }
        }

        impl From<$crate::NameState> for NameState {
            fn from(state: $crate::NameState) -> Self {
                NameState {
                    holders: state
                        .holders
                        .into_iter()
                        .map(|holder| Holder {
                            info: holder.info.into(),
                            mode: holder.mode.into(),
                            acquired_at_ms: holder.acquired_at_ms,
                        })
                        .collect(),
                    waiters: state.waiters,
                    permits: state.permits,
                    lock_delay_until_ms: state.lock_delay_until_ms,
                }
            }
        }

        impl From<$crate::LeaderInfo> for LeaderInfo {
            fn from(leader: $crate::LeaderInfo) -> Self {
                LeaderInfo {
                    candidate: leader.candidate,
                    value: leader.value,
                    fencing_token: leader.fencing_token,
                    since_ms: leader.since_ms,
                    expires_at_ms: leader.expires_at_ms,
                    durability: leader.durability.into(),
                }
            }
        }
    };
}

//! Conversions between the core's types and the `lockd:lock@0.2.0` WIT
//! types: the one place where core errors become this version's WIT errors
//! (the functions both versions share are `crate::convert_macro`'s).

use super::wit::{elections, guards, locks, rwlocks, types};
use crate::liveness::Cause;

crate::convert_macro::wit_conversions!(pub(super));

/// The value of a `lost` future.
pub(super) fn lost_reason_to_wit(cause: Cause) -> types::LostReason {
    match cause {
        Cause::Released => types::LostReason::Released,
        Cause::Expired => types::LostReason::Expired,
        Cause::EndedElsewhere => types::LostReason::EndedElsewhere,
    }
}

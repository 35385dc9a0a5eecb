//! Between `lockd-client-core`'s types and this package's WIT types
//! (`lockd:lock@0.2.0`): the same records, field for field, converted by
//! [`lockd_client_core::wit_conversions!`], and the `lost` futures' reason.

use lockd_client_core as core_types;

use crate::bindings::exports::lockd::lock::elections::{CampaignOptions, LeaderInfo};
use crate::bindings::exports::lockd::lock::guards::GuardOptions;
use crate::bindings::exports::lockd::lock::holds::HoldMode;
use crate::bindings::exports::lockd::lock::leases::LeaseOptions;
use crate::bindings::exports::lockd::lock::locks::LockOptions;
use crate::bindings::exports::lockd::lock::rwlocks::{Holder, Mode, NameState};
use crate::bindings::exports::lockd::lock::types::{
    Durability, Error, Grant, LockInfo, LostReason,
};

lockd_client_core::wit_conversions!();

impl From<core_types::LostReason> for LostReason {
    fn from(reason: core_types::LostReason) -> Self {
        match reason {
            core_types::LostReason::Released => LostReason::Released,
            core_types::LostReason::Expired => LostReason::Expired,
            core_types::LostReason::EndedElsewhere => LostReason::EndedElsewhere,
        }
    }
}

//! Between `lockd-client-core`'s types and this package's WIT types
//! (`lockd:lock@0.1.0`): the same records, field for field, converted by
//! [`lockd_client_core::wit_conversions!`].

use crate::bindings::exports::lockd::lock::elections::{CampaignOptions, LeaderInfo};
use crate::bindings::exports::lockd::lock::guards::GuardOptions;
use crate::bindings::exports::lockd::lock::holds::HoldMode;
use crate::bindings::exports::lockd::lock::leases::LeaseOptions;
use crate::bindings::exports::lockd::lock::locks::LockOptions;
use crate::bindings::exports::lockd::lock::rwlocks::{Holder, Mode, NameState};
use crate::bindings::exports::lockd::lock::types::{Durability, Error, Grant, LockInfo};

lockd_client_core::wit_conversions!();

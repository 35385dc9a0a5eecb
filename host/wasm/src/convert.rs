//! Conversions between the core's types and the `lockd:lock@0.1.0` WIT
//! types: the one place where core errors become this version's WIT errors
//! (the shared functions are `crate::conversions`'s).

use crate::wit::{elections, guards, locks, rwlocks, types};

crate::conversions::wit_conversions!(pub(crate));

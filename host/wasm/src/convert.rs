//! Conversions between the core's types and the `lockd:lock@0.1.0` WIT
//! types: the one place where core errors become this version's WIT errors
//! (the shared functions are `crate::convert_macro`'s).

use crate::wit::{elections, guards, locks, rwlocks, types};

crate::convert_macro::wit_conversions!(pub(crate));

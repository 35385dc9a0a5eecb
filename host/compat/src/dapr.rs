//! Dapr's distributed lock building block over the [`LockService`]: the
//! semantics its HTTP and gRPC surfaces share (`dapr_http`, `dapr_grpc`),
//! checked in the order Dapr's runtime checks them, and the one table of
//! Dapr's errors ([`DaprError`]), as Dapr's `pkg/messages` writes them.
//!
//! A Dapr lock is an ordinary lockd lock: the store's namespace
//! ([`LockStores`]: the store name, or the one lockd.toml gives a declared
//! store) is the namespace, the resource id the name, the lock owner the
//! owner. Only the re-lock differs: Dapr's `TryLock` is not reentrant, so
//! the holder's own second `TryLock` fails
//! ([`LockOptions::refuse_relock`]).

use std::sync::Arc;

use lockd_core::{Durability, LockError, LockOptions, LockService};

use crate::dapr_components::{LockStores, Lookup};

/// What `UnlockAlpha1` answers, with Dapr's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnlockStatus {
    /// Released.
    Success = 0,
    /// Nobody holds the lock.
    LockDoesNotExist = 1,
    /// Another owner holds it.
    LockBelongsToOthers = 2,
    /// The store failed.
    InternalError = 3,
}

/// A Dapr API error: its `errorCode`, HTTP status and gRPC code are those
/// Dapr's runtime gives the same failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DaprError {
    /// `ERR_MALFORMED_REQUEST`, 400, `INVALID_ARGUMENT`: a field is missing,
    /// of the wrong type or out of range.
    Malformed(String),
    /// `ERR_BODY_READ`, 400, `INVALID_ARGUMENT`: the body could not be read
    /// (over the size limit, or cut off).
    BodyRead(String),
    /// `ERR_LOCK_STORE_NOT_FOUND`, 400, `INVALID_ARGUMENT`: no component
    /// declares the store (or, with none configured, its name is not a
    /// lockd namespace).
    StoreNotFound(String),
    /// `ERR_LOCK_STORE_NOT_CONFIGURED`, 500, `FAILED_PRECONDITION`: the
    /// component files declare no lock store at all.
    StoreNotConfigured(String),
    /// `ERR_TRY_LOCK`, 500, `INTERNAL`: the store failed or refused.
    TryLock(String),
    /// `ERR_UNLOCK`, 500, `INTERNAL`: the store failed.
    Unlock(String),
}

impl DaprError {
    /// Dapr's `errorCode` word.
    pub fn error_code(&self) -> &'static str {
        match self {
            DaprError::Malformed(_) => "ERR_MALFORMED_REQUEST",
            DaprError::BodyRead(_) => "ERR_BODY_READ",
            DaprError::StoreNotFound(_) => "ERR_LOCK_STORE_NOT_FOUND",
            DaprError::StoreNotConfigured(_) => "ERR_LOCK_STORE_NOT_CONFIGURED",
            DaprError::TryLock(_) => "ERR_TRY_LOCK",
            DaprError::Unlock(_) => "ERR_UNLOCK",
        }
    }

    /// The HTTP status Dapr answers it with.
    pub fn http_status(&self) -> u16 {
        match self {
            DaprError::Malformed(_) | DaprError::BodyRead(_) | DaprError::StoreNotFound(_) => 400,
            DaprError::StoreNotConfigured(_) | DaprError::TryLock(_) | DaprError::Unlock(_) => 500,
        }
    }

    /// The gRPC code Dapr answers it with.
    pub fn grpc_code(&self) -> tonic::Code {
        match self {
            DaprError::Malformed(_) | DaprError::BodyRead(_) | DaprError::StoreNotFound(_) => {
                tonic::Code::InvalidArgument
            }
            DaprError::StoreNotConfigured(_) => tonic::Code::FailedPrecondition,
            DaprError::TryLock(_) | DaprError::Unlock(_) => tonic::Code::Internal,
        }
    }

    /// The message, as Dapr words it.
    pub fn message(&self) -> &str {
        match self {
            DaprError::Malformed(m)
            | DaprError::BodyRead(m)
            | DaprError::StoreNotFound(m)
            | DaprError::StoreNotConfigured(m)
            | DaprError::TryLock(m)
            | DaprError::Unlock(m) => m,
        }
    }
}

/// Dapr's lock calls over a [`LockService`].
#[derive(Clone, Debug)]
pub struct DaprLocks {
    service: LockService,
    durability: Durability,
    stores: Arc<LockStores>,
}

impl DaprLocks {
    /// Dapr's lock API over `service`, taking any store name as the
    /// namespace of that name ([`LockStores::AnyName`]; see
    /// [`DaprLocks::with_stores`]); its locks get `durability`.
    pub fn new(service: LockService, durability: Durability) -> Self {
        DaprLocks {
            service,
            durability,
            stores: Arc::new(LockStores::AnyName),
        }
    }

    /// These calls serving `stores` only.
    pub fn with_stores(self, stores: LockStores) -> Self {
        DaprLocks {
            stores: Arc::new(stores),
            ..self
        }
    }

    /// The lock stores served.
    pub fn stores(&self) -> &LockStores {
        &self.stores
    }

    /// The namespace of `store`'s locks, if it is a lock store: the
    /// namespace a caller's token must reach.
    pub fn namespace_of<'a>(&'a self, store: &'a str) -> Option<&'a str> {
        match self.stores.lookup(store) {
            Lookup::Namespace(namespace) => Some(namespace),
            Lookup::NotConfigured | Lookup::NotFound => None,
        }
    }

    /// `TryLockAlpha1`: `true` if `owner` now holds `resource` for
    /// `expiry_in_seconds`, `false` if anyone (`owner` included) held it.
    pub async fn try_lock(
        &self,
        store: &str,
        resource: &str,
        owner: &str,
        expiry_in_seconds: i32,
    ) -> Result<bool, DaprError> {
        if expiry_in_seconds <= 0 {
            return Err(DaprError::Malformed(format!(
                "ExpiryInSeconds is not positive in lock store {store}"
            )));
        }
        let namespace = self.validate(store, resource, owner)?;
        let options = LockOptions {
            durability: self.durability,
            refuse_relock: true,
            ..LockOptions::default()
        };
        let ttl_ms = u64::from(expiry_in_seconds.unsigned_abs()) * 1000;
        match self
            .service
            .lock(namespace, resource, owner, ttl_ms, options)
            .await
        {
            Ok(_) => Ok(true),
            Err(LockError::Busy(_)) => Ok(false),
            Err(LockError::InvalidArgument(why)) => Err(malformed(store, &why)),
            Err(e) => Err(DaprError::TryLock(format!(
                "failed to try acquiring lock: {e}"
            ))),
        }
    }

    /// `UnlockAlpha1`.
    pub async fn unlock(
        &self,
        store: &str,
        resource: &str,
        owner: &str,
    ) -> Result<UnlockStatus, DaprError> {
        let namespace = self.validate(store, resource, owner)?;
        match self.service.unlock(namespace, resource, owner, None).await {
            Ok(()) => Ok(UnlockStatus::Success),
            Err(LockError::NotHeld) => Ok(UnlockStatus::LockDoesNotExist),
            Err(LockError::NotOwner) => Ok(UnlockStatus::LockBelongsToOthers),
            Err(LockError::InvalidArgument(why)) => Err(malformed(store, &why)),
            Err(e) => Err(DaprError::Unlock(format!("failed to release lock: {e}"))),
        }
    }

    /// The checks Dapr makes before it asks a store, in its order
    /// (daprd's `lockValidateRequest`); the namespace of `store`'s locks.
    fn validate<'a>(
        &'a self,
        store: &'a str,
        resource: &str,
        owner: &str,
    ) -> Result<&'a str, DaprError> {
        let lookup = self.stores.lookup(store);
        if lookup == Lookup::NotConfigured {
            return Err(DaprError::StoreNotConfigured(format!(
                "lock store {store} is not configured"
            )));
        }
        if resource.is_empty() {
            return Err(DaprError::Malformed(format!(
                "ResourceId is empty in lock store {store}"
            )));
        }
        if owner.is_empty() {
            return Err(DaprError::Malformed(format!(
                "LockOwner is empty in lock store {store}"
            )));
        }
        let Lookup::Namespace(namespace) = lookup else {
            return Err(DaprError::StoreNotFound(format!(
                "lock store {store} is not found"
            )));
        };
        // A declared store's namespace was checked at start-up; any other
        // name is checked here.
        self.service.check_namespace(namespace).map_err(|why| {
            DaprError::StoreNotFound(format!(
                "lock store {store} is not found: a store name is a lockd namespace ({why})"
            ))
        })?;
        Ok(namespace)
    }
}

fn malformed(store: &str, why: &str) -> DaprError {
    DaprError::Malformed(format!("{why} in lock store {store}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_has_daprs_code_status_and_grpc_code() {
        let cases = [
            (
                DaprError::Malformed(String::new()),
                "ERR_MALFORMED_REQUEST",
                400,
                tonic::Code::InvalidArgument,
            ),
            (
                DaprError::BodyRead(String::new()),
                "ERR_BODY_READ",
                400,
                tonic::Code::InvalidArgument,
            ),
            (
                DaprError::StoreNotFound(String::new()),
                "ERR_LOCK_STORE_NOT_FOUND",
                400,
                tonic::Code::InvalidArgument,
            ),
            (
                DaprError::StoreNotConfigured(String::new()),
                "ERR_LOCK_STORE_NOT_CONFIGURED",
                500,
                tonic::Code::FailedPrecondition,
            ),
            (
                DaprError::TryLock(String::new()),
                "ERR_TRY_LOCK",
                500,
                tonic::Code::Internal,
            ),
            (
                DaprError::Unlock(String::new()),
                "ERR_UNLOCK",
                500,
                tonic::Code::Internal,
            ),
        ];
        for (error, code, status, grpc) in cases {
            assert_eq!(error.error_code(), code);
            assert_eq!(error.http_status(), status, "{code}");
            assert_eq!(error.grpc_code(), grpc, "{code}");
        }
    }
}

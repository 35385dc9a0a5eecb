//! The one dispatch layer in front of a backend: every surface (wasm, REST,
//! CLI) calls this, so limits are enforced once.

use std::sync::Arc;

use crate::backend::LockBackend;
use crate::error::LockError;
use crate::limits::Limits;
use crate::types::{Grant, Key, ListedLock, LockInfo, LockOptions};

/// Validates arguments against [`Limits`], then calls the backend.
/// Cheap to clone.
#[derive(Clone)]
pub struct LockService {
    backend: Arc<dyn LockBackend>,
    limits: Arc<Limits>,
}

impl std::fmt::Debug for LockService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockService")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl LockService {
    /// A service over `backend`.
    pub fn new(backend: Arc<dyn LockBackend>, limits: Limits) -> Self {
        LockService {
            backend,
            limits: Arc::new(limits),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The backend, for callers that validated arguments themselves.
    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.backend
    }

    fn key(&self, namespace: &str, name: &str) -> Result<Key, LockError> {
        self.limits.check_namespace(namespace)?;
        self.limits.check_name(name)?;
        Ok(Key::new(namespace, name))
    }

    /// Takes `name` for `owner`; see design.md §1.
    pub async fn lock(
        &self,
        namespace: &str,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> Result<Grant, LockError> {
        let key = self.key(namespace, name)?;
        self.limits.check_owner(owner)?;
        self.limits.check_ttl(ttl_ms)?;
        self.limits.check_wait(options.wait_ms)?;
        self.backend.lock(&key, owner, ttl_ms, options).await
    }

    /// Releases `name` if `owner` holds it (under `token`, if given).
    pub async fn unlock(
        &self,
        namespace: &str,
        name: &str,
        owner: &str,
        token: Option<u64>,
    ) -> Result<(), LockError> {
        let key = self.key(namespace, name)?;
        self.limits.check_owner(owner)?;
        self.backend.unlock(&key, owner, token).await
    }

    /// Moves the expiry of `name`, held by `owner`, to now + `ttl_ms`.
    pub async fn extend(
        &self,
        namespace: &str,
        name: &str,
        owner: &str,
        ttl_ms: u64,
    ) -> Result<Grant, LockError> {
        let key = self.key(namespace, name)?;
        self.limits.check_owner(owner)?;
        self.limits.check_ttl(ttl_ms)?;
        self.backend.extend(&key, owner, ttl_ms).await
    }

    /// The live holder of `name`.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<LockInfo>, LockError> {
        let key = self.key(namespace, name)?;
        self.backend.get(&key).await
    }

    /// Live locks in `namespace` whose names start with `prefix`.
    pub async fn list(&self, namespace: &str, prefix: &str) -> Result<Vec<ListedLock>, LockError> {
        self.limits.check_namespace(namespace)?;
        if prefix.len() > self.limits.max_name_bytes {
            return Err(LockError::InvalidArgument(format!(
                "prefix is {} bytes, over the limit of {} bytes",
                prefix.len(),
                self.limits.max_name_bytes
            )));
        }
        self.backend.list(namespace, prefix).await
    }

    /// Best-effort release for drop paths; see
    /// [`LockBackend::release_detached`].
    pub fn release_detached(&self, namespace: &str, name: &str, owner: &str, token: u64) {
        self.backend
            .release_detached(Key::new(namespace, name), owner.to_string(), token);
    }
}

//! [`DraApi`]: the API writes the binding cycle makes for DRA, as a small synchronous trait.
//!
//! The scheduling core is synchronous and knows no HTTP; the runtime implements this trait with
//! blocking calls on its async API writer (rate-limited like every other write), and tests use the
//! in-memory [`FakeDraApi`](super::testing::FakeDraApi). Every write is a patch or a create, never a
//! GET-modify-PUT: k8s-openapi drops fields it does not know when it re-serialises an object, and a
//! PUT would erase them.
//!
//! Optimistic concurrency: the claim writes carry the `resourceVersion` the caller based them on and
//! fail with [`DraApiError::Conflict`] (HTTP 409) when the object moved on; the caller re-reads with
//! [`DraApi::get_claim`] and retries.
//!
//! An implementation may also offer PreBind's claim reads and writes as futures
//! ([`DraApi::later`], [`DraApiLater`]): the same calls, answered without a thread waiting for
//! them, so that the common binding cycle (claims to reserve and allocate, nothing else to wait
//! for) can run on the runtime's I/O threads.

use k8s_openapi::api::resource::v1::ResourceClaim;

/// Applies a JSON merge patch (RFC 7386) to `target`: an object patch merges key by key, `null`
/// deletes, anything else replaces. What a claim's status looks like after
/// [`DraApi::patch_claim_status`], for implementations that build the result themselves.
pub fn merge_patch(target: &mut serde_json::Value, patch: &serde_json::Value) {
    use serde_json::Value;
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in fields {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Why an API call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DraApiError {
    /// HTTP 409: the `resourceVersion` precondition failed (someone else wrote first). Re-read and
    /// retry.
    #[error("conflict: {0}")]
    Conflict(String),
    /// HTTP 404: the object does not exist (any more).
    #[error("not found: {0}")]
    NotFound(String),
    /// Anything else (transport, 5xx, validation, rate limiter shut down). Not retried here: the
    /// binding cycle fails and the pod is retried after backoff.
    #[error("{0}")]
    Other(String),
}

/// A claim read or write as a future ([`DraApiLater`]).
pub type ClaimFuture<T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, DraApiError>> + Send + 'static>>;

/// PreBind's claim calls as futures that own what they need. Each has exactly the contract of the
/// [`DraApi`] method of the same name.
pub trait DraApiLater: Send + Sync {
    /// [`DraApi::get_claim`].
    fn get_claim(&self, namespace: &str, name: &str) -> ClaimFuture<Option<ResourceClaim>>;

    /// [`DraApi::patch_claim_status`].
    fn patch_claim_status(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
        status: serde_json::Value,
    ) -> ClaimFuture<ResourceClaim>;

    /// [`DraApi::add_claim_finalizer`].
    fn add_claim_finalizer(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> ClaimFuture<ResourceClaim>;
}

/// The DRA API writes of the binding cycle (and PostFilter's deallocation). See the module docs.
pub trait DraApi: Send + Sync {
    /// The same API's PreBind calls as futures, or `None` (the default) when it has none.
    fn later(&self) -> Option<std::sync::Arc<dyn DraApiLater>> {
        None
    }

    /// `GET resourceclaims/<name>`; `Ok(None)` when it does not exist.
    fn get_claim(&self, namespace: &str, name: &str) -> Result<Option<ResourceClaim>, DraApiError>;

    /// JSON merge patch of `resourceclaims/<name>/status` with the body
    /// `{"metadata":{"resourceVersion":<current's>},"status":<status>}`: fields present in
    /// `status` replace the object's (lists wholesale, `null` deletes). Returns the updated claim.
    /// `current` is the claim as the caller last saw it; a stale one gives
    /// [`DraApiError::Conflict`]. While the precondition holds, `current` is the server's object,
    /// so an implementation may check the write against it without reading the claim.
    fn patch_claim_status(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
        status: serde_json::Value,
    ) -> Result<ResourceClaim, DraApiError>;

    /// Adds the `resource.kubernetes.io/delete-protection` finalizer (JSON merge patch of
    /// `metadata.finalizers` with `current`'s `resourceVersion` as precondition). The precondition
    /// guarantees that `current`'s list is the server's when the patch applies, so the patch is
    /// that list plus ours, with no read first. Returns the updated claim.
    fn add_claim_finalizer(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> Result<ResourceClaim, DraApiError>;

    /// Removes the `resource.kubernetes.io/delete-protection` finalizer (same precondition), so a
    /// deleted claim can go away. Returns the updated claim.
    fn remove_claim_finalizer(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> Result<ResourceClaim, DraApiError>;

    /// `POST resourceclaims` (the claim may use `generateName`). Returns the created claim.
    fn create_claim(&self, namespace: &str, claim: &ResourceClaim) -> Result<ResourceClaim, DraApiError>;

    /// `DELETE resourceclaims/<name>` with a UID precondition (never deletes a recreated claim).
    /// Deleting a claim that is already gone is `Ok`.
    fn delete_claim(&self, namespace: &str, name: &str, uid: &str) -> Result<(), DraApiError>;

    /// Strategic merge patch of `pods/<name>/status` with `patch` as the body (e.g.
    /// `{"status":{"nodeAllocatableResourceClaimStatuses":[…]}}`, merged on `resourceClaimName`;
    /// `null` deletes a field).
    fn patch_pod_status(
        &self,
        namespace: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> Result<(), DraApiError>;
}

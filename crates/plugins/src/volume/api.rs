//! [`VolumeApi`]: the API writes of VolumeBinding's PreBind, as a small synchronous trait.
//!
//! Only merge patches: binding a static PV sets its `spec.claimRef`, delayed provisioning annotates
//! the claim with the selected node. The PV controller (kube-controller-manager, or the simulator's)
//! completes the binding; PreBind then waits for the watch to show it.

use serde_json::Value;

/// Why an API call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VolumeApiError {
    /// HTTP 409 after the writer's own retries.
    #[error("conflict: {0}")]
    Conflict(String),
    /// HTTP 404: the object is gone.
    #[error("not found: {0}")]
    NotFound(String),
    /// Anything else (transport, 5xx, validation, rate limiter shut down).
    #[error("{0}")]
    Other(String),
}

/// The volume API writes of the binding cycle.
pub trait VolumeApi: Send + Sync {
    /// JSON merge patch of `persistentvolumes/<name>`.
    fn patch_pv(&self, name: &str, patch: Value) -> Result<(), VolumeApiError>;

    /// JSON merge patch of `namespaces/<namespace>/persistentvolumeclaims/<name>`.
    fn patch_pvc(&self, namespace: &str, name: &str, patch: Value) -> Result<(), VolumeApiError>;
}

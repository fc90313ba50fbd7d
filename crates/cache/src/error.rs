//! The one error type of the cache.
//!
//! Messages follow upstream kube-scheduler's wording (`pod <uid>(<namespace>/<name>) …`) so that logs
//! and events read the same as users know them. Every variant except the two "corrupted" ones leaves
//! the cache exactly as it was; those two report that the cache disagreed with the API server about
//! where a pod runs, and that the cache has been brought in line with the API server. Upstream exits
//! the process in those cases; a library must not, so the caller decides (log loudly, resync, exit).

/// Why a cache operation was refused (or, for the `Corrupted*` variants, what had to be corrected).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// `assume_pod` for a UID the cache already holds, assumed or added. Nothing changed.
    #[error("pod {uid}({pod}) is in the cache, so can't be assumed")]
    AlreadyInCache {
        /// The pod UID (the cache key).
        uid: String,
        /// `namespace/name`.
        pod: String,
    },

    /// `assume_pod`, `add_pod` or `update_pod` with a pod that has no `spec.nodeName`: the cache only
    /// holds pods placed on a node. Nothing changed.
    #[error("pod {uid}({pod}) has no spec.nodeName, so it cannot be placed in the cache")]
    NoNodeName {
        /// The pod UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
    },

    /// `forget_pod` with a pod whose node differs from the one the cache holds it on. Nothing changed.
    #[error("pod {uid}({pod}) was assumed on {assumed_on} but assigned to {cached_on}")]
    AssumedOnDifferentNode {
        /// The pod UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
        /// The node of the pod passed to `forget_pod`.
        assumed_on: String,
        /// The node the cache holds the pod on.
        cached_on: String,
    },

    /// `forget_pod` for a pod that the watch already confirmed (added, not assumed). Nothing changed.
    #[error("pod {uid}({pod}) is not assumed, so it cannot be removed or forgotten")]
    NotAssumed {
        /// The pod UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
    },

    /// `add_pod` for a pod the watch already added (a duplicate add event). Nothing changed.
    #[error("pod {uid}({pod}) was already in added state")]
    AlreadyAdded {
        /// The pod UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
    },

    /// `update_pod` for a pod the cache does not hold. Nothing changed.
    #[error("pod {uid}({pod}) is not added to scheduler cache, so cannot be updated")]
    NotAdded {
        /// The pod UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
    },

    /// `update_pod` for a pod that is only assumed: an assumed pod must first be confirmed by
    /// `add_pod`. Nothing changed.
    #[error("assumed pod {uid}({pod}) should not be updated")]
    UpdateOfAssumed {
        /// The pod UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
    },

    /// `update_pod` where the old and new objects have different UIDs (different pods). Nothing
    /// changed.
    #[error("pod {pod} changed its UID from {old_uid} to {new_uid} in an update")]
    UidChanged {
        /// `namespace/name` of the new object.
        pod: String,
        /// UID of the old object.
        old_uid: String,
        /// UID of the new object.
        new_uid: String,
    },

    /// `update_pod` moved a pod to another node. `spec.nodeName` is immutable once set, so the
    /// cache was wrong; the update **was applied** (the pod now counts on `new_node` only).
    #[error(
        "pod {uid}({pod}) updated on a different node ({new_node}) than previously added to \
         ({old_node}); scheduler cache is corrupted and was corrected to follow the update"
    )]
    CorruptedUpdate {
        /// The pod UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
        /// The node the cache had the pod on.
        old_node: String,
        /// The node of the update.
        new_node: String,
    },

    /// `remove_pod` for a pod the cache does not hold. Nothing changed.
    #[error("pod {uid}({pod}) is not found in scheduler cache, so cannot be removed from it")]
    NotFound {
        /// The pod UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
    },

    /// `remove_pod` named a node other than the one the cache held the pod on. The pod is deleted
    /// either way, so it **was removed** from the cache.
    #[error(
        "pod {uid}({pod}) was deleted from node {deleted_on} but the cache had it on {cached_on}; \
         scheduler cache is corrupted, the pod was removed from {cached_on}"
    )]
    CorruptedRemove {
        /// The pod UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
        /// The node of the deleted object.
        deleted_on: String,
        /// The node the cache had the pod on.
        cached_on: String,
    },

    /// `remove_node` for a node the cache does not hold (never added, or already removed).
    /// Nothing changed.
    #[error("node {name} is not found")]
    NodeNotFound {
        /// The node name.
        name: String,
    },
}

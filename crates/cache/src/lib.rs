//! The scheduler cache: nodes and the pods on them, with assumed pods, and the incremental
//! [`Snapshot`](unisched_framework::Snapshot) each scheduling attempt works on.
//!
//! The cache is the one place where watch events (nodes and bound pods, fed by the runtime) meet the
//! scheduling cycle's own decisions (pods assumed before they are bound). It answers "what is on each
//! node right now, counting what we just decided", and it must answer that once per pod, so taking a
//! snapshot costs O(nodes changed since the previous one).
//!
//! Layout, each module opening with why it is built the way it is: `cache` ([`Cache`]: the state,
//! its operations, copy-on-write `NodeInfo`s, ghosts and placeholders), `node_tree` (zone-interleaved
//! node order), `snapshots` (recycling snapshots that binding cycles have released), `images`
//! (cluster-wide image counts for ImageLocality), `dump` (debug view), `error` ([`CacheError`]), and
//! `dra` ([`DraCache`]: slices, classes, claims with an assume layer, allocated devices, in-flight
//! allocations; a separate object with its own lock, see its documentation for why), and `volume`
//! ([`VolumeCache`]: PVs, PVCs, StorageClasses and CSINodes with an assume layer for PVs and PVCs).
#![forbid(unsafe_code)]

mod cache;
mod dra;
mod dump;
mod error;
mod images;
mod node_tree;
mod snapshots;
mod volume;

pub use cache::Cache;
pub use dra::{
    ClaimChange, ClaimObserver, ClassMap, DraCache, DraCacheError, DraSnapshot,
    EXTENDED_RESOURCE_CLAIM_ANNOTATION, IMPLICIT_EXTENDED_RESOURCE_PREFIX, InFlightAllocation,
};
pub use dump::{AssumedPodDump, CacheDump, NodeDump, NodeState};
pub use error::CacheError;
pub use node_tree::{
    LABEL_FAILURE_DOMAIN_BETA_REGION, LABEL_FAILURE_DOMAIN_BETA_ZONE, LABEL_TOPOLOGY_REGION,
    LABEL_TOPOLOGY_ZONE, zone_key,
};
pub use volume::{VolumeCache, VolumeCacheError};

//! [`CacheDump`]: what the cache holds, for debugging.
//!
//! Meant for a debug endpoint or a log line when something looks wrong (a pod that "should fit", a
//! node that never gets pods). It shares the cache's `NodeInfo`s (`Arc`s), so taking it is cheap in
//! memory, but it walks every node and pod, so it never belongs on the scheduling path.

use std::{fmt, sync::Arc};

use unisched_framework::NodeInfo;
use unisched_resource::Resource;

/// Whether a cached node exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// The node object is known; the node is in snapshots.
    Ready,
    /// The node was deleted but pods on it have not been deleted yet; not in snapshots.
    Ghost,
    /// Pods arrived for a node the cache has not seen yet; not in snapshots.
    Placeholder,
}

/// One node of a [`CacheDump`].
#[derive(Clone, Debug)]
pub struct NodeDump {
    /// The node name.
    pub name: String,
    /// Ready, ghost or placeholder.
    pub state: NodeState,
    /// The cache's `NodeInfo` (pods, requested, allocatable, images).
    pub info: Arc<NodeInfo>,
}

/// One assumed pod of a [`CacheDump`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssumedPodDump {
    /// `namespace/name`.
    pub pod: String,
    /// The UID (cache key).
    pub uid: String,
    /// The node it is assumed on.
    pub node: String,
    /// The binding request was sent.
    pub binding_finished: bool,
}

/// Everything the cache holds.
#[derive(Clone, Debug)]
pub struct CacheDump {
    /// Nodes sorted by name, ghosts and placeholders included.
    pub nodes: Vec<NodeDump>,
    /// Assumed pods sorted by `namespace/name`.
    pub assumed_pods: Vec<AssumedPodDump>,
}

struct Amounts<'a>(&'a Resource);

impl fmt::Display for Amounts<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (name, v) in self.0.iter_nonzero() {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if name == unisched_resource::CPU {
                write!(f, "{name}={v}m")?;
            } else {
                write!(f, "{name}={v}")?;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

impl fmt::Display for CacheDump {
    /// One line per node (`name [state] pods=N requested=… allocatable=…`), then one per assumed pod.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "nodes: {}", self.nodes.len())?;
        for n in &self.nodes {
            writeln!(
                f,
                "  {} [{:?}] pods={} requested={} non_zero_requested={} allocatable={}",
                n.name,
                n.state,
                n.info.pods.len(),
                Amounts(&n.info.requested),
                Amounts(&n.info.non_zero_requested),
                Amounts(&n.info.allocatable),
            )?;
        }
        writeln!(f, "assumed pods: {}", self.assumed_pods.len())?;
        for p in &self.assumed_pods {
            writeln!(
                f,
                "  {} ({}) on {}{}",
                p.pod,
                p.uid,
                p.node,
                if p.binding_finished { ", binding sent" } else { "" }
            )?;
        }
        Ok(())
    }
}

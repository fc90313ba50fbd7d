//! What the pod-group tests share: an in-memory cache of nodes, so a pod-group cycle can be run
//! and its ledger read back without the cache crate.
#![allow(dead_code)] // Each test binary uses its own part.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use parking_lot::RwLock;
use unisched_framework::{NodeInfo, PodInfo, SchedulerCache, Snapshot};
use unisched_plugins::testing::NodeBuilder;

/// Nodes by name; assumed pods are added to their node (a pod assumed twice is refused),
/// forgotten ones removed.
#[derive(Default)]
pub struct MemCache {
    pub nodes: RwLock<BTreeMap<String, NodeInfo>>,
    /// Every assume, kept or taken back: how many member placements the cycle made.
    pub assumes: AtomicUsize,
}

impl SchedulerCache for MemCache {
    fn update_snapshot(&self) -> Arc<Snapshot> {
        Arc::new(Snapshot::from_node_infos(self.nodes.read().values().cloned()))
    }
    fn assume_pod(&self, pod: Arc<PodInfo>) -> Result<(), unisched_framework::CacheWriteError> {
        self.assumes.fetch_add(1, Ordering::Relaxed);
        let node = pod.node_name().ok_or("assumed pod without a node")?.to_string();
        let mut nodes = self.nodes.write();
        let ni = nodes.get_mut(&node).ok_or_else(|| format!("no node {node}"))?;
        if ni.pod(&pod.uid).is_some() {
            return Err(format!("pod {} is already assumed", pod.uid).into());
        }
        ni.add_pod(pod);
        Ok(())
    }
    fn forget_pod(&self, pod: &PodInfo) -> Result<(), unisched_framework::CacheWriteError> {
        let node = pod.node_name().ok_or("forgotten pod without a node")?.to_string();
        let mut nodes = self.nodes.write();
        let ni = nodes.get_mut(&node).ok_or_else(|| format!("no node {node}"))?;
        ni.remove_pod(&pod.uid)
            .map(|_| ())
            .ok_or_else(|| format!("pod {} is not assumed", pod.uid).into())
    }
    fn is_assumed(&self, uid: &str) -> bool {
        self.nodes.read().values().any(|n| n.pod(uid).is_some())
    }
}

impl MemCache {
    /// Nodes `(name, cpu, rack)` with 64Gi of memory, labelled `rack` when given.
    pub fn with_nodes(nodes: &[(&str, &str, Option<&str>)]) -> Self {
        let cache = MemCache::default();
        for (name, cpu, rack) in nodes {
            let mut b = NodeBuilder::new(name).alloc("cpu", cpu).alloc("memory", "64Gi");
            if let Some(r) = rack {
                b = b.label("rack", r);
            }
            cache.nodes.write().insert((*name).to_string(), b.info());
        }
        cache
    }

    /// Pod uid → node of every pod the cache holds.
    pub fn placed(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (name, ni) in self.nodes.read().iter() {
            for p in &ni.pods {
                out.insert(p.uid.clone(), name.clone());
            }
        }
        out
    }

    /// How many assumes the cycles made so far.
    pub fn assume_count(&self) -> usize {
        self.assumes.load(Ordering::Relaxed)
    }
}

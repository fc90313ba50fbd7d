//! `Snapshot`: the immutable view of all nodes one scheduling attempt works on.
//!
//! The cache refreshes it incrementally (only nodes whose generation moved are re-cloned), so taking
//! a snapshot per attempt costs O(changed nodes), not O(cluster).

use std::{collections::HashMap, sync::Arc};

use crate::NodeInfo;

/// Nodes in a stable order, with an index by name.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    nodes: Vec<Arc<NodeInfo>>,
    /// Shared between clones: the order only changes when nodes come or go, so a clone that only
    /// [`replace`](Snapshot::replace)s entries never copies the name index.
    index: Arc<HashMap<String, usize>>,
    /// The highest node generation included.
    pub generation: u64,
}

impl Snapshot {
    /// A snapshot of the given nodes, in that order.
    pub fn new(nodes: Vec<Arc<NodeInfo>>) -> Self {
        let generation = nodes.iter().map(|n| n.generation).max().unwrap_or(0);
        let index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name().to_string(), i))
            .collect();
        Snapshot {
            nodes,
            index: Arc::new(index),
            generation,
        }
    }

    /// Convenience for tests: a snapshot from owned NodeInfos.
    pub fn from_node_infos(nodes: impl IntoIterator<Item = NodeInfo>) -> Self {
        Self::new(nodes.into_iter().map(Arc::new).collect())
    }

    /// All nodes.
    pub fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }

    /// The node called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|i| &self.nodes[*i])
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Replaces the entry for a node already in the snapshot; false when the node is not in it.
    pub fn replace(&mut self, node: Arc<NodeInfo>) -> bool {
        match self.index.get(node.name()) {
            Some(i) => {
                self.generation = self.generation.max(node.generation);
                self.nodes[*i] = node;
                true
            }
            None => false,
        }
    }

    /// Nodes that hold pods with (anti-)affinity terms.
    pub fn nodes_with_affinity_pods(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.nodes.iter().filter(|n| !n.pods_with_affinity.is_empty())
    }

    /// Nodes that hold pods with required anti-affinity terms.
    pub fn nodes_with_required_anti_affinity_pods(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.nodes
            .iter()
            .filter(|n| !n.pods_with_required_anti_affinity.is_empty())
    }
}

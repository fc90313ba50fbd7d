//! Cluster-wide image presence, for ImageLocality.
//!
//! ImageLocality scores a node by the size of the images it already has, scaled by how widely each
//! image is spread (an image on every node says little about this node). The per-node part comes from
//! `node.status.images`; the spread needs a count over all nodes, which only the cache can keep.
//!
//! A node's [`ImageStateSummary::num_nodes`] is refreshed whenever that node's entry is refreshed in
//! a snapshot, not when another node gains or loses the image: re-cloning every node that has a
//! common image each time a node joins would make node churn O(cluster). Upstream behaves the same
//! way (its snapshot clone reads the count at clone time).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Node;
use unisched_framework::ImageStateSummary;

#[derive(Debug)]
struct Entry {
    /// Size as first reported for this name.
    size: i64,
    /// How many nodes list this name.
    nodes: usize,
}

/// Image name → size and node count.
#[derive(Debug, Default)]
pub(crate) struct ImageIndex(HashMap<String, Entry>);

impl ImageIndex {
    /// Registers the images of `node` and returns its per-node summary (every name of every image;
    /// a name listed twice on one node counts once).
    pub(crate) fn add_node(&mut self, node: &Node) -> BTreeMap<String, ImageStateSummary> {
        let mut states = BTreeMap::new();
        let images = node
            .status
            .as_ref()
            .and_then(|s| s.images.as_deref())
            .unwrap_or(&[]);
        for image in images {
            let size = image.size_bytes.unwrap_or(0);
            for name in image.names.iter().flatten() {
                if states.contains_key(name) {
                    continue;
                }
                let entry = self.0.entry(name.clone()).or_insert(Entry { size, nodes: 0 });
                entry.nodes += 1;
                states.insert(
                    name.clone(),
                    ImageStateSummary {
                        size: entry.size,
                        num_nodes: entry.nodes,
                    },
                );
            }
        }
        states
    }

    /// Unregisters what [`ImageIndex::add_node`] registered for one node.
    pub(crate) fn remove_node(&mut self, states: &BTreeMap<String, ImageStateSummary>) {
        for name in states.keys() {
            if let Some(entry) = self.0.get_mut(name) {
                entry.nodes = entry.nodes.saturating_sub(1);
                if entry.nodes == 0 {
                    self.0.remove(name);
                }
            }
        }
    }

    /// True when some `num_nodes` in `states` is out of date.
    pub(crate) fn is_stale(&self, states: &BTreeMap<String, ImageStateSummary>) -> bool {
        states
            .iter()
            .any(|(name, s)| self.0.get(name).is_some_and(|e| e.nodes != s.num_nodes))
    }

    /// Brings every `num_nodes` in `states` up to date.
    pub(crate) fn refresh(&self, states: &mut BTreeMap<String, ImageStateSummary>) {
        for (name, s) in states.iter_mut() {
            if let Some(e) = self.0.get(name) {
                s.num_nodes = e.nodes;
            }
        }
    }

    /// Number of distinct image names.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerImage, NodeStatus};

    use super::*;

    fn node(images: &[(&[&str], i64)]) -> Node {
        Node {
            status: Some(NodeStatus {
                images: Some(
                    images
                        .iter()
                        .map(|(names, size)| ContainerImage {
                            names: Some(names.iter().map(|n| n.to_string()).collect()),
                            size_bytes: Some(*size),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn counts_nodes_per_name() {
        let mut idx = ImageIndex::default();
        let a = idx.add_node(&node(&[(&["nginx:1", "nginx@sha256:x"], 100), (&["nginx:1"], 7)]));
        assert_eq!(a.len(), 2, "duplicate names on one node count once");
        assert_eq!(
            a["nginx:1"],
            ImageStateSummary {
                size: 100,
                num_nodes: 1
            }
        );
        let mut b = idx.add_node(&node(&[(&["nginx:1"], 999), (&["redis"], 5)]));
        assert_eq!(
            b["nginx:1"],
            ImageStateSummary {
                size: 100,
                num_nodes: 2
            },
            "first size wins"
        );
        assert!(idx.is_stale(&a));
        let mut a2 = a.clone();
        idx.refresh(&mut a2);
        assert_eq!(a2["nginx:1"].num_nodes, 2);
        assert_eq!(a2["nginx@sha256:x"].num_nodes, 1);
        idx.remove_node(&a);
        assert_eq!(idx.len(), 2, "nginx@sha256:x is gone with its only node");
        idx.refresh(&mut b);
        assert_eq!(b["nginx:1"].num_nodes, 1);
        idx.remove_node(&b);
        assert_eq!(idx.len(), 0);
    }
}

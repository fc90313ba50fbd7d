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
    /// How many nodes hold pods with required anti-affinity terms: InterPodAffinity must look at
    /// every such node for every pod, and with none (the common case) it need not walk the nodes.
    required_anti_affinity_nodes: usize,
    /// How many nodes hold pods with any (anti-)affinity terms: InterPodAffinity's PreScore walks
    /// them for every pod, and with none it must not touch the nodes at all (a cache miss each).
    affinity_nodes: usize,
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
        let required_anti_affinity_nodes = nodes
            .iter()
            .filter(|n| !n.pods_with_required_anti_affinity.is_empty())
            .count();
        let affinity_nodes = nodes.iter().filter(|n| !n.pods_with_affinity.is_empty()).count();
        Snapshot {
            nodes,
            index: Arc::new(index),
            generation,
            required_anti_affinity_nodes,
            affinity_nodes,
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

    /// The position of the node called `name` in [`Self::nodes`].
    pub fn position(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// The nodes named in `names` that the snapshot has, in the snapshot's order. Costs
    /// O(|names| log |names|), not O(cluster): a pod-group placement names a rack of a large
    /// cluster, and each member's attempt narrows the nodes to it.
    pub fn subset<'a>(&self, names: impl IntoIterator<Item = &'a String>) -> Vec<Arc<NodeInfo>> {
        let mut positions: Vec<usize> = names.into_iter().filter_map(|n| self.position(n)).collect();
        positions.sort_unstable();
        positions.into_iter().map(|i| self.nodes[i].clone()).collect()
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
                let old = &self.nodes[*i];
                recount(
                    &mut self.required_anti_affinity_nodes,
                    !old.pods_with_required_anti_affinity.is_empty(),
                    !node.pods_with_required_anti_affinity.is_empty(),
                );
                recount(
                    &mut self.affinity_nodes,
                    !old.pods_with_affinity.is_empty(),
                    !node.pods_with_affinity.is_empty(),
                );
                self.nodes[*i] = node;
                true
            }
            None => false,
        }
    }

    /// Nodes that hold pods with (anti-)affinity terms (none walked when the count says none).
    pub fn nodes_with_affinity_pods(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        let nodes = if self.affinity_nodes == 0 {
            &[][..]
        } else {
            &self.nodes[..]
        };
        nodes.iter().filter(|n| !n.pods_with_affinity.is_empty())
    }

    /// How many nodes hold pods with required anti-affinity terms (kept up to date by `new` and
    /// `replace`, so asking costs nothing).
    pub fn required_anti_affinity_node_count(&self) -> usize {
        self.required_anti_affinity_nodes
    }

    /// Nodes that hold pods with required anti-affinity terms (none walked when the count says none).
    pub fn nodes_with_required_anti_affinity_pods(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        let nodes = if self.required_anti_affinity_nodes == 0 {
            &[][..]
        } else {
            &self.nodes[..]
        };
        nodes
            .iter()
            .filter(|n| !n.pods_with_required_anti_affinity.is_empty())
    }
}

/// Keeps a count of nodes with some property across one node's replacement.
fn recount(count: &mut usize, had: bool, has: bool) {
    match (had, has) {
        (false, true) => *count += 1,
        (true, false) => *count -= 1,
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PodInfo;
    use k8s_openapi::api::core::v1::{
        Affinity, Node, Pod, PodAffinityTerm, PodAntiAffinity, PodSpec, WeightedPodAffinityTerm,
    };

    #[test]
    fn subset_keeps_the_snapshot_order_and_skips_unknown_names() {
        let snap = Snapshot::new(["n3", "n1", "n4", "n2"].iter().map(|n| node(n, 0)).collect());
        let names: Vec<String> = ["n2", "gone", "n3", "n4"].iter().map(|s| s.to_string()).collect();
        let subset = snap.subset(names.iter());
        let got: Vec<&str> = subset.iter().map(|n| n.name()).collect();
        assert_eq!(got, ["n3", "n4", "n2"]);
        assert!(snap.subset(std::iter::empty()).is_empty());
        assert_eq!(snap.position("n4"), Some(2));
        assert_eq!(snap.position("gone"), None);
    }

    fn node(name: &str, anti_affinity_pods: usize) -> Arc<NodeInfo> {
        node_with(name, anti_affinity_pods, 0)
    }

    /// A node with `required` pods carrying a required anti-affinity term and `preferred` pods
    /// carrying only a preferred one.
    fn node_with(name: &str, required: usize, preferred: usize) -> Arc<NodeInfo> {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        let mut info = NodeInfo::new(Arc::new(n));
        let term = || PodAffinityTerm {
            topology_key: "kubernetes.io/hostname".into(),
            ..Default::default()
        };
        for i in 0..required + preferred {
            let mut p = Pod::default();
            p.metadata.name = Some(format!("{name}-{i}"));
            p.metadata.uid = Some(format!("{name}-{i}"));
            let anti = if i < required {
                PodAntiAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![term()]),
                    ..Default::default()
                }
            } else {
                PodAntiAffinity {
                    preferred_during_scheduling_ignored_during_execution: Some(vec![
                        WeightedPodAffinityTerm {
                            weight: 1,
                            pod_affinity_term: term(),
                        },
                    ]),
                    ..Default::default()
                }
            };
            p.spec = Some(PodSpec {
                affinity: Some(Affinity {
                    pod_anti_affinity: Some(anti),
                    ..Default::default()
                }),
                ..Default::default()
            });
            info.add_pod(Arc::new(PodInfo::new(p)));
        }
        Arc::new(info)
    }

    /// The walk the counts let callers skip.
    fn walked(s: &Snapshot) -> (usize, usize) {
        let affinity = s
            .nodes()
            .iter()
            .filter(|n| !n.pods_with_affinity.is_empty())
            .count();
        let required = s
            .nodes()
            .iter()
            .filter(|n| !n.pods_with_required_anti_affinity.is_empty())
            .count();
        (affinity, required)
    }

    #[test]
    fn affinity_node_walks_follow_replacements() {
        let mut s = Snapshot::new(vec![
            node_with("a", 0, 0),
            node_with("b", 0, 1),
            node_with("c", 0, 0),
        ]);
        // (replacement, nodes with affinity pods, nodes with required anti-affinity pods)
        let steps = [
            (node_with("a", 0, 2), 2, 0),
            (node_with("b", 0, 0), 1, 0),
            (node_with("a", 0, 0), 0, 0),
            (node_with("c", 1, 1), 1, 1),
            (node_with("c", 0, 0), 0, 0),
        ];
        for (n, affinity, required) in steps {
            let name = n.name().to_string();
            assert!(s.replace(n));
            let listed = (
                s.nodes_with_affinity_pods().count(),
                s.nodes_with_required_anti_affinity_pods().count(),
            );
            assert_eq!(listed, (affinity, required), "after replacing {name}");
            assert_eq!(listed, walked(&s), "after replacing {name}");
        }
    }

    #[test]
    fn required_anti_affinity_count_follows_replacements() {
        let mut s = Snapshot::new(vec![node("a", 0), node("b", 2), node("c", 0)]);
        assert_eq!(s.required_anti_affinity_node_count(), 1);
        // (replacement, expected count after it)
        let steps = [
            (node("a", 1), 2),
            (node("a", 3), 2),
            (node("b", 0), 1),
            (node("b", 0), 1),
            (node("a", 0), 0),
        ];
        for (n, want) in steps {
            let name = n.name().to_string();
            assert!(s.replace(n));
            assert_eq!(
                s.required_anti_affinity_node_count(),
                want,
                "after replacing {name}"
            );
            assert_eq!(
                s.required_anti_affinity_node_count(),
                s.nodes_with_required_anti_affinity_pods().count()
            );
        }
        assert!(!s.replace(node("unknown", 1)));
        assert_eq!(s.required_anti_affinity_node_count(), 0);
    }
}

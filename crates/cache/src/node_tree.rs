//! Zone-interleaved node order (upstream's `nodeTree`).
//!
//! The scheduling cycle filters nodes starting at a rotating index and stops once it has found
//! enough feasible ones (`percentageOfNodesToScore`). If nodes were listed zone by zone, that early
//! stop would keep placing pods in the first zone. Listing them round-robin across zones (the first
//! node of every zone, then the second of every zone, …) spreads the sample over all zones. Within a
//! zone, nodes keep the order in which they were added; zones keep the order in which they first
//! appeared.
//!
//! The tree holds only nodes that exist (not ghosts, not placeholders): it is the source of truth for
//! which nodes a snapshot lists.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;

/// `topology.kubernetes.io/region`.
pub const LABEL_TOPOLOGY_REGION: &str = "topology.kubernetes.io/region";
/// `topology.kubernetes.io/zone`.
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";
/// The deprecated region label, still read when the GA one is absent.
pub const LABEL_FAILURE_DOMAIN_BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
/// The deprecated zone label, still read when the GA one is absent.
pub const LABEL_FAILURE_DOMAIN_BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";

/// The key a node is grouped by: `region + ":\0:" + zone`, or `""` when the node has neither label.
///
/// The NUL separator keeps `("a:b", "c")` and `("a", "b:c")` apart; label values cannot contain it.
pub fn zone_key(node: &Node) -> String {
    let Some(labels) = node.metadata.labels.as_ref() else {
        return String::new();
    };
    let pick = |ga: &str, beta: &str| labels.get(ga).or_else(|| labels.get(beta)).map(String::as_str);
    let region = pick(LABEL_TOPOLOGY_REGION, LABEL_FAILURE_DOMAIN_BETA_REGION).unwrap_or("");
    let zone = pick(LABEL_TOPOLOGY_ZONE, LABEL_FAILURE_DOMAIN_BETA_ZONE).unwrap_or("");
    if region.is_empty() && zone.is_empty() {
        return String::new();
    }
    format!("{region}:\0:{zone}")
}

/// Node names grouped by zone key.
#[derive(Debug, Default)]
pub(crate) struct NodeTree {
    /// Zone keys in order of first appearance; a zone disappears when its last node goes.
    zones: Vec<String>,
    /// Node names per zone, in insertion order.
    tree: HashMap<String, Vec<String>>,
    /// The zone each node is filed under, so moves and removals need no old object.
    zone_of: HashMap<String, String>,
}

impl NodeTree {
    /// Number of nodes.
    pub(crate) fn len(&self) -> usize {
        self.zone_of.len()
    }

    /// Files `name` under `zone`, or moves it there. Returns true when the order changed.
    pub(crate) fn upsert(&mut self, name: &str, zone: String) -> bool {
        match self.zone_of.get(name) {
            Some(current) if *current == zone => false,
            Some(_) => {
                self.remove(name);
                self.insert(name, zone);
                true
            }
            None => {
                self.insert(name, zone);
                true
            }
        }
    }

    fn insert(&mut self, name: &str, zone: String) {
        match self.tree.get_mut(&zone) {
            Some(names) => names.push(name.to_string()),
            None => {
                self.zones.push(zone.clone());
                self.tree.insert(zone.clone(), vec![name.to_string()]);
            }
        }
        self.zone_of.insert(name.to_string(), zone);
    }

    /// Removes `name`. Returns false when it was not in the tree.
    pub(crate) fn remove(&mut self, name: &str) -> bool {
        let Some(zone) = self.zone_of.remove(name) else {
            return false;
        };
        if let Some(names) = self.tree.get_mut(&zone) {
            names.retain(|n| n != name);
            if names.is_empty() {
                self.tree.remove(&zone);
                self.zones.retain(|z| *z != zone);
            }
        }
        true
    }

    /// All node names, round-robin across zones.
    pub(crate) fn list(&self) -> Vec<&str> {
        let mut out = Vec::with_capacity(self.len());
        let columns: Vec<&[String]> = self
            .zones
            .iter()
            .filter_map(|z| self.tree.get(z))
            .map(Vec::as_slice)
            .collect();
        let depth = columns.iter().map(|c| c.len()).max().unwrap_or(0);
        for i in 0..depth {
            out.extend(columns.iter().filter_map(|c| c.get(i)).map(String::as_str));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn node(labels: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn zone_keys() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[], ""),
            (&[("other", "x")], ""),
            (&[(LABEL_TOPOLOGY_ZONE, "z1")], ":\0:z1"),
            (&[(LABEL_TOPOLOGY_REGION, "r1")], "r1:\0:"),
            (
                &[(LABEL_TOPOLOGY_REGION, "r1"), (LABEL_TOPOLOGY_ZONE, "z1")],
                "r1:\0:z1",
            ),
            (
                &[
                    (LABEL_FAILURE_DOMAIN_BETA_REGION, "r0"),
                    (LABEL_FAILURE_DOMAIN_BETA_ZONE, "z0"),
                ],
                "r0:\0:z0",
            ),
            (
                &[
                    (LABEL_FAILURE_DOMAIN_BETA_ZONE, "old"),
                    (LABEL_TOPOLOGY_ZONE, "new"),
                    (LABEL_TOPOLOGY_REGION, "r"),
                ],
                "r:\0:new",
            ),
        ];
        for (labels, want) in cases {
            assert_eq!(zone_key(&node(labels)), *want, "labels {labels:?}");
        }
        let unlabeled = Node {
            metadata: ObjectMeta {
                labels: None,
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(zone_key(&unlabeled), "");
    }

    fn tree(entries: &[(&str, &str)]) -> NodeTree {
        let mut t = NodeTree::default();
        for (name, zone) in entries {
            t.upsert(name, zone.to_string());
        }
        t
    }

    #[test]
    fn list_interleaves_zones() {
        let cases: &[(&[(&str, &str)], &[&str])] = &[
            (&[], &[]),
            (&[("a1", "a"), ("a2", "a"), ("a3", "a")], &["a1", "a2", "a3"]),
            (
                &[
                    ("a1", "a"),
                    ("a2", "a"),
                    ("a3", "a"),
                    ("b1", "b"),
                    ("c1", "c"),
                    ("c2", "c"),
                ],
                &["a1", "b1", "c1", "a2", "c2", "a3"],
            ),
            (
                &[("b1", "b"), ("a1", "a"), ("b2", "b"), ("a2", "a")],
                &["b1", "a1", "b2", "a2"],
            ),
        ];
        for (entries, want) in cases {
            assert_eq!(tree(entries).list(), *want, "entries {entries:?}");
        }
    }

    #[test]
    fn upsert_moves_and_remove_drops_empty_zones() {
        let mut t = tree(&[("a1", "a"), ("b1", "b"), ("a2", "a")]);
        assert!(!t.upsert("a1", "a".into()), "same zone is not a change");
        assert!(
            t.upsert("a1", "b".into()),
            "zone change moves the node to the end of its new zone"
        );
        assert_eq!(t.list(), ["a2", "b1", "a1"]);
        assert!(t.remove("a2"));
        assert!(!t.remove("a2"));
        assert_eq!(t.zones, ["b"]);
        assert_eq!(t.list(), ["b1", "a1"]);
        assert_eq!(t.len(), 2);
        assert!(t.upsert("c1", "c".into()));
        assert_eq!(t.list(), ["b1", "c1", "a1"]);
    }
}

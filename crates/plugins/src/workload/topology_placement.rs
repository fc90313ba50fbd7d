//! `TopologyPlacementGenerator`: one candidate placement per topology domain.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use unisched_framework::{
    NodeInfo, Placement, PlacementGeneratePlugin, Plugin, PodGroupInfo, PodGroupStore, Snapshot, Status,
};

use crate::names::TOPOLOGY_PLACEMENT_GENERATOR;

/// Splits the parent placement by the value of the group's topology label.
#[derive(Clone, Debug, Default)]
pub struct TopologyPlacementGenerator {
    groups: Option<Arc<PodGroupStore>>,
}

impl TopologyPlacementGenerator {
    /// The plugin over the runtime's groups (which tell where bound members already are).
    pub fn new(groups: Option<Arc<PodGroupStore>>) -> Self {
        TopologyPlacementGenerator { groups }
    }

    /// The one domain the group's bound members share, if any are bound.
    fn bound_domain(
        &self,
        group: &PodGroupInfo,
        key: &str,
        snapshot: &Snapshot,
    ) -> Result<Option<String>, Status> {
        let Some(groups) = &self.groups else {
            return Ok(None);
        };
        let mut domain: Option<String> = None;
        for node_name in groups.bound_nodes(&group.key) {
            let Some(node) = snapshot.get(&node_name) else {
                return Err(Status::error(format!(
                    "cannot determine domain for already scheduled pods: node {node_name:?} not found"
                )));
            };
            let Some(value) = label(node, key) else {
                return Err(Status::error(format!(
                    "cannot determine domain for already scheduled pods: no topology domain found for node {node_name:?}"
                )));
            };
            match &domain {
                Some(d) if d != value => {
                    return Err(Status::error(format!(
                        "cannot determine domain for already scheduled pods: more than 1 domain found for pod group: {d}, {value}"
                    )));
                }
                _ => domain = Some(value.to_string()),
            }
        }
        Ok(domain)
    }
}

impl Plugin for TopologyPlacementGenerator {
    fn name(&self) -> &str {
        TOPOLOGY_PLACEMENT_GENERATOR
    }
    unisched_framework::serves!(as_placement_generate);
}

impl PlacementGeneratePlugin for TopologyPlacementGenerator {
    /// Without a topology constraint: the parent. With one: a placement per value of the label
    /// among the parent's nodes (nodes without the label are in none), or only the domain the
    /// group's bound members are in. Placements come in domain order.
    fn generate_placements(
        &self,
        group: &PodGroupInfo,
        snapshot: &Snapshot,
        parent: &Placement,
    ) -> Result<Vec<Placement>, Status> {
        let Some(key) = &group.topology_key else {
            return Ok(vec![parent.clone()]);
        };
        let required = self.bound_domain(group, key, snapshot)?;
        let mut domains: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for node in snapshot.nodes() {
            if !parent.contains(node.name()) {
                continue;
            }
            let Some(value) = label(node, key) else {
                continue;
            };
            if required.as_deref().is_some_and(|r| r != value) {
                continue;
            }
            domains.entry(value).or_default().insert(node.name().to_string());
        }
        Ok(domains
            .into_iter()
            .map(|(domain, nodes)| Placement::of_nodes(domain, nodes))
            .collect())
    }
}

/// A node's value of a label.
fn label<'n>(node: &'n NodeInfo, key: &str) -> Option<&'n str> {
    node.node()?
        .metadata
        .labels
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

//! `TopologyPlacementGenerator`: one candidate placement per topology domain.
//!
//! A domain is a value of the group's topology key: of the node label, as upstream; or, when no
//! candidate node carries the label and DRA devices carry an attribute of that fully qualified
//! name, of the device attribute ([`DeviceDomains`], beyond upstream).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use unisched_cache::DraCache;
use unisched_framework::{
    CompositePodGroupInfo, NodeInfo, Placement, PlacementGeneratePlugin, Plugin, PodGroupInfo, PodGroupStore,
    Snapshot, Status,
};

use super::device_domains::DeviceDomains;
use crate::names::TOPOLOGY_PLACEMENT_GENERATOR;

/// Splits the parent placement by the value of the group's topology label.
#[derive(Clone, Default)]
pub struct TopologyPlacementGenerator {
    groups: Option<Arc<PodGroupStore>>,
    devices: Option<Arc<DraCache>>,
}

impl std::fmt::Debug for TopologyPlacementGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopologyPlacementGenerator")
            .field("groups", &self.groups.is_some())
            .field("devices", &self.devices.is_some())
            .finish()
    }
}

/// How a node's domain is read.
enum DomainSource {
    Label,
    Device(DeviceDomains),
}

impl DomainSource {
    fn value<'n>(&'n self, node: &'n NodeInfo, key: &str) -> Option<&'n str> {
        match self {
            DomainSource::Label => label(node, key),
            DomainSource::Device(domains) => domains.value(node.name()),
        }
    }
}

impl TopologyPlacementGenerator {
    /// The plugin over the runtime's groups (which tell where bound members already are).
    pub fn new(groups: Option<Arc<PodGroupStore>>) -> Self {
        TopologyPlacementGenerator {
            groups,
            devices: None,
        }
    }

    /// Also reads topology keys that name a DRA device attribute, from this DRA state.
    #[must_use]
    pub fn with_devices(mut self, dra: Option<Arc<DraCache>>) -> Self {
        self.devices = dra;
        self
    }

    /// The label when a node of the parent placement carries it (upstream); else the device
    /// attribute when a device carries it; else the label (no node has it: no placement).
    fn source(&self, key: &str, snapshot: &Snapshot, parent: &Placement) -> DomainSource {
        let labelled = snapshot
            .nodes()
            .iter()
            .any(|n| parent.contains(n.name()) && label(n, key).is_some());
        if labelled {
            return DomainSource::Label;
        }
        match &self.devices {
            Some(dra) => {
                let domains = DeviceDomains::of(dra, key);
                if domains.is_empty() {
                    DomainSource::Label
                } else {
                    DomainSource::Device(domains)
                }
            }
            None => DomainSource::Label,
        }
    }

    /// The one domain the group's bound members share, if any are bound.
    fn bound_domain(
        &self,
        bound_nodes: &[String],
        key: &str,
        source: &DomainSource,
        snapshot: &Snapshot,
    ) -> Result<Option<String>, Status> {
        let mut domain: Option<String> = None;
        for node_name in bound_nodes {
            let Some(node) = snapshot.get(node_name) else {
                return Err(Status::error(format!(
                    "cannot determine domain for already scheduled pods: node {node_name:?} not found"
                )));
            };
            let Some(value) = source.value(node, key) else {
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
    /// Without a topology constraint: the parent. With one: a placement per value of the key
    /// (label or device attribute, see the module documentation) among the parent's nodes (nodes
    /// without a value are in none), or only the domain the group's bound members are in.
    /// Placements come in domain order.
    fn generate_placements(
        &self,
        group: &PodGroupInfo,
        snapshot: &Snapshot,
        parent: &Placement,
    ) -> Result<Vec<Placement>, Status> {
        let Some(key) = &group.topology_key else {
            return Ok(vec![parent.clone()]);
        };
        let bound = self
            .groups
            .as_ref()
            .map(|g| g.bound_nodes(&group.key))
            .unwrap_or_default();
        self.domains(key, &bound, snapshot, parent)
    }

    /// The same for a composite: its subtree shares one domain, the one its bound pods (of any
    /// PodGroup under it) are in, if any are bound.
    fn generate_composite_placements(
        &self,
        composite: &CompositePodGroupInfo,
        snapshot: &Snapshot,
        parent: &Placement,
    ) -> Result<Vec<Placement>, Status> {
        let Some(key) = &composite.topology_key else {
            return Ok(vec![parent.clone()]);
        };
        let bound = self
            .groups
            .as_ref()
            .map(|g| g.subtree_bound_nodes(&composite.key))
            .unwrap_or_default();
        self.domains(key, &bound, snapshot, parent)
    }
}

impl TopologyPlacementGenerator {
    /// A placement per value of `key` among the parent's nodes (only the bound pods' one when
    /// some are bound), in domain order.
    fn domains(
        &self,
        key: &str,
        bound: &[String],
        snapshot: &Snapshot,
        parent: &Placement,
    ) -> Result<Vec<Placement>, Status> {
        let source = self.source(key, snapshot, parent);
        let required = self.bound_domain(bound, key, &source, snapshot)?;
        let mut domains: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for node in snapshot.nodes() {
            if !parent.contains(node.name()) {
                continue;
            }
            let Some(value) = source.value(node, key) else {
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

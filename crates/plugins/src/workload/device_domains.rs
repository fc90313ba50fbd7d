//! Topology domains from a DRA device attribute: beyond upstream, a PodGroup's topology key may
//! name a device attribute instead of a node label.
//!
//! Multi-node NVLink training needs every member's GPUs in one NVLink clique (one IMEX domain), and
//! the clique is a property of the devices, published by the DRA driver as a device attribute
//! (`gpu.nvidia.com/cliqueId`, say), not a node label. So when no node of the candidate placement
//! carries the key as a label, [`DeviceDomains`] reads the key as the fully qualified name of a
//! device attribute (`<domain>/<name>`; an attribute published without a domain is qualified by its
//! driver's name) and gives every node the value its devices share.
//!
//! A node belongs to a domain only when all of its node-local devices (slices with `nodeName`)
//! that carry the attribute carry the same value: a member placed there can only be given devices
//! of that value, whichever the allocator picks. A node whose devices carry several values belongs
//! to no domain (unisched cannot yet pin one claim's devices to a value chosen for the whole
//! group), and network-attached devices (slices with a node selector) define no domain.

use std::collections::BTreeMap;

use unisched_cache::DraCache;
use unisched_dra::split_qualified_name;

/// Each node's value of a device attribute.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct DeviceDomains {
    /// Node → the value all its devices share, or `None` when they disagree.
    by_node: BTreeMap<String, Option<String>>,
}

impl DeviceDomains {
    /// The attribute `key` (fully qualified) of every node-local device in the DRA state.
    pub fn of(dra: &DraCache, key: &str) -> Self {
        let mut by_node: BTreeMap<String, Option<String>> = BTreeMap::new();
        let snapshot = dra.snapshot();
        for slice in snapshot.index().slices() {
            let spec = &slice.slice().spec;
            let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) else {
                continue;
            };
            for maps in slice.all_device_maps().iter() {
                for (name, attr) in maps.attributes() {
                    let (domain, id) = split_qualified_name(name, &spec.driver);
                    if !qualified_is(key, domain, id) {
                        continue;
                    }
                    let Some(value) = attribute_text(attr) else {
                        continue;
                    };
                    by_node
                        .entry(node.to_string())
                        .and_modify(|v| {
                            if v.as_deref() != Some(value.as_str()) {
                                *v = None;
                            }
                        })
                        .or_insert(Some(value));
                }
            }
        }
        DeviceDomains { by_node }
    }

    /// Whether any device carries the attribute.
    pub fn is_empty(&self) -> bool {
        self.by_node.is_empty()
    }

    /// The node's domain: the value its devices share.
    pub fn value(&self, node: &str) -> Option<&str> {
        self.by_node.get(node)?.as_deref()
    }
}

/// Whether `<domain>/<id>` is `key`.
fn qualified_is(key: &str, domain: &str, id: &str) -> bool {
    key.len() == domain.len() + 1 + id.len()
        && key.starts_with(domain)
        && key.as_bytes()[domain.len()] == b'/'
        && key.ends_with(id)
}

/// A scalar attribute as the text a label value would be (list attributes define no domain).
fn attribute_text(attr: &k8s_openapi::api::resource::v1::DeviceAttribute) -> Option<String> {
    if let Some(s) = &attr.string {
        return Some(s.clone());
    }
    if let Some(i) = attr.int {
        return Some(i.to_string());
    }
    if let Some(b) = attr.bool {
        return Some(b.to_string());
    }
    attr.version.clone()
}

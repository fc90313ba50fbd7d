//! Turning the search's picks into the `AllocationResult` the API expects.
//!
//! One device result per pick (with admin access, tolerations, binding conditions, share ids
//! and consumed capacity where they apply), the class and claim configuration that applies to
//! the chosen requests, and the node selector that pins the allocation to where its devices are
//! reachable. Share ids are derived from the claim, request, device and position instead of
//! being random, so the same allocation always yields the same result.

use k8s_openapi::api::core::v1::{Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationConfiguration, DeviceAllocationResult, DeviceRequestAllocationResult,
};

use super::Allocator;
use super::gathering::GatheredInventory;
use super::search::Pick;
use crate::claims::PreparedClaim;
use crate::error::{AllocationError, FatalError};

/// FNV-1a over several byte strings with a separator.
pub(super) fn fnv1a(seed: u64, parts: &[&[u8]]) -> u64 {
    let mut h = seed;
    for p in parts {
        for b in p.iter().chain(std::iter::once(&0xffu8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// A deterministic, UUID-shaped share id.
pub(super) fn share_id(claim: &str, request: &str, device: &str, position: usize) -> String {
    let pos = position.to_le_bytes();
    let parts: [&[u8]; 4] = [claim.as_bytes(), request.as_bytes(), device.as_bytes(), &pos];
    let hi = fnv1a(0xcbf2_9ce4_8422_2325, &parts);
    let lo = fnv1a(0x8422_2325_cbf2_9ce4, &parts);
    let v = (u128::from(hi) << 64) | u128::from(lo);
    // Version 8 (custom), variant 10.
    let v = (v & !(0xf_u128 << 76)) | (0x8_u128 << 76);
    let v = (v & !(0x3_u128 << 62)) | (0x2_u128 << 62);
    let s = format!("{v:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &s[0..8],
        &s[8..12],
        &s[12..16],
        &s[16..20],
        &s[20..32]
    )
}

impl Allocator {
    pub(super) fn build_result(
        &self,
        claim: &PreparedClaim,
        picks: &[Pick],
        g: &GatheredInventory<'_>,
        node: &Node,
    ) -> Result<AllocationResult, AllocationError> {
        let uid_or_key = claim
            .claim()
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| claim.key().to_string());
        let mut results = Vec::with_capacity(picks.len());
        let mut chosen: Vec<Option<usize>> = vec![None; claim.requests().len()];
        for (position, p) in picks.iter().enumerate() {
            let alt = &claim.requests()[p.request].alternatives[p.alternative];
            chosen[p.request].get_or_insert(p.alternative);
            let d = g.devices[p.device as usize];
            let dev = d.prepared();
            let api = d.slice.api_device(d.index_in_slice as usize);
            let mut r = DeviceRequestAllocationResult {
                request: alt.full_name.clone(),
                driver: dev.id.driver.to_string(),
                pool: dev.id.pool.to_string(),
                device: dev.id.device.to_string(),
                admin_access: alt.admin_access.then_some(true),
                tolerations: (!alt.tolerations.is_empty()).then(|| alt.tolerations.clone()),
                skip_node_operations: d.slice.slice().spec.skip_node_operations.clone(),
                ..Default::default()
            };
            if self.features.binding_conditions
                && let Some(api) = api
            {
                r.binding_conditions = api.binding_conditions.clone().filter(|v| !v.is_empty());
                r.binding_failure_conditions =
                    api.binding_failure_conditions.clone().filter(|v| !v.is_empty());
            }
            if p.multi {
                r.share_id = Some(share_id(
                    &uid_or_key,
                    &alt.full_name,
                    &dev.id.to_string(),
                    position,
                ));
                if let Some(consumed) = &p.consumed
                    && !dev.capacities.is_empty()
                {
                    r.consumed_capacity = Some(
                        dev.capacities
                            .iter()
                            .zip(consumed.iter())
                            .map(|(c, q)| (c.name.clone(), q.to_api()))
                            .collect(),
                    );
                }
            }
            results.push(r);
        }

        // Configuration: class configs first (each class once), then claim configs.
        let mut config: Vec<DeviceAllocationConfiguration> = Vec::new();
        let mut class_ranges: Vec<(String, usize, usize)> = Vec::new();
        let chosen_alt = |ri: usize| chosen[ri].map(|ai| &claim.requests()[ri].alternatives[ai]);
        for ri in 0..claim.requests().len() {
            let Some(alt) = chosen_alt(ri) else { continue };
            let class_name = alt.class.metadata.name.clone().unwrap_or_default();
            if let Some((_, start, end)) = class_ranges.iter().find(|(n, _, _)| *n == class_name) {
                for c in &mut config[*start..*end] {
                    c.requests
                        .get_or_insert_with(Vec::new)
                        .push(alt.full_name.clone());
                }
                continue;
            }
            let start = config.len();
            for c in alt
                .class
                .spec
                .as_ref()
                .and_then(|s| s.config.as_ref())
                .into_iter()
                .flatten()
            {
                config.push(DeviceAllocationConfiguration {
                    opaque: c.opaque.clone(),
                    requests: Some(vec![alt.full_name.clone()]),
                    source: "FromClass".to_string(),
                });
            }
            class_ranges.push((class_name, start, config.len()));
        }
        let claim_config = claim
            .claim()
            .spec
            .as_ref()
            .and_then(|s| s.devices.as_ref())
            .and_then(|d| d.config.as_ref());
        for c in claim_config.into_iter().flatten() {
            let requests = c.requests.as_deref().unwrap_or_default();
            let applies = requests.is_empty()
                || (0..claim.requests().len()).any(|ri| {
                    requests.contains(&claim.requests()[ri].name)
                        || chosen_alt(ri)
                            .is_some_and(|a| a.subrequest.is_some() && requests.contains(&a.full_name))
                });
            if applies {
                config.push(DeviceAllocationConfiguration {
                    opaque: c.opaque.clone(),
                    requests: (!requests.is_empty()).then(|| requests.to_vec()),
                    source: "FromClaim".to_string(),
                });
            }
        }
        for c in &mut config {
            let Some(requests) = &c.requests else { continue };
            let all = (0..claim.requests().len()).all(|ri| {
                requests.contains(&claim.requests()[ri].name)
                    || chosen_alt(ri)
                        .is_some_and(|a| a.subrequest.is_some() && requests.contains(&a.full_name))
            });
            if all {
                c.requests = None;
            }
        }

        let node_selector = self.node_selector(claim, picks, g, node)?;
        Ok(AllocationResult {
            allocation_timestamp: None,
            devices: Some(DeviceAllocationResult {
                results: Some(results),
                config: (!config.is_empty()).then_some(config),
            }),
            node_selector,
        })
    }

    pub(super) fn node_selector(
        &self,
        claim: &PreparedClaim,
        picks: &[Pick],
        g: &GatheredInventory<'_>,
        node: &Node,
    ) -> Result<Option<NodeSelector>, AllocationError> {
        let mut fields: Vec<NodeSelectorRequirement> = Vec::new();
        let mut exprs: Vec<NodeSelectorRequirement> = Vec::new();
        for p in picks {
            let d = g.devices[p.device as usize];
            let spec = &d.slice.slice().spec;
            let api = d.slice.api_device(d.index_in_slice as usize);
            let (node_name, selector) = if d.slice.per_device_node_selection() {
                (
                    api.and_then(|a| a.node_name.as_ref()),
                    api.and_then(|a| a.node_selector.as_ref()),
                )
            } else {
                (spec.node_name.as_ref(), spec.node_selector.as_ref())
            };
            let binds = api.and_then(|a| a.binds_to_node).unwrap_or(false);
            if node_name.is_some_and(|n| !n.is_empty()) || binds {
                return Ok(Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_fields: Some(vec![NodeSelectorRequirement {
                            key: "metadata.name".to_string(),
                            operator: "In".to_string(),
                            values: Some(vec![node.metadata.name.clone().unwrap_or_default()]),
                        }]),
                        match_expressions: None,
                    }],
                }));
            }
            if let Some(sel) = selector {
                match sel.node_selector_terms.as_slice() {
                    [] => {}
                    [term] => {
                        add_requirements(term.match_fields.as_deref().unwrap_or_default(), &mut fields);
                        add_requirements(term.match_expressions.as_deref().unwrap_or_default(), &mut exprs);
                    }
                    terms => {
                        return Err(FatalError::InvalidRequest {
                            claim: claim.key().to_string(),
                            request: String::new(),
                            message: format!(
                                "create NodeSelector: unsupported ResourceSlice.NodeSelector with {} terms",
                                terms.len()
                            ),
                        }
                        .into());
                    }
                }
            }
        }
        if fields.is_empty() && exprs.is_empty() {
            return Ok(None);
        }
        Ok(Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: (!exprs.is_empty()).then_some(exprs),
                match_fields: (!fields.is_empty()).then_some(fields),
            }],
        }))
    }
}

pub(super) fn same_requirement(a: &NodeSelectorRequirement, b: &NodeSelectorRequirement) -> bool {
    if a.key != b.key || a.operator != b.operator {
        return false;
    }
    let mut x: Vec<&String> = a.values.iter().flatten().collect();
    let mut y: Vec<&String> = b.values.iter().flatten().collect();
    x.sort();
    x.dedup();
    y.sort();
    y.dedup();
    x == y
}

pub(super) fn add_requirements(from: &[NodeSelectorRequirement], to: &mut Vec<NodeSelectorRequirement>) {
    for r in from {
        if !to.iter().any(|t| same_requirement(t, r)) {
            to.push(r.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_ids_are_uuid_shaped_and_deterministic() {
        let a = share_id("uid-1", "req", "d/p/dev", 0);
        assert_eq!(a, share_id("uid-1", "req", "d/p/dev", 0));
        assert_ne!(a, share_id("uid-1", "req", "d/p/dev", 1));
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "8");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
    }
}

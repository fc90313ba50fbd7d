//! The per-node summary in front of the three phases.
//!
//! For the common claim shapes (one request for an exact count of plain devices, optionally with
//! one `matchAttribute` constraint) the free matching devices of a node decide the outcome, so
//! Filter can count them from per-slice caches instead of gathering, searching and building
//! results. Anything the counting cannot decide is left to the full allocator.

use k8s_openapi::api::core::v1::Node;

use super::Allocator;
use super::constraints::{ScalarAttribute, device_attribute, scalar_attribute};
use super::gathering::GatheredDevice;
use crate::cel::SelectorId;
use crate::claims::{AllocationMode, PreparedAlternative, PreparedClaim};
use crate::pools::{AttributeGroups, DraSnapshotIndex, PreparedSlice, Selection};
use crate::state::PoolExclusive;

/// What the per-node summary ([`Allocator::summarize`]) concludes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeSummary {
    /// The claims certainly allocate on the node (the allocation itself is still to be made).
    Fits,
    /// The claims certainly do not: the allocator would report them unschedulable on the node.
    Short {
        /// How many matching devices are free on the node (fewer than the request needs). Only
        /// a device being freed or the node's slices changing can raise it.
        free: usize,
    },
    /// The summary cannot tell; only the full allocator can.
    Undecided,
}

/// The claim shape the device summary decides ([`Allocator::summarize`]): one request with one
/// alternative for an exact count, no constraints, subrequests, admin access or capacity. Returns
/// that alternative and the count. For such a claim the free matching devices of a node decide
/// everything, so a node with fewer of them than the count rejects it whatever else holds.
pub fn summary_shape(claim: &PreparedClaim) -> Option<(&PreparedAlternative, usize)> {
    if !claim.constraints().is_empty() {
        return None;
    }
    single_exact_request(claim).map(|(_, alt, needed)| (alt, needed))
}

/// The request part of both shapes the summary decides: one request, with one alternative, asking
/// for an exact count, without subrequests, admin access or capacity. Returns the request's name,
/// the alternative and the count.
pub(super) fn single_exact_request(claim: &PreparedClaim) -> Option<(&str, &PreparedAlternative, usize)> {
    let [request] = claim.requests() else {
        return None;
    };
    let [alt] = request.alternatives.as_slice() else {
        return None;
    };
    let AllocationMode::ExactCount(needed) = alt.mode else {
        return None;
    };
    if request.has_subrequests || alt.admin_access || !alt.capacity.is_empty() {
        return None;
    }
    Some((request.name.as_str(), alt, needed))
}

/// The other claim shape the device summary decides: the summary's shape ([`summary_shape`])
/// plus exactly one `matchAttribute` constraint over that one request. Returns the alternative,
/// the count and the attribute. A set of devices satisfies it exactly when they all have the
/// attribute with one value (for scalar values), so the free matching devices grouped by value
/// decide it: some group must hold the count.
pub(super) fn match_attribute_shape(claim: &PreparedClaim) -> Option<(&PreparedAlternative, usize, &str)> {
    let [constraint] = claim.constraints() else {
        return None;
    };
    let (request, alt, needed) = single_exact_request(claim)?;
    if constraint.distinct || !(constraint.requests.is_empty() || constraint.requests == [request]) {
        return None;
    }
    Some((alt, needed, &constraint.attribute))
}

impl Allocator {
    /// The per-node summary: whether `claims` certainly allocate on `node`, decided by counting
    /// free matching devices instead of gathering, searching and building results.
    /// `true` exactly when [`Self::summarize`] says [`NodeSummary::Fits`].
    pub fn fits_without_search(&self, node: &Node, claims: &[&PreparedClaim]) -> bool {
        self.summarize(node, claims) == NodeSummary::Fits
    }

    /// The per-node summary: what [`Self::allocate_claims`] would decide for `claims` on `node`,
    /// found by counting free matching devices instead of gathering, searching and building
    /// results.
    ///
    /// Decided only for the simple shape (one claim, one request, an exact count, no
    /// constraints, subrequests, admin access or capacity) on a node whose relevant devices are
    /// all plain (node-local slices; no shared counters, binding conditions, multi-allocation,
    /// taints or node-allocatable resources). There the search takes the first free matching
    /// devices, so it succeeds exactly when at least the requested number are free:
    /// [`NodeSummary::Fits`] when they are, [`NodeSummary::Short`] with the exact free count (the allocator would return
    /// [`AllocationError::Unschedulable`]) when they are not. Anything else is
    /// [`NodeSummary::Undecided`]: run the full allocator.
    ///
    /// Per relevant slice this costs a flag test ([`PreparedSlice::all_plain`]), one lookup of the
    /// slice's matching devices for the alternative's selector list (computed on first use with
    /// the per-device match cache, then kept in the prepared slice for every pod and node), and,
    /// only while too few free devices have been counted, one lookup of the pool per state layer;
    /// only when the layers' in-use devices of the pool could leave too few matching devices free
    /// does it look up each matching device's name in the layers that use the pool. The
    /// selectors are evaluated for every device of every relevant slice, in device order, so a
    /// CEL error anywhere makes this `Undecided` and the full allocator reports it; a list for
    /// which some device fails is not cached (the next call evaluates again, up to the failure).
    /// For a `matchAttribute` claim the slice also keeps its matching devices grouped by the
    /// attribute's value, and the free devices are counted per group the same way.
    pub fn summarize(&self, node: &Node, claims: &[&PreparedClaim]) -> NodeSummary {
        let slot = self
            .index
            .node_slot(node.metadata.name.as_deref().unwrap_or_default());
        self.summarize_in_slot(slot, claims)
    }

    /// [`Self::summarize`] for the node in `slot` of this allocator's index
    /// ([`DraSnapshotIndex::node_slot`] of its name), for a caller that already knows it, e.g.
    /// remembered per node for the index's [`DraSnapshotIndex::id`]: the name look-up is skipped.
    /// (The summary reads only the node's own slices; it decides nothing when slices not bound
    /// to one node exist.)
    pub fn summarize_in_slot(&self, slot: Option<u32>, claims: &[&PreparedClaim]) -> NodeSummary {
        let [claim] = claims else {
            return NodeSummary::Undecided;
        };
        let (alt, needed, match_attribute) = match summary_shape(claim) {
            Some((alt, needed)) => (alt, needed, None),
            None => match match_attribute_shape(claim) {
                Some((alt, needed, attribute)) => (alt, needed, Some(attribute)),
                None => return NodeSummary::Undecided,
            },
        };
        // For a `matchAttribute` claim: free matching devices per value of the attribute.
        let mut groups: Vec<(ScalarAttribute<'_>, usize)> = Vec::new();
        let f = &self.features;
        let index: &DraSnapshotIndex = &self.index;
        let mut free = 0usize;
        // A slice not bound to one node by name (all nodes, a selector, per-device selection) is
        // the search's to judge.
        if index.has_node_independent_slices() {
            return NodeSummary::Undecided;
        }
        // The node's own slices name it, newest generation only: no name to compare.
        for &si in index.own_slices_at(slot) {
            let slice = index.slice_at(si);
            if slice.has_shared_counters() {
                return NodeSummary::Undecided;
            }
            // Incomplete and invalid pools: set aside by `gather`.
            let Some((pool, pos)) = index.slice_position(si) else {
                continue;
            };
            let rec = index.pool_at(pool);
            if !rec.complete || rec.invalid.is_some() {
                continue;
            }
            if !slice.all_plain(f.device_taints, f.consumable_capacity) {
                return NodeSummary::Undecided;
            }
            if alt
                .required_driver
                .as_deref()
                .is_some_and(|d| d != slice.driver())
            {
                continue;
            }
            let Selection::Devices(matching) = self.selection(claim, alt, slice, pos, &alt.selection_key)
            else {
                return NodeSummary::Undecided;
            };
            match match_attribute {
                None => {
                    if free < needed {
                        free += self.free_among(slice, &matching, needed - free);
                    }
                }
                Some(attribute) => {
                    let AttributeGroups::Groups(here) =
                        self.attribute_groups(slice, &matching, &alt.selection_key, attribute)
                    else {
                        // A list value matches by intersection: left to the search.
                        return NodeSummary::Undecided;
                    };
                    for members in here.iter() {
                        let free_here = self.free_among(slice, members, members.len());
                        let value = device_attribute(slice, members[0], attribute)
                            .and_then(|a| scalar_attribute(a, f.list_type_attributes).ok().flatten());
                        let Some(value) = value.filter(|_| free_here > 0) else {
                            continue;
                        };
                        match groups.iter_mut().find(|(v, _)| *v == value) {
                            Some((_, n)) => *n += free_here,
                            None => groups.push((value, free_here)),
                        }
                    }
                }
            }
        }
        if match_attribute.is_some() {
            // Devices of equal value can always be picked together; devices of different
            // values never can.
            free = groups.iter().map(|(_, n)| *n).max().unwrap_or(0);
        }
        if free >= needed {
            NodeSummary::Fits
        } else {
            NodeSummary::Short { free }
        }
    }

    /// The devices of `slice` that pass the alternative's class and request selectors (`key`
    /// names them), from the slice's cache or evaluated now (and then cached, unless some device
    /// failed).
    pub(super) fn selection(
        &self,
        claim: &PreparedClaim,
        alt: &PreparedAlternative,
        slice: &PreparedSlice,
        slice_pos: u32,
        key: &[SelectorId],
    ) -> Selection {
        if let Some(hit) = slice.cached_selection(key) {
            return hit;
        }
        let mut matching = Vec::new();
        for di in 0..slice.devices().len() {
            let d = GatheredDevice {
                slice,
                slice_position: slice_pos,
                index_in_slice: di as u32,
                gathered_pool: 0,
            };
            match self.selectors_reject(claim, &alt.class_selectors, &d, None) {
                Err(_) => return Selection::Errored,
                Ok(Some(_)) => continue,
                Ok(None) => {}
            }
            match self.selectors_reject(claim, &alt.selectors, &d, None) {
                Err(_) => return Selection::Errored,
                Ok(Some(_)) => continue,
                Ok(None) => matching.push(di as u32),
            }
        }
        let selection = Selection::Devices(matching.into());
        slice.store_selection(key, selection.clone());
        selection
    }

    /// `matching` (the devices of `slice` passing the selector list `key`) grouped by the scalar
    /// value of `attribute`, from the slice's cache or worked out now and cached.
    pub(super) fn attribute_groups(
        &self,
        slice: &PreparedSlice,
        matching: &[u32],
        key: &[SelectorId],
        attribute: &str,
    ) -> AttributeGroups {
        let list_mode = self.features.list_type_attributes;
        if let Some(hit) = slice.cached_attribute_groups(key, attribute, list_mode) {
            return hit;
        }
        let mut groups: Vec<(ScalarAttribute<'_>, Vec<u32>)> = Vec::new();
        let mut lists = false;
        for &di in matching {
            // A device without the attribute cannot join the match.
            let value = match device_attribute(slice, di, attribute).map(|a| scalar_attribute(a, list_mode)) {
                None | Some(Ok(None)) => continue,
                Some(Err(())) => {
                    lists = true;
                    break;
                }
                Some(Ok(Some(v))) => v,
            };
            match groups.iter_mut().find(|(v, _)| *v == value) {
                Some((_, members)) => members.push(di),
                None => groups.push((value, vec![di])),
            }
        }
        let grouped = if lists {
            AttributeGroups::Lists
        } else {
            AttributeGroups::Groups(groups.into_iter().map(|(_, m)| m.into_boxed_slice()).collect())
        };
        slice.store_attribute_groups(key, attribute, list_mode, grouped.clone());
        grouped
    }

    /// How many of the devices `matching` (indices into `slice`) no state layer allocates
    /// exclusively; or, when that is certainly at least `wanted` because the layers together
    /// allocate few enough devices of the pool, a lower bound that is at least `wanted`.
    pub(super) fn free_among(&self, slice: &PreparedSlice, matching: &[u32], wanted: usize) -> usize {
        const MAX_LAYERS: usize = 4;
        let mut in_use: [Option<&PoolExclusive>; MAX_LAYERS] = [None; MAX_LAYERS];
        let mut n = 0;
        for layer in self.state.layers() {
            let Some(pool) = layer.pool_exclusive(slice.pool()) else {
                continue;
            };
            if n == MAX_LAYERS {
                let devices = slice.devices();
                return matching
                    .iter()
                    .filter(|&&di| !self.state.is_exclusively_allocated(&devices[di as usize].id))
                    .count();
            }
            in_use[n] = Some(pool);
            n += 1;
        }
        if n == 0 {
            return matching.len();
        }
        // At most this many of the matching devices are in use (fewer if some in-use devices
        // are not among them, or are in use in several layers).
        let in_use_at_most: usize = in_use[..n].iter().flatten().map(|p| p.len()).sum();
        let at_least = matching.len().saturating_sub(in_use_at_most);
        if at_least >= wanted {
            return at_least;
        }
        let devices = slice.devices();
        matching
            .iter()
            .filter(|&&di| {
                let name: &str = &devices[di as usize].id.device;
                !in_use[..n].iter().flatten().any(|p| p.contains_key(name))
            })
            .count()
    }
}

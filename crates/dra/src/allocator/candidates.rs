//! Phase 2, candidates: which gathered devices can serve one request alternative on their own.
//!
//! A device passes class selectors, request selectors (answers cached per selector and device;
//! a driver named by a selector skips CEL for other drivers), per-device node selection, the
//! capacity policy and free capacity, is not in use by another claim (unless `adminAccess`), has
//! no untolerated taint and leaves its pool's counters non-negative. Counting how many devices
//! survive each stage gives the precise reason when too few are left, before any search.

use std::sync::Arc;
use std::sync::atomic::Ordering as AtomicOrdering;
use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use unisched_resource::Quantity;

use super::Allocator;
use super::gathering::{GatheredDevice, GatheredInventory, GatheredPool};
use crate::capacity::{consumed_capacity, fits};
use crate::cel::{EvalErrorKind, SelectorInput};
use crate::claims::{
    ALLOCATION_RESULTS_MAX_SIZE, AllocationMode, PreparedAlternative, PreparedClaim, PreparedSelector,
};
use crate::error::{AllocationError, FatalError, UnschedulableReason};
use crate::state::LayeredCapacity;
use crate::taints::untolerated_taint;

/// A device that can serve a request alternative on its own.
#[derive(Clone)]
pub(super) struct Candidate {
    /// Index into the gathered devices.
    pub(super) device: u32,
    /// Consumed capacity (aligned with the device's capacities) when consumable capacity is on.
    pub(super) consumed: Option<Arc<[Quantity]>>,
}

/// Candidates of one alternative, or why it cannot be satisfied on this node.
pub(super) struct AlternativeCandidates {
    pub(super) candidates: Vec<Candidate>,
    pub(super) failure: Option<UnschedulableReason>,
}

impl Allocator {
    /// Phase 2 for every alternative of every request of `claims`: per claim, per request, per
    /// alternative.
    pub(super) fn all_candidates(
        &self,
        claims: &[&PreparedClaim],
        node: &Node,
        gathered: &GatheredInventory<'_>,
        deadline: Option<Instant>,
    ) -> Result<Vec<Vec<Vec<AlternativeCandidates>>>, AllocationError> {
        let mut per_claim = Vec::with_capacity(claims.len());
        for claim in claims {
            let mut per_request = Vec::with_capacity(claim.requests().len());
            for request in claim.requests() {
                let mut per_alternative = Vec::with_capacity(request.alternatives.len());
                for alt in &request.alternatives {
                    per_alternative.push(self.candidates(claim, alt, node, gathered, deadline)?);
                }
                per_request.push(per_alternative);
            }
            per_claim.push(per_request);
        }
        Ok(per_claim)
    }

    /// A request none of whose alternatives can be served alone fails right away, before any
    /// search: the reason of its first alternative.
    pub(super) fn first_unservable_request(
        &self,
        claims: &[&PreparedClaim],
        gathered: &GatheredInventory<'_>,
        alternative_candidates: &[Vec<Vec<AlternativeCandidates>>],
    ) -> Option<AllocationError> {
        for (ci, claim) in claims.iter().enumerate() {
            for (ri, request) in claim.requests().iter().enumerate() {
                let data = &alternative_candidates[ci][ri];
                if data.iter().all(|a| a.failure.is_some()) {
                    let reason = data
                        .first()
                        .and_then(|a| a.failure.clone())
                        .unwrap_or(UnschedulableReason::NoDevices);
                    let request_name = request.alternatives.first().map(|a| a.full_name.clone());
                    return Some(self.unschedulable(gathered, claim.key(), request_name, reason));
                }
            }
        }
        None
    }

    /// Evaluates a list of selectors for a device; `Ok(Some(i))`: selector `i` rejected it.
    /// A passed `deadline` stops an evaluation midway ([`AllocationError::Aborted`]); a spent
    /// cost budget is a fatal CEL runtime error naming the class or request.
    pub(super) fn selectors_reject(
        &self,
        claim: &PreparedClaim,
        selectors: &[PreparedSelector],
        d: &GatheredDevice<'_>,
        deadline: Option<Instant>,
    ) -> Result<Option<usize>, AllocationError> {
        let dev = d.prepared();
        for (i, s) in selectors.iter().enumerate() {
            if let Some(driver) = s.selector.required_driver()
                && driver != d.slice.driver()
            {
                return Ok(Some(i));
            }
            let id = s.selector.id();
            let matched = match d.slice.cached_match(id, d.index_in_slice) {
                Some(m) => m,
                None => {
                    let Some(api_device) = d.slice.api_device(d.index_in_slice as usize) else {
                        return Ok(Some(i));
                    };
                    self.selector_evaluations.fetch_add(1, AtomicOrdering::Relaxed);
                    let input = SelectorInput {
                        driver: d.slice.driver(),
                        device: api_device,
                        maps: d.slice.device_maps(d.index_in_slice as usize),
                        slot: &dev.slot,
                        deadline,
                    };
                    let m = s.selector.matches(input).map_err(|e| {
                        if e.kind == EvalErrorKind::Deadline {
                            return AllocationError::Aborted(format!(
                                "{}: selector #{}: {}",
                                s.source, s.index, e.message
                            ));
                        }
                        let fatal = FatalError::CelRuntime {
                            claim: claim.key().to_string(),
                            origin: s.source.clone(),
                            index: s.index,
                            expression: s.selector.expression().to_string(),
                            device: dev.id.clone(),
                            message: e.message,
                        };
                        if e.kind == EvalErrorKind::CostBudget {
                            let _ = self.over_budget.set(fatal.clone());
                        }
                        AllocationError::from(fatal)
                    })?;
                    d.slice.store_match(id, d.index_in_slice, m);
                    m
                }
            };
            if !matched {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// Phase 2 for one alternative.
    pub(super) fn candidates(
        &self,
        claim: &PreparedClaim,
        alt: &PreparedAlternative,
        node: &Node,
        g: &GatheredInventory<'_>,
        deadline: Option<Instant>,
    ) -> Result<AlternativeCandidates, AllocationError> {
        let all_mode = alt.mode == AllocationMode::All;
        if all_mode {
            if let Some(pool) = g.incomplete.first() {
                return Ok(AlternativeCandidates {
                    candidates: Vec::new(),
                    failure: Some(UnschedulableReason::AllModePoolUnavailable {
                        pool: pool.to_string(),
                        incomplete: true,
                    }),
                });
            }
            if let Some((pool, _)) = g.invalid.first() {
                return Ok(AlternativeCandidates {
                    candidates: Vec::new(),
                    failure: Some(UnschedulableReason::AllModePoolUnavailable {
                        pool: pool.to_string(),
                        incomplete: false,
                    }),
                });
            }
        }
        let f = &self.features;
        let mut stages = StageCounts {
            class_rejects: vec![0usize; alt.class_selectors.len()],
            request_rejects: vec![0usize; alt.selectors.len()],
            ..StageCounts::default()
        };
        let mut candidates = Vec::new();
        let mut all_mode_failure = None;
        let has_driver = |s: &PreparedSelector| s.selector.required_driver().is_some();
        let prefilter_source = match alt.class_selectors.iter().position(has_driver) {
            Some(i) => Some((true, i)),
            None => alt.selectors.iter().position(has_driver).map(|i| (false, i)),
        };
        for (gi, d) in g.devices.iter().enumerate() {
            let dev = d.prepared();
            if !f.binding_conditions && dev.has_binding_conditions {
                continue;
            }
            stages.total += 1;
            // Cheap prefilter: the driver some selector insists on.
            if let Some(driver) = &alt.required_driver
                && driver.as_str() != d.slice.driver()
            {
                match prefilter_source {
                    Some((true, i)) => stages.class_rejects[i] += 1,
                    Some((false, i)) => {
                        stages.after_class += 1;
                        stages.request_rejects[i] += 1;
                    }
                    None => {}
                }
                continue;
            }
            if let Some(i) = self.selectors_reject(claim, &alt.class_selectors, d, deadline)? {
                stages.class_rejects[i] += 1;
                continue;
            }
            stages.after_class += 1;
            if let Some(i) = self.selectors_reject(claim, &alt.selectors, d, deadline)? {
                stages.request_rejects[i] += 1;
                continue;
            }
            stages.after_request += 1;
            if d.slice.per_device_node_selection() {
                let reachable =
                    d.slice
                        .device_targets(d.index_in_slice as usize, node)
                        .map_err(|source| {
                            AllocationError::from(FatalError::NodeSelector {
                                slice: d.slice.name().to_string(),
                                source,
                            })
                        })?;
                if !reachable {
                    continue;
                }
            }
            stages.after_node += 1;
            let mut consumed = None;
            // An exclusive device asked for no capacity has nothing to check: no shares exist on
            // it and its result records no consumption. Skipping the arithmetic here keeps it off
            // the per-device path of the common one-GPU claim (it was the top Filter cost).
            if f.consumable_capacity && (dev.allow_multiple || !alt.capacity.is_empty()) {
                let amounts = match consumed_capacity(&dev.capacities, &alt.capacity) {
                    Ok(a) => a,
                    Err(_) => {
                        stages.capacity_example.get_or_insert(gi as u32);
                        continue;
                    }
                };
                let existing = match self.state.consumed_capacity(&dev.id) {
                    LayeredCapacity::None => Vec::new(),
                    LayeredCapacity::Full => {
                        stages.capacity_example.get_or_insert(gi as u32);
                        continue;
                    }
                    LayeredCapacity::Amounts(m) => dev
                        .capacities
                        .iter()
                        .map(|c| m.get(&c.name).cloned().unwrap_or_default())
                        .collect(),
                };
                if !fits(&dev.capacities, &amounts, &[&existing]) {
                    stages.capacity_example.get_or_insert(gi as u32);
                    continue;
                }
                consumed = Some(Arc::<[Quantity]>::from(amounts));
            }
            stages.after_capacity += 1;
            // From here on a device that fails makes an `All` request fail.
            if !alt.admin_access && self.state.is_exclusively_allocated(&dev.id) {
                all_mode_failure.get_or_insert(UnschedulableReason::DevicesInUse);
                continue;
            }
            stages.after_in_use += 1;
            if f.device_taints {
                let taints = d
                    .slice
                    .api_device(d.index_in_slice as usize)
                    .and_then(|a| a.taints.as_deref())
                    .unwrap_or_default();
                if let Some(t) = untolerated_taint(taints, &alt.tolerations) {
                    let text = format!(
                        "{}={}:{}",
                        t.key,
                        t.value.as_deref().unwrap_or_default(),
                        t.effect
                    );
                    all_mode_failure
                        .get_or_insert(UnschedulableReason::DevicesTainted { taint: text.clone() });
                    stages.taint_example.get_or_insert(text);
                    continue;
                }
            }
            stages.after_taint += 1;
            if !dev.consumes.is_empty() {
                let gp = &g.pools[d.gathered_pool as usize];
                let skip = f.consumable_capacity && dev.allow_multiple && self.state.has_shares(&dev.id);
                let ok = f.partitionable_devices && (skip || self.counters_fit_alone(gp, d));
                if !ok {
                    stages.counter_pool.get_or_insert(gp.rec.key.to_string());
                    all_mode_failure.get_or_insert(UnschedulableReason::CountersExhausted {
                        pool: gp.rec.key.to_string(),
                    });
                    continue;
                }
            }
            candidates.push(Candidate {
                device: gi as u32,
                consumed,
            });
        }

        let mut failure = None;
        if all_mode {
            if stages.after_capacity == 0 {
                failure = Some(UnschedulableReason::AllModeNoDevices);
            } else if candidates.len() < stages.after_capacity {
                failure = all_mode_failure;
            } else if claim.min_devices() - 1 + candidates.len() > ALLOCATION_RESULTS_MAX_SIZE {
                failure = Some(UnschedulableReason::TooManyDevices);
            }
        } else {
            let needed = alt.min_devices();
            if candidates.len() < needed {
                failure = Some(stages.shortfall(alt, g, needed, candidates.len()));
            }
        }
        Ok(AlternativeCandidates { candidates, failure })
    }

    pub(super) fn counters_fit_alone(&self, gp: &GatheredPool<'_>, d: &GatheredDevice<'_>) -> bool {
        let avail = self.available_counters(gp.index, gp.rec);
        let Some(consumption) = gp
            .rec
            .consumption
            .get(d.slice_position as usize)
            .and_then(|p| p.get(d.index_in_slice as usize))
        else {
            return true;
        };
        consumption
            .iter()
            .all(|(ci, amount)| avail.get(*ci as usize).is_some_and(|a| amount <= a))
    }
}

/// How many devices survived each stage of [`Allocator::candidates`], with an example of what
/// stopped the others: enough to say precisely why too few are left.
#[derive(Default)]
struct StageCounts {
    /// Devices considered at all (binding conditions permitting).
    total: usize,
    /// Per class selector: how many devices it rejected.
    class_rejects: Vec<usize>,
    /// Per request selector: how many devices it rejected.
    request_rejects: Vec<usize>,
    /// Devices left after the class selectors.
    after_class: usize,
    /// Devices left after the request selectors.
    after_request: usize,
    /// Devices left after per-device node selection.
    after_node: usize,
    /// Devices left after the capacity checks.
    after_capacity: usize,
    /// Devices left after those in use by other claims.
    after_in_use: usize,
    /// Devices left after those with untolerated taints.
    after_taint: usize,
    /// A device (index into the gathered devices) without the capacity asked for.
    capacity_example: Option<u32>,
    /// A taint no toleration covers, as `key=value:effect`.
    taint_example: Option<String>,
    /// A pool whose counters are exhausted.
    counter_pool: Option<String>,
}

impl StageCounts {
    /// Why only `usable` devices are left where the alternative needs `needed`: the first stage
    /// that left too few, in the order the checks run.
    fn shortfall(
        self,
        alt: &PreparedAlternative,
        g: &GatheredInventory<'_>,
        needed: usize,
        usable: usize,
    ) -> UnschedulableReason {
        let most = |v: &[usize]| {
            v.iter()
                .enumerate()
                .max_by_key(|(i, n)| (**n, std::cmp::Reverse(*i)))
                .map(|(i, _)| i)
        };
        if self.total < needed && !g.incomplete.is_empty() {
            UnschedulableReason::PoolsIncomplete {
                pools: g.incomplete.iter().map(|k| k.to_string()).collect(),
            }
        } else if self.total == 0 {
            UnschedulableReason::NoDevices
        } else if self.total < needed {
            UnschedulableReason::NotEnoughDevices { needed, usable }
        } else if self.after_class < needed {
            UnschedulableReason::ClassSelectorsUnmatched {
                class: alt.class.metadata.name.clone().unwrap_or_default(),
                expression: most(&self.class_rejects)
                    .filter(|_| self.class_rejects.iter().any(|n| *n > 0))
                    .map(|i| alt.class_selectors[i].selector.expression().to_string()),
            }
        } else if self.after_request < needed {
            UnschedulableReason::RequestSelectorsUnmatched {
                expression: most(&self.request_rejects)
                    .filter(|_| self.request_rejects.iter().any(|n| *n > 0))
                    .map(|i| alt.selectors[i].selector.expression().to_string()),
            }
        } else if self.after_node < needed {
            UnschedulableReason::DevicesNotOnNode
        } else if self.after_capacity < needed {
            UnschedulableReason::CapacityExhausted {
                device: self
                    .capacity_example
                    .map(|gi| g.devices[gi as usize].prepared().id.to_string()),
            }
        } else if self.after_in_use < needed {
            UnschedulableReason::DevicesInUse
        } else if self.after_taint < needed {
            UnschedulableReason::DevicesTainted {
                taint: self.taint_example.unwrap_or_default(),
            }
        } else if let Some(pool) = self.counter_pool {
            UnschedulableReason::CountersExhausted { pool }
        } else {
            UnschedulableReason::NotEnoughDevices { needed, usable }
        }
    }
}

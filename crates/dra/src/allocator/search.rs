//! Phase 3, search: depth-first backtracking that assigns candidates to requests.
//!
//! Claims, requests, `firstAvailable` subrequests and candidates are tried in order and the first
//! solution wins; within a request only increasing candidate positions are tried (combinations,
//! not permutations). A pick is checked against what this search already picked: devices in use,
//! capacity shared with earlier shares, counters consumed, and the claim's constraints, and
//! every pick records enough to be undone exactly. Before trying a request's candidates the
//! search counts how many are still compatible and stops a branch that cannot complete, which
//! cuts the exponential blow-up of e.g. `matchAttribute` over many devices.

use std::cell::OnceCell;
use std::sync::Arc;

use unisched_resource::Quantity;

use super::Allocator;
use super::candidates::{AlternativeCandidates, Candidate};
use super::constraints::{AttributeSet, ConstraintState, attribute_set, device_attribute, intersects};
use super::deadline::Deadline;
use super::diagnostics::RequestDiagnostics;
use super::gathering::{GatheredDevice, GatheredInventory};
use crate::capacity::fits;
use crate::claims::{ALLOCATION_RESULTS_MAX_SIZE, AllocationMode, PreparedAlternative, PreparedClaim};
use crate::error::{AllocationError, FatalError, UnschedulableReason};
use crate::pools::PreparedDevice;
use crate::state::LayeredCapacity;

/// How often (in search steps) the deadline is checked.
const DEADLINE_CHECK_INTERVAL: u64 = 64;

/// One device picked for a request: enough to build its result and to undo it exactly.
pub(super) struct Pick {
    /// Index of the request in its claim.
    pub(super) request: usize,
    /// Index of the alternative (subrequest) within the request.
    pub(super) alternative: usize,
    /// Index into the gathered devices.
    pub(super) device: u32,
    /// Capacity this share consumes, when consumable capacity is on.
    pub(super) consumed: Option<Arc<[Quantity]>>,
    /// Whether this pick charged the pool's counters (the first share of a device does).
    pub(super) counters_charged: bool,
    /// Whether the device allows multiple allocations (the pick is a share).
    pub(super) multi: bool,
}

/// Whether a candidate could be added right now (see `Search::compatible`).
pub(super) enum Compatibility {
    Yes,
    InUse,
    Constraint(usize),
}

pub(super) enum SearchStop {
    MaxSize,
    Abort(AllocationError),
}

/// Phase 3 state.
pub(super) struct Search<'s, 'i> {
    pub(super) alloc: &'s Allocator,
    pub(super) claims: &'s [&'s PreparedClaim],
    pub(super) gathered: &'s GatheredInventory<'i>,
    pub(super) alternative_candidates: &'s [Vec<Vec<AlternativeCandidates>>],
    /// Per gathered device: claims it is being allocated to exclusively in this search.
    pub(super) allocating: Vec<Vec<u32>>,
    /// Per gathered device: capacity consumed by shares picked in this search, and their number.
    pub(super) sharing: Vec<Option<(Vec<Quantity>, u32)>>,
    /// Per gathered pool: counters consumed in this search.
    pub(super) counter_use: Vec<Option<Vec<Quantity>>>,
    pub(super) constraints: Vec<Vec<ConstraintState>>,
    pub(super) picks: Vec<Vec<Pick>>,
    pub(super) steps: u64,
    pub(super) deadline: Deadline<'s>,
    pub(super) diagnostics: Vec<Vec<RequestDiagnostics>>,
    pub(super) all_mode_failure: Option<(usize, usize, UnschedulableReason)>,
    /// Set when mode `All` meets a device that breaks a constraint: ends the search with an error.
    pub(super) fatal: Option<FatalError>,
    /// Per claim, per constraint, per gathered device: the device's attribute values.
    pub(super) attribute_cache: Vec<Vec<Vec<OnceCell<Option<AttributeSet>>>>>,
}

impl<'s, 'i> Search<'s, 'i> {
    /// A search over `claims` with nothing picked yet.
    pub(super) fn new(
        alloc: &'s Allocator,
        claims: &'s [&'s PreparedClaim],
        gathered: &'s GatheredInventory<'i>,
        alternative_candidates: &'s [Vec<Vec<AlternativeCandidates>>],
        deadline: Deadline<'s>,
    ) -> Self {
        Search {
            alloc,
            claims,
            gathered,
            alternative_candidates,
            allocating: vec![Vec::new(); gathered.devices.len()],
            sharing: vec![None; gathered.devices.len()],
            counter_use: (0..gathered.pools.len()).map(|_| None).collect(),
            constraints: claims
                .iter()
                .map(|c| {
                    c.constraints()
                        .iter()
                        .map(|k| ConstraintState {
                            distinct: k.distinct,
                            requests: k.requests.clone(),
                            stack: Vec::new(),
                        })
                        .collect()
                })
                .collect(),
            picks: claims.iter().map(|_| Vec::new()).collect(),
            steps: 0,
            deadline,
            diagnostics: claims
                .iter()
                .map(|c| vec![RequestDiagnostics::default(); c.requests().len()])
                .collect(),
            all_mode_failure: None,
            fatal: None,
            attribute_cache: claims
                .iter()
                .map(|c| {
                    c.constraints()
                        .iter()
                        .map(|_| (0..gathered.devices.len()).map(|_| OnceCell::new()).collect())
                        .collect()
                })
                .collect(),
        }
    }
}

impl Search<'_, '_> {
    pub(super) fn attribute_values(&self, c: usize, k: usize, dev: u32) -> Option<&AttributeSet> {
        let cell = self.attribute_cache.get(c)?.get(k)?.get(dev as usize)?;
        cell.get_or_init(|| {
            let gd = self.gathered.devices[dev as usize];
            let name = &self.claims[c].constraints()[k].attribute;
            device_attribute(gd.slice, gd.index_in_slice, name)
                .and_then(|a| attribute_set(a, self.alloc.features.list_type_attributes))
        })
        .as_ref()
    }

    pub(super) fn allocate_one(
        &mut self,
        c: usize,
        r: usize,
        alt: usize,
        d: usize,
        in_alternative: bool,
        start: usize,
    ) -> Result<bool, SearchStop> {
        self.steps += 1;
        if self.steps % DEADLINE_CHECK_INTERVAL == 1
            && let Some(why) = self.deadline.expired()
        {
            return Err(SearchStop::Abort(AllocationError::Aborted(why)));
        }
        let Some(claim) = self.claims.get(c) else {
            return Ok(true);
        };
        let Some(request) = claim.requests().get(r) else {
            return match self.allocate_one(c + 1, 0, 0, 0, false, 0) {
                Err(SearchStop::MaxSize) => Ok(false),
                other => other,
            };
        };
        if request.has_subrequests && !in_alternative {
            let mut all_exceeded = true;
            for a in 0..request.alternatives.len() {
                match self.allocate_one(c, r, a, 0, true, 0) {
                    Err(SearchStop::MaxSize) => continue,
                    Err(e) => return Err(e),
                    Ok(true) => return Ok(true),
                    Ok(false) => all_exceeded = false,
                }
            }
            return if all_exceeded && !request.alternatives.is_empty() {
                Err(SearchStop::MaxSize)
            } else {
                Ok(false)
            };
        }
        let data = &self.alternative_candidates[c][r][alt];
        if data.failure.is_some() {
            return Ok(false);
        }
        let spec = &request.alternatives[alt];
        let all_mode = spec.mode == AllocationMode::All;
        let needed = match spec.mode {
            AllocationMode::ExactCount(n) => n,
            AllocationMode::All => data.candidates.len(),
        };
        if d >= needed {
            return self.allocate_one(c, r + 1, 0, 0, false, 0);
        }
        if self.picks[c].len() + needed - d > ALLOCATION_RESULTS_MAX_SIZE {
            self.diagnostics[c][r].max_size = true;
            return Err(SearchStop::MaxSize);
        }
        if all_mode {
            let cand = data.candidates[d].clone();
            if !self.try_allocate(c, r, alt, &cand, true) {
                return match self.fatal.take() {
                    Some(e) => Err(SearchStop::Abort(AllocationError::Fatal(Box::new(e)))),
                    None => Ok(false),
                };
            }
            let outcome = self.allocate_one(c, r, alt, d + 1, in_alternative, 0);
            if !matches!(outcome, Ok(true)) {
                self.undo_last(c);
            }
            return outcome;
        }
        let total = data.candidates.len();
        // How many of the remaining candidates could still be added given what this search has
        // picked so far (devices in use, constraint values). Constraints only get stricter as
        // devices are added, so fewer compatible candidates than still needed means no solution
        // below this point. This cuts the exponential blow-up of e.g. `matchAttribute` over many
        // devices. Skipped for the common single-device request without constraints.
        let remaining = needed - d;
        let compatible: Option<Vec<usize>> = if remaining > 1 || !self.constraints[c].is_empty() {
            let mut suffix = vec![0usize; total.saturating_sub(start) + 1];
            for i in (start..total).rev() {
                let ok = match self.compatible(c, spec, &self.alternative_candidates[c][r][alt].candidates[i])
                {
                    Compatibility::Yes => true,
                    Compatibility::InUse => {
                        self.diagnostics[c][r].in_use = true;
                        false
                    }
                    Compatibility::Constraint(k) => {
                        self.diagnostics[c][r].constraint.get_or_insert(k);
                        false
                    }
                };
                suffix[i - start] = suffix[i - start + 1] + usize::from(ok);
            }
            Some(suffix)
        } else {
            None
        };
        for i in start..total {
            // Not enough candidates left to complete this request.
            let left = compatible.as_ref().map_or(total - i, |s| s[i - start]);
            if left < remaining {
                break;
            }
            if compatible
                .as_ref()
                .is_some_and(|s| s[i - start] == s[i - start + 1])
            {
                continue;
            }
            let cand = self.alternative_candidates[c][r][alt].candidates[i].clone();
            if !self.try_allocate(c, r, alt, &cand, false) {
                continue;
            }
            match self.allocate_one(c, r, alt, d + 1, in_alternative, i + 1) {
                Ok(true) => return Ok(true),
                Ok(false) => self.undo_last(c),
                Err(e) => {
                    self.undo_last(c);
                    return Err(e);
                }
            }
        }
        Ok(false)
    }

    /// Whether a candidate could be added now, judging by devices in use and constraints only.
    pub(super) fn compatible(&self, c: usize, spec: &PreparedAlternative, cand: &Candidate) -> Compatibility {
        let di = cand.device as usize;
        let multi =
            self.alloc.features.consumable_capacity && self.gathered.devices[di].prepared().allow_multiple;
        if spec.admin_access {
            if !multi && self.allocating[di].contains(&(c as u32)) {
                return Compatibility::InUse;
            }
        } else if !self.allocating[di].is_empty() {
            return Compatibility::InUse;
        }
        for (k, con) in self.constraints[c].iter().enumerate() {
            if !con.applies(&spec.request, spec.subrequest.as_deref()) {
                continue;
            }
            let ok = match self.attribute_values(c, k, cand.device) {
                None => false,
                Some(set) if con.distinct => con.stack.iter().all(|prev| !intersects(prev, set)),
                Some(set) => con.stack.last().is_none_or(|top| intersects(top, set)),
            };
            if !ok {
                return Compatibility::Constraint(k);
            }
        }
        Compatibility::Yes
    }

    pub(super) fn existing_capacity(&self, dev: &PreparedDevice) -> Vec<Quantity> {
        match self.alloc.state.consumed_capacity(&dev.id) {
            LayeredCapacity::Amounts(m) => dev
                .capacities
                .iter()
                .map(|c| m.get(&c.name).cloned().unwrap_or_default())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Tries to add one candidate; on success the pick is recorded (undo with `undo_last`).
    pub(super) fn try_allocate(
        &mut self,
        c: usize,
        r: usize,
        alt: usize,
        cand: &Candidate,
        must: bool,
    ) -> bool {
        let alloc = self.alloc;
        let f = &alloc.features;
        let spec = &self.claims[c].requests()[r].alternatives[alt];
        let gd = self.gathered.devices[cand.device as usize];
        let dev = gd.prepared();
        let di = cand.device as usize;
        let multi = f.consumable_capacity && dev.allow_multiple;

        if !multi && spec.admin_access && self.allocating[di].contains(&(c as u32)) {
            self.diagnostics[c][r].in_use = true;
            return false;
        }
        if !spec.admin_access && !self.allocating[di].is_empty() {
            self.diagnostics[c][r].in_use = true;
            return false;
        }

        // Capacity shared with earlier picks of this search.
        if multi && let (Some(consumed), Some((used, _))) = (&cand.consumed, &self.sharing[di]) {
            let existing = self.existing_capacity(dev);
            if !fits(&dev.capacities, consumed, &[&existing, used]) {
                self.diagnostics[c][r].capacity.get_or_insert(cand.device);
                self.note_all_mode(
                    must,
                    c,
                    r,
                    UnschedulableReason::CapacityExhausted {
                        device: Some(dev.id.to_string()),
                    },
                );
                return false;
            }
        }

        // Counters: charged once per device (for shared devices by the first share).
        let mut charged = false;
        if !dev.consumes.is_empty() {
            let already_shared = multi && (alloc.state.has_shares(&dev.id) || self.sharing[di].is_some());
            if !already_shared {
                let gp = &self.gathered.pools[gd.gathered_pool as usize];
                let avail = alloc.available_counters(gp.index, gp.rec);
                let consumption = gp
                    .rec
                    .consumption
                    .get(gd.slice_position as usize)
                    .and_then(|p| p.get(gd.index_in_slice as usize));
                let used = self.counter_use[gd.gathered_pool as usize]
                    .get_or_insert_with(|| vec![Quantity::default(); gp.rec.counters.len()]);
                let ok = consumption.into_iter().flatten().all(|(ci, amount)| {
                    let ci = *ci as usize;
                    match (used.get(ci).and_then(|u| u.checked_add(amount)), avail.get(ci)) {
                        (Some(total), Some(a)) => total <= *a,
                        _ => false,
                    }
                });
                if !ok {
                    self.diagnostics[c][r].counters.get_or_insert(gd.gathered_pool);
                    self.note_all_mode(
                        must,
                        c,
                        r,
                        UnschedulableReason::CountersExhausted {
                            pool: gp.rec.key.to_string(),
                        },
                    );
                    return false;
                }
                for (ci, amount) in consumption.into_iter().flatten() {
                    if let Some(u) = used.get_mut(*ci as usize) {
                        *u = u.checked_add(amount).unwrap_or_else(|| u.clone());
                    }
                }
                charged = true;
            }
        }

        // Constraints.
        let request_name = spec.request.as_str();
        let sub = spec.subrequest.as_deref();
        let mut added = 0;
        let mut failed = None;
        for k in 0..self.constraints[c].len() {
            if !self.constraints[c][k].applies(request_name, sub) {
                added += 1;
                continue;
            }
            let set = self.attribute_values(c, k, cand.device).cloned();
            if !self.constraints[c][k].add(set.as_ref()) {
                failed = Some(k);
                break;
            }
            added += 1;
        }
        if let Some(k) = failed {
            for con in self.constraints[c][..added].iter_mut() {
                if con.applies(request_name, sub) {
                    con.stack.pop();
                }
            }
            if charged {
                self.uncharge(gd);
            }
            self.diagnostics[c][r].constraint.get_or_insert(k);
            if must {
                self.fatal = Some(FatalError::AllModeConstraint {
                    claim: self.claims[c].key().to_string(),
                    request: spec.full_name.clone(),
                    device: dev.id.clone(),
                });
                return false;
            }
            let con = &self.claims[c].constraints()[k];
            self.note_all_mode(
                must,
                c,
                r,
                UnschedulableReason::ConstraintUnsatisfied {
                    attribute: con.attribute.clone(),
                    distinct: con.distinct,
                },
            );
            return false;
        }

        if multi {
            let consumed = cand.consumed.as_deref().unwrap_or_default();
            let entry =
                self.sharing[di].get_or_insert_with(|| (vec![Quantity::default(); dev.capacities.len()], 0));
            for (u, q) in entry.0.iter_mut().zip(consumed) {
                *u = u.checked_add(q).unwrap_or_else(|| u.clone());
            }
            entry.1 += 1;
        } else {
            self.allocating[di].push(c as u32);
        }
        self.picks[c].push(Pick {
            request: r,
            alternative: alt,
            device: cand.device,
            consumed: cand.consumed.clone(),
            counters_charged: charged,
            multi,
        });
        true
    }

    pub(super) fn note_all_mode(&mut self, must: bool, c: usize, r: usize, reason: UnschedulableReason) {
        if must && self.all_mode_failure.is_none() {
            self.all_mode_failure = Some((c, r, reason));
        }
    }

    pub(super) fn uncharge(&mut self, gd: GatheredDevice<'_>) {
        let gp = &self.gathered.pools[gd.gathered_pool as usize];
        let consumption = gp
            .rec
            .consumption
            .get(gd.slice_position as usize)
            .and_then(|p| p.get(gd.index_in_slice as usize));
        if let Some(used) = self.counter_use[gd.gathered_pool as usize].as_mut() {
            for (ci, amount) in consumption.into_iter().flatten() {
                if let Some(u) = used.get_mut(*ci as usize) {
                    *u = u.checked_sub(amount).unwrap_or_else(|| u.clone());
                }
            }
        }
    }

    pub(super) fn undo_last(&mut self, c: usize) {
        let Some(p) = self.picks[c].pop() else { return };
        let spec = &self.claims[c].requests()[p.request].alternatives[p.alternative];
        let (request_name, sub) = (spec.request.as_str(), spec.subrequest.as_deref());
        for con in self.constraints[c].iter_mut() {
            if con.applies(request_name, sub) {
                con.stack.pop();
            }
        }
        let di = p.device as usize;
        if p.multi {
            if let Some((used, n)) = self.sharing[di].as_mut() {
                for (u, q) in used.iter_mut().zip(p.consumed.as_deref().unwrap_or_default()) {
                    *u = u.checked_sub(q).unwrap_or_else(|| u.clone());
                }
                *n -= 1;
                if *n == 0 {
                    self.sharing[di] = None;
                }
            }
        } else if let Some(pos) = self.allocating[di].iter().rposition(|x| *x == c as u32) {
            self.allocating[di].remove(pos);
        }
        if p.counters_charged {
            let gd = self.gathered.devices[di];
            self.uncharge(gd);
        }
    }
}

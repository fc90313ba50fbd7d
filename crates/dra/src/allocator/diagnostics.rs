//! Why an allocation failed on a node: what the search rejected, turned into a reason.
//!
//! The search records, per claim and request, the first constraint, counter pool and device
//! capacity that rejected a pick, devices in use and the size limit. The deepest request with a
//! record gives the reason (upstream wording). Invalid pools on the node take precedence: their
//! devices might have served the claim, so they are the reason to report.

use super::Allocator;
use super::gathering::GatheredInventory;
use super::search::Search;
use crate::error::{AllocationError, Unschedulable, UnschedulableReason};

#[derive(Default, Clone)]
pub(super) struct RequestDiagnostics {
    pub(super) constraint: Option<usize>,
    pub(super) counters: Option<u32>,
    pub(super) capacity: Option<u32>,
    pub(super) in_use: bool,
    pub(super) max_size: bool,
}

impl Allocator {
    pub(super) fn unschedulable(
        &self,
        gathered: &GatheredInventory<'_>,
        claim: &str,
        request: Option<String>,
        reason: UnschedulableReason,
    ) -> AllocationError {
        let reason = if !gathered.invalid.is_empty()
            && !matches!(reason, UnschedulableReason::AllModePoolUnavailable { .. })
        {
            UnschedulableReason::InvalidPools {
                pools: gathered
                    .invalid
                    .iter()
                    .map(|(k, why)| (k.to_string(), why.to_string()))
                    .collect(),
            }
        } else {
            reason
        };
        AllocationError::from(Unschedulable {
            claim: claim.to_string(),
            request,
            reason,
        })
    }
}

impl Search<'_, '_> {
    /// The reason for a failed search.
    pub(super) fn failure(&self) -> AllocationError {
        let alloc = self.alloc;
        if let Some((c, r, reason)) = &self.all_mode_failure {
            let name = self.claims[*c].requests()[*r].name.clone();
            return alloc.unschedulable(self.gathered, self.claims[*c].key(), Some(name), reason.clone());
        }
        // The deepest request where something was rejected.
        let mut found = None;
        for (c, per_req) in self.diagnostics.iter().enumerate() {
            for (r, d) in per_req.iter().enumerate() {
                if d.constraint.is_some()
                    || d.counters.is_some()
                    || d.capacity.is_some()
                    || d.in_use
                    || d.max_size
                {
                    found = Some((c, r, d.clone()));
                }
            }
        }
        let Some((c, r, d)) = found else {
            let claim = self
                .claims
                .first()
                .map(|c| c.key().to_string())
                .unwrap_or_default();
            return alloc.unschedulable(self.gathered, &claim, None, UnschedulableReason::NoCombination);
        };
        let claim = self.claims[c];
        let reason = if let Some(k) = d.constraint {
            let con = &claim.constraints()[k];
            UnschedulableReason::ConstraintUnsatisfied {
                attribute: con.attribute.clone(),
                distinct: con.distinct,
            }
        } else if let Some(gp) = d.counters {
            UnschedulableReason::CountersExhausted {
                pool: self.gathered.pools[gp as usize].rec.key.to_string(),
            }
        } else if let Some(dev) = d.capacity {
            UnschedulableReason::CapacityExhausted {
                device: Some(self.gathered.devices[dev as usize].prepared().id.to_string()),
            }
        } else if d.max_size {
            UnschedulableReason::TooManyDevices
        } else {
            UnschedulableReason::NoCombination
        };
        alloc.unschedulable(
            self.gathered,
            claim.key(),
            Some(claim.requests()[r].name.clone()),
            reason,
        )
    }
}

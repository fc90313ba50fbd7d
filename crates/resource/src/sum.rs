//! `ResourceSum`: an exact, invertible running total of [`Resource`] vectors.
//!
//! A node's requested total is maintained incrementally: pods are added and removed in any order,
//! for as long as the process runs. [`Resource::add`] saturates at the `i64` bounds, so a total
//! that ever saturated is wrong forever after: with two pods of 9·10¹⁸ milli-CPU on a node, the
//! sum sticks at `i64::MAX`, and removing one pod leaves `i64::MAX − 9·10¹⁸` instead of 9·10¹⁸ —
//! the node looks emptier than it is.
//!
//! `ResourceSum` keeps every entry in `i128`, which holds the sum of 2⁶⁴ values of any `i64` size,
//! so adding and then removing the same vectors returns it exactly to where it started. Readers
//! that work in `i64` get [`ResourceSum::to_resource`], where an entry beyond the `i64` range is
//! shown at the bound. A clamped "requested" entry is at least as large as any allocatable, so a
//! fit check (`request > allocatable − requested`) refuses placement rather than admitting a pod
//! on a node that is in truth over-full.

use std::collections::BTreeMap;

use crate::Resource;
use crate::resource::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS};

/// The exact sum of resource vectors. See the module documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ResourceSum {
    milli_cpu: i128,
    memory: i128,
    ephemeral_storage: i128,
    allowed_pod_number: i128,
    /// Zero entries are removed, so that equal totals compare equal.
    scalar_resources: BTreeMap<String, i128>,
}

impl ResourceSum {
    /// An empty total.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a vector.
    pub fn add(&mut self, r: &Resource) {
        self.apply(r, 1);
    }

    /// Removes a vector added before (or goes below zero exactly, if it was not).
    pub fn sub(&mut self, r: &Resource) {
        self.apply(r, -1);
    }

    fn apply(&mut self, r: &Resource, sign: i128) {
        // i128 cannot overflow here: each step moves an entry by at most 2⁶³.
        self.milli_cpu += sign * i128::from(r.milli_cpu);
        self.memory += sign * i128::from(r.memory);
        self.ephemeral_storage += sign * i128::from(r.ephemeral_storage);
        self.allowed_pod_number += sign * i128::from(r.allowed_pod_number);
        for (name, v) in &r.scalar_resources {
            if *v == 0 {
                continue;
            }
            let slot = self.scalar_resources.entry(name.clone()).or_insert(0);
            *slot += sign * i128::from(*v);
            if *slot == 0 {
                self.scalar_resources.remove(name);
            }
        }
    }

    /// The exact amount of the named resource (0 when absent).
    pub fn get(&self, name: &str) -> i128 {
        match name {
            CPU => self.milli_cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.allowed_pod_number,
            other => self.scalar_resources.get(other).copied().unwrap_or(0),
        }
    }

    /// True when every entry is within the `i64` range, i.e. [`ResourceSum::to_resource`] is exact.
    pub fn fits_i64(&self) -> bool {
        let ok = |v: i128| i64::try_from(v).is_ok();
        ok(self.milli_cpu)
            && ok(self.memory)
            && ok(self.ephemeral_storage)
            && ok(self.allowed_pod_number)
            && self.scalar_resources.values().all(|v| ok(*v))
    }

    /// Whether `request` more of `name` fits in `capacity`, exactly: `self + request <= capacity`.
    pub fn fits(&self, name: &str, request: i64, capacity: i64) -> bool {
        self.get(name) + i128::from(request) <= i128::from(capacity)
    }

    /// The total in `i64` scheduler units; entries beyond the range are shown at the bound.
    pub fn to_resource(&self) -> Resource {
        let clamp = |v: i128| i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX });
        Resource {
            milli_cpu: clamp(self.milli_cpu),
            memory: clamp(self.memory),
            ephemeral_storage: clamp(self.ephemeral_storage),
            allowed_pod_number: clamp(self.allowed_pod_number),
            scalar_resources: self
                .scalar_resources
                .iter()
                .map(|(k, v)| (k.clone(), clamp(*v)))
                .collect(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cpu(milli: i64) -> Resource {
        Resource {
            milli_cpu: milli,
            ..Default::default()
        }
    }

    #[test]
    fn two_huge_pods_then_one_removed_is_exact() {
        // Two 9e15-CPU pods (9e18 milli-CPU each) on a 9e15-CPU node.
        let huge = cpu(9_000_000_000_000_000_000);
        let mut sum = ResourceSum::new();
        sum.add(&huge);
        sum.add(&huge);
        assert_eq!(sum.get(CPU), 18_000_000_000_000_000_000);
        assert!(!sum.fits_i64());
        // The i64 view is at the bound, which refuses any further request.
        assert_eq!(sum.to_resource().milli_cpu, i64::MAX);
        assert!(!sum.fits(CPU, 1, i64::MAX));
        sum.sub(&huge);
        assert_eq!(sum.get(CPU), 9_000_000_000_000_000_000);
        assert_eq!(sum.to_resource().milli_cpu, 9_000_000_000_000_000_000);
        // An 8e15-CPU pod does not fit beside the survivor.
        assert!(!sum.fits(CPU, 8_000_000_000_000_000_000, 9_000_000_000_000_000_000));

        // The saturating vector gets this wrong, which is why the ledger does not use it.
        let mut saturating = Resource::default();
        saturating.add(&huge);
        saturating.add(&huge);
        saturating.sub(&huge);
        assert_ne!(saturating.milli_cpu, 9_000_000_000_000_000_000);
    }

    fn resource() -> impl Strategy<Value = Resource> {
        let amount = prop_oneof![any::<i64>(), 0..1000i64, Just(i64::MAX), Just(i64::MIN)];
        (
            amount.clone(),
            amount.clone(),
            amount.clone(),
            0..110i64,
            proptest::collection::btree_map(
                prop_oneof![
                    Just("example.com/gpu".to_string()),
                    Just("hugepages-2Mi".to_string())
                ],
                amount,
                0..3,
            ),
        )
            .prop_map(|(c, m, e, p, s)| Resource {
                milli_cpu: c,
                memory: m,
                ephemeral_storage: e,
                allowed_pod_number: p,
                scalar_resources: s,
            })
    }

    proptest! {
        /// Adding vectors and removing them again, in any order, returns the total exactly to its
        /// start, however large the amounts.
        #[test]
        fn add_then_remove_in_any_order_is_the_identity(
            start in proptest::collection::vec(resource(), 0..4),
            pods in proptest::collection::vec(resource(), 0..12),
            order in any::<u64>(),
        ) {
            let mut sum = ResourceSum::new();
            for r in &start {
                sum.add(r);
            }
            let before = sum.clone();
            for p in &pods {
                sum.add(p);
            }
            // A deterministic permutation of the removal order.
            let mut removal: Vec<usize> = (0..pods.len()).collect();
            let mut seed = order;
            for i in (1..removal.len()).rev() {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                removal.swap(i, (seed >> 33) as usize % (i + 1));
            }
            for &i in &removal {
                sum.sub(&pods[i]);
            }
            prop_assert_eq!(&sum, &before);
            // And the total equals the exact sum of what is left.
            let exact: i128 = start.iter().map(|r| i128::from(r.milli_cpu)).sum();
            prop_assert_eq!(sum.get(CPU), exact);
        }
    }
}

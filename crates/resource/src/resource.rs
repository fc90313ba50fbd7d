//! `Resource`: the vector every node and pod is accounted in.
//!
//! The scheduler compares and adds resources millions of times per second, so the vector holds plain
//! integers in the units kube-scheduler uses: milli-CPU, bytes of memory and ephemeral storage, a pod
//! count, and whole units for every other ("scalar") resource — extended resources such as
//! `example.com/gpu` and `hugepages-*`. Exact [`Quantity`](crate::Quantity) arithmetic is reserved for
//! parsing and for DRA capacities; once a quantity is in a `Resource` it is an `i64`.
//!
//! Arithmetic saturates instead of overflowing: a malformed object with an absurd request must make a
//! pod unschedulable, never crash the scheduler. Saturation is not invertible, so running totals
//! that pods are added to and removed from (a node's requested resources) are kept in a
//! [`ResourceSum`](crate::ResourceSum) instead.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use crate::Quantity;

/// Name of the CPU resource.
pub const CPU: &str = "cpu";
/// Name of the memory resource.
pub const MEMORY: &str = "memory";
/// Name of the ephemeral-storage resource.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// Name of the pod-count resource.
pub const PODS: &str = "pods";
/// Prefix of huge-page resources (`hugepages-2Mi`, `hugepages-1Gi`).
pub const HUGEPAGES_PREFIX: &str = "hugepages-";

/// A vector of resource amounts in scheduler units.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resource {
    /// CPU in milli-cores.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// How many pods (only meaningful for node allocatable).
    pub allowed_pod_number: i64,
    /// Every other resource by name, in whole units (`Quantity::value`, rounded up):
    /// extended resources and `hugepages-*`. Zero entries may be present and mean nothing.
    pub scalar_resources: BTreeMap<String, i64>,
}

/// Which of a resource list's entries could not be read. Carried so that callers can surface the
/// problem to the pod's owner instead of silently counting zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidQuantity {
    /// The resource name, e.g. `cpu`.
    pub resource: String,
    /// The text that did not parse.
    pub value: String,
}

impl Resource {
    /// An empty vector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a vector from an API resource list (`requests`, `allocatable`, `overhead`, …).
    ///
    /// Entries that do not parse are skipped and returned in the second element; the caller decides
    /// whether that is an error for the object at hand.
    pub fn from_list(list: &BTreeMap<String, ApiQuantity>) -> (Self, Vec<InvalidQuantity>) {
        let mut r = Self::default();
        let invalid = r.add_list(list);
        (r, invalid)
    }

    /// Like [`Resource::from_list`], for callers that already reported invalid entries elsewhere.
    pub fn from_list_lossy(list: &BTreeMap<String, ApiQuantity>) -> Self {
        Self::from_list(list).0
    }

    /// Adds every entry of an API resource list. Returns the entries that did not parse.
    pub fn add_list(&mut self, list: &BTreeMap<String, ApiQuantity>) -> Vec<InvalidQuantity> {
        let mut invalid = Vec::new();
        for (name, q) in list {
            match Quantity::parse(&q.0) {
                Ok(q) => self.add_quantity(name, &q),
                Err(_) => invalid.push(InvalidQuantity {
                    resource: name.clone(),
                    value: q.0.clone(),
                }),
            }
        }
        invalid
    }

    /// Adds one named quantity in the unit the scheduler uses for that resource.
    pub fn add_quantity(&mut self, name: &str, q: &Quantity) {
        let amount = if name == CPU { q.milli_value() } else { q.value() };
        self.add_amount(name, amount);
    }

    /// Adds `amount` (already in scheduler units) to the named resource.
    pub fn add_amount(&mut self, name: &str, amount: i64) {
        let slot = self.slot_mut(name);
        *slot = slot.saturating_add(amount);
    }

    /// The amount of the named resource in scheduler units (0 when absent).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.milli_cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.allowed_pod_number,
            other => self.scalar_resources.get(other).copied().unwrap_or(0),
        }
    }

    /// Sets the named resource to `amount` (scheduler units).
    pub fn set(&mut self, name: &str, amount: i64) {
        *self.slot_mut(name) = amount;
    }

    fn slot_mut(&mut self, name: &str) -> &mut i64 {
        match name {
            CPU => &mut self.milli_cpu,
            MEMORY => &mut self.memory,
            EPHEMERAL_STORAGE => &mut self.ephemeral_storage,
            PODS => &mut self.allowed_pod_number,
            other => self.scalar_resources.entry(other.to_string()).or_insert(0),
        }
    }

    /// Element-wise saturating addition.
    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_add(other.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.saturating_add(other.allowed_pod_number);
        for (k, v) in &other.scalar_resources {
            let slot = self.scalar_resources.entry(k.clone()).or_insert(0);
            *slot = slot.saturating_add(*v);
        }
    }

    /// Element-wise saturating subtraction (may go negative; callers compare, they do not clamp).
    pub fn sub(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.saturating_sub(other.milli_cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_sub(other.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.saturating_sub(other.allowed_pod_number);
        for (k, v) in &other.scalar_resources {
            let slot = self.scalar_resources.entry(k.clone()).or_insert(0);
            *slot = slot.saturating_sub(*v);
        }
    }

    /// Element-wise maximum, used by the init-container rule.
    pub fn set_max(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.max(other.allowed_pod_number);
        for (k, v) in &other.scalar_resources {
            let slot = self.scalar_resources.entry(k.clone()).or_insert(0);
            *slot = (*slot).max(*v);
        }
    }

    /// True when no resource (other than the pod count) is requested.
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar_resources.values().all(|v| *v == 0)
    }

    /// Every non-zero entry by resource name, cpu/memory/ephemeral-storage first, then scalars in
    /// name order. Pods are not included.
    pub fn iter_nonzero(&self) -> impl Iterator<Item = (&str, i64)> {
        [
            (CPU, self.milli_cpu),
            (MEMORY, self.memory),
            (EPHEMERAL_STORAGE, self.ephemeral_storage),
        ]
        .into_iter()
        .chain(self.scalar_resources.iter().map(|(k, v)| (k.as_str(), *v)))
        .filter(|(_, v)| *v != 0)
    }

    /// Converts back to an API resource list with canonical quantities (zero entries dropped).
    pub fn to_list(&self) -> BTreeMap<String, ApiQuantity> {
        let mut out = BTreeMap::new();
        for (name, v) in self.iter_nonzero() {
            let q = if name == CPU {
                Quantity::from_milli(v)
            } else if matches!(name, MEMORY | EPHEMERAL_STORAGE) || is_hugepages(name) {
                // Byte amounts read best in binary units (8Gi, not 8589934592), as kubectl shows them.
                Quantity::new(v, crate::Format::BinarySI)
            } else {
                Quantity::from_i64(v)
            };
            out.insert(name.to_string(), ApiQuantity(q.to_string()));
        }
        if self.allowed_pod_number != 0 {
            out.insert(PODS.to_string(), ApiQuantity(self.allowed_pod_number.to_string()));
        }
        out
    }
}

/// True for huge-page resource names (`hugepages-2Mi`).
pub fn is_hugepages(name: &str) -> bool {
    name.starts_with(HUGEPAGES_PREFIX)
}

/// True for extended resource names as Kubernetes defines them: a qualified name (contains `/`), not
/// a native name (one containing `kubernetes.io/`), and not a quota `requests.` name.
pub fn is_extended_resource_name(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// True for the resources the scheduler counts as node-allocatable in its ledger: cpu, memory,
/// ephemeral-storage and hugepages (the ones KEP-5517 lets DRA devices supply).
pub fn is_node_allocatable_resource(name: &str) -> bool {
    matches!(name, CPU | MEMORY | EPHEMERAL_STORAGE) || is_hugepages(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_list_uses_kubectl_units() {
        let mut r = Resource::default();
        r.add_amount(CPU, 1500);
        r.add_amount(MEMORY, 8 * 1024 * 1024 * 1024);
        r.add_amount("hugepages-2Mi", 4 * 1024 * 1024);
        r.add_amount("example.com/gpu", 2);
        r.add_amount(EPHEMERAL_STORAGE, 1_500_000_000);
        let l = r.to_list();
        let got: Vec<(&str, &str)> = l.iter().map(|(k, v)| (k.as_str(), v.0.as_str())).collect();
        assert_eq!(
            got,
            [
                ("cpu", "1500m"),
                ("ephemeral-storage", "1500000000"),
                ("example.com/gpu", "2"),
                ("hugepages-2Mi", "4Mi"),
                ("memory", "8Gi"),
            ]
        );
        let (back, invalid) = Resource::from_list(&l);
        assert!(invalid.is_empty());
        assert_eq!(back, r);
    }

    #[test]
    fn extended_resource_names() {
        for (name, want) in [
            ("example.com/gpu", true),
            ("nvidia.com/gpu", true),
            ("cpu", false),
            ("kubernetes.io/foo", false),
            ("deviceclass.resource.kubernetes.io/gpu", false),
            ("requests.example.com/gpu", false),
        ] {
            assert_eq!(is_extended_resource_name(name), want, "{name}");
        }
    }
}

//! KEP-5517: what a pod's claims take out of the node's allocatable, and whether it fits.
//!
//! A device may declare `nodeAllocatableResources` (cpu, memory, hugepages-*, ephemeral-storage):
//!
//! * `mapping` — the device *is* that resource (a CPU driver's cores): per claim, the sum over its
//!   devices of `consumedCapacity[capacityKey] × capacityMultiplier` (for a device allocated whole,
//!   without consumed capacity, its full `capacity[capacityKey]`) or `deviceMultiplier` per device.
//!   Counted once per claim; a claim with a mapped device cannot be shared by two pods.
//! * `overhead` — what using the device costs the host (GPU host memory): `perPod` once per pod and
//!   `perContainer` per container referencing the claim, always charged to the node's general
//!   allocatable, and per pod, so overhead-only claims may be shared.
//!
//! The results are recorded as `NodeAllocatableResourceClaimStatus`es (sorted by claim name); the
//! pod's demand on a node is `pod_requests_with_claims(pod, statuses)` (spec requests, overhead,
//! pod-level resources, the claims with the init-container rules of `unisched_resource`), which must
//! fit the node's allocatable minus what its pods (assumed ones included) already request. Pod-level
//! requests, when set, must cover the containers plus the DRA part.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeAllocatableMappedResources, NodeAllocatableOverheadResources, NodeAllocatableResourceClaimStatus, Pod,
};
use k8s_openapi::api::resource::v1::{AllocationResult, Device};
use unisched_dra::{DeviceMaps, DraSnapshotIndex, PoolKey};
use unisched_framework::{Code, NodeInfo, Status};
use unisched_resource::{
    CPU, EPHEMERAL_STORAGE, MEMORY, PodRequestOptions, Quantity, QuantityError, Resource, is_hugepages,
    pod_requests_with_claims,
};

/// A claim's statuses on one node, and whether a device of it maps a resource.
#[derive(Clone, Debug)]
pub(crate) struct ClaimAllocatable {
    pub status: NodeAllocatableResourceClaimStatus,
    pub mapped: bool,
}

/// The device of a result in the index (newest generation of its pool).
pub(crate) fn find_device<'a>(
    index: &'a DraSnapshotIndex,
    driver: &str,
    pool: &str,
    device: &str,
) -> Option<(&'a Device, &'a DeviceMaps)> {
    let rec = index.pool(&PoolKey::new(driver, pool))?;
    let slices = index.slices();
    rec.slices.iter().find_map(|&si| {
        let slice = slices.get(si as usize)?;
        let devices = slice.slice().spec.devices.as_ref()?;
        let i = devices.iter().position(|d| d.name == device)?;
        Some((&devices[i], slice.device_maps(i)))
    })
}

/// A device's node-allocatable declaration that cannot be used. Messages name the device and the
/// field.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NodeAllocatableError {
    /// A quantity that does not parse.
    #[error("device {device} {field}: {value:?}: {source}")]
    Quantity {
        /// `driver/pool/device`.
        device: String,
        /// The field, e.g. `overhead.perPod`.
        field: &'static str,
        /// The quantity as given.
        value: String,
        /// Why it does not parse.
        #[source]
        source: QuantityError,
    },
    /// `mapping.capacityKey` names a capacity the device does not have.
    #[error("device {device} capacityKey: no capacity {key:?}")]
    NoCapacity {
        /// `driver/pool/device`.
        device: String,
        /// The capacity named.
        key: String,
    },
    /// Capacity × multiplier does not fit a quantity.
    #[error("device {device} capacityMultiplier: overflow")]
    Overflow {
        /// `driver/pool/device`.
        device: String,
    },
}

/// Parses `v`, the `field` of `device`.
fn q(
    v: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    device: &str,
    field: &'static str,
) -> Result<Quantity, NodeAllocatableError> {
    Quantity::from_api(v).map_err(|source| NodeAllocatableError::Quantity {
        device: device.to_string(),
        field,
        value: v.0.clone(),
        source,
    })
}

fn add(map: &mut BTreeMap<String, Quantity>, name: &str, amount: Quantity) {
    let slot = map.entry(name.to_string()).or_default();
    *slot = &*slot + &amount;
}

/// Computes the status of one claim from its allocation; `None` when no allocated device declares
/// node-allocatable resources. Errors name the device and the field.
pub(crate) fn claim_allocatable(
    claim_name: &str,
    containers: &[String],
    allocation: &AllocationResult,
    index: &DraSnapshotIndex,
) -> Result<Option<ClaimAllocatable>, NodeAllocatableError> {
    let mut mapping: BTreeMap<String, Quantity> = BTreeMap::new();
    let mut per_pod: BTreeMap<String, Quantity> = BTreeMap::new();
    let mut per_container: BTreeMap<String, Quantity> = BTreeMap::new();
    let mut any = false;
    let mut mapped = false;
    for r in allocation.devices.iter().flat_map(|d| d.results.iter().flatten()) {
        let Some((device, maps)) = find_device(index, &r.driver, &r.pool, &r.device) else {
            continue;
        };
        let Some(nar) = device
            .node_allocatable_resources
            .as_ref()
            .filter(|m| !m.is_empty())
        else {
            continue;
        };
        let dev = format!("{}/{}/{}", r.driver, r.pool, r.device);
        let dev = dev.as_str();
        for (resource, spec) in nar {
            any = true;
            if let Some(m) = &spec.mapping {
                if let Some(key) = m.capacity_key.as_deref() {
                    let base = match r.consumed_capacity.as_ref().and_then(|c| c.get(key)) {
                        Some(v) => q(v, dev, "capacityKey")?,
                        None => match maps.capacity_of(key) {
                            Some(c) => q(&c.value, dev, "capacityKey")?,
                            None => {
                                return Err(NodeAllocatableError::NoCapacity {
                                    device: dev.to_string(),
                                    key: key.to_string(),
                                });
                            }
                        },
                    };
                    let mult = match &m.capacity_multiplier {
                        Some(v) => q(v, dev, "capacityMultiplier")?,
                        None => Quantity::from_i64(1),
                    };
                    let amount = base
                        .checked_mul(&mult)
                        .ok_or_else(|| NodeAllocatableError::Overflow {
                            device: dev.to_string(),
                        })?;
                    add(&mut mapping, resource, amount);
                    mapped = true;
                } else if let Some(v) = &m.device_multiplier {
                    let amount = q(v, dev, "deviceMultiplier")?;
                    add(&mut mapping, resource, amount);
                    mapped = true;
                }
            }
            if let Some(o) = &spec.overhead {
                if let Some(v) = &o.per_pod {
                    add(&mut per_pod, resource, q(v, dev, "overhead.perPod")?);
                }
                if let Some(v) = &o.per_container {
                    add(&mut per_container, resource, q(v, dev, "overhead.perContainer")?);
                }
            }
        }
    }
    if !any {
        return Ok(None);
    }
    let mut overhead_names: Vec<&String> = per_pod.keys().chain(per_container.keys()).collect();
    overhead_names.sort();
    overhead_names.dedup();
    let overhead: Vec<NodeAllocatableOverheadResources> = overhead_names
        .into_iter()
        .map(|n| NodeAllocatableOverheadResources {
            name: n.clone(),
            per_pod: per_pod.get(n).map(Quantity::to_api),
            per_container: per_container.get(n).map(Quantity::to_api),
        })
        .collect();
    Ok(Some(ClaimAllocatable {
        status: NodeAllocatableResourceClaimStatus {
            resource_claim_name: claim_name.to_string(),
            containers: (!containers.is_empty()).then(|| containers.to_vec()),
            mapping: (!mapping.is_empty()).then(|| {
                mapping
                    .iter()
                    .map(|(n, v)| NodeAllocatableMappedResources {
                        name: n.clone(),
                        quantity: v.to_api(),
                    })
                    .collect()
            }),
            overhead: (!overhead.is_empty()).then_some(overhead),
        },
        mapped,
    }))
}

/// A node-allocatable resource the pod does not get enough of on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Shortfall {
    /// `cpu`, `memory`, …
    pub resource: String,
    /// The pod's total demand (scheduler units: milli-CPU, bytes, …).
    pub demand: i64,
    /// What is left on the node.
    pub free: i64,
}

fn pod_level_requests(
    pod: &Pod,
) -> Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>> {
    pod.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .filter(|r| !r.is_empty())
}

fn amount(r: &Resource, name: &str) -> i64 {
    match name {
        CPU => r.milli_cpu,
        MEMORY => r.memory,
        EPHEMERAL_STORAGE => r.ephemeral_storage,
        other => r.scalar_resources.get(other).copied().unwrap_or(0),
    }
}

/// Checks that the pod with these claim statuses fits the node. Returns the upstream-format status
/// on failure, plus the shortfalls for the aggregated explanation.
pub(crate) fn check_fit(
    pod: &Pod,
    statuses: &[NodeAllocatableResourceClaimStatus],
    node: &NodeInfo,
) -> Result<(), (Status, Vec<Shortfall>)> {
    // Pod-level requests must cover containers + DRA.
    if let Some(pod_level) = pod_level_requests(pod) {
        let opts = PodRequestOptions {
            skip_pod_level_resources: true,
            exclude_overhead: true,
            ..PodRequestOptions::default()
        };
        let containers_and_dra = pod_requests_with_claims(pod, statuses, &opts);
        for name in pod_level.keys() {
            if name != CPU && name != MEMORY && !is_hugepages(name) {
                continue;
            }
            let declared = Quantity::from_api(&pod_level[name]).ok();
            let mut r = Resource::default();
            if let Some(d) = declared {
                r.add_quantity(name, &d);
            }
            if amount(&r, name) < amount(&containers_and_dra, name) {
                return Err((
                    Status::unresolvable(format!(
                        "pod level request for {name} is insufficient to cover the container requests and the node allocatable resources of its resource claims"
                    )),
                    Vec::new(),
                ));
            }
        }
    }
    let demand = pod_requests_with_claims(pod, statuses, &PodRequestOptions::default());
    let alloc = &node.allocatable;
    let used = &node.requested;
    let mut names: Vec<String> = vec![CPU.into(), MEMORY.into(), EPHEMERAL_STORAGE.into()];
    names.extend(
        demand
            .scalar_resources
            .keys()
            .filter(|n| is_hugepages(n))
            .cloned(),
    );
    let mut reasons = Vec::new();
    let mut shortfalls = Vec::new();
    let mut unresolvable = false;
    for name in names {
        let want = amount(&demand, &name);
        if want <= 0 {
            continue;
        }
        let have = amount(alloc, &name);
        let free = have.saturating_sub(amount(used, &name));
        if want > free {
            reasons.push(format!("Insufficient {name}"));
            shortfalls.push(Shortfall {
                resource: name.clone(),
                demand: want,
                free,
            });
            if want > have {
                unresolvable = true;
            }
        }
    }
    if reasons.is_empty() {
        return Ok(());
    }
    let code = if unresolvable {
        Code::UnschedulableAndUnresolvable
    } else {
        Code::Unschedulable
    };
    Err((Status::new(code, reasons), shortfalls))
}

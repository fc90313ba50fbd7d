//! Compact fixture builders for tests (enabled by the `testing` cargo feature, so the plugin crate
//! can reuse them).
//!
//! ```text
//! let s = slice("node-a-gpu", "gpu.example.com", "node-a", "node-a")
//!     .device(dev("gpu-0").int("index", 0).string("model", "a100").cap("memory", "80Gi"))
//!     .build();
//! let c = claim("default", "c").request(req("gpu", "gpu.example.com").count(2)).build();
//! ```

#![allow(missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, CapacityRequestPolicy, CapacityRequestPolicyRange, CapacityRequirements, Counter,
    CounterSet, Device, DeviceAttribute, DeviceCapacity, DeviceClaim, DeviceClaimConfiguration, DeviceClass,
    DeviceClassConfiguration, DeviceClassSpec, DeviceConstraint, DeviceCounterConsumption, DeviceRequest,
    DeviceSelector as ApiSelector, DeviceSubRequest, DeviceTaint, DeviceToleration, ExactDeviceRequest,
    OpaqueDeviceConfiguration, ResourceClaim, ResourceClaimSpec, ResourcePool, ResourceSlice,
    ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;

use crate::{
    AllocatedState, AllocationError, Allocator, CelSelectorEngine, Deadline, DraSnapshotIndex, Features,
    PreparedClaim, PreparedSlice, StateLayers,
};

pub fn q(s: &str) -> ApiQuantity {
    ApiQuantity(s.to_string())
}

pub fn node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

pub fn node_with_labels(name: &str, labels: &[(&str, &str)]) -> Node {
    let mut n = node(name);
    n.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    n
}

/// A node selector with one term of `key In [value]` label requirements.
pub fn label_selector(labels: &[(&str, &str)]) -> NodeSelector {
    NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_expressions: Some(
                labels
                    .iter()
                    .map(|(k, v)| NodeSelectorRequirement {
                        key: k.to_string(),
                        operator: "In".into(),
                        values: Some(vec![v.to_string()]),
                    })
                    .collect(),
            ),
            match_fields: None,
        }],
    }
}

#[derive(Clone, Debug)]
pub struct DeviceBuilder(pub Device);

pub fn dev(name: &str) -> DeviceBuilder {
    DeviceBuilder(Device {
        name: name.into(),
        ..Default::default()
    })
}

impl DeviceBuilder {
    fn attr(mut self, name: &str, a: DeviceAttribute) -> Self {
        self.0
            .attributes
            .get_or_insert_with(BTreeMap::new)
            .insert(name.into(), a);
        self
    }
    pub fn int(self, name: &str, v: i64) -> Self {
        self.attr(
            name,
            DeviceAttribute {
                int: Some(v),
                ..Default::default()
            },
        )
    }
    pub fn string(self, name: &str, v: &str) -> Self {
        self.attr(
            name,
            DeviceAttribute {
                string: Some(v.into()),
                ..Default::default()
            },
        )
    }
    pub fn boolean(self, name: &str, v: bool) -> Self {
        self.attr(
            name,
            DeviceAttribute {
                bool: Some(v),
                ..Default::default()
            },
        )
    }
    pub fn version(self, name: &str, v: &str) -> Self {
        self.attr(
            name,
            DeviceAttribute {
                version: Some(v.into()),
                ..Default::default()
            },
        )
    }
    pub fn strings(self, name: &str, v: &[&str]) -> Self {
        self.attr(
            name,
            DeviceAttribute {
                strings: Some(v.iter().map(|s| s.to_string()).collect()),
                ..Default::default()
            },
        )
    }
    pub fn ints(self, name: &str, v: &[i64]) -> Self {
        self.attr(
            name,
            DeviceAttribute {
                ints: Some(v.to_vec()),
                ..Default::default()
            },
        )
    }
    pub fn cap(mut self, name: &str, v: &str) -> Self {
        self.0.capacity.get_or_insert_with(BTreeMap::new).insert(
            name.into(),
            DeviceCapacity {
                value: q(v),
                request_policy: None,
            },
        );
        self
    }
    /// A capacity with `requestPolicy {default, validRange {min, max, step}}`.
    pub fn cap_range(
        mut self,
        name: &str,
        v: &str,
        default: &str,
        min: &str,
        max: Option<&str>,
        step: Option<&str>,
    ) -> Self {
        self.0.capacity.get_or_insert_with(BTreeMap::new).insert(
            name.into(),
            DeviceCapacity {
                value: q(v),
                request_policy: Some(CapacityRequestPolicy {
                    default: Some(q(default)),
                    valid_range: Some(CapacityRequestPolicyRange {
                        min: q(min),
                        max: max.map(q),
                        step: step.map(q),
                    }),
                    valid_values: None,
                }),
            },
        );
        self
    }
    /// A capacity with `requestPolicy {default, validValues}`.
    pub fn cap_values(mut self, name: &str, v: &str, default: &str, values: &[&str]) -> Self {
        self.0.capacity.get_or_insert_with(BTreeMap::new).insert(
            name.into(),
            DeviceCapacity {
                value: q(v),
                request_policy: Some(CapacityRequestPolicy {
                    default: Some(q(default)),
                    valid_range: None,
                    valid_values: Some(values.iter().map(|s| q(s)).collect()),
                }),
            },
        );
        self
    }
    pub fn multi(mut self) -> Self {
        self.0.allow_multiple_allocations = Some(true);
        self
    }
    pub fn consumes(mut self, set: &str, counters: &[(&str, &str)]) -> Self {
        self.0
            .consumes_counters
            .get_or_insert_with(Vec::new)
            .push(DeviceCounterConsumption {
                counter_set: set.into(),
                counters: counters
                    .iter()
                    .map(|(n, v)| (n.to_string(), Counter { value: q(v) }))
                    .collect(),
                compatibility_groups: None,
            });
        self
    }
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.0.taints.get_or_insert_with(Vec::new).push(DeviceTaint {
            key: key.into(),
            value: (!value.is_empty()).then(|| value.to_string()),
            effect: effect.into(),
            time_added: None,
        });
        self
    }
    pub fn binding_conditions(mut self, conds: &[&str]) -> Self {
        self.0.binding_conditions = Some(conds.iter().map(|s| s.to_string()).collect());
        self.0.binding_failure_conditions = Some(vec!["Failed".to_string()]);
        self
    }
    pub fn binds_to_node(mut self) -> Self {
        self.0.binds_to_node = Some(true);
        self
    }
    pub fn on_node(mut self, n: &str) -> Self {
        self.0.node_name = Some(n.into());
        self
    }
    pub fn all_nodes(mut self) -> Self {
        self.0.all_nodes = Some(true);
        self
    }
}

#[derive(Clone, Debug)]
pub struct SliceBuilder(pub ResourceSlice);

/// A slice on one node (`spec.nodeName`), generation 1, one slice in the pool.
pub fn slice(name: &str, driver: &str, node_name: &str, pool: &str) -> SliceBuilder {
    SliceBuilder(ResourceSlice {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: ResourceSliceSpec {
            driver: driver.into(),
            node_name: Some(node_name.into()),
            pool: ResourcePool {
                name: pool.into(),
                generation: 1,
                resource_slice_count: 1,
            },
            ..Default::default()
        },
    })
}

impl SliceBuilder {
    pub fn device(mut self, d: DeviceBuilder) -> Self {
        self.0.spec.devices.get_or_insert_with(Vec::new).push(d.0);
        self
    }
    pub fn devices(mut self, ds: impl IntoIterator<Item = DeviceBuilder>) -> Self {
        for d in ds {
            self = self.device(d);
        }
        self
    }
    pub fn generation(mut self, g: i64) -> Self {
        self.0.spec.pool.generation = g;
        self
    }
    pub fn count(mut self, n: i64) -> Self {
        self.0.spec.pool.resource_slice_count = n;
        self
    }
    pub fn all_nodes(mut self) -> Self {
        self.0.spec.node_name = None;
        self.0.spec.all_nodes = Some(true);
        self
    }
    pub fn node_selector(mut self, sel: NodeSelector) -> Self {
        self.0.spec.node_name = None;
        self.0.spec.node_selector = Some(sel);
        self
    }
    pub fn per_device(mut self) -> Self {
        self.0.spec.node_name = None;
        self.0.spec.per_device_node_selection = Some(true);
        self
    }
    pub fn counter_set(mut self, name: &str, counters: &[(&str, &str)]) -> Self {
        self.0
            .spec
            .shared_counters
            .get_or_insert_with(Vec::new)
            .push(CounterSet {
                name: name.into(),
                counters: counters
                    .iter()
                    .map(|(n, v)| (n.to_string(), Counter { value: q(v) }))
                    .collect(),
            });
        self
    }
    pub fn build(self) -> ResourceSlice {
        self.0
    }
}

pub fn cel(expr: &str) -> ApiSelector {
    ApiSelector {
        cel: Some(CELDeviceSelector {
            expression: expr.into(),
        }),
    }
}

/// A class whose devices must come from `driver`.
pub fn class(name: &str, driver: &str) -> DeviceClass {
    class_with(name, &[&format!("device.driver == {driver:?}")])
}

pub fn class_with(name: &str, selectors: &[&str]) -> DeviceClass {
    DeviceClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(DeviceClassSpec {
            selectors: (!selectors.is_empty()).then(|| selectors.iter().map(|s| cel(s)).collect()),
            ..Default::default()
        }),
    }
}

pub fn with_class_config(mut c: DeviceClass, driver: &str, params: serde_json::Value) -> DeviceClass {
    if let Some(spec) = c.spec.as_mut() {
        spec.config
            .get_or_insert_with(Vec::new)
            .push(DeviceClassConfiguration {
                opaque: Some(OpaqueDeviceConfiguration {
                    driver: driver.into(),
                    parameters: RawExtension(params),
                }),
            });
    }
    c
}

#[derive(Clone, Debug)]
pub struct RequestBuilder(pub DeviceRequest);

/// An `exactly` request for one device of `class_name`.
pub fn req(name: &str, class_name: &str) -> RequestBuilder {
    RequestBuilder(DeviceRequest {
        name: name.into(),
        exactly: Some(ExactDeviceRequest {
            device_class_name: class_name.into(),
            ..Default::default()
        }),
        first_available: None,
    })
}

/// A `firstAvailable` request; each subrequest is given as an `exactly` builder whose name is the
/// subrequest name.
pub fn first_available(name: &str, subs: Vec<RequestBuilder>) -> RequestBuilder {
    RequestBuilder(DeviceRequest {
        name: name.into(),
        exactly: None,
        first_available: Some(
            subs.into_iter()
                .filter_map(|s| {
                    let e = s.0.exactly?;
                    Some(DeviceSubRequest {
                        name: s.0.name,
                        device_class_name: e.device_class_name,
                        selectors: e.selectors,
                        allocation_mode: e.allocation_mode,
                        count: e.count,
                        tolerations: e.tolerations,
                        capacity: e.capacity,
                        derived_attributes: None,
                    })
                })
                .collect(),
        ),
    })
}

impl RequestBuilder {
    fn exact(&mut self) -> &mut ExactDeviceRequest {
        self.0.exactly.get_or_insert_with(ExactDeviceRequest::default)
    }
    pub fn count(mut self, n: i64) -> Self {
        self.exact().count = Some(n);
        self
    }
    pub fn all(mut self) -> Self {
        self.exact().allocation_mode = Some("All".into());
        self
    }
    pub fn mode(mut self, m: &str) -> Self {
        self.exact().allocation_mode = Some(m.into());
        self
    }
    pub fn selector(mut self, expr: &str) -> Self {
        self.exact()
            .selectors
            .get_or_insert_with(Vec::new)
            .push(cel(expr));
        self
    }
    pub fn admin(mut self) -> Self {
        self.exact().admin_access = Some(true);
        self
    }
    pub fn tolerate(mut self, key: &str, operator: &str, value: &str, effect: &str) -> Self {
        self.exact()
            .tolerations
            .get_or_insert_with(Vec::new)
            .push(DeviceToleration {
                key: (!key.is_empty()).then(|| key.to_string()),
                operator: (!operator.is_empty()).then(|| operator.to_string()),
                value: (!value.is_empty()).then(|| value.to_string()),
                effect: (!effect.is_empty()).then(|| effect.to_string()),
                toleration_seconds: None,
            });
        self
    }
    pub fn capacity(mut self, name: &str, v: &str) -> Self {
        self.exact()
            .capacity
            .get_or_insert_with(CapacityRequirements::default)
            .requests
            .get_or_insert_with(BTreeMap::new)
            .insert(name.into(), q(v));
        self
    }
}

#[derive(Clone, Debug)]
pub struct ClaimBuilder(pub ResourceClaim);

pub fn claim(namespace: &str, name: &str) -> ClaimBuilder {
    ClaimBuilder(ResourceClaim {
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{namespace}-{name}")),
            ..Default::default()
        },
        spec: Some(ResourceClaimSpec {
            devices: Some(DeviceClaim::default()),
        }),
        status: None,
    })
}

impl ClaimBuilder {
    fn devices(&mut self) -> &mut DeviceClaim {
        self.0
            .spec
            .get_or_insert_with(Default::default)
            .devices
            .get_or_insert_with(Default::default)
    }
    pub fn request(mut self, r: RequestBuilder) -> Self {
        self.devices().requests.get_or_insert_with(Vec::new).push(r.0);
        self
    }
    pub fn match_attribute(mut self, attr: &str, requests: &[&str]) -> Self {
        self.devices()
            .constraints
            .get_or_insert_with(Vec::new)
            .push(DeviceConstraint {
                match_attribute: Some(attr.into()),
                distinct_attribute: None,
                requests: (!requests.is_empty()).then(|| requests.iter().map(|s| s.to_string()).collect()),
            });
        self
    }
    pub fn distinct_attribute(mut self, attr: &str, requests: &[&str]) -> Self {
        self.devices()
            .constraints
            .get_or_insert_with(Vec::new)
            .push(DeviceConstraint {
                match_attribute: None,
                distinct_attribute: Some(attr.into()),
                requests: (!requests.is_empty()).then(|| requests.iter().map(|s| s.to_string()).collect()),
            });
        self
    }
    pub fn config(mut self, driver: &str, requests: &[&str], params: serde_json::Value) -> Self {
        self.devices()
            .config
            .get_or_insert_with(Vec::new)
            .push(DeviceClaimConfiguration {
                opaque: Some(OpaqueDeviceConfiguration {
                    driver: driver.into(),
                    parameters: RawExtension(params),
                }),
                requests: (!requests.is_empty()).then(|| requests.iter().map(|s| s.to_string()).collect()),
            });
        self
    }
    pub fn build(self) -> ResourceClaim {
        self.0
    }
}

/// Everything needed for one allocation, with defaults that tests can override.
pub struct Fixture {
    pub slices: Vec<ResourceSlice>,
    pub classes: Vec<DeviceClass>,
    pub claims: Vec<ResourceClaim>,
    pub allocated: Vec<ResourceClaim>,
    pub in_flight: Vec<ResourceClaim>,
    pub features: Features,
    pub engine: Arc<CelSelectorEngine>,
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture {
            slices: Vec::new(),
            classes: Vec::new(),
            claims: Vec::new(),
            allocated: Vec::new(),
            in_flight: Vec::new(),
            features: Features::default(),
            engine: Arc::new(CelSelectorEngine::new()),
        }
    }
}

impl Fixture {
    pub fn index(&self) -> Arc<DraSnapshotIndex> {
        Arc::new(DraSnapshotIndex::new(
            self.slices
                .iter()
                .map(|s| Arc::new(PreparedSlice::new(Arc::new(s.clone())))),
        ))
    }

    pub fn class_map(&self) -> HashMap<String, Arc<DeviceClass>> {
        self.classes
            .iter()
            .map(|c| (c.metadata.name.clone().unwrap_or_default(), Arc::new(c.clone())))
            .collect()
    }

    pub fn state(&self) -> StateLayers {
        StateLayers::new(vec![
            Arc::new(AllocatedState::from_claims(&self.allocated)),
            Arc::new(AllocatedState::from_claims(&self.in_flight)),
        ])
    }

    /// Prepares the claims and builds an allocator (fatal preparation errors are returned).
    pub fn allocator(&self) -> Result<Allocator, AllocationError> {
        self.allocator_with_index(self.index())
    }

    pub fn allocator_with_index(&self, index: Arc<DraSnapshotIndex>) -> Result<Allocator, AllocationError> {
        let classes = self.class_map();
        let claims = self
            .claims
            .iter()
            .map(|c| {
                PreparedClaim::new(Arc::new(c.clone()), &classes, &*self.engine, &self.features).map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Allocator::new(index, self.state(), claims, self.features))
    }

    /// Prepares and allocates on one node.
    pub fn allocate(
        &self,
        node: &Node,
    ) -> Result<Vec<k8s_openapi::api::resource::v1::AllocationResult>, AllocationError> {
        self.allocator()?.allocate(node, Deadline::none())
    }
}

/// An allocation of one device (request `r`), e.g. for a claim in `Fixture::allocated`.
pub fn one_device_allocation(
    driver: &str,
    pool: &str,
    device: &str,
) -> k8s_openapi::api::resource::v1::AllocationResult {
    use k8s_openapi::api::resource::v1::{
        AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult,
    };
    AllocationResult {
        devices: Some(DeviceAllocationResult {
            results: Some(vec![DeviceRequestAllocationResult {
                request: "r".into(),
                driver: driver.into(),
                pool: pool.into(),
                device: device.into(),
                ..Default::default()
            }]),
            config: None,
        }),
        ..Default::default()
    }
}

/// Sets the allocation of a claim (to feed `Fixture::allocated`).
pub fn allocated(mut c: ResourceClaim, a: k8s_openapi::api::resource::v1::AllocationResult) -> ResourceClaim {
    c.status.get_or_insert_with(Default::default).allocation = Some(a);
    c
}

/// (request, driver/pool/device) pairs of a result, for compact assertions.
pub fn picked(a: &k8s_openapi::api::resource::v1::AllocationResult) -> Vec<(String, String)> {
    a.devices
        .iter()
        .flat_map(|d| d.results.iter().flatten())
        .map(|r| (r.request.clone(), format!("{}/{}/{}", r.driver, r.pool, r.device)))
        .collect()
}

/// Device names of a result, in order.
pub fn device_names(a: &k8s_openapi::api::resource::v1::AllocationResult) -> Vec<String> {
    a.devices
        .iter()
        .flat_map(|d| d.results.iter().flatten())
        .map(|r| r.device.clone())
        .collect()
}

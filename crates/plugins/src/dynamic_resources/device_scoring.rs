//! `DeviceResources`: a Score plugin that ranks nodes by how full their DRA devices would be after
//! the pod's allocation, with the shapes of NodeResourcesFit (LeastAllocated, MostAllocated,
//! RequestedToCapacityRatio).
//!
//! Why a separate plugin rather than a strategy inside DynamicResources: it gets its own weight in
//! the profile and its own line in `--explain`, it can be enabled without touching
//! DynamicResources' `firstAvailable` score, and leaving it out of the default profile keeps
//! upstream-compatible placements unchanged. It lives in this module because it reads the per-node
//! allocations DynamicResources' Filter records in its cycle state (no second allocator run).
//!
//! Utilisation is computed per driver (the `resources[].name` of the args), in milli-units:
//! * a device without shared counters and without multiple allocations counts 1000 capacity and
//!   1000 used when allocated;
//! * a device with `allowMultipleAllocations` counts 1000 capacity and `1000 × max(consumed /
//!   capacity)` over its capacities (1000 when some share's consumption is unknown, or when it has
//!   shares but no capacities);
//! * devices that consume shared counters (partitions) do not count themselves: each counter of
//!   their pool counts 1000 capacity and `1000 × consumed / total`, so one used partition of a
//!   seven-way GPU leaves it 1/7 used.
//!
//! "Used" stacks the committed and in-flight allocations of the DRA snapshot and the allocation
//! the Filter found for this pod on this node.
//!
//! A resource named `deviceclass.resource.kubernetes.io/<class>` (the implicit extended-resource
//! name of a DeviceClass, KEP-5004) scores the devices of that class instead of a driver, so a
//! profile can weigh, say, full GPUs above GPU partitions of the same driver. Each device the
//! class selects counts one unit, used as above; partitions count one unit each here, because
//! their shared counters belong to the pool, not to any one class.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use serde::{Deserialize, Serialize};
use unisched_cache::DraSnapshot;
use unisched_dra::pools::NodeScope;
use unisched_dra::pools::PreparedDevice;
use unisched_dra::state::LayeredCapacity;
use unisched_dra::{AllocatedState, DeviceId, DraSnapshotIndex, PoolKey, PreparedSlice, StateLayers};
use unisched_framework::{CycleState, NodeInfo, Plugin, PodInfo, PreScorePlugin, ScorePlugin, Status};

use super::ClassCapacity;
use super::state::{CycleData, NodeResult, PodState, STATE_KEY};
use crate::helper::{PluginArgs, PluginArgsError, aggregate, invalid, quote};
use crate::resource_scoring::{Strategy, score_vector};
use crate::{ResourceSpec, ScoringStrategy, ScoringStrategyType};

/// Plugin name.
pub const DEVICE_RESOURCES: &str = "DeviceResources";

/// One unit of device capacity in the utilisation arithmetic.
const UNIT: i64 = 1000;

/// `DeviceResourcesArgs`. `scoringStrategy.resources[].name` names a DRA driver, or a DeviceClass
/// as `deviceclass.resource.kubernetes.io/<class>`; an empty list scores every driver the pod's
/// allocation uses on the node, with weight 1.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceResourcesArgs {
    /// Ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// The shape and the weighted drivers; default `LeastAllocated` over every used driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scoring_strategy: Option<ScoringStrategy>,
}

impl PluginArgs for DeviceResourcesArgs {
    const KIND: &'static str = "DeviceResourcesArgs";
    fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }
    fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }
}

impl DeviceResourcesArgs {
    /// Validation in the style of NodeResourcesFitArgs.
    pub fn validate(&self) -> Result<(), PluginArgsError> {
        let mut errs = Vec::new();
        if let Some(s) = &self.scoring_strategy {
            if !s.type_.is_empty() && ScoringStrategyType::parse(&s.type_).is_none() {
                errs.push(format!(
                    "scoringStrategy.type: Unsupported value: {}: supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\"",
                    quote(&s.type_)
                ));
            }
            for (i, r) in s.resources.iter().enumerate() {
                if r.weight < 0 || r.weight > 100 {
                    errs.push(invalid(
                        &format!("scoringStrategy.resources[{i}].weight"),
                        r.weight,
                        format!("resource weight of {} not in valid range (0, 100]", r.name),
                    ));
                }
            }
            if ScoringStrategyType::parse(&s.type_) == Some(ScoringStrategyType::RequestedToCapacityRatio)
                && s.requested_to_capacity_ratio
                    .as_ref()
                    .is_none_or(|r| r.shape.is_empty())
            {
                errs.push(
                    "scoringStrategy.shape: Required value: at least one point must be specified".into(),
                );
            }
        }
        aggregate(errs)
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct DeviceResources {
    strategy: Strategy,
    /// Driver → weight; empty: every driver of the pod's allocation, weight 1.
    weights: Vec<(String, i64)>,
}

impl DeviceResources {
    /// Builds the plugin from validated args.
    pub fn new(args: &DeviceResourcesArgs) -> Result<Self, PluginArgsError> {
        args.validate()?;
        let s = args.scoring_strategy.clone().unwrap_or_default();
        let strategy = match ScoringStrategyType::parse(&s.type_) {
            Some(ScoringStrategyType::MostAllocated) => Strategy::MostAllocated,
            Some(ScoringStrategyType::RequestedToCapacityRatio) => {
                let shape: Vec<(i32, i32)> = s
                    .requested_to_capacity_ratio
                    .iter()
                    .flat_map(|r| r.shape.iter().map(|p| (p.utilization, p.score)))
                    .collect();
                Strategy::ratio(&shape)
            }
            _ => Strategy::LeastAllocated,
        };
        // `ScoringStrategy::default()` lists cpu and memory (NodeResourcesFit's default); those
        // are not drivers, so an absent strategy means "every driver".
        let weights = if args.scoring_strategy.is_none() {
            Vec::new()
        } else {
            s.resources
                .iter()
                .map(|ResourceSpec { name, weight }| (name.clone(), if *weight == 0 { 1 } else { *weight }))
                .collect()
        };
        Ok(DeviceResources { strategy, weights })
    }

    /// Per configured resource: the class's devices when it names a known DeviceClass.
    fn configured_classes(&self, state: &CycleState) -> Arc<Vec<Option<ClassCapacity>>> {
        Arc::new(
            self.weights
                .iter()
                .map(|(name, _)| ClassCapacity::new(state, name.strip_prefix(CLASS_RESOURCE_PREFIX)?))
                .collect(),
        )
    }

    fn data(state: &CycleState) -> Option<Arc<PodState>> {
        state.read::<CycleData>(STATE_KEY).ok().map(|d| d.0.clone())
    }
}

impl Plugin for DeviceResources {
    fn name(&self) -> &str {
        DEVICE_RESOURCES
    }

    unisched_framework::serves!(as_pre_score, as_score);
}

impl PreScorePlugin for DeviceResources {
    fn pre_score(&self, state: &mut CycleState, _pod: &PodInfo, _nodes: &[Arc<NodeInfo>]) -> Status {
        match Self::data(state) {
            Some(d) if !d.claims.is_empty() || d.extended.is_some() => {
                // Class selectors once per attempt, not once per node in Score.
                let classes = self.configured_classes(state);
                state.write(PRE_SCORE_KEY, ConfiguredClasses(classes));
                Status::success()
            }
            _ => Status::skip(),
        }
    }
}

/// Cycle-state key of [`ConfiguredClasses`].
const PRE_SCORE_KEY: &str = "PreScoreDeviceResources";

/// Per configured resource (aligned with the weights): the class's devices when the name is a
/// `deviceclass.resource.kubernetes.io/<class>` of a known class.
#[derive(Clone, Debug)]
struct ConfiguredClasses(Arc<Vec<Option<ClassCapacity>>>);

impl ScorePlugin for DeviceResources {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(data) = Self::data(state) else {
            return Ok(0);
        };
        let result = data
            .node_result(node.name(), || node.node().cloned())
            .map_err(Status::error)?;
        let layers = layers_with(&data.snapshot, result.as_deref());
        let mut usage = node_device_usage(&data.snapshot, node.name(), node.node().map(|n| &**n), &layers);
        let classes = match state.read::<ConfiguredClasses>(PRE_SCORE_KEY) {
            Ok(ConfiguredClasses(c)) => c.clone(),
            Err(_) => self.configured_classes(state),
        };
        for ((name, _), class) in self.weights.iter().zip(classes.iter()) {
            if name.starts_with(CLASS_RESOURCE_PREFIX) {
                let used = class
                    .as_ref()
                    .map_or((0, 0), |c| class_device_usage(c, node, &layers));
                usage.insert(name.clone(), used);
            }
        }
        let used_by_pod = pod_drivers(result.as_deref());
        Ok(score_usage(&self.strategy, &self.weights, &usage, &used_by_pod))
    }
}

/// The prefix naming a DeviceClass in the args (the implicit extended-resource name of a class).
pub const CLASS_RESOURCE_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

/// `(used, total)` milli-units of the devices of a class on the node under `layers` (which include
/// this pod's allocation there).
fn class_device_usage(class: &ClassCapacity, node: &NodeInfo, layers: &StateLayers) -> (i64, i64) {
    class.devices(node).fold((0, 0), |(used, total), dev| {
        let u = if dev.consumes.is_empty() {
            device_used(layers, &dev.id, dev.allow_multiple, &dev.capacities)
        } else if layers.is_allocated(&dev.id) {
            UNIT
        } else {
            0
        };
        (used + u, total + UNIT)
    })
}

/// The snapshot's committed and in-flight allocations, plus this pod's allocation on the node.
fn layers_with(snapshot: &DraSnapshot, result: Option<&NodeResult>) -> StateLayers {
    let mut layers: StateLayers = snapshot.state_layers();
    if let Some(r) = result {
        let mut mine = AllocatedState::new();
        for a in r.allocations.iter().chain(r.extended.as_ref().map(|(_, a)| a)) {
            mine.add_allocation(a);
        }
        layers.push(Arc::new(mine));
    }
    layers
}

/// Used and total milli-units per driver on one node.
pub(crate) type DriverUsage = BTreeMap<String, (i64, i64)>;

/// The drivers of the pod's allocation on one node.
fn pod_drivers(result: Option<&NodeResult>) -> BTreeSet<String> {
    result
        .into_iter()
        .flat_map(|r| r.allocations.iter().chain(r.extended.as_ref().map(|(_, a)| a)))
        .flat_map(|a| a.devices.iter().flat_map(|d| d.results.iter().flatten()))
        .map(|r| r.driver.clone())
        .collect()
}

/// Scores a usage table: configured drivers with their weights, or (none configured) the drivers
/// the pod uses with weight 1.
pub(crate) fn score_usage(
    strategy: &Strategy,
    weights: &[(String, i64)],
    usage: &DriverUsage,
    used_by_pod: &BTreeSet<String>,
) -> i64 {
    let entries: Vec<(i64, i64, i64)> = if weights.is_empty() {
        usage
            .iter()
            .filter(|(d, _)| used_by_pod.contains(*d))
            .map(|(_, &(u, c))| (u, c, 1))
            .collect()
    } else {
        weights
            .iter()
            .map(|(d, w)| {
                let (u, c) = usage.get(d).copied().unwrap_or((0, 0));
                (u, c, *w)
            })
            .collect()
    };
    score_vector(strategy, &entries).clamp(0, unisched_framework::MAX_NODE_SCORE)
}

pub(crate) fn slice_targets(slice: &PreparedSlice, node_name: &str, node: Option<&Node>) -> bool {
    match slice.scope() {
        NodeScope::NodeName(n) => n == node_name,
        NodeScope::Unknown => false,
        NodeScope::PerDevice => true,
        _ => node.is_some_and(|n| slice.targets(n).unwrap_or(false)),
    }
}

/// The devices that reach `node_name`: from its own slices and the node-independent slices that
/// select it, honouring per-device node selection. Only the node's slices are walked (scoring
/// runs for every feasible node; walking the whole cluster's slices each time is quadratic).
pub(crate) fn node_devices<'a>(
    index: &'a DraSnapshotIndex,
    node_name: &'a str,
    node: Option<&'a Node>,
) -> impl Iterator<Item = (&'a PreparedSlice, usize, &'a PreparedDevice)> + 'a {
    index
        .node_slices(node_name)
        .filter(move |slice| slice_targets(slice, node_name, node))
        .flat_map(move |slice| {
            slice
                .devices()
                .iter()
                .enumerate()
                .filter(move |(i, _)| {
                    !matches!(slice.scope(), NodeScope::PerDevice)
                        || node.is_some_and(|n| slice.device_targets(*i, n).unwrap_or(false))
                })
                .map(move |(i, dev)| (slice, i, dev))
        })
}

/// `numerator / denominator` in milli-units, clamped to `[0, UNIT]`.
fn milli_ratio(numerator: i128, denominator: i128) -> i64 {
    if denominator <= 0 {
        return UNIT;
    }
    ((numerator.max(0) * i128::from(UNIT)) / denominator).clamp(0, i128::from(UNIT)) as i64
}

/// Device utilisation per driver on `node_name` under `layers` (committed, in-flight and this pod's
/// allocation, see [`layers_with`]), for every driver with devices there.
pub(crate) fn node_device_usage(
    snapshot: &DraSnapshot,
    node_name: &str,
    node: Option<&Node>,
    layers: &StateLayers,
) -> DriverUsage {
    let index = snapshot.index();
    let mut usage = DriverUsage::new();
    // Counter consumption of the allocated partitions per pool on this node: (set, name) → amount.
    let mut counter_used: BTreeMap<PoolKey, BTreeMap<(String, String), i128>> = BTreeMap::new();
    for (slice, _, dev) in node_devices(index, node_name, node) {
        if !dev.consumes.is_empty() {
            let used = counter_used.entry(slice.pool().clone()).or_default();
            if layers.is_allocated(&dev.id) {
                for (set, cs) in &dev.consumes {
                    for (name, q) in cs {
                        *used.entry((set.clone(), name.clone())).or_default() += q.nanos();
                    }
                }
            }
            continue;
        }
        let used = device_used(layers, &dev.id, dev.allow_multiple, &dev.capacities);
        let e = usage.entry(slice.driver().to_string()).or_default();
        e.0 += used;
        e.1 += UNIT;
    }
    for (key, used) in &counter_used {
        let Some(pool) = index.pool(key) else {
            continue;
        };
        let e = usage.entry(key.driver.to_string()).or_default();
        for c in &pool.counters {
            let u = used.get(&(c.set.clone(), c.name.clone())).copied().unwrap_or(0);
            e.0 += milli_ratio(u, c.total.nanos());
            e.1 += UNIT;
        }
    }
    usage
}

fn device_used(
    layers: &StateLayers,
    id: &DeviceId,
    allow_multiple: bool,
    capacities: &[unisched_dra::capacity::PreparedCapacity],
) -> i64 {
    if !allow_multiple {
        return if layers.is_allocated(id) { UNIT } else { 0 };
    }
    match layers.consumed_capacity(id) {
        LayeredCapacity::Full => UNIT,
        LayeredCapacity::None if !layers.has_shares(id) => 0,
        LayeredCapacity::None => {
            if capacities.is_empty() {
                UNIT
            } else {
                0
            }
        }
        LayeredCapacity::Amounts(amounts) => {
            if capacities.is_empty() {
                return UNIT;
            }
            capacities
                .iter()
                .map(|c| {
                    let used = amounts.get(&c.name).map_or(0, |q| q.nanos());
                    milli_ratio(used, c.value.nanos())
                })
                .max()
                .unwrap_or(0)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use k8s_openapi::api::resource::v1::{
        AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult, ResourceClaim,
        ResourceClaimStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use unisched_cache::DraCache;
    use unisched_dra::testing::{dev, q, slice};

    const GPU: &str = "gpu.example.com";

    fn alloc(pool: &str, device: &str, share: Option<&str>, consumed: &[(&str, &str)]) -> AllocationResult {
        AllocationResult {
            devices: Some(DeviceAllocationResult {
                results: Some(vec![DeviceRequestAllocationResult {
                    driver: GPU.into(),
                    pool: pool.into(),
                    device: device.into(),
                    request: "gpu".into(),
                    share_id: share.map(str::to_string),
                    consumed_capacity: (!consumed.is_empty())
                        .then(|| consumed.iter().map(|(k, v)| (k.to_string(), q(v))).collect()),
                    ..Default::default()
                }]),
                config: None,
            }),
            ..Default::default()
        }
    }

    fn allocated_claim(name: &str, a: AllocationResult) -> ResourceClaim {
        ResourceClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            status: Some(ResourceClaimStatus {
                allocation: Some(a),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn result(a: AllocationResult) -> NodeResult {
        NodeResult {
            allocations: vec![a],
            ..Default::default()
        }
    }

    fn strategies() -> [(Strategy, &'static str); 2] {
        [
            (Strategy::MostAllocated, "most"),
            (Strategy::LeastAllocated, "least"),
        ]
    }

    fn score_on(snapshot: &DraSnapshot, node: &str, r: &NodeResult, strategy: &Strategy) -> i64 {
        let usage = node_device_usage(snapshot, node, None, &layers_with(snapshot, Some(r)));
        score_usage(strategy, &[], &usage, &pod_drivers(Some(r)))
    }

    /// One shareable 80Gi GPU per node; node-a already lends 40Gi of it.
    fn shared_gpus() -> Arc<DraSnapshot> {
        let cache = DraCache::new();
        for n in ["node-a", "node-b"] {
            let s = slice(&format!("{n}-gpu"), GPU, n, n).device(dev("gpu-0").multi().cap("memory", "80Gi"));
            cache.apply_slice(Arc::new(s.build())).unwrap();
        }
        cache
            .apply_claim(Arc::new(allocated_claim(
                "first",
                alloc("node-a", "gpu-0", Some("s1"), &[("memory", "40Gi")]),
            )))
            .unwrap();
        cache.snapshot()
    }

    #[test]
    fn shared_gpu_packs_with_most_and_spreads_with_least() {
        let snap = shared_gpus();
        let on_a = result(alloc("node-a", "gpu-0", Some("s2"), &[("memory", "40Gi")]));
        let on_b = result(alloc("node-b", "gpu-0", Some("s2"), &[("memory", "40Gi")]));
        let usage_a = node_device_usage(&snap, "node-a", None, &layers_with(&snap, Some(&on_a)));
        assert_eq!(usage_a.get(GPU), Some(&(1000, 1000)));
        let usage_b = node_device_usage(&snap, "node-b", None, &layers_with(&snap, Some(&on_b)));
        assert_eq!(usage_b.get(GPU), Some(&(500, 1000)));
        for (s, name) in strategies() {
            let (a, b) = (
                score_on(&snap, "node-a", &on_a, &s),
                score_on(&snap, "node-b", &on_b, &s),
            );
            match name {
                "most" => assert_eq!((a, b), (100, 50)),
                _ => assert_eq!((a, b), (0, 50)),
            }
        }
        // Without the pod's allocation only the committed share counts.
        assert_eq!(
            node_device_usage(&snap, "node-a", None, &layers_with(&snap, None)).get(GPU),
            Some(&(500, 1000))
        );
    }

    #[test]
    fn partitions_count_through_their_counters() {
        let cache = DraCache::new();
        for n in ["node-a", "node-b"] {
            let s = slice(&format!("{n}-gpu"), GPU, n, n)
                .counter_set("gpu-0-counters", &[("memory", "80Gi")])
                .device(dev("gpu-0").consumes("gpu-0-counters", &[("memory", "80Gi")]))
                .device(dev("gpu-0-half-0").consumes("gpu-0-counters", &[("memory", "40Gi")]))
                .device(dev("gpu-0-half-1").consumes("gpu-0-counters", &[("memory", "40Gi")]));
            cache.apply_slice(Arc::new(s.build())).unwrap();
        }
        cache
            .apply_claim(Arc::new(allocated_claim(
                "first",
                alloc("node-a", "gpu-0-half-0", None, &[]),
            )))
            .unwrap();
        let snap = cache.snapshot();
        let on_a = result(alloc("node-a", "gpu-0-half-1", None, &[]));
        let on_b = result(alloc("node-b", "gpu-0-half-0", None, &[]));
        // Partitions are views of the counter, not devices of their own: one unit per counter.
        assert_eq!(
            node_device_usage(&snap, "node-a", None, &layers_with(&snap, Some(&on_a))).get(GPU),
            Some(&(1000, 1000))
        );
        assert_eq!(
            node_device_usage(&snap, "node-b", None, &layers_with(&snap, Some(&on_b))).get(GPU),
            Some(&(500, 1000))
        );
        let most = Strategy::MostAllocated;
        assert!(score_on(&snap, "node-a", &on_a, &most) > score_on(&snap, "node-b", &on_b, &most));
    }

    #[test]
    fn exclusive_devices_count_one_unit_each() {
        let cache = DraCache::new();
        let s = slice("a-gpu", GPU, "node-a", "node-a").devices((0..4).map(|i| dev(&format!("gpu-{i}"))));
        cache.apply_slice(Arc::new(s.build())).unwrap();
        cache
            .apply_claim(Arc::new(allocated_claim(
                "first",
                alloc("node-a", "gpu-0", None, &[]),
            )))
            .unwrap();
        let snap = cache.snapshot();
        let mine = result(alloc("node-a", "gpu-1", None, &[]));
        assert_eq!(
            node_device_usage(&snap, "node-a", None, &layers_with(&snap, Some(&mine))).get(GPU),
            Some(&(2000, 4000))
        );
        assert_eq!(score_on(&snap, "node-a", &mine, &Strategy::MostAllocated), 50);
        assert_eq!(score_on(&snap, "node-a", &mine, &Strategy::LeastAllocated), 50);
        // Other nodes see nothing of node-a's devices.
        assert!(node_device_usage(&snap, "node-b", None, &layers_with(&snap, None)).is_empty());
    }

    #[test]
    fn weights_and_ratio_shape() {
        let mut usage = DriverUsage::new();
        usage.insert("a".into(), (1000, 1000));
        usage.insert("b".into(), (0, 1000));
        let none = BTreeSet::new();
        let most = Strategy::MostAllocated;
        // Weighted mean: (100·3 + 0·1) / 4.
        assert_eq!(
            score_usage(&most, &[("a".into(), 3), ("b".into(), 1)], &usage, &none),
            75
        );
        // A configured driver missing on the node is ignored; nothing configured and nothing used → 0.
        assert_eq!(
            score_usage(&most, &[("a".into(), 1), ("c".into(), 5)], &usage, &none),
            100
        );
        assert_eq!(score_usage(&most, &[], &usage, &none), 0);
        // Unconfigured: only the drivers the pod uses.
        let b: BTreeSet<String> = ["b".to_string()].into();
        assert_eq!(score_usage(&most, &[], &usage, &b), 0);
        // RequestedToCapacityRatio: 0% → 0, 100% → 10 (×10).
        let ratio = Strategy::ratio(&[(0, 0), (100, 10)]);
        assert_eq!(score_usage(&ratio, &[("a".into(), 1)], &usage, &none), 100);
    }

    #[test]
    fn args_decode_and_validate() {
        let a: DeviceResourcesArgs = serde_json::from_value(serde_json::json!({
            "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": GPU, "weight": 2}]}
        }))
        .unwrap();
        let p = DeviceResources::new(&a).unwrap();
        assert_eq!(p.strategy, Strategy::MostAllocated);
        assert_eq!(p.weights, vec![(GPU.to_string(), 2)]);
        let d = DeviceResources::new(&DeviceResourcesArgs::default()).unwrap();
        assert_eq!(d.strategy, Strategy::LeastAllocated);
        assert!(d.weights.is_empty());
        let bad = DeviceResourcesArgs {
            scoring_strategy: Some(ScoringStrategy {
                type_: "Packed".into(),
                resources: vec![ResourceSpec::new("x", 101)],
                requested_to_capacity_ratio: None,
            }),
            ..Default::default()
        };
        let err = DeviceResources::new(&bad).unwrap_err().to_string();
        assert!(err.contains("Unsupported value: \"Packed\""), "{err}");
        assert!(err.contains("resources[0].weight"), "{err}");
        let no_shape = DeviceResourcesArgs {
            scoring_strategy: Some(ScoringStrategy {
                type_: "RequestedToCapacityRatio".into(),
                resources: vec![],
                requested_to_capacity_ratio: None,
            }),
            ..Default::default()
        };
        assert!(
            DeviceResources::new(&no_shape)
                .unwrap_err()
                .to_string()
                .contains("shape")
        );
    }
}

//! Pod request math: how much of a node a pod occupies.
//!
//! This follows upstream's `k8s.io/component-helpers/resource` `PodRequests`/`PodLimits` and the
//! scheduler's `PodInfo.calculateResource`, because a pod that unisched places must fit by the same
//! arithmetic the kubelet uses to admit it. Amounts are added up as exact [`Quantity`] values, per
//! resource name, and converted to scheduler units ([`Resource`]) only at the end — exactly as
//! upstream does, so that two containers asking for `0.5` bytes each need one byte, not two.
//!
//! # Rules
//!
//! 1. Regular containers are summed.
//! 2. Init containers are walked in order. A restartable one (a sidecar, `restartPolicy: Always`)
//!    keeps running: it is added to the pod total and to a running sidecar sum, and its "use" is the
//!    sidecar sum so far. A classic init container's use is its own request plus the sidecars
//!    started before it. The pod needs, per resource, `max(total, highest init use)`.
//! 3. Pod-level requests (`spec.resources.requests`), when set and not skipped, replace the computed
//!    value of every pod-level resource they name: `cpu`, `memory` and `hugepages-*` (upstream's
//!    `IsSupportedPodLevelResource`; the API only lets hugepages be set as limits, from which the
//!    request is defaulted). Other resources keep the container aggregate.
//! 4. `spec.overhead` (RuntimeClass) is added unless excluded.
//! 5. Non-zero defaults for scoring (`100m` CPU, `200Mi` memory) are applied per container, only to
//!    resources that container does not list at all (an explicit `0` stays `0`). When pod-level
//!    requests are set, a default is applied only for a resource missing both at pod level and in
//!    every container (that is, absent from the computed requests).
//!
//! # Node-allocatable DRA claims (KEP-5517)
//!
//! `pod.status.nodeAllocatableResourceClaimStatuses` records, per claim, the cpu/memory/hugepages a
//! DRA device takes out of the node's allocatable. The k8s-openapi doc comments are normative: the
//! kubelet adds a claim's `mapping` quantity and its `perPod + perContainer × references` overhead to
//! the pod-level cgroup, and the claim's devices stay allocated for the pod's whole life. We follow
//! upstream's newest `getDRANodeAllocatableResources`:
//!
//! * **Pod-fixed part** — every claim's `mapping` quantities and `overhead[].perPod`, counted once per
//!   claim however many containers reference it (also when none does), and added *after* the init
//!   container maximum: the device is held while the init containers run as well as afterwards.
//! * **Per-container part** — `overhead[].perContainer`, charged once for each container of the pod
//!   listed in the claim's `containers`, as part of that container's own usage. So for a regular
//!   container or a sidecar it joins the long-running sum; for a classic init container it joins
//!   only that init container's use (the peak rule) and is not added on top of regular containers.
//!   Names in `containers` that match no container of the pod are charged to the pod-fixed part, to
//!   be safe.
//! * Several claims referenced by one container simply add up.
//!
//! Note the consequence: a claim referenced only by an init container still charges its mapping and
//! per-pod overhead for the pod's whole life (the claim is not released when the init container
//! ends); only its per-container overhead follows the init peak rule.
//!
//! For limits (`pod_limits`), as upstream, DRA amounts are dropped for resources no container
//! declares a limit for (hugepages excepted), since the kubelet leaves such limits unset.
//!
//! # Invalid quantities
//!
//! A quantity that does not parse is skipped (counted as absent) and reported in
//! [`PodResources::invalid`]; nothing here panics on input.
//!
//! # In-place resize
//!
//! With [`PodRequestOptions::use_status_resources`] (always, in [`pod_resources`]), a pod counts
//! per resource the largest of three sums built by the rules above: over the container specs, over
//! what the container statuses report as allocated, and over what they report as actuated
//! (`resources`); or, when the kubelet reports the pod-level `status.allocatedResources` and
//! `status.resources.requests`, those two in place of the container status sums. Pod-level spec
//! requests compete with the pod-level status the same way. An infeasible resize counts its status
//! only. The `resize` module explains why and which list each container contributes. Claim amounts
//! join the spec and allocated container sums (the kubelet leaves them out of container statuses
//! but includes them in pod-level ones), as upstream's newest `AggregateContainerRequests` does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, NodeAllocatableResourceClaimStatus, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use crate::resize::{
    ApiList, Source, container_limits, container_requests, container_status, has_status_resources,
    is_pod_resize_infeasible, pod_level_status_lists, pod_status_limits, pod_status_requests,
};
use crate::resource::{CPU, MEMORY, PODS, is_hugepages};
use crate::{InvalidQuantity, Quantity, Resource};

/// Default CPU request in milli-cores used by scoring for containers that request none.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Default memory request in bytes (200Mi) used by scoring for containers that request none.
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Options for [`pod_requests`] and [`pod_limits`] (upstream `PodResourcesOptions`).
#[derive(Clone, Debug, Default)]
pub struct PodRequestOptions {
    /// When true, ignore `pod.spec.resources` (the `PodLevelResources` feature off).
    pub skip_pod_level_resources: bool,
    /// When true, do not add `pod.spec.overhead`.
    pub exclude_overhead: bool,
    /// Amounts (scheduler units) to use for every resource a container does not list in its requests.
    /// Only non-zero entries are applied; ignored by [`pod_limits`].
    pub non_missing_container_requests: Option<Resource>,
    /// Add the node-allocatable DRA claims of `pod.status.nodeAllocatableResourceClaimStatuses`
    /// (KEP-5517).
    pub include_node_allocatable_claims: bool,
    /// Count, per resource, the largest of the spec and what the container statuses report as
    /// allocated and actuated (upstream `UseStatusResources`, the InPlacePodVerticalScaling
    /// feature; see the `resize` module).
    pub use_status_resources: bool,
    /// With `use_status_resources`, read the pod-level status (`status.allocatedResources`,
    /// `status.resources`) too (upstream `InPlacePodLevelResourcesVerticalScalingEnabled`).
    pub pod_level_status_resources: bool,
}

/// What the scheduler caches per pod: exact requests and the non-zero variant used by scoring.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodResources {
    /// The pod's requests (pod-level resources, overhead and node-allocatable DRA claims included).
    pub requests: Resource,
    /// The same with the scoring defaults for missing cpu/memory requests applied. Only
    /// `milli_cpu` and `memory` can differ from `requests`.
    pub non_zero: Resource,
    /// Quantities in the pod that did not parse and were counted as absent.
    pub invalid: Vec<InvalidQuantity>,
}

/// Exact per-name amounts, the Go `v1.ResourceList`: a missing key is "not set", unlike zero.
type List = BTreeMap<String, Quantity>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Requests,
    Limits,
}

/// One pod-wide sum: which list of every container it adds up.
#[derive(Clone, Copy)]
struct View {
    kind: Kind,
    source: Source,
    /// The pod's resize is infeasible: status lists do not fall back to the spec.
    infeasible: bool,
}

impl View {
    const SPEC_REQUESTS: View = View {
        kind: Kind::Requests,
        source: Source::Spec,
        infeasible: false,
    };
    const SPEC_LIMITS: View = View {
        kind: Kind::Limits,
        source: Source::Spec,
        infeasible: false,
    };
}

/// The DRA node-allocatable amounts of a pod, split by lifetime.
#[derive(Default)]
struct DraParts {
    /// Charged for the pod's whole life: mappings, per-pod overhead, unmatched references.
    pod_fixed: List,
    /// Per-container overhead by container name, charged as part of that container's usage.
    per_container: BTreeMap<String, List>,
}

/// Collects parse failures without duplicates.
#[derive(Default)]
struct Invalid(Vec<InvalidQuantity>);

impl Invalid {
    fn push(&mut self, resource: &str, value: &str) {
        if !self.0.iter().any(|i| i.resource == resource && i.value == value) {
            self.0.push(InvalidQuantity {
                resource: resource.to_string(),
                value: value.to_string(),
            });
        }
    }

    fn parse(&mut self, resource: &str, q: &ApiQuantity) -> Option<Quantity> {
        match Quantity::from_api(q) {
            Ok(q) => Some(q),
            Err(_) => {
                self.push(resource, &q.0);
                None
            }
        }
    }
}

fn add_to(list: &mut List, name: &str, q: &Quantity) {
    match list.get_mut(name) {
        Some(v) => *v = &*v + q,
        None => {
            list.insert(name.to_string(), q.clone());
        }
    }
}

fn add_all(list: &mut List, other: &List) {
    for (name, q) in other {
        add_to(list, name, q);
    }
}

fn max_all(list: &mut List, other: &List) {
    for (name, q) in other {
        match list.get_mut(name) {
            Some(v) if *q > *v => *v = q.clone(),
            Some(_) => {}
            None => {
                list.insert(name.clone(), q.clone());
            }
        }
    }
}

fn parse_list(src: Option<&BTreeMap<String, ApiQuantity>>, invalid: &mut Invalid) -> List {
    let mut out = List::new();
    for (name, q) in src.into_iter().flatten() {
        if let Some(q) = invalid.parse(name, q) {
            out.insert(name.clone(), q);
        }
    }
    out
}

fn to_resource(list: &List) -> Resource {
    let mut r = Resource::default();
    for (name, q) in list {
        r.add_quantity(name, q);
    }
    r
}

/// A [`Resource`] in scheduler units as exact quantities (non-zero entries; pods excluded).
fn resource_to_list(r: &Resource) -> List {
    r.iter_nonzero()
        .filter(|(name, _)| *name != PODS)
        .map(|(name, v)| {
            let q = if name == CPU {
                Quantity::from_milli(v)
            } else {
                Quantity::from_i64(v)
            };
            (name.to_string(), q)
        })
        .collect()
}

/// cpu, memory and hugepages-* may be set at pod level (upstream `IsSupportedPodLevelResource`).
fn is_pod_level_resource(name: &str) -> bool {
    name == CPU || name == MEMORY || is_hugepages(name)
}

fn pod_level(pod: &Pod) -> Option<&ResourceRequirements> {
    pod.spec.as_ref()?.resources.as_ref()
}

/// True when `spec.resources.requests` names a pod-level resource.
fn pod_level_requests_set(pod: &Pod) -> bool {
    pod_level(pod)
        .and_then(|r| r.requests.as_ref())
        .is_some_and(|m| m.keys().any(|k| is_pod_level_resource(k)))
}

/// True when `spec.resources.requests` or `.limits` names a pod-level resource.
fn pod_level_resources_set(pod: &Pod) -> bool {
    pod_level_requests_set(pod)
        || pod_level(pod)
            .and_then(|r| r.limits.as_ref())
            .is_some_and(|m| m.keys().any(|k| is_pod_level_resource(k)))
}

fn is_restartable(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

fn container_list(pod: &Pod, c: &Container, view: View, invalid: &mut Invalid) -> List {
    let status = match view.source {
        Source::Spec => None,
        Source::Allocated | Source::Actuated => container_status(pod, &c.name),
    };
    let src = match view.kind {
        Kind::Requests => container_requests(c, status, view.source, view.infeasible),
        Kind::Limits => container_limits(c, status, view.source, view.infeasible),
    };
    parse_list(src, invalid)
}

/// The pod-level resources named in `src`, parsed; other names are ignored.
fn pod_level_list(src: Option<&ApiList>, invalid: &mut Invalid) -> List {
    let mut out = List::new();
    for (name, q) in src.into_iter().flatten() {
        if is_pod_level_resource(name)
            && let Some(q) = invalid.parse(name, q)
        {
            out.insert(name.clone(), q);
        }
    }
    out
}

fn claim_statuses(pod: &Pod) -> &[NodeAllocatableResourceClaimStatus] {
    pod.status
        .as_ref()
        .and_then(|s| s.node_allocatable_resource_claim_statuses.as_deref())
        .unwrap_or(&[])
}

fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec
        .as_ref()
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(s.containers.iter()))
}

/// Splits the claims' amounts into pod-fixed and per-container parts (see the module docs).
fn dra_parts(pod: &Pod, statuses: &[NodeAllocatableResourceClaimStatus], invalid: &mut Invalid) -> DraParts {
    let mut parts = DraParts::default();
    for claim in statuses {
        for m in claim.mapping.iter().flatten() {
            if let Some(q) = invalid.parse(&m.name, &m.quantity) {
                add_to(&mut parts.pod_fixed, &m.name, &q);
            }
        }
        let mut per_container = List::new();
        for o in claim.overhead.iter().flatten() {
            if let Some(q) = o.per_pod.as_ref().and_then(|q| invalid.parse(&o.name, q)) {
                add_to(&mut parts.pod_fixed, &o.name, &q);
            }
            if let Some(q) = o.per_container.as_ref().and_then(|q| invalid.parse(&o.name, q)) {
                add_to(&mut per_container, &o.name, &q);
            }
        }
        if per_container.is_empty() {
            continue;
        }
        let refs = claim.containers.as_deref().unwrap_or(&[]);
        let mut known: i64 = 0;
        for c in all_containers(pod) {
            if refs.contains(&c.name) {
                known += 1;
                add_all(
                    parts.per_container.entry(c.name.clone()).or_default(),
                    &per_container,
                );
            }
        }
        let unknown = i64::try_from(refs.len())
            .unwrap_or(i64::MAX)
            .saturating_sub(known);
        if unknown > 0 {
            for (name, q) in &per_container {
                let charged = q
                    .mul_i64(unknown)
                    .unwrap_or_else(|| Quantity::from_nanos(i128::MAX, q.format()));
                add_to(&mut parts.pod_fixed, name, &charged);
            }
        }
    }
    parts
}

/// Drops DRA amounts for resources no container declares a limit for (hugepages excepted).
fn drop_undeclared_limits(pod: &Pod, parts: &mut DraParts) {
    let declared = |name: &str| {
        is_hugepages(name)
            || all_containers(pod).any(|c| {
                c.resources
                    .as_ref()
                    .and_then(|r| r.limits.as_ref())
                    .is_some_and(|l| l.contains_key(name))
            })
    };
    parts.pod_fixed.retain(|name, _| declared(name));
    for list in parts.per_container.values_mut() {
        list.retain(|name, _| declared(name));
    }
}

/// The node-allocatable claim amounts of `statuses` that count towards `kind`.
fn dra_for(
    pod: &Pod,
    statuses: &[NodeAllocatableResourceClaimStatus],
    kind: Kind,
    invalid: &mut Invalid,
) -> DraParts {
    if statuses.is_empty() {
        return DraParts::default();
    }
    let mut dra = dra_parts(pod, statuses, invalid);
    if kind == Kind::Limits {
        drop_undeclared_limits(pod, &mut dra);
    }
    dra
}

/// The container aggregate of one [`View`] with sidecars, init peak and DRA claims (upstream
/// `aggregateContainerResourcesByFn`).
fn aggregate(pod: &Pod, dra: &DraParts, non_missing: &List, view: View, invalid: &mut Invalid) -> List {
    let empty = List::new();
    let mut result = List::new();
    let Some(spec) = pod.spec.as_ref() else {
        add_all(&mut result, &dra.pod_fixed);
        return result;
    };
    let own = |c: &Container, invalid: &mut Invalid| {
        let mut list = container_list(pod, c, view, invalid);
        for (name, q) in non_missing {
            if !list.contains_key(name) {
                list.insert(name.clone(), q.clone());
            }
        }
        list
    };
    for c in &spec.containers {
        add_all(&mut result, &own(c, invalid));
        add_all(&mut result, dra.per_container.get(&c.name).unwrap_or(&empty));
    }
    let mut sidecars = List::new();
    let mut init_peak = List::new();
    for c in spec.init_containers.iter().flatten() {
        let mut usage = own(c, invalid);
        add_all(&mut usage, dra.per_container.get(&c.name).unwrap_or(&empty));
        if is_restartable(c) {
            add_all(&mut result, &usage);
            add_all(&mut sidecars, &usage);
            max_all(&mut init_peak, &sidecars);
        } else {
            add_all(&mut usage, &sidecars);
            max_all(&mut init_peak, &usage);
        }
    }
    max_all(&mut result, &init_peak);
    add_all(&mut result, &dra.pod_fixed);
    result
}

/// Whether the status lists count for this pod, and whether its resize is infeasible.
fn status_rule(pod: &Pod, opts: &PodRequestOptions) -> Option<bool> {
    if !opts.use_status_resources {
        return None;
    }
    let infeasible = is_pod_resize_infeasible(pod);
    // Without status amounts every status sum falls back to the spec, and the maximum is the spec.
    (infeasible || has_status_resources(pod)).then_some(infeasible)
}

/// The container requests (upstream `AggregateContainerRequests`): the spec sum, or with status
/// resources the per-resource maximum of the spec, allocated and actuated sums (see the `resize`
/// module). Claim amounts join the spec and allocated sums, as the kubelet leaves them out of the
/// container statuses; the pod-level status lists already contain them.
fn container_requests_list(
    pod: &Pod,
    statuses: &[NodeAllocatableResourceClaimStatus],
    non_missing: &List,
    opts: &PodRequestOptions,
    invalid: &mut Invalid,
) -> List {
    let dra = dra_for(pod, statuses, Kind::Requests, invalid);
    let spec = aggregate(pod, &dra, non_missing, View::SPEC_REQUESTS, invalid);
    let Some(infeasible) = status_rule(pod, opts) else {
        return spec;
    };
    let pod_level = pod_status_requests(pod).filter(|_| opts.pod_level_status_resources);
    let (allocated, actuated) = match pod_level {
        Some((allocated, actuated)) => (
            parse_list(Some(allocated), invalid),
            parse_list(Some(actuated), invalid),
        ),
        None => {
            let view = |source| View {
                kind: Kind::Requests,
                source,
                infeasible,
            };
            let allocated = aggregate(pod, &dra, non_missing, view(Source::Allocated), invalid);
            let no_dra = DraParts::default();
            let actuated = aggregate(pod, &no_dra, non_missing, view(Source::Actuated), invalid);
            (allocated, actuated)
        }
    };
    let mut out = if infeasible { List::new() } else { spec };
    max_all(&mut out, &allocated);
    max_all(&mut out, &actuated);
    out
}

/// The container limits (upstream `AggregateContainerLimits`): the spec sum, or with status
/// resources the per-resource maximum of the spec and actuated sums. Claim amounts join the spec
/// sum only: the kubelet includes them in the limits it actuates.
fn container_limits_list(
    pod: &Pod,
    statuses: &[NodeAllocatableResourceClaimStatus],
    opts: &PodRequestOptions,
    invalid: &mut Invalid,
) -> List {
    let dra = dra_for(pod, statuses, Kind::Limits, invalid);
    let none = List::new();
    let spec = aggregate(pod, &dra, &none, View::SPEC_LIMITS, invalid);
    let Some(infeasible) = status_rule(pod, opts) else {
        return spec;
    };
    let actuated = match pod_status_limits(pod).filter(|_| opts.pod_level_status_resources) {
        Some(limits) => parse_list(Some(limits), invalid),
        None => {
            let view = View {
                kind: Kind::Limits,
                source: Source::Actuated,
                infeasible,
            };
            aggregate(pod, &DraParts::default(), &none, view, invalid)
        }
    };
    let mut out = if infeasible { List::new() } else { spec };
    max_all(&mut out, &actuated);
    out
}

/// The pod-level requests or limits that replace the container aggregate: `spec.resources`, or
/// while pod-level resources are resized in place, the per-resource maximum of it and the
/// pod-level status lists (without the spec when the resize is infeasible).
fn effective_pod_level(
    pod: &Pod,
    spec: Option<&ApiList>,
    kind: Kind,
    opts: &PodRequestOptions,
    invalid: &mut Invalid,
) -> List {
    let status_lists = (opts.use_status_resources && opts.pod_level_status_resources)
        .then(|| pod_level_status_lists(pod, kind == Kind::Limits))
        .flatten();
    let Some(status_lists) = status_lists else {
        return pod_level_list(spec, invalid);
    };
    let mut out = if is_pod_resize_infeasible(pod) {
        List::new()
    } else {
        pod_level_list(spec, invalid)
    };
    for list in status_lists {
        max_all(&mut out, &pod_level_list(Some(list), invalid));
    }
    out
}

/// Upstream `PodRequests` over exact quantities, with explicit claim statuses.
fn requests_list(
    pod: &Pod,
    statuses: &[NodeAllocatableResourceClaimStatus],
    opts: &PodRequestOptions,
    invalid: &mut Invalid,
) -> List {
    let non_missing = opts
        .non_missing_container_requests
        .as_ref()
        .map(resource_to_list)
        .unwrap_or_default();
    let mut reqs = container_requests_list(pod, statuses, &non_missing, opts, invalid);
    if !opts.skip_pod_level_resources && pod_level_requests_set(pod) {
        let spec = pod_level(pod).and_then(|r| r.requests.as_ref());
        reqs.extend(effective_pod_level(pod, spec, Kind::Requests, opts, invalid));
    }
    if !opts.exclude_overhead {
        let overhead = parse_list(pod.spec.as_ref().and_then(|s| s.overhead.as_ref()), invalid);
        add_all(&mut reqs, &overhead);
    }
    reqs
}

/// Upstream `PodLimits` over exact quantities.
fn limits_list(pod: &Pod, opts: &PodRequestOptions, invalid: &mut Invalid) -> List {
    let statuses = if opts.include_node_allocatable_claims {
        claim_statuses(pod)
    } else {
        &[]
    };
    let mut limits = container_limits_list(pod, statuses, opts, invalid);
    if !opts.skip_pod_level_resources && pod_level_resources_set(pod) {
        let spec = pod_level(pod).and_then(|r| r.limits.as_ref());
        limits.extend(effective_pod_level(pod, spec, Kind::Limits, opts, invalid));
    }
    if !opts.exclude_overhead {
        let overhead = parse_list(pod.spec.as_ref().and_then(|s| s.overhead.as_ref()), invalid);
        for (name, q) in &overhead {
            if let Some(v) = limits.get_mut(name)
                && !v.is_zero()
            {
                *v = &*v + q;
            }
        }
    }
    limits
}

fn statuses_for<'a>(pod: &'a Pod, opts: &PodRequestOptions) -> &'a [NodeAllocatableResourceClaimStatus] {
    if opts.include_node_allocatable_claims {
        claim_statuses(pod)
    } else {
        &[]
    }
}

/// The pod's total requests (upstream `PodRequests`); see the module docs for the rules.
/// Quantities that do not parse count as absent; use [`pod_requests_checked`] to see them.
pub fn pod_requests(pod: &Pod, opts: &PodRequestOptions) -> Resource {
    pod_requests_checked(pod, opts).0
}

/// Like [`pod_requests`], also returning the quantities that did not parse.
pub fn pod_requests_checked(pod: &Pod, opts: &PodRequestOptions) -> (Resource, Vec<InvalidQuantity>) {
    let mut invalid = Invalid::default();
    let list = requests_list(pod, statuses_for(pod, opts), opts, &mut invalid);
    (to_resource(&list), invalid.0)
}

/// Like [`pod_requests`], but with the given claim statuses in place of the pod's own
/// `status.nodeAllocatableResourceClaimStatuses` (whatever `include_node_allocatable_claims` says).
/// This is the "pod as it would be on this node" demand the DRA Filter checks, without cloning the pod.
pub fn pod_requests_with_claims(
    pod: &Pod,
    statuses: &[NodeAllocatableResourceClaimStatus],
    opts: &PodRequestOptions,
) -> Resource {
    let mut invalid = Invalid::default();
    to_resource(&requests_list(pod, statuses, opts, &mut invalid))
}

/// The pod's total limits (upstream `PodLimits`): the same container rules over limits, pod-level
/// limits replacing cpu/memory/hugepages when any pod-level resource is set, overhead added only to
/// limits that are set and non-zero. A resource with no limit anywhere is absent (unlimited).
pub fn pod_limits(pod: &Pod, opts: &PodRequestOptions) -> Resource {
    let mut invalid = Invalid::default();
    to_resource(&limits_list(pod, opts, &mut invalid))
}

/// What the scheduler's own accounting uses: every feature the options stand for is on in the
/// Kubernetes release unisched follows (InPlacePodVerticalScaling is locked on,
/// InPlacePodLevelResourcesVerticalScaling defaults on and unisched implements only that).
fn full_options() -> PodRequestOptions {
    PodRequestOptions {
        include_node_allocatable_claims: true,
        use_status_resources: true,
        pod_level_status_resources: true,
        ..PodRequestOptions::default()
    }
}

/// Computes what the scheduler caches per pod (upstream `PodInfo.calculateResource`): requests with
/// pod-level resources, overhead and node-allocatable DRA claims, and the non-zero variant.
pub fn pod_resources(pod: &Pod) -> PodResources {
    let mut invalid = Invalid::default();
    let opts = full_options();
    let statuses = claim_statuses(pod);
    let requests = requests_list(pod, statuses, &opts, &mut invalid);

    let mut defaults = Resource::default();
    let pod_level_set = pod_level_requests_set(pod);
    if !pod_level_set || !requests.contains_key(CPU) {
        defaults.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
    }
    if !pod_level_set || !requests.contains_key(MEMORY) {
        defaults.memory = DEFAULT_MEMORY_REQUEST;
    }
    let non_zero = if defaults.is_zero() {
        to_resource(&requests)
    } else {
        let opts = PodRequestOptions {
            non_missing_container_requests: Some(defaults),
            ..full_options()
        };
        // Parse failures were already recorded by the first pass.
        to_resource(&requests_list(pod, statuses, &opts, &mut Invalid::default()))
    };
    PodResources {
        requests: to_resource(&requests),
        non_zero,
        invalid: invalid.0,
    }
}

/// What the given node-allocatable claim statuses add to the pod's requests, in scheduler units:
/// `pod_requests(pod with statuses) − pod_requests(pod without any)`, with pod-level resources and
/// overhead included as in [`pod_resources`]. Never negative. Because the difference is taken in
/// scheduler units, `requests without claims + footprint == requests with claims` exactly.
///
/// When pod-level requests cover cpu/memory, the footprint for those is zero: pod-level requests
/// must already include the claims (upstream validates this), so nothing is added on top.
pub fn node_allocatable_claim_footprint(
    statuses: &[NodeAllocatableResourceClaimStatus],
    pod: &Pod,
) -> Resource {
    let opts = full_options();
    let mut invalid = Invalid::default();
    let with = to_resource(&requests_list(pod, statuses, &opts, &mut invalid));
    let without = to_resource(&requests_list(pod, &[], &opts, &mut invalid));
    let mut footprint = with;
    footprint.sub(&without);
    footprint.scalar_resources.retain(|_, v| *v != 0);
    footprint
}

//! In-place pod resize (InPlacePodVerticalScaling): which of a pod's resource lists count.
//!
//! A running pod's requests can change without restarting it. During the change three lists can
//! disagree: the spec (what was asked for), the *allocated* amounts (what the kubelet admitted,
//! `containerStatuses[].allocatedResources`, or pod-level `status.allocatedResources`) and the
//! *actuated* amounts (what the container runtime has configured, `containerStatuses[].resources`,
//! or pod-level `status.resources`). Until the resize settles, the node must keep room for the
//! largest of them: a pod shrinking its spec still holds its old amount until the kubelet has
//! applied the change, and a pod growing its spec holds the new amount from the moment it asks.
//! So the scheduler counts, per resource, the maximum of the three pod-wide sums (each sum built by
//! the ordinary container, sidecar and init-container rules). The maximum is taken over the sums,
//! not per container: two containers trading `1 → 2` and `2 → 1` CPUs still need 3 CPUs, not 4.
//!
//! A resize the kubelet declared impossible (condition `PodResizePending` with reason
//! `Infeasible`) will never be applied, so its spec is ignored and only the status lists count.
//!
//! This module says which list a container or the pod contributes to each of those sums; the sums
//! themselves are made by `requests`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

/// The condition type the kubelet sets while a resize waits.
const POD_RESIZE_PENDING: &str = "PodResizePending";
/// The `PodResizePending` reason of a resize the node can never satisfy.
const REASON_INFEASIBLE: &str = "Infeasible";
/// The `PodResizePending` reason of a resize that waits for room on the node.
const REASON_DEFERRED: &str = "Deferred";

/// An API resource list, as the pod object holds it.
pub(crate) type ApiList = BTreeMap<String, ApiQuantity>;

/// Which of a container's lists a pod-wide sum is built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// `resources.requests` / `resources.limits` of the container spec.
    Spec,
    /// `allocatedResources` of the container status (requests only).
    Allocated,
    /// `resources` of the container status.
    Actuated,
}

/// The reason of the pod's `PodResizePending` condition, when it has one (the first one counts).
fn resize_pending_reason(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == POD_RESIZE_PENDING)
        .map(|c| c.reason.as_deref().unwrap_or(""))
}

/// The kubelet declared the pod's pending resize impossible: its spec will never be applied.
pub fn is_pod_resize_infeasible(pod: &Pod) -> bool {
    resize_pending_reason(pod) == Some(REASON_INFEASIBLE)
}

/// The kubelet postponed the pod's resize until the node has room for it.
pub fn is_pod_resize_deferred(pod: &Pod) -> bool {
    resize_pending_reason(pod) == Some(REASON_DEFERRED)
}

fn status(pod: &Pod) -> Option<&PodStatus> {
    pod.status.as_ref()
}

/// The status of the (regular or init) container with this name; regular ones are looked up first.
pub(crate) fn container_status<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    let status = status(pod)?;
    let regular = status.container_statuses.iter().flatten();
    let init = status.init_container_statuses.iter().flatten();
    regular.chain(init).find(|s| s.name == name)
}

/// True when the pod's status reports any allocated or actuated amount, at container or pod level.
/// Without one, every status list falls back to the spec and the maximum is the spec itself.
pub(crate) fn has_status_resources(pod: &Pod) -> bool {
    let Some(status) = status(pod) else {
        return false;
    };
    let reported = |s: &ContainerStatus| s.allocated_resources.is_some() || s.resources.is_some();
    status.allocated_resources.is_some()
        || status.resources.is_some()
        || status.container_statuses.iter().flatten().any(reported)
        || status.init_container_statuses.iter().flatten().any(reported)
}

/// The requests a container contributes to the sum built from `source`. The status lists fall
/// back, when the status does not report them, to the allocated amount and then to the spec,
/// except in an infeasible resize, whose spec never counts (the container then contributes
/// nothing).
pub(crate) fn container_requests<'a>(
    container: &'a Container,
    status: Option<&'a ContainerStatus>,
    source: Source,
    infeasible: bool,
) -> Option<&'a ApiList> {
    let spec = || container.resources.as_ref().and_then(|r| r.requests.as_ref());
    let allocated = status.and_then(|s| s.allocated_resources.as_ref());
    let actuated = status
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref());
    let fallback = || if infeasible { None } else { spec() };
    match source {
        Source::Spec => spec(),
        Source::Allocated => allocated.or_else(fallback),
        Source::Actuated => actuated.or(allocated).or_else(fallback),
    }
}

/// The limits a container contributes to the sum built from `source` (no allocated limits exist:
/// `Allocated` reads like `Actuated`).
pub(crate) fn container_limits<'a>(
    container: &'a Container,
    status: Option<&'a ContainerStatus>,
    source: Source,
    infeasible: bool,
) -> Option<&'a ApiList> {
    let spec = || container.resources.as_ref().and_then(|r| r.limits.as_ref());
    let actuated = status
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.limits.as_ref());
    match source {
        Source::Spec => spec(),
        Source::Allocated | Source::Actuated => actuated.or_else(|| if infeasible { None } else { spec() }),
    }
}

/// The pod-level allocated and actuated requests (`status.allocatedResources`,
/// `status.resources.requests`), when the kubelet reports both: they already sum every container
/// and the node-allocatable claims, so they replace the per-container status sums.
pub(crate) fn pod_status_requests(pod: &Pod) -> Option<(&ApiList, &ApiList)> {
    let status = status(pod)?;
    let allocated = status.allocated_resources.as_ref()?;
    let actuated = status.resources.as_ref()?.requests.as_ref()?;
    Some((allocated, actuated))
}

/// The pod-level actuated limits (`status.resources.limits`), when reported.
pub(crate) fn pod_status_limits(pod: &Pod) -> Option<&ApiList> {
    status(pod)?.resources.as_ref()?.limits.as_ref()
}

/// The status lists that compete with the pod-level spec (`spec.resources`) when pod-level
/// resources are resized in place: `None` when the pod reports no pod-level `status.resources`
/// (the spec then stands alone). Requests compete with `status.resources.requests` and
/// `status.allocatedResources`; limits with `status.resources.limits`.
pub(crate) fn pod_level_status_lists(pod: &Pod, limits: bool) -> Option<Vec<&ApiList>> {
    let status = status(pod)?;
    let resources = status.resources.as_ref()?;
    let lists = if limits {
        resources.limits.iter().collect()
    } else {
        resources
            .requests
            .iter()
            .chain(status.allocated_resources.iter())
            .collect()
    };
    Some(lists)
}

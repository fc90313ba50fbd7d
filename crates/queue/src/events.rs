//! Which events a pod update is, and the labels of the queue's internal events.
//!
//! Upstream turns one pod update into the *most specific* update actions it contains (labels
//! changed, requests went down, tolerations added, scheduling gates removed, generated claims
//! changed), so that a plugin registered for `Pod/UpdatePodLabel` is not woken by a status change.
//! The runtime needs the same split for assigned pods, so the function is public.

use k8s_openapi::api::core::v1::Pod;
use unisched_framework::{ActionType, ClusterEvent, EventResource, PodInfo};
use unisched_resource::Resource;

/// The event label of a pod entering activeQ from the informer.
pub const UNSCHEDULED_POD_ADD: &str = "UnscheduledPodAdd";
/// The event label of an unknown pod arriving through an update.
pub const UNSCHEDULED_POD_UPDATE: &str = "UnscheduledPodUpdate";
/// A pod requeued after a failed attempt.
pub const SCHEDULE_ATTEMPT_FAILURE: &str = "ScheduleAttemptFailure";
/// A pod whose backoff finished.
pub const BACKOFF_COMPLETE: &str = "BackoffComplete";
/// A pod popped from backoffQ because activeQ was empty.
pub const POP_FROM_BACKOFF_Q: &str = "PopFromBackoffQ";
/// A pod moved by [`crate::SchedulingQueue::activate`].
pub const FORCE_ACTIVATE: &str = "ForceActivate";

fn is_assigned(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

fn label(resource: EventResource, action: ActionType) -> &'static str {
    let assigned = resource == EventResource::AssignedPod;
    match action {
        ActionType::UPDATE_POD_LABEL if assigned => "AssignedPodUpdatePodLabel",
        ActionType::UPDATE_POD_LABEL => "UnscheduledPodUpdatePodLabel",
        ActionType::UPDATE_POD_SCALE_DOWN if assigned => "AssignedPodUpdatePodScaleDown",
        ActionType::UPDATE_POD_SCALE_DOWN => "UnscheduledPodUpdatePodScaleDown",
        ActionType::UPDATE_POD_TOLERATION if assigned => "AssignedPodUpdatePodToleration",
        ActionType::UPDATE_POD_TOLERATION => "UnscheduledPodUpdatePodToleration",
        ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED if assigned => {
            "AssignedPodUpdatePodSchedulingGatesEliminated"
        }
        ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED => {
            "UnscheduledPodUpdatePodSchedulingGatesEliminated"
        }
        ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM if assigned => {
            "AssignedPodUpdatePodGeneratedResourceClaim"
        }
        ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM => "UnscheduledPodUpdatePodGeneratedResourceClaim",
        _ if assigned => "AssignedPodUpdate",
        _ => "UnscheduledPodUpdate",
    }
}

fn scaled_down(old: &Resource, new: &Resource) -> bool {
    if old.milli_cpu > new.milli_cpu
        || old.memory > new.memory
        || old.ephemeral_storage > new.ephemeral_storage
    {
        return true;
    }
    old.scalar_resources
        .iter()
        .any(|(name, &q)| q > 0 && new.scalar_resources.get(name).is_none_or(|&n| n < q))
}

fn gates(pod: &Pod) -> usize {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .map_or(0, Vec::len)
}

fn tolerations_added(old: &Pod, new: &Pod) -> bool {
    let empty = Vec::new();
    let old_t = old
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .unwrap_or(&empty);
    let new_t = new
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .unwrap_or(&empty);
    new_t.iter().any(|t| !old_t.contains(t))
}

fn generated_claims_changed(old: &Pod, new: &Pod) -> bool {
    let o = old.status.as_ref();
    let n = new.status.as_ref();
    let claims = |s: Option<&k8s_openapi::api::core::v1::PodStatus>| {
        s.and_then(|s| s.resource_claim_statuses.clone())
            .unwrap_or_default()
    };
    let extended = |s: Option<&k8s_openapi::api::core::v1::PodStatus>| {
        s.and_then(|s| s.extended_resource_claim_status.clone())
    };
    claims(o) != claims(n) || extended(o) != extended(n)
}

/// The specific update events one pod update contains, in upstream's order (labels, scale-down,
/// scheduling gates eliminated, tolerations added, generated resource claims). The resource is
/// `AssignedPod` when the new pod has a node, else `UnscheduledPod`. When nothing specific changed,
/// one generic update (`UPDATE_OTHER`) is returned, which only plugins registered for every pod update
/// match.
pub fn pod_scheduling_properties_change(old_info: &PodInfo, new_info: &PodInfo) -> Vec<ClusterEvent> {
    let (old, new) = (&*old_info.pod, &*new_info.pod);
    let resource = if is_assigned(new) {
        EventResource::AssignedPod
    } else {
        EventResource::UnscheduledPod
    };
    let mut actions = Vec::new();
    if old.metadata.labels.clone().unwrap_or_default() != new.metadata.labels.clone().unwrap_or_default() {
        actions.push(ActionType::UPDATE_POD_LABEL);
    }
    // The derived requests: a bound pod's PodInfo has no containers to add up.
    if scaled_down(old_info.requests(), new_info.requests()) {
        actions.push(ActionType::UPDATE_POD_SCALE_DOWN);
    }
    if gates(old) > 0 && gates(new) == 0 {
        actions.push(ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED);
    }
    if tolerations_added(old, new) {
        actions.push(ActionType::UPDATE_POD_TOLERATION);
    }
    if generated_claims_changed(old, new) {
        actions.push(ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM);
    }
    if actions.is_empty() {
        actions.push(ActionType::UPDATE_OTHER);
    }
    actions
        .into_iter()
        .map(|a| ClusterEvent::new(resource, a, label(resource, a)))
        .collect()
}

/// True for the wildcard event (`*` resource, every action): it concerns every pod, whatever
/// rejected it.
pub(crate) fn is_wildcard(event: &ClusterEvent) -> bool {
    event.resource == EventResource::Wildcard && event.action == ActionType::ALL
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        Container, ContainerStatus, PodCondition, PodSchedulingGate, PodSpec, PodStatus,
        ResourceRequirements, Toleration,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    fn pod(cpu: &str, labels: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.labels = Some(labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect());
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some([("cpu".to_string(), Quantity(cpu.into()))].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    /// The events of an update, with the pods derived as the watch handler derives them (lean
    /// once bound).
    fn changes(old: &Pod, new: &Pod) -> Vec<ClusterEvent> {
        let old = PodInfo::watched(old.clone());
        let new = PodInfo::watched(new.clone());
        pod_scheduling_properties_change(&old, &new)
    }

    fn actions(old: &Pod, new: &Pod) -> Vec<ActionType> {
        changes(old, new).into_iter().map(|e| e.action).collect()
    }

    #[test]
    fn specific_update_events() {
        let base = pod("1", &[("a", "1")]);
        let relabeled = pod("1", &[("a", "2")]);
        let smaller = pod("500m", &[("a", "1")]);
        let bigger = pod("2", &[("a", "1")]);
        let mut gated = base.clone();
        if let Some(s) = gated.spec.as_mut() {
            s.scheduling_gates = Some(vec![PodSchedulingGate { name: "g".into() }]);
        }
        let mut tolerating = base.clone();
        if let Some(s) = tolerating.spec.as_mut() {
            s.tolerations = Some(vec![Toleration {
                key: Some("k".into()),
                ..Default::default()
            }]);
        }
        let mut with_claims = base.clone();
        with_claims.status = Some(PodStatus {
            resource_claim_statuses: Some(vec![Default::default()]),
            ..Default::default()
        });
        let tiny_unlabeled = pod("100m", &[]);
        let cases: Vec<(&str, &Pod, &Pod, Vec<ActionType>)> = vec![
            ("nothing", &base, &base, vec![ActionType::UPDATE_OTHER]),
            ("labels", &base, &relabeled, vec![ActionType::UPDATE_POD_LABEL]),
            (
                "scale down",
                &base,
                &smaller,
                vec![ActionType::UPDATE_POD_SCALE_DOWN],
            ),
            (
                "scale up is generic",
                &base,
                &bigger,
                vec![ActionType::UPDATE_OTHER],
            ),
            (
                "gates removed",
                &gated,
                &base,
                vec![ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED],
            ),
            (
                "gates added is generic",
                &base,
                &gated,
                vec![ActionType::UPDATE_OTHER],
            ),
            (
                "toleration added",
                &base,
                &tolerating,
                vec![ActionType::UPDATE_POD_TOLERATION],
            ),
            (
                "toleration removed is generic",
                &tolerating,
                &base,
                vec![ActionType::UPDATE_OTHER],
            ),
            (
                "claims",
                &base,
                &with_claims,
                vec![ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM],
            ),
            (
                "labels and scale down",
                &base,
                &tiny_unlabeled,
                vec![ActionType::UPDATE_POD_LABEL, ActionType::UPDATE_POD_SCALE_DOWN],
            ),
        ];
        let bound = |p: &Pod| {
            let mut p = p.clone();
            if let Some(s) = p.spec.as_mut() {
                s.node_name = Some("n".into());
            }
            p
        };
        for (name, old, new, want) in cases {
            assert_eq!(actions(old, new), want, "{name}");
            // The same update of a bound pod: its PodInfos are lean, without containers, and
            // the scale-down still shows (from the derived requests).
            let (old, new) = (bound(old), bound(new));
            assert_eq!(actions(&old, &new), want, "{name}, bound");
            assert!(
                changes(&old, &new)
                    .iter()
                    .all(|e| e.resource == EventResource::AssignedPod)
            );
        }
        let mut assigned = base.clone();
        if let Some(s) = assigned.spec.as_mut() {
            s.node_name = Some("n".into());
        }
        let ev = changes(&base, &assigned);
        assert_eq!(ev[0].resource, EventResource::AssignedPod);
        assert_eq!(
            changes(&base, &relabeled)[0].label,
            "UnscheduledPodUpdatePodLabel"
        );
    }

    /// `pod` bound to `n` whose container reports `allocated` and `actuated` cpu, and whose resize
    /// the kubelet declared infeasible when `infeasible`.
    fn resizing(spec: &str, allocated: &str, actuated: &str, infeasible: bool) -> Pod {
        let mut p = pod(spec, &[("a", "1")]);
        if let Some(s) = p.spec.as_mut() {
            s.node_name = Some("n".into());
        }
        let cpu = |v: &str| Some([("cpu".to_string(), Quantity(v.into()))].into());
        p.status = Some(PodStatus {
            conditions: infeasible.then(|| {
                vec![PodCondition {
                    type_: "PodResizePending".into(),
                    status: "True".into(),
                    reason: Some("Infeasible".into()),
                    ..Default::default()
                }]
            }),
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                allocated_resources: cpu(allocated),
                resources: Some(ResourceRequirements {
                    requests: cpu(actuated),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        });
        p
    }

    /// In-place resizes of a bound pod: what the pod counts is the largest of spec, allocated and
    /// actuated, so a scale-down event comes when that largest amount goes down — also when only
    /// the status changed — and not when the spec shrinks while the old amount is still held.
    #[test]
    fn in_place_resize_events() {
        let cases: Vec<(&str, Pod, Pod, Vec<ActionType>)> = vec![
            (
                "spec lowered, still allocated and running at the old size",
                resizing("2", "2", "2", false),
                resizing("1", "2", "2", false),
                vec![ActionType::UPDATE_OTHER],
            ),
            (
                "allocation lowered, the runtime still runs the old size",
                resizing("1", "2", "2", false),
                resizing("1", "1", "2", false),
                vec![ActionType::UPDATE_OTHER],
            ),
            (
                "the runtime applied the smaller size: status only",
                resizing("1", "1", "2", false),
                resizing("1", "1", "1", false),
                vec![ActionType::UPDATE_POD_SCALE_DOWN],
            ),
            (
                "a resize up declared infeasible no longer counts its spec",
                resizing("4", "1", "1", false),
                resizing("4", "1", "1", true),
                vec![ActionType::UPDATE_POD_SCALE_DOWN],
            ),
            (
                "a resize up is not a scale-down",
                resizing("1", "1", "1", false),
                resizing("2", "1", "1", false),
                vec![ActionType::UPDATE_OTHER],
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(actions(&old, &new), want, "{name}");
            let events = changes(&old, &new);
            assert!(
                events.iter().all(|e| e.resource == EventResource::AssignedPod),
                "{name}"
            );
            if want == [ActionType::UPDATE_POD_SCALE_DOWN] {
                assert_eq!(events[0].label, "AssignedPodUpdatePodScaleDown", "{name}");
            }
        }
    }
}

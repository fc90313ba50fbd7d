//! Whether a pod may preempt at all.
//!
//! Two rules, as upstream: a pod whose `preemptionPolicy` is `Never` waits for room instead of
//! making it; and a pod that already preempted (it has a `nominatedNodeName`) does not preempt
//! again while lower-priority victims on that node are still terminating — otherwise every retry
//! during the victims' grace period would pick more victims.

use unisched_framework::{Code, NodeToStatus, PodInfo, Snapshot};

use super::execution::{DISRUPTION_TARGET, REASON_PREEMPTION_BY_SCHEDULER};

/// Upstream reason: the pod's policy forbids preemption.
pub const NOT_ELIGIBLE_NEVER: &str = "not eligible due to preemptionPolicy=Never.";
/// Upstream reason: an earlier preemption by this pod is still in progress.
pub const NOT_ELIGIBLE_TERMINATING: &str = "not eligible due to a terminating pod on the nominated node.";
/// Upstream's (PreEnqueue) reason while this pod's evictions are still being written.
pub const WAITING_FOR_PREEMPTION: &str = "waiting for the preemption for this pod to be finished";

/// The pod is being deleted because the scheduler preempted it.
pub(crate) fn terminating_by_preemption(pod: &PodInfo) -> bool {
    pod.is_terminating()
        && pod
            .pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == DISRUPTION_TARGET
                        && c.status == "True"
                        && c.reason.as_deref() == Some(REASON_PREEMPTION_BY_SCHEDULER)
                })
            })
}

/// `Err(reason)` when `pod` must not preempt now. `priority_of` is a pod's priority as a victim
/// (its PodGroup's, when it has one).
pub(crate) fn check(
    pod: &PodInfo,
    snapshot: &Snapshot,
    statuses: &NodeToStatus,
    priority_of: &dyn Fn(&PodInfo) -> i32,
) -> Result<(), &'static str> {
    let spec = pod.pod.spec.as_ref();
    if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
        return Err(NOT_ELIGIBLE_NEVER);
    }
    let nominated = pod
        .pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty());
    if let Some(node) = nominated {
        // When the nominated node cannot help any more, the earlier preemption is moot.
        if statuses.get(node).code() == Code::UnschedulableAndUnresolvable {
            return Ok(());
        }
        if let Some(info) = snapshot.get(node)
            && info
                .pods
                .iter()
                .any(|p| priority_of(p) < pod.priority && terminating_by_preemption(p))
        {
            return Err(NOT_ELIGIBLE_TERMINATING);
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use k8s_openapi::api::core::v1::{Pod, PodCondition};
    use unisched_framework::Status;

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, snapshot};

    /// A pod object marked as a preemption victim that is terminating.
    pub(crate) fn being_preempted(b: PodBuilder) -> Pod {
        let mut pod = b.terminating().build();
        pod.status
            .get_or_insert_default()
            .conditions
            .get_or_insert_default()
            .push(PodCondition {
                type_: DISRUPTION_TARGET.into(),
                status: "True".into(),
                reason: Some(REASON_PREEMPTION_BY_SCHEDULER.into()),
                ..PodCondition::default()
            });
        pod
    }

    #[test]
    fn eligibility() {
        let victim = PodInfo::new(being_preempted(PodBuilder::new("v").priority(1).node_name("n1")));
        let plain_terminating = PodBuilder::new("t")
            .priority(1)
            .node_name("n1")
            .terminating()
            .info();
        let snap = |pods: Vec<PodInfo>| snapshot([NodeBuilder::new("n1").alloc("cpu", "1").info_with(pods)]);
        let never = {
            let mut p = PodBuilder::new("p").priority(10).build();
            if let Some(s) = p.spec.as_mut() {
                s.preemption_policy = Some("Never".into());
            }
            PodInfo::new(p)
        };
        let nominated = PodBuilder::new("p").priority(10).nominated_node("n1").info();
        let mut uu = NodeToStatus::default();
        uu.set("n1", Status::unresolvable("x"));
        let mut unsched = NodeToStatus::default();
        unsched.set("n1", Status::unschedulable("Insufficient cpu"));
        let cases: Vec<(&str, PodInfo, Vec<PodInfo>, NodeToStatus, Result<(), &str>)> = vec![
            ("never", never, vec![], unsched.clone(), Err(NOT_ELIGIBLE_NEVER)),
            (
                "plain",
                PodBuilder::new("p").priority(10).info(),
                vec![victim.clone()],
                unsched.clone(),
                Ok(()),
            ),
            (
                "nominated, victim terminating",
                nominated.clone(),
                vec![victim.clone()],
                unsched.clone(),
                Err(NOT_ELIGIBLE_TERMINATING),
            ),
            (
                "nominated, node now unresolvable",
                nominated.clone(),
                vec![victim.clone()],
                uu,
                Ok(()),
            ),
            (
                "nominated, terminating but not by preemption",
                nominated.clone(),
                vec![plain_terminating],
                unsched.clone(),
                Ok(()),
            ),
            (
                "nominated, terminating victim of higher priority",
                PodBuilder::new("p").priority(1).nominated_node("n1").info(),
                vec![victim],
                unsched,
                Ok(()),
            ),
        ];
        for (name, pod, pods, statuses, want) in cases {
            assert_eq!(
                check(&pod, &snap(pods), &statuses, &|p| p.priority),
                want,
                "{name}"
            );
        }
    }
}

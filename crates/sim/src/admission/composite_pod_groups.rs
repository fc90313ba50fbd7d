//! scheduling.k8s.io/v1alpha3 CompositePodGroups: the checks kube-apiserver 1.37 makes that the
//! scheduler relies on. The policy and topology rules are a PodGroup's, with `minGroupCount` for
//! the gang's quorum (of child groups); a composite must also name the Workload it came from.

use serde_json::Value;

use super::{
    pod_groups::{check_policy, check_topology},
    push, str_of,
};
use crate::error::Cause;

/// Appends the CompositePodGroup spec's problems.
pub fn check_composite_pod_group(obj: &Value, causes: &mut Vec<Cause>) {
    let Some(spec) = obj.get("spec") else {
        push(causes, "spec.schedulingPolicy", "Required value");
        return;
    };
    check_policy(spec, "minGroupCount", causes);
    check_topology(spec, causes);
    match spec.get("workloadRef").filter(|w| !w.is_null()) {
        None => push(causes, "spec.workloadRef", "Required value"),
        Some(reference) => {
            for field in ["templateName", "workloadName"] {
                if str_of(reference, field).is_empty() {
                    push(causes, format!("spec.workloadRef.{field}"), "Required value");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn problems(spec: Value) -> Vec<String> {
        let mut causes = Vec::new();
        check_composite_pod_group(&json!({ "spec": spec }), &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn a_composite_needs_one_policy_a_positive_min_group_count_and_its_workload() {
        let workload = json!({"workloadName": "w", "templateName": "t"});
        assert!(
            problems(json!({"schedulingPolicy": {"gang": {"minGroupCount": 2}}, "workloadRef": workload}))
                .is_empty()
        );
        assert_eq!(
            problems(json!({"schedulingPolicy": {"gang": {"minGroupCount": 0}}, "workloadRef": workload})),
            [
                "spec.schedulingPolicy.gang.minGroupCount: Invalid value: 0: must be greater than or equal to 1"
            ]
        );
        assert_eq!(
            problems(json!({"schedulingPolicy": {}, "workloadRef": workload})),
            ["spec.schedulingPolicy: Invalid value: \"\": must specify one of: `basic`, `gang`"]
        );
        assert_eq!(
            problems(json!({"schedulingPolicy": {"basic": {}}})),
            ["spec.workloadRef: Required value"]
        );
        assert_eq!(
            problems(json!({
                "schedulingPolicy": {"basic": {}},
                "workloadRef": workload,
                "schedulingConstraints": {"topology": [{"key": "a"}, {"key": "b"}]}
            })),
            ["spec.schedulingConstraints.topology: Too many: 2: must have at most 1 item"]
        );
    }
}

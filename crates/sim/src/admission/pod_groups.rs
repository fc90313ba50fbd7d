//! scheduling.k8s.io/v1beta1 PodGroups: the checks kube-apiserver 1.37 makes that the scheduler
//! relies on (one policy, a positive quorum, at most one topology constraint, resource claims
//! naming a claim or a template).

use serde_json::Value;

use super::{arr, one_of_message, push};
use crate::error::Cause;

/// Appends the PodGroup spec's problems.
pub fn check_pod_group(obj: &Value, causes: &mut Vec<Cause>) {
    let Some(spec) = obj.get("spec") else {
        push(causes, "spec.schedulingPolicy", "Required value");
        return;
    };
    check_policy(spec, "minCount", causes);
    check_topology(spec, causes);
    let has_parent = spec
        .get("parentCompositePodGroupName")
        .and_then(Value::as_str)
        .is_some_and(|p| !p.is_empty());
    if has_parent && spec.get("workloadRef").is_none_or(Value::is_null) {
        push(
            causes,
            "spec.workloadRef",
            "Required value: must be set when parentCompositePodGroupName is set",
        );
    }
    for (i, claim) in arr(spec, "resourceClaims").iter().enumerate() {
        let members = ["resourceClaimName", "resourceClaimTemplateName"];
        if let Some(message) = one_of_message(&members, |m| claim.get(m).is_some_and(|v| !v.is_null())) {
            push(causes, format!("spec.resourceClaims[{i}]"), message);
        }
    }
}

/// The scheduling policy: exactly one of `basic` and `gang`, the gang's `quorum` field (`minCount`,
/// or a composite's `minGroupCount`) positive. Shared with CompositePodGroups.
pub(super) fn check_policy(spec: &Value, quorum: &str, causes: &mut Vec<Cause>) {
    let policy = spec.get("schedulingPolicy").filter(|p| !p.is_null());
    let set = |m: &str| policy.and_then(|p| p.get(m)).is_some_and(|v| !v.is_null());
    if let Some(message) = one_of_message(&["basic", "gang"], set) {
        push(causes, "spec.schedulingPolicy", message);
    }
    let gang = policy.and_then(|p| p.get("gang")).filter(|v| !v.is_null());
    if let Some(gang) = gang {
        let min = gang.get(quorum).and_then(Value::as_i64).unwrap_or(0);
        if min < 1 {
            push(
                causes,
                format!("spec.schedulingPolicy.gang.{quorum}"),
                format!("Invalid value: {min}: must be greater than or equal to 1"),
            );
        }
    }
}

/// At most one topology constraint, each with a key. Shared with CompositePodGroups.
pub(super) fn check_topology(spec: &Value, causes: &mut Vec<Cause>) {
    if let Some(constraints) = spec.get("schedulingConstraints") {
        let topology = arr(constraints, "topology");
        if topology.len() > 1 {
            push(
                causes,
                "spec.schedulingConstraints.topology",
                format!("Too many: {}: must have at most 1 item", topology.len()),
            );
        }
        for (i, t) in topology.iter().enumerate() {
            if t.get("key").and_then(Value::as_str).is_none_or(str::is_empty) {
                push(
                    causes,
                    format!("spec.schedulingConstraints.topology[{i}].key"),
                    "Required value",
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(spec: Value) -> Vec<(String, String)> {
        let mut causes = Vec::new();
        check_pod_group(&json!({ "spec": spec }), &mut causes);
        causes.into_iter().map(|c| (c.field, c.message)).collect()
    }

    #[test]
    fn pod_group_specs() {
        assert!(check(json!({"schedulingPolicy": {"gang": {"minCount": 2}}})).is_empty());
        assert!(check(json!({"schedulingPolicy": {"basic": {}}, "schedulingConstraints": {"topology": [{"key": "rack"}]}})).is_empty());
        assert_eq!(
            check(json!({"schedulingPolicy": {}})),
            vec![(
                "spec.schedulingPolicy".to_string(),
                "Invalid value: \"\": must specify one of: `basic`, `gang`".to_string()
            )]
        );
        assert_eq!(
            check(json!({"schedulingPolicy": {"gang": {"minCount": 0}}})),
            vec![(
                "spec.schedulingPolicy.gang.minCount".to_string(),
                "Invalid value: 0: must be greater than or equal to 1".to_string()
            )]
        );
        assert_eq!(
            check(json!({"schedulingPolicy": {"basic": {}}, "schedulingConstraints": {"topology": [{"key": "a"}, {"key": "b"}]}}))[0].1,
            "Too many: 2: must have at most 1 item"
        );
        // One-ofs in apimachinery's `validate.Union` words: none set, or the ones set named.
        assert_eq!(
            check(json!({"schedulingPolicy": {"basic": {}, "gang": {"minCount": 1}}})),
            vec![(
                "spec.schedulingPolicy".to_string(),
                "Invalid value: \"{basic, gang}\": must specify exactly one of: `basic`, `gang`".to_string()
            )]
        );
        assert_eq!(
            check(json!({"schedulingPolicy": {"basic": {}}, "resourceClaims": [
                {"name": "x"},
                {"name": "y", "resourceClaimName": "c", "resourceClaimTemplateName": "t"},
            ]})),
            vec![
                (
                    "spec.resourceClaims[0]".to_string(),
                    "Invalid value: \"\": must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"
                        .to_string()
                ),
                (
                    "spec.resourceClaims[1]".to_string(),
                    "Invalid value: \"{resourceClaimName, resourceClaimTemplateName}\": must specify exactly one of: `resourceClaimName`, `resourceClaimTemplateName`"
                        .to_string()
                ),
            ]
        );
        // A child of a CompositePodGroup must name its Workload (kube-apiserver 1.37.2's words).
        assert_eq!(
            check(json!({"schedulingPolicy": {"basic": {}}, "parentCompositePodGroupName": "root"})),
            vec![(
                "spec.workloadRef".to_string(),
                "Required value: must be set when parentCompositePodGroupName is set".to_string()
            )]
        );
        assert!(
            check(json!({
                "schedulingPolicy": {"basic": {}},
                "parentCompositePodGroupName": "root",
                "workloadRef": {"workloadName": "w", "templateName": "t"}
            }))
            .is_empty()
        );
    }
}

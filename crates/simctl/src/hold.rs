//! Holding a step's pods until their claims exist, on the embedded control plane and on a remote
//! one alike (see [`HOLD_GATE`] for why): every pod of a step is created with the gate and
//! released, in creation order, once the claims of all of them exist and the scheduler has seen
//! them. The pod's own scheduling gates are kept. A pod the scenario creates already bound
//! (`spec.nodeName` set) is not held: no scheduler decides it, and the API refuses scheduling
//! gates on a bound pod.

use serde_json::{Value, json};

/// The scheduling gate pods are created with and released from once their claims exist.
///
/// The embedded claim controller creates a pod's claims from its templates at once, so all of a
/// step's pods reach the scheduler together, in creation order. kube-controller-manager takes a
/// moment per pod, and pods without template claims would overtake the others; the placement
/// would then depend on that timing. Holding every pod of a step until all its claims exist and
/// releasing them in creation order gives the scheduler the same sequence on both.
pub(crate) const HOLD_GATE: &str = "sim.unisched.dev/hold";

/// Adds [`HOLD_GATE`] to a pod's scheduling gates, unless the pod is created bound.
pub(crate) fn hold(pod: &mut Value) {
    if pod["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty()) {
        return;
    }
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let gates = spec.entry("schedulingGates").or_insert_with(|| json!([]));
    if let Some(list) = gates.as_array_mut() {
        list.push(json!({"name": HOLD_GATE}));
    }
}

/// True when the pod carries [`HOLD_GATE`] (a pod created bound never does).
pub(crate) fn is_held(pod: &Value) -> bool {
    pod["spec"]["schedulingGates"]
        .as_array()
        .is_some_and(|gates| gates.iter().any(|g| g["name"] == HOLD_GATE))
}

/// The merge patch that removes [`HOLD_GATE`] from `pod`'s scheduling gates and keeps the
/// others. A JSON patch with a test of the resourceVersion would be stricter; the gate list is
/// ours alone until the pod is released, so a merge patch of the whole list is enough.
pub(crate) fn release(pod: &Value) -> Value {
    let gates: Vec<Value> = pod["spec"]["schedulingGates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["name"] != HOLD_GATE)
        .cloned()
        .collect();
    json!({"spec": {"schedulingGates": gates}})
}

/// True when every claim the pod creates from a template has been created (its name is in the
/// pod's `status.resourceClaimStatuses`).
pub(crate) fn claims_created(pod: &Value) -> bool {
    let statuses = pod["status"]["resourceClaimStatuses"].as_array();
    pod["spec"]["resourceClaims"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|rc| rc.get("resourceClaimTemplateName").is_some_and(|t| !t.is_null()))
        .all(|rc| {
            statuses.into_iter().flatten().any(|s| {
                s["name"] == rc["name"] && s["resourceClaimName"].as_str().is_some_and(|n| !n.is_empty())
            })
        })
}

/// The names of the claims the claim controller generated for a pod's template references.
pub(crate) fn generated_claim_names(pod: &Value) -> Vec<String> {
    pod["status"]["resourceClaimStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["resourceClaimName"].as_str())
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The claims generated for a step's held pods, once they exist (or the wait gave up).
#[derive(Debug, Default)]
pub(crate) struct TemplateClaims {
    /// The generated claims of the held pods, as (namespace, name).
    pub claims: Vec<(String, String)>,
    /// The pods (`namespace/name`) whose claims were not created in time.
    pub missing: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_created_needs_every_template_claim() {
        let pod = |statuses: Value| {
            json!({
                "spec": {"resourceClaims": [
                    {"name": "gpu", "resourceClaimTemplateName": "t"},
                    {"name": "shared", "resourceClaimName": "c"},
                ]},
                "status": {"resourceClaimStatuses": statuses},
            })
        };
        assert!(!claims_created(&pod(json!(null))));
        assert!(!claims_created(&pod(json!([{"name": "gpu"}]))));
        assert!(claims_created(&pod(
            json!([{"name": "gpu", "resourceClaimName": "p-gpu-x"}])
        )));
        assert!(claims_created(&json!({"spec": {"containers": []}})));
    }

    #[test]
    fn generated_claim_names_are_the_named_statuses() {
        let pod = json!({"status": {"resourceClaimStatuses": [
            {"name": "gpu", "resourceClaimName": "p-gpu-x"},
            {"name": "none"},
            {"name": "empty", "resourceClaimName": ""},
            {"name": "cpu", "resourceClaimName": "p-cpu-y"},
        ]}});
        assert_eq!(generated_claim_names(&pod), ["p-gpu-x", "p-cpu-y"]);
        assert!(generated_claim_names(&json!({"status": {}})).is_empty());
    }

    #[test]
    fn hold_keeps_the_pods_own_gates() {
        let mut p = json!({"spec": {"schedulingGates": [{"name": "mine"}]}});
        assert!(!is_held(&p));
        hold(&mut p);
        assert_eq!(
            p["spec"]["schedulingGates"],
            json!([{"name": "mine"}, {"name": HOLD_GATE}])
        );
        assert!(is_held(&p));
    }

    #[test]
    fn a_pod_created_bound_is_not_held() {
        let mut p = json!({"spec": {"nodeName": "n1", "containers": []}});
        hold(&mut p);
        assert_eq!(p["spec"].get("schedulingGates"), None);
        assert!(!is_held(&p));
    }
}

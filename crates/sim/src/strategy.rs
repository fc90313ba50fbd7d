//! Per-kind rules applied on create and update, modelled on kube-apiserver's REST strategies and the
//! admission plugins a default cluster runs (Priority, DefaultTolerationSeconds).
//!
//! - Pods: defaults (`schedulerName: default-scheduler`, `restartPolicy`, `dnsPolicy`,
//!   `terminationGracePeriodSeconds`, requests defaulted from limits, not-ready/unreachable
//!   tolerations), priority from the PriorityClass, `status: {phase: Pending, qosClass}` on create,
//!   spec immutability on update (only images, `activeDeadlineSeconds`, tolerations,
//!   `terminationGracePeriodSeconds` and removal of scheduling gates may change), quantity checks.
//! - Nodes: `status.allocatable` defaults to `status.capacity`.
//! - Namespaces: `status.phase: Active`.
//! - ResourceClaims: `spec` is immutable. PriorityClasses: `value` is immutable.
//! - Jobs: batch/v1 defaults, a generated selector on create, spec checks and what an update may
//!   not change (see `admission::jobs`); the template's pod spec is checked as a pod's.
//! - Workloads: the template trees and what an update may not change (see
//!   `admission::workloads`).

use serde_json::{Map, Value, json};
use unisched_resource::Quantity;

use crate::admission;
use crate::error::{Cause, StoreError};
use crate::registry::ResourceType;
use crate::store::ObjectRef;
use crate::util::{NameError, check_dns_label, check_dns_subdomain, get_path, get_str, name_of};

/// Read access to other objects during admission.
pub(crate) trait Lookup {
    /// One object by resource name, namespace ("" for cluster scope) and name.
    fn lookup(&self, resource: &str, namespace: &str, name: &str) -> Option<ObjectRef>;
    /// All objects of a cluster-scoped resource.
    fn all(&self, resource: &str) -> Vec<ObjectRef>;
}

/// Which write an update is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UpdateMode {
    /// The main resource (PUT, PATCH, apply).
    Main,
    /// The `/status` subresource.
    Status,
    /// A server-internal write (binding) that may change fields clients may not.
    Internal,
}

/// The built-in priority classes every cluster has.
pub(crate) fn builtin_priority_classes() -> Vec<Value> {
    vec![
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
               "metadata": {"name": "system-node-critical"}, "value": 2_000_001_000,
               "description": "Used for system critical pods that must not be moved from their current node."}),
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
               "metadata": {"name": "system-cluster-critical"}, "value": 2_000_000_000,
               "description": "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."}),
    ]
}

fn is_pod(rt: &ResourceType) -> bool {
    rt.is("", "Pod")
}

/// Kind-specific defaulting and admission for a new object (generic metadata is already set).
pub(crate) fn prepare_create(
    rt: &ResourceType,
    obj: &mut Value,
    lookup: &dyn Lookup,
) -> Result<(), StoreError> {
    match (rt.group, rt.kind) {
        ("", "Pod") => {
            let name = name_of(obj).to_string();
            let spec = crate::util::object_at(obj, &["spec"]);
            default_pod_spec(spec, true);
            admit_priority(&name, spec, lookup)?;
            let qos = qos_class(obj);
            obj["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        ("", "Namespace") => {
            let status = crate::util::object_at(obj, &["status"]);
            status.insert("phase".into(), json!("Active"));
        }
        ("", "Node") => {
            default_node(obj);
            default_node_readiness(obj);
        }
        ("storage.k8s.io", "CSIDriver") => default_csi_driver(obj),
        ("batch", "Job") => {
            admission::default_job(obj);
            admission::generate_selector(obj);
        }
        ("scheduling.k8s.io", "PodGroup") => {
            let name = name_of(obj).to_string();
            let spec = crate::util::object_at(obj, &["spec"]);
            admit_pod_group_priority(&name, spec, lookup, GroupKind::PodGroup)?;
        }
        ("scheduling.k8s.io", "CompositePodGroup") => {
            let name = name_of(obj).to_string();
            let spec = crate::util::object_at(obj, &["spec"]);
            admit_pod_group_priority(&name, spec, lookup, GroupKind::Composite)?;
        }
        ("scheduling.k8s.io", "PriorityClass") => admit_priority_class(obj, lookup)?,
        _ => {}
    }
    Ok(())
}

/// kube-apiserver's Priority admission for a new PriorityClass: only one may be the global
/// default.
fn admit_priority_class(class: &Value, lookup: &dyn Lookup) -> Result<(), StoreError> {
    if class.get("globalDefault").and_then(Value::as_bool) != Some(true) {
        return Ok(());
    }
    let existing = lookup
        .all("priorityclasses")
        .into_iter()
        .find(|pc| pc.value().get("globalDefault").and_then(Value::as_bool) == Some(true));
    match existing {
        Some(default) => Err(StoreError::Forbidden(format!(
            "priorityclasses.scheduling.k8s.io \"{}\" is forbidden: PriorityClass {} is already marked as default. \
             Only one default can exist",
            name_of(class),
            name_of(default.value())
        ))),
        None => Ok(()),
    }
}

/// Whether objects of the kind fail validation without their defaults.
pub(crate) fn defaults_before_validation(rt: &ResourceType) -> bool {
    rt.is("batch", "Job")
}

/// The defaulting of [`prepare_create`] that needs no other object, for checking an object before
/// it is created (a scenario file): a Job is only valid once it has its defaults and selector.
pub(crate) fn default_for_validation(rt: &ResourceType, obj: &mut Value) {
    if defaults_before_validation(rt) {
        if crate::util::uid_of(obj).is_empty() {
            crate::util::meta_mut(obj).insert("uid".into(), json!("00000000-0000-0000-0000-000000000000"));
        }
        admission::default_job(obj);
        admission::generate_selector(obj);
    }
}

/// Which kind of group the Priority admission is deciding for (its messages name it).
#[derive(Clone, Copy)]
enum GroupKind {
    PodGroup,
    Composite,
}

/// kube-apiserver's Priority admission for a PodGroup or a CompositePodGroup: `spec.priority`
/// comes from its `priorityClassName` (or the global default class, else 0), and a given one
/// must agree.
fn admit_pod_group_priority(
    name: &str,
    spec: &mut Map<String, Value>,
    lookup: &dyn Lookup,
    kind: GroupKind,
) -> Result<(), StoreError> {
    let (resource, what) = match kind {
        GroupKind::PodGroup => ("podgroups.scheduling.k8s.io", "pod group"),
        GroupKind::Composite => ("compositepodgroups.scheduling.k8s.io", "composite pod group"),
    };
    let (class_name, class) = priority_class_of(spec, lookup, resource, name)?;
    let value = class
        .as_ref()
        .and_then(|pc| pc.value().get("value").and_then(Value::as_i64))
        .unwrap_or(0);
    if let Some(given) = spec.get("priority").and_then(Value::as_i64)
        && given != value
    {
        return Err(StoreError::Forbidden(format!(
            "{resource} \"{name}\" is forbidden: priority set in the {what} ({given}) must \
             match the priority computed ({value}) based on the priority class set in the spec"
        )));
    }
    spec.insert("priority".into(), json!(value));
    if class_name.is_empty()
        && let Some(pc) = &class
    {
        spec.insert("priorityClassName".into(), json!(name_of(pc.value())));
    }
    Ok(())
}

/// A CSIDriver's spec gets kube-apiserver's defaults for what it leaves out (with the 1.37 gates
/// that add fields on by default), so readers see the same object as from a real cluster: in
/// particular `storageCapacity: false` and `preventPodSchedulingIfMissing: false`.
fn default_csi_driver(driver: &mut Value) {
    let spec = crate::util::object_at(driver, &["spec"]);
    let defaults = [
        ("attachRequired", json!(true)),
        ("podInfoOnMount", json!(false)),
        ("storageCapacity", json!(false)),
        ("fsGroupPolicy", json!("ReadWriteOnceWithFSType")),
        ("requiresRepublish", json!(false)),
        ("seLinuxMount", json!(false)),
        ("preventPodSchedulingIfMissing", json!(false)),
    ];
    for (field, value) in defaults {
        spec.entry(field).or_insert(value);
    }
    let modes = spec.entry("volumeLifecycleModes").or_insert_with(|| json!([]));
    if modes.as_array().is_none_or(Vec::is_empty) {
        *modes = json!(["Persistent"]);
    }
}

/// A node created without a `Ready` condition or addresses gets what a healthy kubelet would
/// report (`Ready=True`, a `Hostname` address), so `kubectl get nodes` shows it `Ready`. A
/// condition or address list given by the writer is kept as is.
fn default_node_readiness(node: &mut Value) {
    let name = name_of(node).to_string();
    let now = crate::util::now_rfc3339();
    let status = crate::util::object_at(node, &["status"]);
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    if let Value::Array(cs) = conditions
        && !cs.iter().any(|c| get_str(c, &["type"]) == Some("Ready"))
    {
        cs.push(
            json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
                       "message": "kubelet is posting ready status",
                       "lastHeartbeatTime": now, "lastTransitionTime": now}),
        );
    }
    let addresses = status.entry("addresses").or_insert_with(|| json!([]));
    if let Value::Array(a) = addresses
        && a.is_empty()
    {
        a.push(json!({"type": "Hostname", "address": name}));
    }
}

/// The metadata fields a write of `rt`'s status subresource cannot change (beyond the system
/// fields every update keeps: uid, creation and deletion timestamps, generation), or `None` when
/// it can change none of them.
///
/// kube-apiserver decides this per kind in the status strategy. The older core kinds only reset
/// the spec, so a status write may change labels, annotations and finalizers (a kubelet's pod
/// status update may carry them): Pods keep their owner references (old kubelets corrupted them)
/// and Deployments their labels. The `resource.k8s.io` kinds reset the whole metadata the way
/// `ResetObjectMetaForStatus` does, and so does every kind not listed here.
pub(crate) fn metadata_kept_by_status_write(rt: &ResourceType) -> Option<&'static [&'static str]> {
    match (rt.group, rt.kind) {
        ("", "Pod") => Some(&["ownerReferences"]),
        ("apps", "Deployment") => Some(&["labels"]),
        ("", "Namespace" | "Node" | "PersistentVolume" | "PersistentVolumeClaim" | "Service")
        | ("policy", "PodDisruptionBudget") => Some(&[]),
        _ => None,
    }
}

/// Kind-specific defaulting and immutability checks for an update. `new` already carries the
/// preserved metadata and status.
pub(crate) fn prepare_update(
    rt: &ResourceType,
    old: &Value,
    new: &mut Value,
    mode: UpdateMode,
) -> Result<(), StoreError> {
    let name = name_of(old).to_string();
    match (rt.group, rt.kind) {
        ("", "Pod") if mode != UpdateMode::Status => {
            {
                let spec = crate::util::object_at(new, &["spec"]);
                default_pod_spec(spec, false);
                for f in ["priority", "priorityClassName", "preemptionPolicy"] {
                    if !spec.contains_key(f)
                        && let Some(v) = old.get("spec").and_then(|s| s.get(f))
                    {
                        spec.insert(f.into(), v.clone());
                    }
                }
            }
            if mode == UpdateMode::Main {
                check_pod_spec_update(&name, old.get("spec"), new.get("spec"))?;
            }
        }
        ("", "Pod") if mode == UpdateMode::Status && nominates_bound_pod(old, new) => {
            // kube-apiserver 1.37 (ClearingNominatedNodeNameAfterBinding, on by default): a
            // nomination is a hint for pending pods only.
            return Err(StoreError::invalid(
                &rt.qualified_kind(),
                &name,
                "status.nominatedNodeName",
                "Forbidden: may not be set on pods that are already bound to a node",
            ));
        }
        ("", "Node") => default_node(new),
        ("storage.k8s.io", "CSIDriver") => default_csi_driver(new),
        ("batch", "Job") if mode == UpdateMode::Main => {
            admission::default_job(new);
            let causes = admission::check_job_update(old, new);
            if !causes.is_empty() {
                return Err(StoreError::Invalid {
                    kind: rt.qualified_kind(),
                    name,
                    causes,
                });
            }
        }
        ("storage.k8s.io", "CSIStorageCapacity") => {
            // What the driver was asked about (class, topology) cannot change; only the answer.
            for field in ["storageClassName", "nodeTopology"] {
                if old.get(field) != new.get(field) {
                    return Err(StoreError::invalid(
                        &rt.qualified_kind(),
                        &name,
                        field,
                        "Invalid value: field is immutable",
                    ));
                }
            }
        }
        ("resource.k8s.io", "ResourceClaim")
            if mode == UpdateMode::Main && old.get("spec") != new.get("spec") =>
        {
            return Err(StoreError::invalid(
                &rt.qualified_kind(),
                &name,
                "spec",
                "Invalid value: field is immutable",
            ));
        }
        ("resource.k8s.io", "ResourceClaim") if mode == UpdateMode::Status => {
            let causes = admission::check_claim_status_update(old, new);
            if !causes.is_empty() {
                return Err(StoreError::Invalid {
                    kind: rt.qualified_kind(),
                    name,
                    causes,
                });
            }
        }
        ("scheduling.k8s.io", "PriorityClass") if old.get("value") != new.get("value") => {
            return Err(StoreError::invalid(
                &rt.qualified_kind(),
                &name,
                "value",
                "Forbidden: may not be changed in an update.",
            ));
        }
        _ => {}
    }
    Ok(())
}

/// True when a status write gives a bound pod a nomination it did not have.
fn nominates_bound_pod(old: &Value, new: &Value) -> bool {
    use crate::util::get_str;
    let nominated = get_str(new, &["status", "nominatedNodeName"]).unwrap_or_default();
    !get_str(old, &["spec", "nodeName"]).unwrap_or_default().is_empty()
        && !nominated.is_empty()
        && Some(nominated) != get_str(old, &["status", "nominatedNodeName"])
}

/// RBAC objects are named like `system:kube-scheduler`: kube-apiserver only asks that the name can
/// be one segment of a URL path.
fn check_path_segment(name: &str) -> Result<(), NameError> {
    match name {
        "" => Err(NameError::Empty),
        "." => Err(NameError::DotSegment(".")),
        ".." => Err(NameError::DotSegment("..")),
        _ => match name.chars().find(|c| *c == '/' || *c == '%') {
            Some(c) => Err(NameError::ForbiddenCharacter(c)),
            None => Ok(()),
        },
    }
}

/// Decodes the object into its k8s-openapi type and runs the generic and kind-specific checks.
/// `old` is the stored object when the write is an update: kinds whose rules differ on an update
/// (what may not change) check against it, as kube-apiserver's update validation does.
pub(crate) fn validate(rt: &ResourceType, obj: &Value, old: Option<&Value>) -> Result<(), StoreError> {
    let name = name_of(obj);
    if let Err((field, message)) = (rt.validate)(obj) {
        let field = if field.is_empty() {
            rt.kind.to_string()
        } else {
            field
        };
        return Err(StoreError::invalid(
            &rt.qualified_kind(),
            name,
            field,
            format!("Invalid value: {message}"),
        ));
    }
    let name_check = if rt.is("", "Namespace") {
        check_dns_label(name)
    } else if rt.group == "rbac.authorization.k8s.io" {
        check_path_segment(name)
    } else {
        check_dns_subdomain(name)
    };
    if let Err(msg) = name_check {
        return Err(StoreError::invalid(
            &rt.qualified_kind(),
            name,
            "metadata.name",
            format!("Invalid value: {name:?}: {msg}"),
        ));
    }
    let mut causes = Vec::new();
    if is_pod(rt) {
        validate_pod(obj, &mut causes);
        admission::check_pod_ports(obj, &mut causes);
    } else if rt.is("resource.k8s.io", "ResourceClaim") {
        admission::check_resource_claim(obj, &mut causes);
    } else if rt.is("resource.k8s.io", "ResourceClaimTemplate") {
        admission::check_resource_claim_template(obj, &mut causes);
    } else if rt.is("scheduling.k8s.io", "PodGroup") {
        admission::check_pod_group(obj, &mut causes);
    } else if rt.is("scheduling.k8s.io", "CompositePodGroup") {
        admission::check_composite_pod_group(obj, &mut causes);
    } else if rt.is("scheduling.k8s.io", "Workload") {
        admission::check_workload(obj, old, &mut causes);
    } else if rt.is("resource.k8s.io", "DeviceClass") {
        admission::check_device_class(obj, &mut causes);
    } else if rt.is("resource.k8s.io", "ResourceSlice") {
        admission::check_resource_slice(obj, &mut causes);
    } else if rt.is("", "Node") {
        for list in ["capacity", "allocatable"] {
            check_quantities(obj, &["status", list], &format!("status.{list}"), &mut causes);
        }
    } else if rt.is("storage.k8s.io", "CSIStorageCapacity") {
        check_storage_capacity(obj, &mut causes);
    } else if rt.is("", "PersistentVolume") {
        admission::check_persistent_volume(obj, &mut causes);
    } else if rt.is("batch", "Job") {
        admission::check_job(obj, &mut causes);
        if let Some(template) = get_path(obj, &["spec", "template"]) {
            let mut template_causes = Vec::new();
            validate_pod(template, &mut template_causes);
            causes.extend(template_causes.into_iter().map(|c| Cause {
                field: format!("spec.template.{}", c.field),
                message: c.message,
            }));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(StoreError::Invalid {
            kind: rt.qualified_kind(),
            name: name.to_string(),
            causes,
        })
    }
}

/// A CSIStorageCapacity names a storage class by a valid name, and reports no negative capacity
/// (a maximum volume size is not checked, as upstream).
fn check_storage_capacity(obj: &Value, causes: &mut Vec<Cause>) {
    let class = get_str(obj, &["storageClassName"]).unwrap_or_default();
    if let Err(msg) = check_dns_subdomain(class) {
        causes.push(Cause {
            field: "storageClassName".into(),
            message: format!("Invalid value: {class:?}: {msg}"),
        });
    }
    if let Some(capacity) = obj.get("capacity") {
        let text = match capacity {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.clone(),
            _ => String::new(),
        };
        if quantity_of(capacity).is_some_and(|q| q.is_negative()) {
            causes.push(Cause {
                field: "capacity".into(),
                message: format!("Invalid value: {text:?}: must be greater than or equal to 0"),
            });
        }
    }
}

fn check_quantities(obj: &Value, path: &[&str], field: &str, causes: &mut Vec<Cause>) {
    let Some(list) = get_path(obj, path).and_then(Value::as_object) else {
        return;
    };
    for (k, v) in list {
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => continue,
        };
        match Quantity::parse(&text) {
            Ok(q) if q.is_negative() => causes.push(Cause {
                field: format!("{field}[{k}]"),
                message: format!("Invalid value: {text:?}: must be greater than or equal to 0"),
            }),
            Ok(_) => {}
            Err(_) => causes.push(Cause {
                field: format!("{field}[{k}]"),
                message: format!(
                    "Invalid value: {text:?}: quantities must match the regular expression \
                     '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
                ),
            }),
        }
    }
}

fn quantity_of(v: &Value) -> Option<Quantity> {
    match v {
        Value::String(s) => Quantity::parse(s).ok(),
        Value::Number(n) => Quantity::parse(&n.to_string()).ok(),
        _ => None,
    }
}

fn validate_pod(pod: &Value, causes: &mut Vec<Cause>) {
    let containers = get_path(pod, &["spec", "containers"]).and_then(Value::as_array);
    if containers.is_none_or(|c| c.is_empty()) {
        causes.push(Cause {
            field: "spec.containers".into(),
            message: "Required value".into(),
        });
    }
    for list in ["containers", "initContainers"] {
        let Some(cs) = get_path(pod, &["spec", list]).and_then(Value::as_array) else {
            continue;
        };
        let mut seen = Vec::new();
        for (i, c) in cs.iter().enumerate() {
            let cname = get_str(c, &["name"]).unwrap_or_default();
            if cname.is_empty() {
                causes.push(Cause {
                    field: format!("spec.{list}[{i}].name"),
                    message: "Required value".into(),
                });
            } else if let Err(msg) = check_dns_label(cname) {
                causes.push(Cause {
                    field: format!("spec.{list}[{i}].name"),
                    message: format!("Invalid value: {cname:?}: {msg}"),
                });
            }
            if get_str(c, &["image"]).unwrap_or_default().is_empty() {
                causes.push(Cause {
                    field: format!("spec.{list}[{i}].image"),
                    message: "Required value".into(),
                });
            }
            if seen.contains(&cname) {
                causes.push(Cause {
                    field: format!("spec.{list}[{i}].name"),
                    message: format!("Duplicate value: {cname:?}"),
                });
            }
            seen.push(cname);
            let base = format!("spec.{list}[{i}].resources");
            check_quantities(c, &["resources", "requests"], &format!("{base}.requests"), causes);
            check_quantities(c, &["resources", "limits"], &format!("{base}.limits"), causes);
            check_requests_within_limits(c.get("resources"), &base, causes);
        }
    }
    check_quantities(
        pod,
        &["spec", "resources", "requests"],
        "spec.resources.requests",
        causes,
    );
    check_quantities(
        pod,
        &["spec", "resources", "limits"],
        "spec.resources.limits",
        causes,
    );
    check_requests_within_limits(get_path(pod, &["spec", "resources"]), "spec.resources", causes);
    check_quantities(pod, &["spec", "overhead"], "spec.overhead", causes);
}

fn check_requests_within_limits(res: Option<&Value>, base: &str, causes: &mut Vec<Cause>) {
    let Some(res) = res else { return };
    let (Some(req), Some(lim)) = (
        res.get("requests").and_then(Value::as_object),
        res.get("limits").and_then(Value::as_object),
    ) else {
        return;
    };
    for (k, l) in lim {
        if let (Some(r), Some(lq)) = (req.get(k).and_then(quantity_of), quantity_of(l))
            && r > lq
        {
            causes.push(Cause {
                field: format!("{base}.requests[{k}]"),
                message: format!(
                    "Invalid value: {:?}: must be less than or equal to {k} limit of {}",
                    r.to_string(),
                    lq
                ),
            });
        }
    }
}

fn default_pod_spec(spec: &mut Map<String, Value>, creating: bool) {
    for (k, v) in [
        ("schedulerName", json!("default-scheduler")),
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("terminationGracePeriodSeconds", json!(30)),
    ] {
        spec.entry(k.to_string()).or_insert(v);
    }
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = spec.get_mut(list) {
            for c in cs.iter_mut() {
                default_requests_from_limits(c.get_mut("resources"));
            }
        }
    }
    default_requests_from_limits(spec.get_mut("resources"));
    if creating {
        // DefaultTolerationSeconds admission.
        let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
        if let Value::Array(ts) = tolerations {
            for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
                let tolerated = ts.iter().any(|t| {
                    let k = get_str(t, &["key"]).unwrap_or_default();
                    let effect = get_str(t, &["effect"]).unwrap_or_default();
                    let op = get_str(t, &["operator"]).unwrap_or("Equal");
                    (k == key || (k.is_empty() && op == "Exists"))
                        && (effect.is_empty() || effect == "NoExecute")
                });
                if !tolerated {
                    ts.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
                }
            }
        }
    }
}

fn default_requests_from_limits(res: Option<&mut Value>) {
    let Some(Value::Object(res)) = res else { return };
    let Some(Value::Object(limits)) = res.get("limits").cloned() else {
        return;
    };
    let requests = res.entry("requests").or_insert_with(|| json!({}));
    if let Value::Object(req) = requests {
        for (k, v) in limits {
            req.entry(k).or_insert(v);
        }
    }
}

/// The PriorityClass an object's `priorityClassName` names, or the global default class when it
/// names none (should a race have left several, the one of the lowest value, as kube-apiserver
/// picks): kube-apiserver's Priority admission, shared by pods
/// and PodGroups. A named class that does not exist is refused in kube-apiserver's words for
/// `resource` (`pods`, `podgroups.scheduling.k8s.io`).
fn priority_class_of(
    spec: &Map<String, Value>,
    lookup: &dyn Lookup,
    resource: &str,
    name: &str,
) -> Result<(String, Option<ObjectRef>), StoreError> {
    let class_name = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if class_name.is_empty() {
        let default = lookup
            .all("priorityclasses")
            .into_iter()
            .filter(|pc| pc.value().get("globalDefault").and_then(Value::as_bool) == Some(true))
            .min_by_key(|pc| {
                pc.value()
                    .get("value")
                    .and_then(Value::as_i64)
                    .unwrap_or_default()
            });
        return Ok((class_name, default));
    }
    match lookup.lookup("priorityclasses", "", &class_name) {
        Some(pc) => Ok((class_name, Some(pc))),
        None => Err(StoreError::Forbidden(format!(
            "{resource} \"{name}\" is forbidden: no PriorityClass with name {class_name} was found"
        ))),
    }
}

fn admit_priority(
    pod_name: &str,
    spec: &mut Map<String, Value>,
    lookup: &dyn Lookup,
) -> Result<(), StoreError> {
    let (class_name, class) = priority_class_of(spec, lookup, "pods", pod_name)?;
    let value = class
        .as_ref()
        .and_then(|pc| pc.value().get("value").and_then(Value::as_i64))
        .unwrap_or(0);
    let policy = class
        .as_ref()
        .and_then(|pc| {
            pc.value()
                .get("preemptionPolicy")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| "PreemptLowerPriority".into());
    if let Some(given) = spec.get("priority").and_then(Value::as_i64)
        && given != value
    {
        return Err(StoreError::Forbidden(format!(
            "pods \"{pod_name}\" is forbidden: the integer value of priority ({given}) must not be provided in pod \
             spec; priority admission controller computed {value} from the given PriorityClass name"
        )));
    }
    if let Some(given) = spec.get("preemptionPolicy").and_then(Value::as_str)
        && class.is_some()
        && given != policy
    {
        return Err(StoreError::Forbidden(format!(
            "pods \"{pod_name}\" is forbidden: the string value of PreemptionPolicy ({given}) must not be provided \
             in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
        )));
    }
    spec.insert("priority".into(), json!(value));
    spec.entry("preemptionPolicy").or_insert(json!(policy));
    if class_name.is_empty()
        && let Some(pc) = &class
    {
        spec.insert("priorityClassName".into(), json!(name_of(pc.value())));
    }
    Ok(())
}

/// The pod QoS class (`Guaranteed`, `Burstable`, `BestEffort`) from its cpu/memory requests and limits.
pub(crate) fn qos_class(pod: &Value) -> &'static str {
    let mut lists: Vec<&Value> = Vec::new();
    if let Some(r) = get_path(pod, &["spec", "resources"])
        && (r
            .get("requests")
            .is_some_and(|x| x.as_object().is_some_and(|m| !m.is_empty()))
            || r.get("limits")
                .is_some_and(|x| x.as_object().is_some_and(|m| !m.is_empty())))
    {
        lists.push(r);
    } else {
        for list in ["containers", "initContainers"] {
            if let Some(cs) = get_path(pod, &["spec", list]).and_then(Value::as_array) {
                lists.extend(cs.iter().filter_map(|c| c.get("resources")));
                // Containers without resources count as empty.
                let without = cs.iter().filter(|c| c.get("resources").is_none()).count();
                for _ in 0..without {
                    lists.push(&Value::Null);
                }
            }
        }
    }
    let q = |v: &Value, which: &str, res: &str| v.get(which).and_then(|m| m.get(res)).and_then(quantity_of);
    let mut any = false;
    let mut guaranteed = true;
    for r in &lists {
        for res in ["cpu", "memory"] {
            let req = q(r, "requests", res).filter(|x| !x.is_zero());
            let lim = q(r, "limits", res).filter(|x| !x.is_zero());
            if req.is_some() || lim.is_some() {
                any = true;
            }
            match (req, lim) {
                (Some(a), Some(b)) if a == b => {}
                (None, Some(_)) => {}
                _ => guaranteed = false,
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn default_node(node: &mut Value) {
    if let Some(cap) = get_path(node, &["status", "capacity"]).cloned()
        && get_path(node, &["status", "allocatable"]).is_none()
    {
        crate::util::object_at(node, &["status"]).insert("allocatable".into(), cap);
    }
}

const POD_UPDATE_MESSAGE: &str = "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,\
`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),\
`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

fn masked_pod_spec(spec: Option<&Value>) -> Value {
    let mut s = spec.cloned().unwrap_or_else(|| json!({}));
    if let Value::Object(m) = &mut s {
        for f in [
            "activeDeadlineSeconds",
            "tolerations",
            "terminationGracePeriodSeconds",
            "schedulingGates",
        ] {
            m.remove(f);
        }
        for list in ["containers", "initContainers"] {
            if let Some(Value::Array(cs)) = m.get_mut(list) {
                for c in cs.iter_mut() {
                    if let Value::Object(c) = c {
                        c.remove("image");
                    }
                }
            }
        }
    }
    s
}

fn check_pod_spec_update(name: &str, old: Option<&Value>, new: Option<&Value>) -> Result<(), StoreError> {
    let gate_names = |s: Option<&Value>| -> Vec<String> {
        s.and_then(|s| s.get("schedulingGates"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|g| get_str(g, &["name"]).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let old_gates = gate_names(old);
    for g in gate_names(new) {
        if !old_gates.contains(&g) {
            return Err(StoreError::invalid(
                "Pod",
                name,
                "spec.schedulingGates",
                format!("Forbidden: only deletion is allowed, but found new scheduling gate '{g}'"),
            ));
        }
    }
    if masked_pod_spec(old) != masked_pod_spec(new) {
        return Err(StoreError::invalid("Pod", name, "spec", POD_UPDATE_MESSAGE));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qos() {
        let pod = |res: Value| json!({"spec": {"containers": [{"name": "c", "resources": res}]}});
        assert_eq!(qos_class(&pod(json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&json!({"spec": {"containers": [{"name": "c"}]}})),
            "BestEffort"
        );
        assert_eq!(qos_class(&pod(json!({"requests": {"cpu": "1"}}))), "Burstable");
        assert_eq!(
            qos_class(&pod(
                json!({"requests": {"cpu": "1000m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}})
            )),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&pod(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))),
            "Guaranteed"
        );
    }

    #[test]
    fn pod_update_rules() {
        let old = json!({"containers": [{"name": "c", "image": "a"}], "nodeName": ""});
        let new = json!({"containers": [{"name": "c", "image": "b"}], "nodeName": "", "tolerations": []});
        assert!(check_pod_spec_update("p", Some(&old), Some(&new)).is_ok());
        let new = json!({"containers": [{"name": "c", "image": "a"}], "nodeName": "n1"});
        assert_eq!(
            check_pod_spec_update("p", Some(&old), Some(&new))
                .unwrap_err()
                .code(),
            422
        );
        let gated = json!({"containers": [], "schedulingGates": [{"name": "g"}]});
        let ungated = json!({"containers": []});
        assert!(check_pod_spec_update("p", Some(&gated), Some(&ungated)).is_ok());
        assert!(check_pod_spec_update("p", Some(&ungated), Some(&gated)).is_err());
    }

    #[test]
    fn nodes_default_to_ready_with_an_address() {
        let mut node = json!({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "1"}}});
        default_node_readiness(&mut node);
        assert_eq!(node["status"]["conditions"][0]["type"], "Ready");
        assert_eq!(node["status"]["conditions"][0]["status"], "True");
        assert_eq!(
            node["status"]["addresses"],
            json!([{"type": "Hostname", "address": "n1"}])
        );
        let mut given = json!({"metadata": {"name": "n2"}, "status": {
            "conditions": [{"type": "Ready", "status": "False"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}});
        let before = given.clone();
        default_node_readiness(&mut given);
        assert_eq!(given, before);
    }

    #[test]
    fn requests_default_from_limits() {
        let mut spec = json!({"containers": [{"name": "c", "resources": {"limits": {"cpu": "2"}}}]});
        default_pod_spec(spec.as_object_mut().unwrap(), true);
        assert_eq!(spec["containers"][0]["resources"]["requests"]["cpu"], "2");
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["tolerations"].as_array().unwrap().len(), 2);
    }
}

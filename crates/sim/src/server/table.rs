//! Minimal server-side printing (`meta.k8s.io/v1` `Table`), which `kubectl get` asks for.

use serde_json::{Value, json};

use crate::registry::ResourceType;
use crate::store::ObjectRef;
use crate::util::{get_path, get_str, now, parse_time};

/// What each row carries in `object` (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub(crate) fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

/// Whether an `Accept` header asks for a Table.
pub(crate) fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

/// Whether an `Accept` header asks for one object's metadata only (`as=PartialObjectMetadata`).
pub(crate) fn wants_metadata(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.split(';').any(|p| p.trim() == "as=PartialObjectMetadata"))
}

/// The `meta.k8s.io/v1` `PartialObjectMetadata` of `o`. A Table's rows leave `managedFields` out;
/// a plain metadata reply keeps them, as kube-apiserver does.
pub(crate) fn partial_object_metadata(o: &ObjectRef, managed_fields: bool) -> Value {
    let mut meta = o.get("metadata").cloned().unwrap_or(json!({}));
    if !managed_fields && let Some(m) = meta.as_object_mut() {
        m.remove("managedFields");
    }
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta})
}

struct Column {
    name: &'static str,
    kind: &'static str,
    priority: i64,
}

const fn col(name: &'static str, kind: &'static str, priority: i64) -> Column {
    Column { name, kind, priority }
}

fn columns(rt: &ResourceType) -> Vec<Column> {
    match (rt.group, rt.kind) {
        ("", "Pod") => vec![
            col("Name", "string", 0),
            col("Ready", "string", 0),
            col("Status", "string", 0),
            col("Restarts", "string", 0),
            col("Age", "string", 0),
            col("IP", "string", 1),
            col("Node", "string", 1),
            col("Nominated Node", "string", 1),
            col("Readiness Gates", "string", 1),
        ],
        ("", "Node") => vec![
            col("Name", "string", 0),
            col("Status", "string", 0),
            col("Roles", "string", 0),
            col("Age", "string", 0),
            col("Version", "string", 0),
        ],
        ("", "Namespace") => vec![
            col("Name", "string", 0),
            col("Status", "string", 0),
            col("Age", "string", 0),
        ],
        ("", "Event") => vec![
            col("Last Seen", "string", 0),
            col("Type", "string", 0),
            col("Reason", "string", 0),
            col("Object", "string", 0),
            col("Message", "string", 0),
        ],
        ("resource.k8s.io", "ResourceClaim") => {
            vec![
                col("Name", "string", 0),
                col("State", "string", 0),
                col("Age", "string", 0),
            ]
        }
        ("resource.k8s.io", "ResourceSlice") => vec![
            col("Name", "string", 0),
            col("Node", "string", 0),
            col("Driver", "string", 0),
            col("Pool", "string", 0),
            col("Age", "string", 0),
        ],
        ("scheduling.k8s.io", "PriorityClass") => vec![
            col("Name", "string", 0),
            col("Value", "integer", 0),
            col("Global-Default", "boolean", 0),
            col("Age", "string", 0),
            col("Preemption Policy", "string", 0),
        ],
        ("coordination.k8s.io", "Lease") => {
            vec![
                col("Name", "string", 0),
                col("Holder", "string", 0),
                col("Age", "string", 0),
            ]
        }
        ("policy", "PodDisruptionBudget") => vec![
            col("Name", "string", 0),
            col("Min Available", "string", 0),
            col("Max Unavailable", "string", 0),
            col("Allowed Disruptions", "integer", 0),
            col("Age", "string", 0),
        ],
        ("", "Service") => vec![
            col("Name", "string", 0),
            col("Type", "string", 0),
            col("Cluster-IP", "string", 0),
            col("External-IP", "string", 0),
            col("Port(s)", "string", 0),
            col("Age", "string", 0),
            col("Selector", "string", 1),
        ],
        ("apps", "Deployment") => vec![
            col("Name", "string", 0),
            col("Ready", "string", 0),
            col("Up-to-date", "string", 0),
            col("Available", "string", 0),
            col("Age", "string", 0),
            col("Containers", "string", 1),
            col("Images", "string", 1),
            col("Selector", "string", 1),
        ],
        ("batch", "Job") => vec![
            col("Name", "string", 0),
            col("Status", "string", 0),
            col("Completions", "string", 0),
            col("Duration", "string", 0),
            col("Age", "string", 0),
            col("Containers", "string", 1),
            col("Images", "string", 1),
            col("Selector", "string", 1),
        ],
        _ => vec![col("Name", "string", 0), col("Age", "string", 0)],
    }
}

fn strings(v: &Value, path: &[&str]) -> Vec<String> {
    get_path(v, path)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// The service type as stored by kube-apiserver, which defaults an absent type to `ClusterIP` (this
/// server stores Services as given).
fn service_type(svc: &Value) -> String {
    get_str(svc, &["spec", "type"])
        .filter(|t| !t.is_empty())
        .unwrap_or("ClusterIP")
        .to_string()
}

/// EXTERNAL-IP: the external IPs of ClusterIP and NodePort services, the load balancer's ingress
/// (`<pending>` until one is reported) before them for LoadBalancer services, the DNS name for
/// ExternalName services.
fn service_external_ip(svc: &Value) -> String {
    let external = strings(svc, &["spec", "externalIPs"]);
    match service_type(svc).as_str() {
        "ClusterIP" | "NodePort" if external.is_empty() => "<none>".into(),
        "ClusterIP" | "NodePort" => external.join(","),
        "LoadBalancer" => {
            // A set, in sorted order, as kubectl's printer builds it.
            let ingress: std::collections::BTreeSet<String> =
                get_path(svc, &["status", "loadBalancer", "ingress"])
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|i| {
                                get_str(i, &["ip"])
                                    .filter(|x| !x.is_empty())
                                    .or_else(|| get_str(i, &["hostname"]).filter(|x| !x.is_empty()))
                                    .map(str::to_string)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
            let all: Vec<String> = ingress.into_iter().chain(external).collect();
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => s(svc, &["spec", "externalName"]),
        _ => "<unknown>".into(),
    }
}

/// PORT(S): `port/PROTOCOL`, or `port:nodePort/PROTOCOL` when a node port is set; `<none>`.
fn service_ports(svc: &Value) -> String {
    let ports: Vec<String> = get_path(svc, &["spec", "ports"])
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|p| {
                    let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
                    let protocol = get_str(p, &["protocol"])
                        .filter(|x| !x.is_empty())
                        .unwrap_or("TCP");
                    match p.get("nodePort").and_then(Value::as_i64).filter(|n| *n > 0) {
                        Some(node_port) => format!("{port}:{node_port}/{protocol}"),
                        None => format!("{port}/{protocol}"),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    }
}

/// A label map as `k=v,…` in key order, `<none>` when empty (the Service SELECTOR column).
fn label_map(v: Option<&Value>) -> String {
    let pairs: Vec<String> = v
        .and_then(Value::as_object)
        .map(|m| {
            let sorted: std::collections::BTreeMap<&String, &Value> = m.iter().collect();
            sorted
                .into_iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// A `metav1.LabelSelector` in the selector string form (`app=web,tier in (a,b),!legacy`),
/// requirements ordered by key; empty for a selector without requirements (as upstream's selector
/// prints), `<invalid>` for an unknown operator (the Deployment SELECTOR column).
fn label_selector_string(sel: Option<&Value>) -> String {
    let Some(sel) = sel.filter(|s| s.is_object()) else {
        return String::new();
    };
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(ml) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in ml {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
        }
    }
    for e in get_path(sel, &["matchExpressions"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = s(e, &["key"]);
        let mut values = strings(e, &["values"]);
        values.sort();
        let text = match get_str(e, &["operator"]).unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            _ => return "<invalid>".into(),
        };
        reqs.push((key, text));
    }
    reqs.sort();
    reqs.into_iter().map(|(_, t)| t).collect::<Vec<_>>().join(",")
}

/// The time since `created` in kubectl's short human form (`45s`, `3m2s`, `10m`, `5h`, `3d`).
pub(crate) fn human_age(created: Option<&str>) -> String {
    let Some(t) = created.and_then(parse_time) else {
        return "<unknown>".into();
    };
    human_duration(now().as_second() - t.as_second())
}

/// A number of seconds in kubectl's short human form.
fn human_duration(secs: i64) -> String {
    match secs.max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn s(v: &Value, path: &[&str]) -> String {
    match get_path(v, path) {
        Some(Value::String(x)) => x.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

fn or_none(x: String) -> Value {
    if x.is_empty() { json!("<none>") } else { json!(x) }
}

fn pod_status(pod: &Value) -> String {
    if get_path(pod, &["metadata", "deletionTimestamp"]).is_some() {
        return "Terminating".into();
    }
    let reason = s(pod, &["status", "reason"]);
    if !reason.is_empty() {
        return reason;
    }
    if get_path(pod, &["spec", "schedulingGates"])
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty())
    {
        return "SchedulingGated".into();
    }
    let phase = s(pod, &["status", "phase"]);
    if phase == "Succeeded" {
        return "Completed".into();
    }
    if phase.is_empty() { "Pending".into() } else { phase }
}

fn cells(rt: &ResourceType, o: &Value) -> Vec<Value> {
    let name = json!(s(o, &["metadata", "name"]));
    let age = json!(human_age(get_str(o, &["metadata", "creationTimestamp"])));
    match (rt.group, rt.kind) {
        ("", "Pod") => {
            let total = get_path(o, &["spec", "containers"])
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let statuses = get_path(o, &["status", "containerStatuses"]).and_then(Value::as_array);
            let ready = statuses.map_or(0, |c| {
                c.iter().filter(|c| c.get("ready") == Some(&json!(true))).count()
            });
            let restarts: i64 = statuses
                .map(|c| {
                    c.iter()
                        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                        .sum()
                })
                .unwrap_or(0);
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(pod_status(o)),
                json!(restarts.to_string()),
                age,
                or_none(s(o, &["status", "podIP"])),
                or_none(s(o, &["spec", "nodeName"])),
                or_none(s(o, &["status", "nominatedNodeName"])),
                json!("<none>"),
            ]
        }
        ("", "Node") => {
            let ready = get_path(o, &["status", "conditions"])
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| get_str(c, &["type"]) == Some("Ready")))
                .map(|c| get_str(c, &["status"]) == Some("True"));
            let mut status = match ready {
                Some(true) => "Ready".to_string(),
                Some(false) => "NotReady".to_string(),
                None => "Unknown".to_string(),
            };
            if get_path(o, &["spec", "unschedulable"]) == Some(&json!(true)) {
                status.push_str(",SchedulingDisabled");
            }
            let roles: Vec<String> = get_path(o, &["metadata", "labels"])
                .and_then(Value::as_object)
                .map(|l| {
                    l.keys()
                        .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/").map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            vec![
                name,
                json!(status),
                or_none(roles.join(",")),
                age,
                json!(s(o, &["status", "nodeInfo", "kubeletVersion"])),
            ]
        }
        ("", "Namespace") => vec![name, json!(s(o, &["status", "phase"])), age],
        ("", "Event") => {
            let last = get_str(o, &["lastTimestamp"]).or(get_str(o, &["eventTime"]));
            vec![
                json!(human_age(last.or(get_str(o, &["metadata", "creationTimestamp"])))),
                json!(s(o, &["type"])),
                json!(s(o, &["reason"])),
                json!(format!(
                    "{}/{}",
                    s(o, &["involvedObject", "kind"]).to_lowercase(),
                    s(o, &["involvedObject", "name"])
                )),
                json!(s(o, &["message"])),
            ]
        }
        ("resource.k8s.io", "ResourceClaim") => {
            let mut state = Vec::new();
            if get_path(o, &["metadata", "deletionTimestamp"]).is_some() {
                state.push("deleted");
            }
            if get_path(o, &["status", "allocation"]).is_some() {
                state.push("allocated");
            } else {
                state.push("pending");
            }
            if get_path(o, &["status", "reservedFor"])
                .and_then(Value::as_array)
                .is_some_and(|r| !r.is_empty())
            {
                state.push("reserved");
            }
            vec![name, json!(state.join(",")), age]
        }
        ("resource.k8s.io", "ResourceSlice") => vec![
            name,
            or_none(s(o, &["spec", "nodeName"])),
            json!(s(o, &["spec", "driver"])),
            json!(s(o, &["spec", "pool", "name"])),
            age,
        ],
        ("scheduling.k8s.io", "PriorityClass") => vec![
            name,
            get_path(o, &["value"]).cloned().unwrap_or(json!(0)),
            json!(get_path(o, &["globalDefault"]) == Some(&json!(true))),
            age,
            json!(get_str(o, &["preemptionPolicy"]).unwrap_or("PreemptLowerPriority")),
        ],
        ("coordination.k8s.io", "Lease") => vec![name, or_none(s(o, &["spec", "holderIdentity"])), age],
        ("policy", "PodDisruptionBudget") => vec![
            name,
            json!(if s(o, &["spec", "minAvailable"]).is_empty() {
                "N/A".into()
            } else {
                s(o, &["spec", "minAvailable"])
            }),
            json!(if s(o, &["spec", "maxUnavailable"]).is_empty() {
                "N/A".into()
            } else {
                s(o, &["spec", "maxUnavailable"])
            }),
            get_path(o, &["status", "disruptionsAllowed"])
                .cloned()
                .unwrap_or(json!(0)),
            age,
        ],
        ("", "Service") => vec![
            name,
            json!(service_type(o)),
            json!(
                strings(o, &["spec", "clusterIPs"])
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "<none>".into())
            ),
            json!(service_external_ip(o)),
            json!(service_ports(o)),
            age,
            json!(label_map(get_path(o, &["spec", "selector"]))),
        ],
        ("apps", "Deployment") => {
            let count = |path: &[&str]| get_path(o, path).and_then(Value::as_i64).unwrap_or(0);
            // An absent `spec.replicas` is defaulted to 1 by kube-apiserver.
            let desired = get_path(o, &["spec", "replicas"])
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let containers = get_path(o, &["spec", "template", "spec", "containers"])
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let field = |f: &str| {
                containers
                    .iter()
                    .map(|c| s(c, &[f]))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            vec![
                name,
                json!(format!("{}/{desired}", count(&["status", "readyReplicas"]))),
                json!(count(&["status", "updatedReplicas"])),
                json!(count(&["status", "availableReplicas"])),
                age,
                json!(field("name")),
                json!(field("image")),
                json!(label_selector_string(get_path(o, &["spec", "selector"]))),
            ]
        }
        ("batch", "Job") => job_cells(o, name, age),
        _ => vec![name, age],
    }
}

/// A Job's row as kubectl prints it: the most telling condition as its status, succeeded of
/// completions, and how long it ran (until now, or until it completed).
fn job_cells(o: &Value, name: Value, age: Value) -> Vec<Value> {
    let count = |path: &[&str]| get_path(o, path).and_then(Value::as_i64);
    let succeeded = count(&["status", "succeeded"]).unwrap_or(0);
    let completions = match (count(&["spec", "completions"]), count(&["spec", "parallelism"])) {
        (Some(c), _) => format!("{succeeded}/{c}"),
        (None, Some(p)) if p > 1 => format!("{succeeded}/1 of {p}"),
        (None, _) => format!("{succeeded}/1"),
    };
    let time = |field: &str| get_str(o, &["status", field]).and_then(parse_time);
    let duration = match (time("startTime"), time("completionTime")) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration(now().as_second() - start.as_second()),
        (Some(start), Some(end)) => human_duration(end.as_second() - start.as_second()),
    };
    let has = |kind: &str| {
        get_path(o, &["status", "conditions"])
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == kind && c["status"] == "True"))
    };
    let status = if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if get_path(o, &["metadata", "deletionTimestamp"]).is_some() {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else if has("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    let containers = get_path(o, &["spec", "template", "spec", "containers"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let field = |f: &str| {
        containers
            .iter()
            .map(|c| s(c, &[f]))
            .collect::<Vec<_>>()
            .join(",")
    };
    vec![
        name,
        json!(status),
        json!(completions),
        json!(duration),
        age,
        json!(field("name")),
        json!(field("image")),
        json!(label_selector_string(get_path(o, &["spec", "selector"]))),
    ]
}

fn row_object(o: &ObjectRef, include: IncludeObject) -> Option<Value> {
    match include {
        IncludeObject::None => None,
        IncludeObject::Object => Some(o.to_value()),
        IncludeObject::Metadata => Some(partial_object_metadata(o, false)),
    }
}

/// A Table of `objects`.
pub(crate) fn table(
    rt: &ResourceType,
    objects: &[ObjectRef],
    include: IncludeObject,
    list_meta: Value,
    with_columns: bool,
) -> Value {
    let cols: Vec<Value> = columns(rt)
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "type": c.kind,
                "format": if c.name == "Name" { "name" } else { "" },
                "description": c.name,
                "priority": c.priority,
            })
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = json!({"cells": cells(rt, o.value())});
            if let Some(obj) = row_object(o, include) {
                row["object"] = obj;
            }
            row
        })
        .collect();
    let mut t = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "rows": rows});
    if with_columns {
        t["columnDefinitions"] = json!(cols);
    }
    t
}

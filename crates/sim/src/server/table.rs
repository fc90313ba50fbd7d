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
        _ => vec![col("Name", "string", 0), col("Age", "string", 0)],
    }
}

/// A duration in kubectl's short human form (`45s`, `3m2s`, `10m`, `5h`, `3d`).
pub(crate) fn human_age(created: Option<&str>) -> String {
    let Some(t) = created.and_then(parse_time) else {
        return "<unknown>".into();
    };
    let secs = (now().as_second() - t.as_second()).max(0);
    match secs {
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
        _ => vec![name, age],
    }
}

fn row_object(o: &ObjectRef, include: IncludeObject) -> Option<Value> {
    match include {
        IncludeObject::None => None,
        IncludeObject::Object => Some(o.to_value()),
        IncludeObject::Metadata => {
            let mut meta = o.get("metadata").cloned().unwrap_or(json!({}));
            if let Some(m) = meta.as_object_mut() {
                m.remove("managedFields");
            }
            Some(json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}))
        }
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

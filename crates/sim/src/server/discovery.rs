//! `/version`, `/api`, `/apis`, `/apis/<group>` and `/api[s]/<group>/<version>` discovery documents
//! (the OpenAPI documents are in [`super::openapi`]).

use serde_json::{Value, json};

use crate::registry::Registry;

/// The Kubernetes version the simulator reports.
pub const KUBE_MAJOR: &str = "1";
/// The Kubernetes minor version the simulator reports.
pub const KUBE_MINOR: &str = "37";

pub(crate) fn version() -> Value {
    json!({
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "gitVersion": format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0-unisched-sim"),
        "gitCommit": "unisched-sim",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "none (unisched-sim, Rust)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

pub(crate) fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_json(registry: &Registry, group: &str) -> Option<Value> {
    let versions: Vec<Value> = registry
        .group_versions()
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(g, v)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first()?.clone();
    Some(json!({"name": group, "versions": versions, "preferredVersion": preferred}))
}

pub(crate) fn api_group_list(registry: &Registry) -> Value {
    let mut groups: Vec<&str> = Vec::new();
    for (g, _) in registry.group_versions() {
        if !g.is_empty() && !groups.contains(&g) {
            groups.push(g);
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .filter_map(|g| group_json(registry, g))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(crate) fn api_group(registry: &Registry, group: &str) -> Option<Value> {
    let mut g = group_json(registry, group)?;
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub(crate) fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for t in registry
        .types()
        .iter()
        .filter(|t| t.group == group && t.version == version)
    {
        let mut r = json!({
            "name": t.plural,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": VERBS,
        });
        if !t.short_names.is_empty() {
            r["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            r["categories"] = json!(t.categories);
        }
        resources.push(r);
        if t.status.has_subresource() {
            resources.push(json!({
                "name": format!("{}/status", t.plural), "singularName": "", "namespaced": t.namespaced,
                "kind": t.kind, "verbs": ["get", "patch", "update"],
            }));
        }
        for sub in &t.subresources {
            let (kind, verbs) = match *sub {
                "binding" => ("Binding", vec!["create"]),
                "eviction" => ("Eviction", vec!["create"]),
                _ => (t.kind, vec!["get", "patch", "update"]),
            };
            let mut r = json!({
                "name": format!("{}/{sub}", t.plural), "singularName": "", "namespaced": t.namespaced,
                "kind": kind, "verbs": verbs,
            });
            if *sub == "eviction" {
                // kubectl drain looks for the policy group here to pick the Eviction version.
                r["group"] = json!("policy");
                r["version"] = json!("v1");
            }
            resources.push(r);
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

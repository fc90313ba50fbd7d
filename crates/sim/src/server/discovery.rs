//! `/version`, `/api`, `/apis`, `/apis/<group>` and `/api[s]/<group>/<version>` discovery documents.

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

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the index of per-group-version documents.
pub(crate) fn openapi_v3_root(registry: &Registry) -> Value {
    let mut paths = serde_json::Map::new();
    for (g, v) in registry.group_versions() {
        let p = gv_path(g, v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}")}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/api[s]/<group>/<version>`: a skeleton OpenAPI 3 document. It lists the item path of each
/// resource with a PATCH operation that declares the `fieldValidation` parameter, which is what kubectl
/// checks before using server-side field validation (so `--validate=false` is not needed). It has no
/// schemas: `kubectl explain` does not work, and `kubectl apply` computes patches from its built-in types.
pub(crate) fn openapi_v3_gv(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    for t in registry
        .types()
        .iter()
        .filter(|t| t.group == group && t.version == version)
    {
        let base = format!("/{}", gv_path(group, version));
        let item = if t.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
        } else {
            format!("{base}/{}/{{name}}", t.plural)
        };
        let gvk = json!({"group": group, "version": version, "kind": t.kind});
        let params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
            {"name": "force", "in": "query", "schema": {"type": "boolean"}},
        ]);
        let op = |id: String| {
            json!({
                "operationId": id,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": {"200": {"description": "OK"}},
            })
        };
        paths.insert(
            item,
            json!({
                "get": op(format!("read{}", t.kind)),
                "put": op(format!("replace{}", t.kind)),
                "patch": op(format!("patch{}", t.kind)),
                "delete": op(format!("delete{}", t.kind)),
            }),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (unisched-sim)", "version": format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0")},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

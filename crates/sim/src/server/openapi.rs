//! `/openapi/v2` and `/openapi/v3[/<group-version>]`: the schemas of the served kinds.
//!
//! The schemas come from the k8s-openapi types themselves (their `schemars` implementations carry
//! the upstream field descriptions), so `kubectl explain` prints the same documentation it prints
//! against kube-apiserver, and a kind added to the registry is documented without further work.
//! Each kind's schema is tagged with `x-kubernetes-group-version-kind`, which is how kubectl finds
//! it.
//!
//! What kubectl does with the rest of the document matters as much:
//! - the item path of every resource declares a PATCH operation with the `fieldValidation`
//!   parameter, so kubectl leaves validation to the server (`fieldValidation=Strict`);
//! - that operation declares no request body, and the v2 document no `consumes`, so `kubectl apply`
//!   keeps computing strategic merge patches from its compiled-in types, as it does today. The
//!   k8s-openapi schemas lack the `x-kubernetes-patch-*` extensions; patches computed from them
//!   would replace lists (containers, volumes) that the server merges by key.
//!
//! The documents are built once per path and kept (they only depend on the registry).

use std::collections::HashMap;

use axum::body::Bytes;
use parking_lot::Mutex;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use super::discovery::{KUBE_MAJOR, KUBE_MINOR};
use crate::registry::{Registry, ResourceType};

/// The built documents, by request path (only documents that exist, so unknown paths do not grow it).
#[derive(Default)]
pub(crate) struct Cache {
    built: Mutex<HashMap<String, Bytes>>,
}

impl Cache {
    /// The document at `path`, built by `make` the first time (`None`: no such document).
    pub(crate) fn get_or_build(&self, path: &str, make: impl FnOnce() -> Option<Value>) -> Option<Bytes> {
        if let Some(b) = self.built.lock().get(path) {
            return Some(b.clone());
        }
        let doc = Bytes::from(serde_json::to_vec(&make()?).unwrap_or_default());
        self.built.lock().insert(path.to_string(), doc.clone());
        Some(doc)
    }
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn info() -> Value {
    json!({"title": "Kubernetes (unisched-sim)", "version": format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0")})
}

/// The definitions of `kinds` (and everything they refer to) as `settings` lays them out, each
/// kind's own schema tagged with its group, version and kind.
fn definitions<'a>(
    settings: SchemaSettings,
    kinds: impl Iterator<Item = &'a ResourceType>,
) -> Map<String, Value> {
    let mut generator = settings.with(|s| s.meta_schema = None).into_generator();
    let mut roots = Vec::new();
    for t in kinds {
        let reference = (t.schema)(&mut generator);
        let name = reference
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.rsplit('/').next())
            .map(str::to_string);
        if let Some(name) = name {
            roots.push((
                name,
                json!([{"group": t.group, "version": t.version, "kind": t.kind}]),
            ));
        }
    }
    let mut defs = generator.take_definitions(true);
    for (name, gvk) in roots {
        if let Some(Value::Object(schema)) = defs.get_mut(&name) {
            schema.insert("x-kubernetes-group-version-kind".into(), gvk);
        }
    }
    defs
}

/// `/openapi/v3`: the index of per-group-version documents.
pub(crate) fn v3_root(registry: &Registry) -> Value {
    let mut paths = Map::new();
    for (g, v) in registry.group_versions() {
        let p = gv_path(g, v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}")}),
        );
    }
    json!({"paths": paths})
}

/// The item path of `t` (`/api/v1/namespaces/{namespace}/pods/{name}`) and its operations: each
/// names the kind and declares the query parameters kubectl looks for.
fn item_path(t: &ResourceType) -> (String, Value) {
    let base = format!("/{}", gv_path(t.group, t.version));
    let item = if t.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
    } else {
        format!("{base}/{}/{{name}}", t.plural)
    };
    let gvk = json!({"group": t.group, "version": t.version, "kind": t.kind});
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
    let ops = json!({
        "get": op(format!("read{}", t.kind)),
        "put": op(format!("replace{}", t.kind)),
        "patch": op(format!("patch{}", t.kind)),
        "delete": op(format!("delete{}", t.kind)),
    });
    (item, ops)
}

/// `/openapi/v3/api[s]/<group>/<version>`: an OpenAPI 3.0 document with the schemas of the kinds of
/// one group-version and the item paths of their resources.
pub(crate) fn v3_gv(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let kinds: Vec<&ResourceType> = registry
        .types()
        .iter()
        .filter(|t| t.group == group && t.version == version)
        .collect();
    if kinds.is_empty() {
        return None;
    }
    let paths: Map<String, Value> = kinds.iter().map(|t| item_path(t)).collect();
    Some(json!({
        "openapi": "3.0.0",
        "info": info(),
        "paths": paths,
        "components": {"schemas": definitions(SchemaSettings::openapi3(), kinds.into_iter())},
    }))
}

/// Whether a client with this `Accept` header takes the JSON form of `/openapi/v2`. kube-apiserver
/// also serves it in gnostic's protobuf encoding, which client-go asks for exclusively; this server
/// does not encode it and answers such a request with 406 instead of bytes the client cannot read.
pub(crate) fn v2_acceptable(accept: &str) -> bool {
    accept.split(',').any(|t| {
        let t = t.split(';').next().unwrap_or_default().trim();
        matches!(t, "application/json" | "application/*" | "*/*" | "")
    })
}

/// `/openapi/v2`: a Swagger 2.0 document with the schemas of every served kind. Its paths carry no
/// operations (see the module documentation).
pub(crate) fn v2(registry: &Registry) -> Value {
    let settings = SchemaSettings::draft07().with(|s| s.definitions_path = "/definitions".into());
    json!({
        "swagger": "2.0",
        "info": info(),
        "paths": {},
        "definitions": definitions(settings, registry.types().iter()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema<'a>(doc: &'a Value, root: &str, name: &str) -> &'a Value {
        &doc[root]["schemas"][name]
    }

    #[test]
    fn v3_has_described_tagged_schemas_for_the_group_version() {
        let r = Registry::default();
        let doc = v3_gv(&r, "", "v1").unwrap();
        let pod = schema(&doc, "components", "io.k8s.api.core.v1.Pod");
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{"group": "", "version": "v1", "kind": "Pod"}])
        );
        assert!(
            pod["description"]
                .as_str()
                .is_some_and(|d| d.contains("collection of containers")),
            "{pod}"
        );
        // References point into the same document, with the description beside the reference
        // moved into allOf (OpenAPI 3.0 ignores siblings of $ref).
        let spec = &pod["properties"]["spec"];
        assert_eq!(
            spec["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.PodSpec"
        );
        let containers =
            &schema(&doc, "components", "io.k8s.api.core.v1.PodSpec")["properties"]["containers"];
        assert_eq!(containers["type"], "array");
        assert_eq!(
            containers["items"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.Container"
        );
        // A kind of another group is not described here; one of this group without a schema name is.
        assert!(schema(&doc, "components", "io.k8s.api.resource.v1.ResourceClaim").is_null());
        assert!(
            schema(
                &doc,
                "components",
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
            )
            .is_object()
        );
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        assert!(patch.get("requestBody").is_none());
        assert!(v3_gv(&r, "nope.example.com", "v1").is_none());
    }

    #[test]
    fn v3_dra_schemas_and_root_index() {
        let r = Registry::default();
        let doc = v3_gv(&r, "resource.k8s.io", "v1").unwrap();
        let claim = schema(&doc, "components", "io.k8s.api.resource.v1.ResourceClaimSpec");
        assert_eq!(
            claim["properties"]["devices"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.resource.v1.DeviceClaim"
        );
        let root = v3_root(&r);
        assert_eq!(
            root["paths"]["apis/resource.k8s.io/v1"]["serverRelativeURL"],
            "/openapi/v3/apis/resource.k8s.io/v1"
        );
        assert!(root["paths"]["api/v1"].is_object());
    }

    #[test]
    fn v2_is_swagger_with_definitions_for_every_kind() {
        let r = Registry::default();
        let doc = v2(&r);
        assert_eq!(doc["swagger"], "2.0");
        for t in r.types() {
            let tagged = doc["definitions"]
                .as_object()
                .unwrap()
                .values()
                .filter(|d| {
                    d["x-kubernetes-group-version-kind"]
                        == json!([{"group": t.group, "version": t.version, "kind": t.kind}])
                })
                .count();
            assert_eq!(tagged, 1, "{} {}", t.api_version, t.kind);
        }
        let spec = &doc["definitions"]["io.k8s.api.core.v1.Pod"]["properties"]["spec"];
        assert_eq!(
            spec["allOf"][0]["$ref"],
            "#/definitions/io.k8s.api.core.v1.PodSpec"
        );
    }

    #[test]
    fn v2_is_json_only() {
        assert!(v2_acceptable("application/json"));
        assert!(v2_acceptable("application/json, */*"));
        assert!(v2_acceptable("*/*;q=0.8"));
        assert!(!v2_acceptable(
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
        ));
    }

    #[test]
    fn cache_builds_once() {
        let cache = Cache::default();
        let mut calls = 0;
        for _ in 0..3 {
            let b = cache.get_or_build("/x", || {
                calls += 1;
                Some(json!({"a": 1}))
            });
            assert_eq!(b.as_deref(), Some(&b"{\"a\":1}"[..]));
        }
        assert_eq!(calls, 1);
        assert!(cache.get_or_build("/none", || None).is_none());
        assert_eq!(cache.built.lock().len(), 1);
    }
}

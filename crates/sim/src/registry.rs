//! The data-driven table of served resources.
//!
//! Every kind the API server serves is one [`ResourceType`] built from its k8s-openapi type, so adding a
//! kind is one line in [`Registry::default`]:
//!
//! ```text
//! ResourceType::of::<PersistentVolumeClaim>().status(StatusPolicy::ClearOnCreate).short(&["pvc"]),
//! ```
//!
//! The k8s-openapi type supplies group, version, kind, list kind, plural and scope, and is the schema
//! every written object is decoded into for validation.

use std::collections::HashMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event as CoreEvent, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret,
    Service, ServiceAccount,
};
use k8s_openapi::api::events::v1::Event as EventsEvent;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::{
    v1alpha3::CompositePodGroup,
    v1beta1::{PodGroup, Workload},
};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Maps a k8s-openapi scope marker to "namespaced or not".
pub trait ScopeInfo {
    /// Whether objects of this scope live in a namespace.
    const NAMESPACED: bool;
}

impl ScopeInfo for k8s_openapi::NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl ScopeInfo for k8s_openapi::ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// How a kind's `status` is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusPolicy {
    /// No `/status` subresource: the main resource writes the whole object.
    Unified,
    /// `/status` subresource; main-resource writes keep the stored status; create keeps the status given
    /// (as nodes and persistent volumes do).
    KeepOnCreate,
    /// `/status` subresource; main-resource writes keep the stored status; create starts from an empty
    /// (or kind-defaulted) status (pods, claims, PDBs).
    ClearOnCreate,
}

impl StatusPolicy {
    /// Whether `/status` is a separate subresource.
    pub fn has_subresource(self) -> bool {
        !matches!(self, Self::Unified)
    }
}

/// How a kind maintains `metadata.generation`. kube-apiserver leaves it to each kind's strategy:
/// kinds whose spec a controller reconciles count spec changes, so that `status.observedGeneration`
/// can tell a client whether the controller has caught up; most other kinds have no generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenerationPolicy {
    /// No generation is set or changed (ConfigMaps, Secrets, Nodes, Services, claims, ...). A
    /// generation given on create is kept as given, as upstream.
    Untracked,
    /// Set to 1 on create and never changed by an update (PriorityClasses).
    SetOnCreate,
    /// Set to 1 on create, incremented by every write that changes `spec` (Pods since 1.33, PDBs,
    /// DeviceClasses, ResourceSlices, DeviceTaintRules).
    Spec,
    /// Like [`Self::Spec`], and annotation changes count too, because they are copied to the
    /// objects the controller creates (Deployments).
    SpecAndAnnotations,
}

impl GenerationPolicy {
    /// Whether objects of the kind carry a generation from create on.
    pub fn starts_at_one(self) -> bool {
        !matches!(self, Self::Untracked)
    }

    /// Whether going from `old` to `new` (both whole objects) is a new generation.
    pub fn bumps(self, old: &Value, new: &Value) -> bool {
        let spec_changed = || old.get("spec") != new.get("spec");
        match self {
            Self::Untracked | Self::SetOnCreate => false,
            Self::Spec => spec_changed(),
            Self::SpecAndAnnotations => {
                let annotations = |v: &Value| v.get("metadata").and_then(|m| m.get("annotations")).cloned();
                spec_changed() || annotations(old) != annotations(new)
            }
        }
    }
}

/// Index of a [`ResourceType`] in its [`Registry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindId(pub usize);

/// Validation of an object's shape: the field path and the message of the first decode error.
pub type Validator = fn(&Value) -> Result<(), (String, String)>;

/// The paths of fields the kind's schema does not declare (for `fieldValidation=Strict`).
pub type UnknownFields = fn(&Value) -> Vec<String>;

/// Adds the kind's JSON schema (and those it refers to) to a generator's definitions and returns a
/// reference to it (for the `/openapi` documents).
pub type SchemaOf = fn(&mut schemars::SchemaGenerator) -> schemars::Schema;

/// One served resource.
#[derive(Clone, Debug)]
pub struct ResourceType {
    /// API group, "" for core.
    pub group: &'static str,
    /// Version, e.g. `v1`.
    pub version: &'static str,
    /// `apiVersion` as written in objects: `v1` or `group/version`.
    pub api_version: &'static str,
    /// Kind, e.g. `Pod`.
    pub kind: &'static str,
    /// List kind, e.g. `PodList`.
    pub list_kind: &'static str,
    /// Plural (URL segment), e.g. `pods`.
    pub plural: &'static str,
    /// Singular, lowercase kind.
    pub singular: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Status handling.
    pub status: StatusPolicy,
    /// `metadata.generation` handling.
    pub generation: GenerationPolicy,
    /// Extra subresources besides `status` (e.g. `binding`).
    pub subresources: Vec<&'static str>,
    /// kubectl short names.
    pub short_names: Vec<&'static str>,
    /// Discovery categories (e.g. `all`).
    pub categories: Vec<&'static str>,
    /// Decodes an object into the k8s-openapi type.
    pub validate: Validator,
    /// Lists fields the k8s-openapi type does not know.
    pub unknown_fields: UnknownFields,
    /// The k8s-openapi type's schema.
    pub schema: SchemaOf,
}

fn schema_as<K: schemars::JsonSchema>(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    generator.subschema_for::<K>()
}

fn validate_as<K: DeserializeOwned>(v: &Value) -> Result<(), (String, String)> {
    // Every write is decoded here, and only a failure needs the path of the failing field:
    // tracking it on every field of every write cost a fifth of an in-process status patch
    // (`benches/apiserver.rs`: 59,000 against 73,000 patches per second without it).
    if K::deserialize(v).is_ok() {
        return Ok(());
    }
    match serde_path_to_error::deserialize::<_, K>(v) {
        Ok(_) => Ok(()),
        Err(e) => {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            Err((path, e.into_inner().to_string()))
        }
    }
}

fn unknown_fields_as<K: DeserializeOwned + serde::Serialize>(v: &Value) -> Vec<String> {
    let Ok(typed) = K::deserialize(v) else {
        return Vec::new();
    };
    let Ok(back) = serde_json::to_value(&typed) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    diff_keys(v, &back, &mut String::new(), &mut out);
    out
}

/// Collects the paths of keys present (and not null) in `given` but absent from `known`.
fn diff_keys(given: &Value, known: &Value, path: &mut String, out: &mut Vec<String>) {
    match (given, known) {
        (Value::Object(g), Value::Object(k)) => {
            for (key, gv) in g {
                if gv.is_null() {
                    continue;
                }
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                match k.get(key) {
                    Some(kv) => diff_keys(gv, kv, path, out),
                    None => out.push(path.clone()),
                }
                path.truncate(len);
            }
        }
        (Value::Array(g), Value::Array(k)) => {
            for (i, (gv, kv)) in g.iter().zip(k.iter()).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                diff_keys(gv, kv, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

impl ResourceType {
    /// The kind as the API server names it in messages: `Pod` for the core group, `Kind.group`
    /// otherwise (`Workload.scheduling.k8s.io "w" is invalid: …`).
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// A resource described by a k8s-openapi type, without a status subresource.
    pub fn of<K>() -> Self
    where
        K: k8s_openapi::Resource
            + k8s_openapi::ListableResource
            + DeserializeOwned
            + serde::Serialize
            + schemars::JsonSchema,
        K::Scope: ScopeInfo,
    {
        Self {
            group: K::GROUP,
            version: K::VERSION,
            api_version: K::API_VERSION,
            kind: K::KIND,
            list_kind: K::LIST_KIND,
            plural: K::URL_PATH_SEGMENT,
            singular: K::KIND.to_ascii_lowercase(),
            namespaced: <K::Scope as ScopeInfo>::NAMESPACED,
            status: StatusPolicy::Unified,
            generation: GenerationPolicy::Untracked,
            subresources: Vec::new(),
            short_names: Vec::new(),
            categories: Vec::new(),
            validate: validate_as::<K>,
            unknown_fields: unknown_fields_as::<K>,
            schema: schema_as::<K>,
        }
    }

    /// Sets the status policy.
    pub fn status(mut self, policy: StatusPolicy) -> Self {
        self.status = policy;
        self
    }

    /// Sets the generation policy.
    pub fn generation(mut self, policy: GenerationPolicy) -> Self {
        self.generation = policy;
        self
    }

    /// Adds subresources other than `status`.
    pub fn subresources(mut self, subs: &[&'static str]) -> Self {
        self.subresources.extend_from_slice(subs);
        self
    }

    /// Adds kubectl short names.
    pub fn short(mut self, names: &[&'static str]) -> Self {
        self.short_names.extend_from_slice(names);
        self
    }

    /// Adds discovery categories.
    pub fn categories(mut self, cats: &[&'static str]) -> Self {
        self.categories.extend_from_slice(cats);
        self
    }

    /// Whether `sub` is a subresource of this kind.
    pub fn has_subresource(&self, sub: &str) -> bool {
        (sub == "status" && self.status.has_subresource()) || self.subresources.contains(&sub)
    }

    /// `plural` or `plural.group`, as used in error messages.
    pub fn qualified_plural(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Whether this is the core `Pod` kind.
    pub fn is(&self, group: &str, kind: &str) -> bool {
        self.group == group && self.kind == kind
    }
}

/// The served resources and their lookup indexes.
#[derive(Clone, Debug)]
pub struct Registry {
    types: Vec<ResourceType>,
    by_gvr: HashMap<(String, String, String), KindId>,
    by_alias: HashMap<String, KindId>,
    by_gvk: HashMap<(String, String), KindId>,
}

impl Default for Registry {
    /// Everything unisched needs: core (namespaces, nodes, pods, events, configmaps, PVs, PVCs),
    /// events.k8s.io, coordination, scheduling, policy, storage (storage classes, CSI nodes, CSI
    /// drivers, CSI storage capacities), the DRA kinds of resource.k8s.io/v1 and batch/v1 Jobs (made
    /// into pods by `controllers::jobs`); plus, as stored objects without behaviour, the kinds of
    /// `deploy/manifests` (Services, Deployments, the RBAC kinds), so that the scheduler's own
    /// manifests can be applied to the simulator.
    fn default() -> Self {
        use GenerationPolicy::{SetOnCreate, Spec, SpecAndAnnotations};
        use StatusPolicy::{ClearOnCreate, KeepOnCreate};
        Self::new(vec![
            ResourceType::of::<Namespace>()
                .status(KeepOnCreate)
                .short(&["ns"]),
            ResourceType::of::<Node>().status(KeepOnCreate).short(&["no"]),
            ResourceType::of::<Pod>()
                .status(ClearOnCreate)
                .generation(Spec)
                .subresources(&["binding", "eviction"])
                .short(&["po"])
                .categories(&["all"]),
            ResourceType::of::<CoreEvent>().short(&["ev"]),
            ResourceType::of::<ConfigMap>().short(&["cm"]),
            ResourceType::of::<Secret>(),
            ResourceType::of::<ServiceAccount>().short(&["sa"]),
            ResourceType::of::<PersistentVolume>()
                .status(KeepOnCreate)
                .short(&["pv"]),
            ResourceType::of::<PersistentVolumeClaim>()
                .status(ClearOnCreate)
                .short(&["pvc"]),
            ResourceType::of::<EventsEvent>().short(&["ev"]),
            ResourceType::of::<Lease>(),
            ResourceType::of::<PriorityClass>()
                .generation(SetOnCreate)
                .short(&["pc"]),
            ResourceType::of::<Workload>().generation(Spec),
            ResourceType::of::<PodGroup>()
                .status(ClearOnCreate)
                .generation(Spec),
            ResourceType::of::<CompositePodGroup>()
                .status(ClearOnCreate)
                .generation(Spec),
            ResourceType::of::<PodDisruptionBudget>()
                .status(ClearOnCreate)
                .generation(Spec)
                .short(&["pdb"]),
            ResourceType::of::<StorageClass>().short(&["sc"]),
            ResourceType::of::<CSINode>(),
            ResourceType::of::<CSIDriver>(),
            ResourceType::of::<CSIStorageCapacity>(),
            ResourceType::of::<VolumeAttachment>().status(ClearOnCreate),
            ResourceType::of::<ResourceSlice>().generation(Spec),
            ResourceType::of::<ResourceClaim>().status(ClearOnCreate),
            ResourceType::of::<ResourceClaimTemplate>(),
            ResourceType::of::<DeviceClass>().generation(Spec),
            ResourceType::of::<DeviceTaintRule>()
                .status(ClearOnCreate)
                .generation(Spec),
            ResourceType::of::<Service>()
                .status(ClearOnCreate)
                .short(&["svc"])
                .categories(&["all"]),
            ResourceType::of::<Deployment>()
                .status(ClearOnCreate)
                .generation(SpecAndAnnotations)
                .short(&["deploy"])
                .categories(&["all"]),
            ResourceType::of::<Job>()
                .status(ClearOnCreate)
                .generation(Spec)
                .categories(&["all"]),
            ResourceType::of::<Role>(),
            ResourceType::of::<ClusterRole>(),
            ResourceType::of::<RoleBinding>(),
            ResourceType::of::<ClusterRoleBinding>(),
        ])
    }
}

impl Registry {
    /// Builds a registry. When two kinds share an alias (e.g. `events`), the first wins.
    pub fn new(types: Vec<ResourceType>) -> Self {
        let mut by_gvr = HashMap::new();
        let mut by_alias = HashMap::new();
        let mut by_gvk = HashMap::new();
        for (i, t) in types.iter().enumerate() {
            let id = KindId(i);
            by_gvr.insert(
                (t.group.to_string(), t.version.to_string(), t.plural.to_string()),
                id,
            );
            by_gvk.insert((t.api_version.to_string(), t.kind.to_string()), id);
            let mut aliases = vec![
                t.plural.to_string(),
                t.singular.clone(),
                format!("{}/{}", t.api_version, t.plural),
                format!("{}/{}", t.api_version, t.kind.to_ascii_lowercase()),
            ];
            if !t.group.is_empty() {
                aliases.push(format!("{}.{}", t.plural, t.group));
                aliases.push(format!("{}.{}", t.singular, t.group));
                aliases.push(format!("{}.{}.{}", t.plural, t.version, t.group));
            }
            aliases.extend(t.short_names.iter().map(|s| s.to_string()));
            for a in aliases {
                by_alias.entry(a).or_insert(id);
            }
        }
        Self {
            types,
            by_gvr,
            by_alias,
            by_gvk,
        }
    }

    /// All served resources.
    pub fn types(&self) -> &[ResourceType] {
        &self.types
    }

    /// The resource with this id.
    pub fn get(&self, id: KindId) -> &ResourceType {
        &self.types[id.0]
    }

    /// Looks up by URL coordinates.
    pub fn by_gvr(&self, group: &str, version: &str, plural: &str) -> Option<KindId> {
        self.by_gvr
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .copied()
    }

    /// Looks up by `apiVersion` and `kind`.
    pub fn by_api_version_kind(&self, api_version: &str, kind: &str) -> Option<KindId> {
        self.by_gvk
            .get(&(api_version.to_string(), kind.to_string()))
            .copied()
    }

    /// Resolves a human or programmatic name: `pods`, `pod`, `Pod`, `po`, `v1/pods`,
    /// `resourceclaims.resource.k8s.io`, `resource.k8s.io/v1/resourceclaims`, `resource.k8s.io/v1/ResourceClaim`.
    pub fn resolve(&self, name: &str) -> Option<KindId> {
        if let Some(id) = self.by_alias.get(name) {
            return Some(*id);
        }
        self.by_alias.get(&name.to_ascii_lowercase()).copied()
    }

    /// The served group/versions in discovery order, core (`""`) first.
    pub fn group_versions(&self) -> Vec<(&'static str, &'static str)> {
        let mut out: Vec<(&'static str, &'static str)> = Vec::new();
        for t in &self.types {
            if !out.contains(&(t.group, t.version)) {
                out.push((t.group, t.version));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lookups() {
        let r = Registry::default();
        let pods = r.resolve("pods").unwrap();
        assert_eq!(r.get(pods).kind, "Pod");
        assert_eq!(r.resolve("Pod"), Some(pods));
        assert_eq!(r.resolve("po"), Some(pods));
        assert_eq!(r.resolve("v1/pods"), Some(pods));
        let rc = r.resolve("resource.k8s.io/v1/ResourceClaim").unwrap();
        assert_eq!(r.get(rc).plural, "resourceclaims");
        assert_eq!(r.resolve("resourceclaims.resource.k8s.io"), Some(rc));
        assert_eq!(r.by_gvr("resource.k8s.io", "v1", "resourceclaims"), Some(rc));
        let ev = r.resolve("events").unwrap();
        assert_eq!(r.get(ev).group, "");
        let ev2 = r.resolve("events.events.k8s.io").unwrap();
        assert_eq!(r.get(ev2).group, "events.k8s.io");
        assert!(!r.get(r.resolve("nodes").unwrap()).namespaced);
        assert!(r.get(pods).has_subresource("binding"));
        assert!(r.get(pods).has_subresource("status"));
        assert!(!r.get(r.resolve("leases").unwrap()).has_subresource("status"));
    }

    #[test]
    fn validation_names_the_field() {
        let r = Registry::default();
        let pods = r.get(r.resolve("pods").unwrap());
        let bad = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": 5}]}});
        let (path, msg) = (pods.validate)(&bad).unwrap_err();
        assert_eq!(path, "spec.containers[0].name");
        assert!(msg.contains("string"), "{msg}");
        let bad = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "ports": [{"containerPort": "eighty"}]}]}});
        let (path, _) = (pods.validate)(&bad).unwrap_err();
        assert_eq!(path, "spec.containers[0].ports[0].containerPort");
    }

    #[test]
    fn unknown_fields_are_listed() {
        let r = Registry::default();
        let pods = r.get(r.resolve("pods").unwrap());
        let obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}, "bogus": null},
            "spec": {"containers": [{"name": "c", "imagee": "x", "resources": {"requests": {"cpu": 1}}}], "nodeNmae": "n"}});
        assert_eq!(
            (pods.unknown_fields)(&obj),
            vec![
                "spec.containers[0].imagee".to_string(),
                "spec.nodeNmae".to_string()
            ]
        );
        let slices = r.get(r.resolve("resourceslices").unwrap());
        let obj = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
            "spec": {"driver": "d", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}, "nodeName": "n",
                     "devices": [{"name": "d0", "attributes": {"x": {"int": 1}}, "capacity": {"mem": {"value": "1Gi"}}}]}});
        assert!(
            (slices.unknown_fields)(&obj).is_empty(),
            "{:?}",
            (slices.unknown_fields)(&obj)
        );
    }
}

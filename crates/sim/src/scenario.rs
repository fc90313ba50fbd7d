//! Scenario files for `unisched sim`: what to create (and delete), in which order.
//!
//! A path is a YAML/JSON file (multi-document) or a directory. A directory whose entries are
//! sub-directories is a sequence of steps, applied in lexical order with the cluster settling in
//! between; otherwise its files (lexical order) form one step. In a step, files named
//! `*.delete.yaml` list objects to delete by `kind`, `namespace` and `name`.
//!
//! Everything is read and validated before anything is applied, so a typo in the last file does
//! not leave a half-built cluster behind. Errors name the file, the document index and the field.
//! Objects are applied in dependency order (namespaces before pods, classes before claims), so a
//! scenario can list them in any order.

use std::{
    collections::BTreeSet,
    fmt,
    path::{Path, PathBuf},
};

use serde_json::Value;

use crate::registry::Registry;
use crate::strategy;

/// The kinds a scenario may contain, in the order they are applied.
pub const APPLY_ORDER: &[(&str, &str)] = &[
    ("v1", "Namespace"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("resource.k8s.io/v1", "DeviceClass"),
    ("v1", "Node"),
    ("resource.k8s.io/v1", "ResourceSlice"),
    ("resource.k8s.io/v1", "DeviceTaintRule"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"),
    ("resource.k8s.io/v1", "ResourceClaim"),
    ("storage.k8s.io/v1", "StorageClass"),
    ("storage.k8s.io/v1", "CSINode"),
    ("storage.k8s.io/v1", "CSIDriver"),
    ("storage.k8s.io/v1", "CSIStorageCapacity"),
    ("v1", "PersistentVolume"),
    ("storage.k8s.io/v1", "VolumeAttachment"),
    ("v1", "PersistentVolumeClaim"),
    ("policy/v1", "PodDisruptionBudget"),
    ("scheduling.k8s.io/v1beta1", "Workload"),
    ("scheduling.k8s.io/v1alpha3", "CompositePodGroup"),
    ("scheduling.k8s.io/v1beta1", "PodGroup"),
    ("batch/v1", "Job"),
    ("v1", "Pod"),
];

/// Where a document came from: `file#index` (0-based).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// The file.
    pub file: PathBuf,
    /// Document index within the file.
    pub index: usize,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (document {})", self.file.display(), self.index)
    }
}

/// An object to create.
#[derive(Clone, Debug)]
pub struct ScenarioObject {
    /// Where it came from.
    pub source: Source,
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// Namespace (namespaced kinds; `default` when unset).
    pub namespace: Option<String>,
    /// The object as written (unknown fields kept).
    pub value: Value,
}

impl ScenarioObject {
    /// `metadata.name` (or `generateName` + `*`).
    pub fn display_name(&self) -> String {
        let m = &self.value["metadata"];
        m["name"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{}*", m["generateName"].as_str().unwrap_or("")))
    }
}

/// An object to delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteRef {
    /// Where it came from.
    pub source: Source,
    /// `kind`.
    pub kind: String,
    /// Namespace for namespaced kinds.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

/// One step: deletions first, then creations in dependency order.
#[derive(Clone, Debug, Default)]
pub struct Step {
    /// The step's name (directory name, or the file name).
    pub name: String,
    /// Objects to create, sorted by [`APPLY_ORDER`].
    pub apply: Vec<ScenarioObject>,
    /// Objects to delete.
    pub delete: Vec<DeleteRef>,
}

/// A loaded scenario.
#[derive(Clone, Debug, Default)]
pub struct Scenario {
    /// Steps in order.
    pub steps: Vec<Step>,
}

/// A scenario that cannot be used. Nothing has been applied when this is returned.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The path could not be read.
    #[error("{path}: {error}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// A document is not valid YAML/JSON.
    #[error("{at}: invalid YAML: {message}")]
    Syntax {
        /// Where.
        at: Source,
        /// Parser message.
        message: String,
    },
    /// A document is not a valid object.
    #[error("{at}: {message}")]
    Invalid {
        /// Where.
        at: Source,
        /// What is wrong (names the field).
        message: String,
    },
    /// No objects at all.
    #[error("no objects found in {0}")]
    Empty(String),
}

fn is_namespaced(kind: &str) -> bool {
    !matches!(
        kind,
        "Namespace"
            | "Node"
            | "PriorityClass"
            | "DeviceClass"
            | "ResourceSlice"
            | "DeviceTaintRule"
            | "StorageClass"
            | "CSINode"
            | "CSIDriver"
            | "PersistentVolume"
    )
}

fn order_of(kind: &str) -> usize {
    APPLY_ORDER
        .iter()
        .position(|(_, k)| *k == kind)
        .unwrap_or(APPLY_ORDER.len())
}

/// Loads and validates a scenario from one or more paths (their steps are concatenated).
pub fn load(paths: &[PathBuf]) -> Result<Scenario, ScenarioError> {
    let registry = Registry::default();
    let mut scenario = Scenario::default();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|error| ScenarioError::Io {
            path: path.clone(),
            error,
        })?;
        if meta.is_dir() {
            let entries = sorted_entries(path)?;
            let dirs: Vec<&PathBuf> = entries.iter().filter(|p| p.is_dir()).collect();
            if dirs.is_empty() {
                scenario
                    .steps
                    .push(load_step(&registry, step_name(path), &entries)?);
            } else {
                for d in dirs {
                    let files = sorted_entries(d)?;
                    scenario.steps.push(load_step(&registry, step_name(d), &files)?);
                }
            }
        } else {
            scenario
                .steps
                .push(load_step(&registry, step_name(path), std::slice::from_ref(path))?);
        }
    }
    if scenario
        .steps
        .iter()
        .all(|s| s.apply.is_empty() && s.delete.is_empty())
    {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(ScenarioError::Empty(names.join(", ")));
    }
    Ok(scenario)
}

fn step_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, ScenarioError> {
    let rd = std::fs::read_dir(dir).map_err(|error| ScenarioError::Io {
        path: dir.to_path_buf(),
        error,
    })?;
    let mut v = Vec::new();
    for e in rd {
        let e = e.map_err(|error| ScenarioError::Io {
            path: dir.to_path_buf(),
            error,
        })?;
        let p = e.path();
        let is_doc = p
            .extension()
            .is_some_and(|x| x == "yaml" || x == "yml" || x == "json");
        if p.is_dir() || is_doc {
            v.push(p);
        }
    }
    v.sort();
    Ok(v)
}

fn is_delete_file(p: &Path) -> bool {
    p.file_name()
        .map(|n| n.to_string_lossy())
        .is_some_and(|n| n.ends_with(".delete.yaml") || n.ends_with(".delete.yml"))
}

/// Splits a file into documents (YAML multi-doc; JSON is YAML). `List` kinds are flattened.
fn documents(file: &Path) -> Result<Vec<(Source, Value)>, ScenarioError> {
    let text = std::fs::read_to_string(file).map_err(|error| ScenarioError::Io {
        path: file.to_path_buf(),
        error,
    })?;
    let mut out = Vec::new();
    for (index, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let source = Source {
            file: file.to_path_buf(),
            index,
        };
        let v: Value = serde::Deserialize::deserialize(doc).map_err(|e| ScenarioError::Syntax {
            at: source.clone(),
            message: e.to_string(),
        })?;
        if v.is_null() {
            continue;
        }
        if v["kind"]
            .as_str()
            .is_some_and(|k| k == "List" || k.ends_with("List"))
            && v["items"].is_array()
        {
            for item in v["items"].as_array().into_iter().flatten() {
                out.push((source.clone(), item.clone()));
            }
        } else {
            out.push((source, v));
        }
    }
    Ok(out)
}

fn load_step(registry: &Registry, name: String, files: &[PathBuf]) -> Result<Step, ScenarioError> {
    let mut step = Step {
        name,
        ..Default::default()
    };
    for file in files.iter().filter(|f| f.is_file()) {
        let delete = is_delete_file(file);
        for (source, v) in documents(file)? {
            if delete {
                step.delete.push(parse_delete(source, &v)?);
            } else {
                step.apply.push(parse_object(registry, source, v)?);
            }
        }
    }
    step.apply.sort_by_key(|o| order_of(&o.kind));
    Ok(step)
}

fn invalid(source: &Source, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid {
        at: source.clone(),
        message: message.into(),
    }
}

fn parse_delete(source: Source, v: &Value) -> Result<DeleteRef, ScenarioError> {
    if v.is_array() {
        return Err(invalid(
            &source,
            "a delete file holds one object reference per YAML document ({kind, name, namespace} \
             separated by `---`), not a YAML list",
        ));
    }
    if !v.is_object() {
        return Err(invalid(
            &source,
            "expected an object reference {kind, name, namespace}",
        ));
    }
    let kind = v["kind"]
        .as_str()
        .ok_or_else(|| invalid(&source, "kind: Required value"))?
        .to_string();
    if order_of(&kind) == APPLY_ORDER.len() {
        return Err(invalid(&source, format!("kind: Unsupported value: {kind:?}")));
    }
    let name = v["name"]
        .as_str()
        .or_else(|| v["metadata"]["name"].as_str())
        .ok_or_else(|| invalid(&source, "name: Required value"))?
        .to_string();
    let namespace = is_namespaced(&kind).then(|| {
        v["namespace"]
            .as_str()
            .or_else(|| v["metadata"]["namespace"].as_str())
            .unwrap_or("default")
            .to_string()
    });
    Ok(DeleteRef {
        source,
        kind,
        namespace,
        name,
    })
}

fn parse_object(registry: &Registry, source: Source, mut v: Value) -> Result<ScenarioObject, ScenarioError> {
    if !v.is_object() {
        return Err(invalid(&source, "expected an object"));
    }
    let api_version = v["apiVersion"]
        .as_str()
        .ok_or_else(|| invalid(&source, "apiVersion: Required value"))?
        .to_string();
    let kind = v["kind"]
        .as_str()
        .ok_or_else(|| invalid(&source, "kind: Required value"))?
        .to_string();
    let Some((want_version, _)) = APPLY_ORDER.iter().find(|(_, k)| *k == kind) else {
        let supported: Vec<&str> = APPLY_ORDER.iter().map(|(_, k)| *k).collect();
        return Err(invalid(
            &source,
            format!(
                "kind: Unsupported value: {kind:?}: supported values: {}",
                supported.join(", ")
            ),
        ));
    };
    if api_version != *want_version {
        return Err(invalid(
            &source,
            format!("apiVersion: Unsupported value: {api_version:?} for kind {kind}: use {want_version:?}"),
        ));
    }
    let meta = &v["metadata"];
    if meta["name"].as_str().is_none_or(str::is_empty)
        && meta["generateName"].as_str().is_none_or(str::is_empty)
    {
        return Err(invalid(
            &source,
            "metadata.name: Required value: name or generateName is required",
        ));
    }
    validate_typed(&source, registry, &kind, &v)?;
    let namespace = if is_namespaced(&kind) {
        let ns = meta["namespace"].as_str().unwrap_or("default").to_string();
        v["metadata"]["namespace"] = Value::String(ns.clone());
        Some(ns)
    } else {
        None
    };
    Ok(ScenarioObject {
        source,
        api_version,
        kind,
        namespace,
        value: v,
    })
}

/// Validates an object as kube-apiserver would on create with `fieldValidation=Strict` (what
/// kubectl asks for): it must decode into its k8s-openapi type, have no fields the type does not
/// declare, and pass the admission checks of the store. All problems are reported at once.
fn validate_typed(source: &Source, registry: &Registry, kind: &str, v: &Value) -> Result<(), ScenarioError> {
    let api_version = v["apiVersion"].as_str().unwrap_or_default();
    let Some(id) = registry.by_api_version_kind(api_version, kind) else {
        return Ok(());
    };
    let rt = registry.get(id);
    if let Err((field, message)) = (rt.validate)(v) {
        let at = if field.is_empty() {
            String::new()
        } else {
            format!("{field}: ")
        };
        return Err(invalid(source, format!("{at}{message}")));
    }
    let unknown = (rt.unknown_fields)(v);
    if !unknown.is_empty() {
        let list: Vec<String> = unknown.iter().map(|u| format!("unknown field {u:?}")).collect();
        return Err(invalid(
            source,
            format!("strict decoding error: {}", list.join(", ")),
        ));
    }
    // generateName objects get their name on create; check the rest with a stand-in name. Kinds
    // that are only valid with their defaults (a Job's selector) get them first.
    let mut probe = None;
    if v["metadata"]["name"].as_str().is_none_or(str::is_empty) {
        let mut named = v.clone();
        let base = v["metadata"]["generateName"].as_str().unwrap_or_default();
        named["metadata"]["name"] = Value::String(format!("{base}x"));
        probe = Some(named);
    }
    if strategy::defaults_before_validation(rt) {
        strategy::default_for_validation(rt, probe.get_or_insert_with(|| v.clone()));
    }
    strategy::validate(rt, probe.as_ref().unwrap_or(v), None).map_err(|e| invalid(source, e.to_string()))
}

/// Namespaces referenced by objects of a scenario but not created by it (the runner creates them,
/// `default` aside, so small scenarios need not list them).
pub fn missing_namespaces(s: &Scenario) -> BTreeSet<String> {
    let created: BTreeSet<String> = s
        .steps
        .iter()
        .flat_map(|st| &st.apply)
        .filter(|o| o.kind == "Namespace")
        .filter_map(|o| o.value["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    s.steps
        .iter()
        .flat_map(|st| &st.apply)
        .filter_map(|o| o.namespace.clone())
        .filter(|ns| ns != "default" && !created.contains(ns))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, text).unwrap();
        p
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("unisched-scenario-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn orders_by_dependency_and_defaults_namespace() {
        let d = tmpdir("order");
        let f = write(
            &d,
            "all.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: x}]}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n}\n---\napiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu}\nspec: {}\n---\n",
        );
        let s = load(&[f]).unwrap();
        let kinds: Vec<&str> = s.steps[0].apply.iter().map(|o| o.kind.as_str()).collect();
        assert_eq!(kinds, ["DeviceClass", "Node", "Pod"]);
        assert_eq!(s.steps[0].apply[2].namespace.as_deref(), Some("default"));
        assert_eq!(s.steps[0].apply[2].value["metadata"]["namespace"], "default");
    }

    /// A Job is checked as kube-apiserver checks it once defaulted (its selector is generated, so
    /// a file need not give one), and is applied after the PodGroups its pods may name.
    #[test]
    fn jobs_are_checked_with_their_defaults() {
        let d = tmpdir("jobs");
        let job = |restart: &str| {
            format!(
                "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: j}}\nspec:\n  template:\n    spec:\n      restartPolicy: {restart}\n      containers: [{{name: c, image: x}}]\n---\napiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {{name: g}}\nspec: {{schedulingPolicy: {{basic: {{}}}}}}\n"
            )
        };
        let good = write(&d, "good.yaml", &job("Never"));
        let s = load(&[good]).unwrap();
        let kinds: Vec<&str> = s.steps[0].apply.iter().map(|o| o.kind.as_str()).collect();
        assert_eq!(kinds, ["PodGroup", "Job"]);
        assert!(
            s.steps[0].apply[1].value["spec"].get("selector").is_none(),
            "kept as written"
        );
        let bad = write(&d, "bad.yaml", &job("Always"));
        let e = load(&[bad]).unwrap_err().to_string();
        assert!(
            e.contains("document 0")
                && e.contains(
                    "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""
                ),
            "{e}"
        );
    }

    #[test]
    fn steps_from_subdirectories_with_deletes() {
        let d = tmpdir("steps");
        write(
            &d,
            "01-setup/nodes.yaml",
            "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n",
        );
        write(
            &d,
            "02-remove/x.delete.yaml",
            "kind: Pod\nnamespace: team\nname: p\n---\nkind: Node\nname: n\n",
        );
        let s = load(&[d]).unwrap();
        assert_eq!(s.steps.len(), 2);
        assert_eq!(s.steps[0].name, "01-setup");
        assert_eq!(
            s.steps[1]
                .delete
                .iter()
                .map(|r| (r.kind.as_str(), r.namespace.as_deref(), r.name.as_str()))
                .collect::<Vec<_>>(),
            [("Pod", Some("team"), "p"), ("Node", None, "n")]
        );
    }

    #[test]
    fn errors_name_file_document_and_field() {
        let d = tmpdir("errors");
        let cases = [
            (
                "a.yaml",
                "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n---\nkind: Pod\nmetadata: {name: p}\n",
                "document 1",
                "apiVersion: Required value",
            ),
            (
                "b.yaml",
                "apiVersion: v1\nkind: Gadget\nmetadata: {name: g}\n",
                "document 0",
                "kind: Unsupported value: \"Gadget\"",
            ),
            (
                "c.yaml",
                "apiVersion: v1\nkind: Pod\nmetadata: {}\n",
                "document 0",
                "metadata.name: Required value",
            ),
            (
                "d.yaml",
                "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: 3}\n",
                "document 0",
                "invalid type",
            ),
            (
                "e.yaml",
                "apiVersion: v1\nkind: Node\nmetadata: {name: [\n",
                "document 0",
                "invalid YAML",
            ),
            (
                "f.yaml",
                "apiVersion: resource.k8s.io/v1beta1\nkind: DeviceClass\nmetadata: {name: c}\n",
                "document 0",
                "apiVersion: Unsupported value",
            ),
        ];
        for (file, text, doc, want) in cases {
            let p = write(&d, file, text);
            let err = load(&[p]).unwrap_err().to_string();
            assert!(
                err.contains(file) && err.contains(doc) && err.contains(want),
                "{file}: {err}"
            );
        }
    }

    #[test]
    fn unknown_fields_and_admission_are_rejected_with_file_document_and_path() {
        let d = tmpdir("strict");
        let cases = [
            (
                "typo.yaml",
                "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: x\n    resource: {requests: {cpu: 1}}\n",
                "document 1",
                "strict decoding error: unknown field \"spec.containers[0].resource\"",
            ),
            (
                "top.yaml",
                "apiVersion: v1\nkind: Node\nmetadata: {name: n, lables: {a: b}}\n",
                "document 0",
                "unknown field \"metadata.lables\"",
            ),
            (
                "claim.yaml",
                "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\nspec:\n  devices:\n    requests:\n    - {name: g, exactly: {deviceClassName: gpu, allocationMode: All, count: 2}}\n",
                "document 0",
                "spec.devices.requests[0].exactly.count: Invalid value: 2: must not be specified when allocationMode is 'All'",
            ),
            (
                "class.yaml",
                "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {generateName: gpu-}\nspec:\n  selectors:\n  - cel: {expression: 'device.driver =='}\n",
                "document 0",
                "spec.selectors[0].cel.expression: Invalid value",
            ),
            (
                "ports.yaml",
                "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: x, ports: [{containerPort: 0}]}]}\n",
                "document 0",
                "spec.containers[0].ports[0].containerPort: Required value",
            ),
        ];
        for (file, text, doc, want) in cases {
            let p = write(&d, file, text);
            let err = load(&[p]).unwrap_err().to_string();
            assert!(
                err.contains(file) && err.contains(doc) && err.contains(want),
                "{file}: {err}"
            );
        }
    }

    #[test]
    fn a_later_step_is_validated_before_anything_is_returned() {
        let d = tmpdir("later");
        write(
            &d,
            "01-ok/n.yaml",
            "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n",
        );
        write(
            &d,
            "02-bad/p.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n",
        );
        let err = load(&[d]).unwrap_err().to_string();
        assert!(
            err.contains("02-bad") && err.contains("spec.containers: Required value"),
            "{err}"
        );
    }

    #[test]
    fn delete_file_as_a_yaml_list_is_a_clear_error() {
        let d = tmpdir("dellist");
        let p = write(
            &d,
            "x.delete.yaml",
            "- {kind: Pod, name: p}\n- {kind: Node, name: n}\n",
        );
        let err = load(&[p]).unwrap_err().to_string();
        assert!(
            err.contains("x.delete.yaml (document 0)") && err.contains("not a YAML list"),
            "{err}"
        );
    }

    #[test]
    fn missing_namespaces_are_reported() {
        let d = tmpdir("ns");
        let f = write(
            &d,
            "x.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: team}\nspec: {containers: [{name: c, image: x}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: q, namespace: made}\nspec: {containers: [{name: c, image: x}]}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: made}\n",
        );
        let s = load(&[f]).unwrap();
        assert_eq!(missing_namespaces(&s), BTreeSet::from(["team".to_string()]));
    }
}

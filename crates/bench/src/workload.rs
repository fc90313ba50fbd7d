//! Workload files: test cases with an op list (`workloadTemplate`) and named workloads that fill
//! its `$parameters`, after upstream scheduler_perf's `performance-config.yaml`.
//!
//! ```yaml
//! - name: SchedulingBasic
//!   workloadTemplate:
//!   - opcode: createNodes
//!     count: $nodes
//!     nodeTemplatePath: templates/node-default.yaml
//!   - opcode: createPods
//!     count: $measurePods
//!     podTemplatePath: templates/pod-default.yaml
//!     collectMetrics: true
//!   workloads:
//!   - name: 500Nodes
//!     params: {nodes: 500, measurePods: 1000}
//!     smoke: {nodes: 10, measurePods: 20}     # overrides under --smoke
//!     upstream: {threshold: 680, source: "…"} # shown next to our figures
//! ```
//!
//! Any op field whose value is a string `$name` takes the workload parameter `name` (any type).
//! `createPods` may also name `countMultiplier` (its count is `count × countMultiplier`, upstream's
//! `countMultiplierParam`), and a test case may set `featureGates` for the scheduler under test
//! (upstream's PodGroup workloads turn `GenericWorkload` on that way).

use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
    sync::Arc,
};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{BenchError, template::Template};

include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

/// Upstream figures for a workload, from `reference/performance-anchors.md`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Upstream {
    /// The CI pass threshold (Average pods/s must exceed it), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// Other published figures (developer machines, "typically above …").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typical: Option<String>,
    /// Where the numbers come from.
    #[serde(default)]
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WorkloadFile {
    name: String,
    #[serde(default)]
    description: String,
    /// Feature gates of the scheduler under test (engine and full mode, `--external` unisched).
    #[serde(default)]
    feature_gates: BTreeMap<String, bool>,
    workload_template: Vec<Value>,
    workloads: Vec<WorkloadEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WorkloadEntry {
    name: String,
    #[serde(default)]
    params: serde_json::Map<String, Value>,
    #[serde(default)]
    smoke: serde_json::Map<String, Value>,
    #[serde(default)]
    upstream: Option<Upstream>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    timeout_seconds: Option<f64>,
}

/// A device group of `createResourceSlices`: `count` devices from one template.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceGroup {
    /// Device template (variables `.Node`, `.NodeIndex`, `.Device` (index in the node), `.I`
    /// (index in the group)).
    pub template_path: String,
    /// Devices per node.
    pub count: usize,
}

/// How `churn` treats the objects it creates.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ChurnMode {
    /// Create an object every interval and delete it at the next one.
    Recreate,
    /// Create objects every interval, keeping at most `number`; the oldest is deleted first.
    Create,
}

fn one() -> usize {
    1
}

/// One operation.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "opcode", rename_all = "camelCase", deny_unknown_fields)]
pub enum Op {
    /// Creates `count` nodes (variable `.Index`).
    #[serde(rename_all = "camelCase")]
    CreateNodes {
        /// How many.
        count: usize,
        /// Node template.
        node_template_path: String,
    },
    /// Creates `count` objects of any kind (variable `.Index`).
    #[serde(rename_all = "camelCase")]
    CreateAny {
        /// Template.
        template_path: String,
        /// How many (default 1).
        #[serde(default = "one")]
        count: usize,
        /// Namespace for namespaced kinds.
        #[serde(default)]
        namespace: Option<String>,
    },
    /// For every node created so far whose name starts with `nodes`: the slice templates
    /// (variables `.Node`, `.NodeIndex`), and the device groups appended to each slice that has a
    /// `spec.devices` list in its template. Upstream's `createResourceDriver`, generalised.
    #[serde(rename_all = "camelCase")]
    CreateResourceSlices {
        /// Node name prefix ("" for all nodes).
        #[serde(default)]
        nodes: String,
        /// One slice per template per node.
        slice_template_paths: Vec<String>,
        /// Devices per node.
        #[serde(default)]
        devices: Vec<DeviceGroup>,
    },
    /// Allocates every unallocated claim of `namespace` outside the scheduler (upstream
    /// `allocResourceClaims`): nodes in a seeded random order, the first free devices of each.
    #[serde(rename_all = "camelCase")]
    AllocResourceClaims {
        /// Namespace of the claims.
        namespace: String,
    },
    /// Creates `count` PodGroups (`scheduling.k8s.io`) in `namespace` from a template (variable
    /// `.Index` and the `templateParams`), upstream's `createPodGroups`. Pods join one through
    /// `spec.schedulingGroup.podGroupName`.
    #[serde(rename_all = "camelCase")]
    CreatePodGroups {
        /// How many.
        count: usize,
        /// Namespace of the groups (and of their pods).
        namespace: String,
        /// PodGroup template.
        template_path: String,
        /// Integer variables of the template.
        #[serde(default)]
        template_params: BTreeMap<String, i64>,
    },
    /// Creates pods (variable `.Index` and the `templateParams`) and, unless
    /// `skipWaitToCompletion`, waits until they are scheduled. `collectMetrics` marks the
    /// measured phase.
    #[serde(rename_all = "camelCase")]
    CreatePods {
        /// How many (in steady state: how many in flight).
        count: usize,
        /// Pod template.
        pod_template_path: String,
        /// Integer variables of the templates.
        #[serde(default)]
        template_params: BTreeMap<String, i64>,
        /// More pod templates: pod `i` uses template `i % n` of `[podTemplatePath, these…]`.
        #[serde(default)]
        mix_pod_template_paths: Vec<String>,
        /// Namespace (default `bench-<op index>`).
        #[serde(default)]
        namespace: Option<String>,
        /// Measure this phase.
        #[serde(default)]
        collect_metrics: bool,
        /// Keep `count` pods in flight for `durationSeconds`: each scheduled pod is deleted and
        /// replaced by a new one.
        #[serde(default)]
        steady_state: bool,
        /// Steady-state duration.
        #[serde(default)]
        duration_seconds: f64,
        /// Create the pods bound already (`spec.nodeName`), round-robin over the nodes.
        #[serde(default)]
        pre_bound: bool,
        /// Do not wait for the pods to be scheduled.
        #[serde(default)]
        skip_wait_to_completion: bool,
    },
    /// Deletes the pods of a namespace, all at once or at `perSecond`.
    #[serde(rename_all = "camelCase")]
    DeletePods {
        /// Namespace.
        namespace: String,
        /// Deletions per second (0: all at once).
        #[serde(default)]
        per_second: f64,
    },
    /// Waits until every pending pod of the namespaces (all when empty) is scheduled or rejected.
    #[serde(rename_all = "camelCase")]
    Barrier {
        /// Namespaces.
        #[serde(default)]
        namespaces: Vec<String>,
    },
    /// Waits.
    #[serde(rename_all = "camelCase")]
    Sleep {
        /// Seconds.
        duration_seconds: f64,
    },
    /// Background object churn until the workload ends (upstream `churn`).
    #[serde(rename_all = "camelCase")]
    Churn {
        /// Recreate or create.
        mode: ChurnMode,
        /// Interval between rounds.
        interval_milliseconds: u64,
        /// One object per template per round (variable `.Index`).
        template_paths: Vec<String>,
        /// Objects kept per template in `create` mode.
        #[serde(default)]
        number: usize,
        /// Namespace for namespaced kinds.
        #[serde(default)]
        namespace: Option<String>,
    },
}

impl Op {
    /// The template files this op reads.
    pub fn template_paths(&self) -> Vec<&str> {
        match self {
            Op::CreateNodes {
                node_template_path, ..
            } => vec![node_template_path],
            Op::CreateAny { template_path, .. } | Op::CreatePodGroups { template_path, .. } => {
                vec![template_path]
            }
            Op::CreateResourceSlices {
                slice_template_paths,
                devices,
                ..
            } => slice_template_paths
                .iter()
                .map(String::as_str)
                .chain(devices.iter().map(|d| d.template_path.as_str()))
                .collect(),
            Op::CreatePods {
                pod_template_path,
                mix_pod_template_paths,
                ..
            } => std::iter::once(pod_template_path.as_str())
                .chain(mix_pod_template_paths.iter().map(String::as_str))
                .collect(),
            Op::Churn { template_paths, .. } => template_paths.iter().map(String::as_str).collect(),
            Op::AllocResourceClaims { .. }
            | Op::DeletePods { .. }
            | Op::Barrier { .. }
            | Op::Sleep { .. } => {
                vec![]
            }
        }
    }
}

/// A runnable workload: its ops with parameters filled in, and its templates.
#[derive(Clone, Debug)]
pub struct Workload {
    /// `TestCase/workload`.
    pub name: String,
    /// The test case's description plus the workload's.
    pub description: String,
    /// Parameters used.
    pub params: serde_json::Map<String, Value>,
    /// Operations, in order.
    pub ops: Vec<Op>,
    /// Templates by path.
    pub templates: Arc<HashMap<String, Template>>,
    /// Upstream figures.
    pub upstream: Option<Upstream>,
    /// Give up after this long (seconds).
    pub timeout_seconds: f64,
    /// Built with the smoke parameters.
    pub smoke: bool,
    /// Feature gates of the scheduler under test.
    pub feature_gates: BTreeMap<String, bool>,
}

impl Workload {
    /// A template used by an op.
    pub fn template(&self, path: &str) -> Result<&Template, BenchError> {
        self.templates
            .get(path)
            .ok_or_else(|| BenchError::Workload(format!("{}: no template {path}", self.name)))
    }

    /// Whether the workload creates DRA objects (slices, claims, classes, templates).
    pub fn uses_dra(&self) -> bool {
        self.ops.iter().any(|op| match op {
            Op::CreateResourceSlices { .. } | Op::AllocResourceClaims { .. } => true,
            Op::CreateAny { template_path, .. } => self
                .templates
                .get(template_path)
                .and_then(|t| t.render(&crate::template::Vars::new().int("Index", 0)).ok())
                .is_some_and(|v| {
                    v["apiVersion"]
                        .as_str()
                        .is_some_and(|a| a.starts_with("resource.k8s.io/"))
                }),
            _ => false,
        })
    }

    /// Pods measured (created by `collectMetrics` ops, steady state counts its in-flight pods).
    pub fn measured_pods(&self) -> usize {
        self.ops
            .iter()
            .map(|op| match op {
                Op::CreatePods {
                    count,
                    collect_metrics: true,
                    ..
                } => *count,
                _ => 0,
            })
            .sum()
    }

    /// Whether the scheduler under test schedules PodGroups (the `GenericWorkload` gate on).
    pub fn schedules_pod_groups(&self) -> bool {
        self.feature_gates
            .get("GenericWorkload")
            .copied()
            .unwrap_or(false)
    }

    /// The feature gates as a `--feature-gates` value (`A=true,B=false`).
    pub fn feature_gates_flag(&self) -> String {
        self.feature_gates
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Nodes created.
    pub fn nodes(&self) -> usize {
        self.ops
            .iter()
            .map(|op| match op {
                Op::CreateNodes { count, .. } => *count,
                _ => 0,
            })
            .sum()
    }
}

#[derive(Clone, Debug)]
struct Entry {
    case: String,
    description: String,
    feature_gates: BTreeMap<String, bool>,
    ops: Vec<Value>,
    entry: Arc<WorkloadEntryData>,
}

#[derive(Clone, Debug)]
struct WorkloadEntryData {
    name: String,
    params: serde_json::Map<String, Value>,
    smoke: serde_json::Map<String, Value>,
    upstream: Option<Upstream>,
    description: String,
    timeout_seconds: Option<f64>,
}

/// Every workload of a directory of workload files (or of the embedded `e2e/perf/`).
#[derive(Clone, Debug)]
pub struct Catalog {
    entries: Vec<Entry>,
    templates: Arc<HashMap<String, Template>>,
}

impl Catalog {
    /// The workloads compiled into the binary from `e2e/perf/`.
    pub fn embedded() -> Result<Self, BenchError> {
        Self::from_files(
            EMBEDDED
                .iter()
                .map(|(p, t)| (p.to_string(), t.to_string()))
                .collect(),
        )
    }

    /// Reads `dir` (recursively): `templates/**` are templates, other `*.yaml` are workload files.
    pub fn load_dir(dir: &Path) -> Result<Self, BenchError> {
        let mut files = Vec::new();
        read_dir_rec(dir, dir, &mut files)?;
        Self::from_files(files)
    }

    /// Builds a catalog from `(relative path, text)` pairs.
    pub fn from_files(files: Vec<(String, String)>) -> Result<Self, BenchError> {
        let mut templates = HashMap::new();
        let mut entries = Vec::new();
        let mut names = BTreeMap::new();
        for (path, text) in &files {
            if path.starts_with("templates/") {
                templates.insert(path.clone(), Template::new(path, text)?);
                continue;
            }
            let value: serde_yaml::Value =
                serde_yaml::from_str(text).map_err(|e| BenchError::Workload(format!("{path}: {e}")))?;
            let parsed: Vec<WorkloadFile> = if value.is_sequence() {
                serde_yaml::from_value(value)
            } else {
                serde_yaml::from_value::<WorkloadFile>(value).map(|f| vec![f])
            }
            .map_err(|e| BenchError::Workload(format!("{path}: {e}")))?;
            for case in parsed {
                for w in case.workloads {
                    let full = format!("{}/{}", case.name, w.name);
                    if let Some(prev) = names.insert(full.clone(), path.clone()) {
                        return Err(BenchError::Workload(format!(
                            "{path}: workload {full} is also defined in {prev}"
                        )));
                    }
                    entries.push(Entry {
                        case: case.name.clone(),
                        description: case.description.clone(),
                        feature_gates: case.feature_gates.clone(),
                        ops: case.workload_template.clone(),
                        entry: Arc::new(WorkloadEntryData {
                            name: w.name,
                            params: w.params,
                            smoke: w.smoke,
                            upstream: w.upstream,
                            description: w.description,
                            timeout_seconds: w.timeout_seconds,
                        }),
                    });
                }
            }
        }
        let catalog = Catalog {
            entries,
            templates: Arc::new(templates),
        };
        // Validate everything up front: a bad file fails before anything runs.
        for name in catalog.names() {
            catalog.workload(&name, false)?;
            catalog.workload(&name, true)?;
        }
        Ok(catalog)
    }

    /// Every workload name (`TestCase/workload`), in file order.
    pub fn names(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| format!("{}/{}", e.case, e.entry.name))
            .collect()
    }

    /// Names matching a selector: an exact workload name, or a test case name (all its workloads).
    pub fn select(&self, selector: &str) -> Vec<String> {
        let exact: Vec<String> = self.names().into_iter().filter(|n| n == selector).collect();
        if !exact.is_empty() {
            return exact;
        }
        self.entries
            .iter()
            .filter(|e| e.case == selector)
            .map(|e| format!("{}/{}", e.case, e.entry.name))
            .collect()
    }

    /// Builds a workload by full name, with the smoke parameters when `smoke`.
    pub fn workload(&self, name: &str, smoke: bool) -> Result<Workload, BenchError> {
        let e = self
            .entries
            .iter()
            .find(|e| format!("{}/{}", e.case, e.entry.name) == name)
            .ok_or_else(|| BenchError::Workload(format!("no workload named {name}")))?;
        let mut params = e.entry.params.clone();
        if smoke {
            for (k, v) in &e.entry.smoke {
                params.insert(k.clone(), v.clone());
            }
        }
        let mut ops = Vec::new();
        for (i, raw) in e.ops.iter().enumerate() {
            let filled = fill_params(raw, &params)
                .and_then(multiply_count)
                .map_err(|m| BenchError::Workload(format!("{name}: op {i}: {m}")))?;
            let op: Op = serde_json::from_value(filled)
                .map_err(|err| BenchError::Workload(format!("{name}: op {i}: {err}")))?;
            for p in op.template_paths() {
                if !self.templates.contains_key(p) {
                    return Err(BenchError::Workload(format!("{name}: op {i}: no template {p}")));
                }
            }
            ops.push(op);
        }
        let description = [e.description.trim(), e.entry.description.trim()]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        Ok(Workload {
            name: name.to_string(),
            description,
            params,
            ops,
            templates: self.templates.clone(),
            upstream: e.entry.upstream.clone(),
            timeout_seconds: e
                .entry
                .timeout_seconds
                .unwrap_or(if smoke { 60.0 } else { 900.0 }),
            smoke,
            feature_gates: e.feature_gates.clone(),
        })
    }
}

fn read_dir_rec(dir: &Path, base: &Path, out: &mut Vec<(String, String)>) -> Result<(), BenchError> {
    let rd = std::fs::read_dir(dir).map_err(|e| BenchError::Workload(format!("{}: {e}", dir.display())))?;
    let mut paths: Vec<_> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            read_dir_rec(&p, base, out)?;
        } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            let text = std::fs::read_to_string(&p)
                .map_err(|e| BenchError::Workload(format!("{}: {e}", p.display())))?;
            let rel = p
                .strip_prefix(base)
                .map(|r| r.to_string_lossy().replace('\\', "/"))
                .unwrap_or_default();
            out.push((rel, text));
        }
    }
    Ok(())
}

/// Why a workload's op could not be filled in with its parameters.
#[derive(Debug, thiserror::Error)]
enum ParamsError {
    /// The op names a parameter (`$name`) the workload does not set.
    #[error("parameter {0} is not set")]
    Unset(String),
    /// `count` or `countMultiplier` is not a non-negative integer.
    #[error("{0} must be a non-negative integer")]
    NotACount(&'static str),
}

/// Folds `countMultiplier` into `count`: the op then creates `count × countMultiplier` objects.
fn multiply_count(mut op: Value) -> Result<Value, ParamsError> {
    let Some(fields) = op.as_object_mut() else {
        return Ok(op);
    };
    let Some(multiplier) = fields.remove("countMultiplier") else {
        return Ok(op);
    };
    let multiplier = multiplier
        .as_u64()
        .ok_or(ParamsError::NotACount("countMultiplier"))?;
    let count = fields
        .get("count")
        .and_then(Value::as_u64)
        .ok_or(ParamsError::NotACount("count"))?;
    fields.insert("count".into(), Value::from(count.saturating_mul(multiplier)));
    Ok(op)
}

/// Replaces `$name` strings by parameter values, recursively.
fn fill_params(v: &Value, params: &serde_json::Map<String, Value>) -> Result<Value, ParamsError> {
    Ok(match v {
        Value::String(s) if s.starts_with('$') => params
            .get(&s[1..])
            .cloned()
            .ok_or_else(|| ParamsError::Unset(s.clone()))?,
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|x| fill_params(x, params))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| Ok((k.clone(), fill_params(x, params)?)))
                .collect::<Result<_, ParamsError>>()?,
        ),
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<(String, String)> {
        vec![
            (
                "templates/node.yaml".into(),
                "apiVersion: v1\nkind: Node\nmetadata: {name: n-{{.Index}}}\n".into(),
            ),
            (
                "templates/pod.yaml".into(),
                "apiVersion: v1\nkind: Pod\nmetadata: {generateName: p-}\nspec: {containers: [{name: c, image: x}]}\n"
                    .into(),
            ),
            (
                "basic.yaml".into(),
                r#"
name: Basic
workloadTemplate:
- opcode: createNodes
  count: $nodes
  nodeTemplatePath: templates/node.yaml
- opcode: createPods
  count: $pods
  podTemplatePath: templates/pod.yaml
  collectMetrics: true
workloads:
- name: small
  params: {nodes: 5, pods: 7}
  smoke: {pods: 2}
  upstream: {threshold: 100, source: here}
"#
                .into(),
            ),
        ]
    }

    #[test]
    fn params_and_smoke() {
        let c = Catalog::from_files(files()).unwrap();
        assert_eq!(c.names(), vec!["Basic/small"]);
        assert_eq!(c.select("Basic"), vec!["Basic/small"]);
        let w = c.workload("Basic/small", false).unwrap();
        assert_eq!(w.nodes(), 5);
        assert_eq!(w.measured_pods(), 7);
        assert!(!w.uses_dra());
        let s = c.workload("Basic/small", true).unwrap();
        assert_eq!(s.measured_pods(), 2);
        assert_eq!(s.upstream.unwrap().threshold, Some(100.0));
    }

    #[test]
    fn rejects_unknown_fields_and_missing_params() {
        let mut f = files();
        f[2].1 = f[2].1.replace("collectMetrics: true", "collectMetric: true");
        assert!(Catalog::from_files(f).is_err());
        let mut f = files();
        f[2].1 = f[2].1.replace("count: $pods", "count: $missing");
        let err = Catalog::from_files(f).unwrap_err().to_string();
        assert!(err.contains("$missing"), "{err}");
    }

    #[test]
    fn pod_groups_count_multiplier_and_feature_gates() {
        let mut f = files();
        f.push((
            "templates/group.yaml".into(),
            "apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {name: g-{{.Index}}}\n".into(),
        ));
        f[2].1 = r#"
name: Gangs
featureGates: {GenericWorkload: true}
workloadTemplate:
- opcode: createPodGroups
  count: $groups
  namespace: ns
  templatePath: templates/group.yaml
  templateParams: {podsPerGroup: $per}
- opcode: createPods
  count: $groups
  countMultiplier: $per
  namespace: ns
  podTemplatePath: templates/pod.yaml
  templateParams: {podsPerGroup: $per}
  collectMetrics: true
workloads:
- name: small
  params: {groups: 4, per: 3}
"#
        .into();
        let w = Catalog::from_files(f)
            .unwrap()
            .workload("Gangs/small", false)
            .unwrap();
        assert_eq!(w.measured_pods(), 12);
        assert!(w.schedules_pod_groups());
        assert_eq!(w.feature_gates_flag(), "GenericWorkload=true");
        assert_eq!(
            w.ops[0],
            Op::CreatePodGroups {
                count: 4,
                namespace: "ns".into(),
                template_path: "templates/group.yaml".into(),
                template_params: BTreeMap::from([("podsPerGroup".into(), 3)]),
            }
        );
    }

    #[test]
    fn embedded_catalog_is_valid() {
        let c = Catalog::embedded().unwrap();
        assert!(
            c.names().iter().any(|n| n == "SchedulingBasic/500Nodes"),
            "{:?}",
            c.names()
        );
    }
}

//! Static checks of `deploy/`: the manifests, the Helm chart, the Grafana dashboard and the alert
//! rules.
//!
//! - Every YAML document in `deploy/manifests/` parses into its k8s-openapi 1.37 type and
//!   serialises back to the same JSON. k8s-openapi drops unknown fields, so a misspelt or
//!   misplaced field shows up as a difference instead of being ignored by the API server.
//! - RBAC allows every API call the runtime makes (and the ones it is about to make), through the
//!   bindings of the ServiceAccount the Deployment runs as, and grants nothing that no call needs.
//! - The ConfigMap's scheduler configuration parses with the framework's own loader, and the
//!   Deployment is hardened and probed on the endpoints the runtime serves.
//! - The Helm chart's values validate against its schema and its templates only reference values
//!   that exist; its RBAC rules are the manifests' rules.
//! - The dashboard and the alerts only use metrics unisched exports (read from the runtime's
//!   source), and only the template variables they define.
//!
//! The live half (Prometheus scraping the real binary and evaluating every query) is
//! `cmd/unisched/tests/prometheus.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Container, Namespace, PodSpec, Probe, Service, ServiceAccount},
    policy::v1::PodDisruptionBudget,
    rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject},
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use unisched_framework::config::KubeSchedulerConfiguration;

const NAMESPACE: &str = "unisched-system";
const CONFIG_PATH: &str = "/etc/unisched/config.yaml";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ has a parent")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    let p = repo().join(rel);
    fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// Every document of a multi-document YAML text, as JSON (empty documents skipped).
fn yaml_documents(text: &str, what: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text)
        .enumerate()
        .map(|(i, de)| Value::deserialize(de).unwrap_or_else(|e| panic!("{what} document {i}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Manifests
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Doc {
    file: String,
    value: Value,
}

impl Doc {
    fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }
    fn api_version(&self) -> &str {
        self.value["apiVersion"].as_str().unwrap_or_default()
    }
    fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_default()
    }
}

fn manifest_files() -> Vec<PathBuf> {
    let dir = repo().join("deploy/manifests");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in {}", dir.display());
    files
}

fn load_manifests() -> Vec<Doc> {
    let mut docs = Vec::new();
    for f in manifest_files() {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let text = fs::read_to_string(&f).unwrap();
        for value in yaml_documents(&text, &name) {
            docs.push(Doc {
                file: name.clone(),
                value,
            });
        }
    }
    docs
}

/// Differences between what was written and what the typed object serialises back to.
fn diff(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                match g.get(k) {
                    Some(gv) => diff(&format!("{path}.{k}"), wv, gv, out),
                    None => out.push(format!("{path}.{k}: dropped (unknown or misplaced field)")),
                }
            }
            for k in g.keys().filter(|k| !w.contains_key(*k)) {
                out.push(format!("{path}.{k}: added by the type"));
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                diff(&format!("{path}[{i}]"), wv, gv, out);
            }
        }
        _ if want == got => {}
        _ => out.push(format!("{path}: wrote {want}, the type holds {got}")),
    }
}

/// Parses a document into its k8s-openapi type and checks nothing was lost on the way.
fn typed<T: DeserializeOwned + Serialize>(doc: &Doc) -> T {
    let t: T = serde_json::from_value(doc.value.clone())
        .unwrap_or_else(|e| panic!("{}: {} {}: {e}", doc.file, doc.kind(), doc.name()));
    let back = serde_json::to_value(&t).unwrap();
    let mut diffs = Vec::new();
    diff("", &doc.value, &back, &mut diffs);
    assert!(
        diffs.is_empty(),
        "{}: {} {} does not round-trip:\n  {}",
        doc.file,
        doc.kind(),
        doc.name(),
        diffs.join("\n  ")
    );
    t
}

/// The manifests, typed.
#[derive(Default)]
struct Manifests {
    namespaces: Vec<Namespace>,
    service_accounts: Vec<ServiceAccount>,
    cluster_roles: Vec<ClusterRole>,
    cluster_role_bindings: Vec<ClusterRoleBinding>,
    roles: Vec<Role>,
    role_bindings: Vec<RoleBinding>,
    config_maps: Vec<ConfigMap>,
    deployments: Vec<Deployment>,
    services: Vec<Service>,
    pdbs: Vec<PodDisruptionBudget>,
    service_monitors: Vec<Value>,
    kustomizations: Vec<(String, Value)>,
}

fn manifests() -> Manifests {
    let mut m = Manifests::default();
    for doc in load_manifests() {
        match (doc.api_version(), doc.kind()) {
            ("v1", "Namespace") => m.namespaces.push(typed(&doc)),
            ("v1", "ServiceAccount") => m.service_accounts.push(typed(&doc)),
            ("v1", "ConfigMap") => m.config_maps.push(typed(&doc)),
            ("v1", "Service") => m.services.push(typed(&doc)),
            ("apps/v1", "Deployment") => m.deployments.push(typed(&doc)),
            ("policy/v1", "PodDisruptionBudget") => m.pdbs.push(typed(&doc)),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => m.cluster_roles.push(typed(&doc)),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                m.cluster_role_bindings.push(typed(&doc))
            }
            ("rbac.authorization.k8s.io/v1", "Role") => m.roles.push(typed(&doc)),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => m.role_bindings.push(typed(&doc)),
            ("monitoring.coreos.com/v1", "ServiceMonitor") => m.service_monitors.push(doc.value),
            ("kustomize.config.k8s.io/v1beta1", "Kustomization") => {
                m.kustomizations.push((doc.file, doc.value))
            }
            (v, k) => panic!("{}: unexpected {v} {k} (teach this test about it)", doc.file),
        }
    }
    m
}

fn one<'a, T>(items: &'a [T], what: &str) -> &'a T {
    assert_eq!(items.len(), 1, "expected exactly one {what}");
    &items[0]
}

impl Manifests {
    fn deployment(&self) -> &Deployment {
        one(&self.deployments, "Deployment")
    }
    fn pod_spec(&self) -> &PodSpec {
        self.deployment()
            .spec
            .template
            .spec
            .as_ref()
            .expect("pod template spec")
    }
    fn pod_labels(&self) -> BTreeMap<String, String> {
        let d = &self.deployment().spec;
        d.template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default()
    }
    fn container(&self) -> &Container {
        one(&self.pod_spec().containers, "container")
    }
    fn scheduler_config(&self) -> KubeSchedulerConfiguration {
        let cm_name = config_map_of_config_path(self);
        let cm = self
            .config_maps
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(cm_name.as_str()))
            .unwrap_or_else(|| {
                panic!("the Deployment mounts ConfigMap {cm_name}, which is not in deploy/manifests")
            });
        let key = Path::new(CONFIG_PATH)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = cm
            .data
            .as_ref()
            .and_then(|d| d.get(&key))
            .unwrap_or_else(|| panic!("ConfigMap {cm_name} has no {key}"));
        KubeSchedulerConfiguration::from_yaml(text)
            .unwrap_or_else(|e| panic!("ConfigMap {cm_name} {key}: {e}"))
    }
}

/// The ConfigMap mounted at the directory that holds `--config`.
fn config_map_of_config_path(m: &Manifests) -> String {
    let c = m.container();
    let dir = Path::new(CONFIG_PATH)
        .parent()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|vm| vm.mount_path == dir)
        .unwrap_or_else(|| panic!("no volume is mounted at {dir}"));
    assert_eq!(
        mount.read_only,
        Some(true),
        "the config volume is mounted read-only"
    );
    let vol = m
        .pod_spec()
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .unwrap_or_else(|| panic!("volume {} is mounted but not declared", mount.name));
    vol.config_map
        .as_ref()
        .map(|c| c.name.clone())
        .expect("the config volume is a ConfigMap")
}

fn labels_subset(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[test]
fn every_manifest_parses_into_its_type_without_losing_fields() {
    let m = manifests();
    assert_eq!(m.namespaces.len(), 1);
    assert_eq!(m.service_accounts.len(), 1);
    // The scheduler's own and the metrics reader's; its own and system:auth-delegator's.
    assert_eq!(m.cluster_roles.len(), 2);
    assert_eq!(m.cluster_role_bindings.len(), 2);
    assert_eq!(m.roles.len(), 1);
    // Leader election's, and the built-in extension-apiserver-authentication-reader's in kube-system.
    assert_eq!(m.role_bindings.len(), 2);
    assert_eq!(m.config_maps.len(), 1);
    assert_eq!(m.deployments.len(), 1);
    assert_eq!(m.services.len(), 1);
    assert_eq!(m.service_monitors.len(), 1);
}

#[test]
fn objects_live_in_unisched_system_with_common_labels() {
    assert_eq!(
        manifests().namespaces[0].metadata.name.as_deref(),
        Some(NAMESPACE)
    );
    for doc in load_manifests() {
        if doc.kind() == "Kustomization" {
            continue;
        }
        let cluster_scoped = matches!(doc.kind(), "Namespace" | "ClusterRole" | "ClusterRoleBinding");
        let ns = doc.value["metadata"]["namespace"].as_str();
        // The one object outside: a RoleBinding can only grant a Role of its own namespace, and the
        // ConfigMap with the API server's client CA lives in kube-system.
        let reads_authentication_configmap =
            doc.kind() == "RoleBinding" && doc.value["roleRef"]["name"] == AUTHENTICATION_READER_ROLE;
        if reads_authentication_configmap {
            assert_eq!(ns, Some(AUTHENTICATION_NAMESPACE), "{}: {}", doc.file, doc.name());
        } else if cluster_scoped {
            assert_eq!(ns, None, "{}: {} is cluster-scoped", doc.file, doc.kind());
        } else {
            assert_eq!(
                ns,
                Some(NAMESPACE),
                "{}: {} {} must set namespace {NAMESPACE}",
                doc.file,
                doc.kind(),
                doc.name()
            );
        }
        assert_eq!(
            doc.value["metadata"]["labels"]["app.kubernetes.io/name"],
            "unisched",
            "{}: {} {} lacks app.kubernetes.io/name=unisched",
            doc.file,
            doc.kind(),
            doc.name()
        );
    }
}

#[test]
fn kustomization_lists_every_manifest_except_the_servicemonitor() {
    let m = manifests();
    let (file, k) = &m.kustomizations[0];
    assert_eq!(file, "kustomization.yaml");
    let listed: BTreeSet<String> = k["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    let on_disk: BTreeSet<String> = manifest_files()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|f| f != "kustomization.yaml" && f != "servicemonitor.yaml")
        .collect();
    assert_eq!(
        listed, on_disk,
        "kustomization.yaml resources vs files in deploy/manifests"
    );
}

#[test]
fn configmap_holds_a_valid_scheduler_configuration() {
    let m = manifests();
    let cfg = m.scheduler_config();
    let names: Vec<_> = cfg
        .profiles
        .iter()
        .filter_map(|p| p.scheduler_name.clone())
        .collect();
    assert_eq!(names, ["unisched"], "one profile, named unisched");
    let le = &cfg.leader_election;
    assert!(le.leader_elect, "leader election is on (two replicas)");
    assert_eq!(le.resource_lock, "leases");
    assert_eq!(le.resource_namespace, NAMESPACE);
    assert_eq!(le.resource_name, "unisched", "never kube-scheduler's lease");
    // The Role grants get/update/patch on exactly this lease.
    let role = one(&m.roles, "Role");
    let named: Vec<&String> = role
        .rules
        .iter()
        .flatten()
        .filter_map(|r| r.resource_names.as_ref())
        .flatten()
        .collect();
    assert_eq!(
        named,
        [&le.resource_name],
        "the Role's resourceNames are the configured lease"
    );
}

fn probe_path(p: Option<&Probe>, what: &str) -> (String, IntOrString) {
    let p = p.unwrap_or_else(|| panic!("the container has no {what}"));
    let get = p
        .http_get
        .as_ref()
        .unwrap_or_else(|| panic!("{what} is an httpGet probe"));
    assert_eq!(
        get.scheme.as_deref().unwrap_or("HTTP"),
        "HTTPS",
        "{what}: the endpoints are served over HTTPS only"
    );
    (get.path.clone().unwrap_or_default(), get.port.clone())
}

#[test]
fn deployment_is_hardened_probed_and_configured() {
    let m = manifests();
    let d = m.deployment();
    let spec = &d.spec;
    assert_eq!(spec.replicas, Some(2));
    let selector = spec.selector.match_labels.clone().unwrap_or_default();
    let pod_labels = m.pod_labels();
    assert!(
        labels_subset(&selector, &pod_labels),
        "the selector matches the pod template"
    );

    let pod = m.pod_spec();
    let sa = one(&m.service_accounts, "ServiceAccount");
    assert_eq!(
        pod.service_account_name, sa.metadata.name,
        "runs as the ServiceAccount the RBAC binds"
    );
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-cluster-critical")
    );
    assert!(
        pod.scheduler_name
            .as_deref()
            .is_none_or(|s| s == "default-scheduler"),
        "the scheduler's own pods are placed by the default scheduler"
    );
    let anti = pod
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .expect("pod anti-affinity");
    let terms: Vec<_> = anti
        .preferred_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .map(|w| &w.pod_affinity_term)
        .chain(
            anti.required_during_scheduling_ignored_during_execution
                .iter()
                .flatten(),
        )
        .collect();
    assert!(
        terms.iter().any(|t| t.topology_key == "kubernetes.io/hostname"
            && t.label_selector
                .as_ref()
                .and_then(|s| s.match_labels.as_ref())
                .is_some_and(|l| labels_subset(l, &pod_labels))),
        "replicas are spread across nodes by an anti-affinity term selecting their own labels"
    );
    let pod_sc = pod.security_context.as_ref().expect("pod securityContext");
    assert_eq!(pod_sc.run_as_non_root, Some(true));
    assert!(
        pod_sc.run_as_user.is_some_and(|u| u > 0),
        "a numeric non-root user (runAsNonRoot needs one)"
    );
    assert_eq!(
        pod_sc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );

    let c = m.container();
    let image = c.image.as_deref().unwrap_or_default();
    assert!(
        image.contains(':') && !image.ends_with(":latest"),
        "image {image} is pinned"
    );
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(
        args[..3],
        ["run", "--config", CONFIG_PATH],
        "args start with run --config {CONFIG_PATH}"
    );
    assert!(c.command.is_none(), "the image's entrypoint is the binary");
    assert!(
        !args.iter().any(|a| a.starts_with("--metrics-bind-address")),
        "no plain-HTTP endpoint in a cluster"
    );
    let port: i32 = args
        .iter()
        .find_map(|a| a.strip_prefix("--secure-port="))
        .unwrap_or("10259")
        .parse()
        .unwrap();
    assert_ne!(port, 0, "HTTPS is on");

    let env = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "POD_NAMESPACE")
        .expect("POD_NAMESPACE env");
    let field = env
        .value_from
        .as_ref()
        .and_then(|v| v.field_ref.as_ref())
        .expect("POD_NAMESPACE from the downward API");
    assert_eq!(field.field_path, "metadata.namespace");

    let ports = c.ports.clone().unwrap_or_default();
    let metrics = ports
        .iter()
        .find(|p| p.name.as_deref() == Some("metrics"))
        .expect("a port named metrics");
    assert_eq!(
        metrics.container_port, port,
        "the metrics port is where --secure-port listens"
    );
    for (probe, what, path) in [
        (c.liveness_probe.as_ref(), "livenessProbe", "/livez"),
        (c.readiness_probe.as_ref(), "readinessProbe", "/readyz"),
        (c.startup_probe.as_ref(), "startupProbe", "/livez"),
    ] {
        let (p, port_ref) = probe_path(probe, what);
        assert_eq!(p, path, "{what} path");
        match port_ref {
            IntOrString::String(s) => assert_eq!(s, "metrics", "{what} port"),
            IntOrString::Int(n) => assert_eq!(n, port, "{what} port"),
        }
    }
    let startup = c.startup_probe.as_ref().unwrap();
    let budget = startup.period_seconds.unwrap_or(10) * startup.failure_threshold.unwrap_or(3);
    assert!(
        budget >= 30,
        "the startup probe allows at least 30 s for the first list (has {budget} s)"
    );

    let sc = c.security_context.as_ref().expect("container securityContext");
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_ne!(sc.privileged, Some(true));
    let drop = sc
        .capabilities
        .as_ref()
        .and_then(|c| c.drop.clone())
        .unwrap_or_default();
    assert_eq!(drop, ["ALL"], "drops all capabilities");
    assert!(
        sc.capabilities
            .as_ref()
            .and_then(|c| c.add.as_ref())
            .is_none_or(|a| a.is_empty()),
        "adds none"
    );
    assert_eq!(
        sc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );

    let res = c.resources.as_ref().expect("resources");
    let requests = res.requests.clone().unwrap_or_default();
    let limits = res.limits.clone().unwrap_or_default();
    assert!(
        requests.contains_key("cpu") && requests.contains_key("memory"),
        "cpu and memory requests"
    );
    assert!(limits.contains_key("memory"), "a memory limit");

    // The mounted ConfigMap exists and parses (checked in detail above).
    let _ = m.scheduler_config();
}

#[test]
fn service_monitor_and_pdb_select_the_scheduler_pods() {
    let m = manifests();
    let pod_labels = m.pod_labels();
    let svc = one(&m.services, "Service");
    let spec = svc.spec.as_ref().unwrap();
    assert!(
        labels_subset(spec.selector.as_ref().unwrap(), &pod_labels),
        "the Service selects the pods"
    );
    let port = one(spec.ports.as_deref().unwrap(), "Service port");
    assert_eq!(port.name.as_deref(), Some("metrics"));
    assert_eq!(
        port.target_port,
        Some(IntOrString::String("metrics".into())),
        "targets the named container port"
    );
    let svc_labels = svc.metadata.labels.clone().unwrap_or_default();
    let ann = svc.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(ann.get("prometheus.io/scrape").map(String::as_str), Some("true"));
    assert_eq!(ann.get("prometheus.io/port"), Some(&port.port.to_string()));

    let pdb = one(&m.pdbs, "PodDisruptionBudget");
    let sel = pdb
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| s.match_labels.clone())
        .unwrap();
    assert!(labels_subset(&sel, &pod_labels), "the PDB selects the pods");

    // ServiceMonitor (a CRD, so checked structurally).
    let sm = &m.service_monitors[0];
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["metadata"]["namespace"], NAMESPACE);
    let sm_spec = sm["spec"].as_object().expect("ServiceMonitor spec");
    let allowed = ["endpoints", "jobLabel", "namespaceSelector", "selector"];
    for k in sm_spec.keys() {
        assert!(
            allowed.contains(&k.as_str()),
            "ServiceMonitor spec.{k} is not expected"
        );
    }
    let sel: BTreeMap<String, String> =
        serde_json::from_value(sm["spec"]["selector"]["matchLabels"].clone()).unwrap();
    assert!(
        labels_subset(&sel, &svc_labels),
        "the ServiceMonitor selects the Service"
    );
    let namespaces = sm["spec"]["namespaceSelector"]["matchNames"]
        .as_array()
        .expect("namespaceSelector.matchNames");
    assert!(namespaces.iter().any(|n| n == NAMESPACE));
    let endpoints = sm["spec"]["endpoints"].as_array().expect("endpoints");
    assert!(!endpoints.is_empty());
    for e in endpoints {
        assert_eq!(
            e["port"], "metrics",
            "endpoints refer to the Service port by name"
        );
        assert_eq!(e["path"], "/metrics");
        assert_eq!(e["scheme"], "https", "the metrics endpoint is HTTPS only");
        assert_eq!(
            e["bearerTokenFile"], "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "Prometheus authenticates with its service account token"
        );
        assert_eq!(
            e["tlsConfig"]["insecureSkipVerify"], true,
            "the serving certificate is self-signed by default"
        );
        for k in e.as_object().unwrap().keys() {
            assert!(
                [
                    "port",
                    "path",
                    "scheme",
                    "bearerTokenFile",
                    "tlsConfig",
                    "interval",
                    "scrapeTimeout",
                ]
                .contains(&k.as_str()),
                "endpoint field {k}"
            );
        }
    }
    // The alerts and the dashboard key on job="unisched": jobLabel names a Service label with that value.
    let job_label = sm["spec"]["jobLabel"].as_str().expect("jobLabel");
    assert_eq!(
        svc_labels.get(job_label).map(String::as_str),
        Some("unisched"),
        "job label value"
    );
}

// ---------------------------------------------------------------------------------------------
// RBAC
// ---------------------------------------------------------------------------------------------

/// Why a call is in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    /// The runtime makes it today.
    Now,
    /// Granted but not called: lease `update` for PUT-based lease clients, and the PriorityClass
    /// watch (priority comes from the pod's `spec.priority`).
    Reserved,
}

/// One API call: (apiGroup, resource[/subresource], verb), the namespace it is made in (None:
/// any namespace or cluster-scoped) and the object name when RBAC sees one.
struct Call {
    group: &'static str,
    resource: &'static str,
    verb: &'static str,
    namespace: Option<&'static str>,
    name: Option<&'static str>,
    why: &'static str,
    use_: Use,
}

const fn call(
    group: &'static str,
    resource: &'static str,
    verb: &'static str,
    why: &'static str,
    use_: Use,
) -> Call {
    Call {
        group,
        resource,
        verb,
        namespace: None,
        name: None,
        why,
        use_,
    }
}

const fn lease(verb: &'static str, name: Option<&'static str>, why: &'static str, use_: Use) -> Call {
    Call {
        group: "coordination.k8s.io",
        resource: "leases",
        verb,
        namespace: Some(NAMESPACE),
        name,
        why,
        use_,
    }
}

/// The ConfigMap where the API server publishes its client CA and front-proxy settings, read by
/// secure serving when --client-ca-file / --requestheader-client-ca-file are not given.
const AUTHENTICATION_NAMESPACE: &str = "kube-system";
const AUTHENTICATION_CONFIGMAP: &str = "extension-apiserver-authentication";
/// The bootstrap Role in kube-system that grants reading it (get, list, watch; that name only).
const AUTHENTICATION_READER_ROLE: &str = "extension-apiserver-authentication-reader";

const fn authentication_configmap(verb: &'static str, why: &'static str) -> Call {
    Call {
        group: "",
        resource: "configmaps",
        verb,
        namespace: Some(AUTHENTICATION_NAMESPACE),
        name: Some(AUTHENTICATION_CONFIGMAP),
        why,
        use_: Use::Now,
    }
}

/// Every call the runtime makes (crates/runtime: informers.rs, writer.rs, events.rs, leader.rs)
/// or is about to make. `readme_permission_table_is_the_call_table` keeps deploy/README.md's
/// permission table equal to it; the upstream tier checks the calls a real API server sees.
const CALLS: &[Call] = &[
    call("", "pods", "list", "pod informer (queue and cache)", Use::Now),
    authentication_configmap(
        "get",
        "secure serving: the client CA and front-proxy settings, read once before serving",
    ),
    authentication_configmap("list", "secure serving: follow the ConfigMap (by name)"),
    authentication_configmap("watch", "secure serving: a rotated CA applies"),
    call(
        "authentication.k8s.io",
        "tokenreviews",
        "create",
        "secure serving: bearer tokens (system:auth-delegator)",
        Use::Now,
    ),
    call(
        "authorization.k8s.io",
        "subjectaccessreviews",
        "create",
        "secure serving: may the user get the path (system:auth-delegator)",
        Use::Now,
    ),
    call("", "pods", "watch", "pod informer", Use::Now),
    call("", "nodes", "list", "node informer (cache)", Use::Now),
    call("", "nodes", "watch", "node informer", Use::Now),
    call(
        "",
        "namespaces",
        "list",
        "namespace labels (namespaceSelector)",
        Use::Now,
    ),
    call("", "namespaces", "watch", "namespace labels", Use::Now),
    call("", "pods", "delete", "preemption victims", Use::Now),
    call(
        "",
        "pods/binding",
        "create",
        "Bind: POST pods/{name}/binding",
        Use::Now,
    ),
    call(
        "",
        "pods/status",
        "patch",
        "PodScheduled condition, nominatedNodeName, DRA pod status fields",
        Use::Now,
    ),
    call(
        "events.k8s.io",
        "events",
        "create",
        "Scheduled / FailedScheduling events",
        Use::Now,
    ),
    call(
        "events.k8s.io",
        "events",
        "patch",
        "repeated events (series count)",
        Use::Now,
    ),
    lease(
        "get",
        Some("unisched"),
        "leader election: read the lease",
        Use::Now,
    ),
    lease(
        "create",
        None,
        "leader election: first replica creates the lease",
        Use::Now,
    ),
    lease(
        "patch",
        Some("unisched"),
        "leader election: acquire and renew",
        Use::Now,
    ),
    lease(
        "update",
        Some("unisched"),
        "leader election with PUT-based clients",
        Use::Reserved,
    ),
    call(
        "resource.k8s.io",
        "resourceslices",
        "list",
        "allocator input",
        Use::Now,
    ),
    call(
        "resource.k8s.io",
        "resourceslices",
        "watch",
        "allocator input",
        Use::Now,
    ),
    call(
        "resource.k8s.io",
        "deviceclasses",
        "list",
        "allocator input",
        Use::Now,
    ),
    call(
        "resource.k8s.io",
        "deviceclasses",
        "watch",
        "allocator input",
        Use::Now,
    ),
    call(
        "resource.k8s.io",
        "devicetaintrules",
        "list",
        "device taints",
        Use::Now,
    ),
    call(
        "resource.k8s.io",
        "devicetaintrules",
        "watch",
        "device taints",
        Use::Now,
    ),
    call(
        "resource.k8s.io",
        "resourceclaims",
        "get",
        "fresh read before the finalizer patch and after a conflict",
        Use::Now,
    ),
    call(
        "resource.k8s.io",
        "resourceclaims",
        "list",
        "claim cache and allocated-device index",
        Use::Now,
    ),
    call(
        "resource.k8s.io",
        "resourceclaims",
        "watch",
        "claim cache",
        Use::Now,
    ),
    call(
        "resource.k8s.io",
        "resourceclaims",
        "create",
        "KEP-5004 extended-resource claims",
        Use::Now,
    ),
    call(
        "resource.k8s.io",
        "resourceclaims",
        "patch",
        "KEP-5004 claims: finalizer",
        Use::Now,
    ),
    call(
        "resource.k8s.io",
        "resourceclaims",
        "delete",
        "KEP-5004 claims of failed bindings",
        Use::Now,
    ),
    call(
        "resource.k8s.io",
        "resourceclaims/status",
        "patch",
        "allocation and reservedFor",
        Use::Now,
    ),
    call(
        "resource.k8s.io",
        "resourceclaims/binding",
        "patch",
        "granular authorization of binding fields",
        Use::Now,
    ),
    call(
        "scheduling.k8s.io",
        "priorityclasses",
        "list",
        "priority and preemption",
        Use::Reserved,
    ),
    call(
        "scheduling.k8s.io",
        "priorityclasses",
        "watch",
        "priority and preemption",
        Use::Reserved,
    ),
    call(
        "scheduling.k8s.io",
        "podgroups",
        "list",
        "pod groups (GenericWorkload), when the API server serves them",
        Use::Now,
    ),
    call(
        "scheduling.k8s.io",
        "podgroups",
        "watch",
        "pod groups (GenericWorkload), when the API server serves them",
        Use::Now,
    ),
    call(
        "scheduling.k8s.io",
        "podgroups/status",
        "patch",
        "the PodGroupInitiallyScheduled condition",
        Use::Now,
    ),
    call(
        "scheduling.k8s.io",
        "compositepodgroups",
        "list",
        "composite pod groups (CompositePodGroup), when the API server serves them",
        Use::Now,
    ),
    call(
        "scheduling.k8s.io",
        "compositepodgroups",
        "watch",
        "composite pod groups (CompositePodGroup), when the API server serves them",
        Use::Now,
    ),
    call(
        "policy",
        "poddisruptionbudgets",
        "list",
        "preemption victims",
        Use::Now,
    ),
    call(
        "policy",
        "poddisruptionbudgets",
        "watch",
        "preemption victims",
        Use::Now,
    ),
    call("", "persistentvolumes", "get", "volume binding", Use::Now),
    call("", "persistentvolumes", "list", "volume binding", Use::Now),
    call("", "persistentvolumes", "watch", "volume binding", Use::Now),
    call(
        "",
        "persistentvolumes",
        "patch",
        "volume binding (claimRef)",
        Use::Now,
    ),
    call("", "persistentvolumeclaims", "get", "volume binding", Use::Now),
    call("", "persistentvolumeclaims", "list", "volume binding", Use::Now),
    call("", "persistentvolumeclaims", "watch", "volume binding", Use::Now),
    call(
        "",
        "persistentvolumeclaims",
        "patch",
        "volume binding (selected-node annotation)",
        Use::Now,
    ),
    call(
        "storage.k8s.io",
        "storageclasses",
        "get",
        "volume binding",
        Use::Now,
    ),
    call(
        "storage.k8s.io",
        "storageclasses",
        "list",
        "volume binding",
        Use::Now,
    ),
    call(
        "storage.k8s.io",
        "storageclasses",
        "watch",
        "volume binding",
        Use::Now,
    ),
    call("storage.k8s.io", "csinodes", "get", "CSI volume limits", Use::Now),
    call(
        "storage.k8s.io",
        "csinodes",
        "list",
        "CSI volume limits",
        Use::Now,
    ),
    call(
        "storage.k8s.io",
        "csinodes",
        "watch",
        "CSI volume limits",
        Use::Now,
    ),
    call(
        "storage.k8s.io",
        "csidrivers",
        "list",
        "storage capacity, CSI drivers installed on the node",
        Use::Now,
    ),
    call(
        "storage.k8s.io",
        "csidrivers",
        "watch",
        "storage capacity, CSI drivers installed on the node",
        Use::Now,
    ),
    call(
        "storage.k8s.io",
        "csistoragecapacities",
        "list",
        "storage capacity",
        Use::Now,
    ),
    call(
        "storage.k8s.io",
        "csistoragecapacities",
        "watch",
        "storage capacity",
        Use::Now,
    ),
    call(
        "storage.k8s.io",
        "volumeattachments",
        "list",
        "CSI attach limits",
        Use::Now,
    ),
    call(
        "storage.k8s.io",
        "volumeattachments",
        "watch",
        "CSI attach limits",
        Use::Now,
    ),
];

/// A request as the RBAC authorizer sees it.
struct Request<'a> {
    group: &'a str,
    resource: &'a str,
    verb: &'a str,
    namespace: Option<&'a str>,
    name: Option<&'a str>,
}

/// RBAC's rule matching, without wildcards (the manifests must not use any).
fn rule_allows(rule: &PolicyRule, r: &Request<'_>) -> bool {
    let has = |list: Option<&Vec<String>>, v: &str| list.is_some_and(|l| l.iter().any(|x| x == v));
    if !has(rule.api_groups.as_ref(), r.group) || !has(rule.resources.as_ref(), r.resource) {
        return false;
    }
    if !rule.verbs.iter().any(|v| v == r.verb) {
        return false;
    }
    match rule.resource_names.as_deref() {
        None | Some([]) => true,
        Some(names) => r.name.is_some_and(|n| names.iter().any(|x| x == n)),
    }
}

struct Rbac {
    /// Rules that apply in every namespace (ClusterRoles bound by ClusterRoleBindings).
    cluster: Vec<PolicyRule>,
    /// Rules that apply in one namespace (Roles bound by RoleBindings there).
    namespaced: Vec<(String, PolicyRule)>,
}

fn is_subject(s: &Subject, sa: &str, ns: &str) -> bool {
    s.kind == "ServiceAccount" && s.name == sa && s.namespace.as_deref() == Some(ns)
}

/// The rules that reach the Deployment's ServiceAccount through the bindings.
/// The rules of the bootstrap ClusterRoles the manifests bind (the API server reconciles them).
fn built_in_cluster_role(name: &str) -> Option<Vec<PolicyRule>> {
    let create = |group: &str, resource: &str| PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(vec![resource.to_string()]),
        verbs: vec!["create".to_string()],
        ..PolicyRule::default()
    };
    (name == "system:auth-delegator").then(|| {
        vec![
            create("authentication.k8s.io", "tokenreviews"),
            create("authorization.k8s.io", "subjectaccessreviews"),
        ]
    })
}

/// The rules of the bootstrap Roles the manifests bind (the API server reconciles them).
fn built_in_role(namespace: &str, name: &str) -> Option<Vec<PolicyRule>> {
    (namespace == AUTHENTICATION_NAMESPACE && name == AUTHENTICATION_READER_ROLE).then(|| {
        vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".to_string()]),
            resource_names: Some(vec![AUTHENTICATION_CONFIGMAP.to_string()]),
            verbs: ["get", "list", "watch"].map(str::to_string).to_vec(),
            ..PolicyRule::default()
        }]
    })
}

fn effective_rbac(m: &Manifests) -> Rbac {
    let sa = m
        .pod_spec()
        .service_account_name
        .clone()
        .expect("serviceAccountName");
    let ns = m.deployment().metadata.namespace.clone().unwrap();
    let mut rbac = Rbac {
        cluster: Vec::new(),
        namespaced: Vec::new(),
    };
    for b in &m.cluster_role_bindings {
        if !b.subjects.iter().flatten().any(|s| is_subject(s, &sa, &ns)) {
            continue;
        }
        assert_eq!(b.role_ref.kind, "ClusterRole");
        assert_eq!(b.role_ref.api_group.as_deref(), Some("rbac.authorization.k8s.io"));
        if let Some(rules) = built_in_cluster_role(&b.role_ref.name) {
            rbac.cluster.extend(rules);
            continue;
        }
        let role = m
            .cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(b.role_ref.name.as_str()))
            .unwrap_or_else(|| {
                panic!(
                    "ClusterRoleBinding refers to missing ClusterRole {}",
                    b.role_ref.name
                )
            });
        rbac.cluster.extend(role.rules.iter().flatten().cloned());
    }
    for b in &m.role_bindings {
        if !b.subjects.iter().flatten().any(|s| is_subject(s, &sa, &ns)) {
            continue;
        }
        let bns = b.metadata.namespace.clone().unwrap();
        assert_eq!(
            b.role_ref.kind, "Role",
            "RoleBinding {:?} binds a Role",
            b.metadata.name
        );
        if let Some(rules) = built_in_role(&bns, &b.role_ref.name) {
            rbac.namespaced
                .extend(rules.into_iter().map(|r| (bns.clone(), r)));
            continue;
        }
        let role = m
            .roles
            .iter()
            .find(|r| {
                r.metadata.name.as_deref() == Some(b.role_ref.name.as_str())
                    && r.metadata.namespace.as_deref() == Some(&bns)
            })
            .unwrap_or_else(|| panic!("RoleBinding refers to missing Role {}/{}", bns, b.role_ref.name));
        rbac.namespaced
            .extend(role.rules.iter().flatten().map(|r| (bns.clone(), r.clone())));
    }
    rbac
}

impl Rbac {
    fn allows(&self, r: &Request<'_>) -> bool {
        self.cluster.iter().any(|rule| rule_allows(rule, r))
            || self
                .namespaced
                .iter()
                .any(|(ns, rule)| r.namespace == Some(ns.as_str()) && rule_allows(rule, r))
    }
}

#[test]
fn rbac_allows_every_api_call_the_runtime_makes() {
    let rbac = effective_rbac(&manifests());
    let mut missing = Vec::new();
    for c in CALLS {
        let r = Request {
            group: c.group,
            resource: c.resource,
            verb: c.verb,
            namespace: c.namespace,
            name: c.name,
        };
        if !rbac.allows(&r) {
            missing.push(format!(
                "{} {}/{} ({:?}: {})",
                c.verb, c.group, c.resource, c.use_, c.why
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "RBAC does not allow:\n  {}",
        missing.join("\n  ")
    );
}

/// The permission table of deploy/README.md: `(group, resource, verb)` → the row's "used" column.
///
/// A row names one group, one or more resources (`pods, nodes`; `leases \`unisched\` only`) and a
/// list of verbs; every combination is one entry.
fn readme_permission_table() -> BTreeMap<(String, String, String), String> {
    let text = read("deploy/README.md");
    let mut rows = text
        .lines()
        .skip_while(|l| !l.starts_with("| API group | resource | verbs |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .peekable();
    assert!(rows.peek().is_some(), "deploy/README.md has no permission table");
    let mut out = BTreeMap::new();
    for row in rows {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 6, "permission row with {} cells: {row}", cells.len());
        let group = cells[0].trim_matches('`').trim_matches('"').to_string();
        // Resource names are the lower-case words before any qualifier in backticks.
        let resources: Vec<String> = cells[1]
            .split(',')
            .filter_map(|r| r.split_whitespace().next())
            .map(str::to_string)
            .collect();
        for resource in &resources {
            for verb in cells[2].split(',').map(str::trim) {
                let key = (group.clone(), resource.clone(), verb.to_string());
                let used = cells[5].to_string();
                assert!(
                    out.insert(key, used).is_none(),
                    "listed twice in deploy/README.md: {row}"
                );
            }
        }
    }
    out
}

#[test]
fn readme_permission_table_is_the_call_table() {
    let table = readme_permission_table();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for c in CALLS {
        let key = (c.group.to_string(), c.resource.to_string(), c.verb.to_string());
        seen.insert(key.clone());
        match table.get(&key) {
            None => problems.push(format!(
                "{} {}/{} is made by the runtime but not in deploy/README.md",
                c.verb, c.group, c.resource
            )),
            // A row may group a reserved verb with ones in use (lease `update`); a row that says
            // it is not called must hold only reserved calls.
            Some(used) if used.starts_with("granted, not called") && c.use_ == Use::Now => {
                problems.push(format!(
                    "{} {}/{} is called, but deploy/README.md says it is not",
                    c.verb, c.group, c.resource
                ))
            }
            Some(_) => {}
        }
    }
    for (key, used) in &table {
        if !seen.contains(key) {
            problems.push(format!(
                "deploy/README.md lists {} {}/{} ({used}), which no call needs",
                key.2, key.0, key.1
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn rbac_grants_nothing_beyond_the_calls() {
    let m = manifests();
    let rbac = effective_rbac(&m);
    let mut extra = Vec::new();
    let rules = rbac
        .cluster
        .iter()
        .map(|r| (None, r))
        .chain(rbac.namespaced.iter().map(|(ns, r)| (Some(ns.as_str()), r)));
    for (ns, rule) in rules {
        assert!(rule.non_resource_urls.is_none(), "no nonResourceURLs rules");
        for g in rule.api_groups.iter().flatten() {
            for res in rule.resources.iter().flatten() {
                for v in &rule.verbs {
                    let needed = CALLS.iter().any(|c| {
                        c.group == g
                            && c.resource == res
                            && c.verb == v
                            && (ns.is_none() || c.namespace == ns)
                    });
                    if !needed {
                        extra.push(format!("{v} {g}/{res} in {}", ns.unwrap_or("the ClusterRole")));
                    }
                }
            }
        }
    }
    assert!(
        extra.is_empty(),
        "granted but no call in the table needs it:\n  {}",
        extra.join("\n  ")
    );
    // Cluster-wide rules never touch leases: leader election is confined to unisched-system.
    assert!(
        !rbac
            .cluster
            .iter()
            .any(|r| r.resources.iter().flatten().any(|x| x == "leases")),
        "no cluster-wide lease permissions"
    );
}

#[test]
fn rbac_has_no_wildcards_and_refuses_what_unisched_must_not_do() {
    let m = manifests();
    let all_rules = m
        .cluster_roles
        .iter()
        .flat_map(|r| r.rules.iter().flatten())
        .chain(m.roles.iter().flat_map(|r| r.rules.iter().flatten()));
    for rule in all_rules {
        for list in [
            rule.api_groups.as_ref(),
            rule.resources.as_ref(),
            Some(&rule.verbs),
            rule.resource_names.as_ref(),
        ] {
            assert!(
                !list.into_iter().flatten().any(|x| x.contains('*')),
                "wildcard in {rule:?}"
            );
        }
    }
    let rbac = effective_rbac(&m);
    let denied = [
        Request {
            group: "coordination.k8s.io",
            resource: "leases",
            verb: "get",
            namespace: Some("kube-system"),
            name: Some("kube-scheduler"),
        },
        Request {
            group: "coordination.k8s.io",
            resource: "leases",
            verb: "patch",
            namespace: Some(NAMESPACE),
            name: Some("kube-scheduler"),
        },
        Request {
            group: "coordination.k8s.io",
            resource: "leases",
            verb: "create",
            namespace: Some("kube-system"),
            name: None,
        },
        Request {
            group: "coordination.k8s.io",
            resource: "leases",
            verb: "delete",
            namespace: Some(NAMESPACE),
            name: Some("unisched"),
        },
        Request {
            group: "",
            resource: "pods",
            verb: "create",
            namespace: Some("default"),
            name: None,
        },
        Request {
            group: "",
            resource: "pods",
            verb: "deletecollection",
            namespace: Some("default"),
            name: None,
        },
        Request {
            group: "",
            resource: "secrets",
            verb: "get",
            namespace: Some(NAMESPACE),
            name: Some("s"),
        },
        Request {
            group: "",
            resource: "nodes",
            verb: "patch",
            namespace: None,
            name: Some("n"),
        },
        Request {
            group: "resource.k8s.io",
            resource: "resourceslices",
            verb: "create",
            namespace: None,
            name: None,
        },
        Request {
            group: "resource.k8s.io",
            resource: "resourceclaims/driver",
            verb: "patch",
            namespace: Some("default"),
            name: Some("c"),
        },
        // Of kube-system's ConfigMaps, only the API server's authentication settings, read only.
        Request {
            group: "",
            resource: "configmaps",
            verb: "get",
            namespace: Some(AUTHENTICATION_NAMESPACE),
            name: Some("kubeadm-config"),
        },
        Request {
            group: "",
            resource: "configmaps",
            verb: "update",
            namespace: Some(AUTHENTICATION_NAMESPACE),
            name: Some(AUTHENTICATION_CONFIGMAP),
        },
    ];
    for r in denied {
        assert!(
            !rbac.allows(&r),
            "RBAC must not allow {} {}/{} {:?}/{:?}",
            r.verb,
            r.group,
            r.resource,
            r.namespace,
            r.name
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Helm chart
// ---------------------------------------------------------------------------------------------

const CHART: &str = "deploy/helm/unisched";

fn helm_values() -> Value {
    let docs = yaml_documents(&read(&format!("{CHART}/values.yaml")), "values.yaml");
    assert_eq!(docs.len(), 1, "values.yaml is one document");
    docs.into_iter().next().unwrap()
}

fn helm_schema() -> Value {
    serde_json::from_str(&read(&format!("{CHART}/values.schema.json"))).expect("values.schema.json is JSON")
}

const SCHEMA_KEYWORDS: &[&str] = &[
    "$schema",
    "title",
    "description",
    "default",
    "type",
    "properties",
    "additionalProperties",
    "required",
    "items",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "pattern",
    "const",
    "allOf",
    "if",
    "then",
    "$ref",
    "definitions",
];

/// A JSON Schema (draft-07) validator for the keywords in SCHEMA_KEYWORDS; any other keyword in
/// the schema fails the test, so the chart's schema cannot silently outgrow it. `$ref` resolves
/// `#/definitions/<name>` in the chart's schema.
fn validate(schema: &Value, v: &Value, path: &str, errs: &mut Vec<String>) {
    validate_at(schema, schema, v, path, errs);
}

fn validate_at(root: &Value, schema: &Value, v: &Value, path: &str, errs: &mut Vec<String>) {
    let validate = |schema: &Value, v: &Value, path: &str, errs: &mut Vec<String>| {
        validate_at(root, schema, v, path, errs)
    };
    let Some(s) = schema.as_object() else {
        errs.push(format!("{path}: schema is not an object"));
        return;
    };
    for k in s.keys() {
        if !SCHEMA_KEYWORDS.contains(&k.as_str()) {
            errs.push(format!(
                "{path}: schema keyword {k} is not supported by this test's validator"
            ));
        }
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        match r
            .strip_prefix("#/definitions/")
            .and_then(|d| root["definitions"].get(d))
        {
            Some(target) => validate(target, v, path, errs),
            None => errs.push(format!("{path}: unresolved $ref {r}")),
        }
    }
    for sub in s.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        validate(sub, v, path, errs);
    }
    if let (Some(cond), Some(then)) = (s.get("if"), s.get("then")) {
        let mut probe = Vec::new();
        validate(cond, v, path, &mut probe);
        if probe.is_empty() {
            validate(then, v, path, errs);
        }
    }
    if let Some(c) = s.get("const")
        && c != v
    {
        errs.push(format!("{path}: {v} is not {c}"));
    }
    if let (Some(text), Some(p)) = (v.as_str(), s.get("pattern").and_then(Value::as_str)) {
        let re = regex::Regex::new(p).unwrap_or_else(|e| panic!("{path}: pattern {p:?}: {e}"));
        if !re.is_match(text) {
            errs.push(format!("{path}: {text:?} does not match {p:?}"));
        }
    }
    if let (Some(text), Some(max)) = (v.as_str(), s.get("maxLength").and_then(Value::as_u64))
        && text.chars().count() as u64 > max
    {
        errs.push(format!("{path}: {text:?} is longer than {max}"));
    }
    if let (Some(arr), Some(min)) = (v.as_array(), s.get("minItems").and_then(Value::as_u64))
        && (arr.len() as u64) < min
    {
        errs.push(format!("{path}: fewer than {min} items"));
    }
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let ok = types.iter().any(|t| match *t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            "number" => v.is_number(),
            "integer" => v.is_i64() || v.is_u64(),
            _ => false,
        });
        if !ok {
            errs.push(format!("{path}: {v} is not of type {t}"));
            return;
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        errs.push(format!("{path}: {v} is not one of {e:?}"));
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = s.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            errs.push(format!("{path}: {n} < minimum {min}"));
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            errs.push(format!("{path}: {n} > maximum {max}"));
        }
    }
    if let (Some(str_), Some(min)) = (v.as_str(), s.get("minLength").and_then(Value::as_u64))
        && (str_.chars().count() as u64) < min
    {
        errs.push(format!("{path}: {str_:?} is shorter than {min}"));
    }
    if let Some(obj) = v.as_object() {
        let props = s.get("properties").and_then(Value::as_object);
        for r in s.get("required").and_then(Value::as_array).into_iter().flatten() {
            let r = r.as_str().unwrap_or_default();
            if !obj.contains_key(r) {
                errs.push(format!("{path}: required {r} is missing"));
            }
        }
        for (k, val) in obj {
            let sub = format!("{path}.{k}");
            match props.and_then(|p| p.get(k)) {
                Some(ps) => validate(ps, val, &sub, errs),
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        errs.push(format!("{sub}: not allowed (additionalProperties: false)"))
                    }
                    Some(ap @ Value::Object(_)) => validate(ap, val, &sub, errs),
                    _ => {}
                },
            }
        }
    }
    if let (Some(arr), Some(items)) = (v.as_array(), s.get("items")) {
        for (i, item) in arr.iter().enumerate() {
            validate(items, item, &format!("{path}[{i}]"), errs);
        }
    }
}

#[test]
fn helm_values_validate_against_the_strict_schema() {
    let values = helm_values();
    let schema = helm_schema();
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["additionalProperties"], false, "strict at the top level");
    let props: BTreeSet<&String> = schema["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .collect();
    let keys: BTreeSet<&String> = values
        .as_object()
        .expect("values.yaml is a mapping")
        .keys()
        .collect();
    let undocumented: Vec<_> = keys.difference(&props).collect();
    let unset: Vec<_> = props.difference(&keys).collect();
    assert!(
        undocumented.is_empty(),
        "values.yaml keys missing from values.schema.json: {undocumented:?}"
    );
    assert!(
        unset.is_empty(),
        "schema properties with no default in values.yaml: {unset:?}"
    );
    for k in [
        "image",
        "replicaCount",
        "leaderElect",
        "schedulerName",
        "resources",
        "nodeSelector",
        "affinity",
        "tolerations",
        "priorityClassName",
        "pluginConfig",
        "serviceMonitor",
        "rbac",
    ] {
        assert!(keys.iter().any(|x| *x == k), "values.yaml has {k}");
    }
    assert_eq!(
        values["serviceMonitor"]["enabled"], false,
        "off by default (needs the operator's CRDs)"
    );
    assert_eq!(values["rbac"]["create"], true);
    let mut errs = Vec::new();
    validate(&schema, &values, "values", &mut errs);
    assert!(
        errs.is_empty(),
        "values.yaml does not validate:\n  {}",
        errs.join("\n  ")
    );

    // The validator rejects what the schema forbids.
    let mut bad = values.clone();
    bad["replicaCount"] = Value::from("two");
    bad["typo"] = Value::from(1);
    bad["image"]["pullPolicy"] = Value::from("Sometimes");
    let mut errs = Vec::new();
    validate(&schema, &bad, "values", &mut errs);
    assert_eq!(errs.len(), 3, "{errs:?}");
}

/// `over` laid over `base` the way Helm merges a values file into the chart's defaults.
fn overlay(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) => overlay(slot, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

/// The values files in deploy/helm/examples: each one valid, and each one in deploy/README.md's
/// table (helm itself renders and validates them in `e2e/image/run`).
#[test]
fn helm_examples_validate_and_are_documented() {
    let schema = helm_schema();
    let readme = read("deploy/README.md");
    let mut names: Vec<String> = fs::read_dir(repo().join("deploy/helm/examples"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    assert!(names.len() >= 3, "{names:?}");
    for name in &names {
        let docs = yaml_documents(&read(&format!("deploy/helm/examples/{name}")), name);
        assert_eq!(docs.len(), 1, "{name} is one document");
        // Helm validates the defaults with the file laid over them: maps merge, the rest replaces.
        let mut merged = helm_values();
        overlay(&mut merged, &docs[0]);
        let mut errs = Vec::new();
        validate(&schema, &merged, name, &mut errs);
        assert!(
            errs.is_empty(),
            "{name} does not validate:\n  {}",
            errs.join("\n  ")
        );
        assert!(
            readme.contains(&format!("| `{name}` |")),
            "{name} is not in deploy/README.md's table of examples"
        );
    }
}

/// e2e/image/bad-values.yaml, which helm must refuse in CI, is refused here too, for every key.
#[test]
fn helm_bad_values_example_fails_for_each_of_its_keys() {
    let docs = yaml_documents(&read("e2e/image/bad-values.yaml"), "bad-values.yaml");
    let mut merged = helm_values();
    overlay(&mut merged, &docs[0]);
    let mut errs = Vec::new();
    validate(&helm_schema(), &merged, "values", &mut errs);
    for key in [
        "replicaCount",
        "replicas",
        "logFormat",
        "pullPolicy",
        "schedulerName",
        "scoringStrategy",
    ] {
        assert!(
            errs.iter().any(|e| e.contains(key)),
            "no error names {key}: {errs:#?}"
        );
    }
}

fn template_files() -> Vec<(String, String)> {
    let dir = repo().join(CHART).join("templates");
    let mut out: Vec<(String, String)> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// The `{{ … }}` actions of a template, trimmed of `-` markers; comments skipped.
fn actions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("{{") {
        let after = &rest[i + 2..];
        let j = after
            .find("}}")
            .unwrap_or_else(|| panic!("unclosed {{{{ in {:?}", &rest[i..rest.len().min(i + 60)]));
        let inner = after[..j].trim_start_matches('-').trim_end_matches('-').trim();
        if !inner.starts_with("/*") {
            out.push(inner.to_string());
        }
        rest = &after[j + 2..];
    }
    out
}

fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

/// Errors of the chart's schema for `values.yaml` with `edit` applied.
fn schema_errors(edit: impl FnOnce(&mut Value)) -> Vec<String> {
    let mut values = helm_values();
    edit(&mut values);
    let mut errs = Vec::new();
    validate(&helm_schema(), &values, "values", &mut errs);
    errs
}

#[test]
fn helm_schema_refuses_names_that_are_not_dns_1123() {
    struct Case {
        field: &'static str,
        value: &'static str,
        ok: bool,
    }
    let cases = [
        Case {
            field: "schedulerName",
            value: "unisched",
            ok: true,
        },
        Case {
            field: "schedulerName",
            value: "gpu.unisched-2",
            ok: true,
        },
        Case {
            field: "schedulerName",
            value: "Bad_Name",
            ok: false,
        },
        Case {
            field: "schedulerName",
            value: "-leading-dash",
            ok: false,
        },
        Case {
            field: "schedulerName",
            value: "trailing.",
            ok: false,
        },
        Case {
            field: "schedulerName",
            value: "",
            ok: false,
        },
        Case {
            field: "nameOverride",
            value: "",
            ok: true,
        },
        Case {
            field: "nameOverride",
            value: "sched",
            ok: true,
        },
        Case {
            field: "nameOverride",
            value: "has.dot",
            ok: false,
        },
        Case {
            field: "fullnameOverride",
            value: "UPPER",
            ok: false,
        },
        Case {
            field: "priorityClassName",
            value: "",
            ok: true,
        },
        Case {
            field: "priorityClassName",
            value: "Not Valid",
            ok: false,
        },
    ];
    for c in cases {
        let errs = schema_errors(|v| v[c.field] = Value::from(c.value));
        assert_eq!(errs.is_empty(), c.ok, "{} = {:?}: {errs:?}", c.field, c.value);
    }
    let long = "a".repeat(254);
    assert!(!schema_errors(|v| v["schedulerName"] = Value::from(long)).is_empty());
    let errs = schema_errors(|v| v["serviceAccount"]["name"] = Value::from("Bad_SA"));
    assert!(!errs.is_empty(), "serviceAccount.name Bad_SA accepted");
}

/// Whether the scheduler accepts a profile that enables `name` with these args (plugins outside
/// the default set, such as DeviceResources, decode their args only when enabled).
fn scheduler_accepts(name: &str, args: &Value) -> Result<(), String> {
    let yaml = serde_json::json!({"profiles": [{
        "plugins": {"multiPoint": {"enabled": [{"name": name}]}},
        "pluginConfig": [{"name": name, "args": args}],
    }]});
    let cfg = KubeSchedulerConfiguration::from_yaml(&yaml.to_string()).map_err(|e| e.to_string())?;
    let (registry, _) = unisched_plugins::testing::in_tree_registry();
    unisched_framework::Framework::new(&cfg.profiles[0], &registry)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn helm_schema_knows_the_shipped_plugins_and_which_take_args() {
    let schema = helm_schema();
    let (registry, _) = unisched_plugins::testing::in_tree_registry();
    let shipped: BTreeSet<String> = registry.names().map(str::to_string).collect();
    let listed: BTreeSet<String> = schema["definitions"]["pluginName"]["enum"]
        .as_array()
        .expect("pluginName enum")
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, shipped, "definitions.pluginName vs the in-tree registry");
    // A plugin with an args type rejects an unknown field while decoding it; the others say they
    // take no args.
    let with_args: BTreeSet<String> = shipped
        .iter()
        .filter(|n| {
            let err = scheduler_accepts(n, &serde_json::json!({"noSuchField": 1}))
                .expect_err(&format!("{n} accepts an unknown args field"));
            err.contains("unknown field")
        })
        .cloned()
        .collect();
    let in_schema: BTreeSet<String> =
        schema["properties"]["pluginConfig"]["items"]["properties"]["name"]["enum"]
            .as_array()
            .expect("pluginConfig name enum")
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
    assert_eq!(in_schema, with_args, "pluginConfig names vs plugins with args");
    for n in &with_args {
        assert!(
            schema["definitions"].get(format!("{n}Args")).is_some(),
            "no schema for {n}Args"
        );
    }
}

#[test]
fn helm_schema_and_scheduler_agree_on_plugin_args() {
    use serde_json::json;
    struct Case {
        plugin: &'static str,
        args: Value,
        /// The schema's verdict. The schema is structural: where it accepts, the scheduler may
        /// still refuse a cross-field rule (sorted shapes), which `scheduler` states.
        schema: bool,
        scheduler: bool,
    }
    let case = |plugin, args, schema, scheduler| Case {
        plugin,
        args,
        schema,
        scheduler,
    };
    let cases = [
        case(
            "NodeResourcesFit",
            json!({"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 3}]}}),
            true,
            true,
        ),
        case(
            "NodeResourcesFit",
            json!({"scoringStrategy": {"type": "Fancy"}}),
            false,
            false,
        ),
        case(
            "NodeResourcesFit",
            json!({"scoringStrategy": {"resources": [{"name": "cpu", "weight": 101}]}}),
            false,
            false,
        ),
        case(
            "NodeResourcesFit",
            json!({"ignoredResource": ["a"]}),
            false,
            false,
        ),
        case(
            "NodeResourcesFit",
            json!({"kind": "NodeResourcesFitArgs", "apiVersion": "kubescheduler.config.k8s.io/v1", "includeDRAFootprint": false}),
            true,
            true,
        ),
        case("NodeResourcesFit", json!({"kind": "OtherArgs"}), false, false),
        case(
            "NodeResourcesFit",
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}}}),
            true,
            true,
        ),
        case(
            "NodeResourcesFit",
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 11}]}}}),
            false,
            false,
        ),
        case(
            "NodeResourcesFit",
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": [{"utilization": 50, "score": 1}, {"utilization": 10, "score": 2}]}}}),
            true,
            false,
        ),
        case(
            "NodeResourcesBalancedAllocation",
            json!({"resources": [{"name": "cpu", "weight": 1}]}),
            true,
            true,
        ),
        case(
            "NodeResourcesBalancedAllocation",
            json!({"resources": [{"name": "cpu", "weight": 2}]}),
            false,
            false,
        ),
        case(
            "NodeResourcesBalancedAllocation",
            json!({"resources": "cpu"}),
            false,
            false,
        ),
        case(
            "DynamicResources",
            json!({"filterTimeout": "5s", "bindingTimeout": "1m30s"}),
            true,
            true,
        ),
        case("DynamicResources", json!({"filterTimeout": "0s"}), true, true),
        case(
            "DynamicResources",
            json!({"filterTimeout": "five seconds"}),
            false,
            false,
        ),
        case("DynamicResources", json!({"timeout": "5s"}), false, false),
        case(
            "DefaultPreemption",
            json!({"minCandidateNodesPercentage": 10, "minCandidateNodesAbsolute": 100}),
            true,
            true,
        ),
        case(
            "DefaultPreemption",
            json!({"minCandidateNodesPercentage": 101}),
            false,
            false,
        ),
        case(
            "DefaultPreemption",
            json!({"minCandidateNodesAbsolute": -1}),
            false,
            false,
        ),
        case(
            "InterPodAffinity",
            json!({"hardPodAffinityWeight": 5, "ignorePreferredTermsOfExistingPods": true}),
            true,
            true,
        ),
        case(
            "InterPodAffinity",
            json!({"hardPodAffinityWeight": 101}),
            false,
            false,
        ),
        case(
            "PodTopologySpread",
            json!({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]}),
            true,
            true,
        ),
        case(
            "PodTopologySpread",
            json!({"defaultingType": "Sometimes"}),
            false,
            false,
        ),
        case(
            "PodTopologySpread",
            json!({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}),
            false,
            false,
        ),
        case("VolumeBinding", json!({"bindTimeoutSeconds": 30}), true, true),
        case("VolumeBinding", json!({"bindTimeoutSeconds": -1}), false, false),
        case("NodeAffinity", json!({"addedAffinity": {}}), true, true),
        case("NodeAffinity", json!({"added": {}}), false, false),
        case(
            "DeviceResources",
            json!({"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "gpu.example.com", "weight": 2}]}}),
            true,
            true,
        ),
        case(
            "DeviceResources",
            json!({"scoringStrategy": {"type": "Fancy"}}),
            false,
            false,
        ),
        case("DeviceResources", json!({"shape": []}), false, false),
        case("NodePorts", json!({}), false, true),
    ];
    for c in cases {
        let errs = schema_errors(|v| {
            v["pluginConfig"] = json!([{"name": c.plugin, "args": c.args.clone()}]);
        });
        assert_eq!(
            errs.is_empty(),
            c.schema,
            "schema on {} {}: {errs:?}",
            c.plugin,
            c.args
        );
        let sched = scheduler_accepts(c.plugin, &c.args);
        assert_eq!(
            sched.is_ok(),
            c.scheduler,
            "scheduler on {} {}: {sched:?}",
            c.plugin,
            c.args
        );
    }
}

#[test]
fn helm_templates_are_balanced_and_use_existing_values() {
    let values = helm_values();
    let files = template_files();
    let names: BTreeSet<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "_helpers.tpl",
        "NOTES.txt",
        "serviceaccount.yaml",
        "rbac.yaml",
        "configmap.yaml",
        "deployment.yaml",
        "service.yaml",
        "servicemonitor.yaml",
    ] {
        assert!(names.contains(want), "templates/{want} exists");
    }
    let mut used_top = BTreeSet::new();
    for (name, text) in &files {
        let mut depth = 0i32;
        for a in actions(text) {
            let word = a.split_whitespace().next().unwrap_or_default();
            match word {
                "if" | "with" | "range" | "define" | "block" => depth += 1,
                "end" => depth -= 1,
                _ => {}
            }
            assert!(depth >= 0, "{name}: {{{{ end }}}} without an opening block");
            let mut s = a.as_str();
            while let Some(i) = s.find(".Values.") {
                let tail = &s[i + ".Values.".len()..];
                let path: String = tail
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
                    .collect();
                let path = path.trim_end_matches('.');
                assert!(
                    lookup(&values, path).is_some(),
                    "{name}: .Values.{path} is not in values.yaml"
                );
                used_top.insert(path.split('.').next().unwrap().to_string());
                s = &tail[path.len()..];
            }
        }
        assert_eq!(depth, 0, "{name}: unbalanced if/with/range/define … end");
    }
    for k in values.as_object().unwrap().keys() {
        assert!(
            used_top.contains(k),
            "values.yaml {k} is not used by any template"
        );
    }
    let chart = yaml_documents(&read(&format!("{CHART}/Chart.yaml")), "Chart.yaml").remove(0);
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["name"], "unisched");
    assert!(chart["version"].is_string() && chart["appVersion"].is_string());
}

/// The literal `rules:` list of the template document that declares `kind: <kind>`, with
/// `{{ .Values.schedulerName | quote }}` replaced by the default scheduler name.
fn template_rules(text: &str, kind: &str, values: &Value) -> Vec<PolicyRule> {
    let doc = text
        .split("\n---")
        .find(|d| d.lines().any(|l| l.trim() == format!("kind: {kind}")))
        .unwrap_or_else(|| panic!("templates/rbac.yaml declares no {kind}"));
    let rules = doc
        .split("\nrules:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{kind} has no rules"));
    let rules: String = rules
        .lines()
        .take_while(|l| !l.starts_with("{{"))
        .collect::<Vec<_>>()
        .join("\n");
    let name = values["schedulerName"].as_str().unwrap();
    let rules = rules.replace("{{ .Values.schedulerName | quote }}", &format!("{name:?}"));
    assert!(
        !rules.contains("{{"),
        "{kind} rules hold template actions this test does not expand:\n{rules}"
    );
    serde_yaml::from_str(&rules).unwrap_or_else(|e| panic!("{kind} rules in templates/rbac.yaml: {e}"))
}

#[test]
fn helm_rbac_is_the_manifests_rbac() {
    let m = manifests();
    let text = read(&format!("{CHART}/templates/rbac.yaml"));
    let values = helm_values();
    let cluster_role = |name: &str| {
        m.cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no ClusterRole {name}"))
            .rules
            .clone()
            .unwrap()
    };
    assert_eq!(
        template_rules(&text, "ClusterRole", &values),
        cluster_role("unisched"),
        "the chart's ClusterRole rules drifted from deploy/manifests/rbac.yaml"
    );
    // What Prometheus needs to scrape the HTTPS endpoint, in both.
    let metrics_reader = cluster_role("unisched-metrics-reader");
    assert_eq!(metrics_reader.len(), 1);
    assert_eq!(
        metrics_reader[0].non_resource_urls,
        Some(vec!["/metrics".to_string()])
    );
    assert_eq!(metrics_reader[0].verbs, ["get"]);
    let chart_reader = text
        .split("\n---")
        .find(|d| d.contains("-metrics-reader\n"))
        .expect("the chart's metrics-reader ClusterRole");
    assert!(chart_reader.contains("  - nonResourceURLs: [/metrics]\n    verbs: [get]"));
    assert!(
        text.contains("  name: system:auth-delegator\n"),
        "the chart binds system:auth-delegator"
    );
    assert_eq!(
        template_rules(&text, "Role", &values),
        one(&m.roles, "Role").rules.clone().unwrap(),
        "the chart's Role rules drifted from deploy/manifests/rbac.yaml"
    );
}

// ---------------------------------------------------------------------------------------------
// Dashboard and alerts
// ---------------------------------------------------------------------------------------------

/// Metric names registered in crates/runtime/src/metrics.rs, with the series names histograms add.
fn exported_series() -> BTreeSet<String> {
    let src = read("crates/runtime/src/metrics.rs");
    let mut out = BTreeSet::new();
    let mut rest = src.as_str();
    let mut consumed = 0;
    while let Some(i) = rest.find('"') {
        let after = &rest[i + 1..];
        let Some(j) = after.find('"') else { break };
        let lit = &after[..j];
        let is_metric = (lit.starts_with("scheduler_") || lit.starts_with("unisched_"))
            && lit.chars().all(|c| c.is_ascii_lowercase() || c == '_');
        if is_metric {
            let before = src[..consumed + i].trim_end();
            if before.ends_with("hist(") {
                for suffix in ["_bucket", "_sum", "_count"] {
                    out.insert(format!("{lit}{suffix}"));
                }
            } else {
                out.insert(lit.to_string());
            }
        }
        consumed += i + 1 + j + 1;
        rest = &after[j + 1..];
    }
    for p in [
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_max_fds",
        "process_virtual_memory_bytes",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
        "process_threads",
    ] {
        out.insert(p.to_string());
    }
    out.insert("up".into());
    assert!(
        out.contains("scheduler_schedule_attempts_total"),
        "parsed metrics.rs: {out:?}"
    );
    assert!(
        out.contains("scheduler_scheduling_attempt_duration_seconds_bucket"),
        "histograms recognised: {out:?}"
    );
    out
}

/// Metric names a PromQL expression refers to (identifiers outside strings with our prefixes).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_str = false;
    let mut tok = String::new();
    let mut flush = |tok: &mut String| {
        if ["scheduler_", "unisched_", "process_"]
            .iter()
            .any(|p| tok.starts_with(p))
            || tok == "up"
        {
            out.insert(tok.clone());
        }
        tok.clear();
    };
    for c in expr.chars() {
        if c == '"' {
            in_str = !in_str;
            flush(&mut tok);
        } else if !in_str && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            tok.push(c);
        } else {
            flush(&mut tok);
        }
    }
    flush(&mut tok);
    out
}

fn dashboard() -> Value {
    serde_json::from_str(&read("deploy/grafana/unisched-dashboard.json")).expect("the dashboard is JSON")
}

/// (panel title, expr) of every target in the dashboard.
fn dashboard_exprs(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        let nested = p["panels"].as_array().cloned().unwrap_or_default();
        for p in std::iter::once(p).chain(nested.iter()) {
            for t in p["targets"].as_array().into_iter().flatten() {
                out.push((
                    p["title"].as_str().unwrap_or_default().to_string(),
                    t["expr"].as_str().unwrap_or_default().to_string(),
                ));
            }
        }
    }
    out
}

/// `$name` and `${name}` references in a string.
fn variables(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        let after = &rest[i + 1..];
        let (name, len) = if let Some(inner) = after.strip_prefix('{') {
            let end = inner.find('}').unwrap_or(inner.len());
            (inner[..end].split(':').next().unwrap().to_string(), end + 2)
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let len = name.len();
            (name, len)
        };
        if !name.is_empty() {
            out.push(name);
        }
        rest = &after[len..];
    }
    out
}

#[test]
fn dashboard_uses_only_exported_metrics_and_defined_variables() {
    let d = dashboard();
    assert!(d["schemaVersion"].as_u64().unwrap() >= 36, "schemaVersion >= 36");
    assert!(d["uid"].is_string() && d["title"].is_string());
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    let var_names: BTreeSet<&str> = vars.iter().filter_map(|v| v["name"].as_str()).collect();
    for v in ["datasource", "instance", "profile"] {
        assert!(var_names.contains(v), "template variable {v}");
    }
    let ds = vars.iter().find(|v| v["name"] == "datasource").unwrap();
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");

    let exported = exported_series();
    let builtin = ["__rate_interval", "__interval", "__range"];
    let mut ids = BTreeSet::new();
    let mut rows = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "duplicate panel id {}",
            p["id"]
        );
        assert!(
            p["gridPos"]["w"].as_u64().is_some_and(|w| w <= 24),
            "gridPos of {}",
            p["title"]
        );
        if p["type"] == "row" {
            rows.push(p["title"].as_str().unwrap().to_string());
            continue;
        }
        assert_eq!(
            p["datasource"]["uid"], "${datasource}",
            "panel {} uses the datasource variable",
            p["title"]
        );
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("panel {} has targets", p["title"]));
        assert!(!targets.is_empty(), "panel {} has targets", p["title"]);
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}");
            assert!(t["refId"].is_string());
        }
    }
    for want in [
        "Golden signals",
        "Plugins",
        "Dynamic Resource Allocation",
        "API client",
        "Process",
    ] {
        assert!(rows.iter().any(|r| r == want), "row {want:?} (rows: {rows:?})");
    }
    let mut used = BTreeSet::new();
    let mut var_queries: Vec<(String, String)> = vars
        .iter()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            (
                format!("variable {}", v["name"]),
                v["definition"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    var_queries.extend(dashboard_exprs(&d));
    for (title, expr) in &var_queries {
        assert!(!expr.is_empty(), "{title}: empty expr");
        for name in metric_names(expr) {
            assert!(
                exported.contains(&name),
                "{title}: {name} is not exported by unisched ({expr})"
            );
            used.insert(name);
        }
        for v in variables(expr) {
            assert!(
                var_names.contains(v.as_str()) || builtin.contains(&v.as_str()),
                "{title}: ${v} is not defined"
            );
        }
        // Multi-value variables expand to regexes: they may only appear in =~ matchers.
        for v in ["job", "instance", "profile"] {
            let pat = format!("\"${v}\"");
            for (i, _) in expr.match_indices(&pat) {
                assert!(
                    expr[..i].ends_with("=~"),
                    "{title}: ${v} must be used with =~ ({expr})"
                );
            }
        }
    }
    for want in [
        "scheduler_schedule_attempts_total",
        "scheduler_scheduling_attempt_duration_seconds_bucket",
        "scheduler_pod_scheduling_sli_duration_seconds_bucket",
        "scheduler_pending_pods",
        "scheduler_framework_extension_point_duration_seconds_bucket",
        "scheduler_plugin_execution_duration_seconds_bucket",
        "unisched_dra_allocations_total",
        "unisched_extended_resource_claims_total",
        "unisched_node_allocatable_rejections_total",
        "unisched_api_writes_total",
        "unisched_api_write_duration_seconds_bucket",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "unisched_leader",
    ] {
        assert!(used.contains(want), "the dashboard shows {want}");
    }
    let all = var_queries
        .iter()
        .map(|(_, e)| e.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    for plugin in ["DynamicResources", "NodeResourcesFit"] {
        assert!(
            all.contains(&format!("plugin=\"{plugin}\"")),
            "a panel for plugin {plugin}"
        );
    }
}

#[test]
fn alert_rules_use_exported_metrics_and_are_complete() {
    let doc = yaml_documents(
        &read("deploy/prometheus/unisched-alerts.yaml"),
        "unisched-alerts.yaml",
    )
    .remove(0);
    let exported = exported_series();
    let mut alerts = BTreeSet::new();
    for g in doc["groups"].as_array().expect("groups") {
        assert!(g["name"].is_string());
        for r in g["rules"].as_array().expect("rules") {
            let name = r["alert"].as_str().expect("alerting rules only").to_string();
            let expr = r["expr"].as_str().unwrap_or_else(|| panic!("{name}: expr"));
            for m in metric_names(expr) {
                assert!(exported.contains(&m), "{name}: {m} is not exported by unisched");
            }
            assert!(
                expr.contains("job=\"unisched\""),
                "{name}: scoped to job=\"unisched\" (kube-scheduler exports the same names)"
            );
            assert!(
                ["critical", "warning", "info"]
                    .contains(&r["labels"]["severity"].as_str().unwrap_or_default()),
                "{name}: severity"
            );
            assert!(
                r["annotations"]["summary"].is_string() && r["annotations"]["description"].is_string(),
                "{name}: annotations"
            );
            assert!(alerts.insert(name.clone()), "duplicate alert {name}");
        }
    }
    for want in [
        "UnischedDown",
        "UnischedNoLeader",
        "UnischedPendingPodsGrowing",
        "UnischedHighSchedulingLatency",
        "UnischedAPIWriteErrors",
    ] {
        assert!(alerts.contains(want), "alert {want}");
    }
}

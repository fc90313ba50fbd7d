//! What `unisched sim` prints when a scenario has settled.
//!
//! Read straight from the control plane's objects, not from the scheduler, so the report shows what
//! a user of the cluster would see (`kubectl get`), including pods the scheduler never touched.
//! The JSON shape is a contract: scripts depend on it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use serde::Serialize;
use serde_json::{Value, json};
use unisched_resource::{PodRequestOptions, Resource, pod_requests};

use crate::Store;

/// One allocated device.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceReport {
    /// Request name (`gpu`, `req/sub`, `container-0-request-0`).
    pub request: String,
    /// Driver.
    pub driver: String,
    /// Pool.
    pub pool: String,
    /// Device.
    pub device: String,
    /// Consumed capacity for shared devices.
    pub consumed_capacity: Option<Value>,
}

/// One claim a pod uses.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ClaimReport {
    /// The claim's real name.
    pub name: String,
    /// Allocated devices (empty when unallocated).
    pub devices: Vec<DeviceReport>,
    /// `status.reservedFor`, each as `<resource>/<name>` (`pods/train-0`, `podgroups/train`).
    #[serde(rename = "reservedFor", skip_serializing_if = "Vec::is_empty")]
    pub reserved_for: Vec<String>,
}

/// One pod.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Node, when bound.
    pub node: Option<String>,
    /// The PodGroup it belongs to (`spec.schedulingGroup.podGroupName`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// `status.phase`.
    pub phase: String,
    /// Why it is not running (PodScheduled reason, or the kubelet's rejection reason).
    pub reason: Option<String>,
    /// The matching message.
    pub message: Option<String>,
    /// Claims the pod uses.
    pub claims: Vec<ClaimReport>,
    /// `status.extendedResourceClaimStatus`.
    pub extended_resource_claim_status: Option<Value>,
    /// `status.nodeAllocatableResourceClaimStatuses`.
    pub node_allocatable_resource_claim_statuses: Option<Value>,
}

/// One node.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NodeReport {
    /// Name.
    pub name: String,
    /// `status.allocatable` (canonical quantities).
    pub allocatable: BTreeMap<String, String>,
    /// Sum of the requests of the pods on the node (DRA node-allocatable demand included).
    pub requested: BTreeMap<String, String>,
}

/// Device usage of one pool (table only).
#[derive(Clone, Debug, PartialEq)]
pub struct PoolReport {
    /// Driver.
    pub driver: String,
    /// Pool.
    pub pool: String,
    /// Devices in the pool.
    pub devices: usize,
    /// Devices allocated to at least one claim.
    pub allocated: usize,
}

/// Totals.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    /// Pods with a node.
    pub scheduled: usize,
    /// Pods without a node.
    pub unschedulable: usize,
    /// Wall-clock seconds the scenario took.
    pub seconds: f64,
}

/// The whole report.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Report {
    /// Pods, by namespace and name.
    pub pods: Vec<PodReport>,
    /// Nodes, by name.
    pub nodes: Vec<NodeReport>,
    /// Device pools (not in the JSON contract).
    #[serde(skip)]
    pub pools: Vec<PoolReport>,
    /// Totals.
    pub summary: Summary,
    /// PersistentVolumeClaims and what they are bound to; absent from the JSON when there are none.
    #[serde(rename = "volumeClaims", skip_serializing_if = "Vec::is_empty")]
    pub volume_claims: Vec<VolumeClaimReport>,
    /// Per-pod placement explanations (`--explain`); absent from the JSON unless asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub explanations: Vec<PodExplanation>,
    /// What `--from-cluster` copied from the live cluster; absent from the JSON otherwise.
    #[serde(rename = "fromCluster", skip_serializing_if = "Option::is_none")]
    pub from_cluster: Option<FromCluster>,
}

/// What `unisched sim --from-cluster` read from the live cluster and loaded into the copy.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FromCluster {
    /// The live cluster's API server.
    pub server: String,
    /// Objects copied, by kind.
    pub copied: BTreeMap<String, usize>,
    /// Pods that were pending in the live cluster (`namespace/name`): the ones decided here.
    pub pending: Vec<String>,
    /// Pending pods of other schedulers, not copied (`namespace/name (schedulerName …)`).
    pub not_ours: Vec<String>,
    /// Objects the embedded server refused, with its reason; the copy went on without them.
    pub rejected: Vec<String>,
}

/// Warning events that explain why a pod cannot be scheduled yet although no scheduler has
/// written a condition: the claim controller's `FailedResourceClaimCreation` (a missing
/// template). A pod with one has a known reason, so a run does not wait for it.
pub const BLOCKING_EVENT_REASONS: &[&str] = &["FailedResourceClaimCreation"];

/// The newest blocking event (reason, message) per pod `(namespace, name)`.
pub fn blocking_events(objects: &dyn ObjectSource) -> BTreeMap<(String, String), (String, String)> {
    let mut newest: BTreeMap<(String, String), (String, String, String)> = BTreeMap::new();
    for e in objects.objects("events") {
        let reason = e["reason"].as_str().unwrap_or_default();
        if e["involvedObject"]["kind"] != "Pod" || !BLOCKING_EVENT_REASONS.contains(&reason) {
            continue;
        }
        let key = (
            e["involvedObject"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            e["involvedObject"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        // RFC 3339 timestamps compare as strings; the resourceVersion breaks ties.
        let when = format!(
            "{}/{:>20}",
            e["lastTimestamp"].as_str().unwrap_or_default(),
            e["metadata"]["resourceVersion"].as_str().unwrap_or_default()
        );
        let entry = (
            when,
            reason.to_string(),
            e["message"].as_str().unwrap_or_default().to_string(),
        );
        match newest.get(&key) {
            Some(old) if old.0 >= entry.0 => {}
            _ => {
                newest.insert(key, entry);
            }
        }
    }
    newest.into_iter().map(|(k, (_, r, m))| (k, (r, m))).collect()
}

/// One PersistentVolumeClaim.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeClaimReport {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `status.phase` (`Pending`, `Bound`, `Lost`).
    pub phase: String,
    /// `spec.volumeName`, when bound.
    pub volume: Option<String>,
    /// The `volume.kubernetes.io/selected-node` annotation, when the scheduler set one.
    pub selected_node: Option<String>,
}

fn volume_claims(store: &dyn ObjectSource) -> Vec<VolumeClaimReport> {
    let mut out: Vec<VolumeClaimReport> = list(store, "persistentvolumeclaims")
        .iter()
        .map(|c| {
            let s = |path: &[&str]| crate::util::get_str(c, path).map(str::to_string);
            VolumeClaimReport {
                namespace: s(&["metadata", "namespace"]).unwrap_or_default(),
                name: s(&["metadata", "name"]).unwrap_or_default(),
                phase: s(&["status", "phase"]).unwrap_or_else(|| "Pending".into()),
                volume: s(&["spec", "volumeName"]).filter(|v| !v.is_empty()),
                selected_node: s(&["metadata", "annotations", "volume.kubernetes.io/selected-node"]),
            }
        })
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// How one pod's node was chosen: the best-scored nodes with each score plugin's weighted score.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodExplanation {
    /// `namespace/name`.
    pub pod: String,
    /// The chosen node.
    pub node: String,
    /// The profile that placed the pod.
    pub profile: String,
    /// Nodes Filter looked at.
    pub evaluated_nodes: usize,
    /// Nodes that passed Filter.
    pub feasible_nodes: usize,
    /// Up to three best nodes, highest total first.
    pub top: Vec<ScoredNode>,
    /// The same as a readable table (the table report prints it).
    #[serde(skip)]
    pub text: String,
}

/// One node's scores in an explanation.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ScoredNode {
    /// The node.
    pub node: String,
    /// The weighted sum.
    pub total: i64,
    /// Weighted score per plugin.
    pub scores: BTreeMap<String, i64>,
}

/// Where a report reads its objects from: the embedded store, or a listing taken from another API
/// server (`unisched sim --kubeconfig`), keyed by plural resource name. The report is the same
/// either way, so a scenario's result on kube-apiserver compares line by line with the embedded one.
pub trait ObjectSource {
    /// Every object of the resource (`pods`, `resourceclaims`, …), as JSON.
    fn objects(&self, resource: &str) -> Vec<Value>;
}

impl ObjectSource for Store {
    fn objects(&self, resource: &str) -> Vec<Value> {
        self.list_all(resource, None)
            .map(|v| v.iter().map(|o| o.value().clone()).collect())
            .unwrap_or_default()
    }
}

impl ObjectSource for BTreeMap<String, Vec<Value>> {
    fn objects(&self, resource: &str) -> Vec<Value> {
        self.get(resource).cloned().unwrap_or_default()
    }
}

fn list(store: &dyn ObjectSource, resource: &str) -> Vec<Value> {
    store.objects(resource)
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn claim_devices(claim: &Value) -> Vec<DeviceReport> {
    claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| DeviceReport {
            request: r["request"].as_str().unwrap_or_default().to_string(),
            driver: r["driver"].as_str().unwrap_or_default().to_string(),
            pool: r["pool"].as_str().unwrap_or_default().to_string(),
            device: r["device"].as_str().unwrap_or_default().to_string(),
            consumed_capacity: r.get("consumedCapacity").filter(|v| !v.is_null()).cloned(),
        })
        .collect()
}

/// The names of the claims a pod uses: direct ones, generated ones (from pod status) and the
/// scheduler-created extended-resource claim.
pub fn pod_claim_names(pod: &Value) -> Vec<String> {
    let statuses = pod["status"]["resourceClaimStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for rc in pod["spec"]["resourceClaims"].as_array().into_iter().flatten() {
        if let Some(n) = rc["resourceClaimName"].as_str() {
            out.push(n.to_string());
        } else if let Some(n) = statuses
            .iter()
            .find(|s| s["name"] == rc["name"])
            .and_then(|s| s["resourceClaimName"].as_str())
        {
            out.push(n.to_string());
        }
    }
    if let Some(n) = pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"].as_str() {
        out.push(n.to_string());
    }
    out
}

/// Builds the report from the store.
pub fn build(store: &dyn ObjectSource, seconds: f64) -> Report {
    let claims: BTreeMap<(String, String), Value> = list(store, "resourceclaims")
        .into_iter()
        .map(|c| {
            let key = (
                c["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                c["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            );
            (key, c)
        })
        .collect();
    let blocked = blocking_events(store);
    let mut pods = Vec::new();
    let mut requested: BTreeMap<String, Resource> = BTreeMap::new();
    // What the scheduler counts: a pod in the middle of an in-place resize holds the larger of its
    // spec and its status.
    let opts = PodRequestOptions {
        include_node_allocatable_claims: true,
        use_status_resources: true,
        pod_level_status_resources: true,
        ..Default::default()
    };
    for v in list(store, "pods") {
        let Ok(pod) = serde_json::from_value::<Pod>(v.clone()) else {
            continue;
        };
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        if let Some(n) = &node
            && !is_terminal(&pod)
        {
            requested
                .entry(n.clone())
                .or_default()
                .add(&pod_requests(&pod, &opts));
        }
        let status = pod.status.clone().unwrap_or_default();
        let sched = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False");
        let (reason, message) = if node.is_none() {
            let gated = pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|g| !g.is_empty());
            // A template claim the controller has not created: its event names the cause (the
            // missing template), the scheduler's condition only that the claim is not there yet.
            let claim_not_created = pod.spec.as_ref().is_some_and(|spec| {
                spec.resource_claims.iter().flatten().any(|rc| {
                    rc.resource_claim_template_name.is_some()
                        && !status
                            .resource_claim_statuses
                            .iter()
                            .flatten()
                            .any(|cs| cs.name == rc.name && cs.resource_claim_name.is_some())
                })
            });
            match (sched, blocked.get(&(ns.clone(), name.clone()))) {
                (None, Some((r, m))) => (Some(r.clone()), Some(m.clone())),
                (Some(_), Some((r, m))) if claim_not_created => (Some(r.clone()), Some(m.clone())),
                // kube-apiserver writes this condition on a gated pod; say it when no one did.
                (None, None) if gated => (
                    Some("SchedulingGated".into()),
                    Some("Scheduling is blocked due to non-empty scheduling gates".into()),
                ),
                _ => (
                    sched.and_then(|c| c.reason.clone()),
                    sched.and_then(|c| c.message.clone()),
                ),
            }
        } else if status.phase.as_deref() == Some("Failed") {
            (status.reason.clone(), status.message.clone())
        } else {
            (None, None)
        };
        let claim_reports = pod_claim_names(&v)
            .into_iter()
            .map(|cn| {
                let devices = claims
                    .get(&(ns.clone(), cn.clone()))
                    .map(claim_devices)
                    .unwrap_or_default();
                let reserved_for = claims
                    .get(&(ns.clone(), cn.clone()))
                    .and_then(|c| c["status"]["reservedFor"].as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .map(|r| {
                        format!(
                            "{}/{}",
                            r["resource"].as_str().unwrap_or_default(),
                            r["name"].as_str().unwrap_or_default()
                        )
                    })
                    .collect();
                ClaimReport {
                    name: cn,
                    devices,
                    reserved_for,
                }
            })
            .collect();
        let group = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_group.as_ref())
            .and_then(|g| g.pod_group_name.clone());
        pods.push(PodReport {
            namespace: ns,
            name,
            node,
            group,
            phase: status.phase.clone().unwrap_or_else(|| "Pending".into()),
            reason,
            message,
            claims: claim_reports,
            extended_resource_claim_status: v["status"]
                .get("extendedResourceClaimStatus")
                .filter(|x| !x.is_null())
                .cloned(),
            node_allocatable_resource_claim_statuses: v["status"]
                .get("nodeAllocatableResourceClaimStatuses")
                .filter(|x| !x.is_null())
                .cloned(),
        });
    }
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut nodes = Vec::new();
    for v in list(store, "nodes") {
        let Ok(node) = serde_json::from_value::<Node>(v) else {
            continue;
        };
        let name = node.metadata.name.clone().unwrap_or_default();
        let alloc = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.clone())
            .unwrap_or_default();
        let allocatable = Resource::from_list_lossy(&alloc)
            .to_list()
            .into_iter()
            .map(|(k, q)| (k, q.0))
            .collect();
        let req = requested.remove(&name).unwrap_or_default();
        let requested = req.to_list().into_iter().map(|(k, q)| (k, q.0)).collect();
        nodes.push(NodeReport {
            name,
            allocatable,
            requested,
        });
    }
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let scheduled = pods.iter().filter(|p| p.node.is_some()).count();
    let summary = Summary {
        scheduled,
        unschedulable: pods.len() - scheduled,
        seconds,
    };
    Report {
        pools: pool_usage(store, &claims),
        pods,
        nodes,
        summary,
        volume_claims: volume_claims(store),
        explanations: Vec::new(),
        from_cluster: None,
    }
}

fn pool_usage(store: &dyn ObjectSource, claims: &BTreeMap<(String, String), Value>) -> Vec<PoolReport> {
    // Newest generation per pool, devices counted over its slices.
    let mut newest: BTreeMap<(String, String), i64> = BTreeMap::new();
    let slices = list(store, "resourceslices");
    for s in &slices {
        let key = (
            s["spec"]["driver"].as_str().unwrap_or_default().to_string(),
            s["spec"]["pool"]["name"].as_str().unwrap_or_default().to_string(),
        );
        let g = s["spec"]["pool"]["generation"].as_i64().unwrap_or(0);
        let e = newest.entry(key).or_insert(g);
        *e = (*e).max(g);
    }
    let mut devices: BTreeMap<(String, String), usize> = BTreeMap::new();
    for s in &slices {
        let key = (
            s["spec"]["driver"].as_str().unwrap_or_default().to_string(),
            s["spec"]["pool"]["name"].as_str().unwrap_or_default().to_string(),
        );
        if newest.get(&key).copied() == Some(s["spec"]["pool"]["generation"].as_i64().unwrap_or(0)) {
            *devices.entry(key).or_insert(0) += s["spec"]["devices"].as_array().map_or(0, Vec::len);
        }
    }
    let mut allocated: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for c in claims.values() {
        for d in claim_devices(c) {
            allocated.entry((d.driver, d.pool)).or_default().insert(d.device);
        }
    }
    devices
        .into_iter()
        .map(|((driver, pool), n)| {
            let a = allocated
                .get(&(driver.clone(), pool.clone()))
                .map_or(0, BTreeSet::len);
            PoolReport {
                driver,
                pool,
                devices: n,
                allocated: a,
            }
        })
        .collect()
}

impl Report {
    /// The JSON document (the contract shape).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|_| json!({}))
    }

    /// The human-readable table.
    pub fn to_table(&self) -> String {
        let mut rows: Vec<[String; 4]> =
            vec![["POD".into(), "NODE".into(), "DEVICES".into(), "REASON".into()]];
        for p in &self.pods {
            let devices: Vec<String> = p
                .claims
                .iter()
                .flat_map(|c| c.devices.iter().map(|d| format!("{}/{}", d.pool, d.device)))
                .collect();
            let reason = match (&p.reason, &p.message) {
                (Some(r), Some(m)) => format!("{r}: {m}"),
                (Some(r), None) => r.clone(),
                _ => String::new(),
            };
            let group = p.group.as_ref().map(|g| format!(" [{g}]")).unwrap_or_default();
            rows.push([
                format!("{}/{}{group}", p.namespace, p.name),
                p.node.clone().unwrap_or_else(|| "<none>".into()),
                if devices.is_empty() {
                    "-".into()
                } else {
                    devices.join(",")
                },
                reason,
            ]);
        }
        let mut out = table(&rows);
        out.push('\n');
        let mut nrows: Vec<[String; 4]> = vec![[
            "NODE".into(),
            "CPU (req/alloc)".into(),
            "MEMORY (req/alloc)".into(),
            "HUGEPAGES (req/alloc)".into(),
        ]];
        for n in &self.nodes {
            let pair = |k: &str| {
                format!(
                    "{}/{}",
                    n.requested.get(k).map_or("0", String::as_str),
                    n.allocatable.get(k).map_or("0", String::as_str)
                )
            };
            let huge: Vec<String> = n
                .allocatable
                .keys()
                .filter(|k| k.starts_with("hugepages-"))
                .map(|k| format!("{k}={}", pair(k)))
                .collect();
            nrows.push([
                n.name.clone(),
                pair("cpu"),
                pair("memory"),
                if huge.is_empty() {
                    "-".into()
                } else {
                    huge.join(" ")
                },
            ]);
        }
        out.push_str(&table(&nrows));
        if !self.pools.is_empty() {
            out.push('\n');
            let mut prows: Vec<[String; 4]> = vec![[
                "DRIVER".into(),
                "POOL".into(),
                "ALLOCATED".into(),
                "DEVICES".into(),
            ]];
            for p in &self.pools {
                prows.push([
                    p.driver.clone(),
                    p.pool.clone(),
                    p.allocated.to_string(),
                    p.devices.to_string(),
                ]);
            }
            out.push_str(&table(&prows));
        }
        if !self.volume_claims.is_empty() {
            out.push('\n');
            let mut vrows: Vec<[String; 4]> = vec![[
                "CLAIM".into(),
                "PHASE".into(),
                "VOLUME".into(),
                "SELECTED NODE".into(),
            ]];
            for c in &self.volume_claims {
                vrows.push([
                    format!("{}/{}", c.namespace, c.name),
                    c.phase.clone(),
                    c.volume.clone().unwrap_or_else(|| "-".into()),
                    c.selected_node.clone().unwrap_or_else(|| "-".into()),
                ]);
            }
            out.push_str(&table(&vrows));
        }
        if let Some(f) = &self.from_cluster {
            out.push_str(&f.to_table());
        }
        if !self.explanations.is_empty() {
            out.push_str("\nEXPLANATIONS\n");
        }
        for e in &self.explanations {
            out.push_str(&e.text);
        }
        out.push_str(&format!(
            "\n{} scheduled, {} unschedulable in {:.2}s\n",
            self.summary.scheduled, self.summary.unschedulable, self.summary.seconds
        ));
        out
    }
}

impl FromCluster {
    /// The table report's section on the copy.
    fn to_table(&self) -> String {
        let copied: Vec<String> = self.copied.iter().map(|(k, n)| format!("{n} {k}")).collect();
        let mut out = format!(
            "\nFROM CLUSTER {} (read only): copied {}\n",
            self.server,
            if copied.is_empty() {
                "nothing".into()
            } else {
                copied.join(", ")
            }
        );
        let list = |v: &[String]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.join(", ")
            }
        };
        out.push_str(&format!(
            "  pending there, decided here: {}\n",
            list(&self.pending)
        ));
        out.push_str(&format!(
            "  pending for other schedulers (not copied): {}\n",
            list(&self.not_ours)
        ));
        for r in &self.rejected {
            out.push_str(&format!("  left out: {r}\n"));
        }
        out
    }
}

fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == N {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

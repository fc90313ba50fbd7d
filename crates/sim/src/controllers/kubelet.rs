//! A fake kubelet serving every node.
//!
//! A pod bound to an existing node (`spec.nodeName` set, phase Pending) is admitted like the kubelet
//! admits it: its requests (`unisched_resource::pod_requests`, node-allocatable DRA claims and
//! in-place resize status included)
//! plus those of the pods already admitted on the node, which have not finished, must fit the node's
//! `status.allocatable`; the pod count must fit `pods`. A pod that does not fit is set `Failed` with
//! reason `OutOf<resource>` and the kubelet's message; one that fits becomes `Running` with
//! `PodReadyToStartContainers`, `Initialized`, `ContainersReady` and `Ready` true, a start time, an IP
//! and running container statuses. With the annotation `sim.unisched.io/run-seconds: "N"` (or the
//! configured default) it completes (`Succeeded`) N seconds after starting.
//!
//! Extended resources that a pod gets through DRA (`status.extendedResourceClaimStatus`) are not
//! checked against node allocatable, as the kubelet skips them.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use unisched_resource::{PodRequestOptions, Resource, ResourceSum, pod_requests};

use super::{Next, is_terminal, next_event, record_event};
use crate::patch::Patch;
use crate::store::{EventType, ObjectRef, Store};
use crate::util::{self, get_path, get_str};

/// Annotation: seconds after which a running pod completes (`Succeeded`).
pub const RUN_SECONDS_ANNOTATION: &str = "sim.unisched.io/run-seconds";

const COMPONENT: &str = "kubelet";

/// Fake kubelet settings.
#[derive(Clone, Debug)]
pub struct KubeletConfig {
    /// Reject pods that do not fit the node's allocatable (default true).
    pub admission: bool,
    /// Seconds after which running pods without the annotation complete (default: never).
    pub default_run_seconds: Option<f64>,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        Self {
            admission: true,
            default_run_seconds: None,
        }
    }
}

struct Admitted {
    node: String,
    requests: Resource,
}

struct Kubelet {
    store: Store,
    config: KubeletConfig,
    /// Admitted, unfinished pods by UID.
    admitted: HashMap<String, Admitted>,
    /// Per node: the UIDs admitted there.
    by_node: HashMap<String, HashSet<String>>,
    /// Completion timers: (deadline, namespace, name, uid).
    timers: BinaryHeap<Reverse<(tokio::time::Instant, String, String, String)>>,
    next_ip: u32,
}

/// Runs until `shutdown` changes.
pub async fn run(store: Store, config: KubeletConfig, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let (Ok(pods), Ok(nodes)) = (store.resolve("pods"), store.resolve("nodes")) else {
        tracing::info!("pods or nodes are not served: the fake kubelet does not run");
        return;
    };
    let mut k = Kubelet {
        store: store.clone(),
        config,
        admitted: HashMap::new(),
        by_node: HashMap::new(),
        timers: BinaryHeap::new(),
        next_ip: 1,
    };
    let mut sub = store.subscribe();
    k.resync();
    loop {
        let next_timer = k.timers.peek().map(|Reverse((t, ..))| *t);
        let next = tokio::select! {
            n = next_event(&mut sub, &mut shutdown) => n,
            _ = async {
                match next_timer {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending::<()>().await,
                }
            } => {
                k.fire_timers();
                continue;
            }
        };
        match next {
            Next::Stop => return,
            Next::Resync => {
                sub = store.subscribe();
                k.resync();
            }
            Next::Event(ev) if ev.kind == pods => match ev.event_type {
                EventType::Deleted => k.forget(ev.object.uid()),
                _ => k.on_pod(&ev.object),
            },
            Next::Event(ev) if ev.kind == nodes && ev.event_type == EventType::Added => {
                // Pods bound before their node existed.
                let name = ev.object.name().to_string();
                for pod in k.store.snapshot(pods, None) {
                    if get_str(pod.value(), &["spec", "nodeName"]) == Some(name.as_str()) {
                        k.on_pod(&pod);
                    }
                }
            }
            Next::Event(_) => {}
        }
    }
}

fn phase(pod: &Value) -> &str {
    get_str(pod, &["status", "phase"]).unwrap_or("Pending")
}

impl Kubelet {
    fn resync(&mut self) {
        self.admitted.clear();
        self.by_node.clear();
        let Ok(pods) = self.store.list_all("pods", None) else {
            return;
        };
        for pod in &pods {
            let node = get_str(pod.value(), &["spec", "nodeName"]).unwrap_or_default();
            if !node.is_empty() && phase(pod.value()) == "Running" {
                let requests = requests_of(pod);
                self.admit(pod.uid(), node, requests);
            }
        }
        for pod in &pods {
            self.on_pod(pod);
        }
    }

    fn admit(&mut self, uid: &str, node: &str, requests: Resource) {
        self.admitted.insert(
            uid.to_string(),
            Admitted {
                node: node.to_string(),
                requests,
            },
        );
        self.by_node
            .entry(node.to_string())
            .or_default()
            .insert(uid.to_string());
    }

    fn forget(&mut self, uid: &str) {
        if let Some(a) = self.admitted.remove(uid)
            && let Some(set) = self.by_node.get_mut(&a.node)
        {
            set.remove(uid);
        }
    }

    fn on_pod(&mut self, pod: &ObjectRef) {
        let v = pod.value();
        if is_terminal(v) {
            self.forget(pod.uid());
            return;
        }
        if let Some(admitted) = self.admitted.get_mut(pod.uid()) {
            // An in-place resize changes what an admitted pod holds.
            admitted.requests = requests_of(pod);
            return;
        }
        let node = get_str(v, &["spec", "nodeName"]).unwrap_or_default().to_string();
        if node.is_empty()
            || phase(v) != "Pending"
            || get_path(v, &["metadata", "deletionTimestamp"]).is_some()
        {
            return;
        }
        let Some(node_obj) = self.store.try_get("nodes", None, &node) else {
            return;
        };
        let requests = requests_of(pod);
        if self.config.admission
            && let Some((reason, message)) = self.check_fit(v, &node, node_obj.value(), &requests)
        {
            self.reject(pod, &reason, &message);
            return;
        }
        self.admit(pod.uid(), &node, requests);
        self.start(pod, node_obj.value());
    }

    /// What the admitted pods of `node` use, summed exactly (a saturating or wrapping `i64` sum
    /// would make a node with huge requests look emptier than it is), and how many there are.
    fn used_on(&self, node: &str) -> (ResourceSum, i64) {
        let mut used = ResourceSum::default();
        let mut count = 0;
        if let Some(set) = self.by_node.get(node) {
            for uid in set {
                if let Some(a) = self.admitted.get(uid) {
                    used.add(&a.requests);
                    count += 1;
                }
            }
        }
        (used, count)
    }

    /// `Some((reason, message))` when the pod does not fit.
    fn check_fit(
        &self,
        pod: &Value,
        node: &str,
        node_obj: &Value,
        req: &Resource,
    ) -> Option<(String, String)> {
        let alloc_list: BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity> =
            get_path(node_obj, &["status", "allocatable"])
                .and_then(|a| serde_json::from_value(a.clone()).ok())
                .unwrap_or_default();
        let (alloc, _) = Resource::from_list(&alloc_list);
        let (used, count) = self.used_on(node);
        let reject = |name: &str, requested: i64, used: i128, capacity: i64| {
            (
                format!("OutOf{name}"),
                format!(
                    "Pod was rejected: Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
                ),
            )
        };
        if alloc_list.contains_key("pods") && count.saturating_add(1) > alloc.allowed_pod_number {
            return Some(reject("pods", 1, i128::from(count), alloc.allowed_pod_number));
        }
        for (name, requested, capacity) in [
            ("cpu", req.milli_cpu, alloc.milli_cpu),
            ("memory", req.memory, alloc.memory),
            (
                "ephemeral-storage",
                req.ephemeral_storage,
                alloc.ephemeral_storage,
            ),
        ] {
            if requested > 0 && !used.fits(name, requested, capacity) {
                return Some(reject(name, requested, used.get(name), capacity));
            }
        }
        let dra_backed: Vec<String> =
            get_path(pod, &["status", "extendedResourceClaimStatus", "requestMappings"])
                .and_then(Value::as_array)
                .map(|m| {
                    m.iter()
                        .filter_map(|x| get_str(x, &["resourceName"]).map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
        for (name, amount) in &req.scalar_resources {
            if *amount <= 0 || dra_backed.contains(name) {
                continue;
            }
            let have = alloc.scalar_resources.get(name).copied().unwrap_or(0);
            if !used.fits(name, *amount, have) {
                return Some(reject(name, *amount, used.get(name), have));
            }
        }
        None
    }

    fn reject(&mut self, pod: &ObjectRef, reason: &str, message: &str) {
        let patch =
            Patch::Strategic(json!({"status": {"phase": "Failed", "reason": reason, "message": message}}));
        match self
            .store
            .patch_status("pods", Some(pod.namespace()), pod.name(), &patch)
        {
            Ok(p) => record_event(&self.store, p.value(), "Warning", reason, message, COMPONENT),
            Err(e) => tracing::debug!(pod = pod.name(), error = %e, "kubelet could not reject a pod"),
        }
    }

    fn pod_ip(&mut self) -> String {
        let n = self.next_ip;
        self.next_ip = self.next_ip.wrapping_add(1);
        format!("10.{}.{}.{}", 244 + (n >> 16) % 12, (n >> 8) & 0xff, n & 0xff)
    }

    fn start(&mut self, pod: &ObjectRef, node: &Value) {
        let v = pod.value();
        let now = util::now_rfc3339();
        let host_ip = get_path(node, &["status", "addresses"])
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|x| get_str(x, &["type"]) == Some("InternalIP")))
            .and_then(|x| get_str(x, &["address"]))
            .unwrap_or("10.0.0.1")
            .to_string();
        let pod_ip = self.pod_ip();
        let running = |c: &Value| {
            let name = get_str(c, &["name"]).unwrap_or_default();
            let image = get_str(c, &["image"]).unwrap_or_default();
            json!({
                "name": name, "image": image, "imageID": format!("sim://{image}"),
                "containerID": format!("sim://{}-{name}", pod.uid()),
                "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            })
        };
        let containers: Vec<Value> = get_path(v, &["spec", "containers"])
            .and_then(Value::as_array)
            .map(|cs| cs.iter().map(running).collect())
            .unwrap_or_default();
        let init: Vec<Value> = get_path(v, &["spec", "initContainers"])
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .map(|c| {
                        if get_str(c, &["restartPolicy"]) == Some("Always") {
                            running(c)
                        } else {
                            let name = get_str(c, &["name"]).unwrap_or_default();
                            let image = get_str(c, &["image"]).unwrap_or_default();
                            json!({
                                "name": name, "image": image, "imageID": format!("sim://{image}"),
                                "containerID": format!("sim://{}-{name}", pod.uid()),
                                "ready": true, "started": false, "restartCount": 0,
                                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}},
                            })
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        // The status as stored now, not as the event that woke the kubelet showed it: whoever
        // created the pod may have written its status since.
        let current = self.store.get("pods", Some(pod.namespace()), pod.name()).ok();
        let stored = current.as_ref().map_or(v, |p| p.value());
        let containers = keep_resize_status(stored, "containerStatuses", containers);
        let init = keep_resize_status(stored, "initContainerStatuses", init);
        let cond =
            |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
        let mut status = json!({
            "phase": "Running",
            "startTime": now,
            "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
            "conditions": [cond("PodReadyToStartContainers"), cond("Initialized"), cond("ContainersReady"), cond("Ready")],
            "containerStatuses": containers,
        });
        if !init.is_empty() {
            status["initContainerStatuses"] = json!(init);
        }
        match self.store.patch_status(
            "pods",
            Some(pod.namespace()),
            pod.name(),
            &Patch::Strategic(json!({"status": status})),
        ) {
            Ok(_) => {
                let secs = get_str(v, &["metadata", "annotations", RUN_SECONDS_ANNOTATION])
                    .and_then(|s| s.trim().parse::<f64>().ok())
                    .or(self.config.default_run_seconds);
                if let Some(s) = secs.filter(|s| s.is_finite() && *s >= 0.0) {
                    let at = tokio::time::Instant::now() + Duration::from_secs_f64(s.min(1e9));
                    self.timers.push(Reverse((
                        at,
                        pod.namespace().to_string(),
                        pod.name().to_string(),
                        pod.uid().to_string(),
                    )));
                }
            }
            Err(e) => {
                tracing::debug!(pod = pod.name(), error = %e, "kubelet could not start a pod");
                self.forget(pod.uid());
            }
        }
    }

    fn fire_timers(&mut self) {
        let now = tokio::time::Instant::now();
        while let Some(Reverse((at, ..))) = self.timers.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((_, ns, name, uid))) = self.timers.pop() else {
                break;
            };
            self.complete(&ns, &name, &uid);
        }
    }

    fn complete(&mut self, ns: &str, name: &str, uid: &str) {
        let Some(pod) = self.store.try_get("pods", Some(ns), name) else {
            return;
        };
        if pod.uid() != uid || phase(pod.value()) != "Running" {
            return;
        }
        let now = util::now_rfc3339();
        let terminated = |c: &Value| {
            let n = get_str(c, &["name"]).unwrap_or_default();
            let image = get_str(c, &["image"]).unwrap_or_default();
            let started = get_path(c, &["state", "running", "startedAt"])
                .cloned()
                .unwrap_or(json!(now));
            json!({
                "name": n, "image": image, "imageID": format!("sim://{image}"),
                "containerID": get_str(c, &["containerID"]).unwrap_or_default(),
                "ready": false, "started": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": now}},
            })
        };
        let statuses: Vec<Value> = get_path(pod.value(), &["status", "containerStatuses"])
            .and_then(Value::as_array)
            .map(|cs| cs.iter().map(terminated).collect())
            .unwrap_or_default();
        let cond = |t: &str| json!({"type": t, "status": "False", "reason": "PodCompleted", "lastProbeTime": null, "lastTransitionTime": now});
        let patch = Patch::Strategic(json!({"status": {
            "phase": "Succeeded",
            "conditions": [cond("Ready"), cond("ContainersReady"),
                {"type": "PodReadyToStartContainers", "status": "False", "lastProbeTime": null, "lastTransitionTime": now}],
            "containerStatuses": statuses,
        }}));
        match self.store.patch_status("pods", Some(ns), name, &patch) {
            Ok(_) => self.forget(uid),
            Err(e) => tracing::debug!(pod = name, error = %e, "kubelet could not complete a pod"),
        }
    }
}

/// The container statuses the kubelet reports when it starts the pod, with the in-place resize
/// fields (`allocatedResources`, `resources`) an existing status of the same container already
/// reports: a scenario may create a bound pod in the middle of a resize, and the kubelet's fresh
/// statuses must not erase what it says was allocated and actuated.
fn keep_resize_status(pod: &Value, list: &str, mut statuses: Vec<Value>) -> Vec<Value> {
    let Some(existing) = get_path(pod, &["status", list]).and_then(Value::as_array) else {
        return statuses;
    };
    for status in &mut statuses {
        let name = get_str(status, &["name"]).unwrap_or_default().to_string();
        let Some(old) = existing
            .iter()
            .find(|s| get_str(s, &["name"]) == Some(name.as_str()))
        else {
            continue;
        };
        for field in ["allocatedResources", "resources"] {
            if let Some(value) = old.get(field) {
                status[field] = value.clone();
            }
        }
    }
    statuses
}

fn requests_of(pod: &ObjectRef) -> Resource {
    match pod.decode::<Pod>() {
        Ok(p) => pod_requests(
            &p,
            // As the kubelet admits: a pod in the middle of an in-place resize holds the larger
            // of its spec and what was allocated to it (the scheduler's own rule).
            &PodRequestOptions {
                include_node_allocatable_claims: true,
                use_status_resources: true,
                pod_level_status_resources: true,
                ..PodRequestOptions::default()
            },
        ),
        Err(e) => {
            tracing::debug!(pod = pod.name(), error = %e, "kubelet could not decode a pod");
            Resource::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::keep_resize_status;

    #[test]
    fn a_started_pod_keeps_what_its_status_says_was_allocated_and_actuated() {
        let pod = json!({"status": {"containerStatuses": [
            {"name": "app", "allocatedResources": {"cpu": "3"}, "resources": {"requests": {"cpu": "3"}}},
            {"name": "gone", "allocatedResources": {"cpu": "9"}},
        ]}});
        let fresh = vec![
            json!({"name": "app", "ready": true}),
            json!({"name": "new", "ready": true}),
        ];
        let kept = keep_resize_status(&pod, "containerStatuses", fresh.clone());
        assert_eq!(
            kept,
            vec![
                json!({"name": "app", "ready": true, "allocatedResources": {"cpu": "3"},
                       "resources": {"requests": {"cpu": "3"}}}),
                json!({"name": "new", "ready": true}),
            ]
        );
        // No earlier statuses: the kubelet's own are reported as they are.
        assert_eq!(
            keep_resize_status(&json!({}), "containerStatuses", fresh.clone()),
            fresh
        );
    }
}

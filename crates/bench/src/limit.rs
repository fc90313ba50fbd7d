//! The harness limit: a trivial "bind-only" scheduler that shows how fast pods can be placed through
//! the same API server, client and [`ApiWriter`] when deciding costs (almost) nothing.
//!
//! It watches pods, nodes, ResourceSlices and ResourceClaims with kube-runtime watchers over HTTP,
//! like the real runtime, and binds each pending pod (`schedulerName` matching) to the next node
//! with room, searching from where the previous pod went ("next fit"): room means the pod count,
//! CPU and memory of `spec` requests, and enough unused devices for the pod's unallocated claims.
//! No plugins, no scores, no selectors, no counters or capacities: a claim gets the first unused
//! devices of the node, written as the claim's status (allocation and `reservedFor`, one write per
//! claim, like the real scheduler's PreBind), then the pod is bound (one POST). Bindings run
//! concurrently, unlimited by QPS, as the real scheduler's binding cycles do.
//!
//! Extended resources backed by DRA and node-allocatable DRA resources are not accounted; the
//! real scheduler does more writes for those (it creates the special claim), so the limit is an
//! upper bound on what the API path allows, not a reimplementation of scheduling.

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use futures::StreamExt;
use k8s_openapi::api::{
    core::v1::{Node, Pod},
    resource::v1::{ResourceClaim, ResourceSlice},
};
use kube::{
    Api, Client,
    api::Patch,
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use tokio::sync::mpsc;
use unisched_resource::{PodRequestOptions, Resource, pod_requests};
use unisched_runtime::{ApiWriter, LeaderFlag, Metrics, patch_for_metadata};

use crate::BenchError;

enum Ev {
    Pod(Box<Pod>),
    PodGone(Box<Pod>),
    Node(Box<Node>),
    NodeGone(String),
    Slice(Box<ResourceSlice>),
    SliceGone(String),
    Claim(Box<ResourceClaim>),
    ClaimGone(Box<ResourceClaim>),
    BindFailed(String, Vec<String>),
    Synced,
}

/// A running bind-only scheduler.
pub struct LimitScheduler {
    metrics: Metrics,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    synced: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
}

impl std::fmt::Debug for LimitScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitScheduler").finish_non_exhaustive()
    }
}

const WATCHES: u64 = 4;

impl LimitScheduler {
    /// Starts watching and binding pods with `spec.schedulerName == scheduler_name`. Call inside
    /// the tokio runtime that should run it.
    pub fn start(client: Client, scheduler_name: &str) -> Result<Self, BenchError> {
        let metrics = Metrics::new().map_err(|e| BenchError::Setup(e.to_string()))?;
        let writer = ApiWriter::new(client.clone(), -1.0, 0, metrics.clone(), LeaderFlag::new(true));
        let (tx, rx) = mpsc::unbounded_channel();
        let synced = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(AtomicU64::new(0));
        let mut tasks = vec![
            tokio::spawn(forward(
                Api::<Pod>::all(client.clone()),
                tx.clone(),
                |p| Ev::Pod(Box::new(p)),
                |p| Ev::PodGone(Box::new(p)),
            )),
            tokio::spawn(forward(
                Api::<Node>::all(client.clone()),
                tx.clone(),
                |n| Ev::Node(Box::new(n)),
                |n| Ev::NodeGone(n.metadata.name.unwrap_or_default()),
            )),
            tokio::spawn(forward(
                Api::<ResourceSlice>::all(client.clone()),
                tx.clone(),
                |s| Ev::Slice(Box::new(s)),
                |s| Ev::SliceGone(s.metadata.name.unwrap_or_default()),
            )),
            tokio::spawn(forward(
                Api::<ResourceClaim>::all(client.clone()),
                tx.clone(),
                |c| Ev::Claim(Box::new(c)),
                |c| Ev::ClaimGone(Box::new(c)),
            )),
        ];
        let state = State {
            scheduler_name: scheduler_name.to_string(),
            writer: Some(writer),
            tx: Some(tx),
            synced: synced.clone(),
            failures: failures.clone(),
            ..State::default()
        };
        tasks.push(tokio::spawn(state.run(rx)));
        Ok(LimitScheduler {
            metrics,
            tasks,
            synced,
            failures,
        })
    }

    /// The writer's metrics (`unisched_api_writes_total`).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Whether every watch has listed once.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst) >= WATCHES
    }

    /// Writes that failed (claim status or binding).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::SeqCst)
    }

    /// Stops every task.
    pub fn stop(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for LimitScheduler {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn forward<K>(api: Api<K>, tx: mpsc::UnboundedSender<Ev>, apply: fn(K) -> Ev, delete: fn(K) -> Ev)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
    let mut first = true;
    while let Some(ev) = stream.next().await {
        let out = match ev {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => apply(o),
            Ok(watcher::Event::Delete(o)) => delete(o),
            Ok(watcher::Event::InitDone) if first => {
                first = false;
                Ev::Synced
            }
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "limit scheduler watch error");
                continue;
            }
        };
        if tx.send(out).is_err() {
            return;
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Dev {
    driver: String,
    pool: String,
    name: String,
    multi: bool,
    used: u32,
}

#[derive(Debug, Default)]
struct Slot {
    name: String,
    alloc: Resource,
    used: Resource,
    pods: i64,
    /// Devices by (driver, pool, device).
    devices: BTreeMap<(String, String, String), Dev>,
}

impl Slot {
    fn free_devices(&self) -> usize {
        self.devices.values().filter(|d| d.multi || d.used == 0).count()
    }
}

#[derive(Debug)]
struct Placed {
    node: String,
    req: Resource,
}

#[derive(Default)]
struct State {
    scheduler_name: String,
    writer: Option<ApiWriter>,
    tx: Option<mpsc::UnboundedSender<Ev>>,
    synced: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
    nodes: Vec<Slot>,
    index: HashMap<String, usize>,
    /// Usage of nodes not seen yet (pods bound before their node arrived on the watch).
    early: HashMap<String, (Resource, i64)>,
    /// Slice name → (node, device keys).
    slices: HashMap<String, (String, Vec<(String, String, String)>)>,
    /// Devices of slices whose node was not seen yet.
    early_devices: HashMap<String, Vec<Dev>>,
    /// Bound or in-flight pods by UID.
    placed: HashMap<String, Placed>,
    /// Unbound pods of ours by UID (latest object).
    unbound: HashMap<String, Box<Pod>>,
    /// To try next.
    pending: VecDeque<String>,
    /// Waiting for their claims to exist.
    waiting: HashSet<String>,
    /// No node had room; retried when room is freed.
    unfit: VecDeque<String>,
    claims: HashMap<(String, String), ResourceClaim>,
    /// Claim UID → (node, device keys) it holds.
    claim_devices: HashMap<String, (String, Vec<(String, String, String)>)>,
    cursor: usize,
    capacity_changed: bool,
}

enum Fit {
    Ready { node: usize, claims: Vec<ClaimPlan> },
    NotReady,
    NoRoom,
}

struct ClaimPlan {
    namespace: String,
    name: String,
    /// (request name, device key).
    results: Vec<(String, (String, String, String))>,
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Request names and device counts of a claim.
fn claim_requests(claim: &ResourceClaim) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for r in claim
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.requests.as_ref())
        .into_iter()
        .flatten()
    {
        if let Some(e) = &r.exactly {
            let n = e.count.unwrap_or(1).max(1);
            out.push((r.name.clone(), usize::try_from(n).unwrap_or(1)));
        } else if let Some(sub) = r.first_available.as_ref().and_then(|s| s.first()) {
            let n = sub.count.unwrap_or(1).max(1);
            out.push((
                format!("{}/{}", r.name, sub.name),
                usize::try_from(n).unwrap_or(1),
            ));
        }
    }
    out
}

impl State {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Ev>) {
        while let Some(ev) = rx.recv().await {
            self.apply(ev);
            while let Ok(ev) = rx.try_recv() {
                self.apply(ev);
            }
            if self.synced.load(Ordering::SeqCst) >= WATCHES {
                self.schedule();
            }
        }
    }

    fn usage(&mut self, node: &str, req: &Resource, pods: i64, add: bool) {
        let (used, count) = match self.index.get(node) {
            Some(&i) => {
                let s = &mut self.nodes[i];
                (&mut s.used, &mut s.pods)
            }
            None => {
                let e = self.early.entry(node.to_string()).or_default();
                (&mut e.0, &mut e.1)
            }
        };
        if add {
            used.add(req);
            *count += pods;
        } else {
            used.sub(req);
            *count -= pods;
            self.capacity_changed = true;
        }
    }

    fn mark_devices(&mut self, node: &str, keys: &[(String, String, String)], delta: i64) {
        if let Some(&i) = self.index.get(node) {
            for k in keys {
                if let Some(d) = self.nodes[i].devices.get_mut(k) {
                    d.used = u32::try_from(i64::from(d.used) + delta).unwrap_or(0);
                }
            }
        }
        if delta < 0 {
            self.capacity_changed = true;
        }
    }

    fn apply(&mut self, ev: Ev) {
        match ev {
            Ev::Synced => {
                self.synced.fetch_add(1, Ordering::SeqCst);
            }
            Ev::Node(n) => {
                let name = n.metadata.name.clone().unwrap_or_default();
                let alloc = n
                    .status
                    .as_ref()
                    .and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()))
                    .map(Resource::from_list_lossy)
                    .unwrap_or_default();
                match self.index.get(&name) {
                    Some(&i) => self.nodes[i].alloc = alloc,
                    None => {
                        let mut slot = Slot {
                            name: name.clone(),
                            alloc,
                            ..Slot::default()
                        };
                        if let Some((used, pods)) = self.early.remove(&name) {
                            slot.used = used;
                            slot.pods = pods;
                        }
                        for d in self.early_devices.remove(&name).unwrap_or_default() {
                            slot.devices
                                .insert((d.driver.clone(), d.pool.clone(), d.name.clone()), d);
                        }
                        self.index.insert(name, self.nodes.len());
                        self.nodes.push(slot);
                    }
                }
                self.capacity_changed = true;
            }
            Ev::NodeGone(name) => {
                // Keep the slot (indexes stay valid) but give it no room.
                if let Some(&i) = self.index.get(&name) {
                    self.nodes[i].alloc = Resource::default();
                }
            }
            Ev::Slice(s) => self.apply_slice(&s),
            Ev::SliceGone(name) => {
                if let Some((node, keys)) = self.slices.remove(&name)
                    && let Some(&i) = self.index.get(&node)
                {
                    for k in keys {
                        self.nodes[i].devices.remove(&k);
                    }
                }
            }
            Ev::Claim(c) => self.apply_claim(*c),
            Ev::ClaimGone(c) => {
                let key = (
                    c.metadata.namespace.clone().unwrap_or_default(),
                    c.metadata.name.clone().unwrap_or_default(),
                );
                self.claims.remove(&key);
                if let Some((node, keys)) = self
                    .claim_devices
                    .remove(&c.metadata.uid.clone().unwrap_or_default())
                {
                    self.mark_devices(&node, &keys, -1);
                }
            }
            Ev::Pod(p) => self.apply_pod(p),
            Ev::PodGone(p) => {
                let uid = uid_of(&p);
                self.unbound.remove(&uid);
                self.waiting.remove(&uid);
                if let Some(pl) = self.placed.remove(&uid) {
                    self.usage(&pl.node, &pl.req, 1, false);
                }
            }
            Ev::BindFailed(uid, claims) => {
                self.failures.fetch_add(1, Ordering::SeqCst);
                if let Some(pl) = self.placed.remove(&uid) {
                    self.usage(&pl.node, &pl.req, 1, false);
                }
                for c in claims {
                    if let Some((node, keys)) = self.claim_devices.remove(&c) {
                        self.mark_devices(&node, &keys, -1);
                    }
                }
            }
        }
    }

    fn apply_slice(&mut self, s: &ResourceSlice) {
        let name = s.metadata.name.clone().unwrap_or_default();
        let Some(node) = s.spec.node_name.clone() else {
            return;
        };
        let devs: Vec<Dev> = s
            .spec
            .devices
            .iter()
            .flatten()
            .map(|d| Dev {
                driver: s.spec.driver.clone(),
                pool: s.spec.pool.name.clone(),
                name: d.name.clone(),
                multi: d.allow_multiple_allocations.unwrap_or(false),
                used: 0,
            })
            .collect();
        let keys: Vec<_> = devs
            .iter()
            .map(|d| (d.driver.clone(), d.pool.clone(), d.name.clone()))
            .collect();
        match self.index.get(&node) {
            Some(&i) => {
                for d in devs {
                    let k = (d.driver.clone(), d.pool.clone(), d.name.clone());
                    self.nodes[i].devices.entry(k).or_insert(d);
                }
            }
            None => self.early_devices.entry(node.clone()).or_default().extend(devs),
        }
        self.slices.insert(name, (node, keys));
        self.capacity_changed = true;
    }

    fn apply_claim(&mut self, c: ResourceClaim) {
        let uid = c.metadata.uid.clone().unwrap_or_default();
        let allocation = c.status.as_ref().and_then(|s| s.allocation.as_ref());
        match (allocation, self.claim_devices.contains_key(&uid)) {
            (Some(a), false) => {
                // Allocated by someone else (pre-allocated claims): its devices are taken.
                let node = a
                    .node_selector
                    .as_ref()
                    .and_then(|s| s.node_selector_terms.first())
                    .and_then(|t| t.match_fields.as_ref())
                    .and_then(|f| f.first())
                    .and_then(|r| r.values.as_ref())
                    .and_then(|v| v.first())
                    .cloned()
                    .or_else(|| {
                        a.devices
                            .as_ref()
                            .and_then(|d| d.results.as_ref())
                            .and_then(|r| r.first())
                            .map(|r| r.pool.clone())
                    })
                    .unwrap_or_default();
                let keys: Vec<_> = a
                    .devices
                    .as_ref()
                    .and_then(|d| d.results.as_ref())
                    .into_iter()
                    .flatten()
                    .map(|r| (r.driver.clone(), r.pool.clone(), r.device.clone()))
                    .collect();
                self.mark_devices(&node, &keys, 1);
                self.claim_devices.insert(uid, (node, keys));
            }
            (None, true) => {
                if let Some((node, keys)) = self.claim_devices.remove(&uid) {
                    self.mark_devices(&node, &keys, -1);
                }
            }
            _ => {}
        }
        // The owning pod may have been waiting for this claim.
        for o in c.metadata.owner_references.iter().flatten() {
            if o.kind == "Pod" && self.waiting.remove(&o.uid) {
                self.pending.push_back(o.uid.clone());
            }
        }
        let key = (
            c.metadata.namespace.clone().unwrap_or_default(),
            c.metadata.name.clone().unwrap_or_default(),
        );
        self.claims.insert(key, c);
    }

    fn apply_pod(&mut self, p: Box<Pod>) {
        let uid = uid_of(&p);
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        if is_terminal(&p) {
            self.unbound.remove(&uid);
            self.waiting.remove(&uid);
            if let Some(pl) = self.placed.remove(&uid) {
                self.usage(&pl.node, &pl.req, 1, false);
            }
            return;
        }
        match node {
            Some(node) => {
                self.unbound.remove(&uid);
                self.waiting.remove(&uid);
                if !self.placed.contains_key(&uid) {
                    let req = pod_requests(&p, &PodRequestOptions::default());
                    self.usage(&node, &req, 1, true);
                    self.placed.insert(uid, Placed { node, req });
                }
            }
            None => {
                let ours =
                    p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(&self.scheduler_name);
                if !ours || self.placed.contains_key(&uid) {
                    return;
                }
                let known = self.unbound.insert(uid.clone(), p).is_some();
                if !known || self.waiting.remove(&uid) {
                    self.pending.push_back(uid);
                }
            }
        }
    }

    fn schedule(&mut self) {
        if std::mem::take(&mut self.capacity_changed) {
            let mut unfit = std::mem::take(&mut self.unfit);
            unfit.append(&mut self.pending);
            self.pending = unfit;
        }
        while let Some(uid) = self.pending.pop_front() {
            let Some(p) = self.unbound.remove(&uid) else {
                continue;
            };
            match self.fit(&p) {
                Fit::Ready { node, claims } => self.bind(p, node, claims),
                Fit::NotReady => {
                    self.waiting.insert(uid.clone());
                    self.unbound.insert(uid, p);
                }
                Fit::NoRoom => {
                    self.unfit.push_back(uid.clone());
                    self.unbound.insert(uid, p);
                }
            }
        }
    }

    fn fit(&mut self, p: &Pod) -> Fit {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let statuses = p
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.clone())
            .unwrap_or_default();
        let mut wanted: Vec<(String, Vec<(String, usize)>)> = Vec::new();
        for rc in p
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_ref())
            .into_iter()
            .flatten()
        {
            let name = match (&rc.resource_claim_name, &rc.resource_claim_template_name) {
                (Some(n), _) => Some(n.clone()),
                (None, Some(_)) => statuses
                    .iter()
                    .find(|s| s.name == rc.name)
                    .and_then(|s| s.resource_claim_name.clone()),
                (None, None) => continue,
            };
            let Some(name) = name else {
                return Fit::NotReady;
            };
            let Some(claim) = self.claims.get(&(ns.clone(), name.clone())) else {
                return Fit::NotReady;
            };
            if claim
                .status
                .as_ref()
                .and_then(|s| s.allocation.as_ref())
                .is_none()
            {
                wanted.push((name, claim_requests(claim)));
            }
        }
        let needed: usize = wanted.iter().flat_map(|(_, r)| r.iter().map(|x| x.1)).sum();
        let req = pod_requests(p, &PodRequestOptions::default());
        let n = self.nodes.len();
        for k in 0..n {
            let i = (self.cursor + k) % n;
            let s = &self.nodes[i];
            let fits = s.pods < s.alloc.allowed_pod_number
                && s.used.milli_cpu + req.milli_cpu <= s.alloc.milli_cpu
                && s.used.memory + req.memory <= s.alloc.memory
                && (needed == 0 || s.free_devices() >= needed);
            if !fits {
                continue;
            }
            self.cursor = i;
            let mut claims = Vec::new();
            let slot = &mut self.nodes[i];
            for (name, requests) in wanted {
                let mut results = Vec::new();
                for (request, count) in requests {
                    for _ in 0..count {
                        if let Some((key, d)) = slot.devices.iter_mut().find(|(_, d)| d.multi || d.used == 0)
                        {
                            d.used += 1;
                            results.push((request.clone(), key.clone()));
                        }
                    }
                }
                claims.push(ClaimPlan {
                    namespace: ns.clone(),
                    name,
                    results,
                });
            }
            return Fit::Ready { node: i, claims };
        }
        Fit::NoRoom
    }

    fn bind(&mut self, p: Box<Pod>, node: usize, claims: Vec<ClaimPlan>) {
        let uid = uid_of(&p);
        let node_name = self.nodes[node].name.clone();
        let req = pod_requests(&p, &PodRequestOptions::default());
        self.usage(&node_name, &req, 1, true);
        self.placed.insert(
            uid.clone(),
            Placed {
                node: node_name.clone(),
                req,
            },
        );
        for c in &claims {
            if let Some(claim) = self.claims.get(&(c.namespace.clone(), c.name.clone())) {
                let cuid = claim.metadata.uid.clone().unwrap_or_default();
                let keys = c.results.iter().map(|r| r.1.clone()).collect();
                self.claim_devices.insert(cuid, (node_name.clone(), keys));
            }
        }
        let (Some(writer), Some(tx)) = (self.writer.clone(), self.tx.clone()) else {
            return;
        };
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        let claim_uids: Vec<String> = claims
            .iter()
            .filter_map(|c| self.claims.get(&(c.namespace.clone(), c.name.clone())))
            .filter_map(|c| c.metadata.uid.clone())
            .collect();
        tokio::spawn(async move {
            for c in claims {
                let results: Vec<_> = c
                    .results
                    .iter()
                    .map(|(request, (driver, pool, device))| {
                        json!({"request": request, "driver": driver, "pool": pool, "device": device})
                    })
                    .collect();
                let patch = Patch::Merge(json!({"status": {
                    "allocation": {
                        "devices": {"results": results},
                        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]},
                    },
                    "reservedFor": [{"resource": "pods", "name": name, "uid": uid}],
                }}));
                // Answered with metadata only, as the scheduler's own claim writes are.
                let written = writer
                    .write("patch", "resourceclaims/status", || {
                        patch_for_metadata::<ResourceClaim>(
                            writer.client(),
                            Some(&c.namespace),
                            &c.name,
                            Some("status"),
                            &patch,
                        )
                    })
                    .await;
                if let Err(e) = written {
                    tracing::debug!(claim = %c.name, error = %e, "limit scheduler: claim status");
                    let _ = tx.send(Ev::BindFailed(uid, claim_uids));
                    return;
                }
            }
            if let Err(e) = writer.bind(&ns, &name, &uid, &node_name).await {
                tracing::debug!(pod = %name, error = %e, "limit scheduler: binding");
                let _ = tx.send(Ev::BindFailed(uid, claim_uids));
            }
        });
    }
}

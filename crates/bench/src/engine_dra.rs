//! DRA for engine mode: what the API server, the ResourceClaim controller and the garbage
//! collector do for DRA objects, in memory.
//!
//! Objects reach the [`DraCache`] and the queue through the runtime's own [`DraHandler`]s (the
//! code the watches feed), so queue events and hints are the real ones. The DynamicResources
//! plugin writes through [`MemDraApi`], which applies each write to its claim map, echoes the
//! result to the claim handler as the watch would, and counts it in the writer's metric
//! (`unisched_api_writes_total`), so engine mode reports the writes the API path would make.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
};

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use parking_lot::Mutex;
use serde_json::{Value, json};
use unisched_cache::DraCache;
use unisched_plugins::{DraApi, DraApiError};
use unisched_queue::SchedulingQueue;
use unisched_runtime::{DELETE_PROTECTION_FINALIZER, DraHandler, Handler, Metrics};

use crate::BenchError;

type Key = (String, String);

/// The claims "API server" of engine mode.
pub(crate) struct MemDraApi {
    claims: Mutex<BTreeMap<Key, ResourceClaim>>,
    /// Pod UID → claims it owns (generated and extended-resource claims).
    owned: Mutex<HashMap<String, Vec<Key>>>,
    rv: AtomicU64,
    seq: AtomicU64,
    handler: OnceLock<Arc<DraHandler<ResourceClaim>>>,
    metrics: Metrics,
}

fn key_of(c: &ResourceClaim) -> Key {
    (
        c.metadata.namespace.clone().unwrap_or_default(),
        c.metadata.name.clone().unwrap_or_default(),
    )
}

impl MemDraApi {
    pub(crate) fn new(metrics: Metrics) -> Self {
        MemDraApi {
            claims: Mutex::new(BTreeMap::new()),
            owned: Mutex::new(HashMap::new()),
            rv: AtomicU64::new(1),
            seq: AtomicU64::new(0),
            handler: OnceLock::new(),
            metrics,
        }
    }

    /// Connects the claim handler (after the queue exists).
    pub(crate) fn connect(&self, handler: Arc<DraHandler<ResourceClaim>>) {
        let _ = self.handler.set(handler);
    }

    fn count(&self, verb: &str, resource: &str) {
        self.metrics
            .api_writes
            .with_label_values(&[verb, resource, "2xx"])
            .inc();
    }

    /// Stores a claim (new resourceVersion; generated name and UID when missing) and echoes it to
    /// the cache and queue.
    pub(crate) fn store(&self, mut c: ResourceClaim) -> ResourceClaim {
        let rv = self.rv.fetch_add(1, Ordering::SeqCst) + 1;
        if c.metadata.name.as_deref().is_none_or(str::is_empty) {
            let n = self.seq.fetch_add(1, Ordering::SeqCst);
            let base = c
                .metadata
                .generate_name
                .clone()
                .unwrap_or_else(|| "claim-".into());
            c.metadata.name = Some(format!("{base}{n}"));
        }
        if c.metadata.uid.as_deref().is_none_or(str::is_empty) {
            let n = self.seq.fetch_add(1, Ordering::SeqCst);
            c.metadata.uid = Some(format!("claim-uid-{n}"));
        }
        c.metadata.resource_version = Some(rv.to_string());
        let key = key_of(&c);
        for o in c.metadata.owner_references.iter().flatten() {
            if o.kind == "Pod" {
                let mut owned = self.owned.lock();
                let list = owned.entry(o.uid.clone()).or_default();
                if !list.contains(&key) {
                    list.push(key.clone());
                }
            }
        }
        self.claims.lock().insert(key, c.clone());
        if let Some(h) = self.handler.get() {
            h.apply(c.clone());
        }
        c
    }

    fn remove(&self, key: &Key) {
        if self.claims.lock().remove(key).is_some()
            && let Some(h) = self.handler.get()
        {
            h.delete(&format!("{}/{}", key.0, key.1));
        }
    }

    /// The garbage collector: deletes the claims a deleted pod owned.
    pub(crate) fn pod_deleted(&self, pod_uid: &str) {
        let keys = self.owned.lock().remove(pod_uid).unwrap_or_default();
        for k in keys {
            self.remove(&k);
        }
    }

    /// Every claim as JSON (for `allocResourceClaims`).
    pub(crate) fn values(&self) -> Vec<Value> {
        self.claims
            .lock()
            .values()
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect()
    }

    /// Sets a claim's allocation outside the scheduler (no write counted).
    pub(crate) fn set_allocation(&self, ns: &str, name: &str, allocation: &Value) -> Result<(), BenchError> {
        let current = self
            .claims
            .lock()
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| BenchError::Workload(format!("no claim {ns}/{name}")))?;
        let c = merged(&current, &json!({"status": {"allocation": allocation}}))
            .map_err(|e| BenchError::Workload(e.to_string()))?;
        self.store(c);
        Ok(())
    }

    fn current(&self, ns: &str, name: &str, rv: &str) -> Result<ResourceClaim, DraApiError> {
        let c = self
            .claims
            .lock()
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| DraApiError::NotFound(format!("{ns}/{name}")))?;
        if c.metadata.resource_version.as_deref() != Some(rv) {
            return Err(DraApiError::Conflict(format!(
                "{ns}/{name}: resourceVersion {rv} is stale"
            )));
        }
        Ok(c)
    }

    fn finalizer(&self, ns: &str, name: &str, rv: &str, add: bool) -> Result<ResourceClaim, DraApiError> {
        let mut c = self.current(ns, name, rv)?;
        let mut list = c.metadata.finalizers.take().unwrap_or_default();
        list.retain(|f| f != DELETE_PROTECTION_FINALIZER);
        if add {
            list.push(DELETE_PROTECTION_FINALIZER.to_string());
        }
        c.metadata.finalizers = Some(list);
        self.count("patch", "resourceclaims");
        Ok(self.store(c))
    }
}

/// `claim` with a JSON merge patch applied.
fn merged(claim: &ResourceClaim, patch: &Value) -> Result<ResourceClaim, DraApiError> {
    let mut v = serde_json::to_value(claim).map_err(|e| DraApiError::Other(e.to_string()))?;
    unisched_sim::patch::merge_patch(&mut v, patch);
    serde_json::from_value(v).map_err(|e| DraApiError::Other(format!("invalid claim after patch: {e}")))
}

impl DraApi for MemDraApi {
    fn get_claim(&self, namespace: &str, name: &str) -> Result<Option<ResourceClaim>, DraApiError> {
        Ok(self
            .claims
            .lock()
            .get(&(namespace.to_string(), name.to_string()))
            .cloned())
    }

    fn patch_claim_status(
        &self,
        namespace: &str,
        name: &str,
        known: &ResourceClaim,
        status: Value,
    ) -> Result<ResourceClaim, DraApiError> {
        let current = self.current(namespace, name, rv_of(known))?;
        let c = merged(&current, &json!({"status": status}))?;
        self.count("patch", "resourceclaims/status");
        Ok(self.store(c))
    }

    fn add_claim_finalizer(
        &self,
        ns: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> Result<ResourceClaim, DraApiError> {
        self.finalizer(ns, name, rv_of(current), true)
    }

    fn remove_claim_finalizer(
        &self,
        ns: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> Result<ResourceClaim, DraApiError> {
        self.finalizer(ns, name, rv_of(current), false)
    }

    fn create_claim(&self, namespace: &str, claim: &ResourceClaim) -> Result<ResourceClaim, DraApiError> {
        let mut c = claim.clone();
        c.metadata.namespace = Some(namespace.to_string());
        c.metadata.uid = None;
        self.count("create", "resourceclaims");
        Ok(self.store(c))
    }

    fn delete_claim(&self, namespace: &str, name: &str, uid: &str) -> Result<(), DraApiError> {
        let key = (namespace.to_string(), name.to_string());
        let matches = self
            .claims
            .lock()
            .get(&key)
            .is_some_and(|c| c.metadata.uid.as_deref() == Some(uid));
        if matches {
            self.count("delete", "resourceclaims");
            self.remove(&key);
        }
        Ok(())
    }

    fn patch_pod_status(&self, _namespace: &str, _name: &str, _patch: Value) -> Result<(), DraApiError> {
        // The assumed pod already carries what this writes; nothing reads it back in engine mode.
        self.count("patch", "pods/status");
        Ok(())
    }
}

/// Slices, classes, templates and the ResourceClaim controller of engine mode.
pub(crate) struct EngineDra {
    pub api: Arc<MemDraApi>,
    slices: Arc<DraHandler<ResourceSlice>>,
    classes: Arc<DraHandler<DeviceClass>>,
    /// Slices as JSON (for `allocResourceClaims`).
    slice_values: Vec<Value>,
    /// ResourceClaimTemplates by (namespace, name).
    templates: HashMap<Key, Value>,
}

impl EngineDra {
    /// Handlers over `dra` and `queue`; `api` gets its claim handler.
    pub(crate) fn new(api: Arc<MemDraApi>, dra: Arc<DraCache>, queue: &Arc<SchedulingQueue>) -> Self {
        api.connect(Arc::new(DraHandler::new(dra.clone(), queue.clone())));
        EngineDra {
            slices: Arc::new(DraHandler::new(dra.clone(), queue.clone())),
            classes: Arc::new(DraHandler::new(dra.clone(), queue.clone())),
            api,
            slice_values: Vec::new(),
            templates: HashMap::new(),
        }
    }

    /// Creates a DRA object (false: not a DRA kind).
    pub(crate) fn create(&mut self, v: Value, namespace: Option<&str>) -> Result<bool, BenchError> {
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        let bad = |e: serde_json::Error| BenchError::Workload(format!("{kind}: {e}"));
        match kind.as_str() {
            "ResourceSlice" => {
                let s: ResourceSlice = serde_json::from_value(v.clone()).map_err(bad)?;
                self.slices.apply(s);
                self.slice_values.push(v);
            }
            "DeviceClass" => {
                let c: DeviceClass = serde_json::from_value(v).map_err(bad)?;
                self.classes.apply(c);
            }
            "ResourceClaimTemplate" => {
                let ns = namespace.unwrap_or("default").to_string();
                let name = v["metadata"]["name"].as_str().unwrap_or_default().to_string();
                self.templates.insert((ns, name), v);
            }
            "ResourceClaim" => {
                let mut c: ResourceClaim = serde_json::from_value(v).map_err(bad)?;
                c.metadata.namespace = Some(namespace.unwrap_or("default").to_string());
                self.api.store(c);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `allocResourceClaims` in memory.
    pub(crate) fn alloc(&self, namespace: &str, seed: u64) -> Result<usize, BenchError> {
        let claims = self.api.values();
        let slices: Vec<&Value> = self.slice_values.iter().collect();
        let claim_refs: Vec<&Value> = claims.iter().collect();
        let planned = crate::alloc::plan(&slices, &claim_refs, namespace, seed)?;
        for (name, allocation) in &planned {
            self.api.set_allocation(namespace, name, allocation)?;
        }
        Ok(planned.len())
    }

    /// The ResourceClaim controller: creates the claims of a new pod's template entries and
    /// records them in `pod.status.resourceClaimStatuses`.
    pub(crate) fn claims_for_pod(&self, pod: &mut Value) -> Result<(), BenchError> {
        let ns = pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let pod_uid = pod["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        let mut statuses = Vec::new();
        for entry in pod["spec"]["resourceClaims"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let Some(tname) = entry["resourceClaimTemplateName"].as_str() else {
                continue;
            };
            let entry_name = entry["name"].as_str().unwrap_or_default();
            let t = self
                .templates
                .get(&(ns.clone(), tname.to_string()))
                .ok_or_else(|| BenchError::Workload(format!("no ResourceClaimTemplate {ns}/{tname}")))?;
            let claim_name = format!("{pod_name}-{entry_name}");
            let mut annotations = t["spec"]["metadata"]["annotations"].clone();
            if !annotations.is_object() {
                annotations = json!({});
            }
            annotations["resource.kubernetes.io/pod-claim-name"] = json!(entry_name);
            let claim = json!({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": claim_name,
                    "namespace": ns,
                    "labels": t["spec"]["metadata"]["labels"].clone(),
                    "annotations": annotations,
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid,
                                         "controller": true, "blockOwnerDeletion": true}],
                },
                "spec": t["spec"]["spec"].clone(),
            });
            let c: ResourceClaim = serde_json::from_value(claim)
                .map_err(|e| BenchError::Workload(format!("claim from {tname}: {e}")))?;
            self.api.store(c);
            statuses.push(json!({"name": entry_name, "resourceClaimName": claim_name}));
        }
        if !statuses.is_empty() {
            pod["status"]["resourceClaimStatuses"] = json!(statuses);
        }
        Ok(())
    }
}

/// The resourceVersion a write is conditioned on.
fn rv_of(claim: &ResourceClaim) -> &str {
    claim.metadata.resource_version.as_deref().unwrap_or_default()
}

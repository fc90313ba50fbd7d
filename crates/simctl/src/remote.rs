//! An API server that `unisched sim` did not start (`--kubeconfig`), such as the real control
//! plane of `e2e/upstream/control-plane` or a test cluster, and what a run created on it.
//!
//! The cluster is shared with whatever else runs there, so this module keeps to three rules:
//! it says what it will write before the first write; it creates objects but never modifies or
//! deletes one it did not create (an object that already exists is an error, not an update); and
//! it deletes what it created at the end unless asked to keep it. Every object it creates carries
//! the label [`RUN_LABEL`], which is also how it finds its pods again.
//!
//! Settling is observed only through the API (lists compared over time), never through anything
//! the embedded server knows, so an external scheduler and a real apiserver settle the same way.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::Path,
    time::{Duration, Instant},
};

use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
    core::GroupVersionKind,
    discovery::{ApiCapabilities, ApiResource, Scope},
};
use serde_json::{Value, json};
use unisched_sim::scenario::{DeleteRef, ScenarioObject};

use crate::hold::{TemplateClaims, claims_created, generated_claim_names, hold, is_held, release};
use crate::in_process::Inventory;

/// What went wrong on the remote API server. Messages name the scenario file and object where
/// there is one.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// A request failed (the API server's answer is the message).
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// An object did not convert to or from JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Discovery does not know the kind.
    #[error("the API server does not serve {api_version} {kind}")]
    NotServed {
        /// The kind's group/version.
        api_version: String,
        /// The kind.
        kind: String,
        /// The discovery error.
        #[source]
        source: kube::Error,
    },
    /// A namespace of the scenario could not be created.
    #[error("creating namespace {name}")]
    CreateNamespace {
        /// The namespace.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// kube-controller-manager did not create the namespace's `default` ServiceAccount.
    #[error(
        "namespace {namespace} has no default ServiceAccount after 60s \
         (is kube-controller-manager running?)"
    )]
    NoServiceAccount {
        /// The namespace.
        namespace: String,
    },
    /// A scenario document did not decode as an object.
    #[error("{file}: not a Kubernetes object")]
    NotAnObject {
        /// The scenario file and document.
        file: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The object exists already: this run never changes what it did not create.
    #[error(
        "{file}: {kind} {name} already exists on {server}; unisched sim only creates objects, it \
         never changes or deletes one it did not create"
    )]
    AlreadyExists {
        /// The scenario file and document.
        file: String,
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
        /// The API server.
        server: String,
    },
    /// The API server refused an object (its answer is part of the message).
    #[error("{file}: creating {kind} {name}: {error}")]
    Create {
        /// The scenario file and document.
        file: String,
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
        /// The API server's answer.
        error: kube::Error,
    },
    /// A node's status could not be written.
    #[error("{file}: writing the status of node {name}")]
    NodeStatus {
        /// The scenario file and document.
        file: String,
        /// The node.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// A pod's status (given by the scenario) could not be written.
    #[error("{file}: writing the status of pod {name}")]
    PodStatus {
        /// The scenario file and document.
        file: String,
        /// The pod.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// A held pod could not be released.
    #[error("releasing pod {name}")]
    Release {
        /// The pod.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// A step deletes an object this run did not create.
    #[error("{file}: {kind} {name} was not created by this run; unisched sim deletes only what it created")]
    NotCreatedByRun {
        /// The scenario file and document.
        file: String,
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
    },
    /// An object this run created could not be deleted.
    #[error("deleting {kind} {name}")]
    Delete {
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The deletion of a terminating pod could not be finished.
    #[error("finishing the deletion of pod {namespace}/{name}")]
    FinishDeletion {
        /// The pod's namespace.
        namespace: String,
        /// The pod.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The kubeconfig could not be read.
    #[error("reading kubeconfig {}", path.display())]
    ReadKubeconfig {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig could not be turned into a client configuration.
    #[error("loading kubeconfig {}", path.display())]
    LoadKubeconfig {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The client could not be built from the configuration.
    #[error("building the API client")]
    Client(#[source] kube::Error),
    /// `GET /version` failed.
    #[error("the API server at {server} (kubeconfig {}) does not answer", path.display())]
    NoAnswer {
        /// The API server.
        server: String,
        /// The kubeconfig.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

type Result<T, E = RemoteError> = std::result::Result<T, E>;

/// The label on every object a run creates; its value is the run's id.
pub(crate) const RUN_LABEL: &str = "sim.unisched.dev/run";

/// The resources a report and the settle check read, with their group/version and kind.
const LISTED: &[(&str, &str, &str)] = &[
    ("pods", "v1", "Pod"),
    ("nodes", "v1", "Node"),
    ("resourceclaims", "resource.k8s.io/v1", "ResourceClaim"),
    ("resourceslices", "resource.k8s.io/v1", "ResourceSlice"),
    ("deviceclasses", "resource.k8s.io/v1", "DeviceClass"),
    ("persistentvolumeclaims", "v1", "PersistentVolumeClaim"),
];

/// One object this run created, in creation order.
#[derive(Clone, Debug)]
struct Created {
    kind: String,
    namespace: Option<String>,
    name: String,
    resource: ApiResource,
}

/// A remote API server and what this run created on it.
pub(crate) struct RemoteCluster {
    client: Client,
    server: String,
    run_id: String,
    kinds: HashMap<(String, String), (ApiResource, ApiCapabilities)>,
    created: Vec<Created>,
    /// Namespaces whose `default` ServiceAccount exists (pods cannot be created before it).
    ready_namespaces: BTreeSet<String>,
    /// Pods whose [`HOLD_GATE`](crate::hold::HOLD_GATE) has been removed.
    released: BTreeSet<(Option<String>, String)>,
}

impl RemoteCluster {
    /// Connects with the kubeconfig (its current context).
    pub async fn connect(kubeconfig: &Path) -> Result<Self> {
        let (client, server) = client_for(kubeconfig).await?;
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        Ok(RemoteCluster {
            client,
            server,
            run_id: format!("sim-{millis}"),
            kinds: HashMap::new(),
            created: Vec::new(),
            ready_namespaces: BTreeSet::new(),
            released: BTreeSet::new(),
        })
    }

    /// The client (for an in-process scheduler).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// This run's id (the value of [`RUN_LABEL`]).
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// What the run is about to do, for the user to read before the first write.
    pub fn plan(&self, objects: &[&ScenarioObject], namespaces: &BTreeSet<String>) -> String {
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for o in objects {
            *kinds.entry(o.kind.as_str()).or_default() += 1;
        }
        let list = kinds
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", ");
        let ns = if namespaces.is_empty() {
            String::new()
        } else {
            format!(
                " and the namespaces {}",
                namespaces.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        };
        format!(
            "writing to the API server at {}: creating {list}{ns}, each labelled {RUN_LABEL}={}; \
             existing objects are never changed",
            self.server, self.run_id
        )
    }

    async fn resolve(&mut self, api_version: &str, kind: &str) -> Result<(ApiResource, ApiCapabilities)> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(r) = self.kinds.get(&key) {
            return Ok(r.clone());
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let found = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|source| RemoteError::NotServed {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
                source,
            })?;
        self.kinds.insert(key, found.clone());
        Ok(found)
    }

    fn api(&self, resource: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        }
    }

    /// Creates a namespace the scenario uses, unless it exists (then it is only used, not owned).
    pub async fn ensure_namespace(&mut self, name: &str) -> Result<()> {
        let (ar, _) = self.resolve("v1", "Namespace").await?;
        let api = self.api(&ar, None);
        if api.get_opt(name).await?.is_some() {
            return Ok(());
        }
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {RUN_LABEL: self.run_id}},
        }))?;
        api.create(&PostParams::default(), &obj)
            .await
            .map_err(|source| RemoteError::CreateNamespace {
                name: name.to_string(),
                source,
            })?;
        self.created.push(Created {
            kind: "Namespace".into(),
            namespace: None,
            name: name.into(),
            resource: ar,
        });
        Ok(())
    }

    /// Waits until the namespace's `default` ServiceAccount exists: kube-apiserver's ServiceAccount
    /// admission refuses pods before kube-controller-manager has created it.
    async fn wait_for_service_account(&mut self, namespace: &str) -> Result<()> {
        if self.ready_namespaces.contains(namespace) {
            return Ok(());
        }
        let (ar, _) = self.resolve("v1", "ServiceAccount").await?;
        let api = self.api(&ar, Some(namespace));
        let start = Instant::now();
        while api.get_opt("default").await?.is_none() {
            if start.elapsed() > Duration::from_secs(60) {
                return Err(RemoteError::NoServiceAccount {
                    namespace: namespace.to_string(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.ready_namespaces.insert(namespace.to_string());
        Ok(())
    }

    /// Creates one scenario object. A Node's `status` (capacity, allocatable, conditions) is
    /// written through `/status` afterwards, with a Ready condition when the scenario gives none:
    /// there is no kubelet to report one. So is a Pod's `status` when the scenario gives one (a
    /// bound pod's container statuses, say, in the middle of an in-place resize): the API server
    /// drops the status of a pod it creates.
    pub async fn create(&mut self, o: &ScenarioObject) -> Result<()> {
        let (ar, caps) = self.resolve(&o.api_version, &o.kind).await?;
        let namespace = match caps.scope {
            Scope::Namespaced => Some(o.namespace.clone().unwrap_or_else(|| "default".into())),
            Scope::Cluster => None,
        };
        if o.kind == "Pod"
            && let Some(ns) = &namespace
        {
            self.wait_for_service_account(ns).await?;
        }
        let mut value = o.value.clone();
        if let Some(m) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
            m.remove("uid");
            let labels = m.entry("labels").or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert(RUN_LABEL.into(), Value::String(self.run_id.clone()));
            }
        }
        if o.kind == "Pod" {
            hold(&mut value);
        }
        let status = match o.kind.as_str() {
            "Node" => node_status(&value),
            "Pod" => value.get("status").cloned(),
            _ => None,
        };
        let obj: DynamicObject =
            serde_json::from_value(value).map_err(|source| RemoteError::NotAnObject {
                file: o.source.to_string(),
                source,
            })?;
        let api = self.api(&ar, namespace.as_deref());
        let made = create_with_admission_retry(&api, &obj)
            .await
            .map_err(|error| match &error {
                kube::Error::Api(s) if s.code == 409 => RemoteError::AlreadyExists {
                    file: o.source.to_string(),
                    kind: o.kind.clone(),
                    name: o.display_name(),
                    server: self.server.clone(),
                },
                _ => RemoteError::Create {
                    file: o.source.to_string(),
                    kind: o.kind.clone(),
                    name: o.display_name(),
                    error,
                },
            })?;
        let name = made.metadata.name.clone().unwrap_or_default();
        self.created.push(Created {
            kind: o.kind.clone(),
            namespace: namespace.clone(),
            name: name.clone(),
            resource: ar,
        });
        if let Some(status) = status {
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .map_err(|source| {
                let (file, name) = (o.source.to_string(), name.clone());
                if o.kind == "Pod" {
                    RemoteError::PodStatus { file, name, source }
                } else {
                    RemoteError::NodeStatus { file, name, source }
                }
            })?;
        }
        Ok(())
    }

    /// Waits (up to `timeout`) until the claim controller has created the template claims of every
    /// held pod. Returns the claims it created, so that an in-process scheduler can be waited for
    /// before the pods are released, and the pods whose claims never appeared (they are released
    /// too; the scheduler reports them).
    pub async fn await_template_claims(&self, timeout: Duration) -> Result<TemplateClaims> {
        let start = Instant::now();
        let mut out = TemplateClaims::default();
        for c in self.held() {
            let api = self.api(&c.resource, c.namespace.as_deref());
            loop {
                let pod = serde_json::to_value(api.get(&c.name).await?)?;
                if claims_created(&pod) {
                    let ns = c.namespace.clone().unwrap_or_default();
                    out.claims
                        .extend(generated_claim_names(&pod).into_iter().map(|n| (ns.clone(), n)));
                    break;
                }
                if start.elapsed() > timeout {
                    out.missing.push(format!(
                        "{}/{}",
                        c.namespace.as_deref().unwrap_or_default(),
                        c.name
                    ));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(out)
    }

    /// Releases the held pods in creation order (see [`Self::await_template_claims`] for what to
    /// wait for first).
    pub async fn release_held_pods(&mut self) -> Result<()> {
        for c in self.held() {
            let api = self.api(&c.resource, c.namespace.as_deref());
            let pod = serde_json::to_value(api.get(&c.name).await?)?;
            if is_held(&pod) {
                api.patch(&c.name, &PatchParams::default(), &Patch::Merge(release(&pod)))
                    .await
                    .map_err(|source| RemoteError::Release {
                        name: c.name.clone(),
                        source,
                    })?;
            }
            self.released.insert((c.namespace.clone(), c.name.clone()));
        }
        Ok(())
    }

    /// The pods this run created and has not released yet, in creation order.
    fn held(&self) -> Vec<Created> {
        self.created
            .iter()
            .filter(|c| c.kind == "Pod" && !self.released.contains(&(c.namespace.clone(), c.name.clone())))
            .cloned()
            .collect()
    }

    /// Deletes an object a step names; only objects this run created may be deleted.
    pub async fn delete(&mut self, d: &DeleteRef) -> Result<()> {
        let Some(pos) = self.created.iter().position(|c| {
            c.kind == d.kind && c.name == d.name && (c.namespace.is_none() || c.namespace == d.namespace)
        }) else {
            return Err(RemoteError::NotCreatedByRun {
                file: d.source.to_string(),
                kind: d.kind.clone(),
                name: d.name.clone(),
            });
        };
        let c = self.created.remove(pos);
        self.delete_created(&c).await
    }

    async fn delete_created(&self, c: &Created) -> Result<()> {
        let api = self.api(&c.resource, c.namespace.as_deref());
        // There are no kubelets to finish a graceful deletion of a bound pod.
        let dp = if c.kind == "Pod" {
            DeleteParams::default().grace_period(0)
        } else {
            DeleteParams::default()
        };
        match api.delete(&c.name, &dp).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(source) => Err(RemoteError::Delete {
                kind: c.kind.clone(),
                name: c.name.clone(),
                source,
            }),
        }
    }

    /// Lists what the report reads: this run's pods, nodes and slices, the claims in the
    /// namespaces of its pods, and every DeviceClass (classes are cluster-wide inputs).
    pub async fn listing(&mut self) -> Result<BTreeMap<String, Vec<Value>>> {
        let mut out = BTreeMap::new();
        let ours = ListParams::default().labels(&format!("{RUN_LABEL}={}", self.run_id));
        let namespaces: BTreeSet<String> = self
            .created
            .iter()
            .filter(|c| c.kind == "Pod")
            .filter_map(|c| c.namespace.clone())
            .collect();
        for (plural, api_version, kind) in LISTED {
            let (ar, caps) = match self.resolve(api_version, kind).await {
                Ok(r) => r,
                Err(_) if *plural != "pods" => continue, // a server without DRA, say
                Err(e) => return Err(e),
            };
            let values: Vec<Value> = match *plural {
                "resourceclaims" | "persistentvolumeclaims" => {
                    let mut all = Vec::new();
                    for ns in &namespaces {
                        let list = self.api(&ar, Some(ns)).list(&ListParams::default()).await?;
                        all.extend(
                            list.items
                                .into_iter()
                                .filter_map(|o| serde_json::to_value(o).ok()),
                        );
                    }
                    all
                }
                "deviceclasses" => {
                    let list = self.api(&ar, None).list(&ListParams::default()).await?;
                    list.items
                        .into_iter()
                        .filter_map(|o| serde_json::to_value(o).ok())
                        .collect()
                }
                _ => {
                    let api = match caps.scope {
                        Scope::Cluster => self.api(&ar, None),
                        Scope::Namespaced => Api::all_with(self.client.clone(), &ar),
                    };
                    let list = api.list(&ours).await?;
                    list.items
                        .into_iter()
                        .filter_map(|o| serde_json::to_value(o).ok())
                        .collect()
                }
            };
            out.insert((*plural).to_string(), values);
        }
        Ok(out)
    }

    /// Finishes the graceful deletion of this run's pods, as the kubelet would once the containers
    /// stopped: without kubelets a deleted pod that is bound to a node stays Terminating forever
    /// (a preemption victim, for one, would never leave). Returns how many were finished.
    pub async fn finish_terminating_pods(&self, listing: &BTreeMap<String, Vec<Value>>) -> Result<usize> {
        let Some((ar, _)) = self.kinds.get(&("v1".to_string(), "Pod".to_string())) else {
            return Ok(0);
        };
        let mut n = 0;
        for pod in listing.get("pods").into_iter().flatten() {
            let m = &pod["metadata"];
            if m["deletionTimestamp"].is_null() {
                continue;
            }
            let (Some(ns), Some(name)) = (m["namespace"].as_str(), m["name"].as_str()) else {
                continue;
            };
            let dp = DeleteParams::default().grace_period(0);
            match self.api(ar, Some(ns)).delete(name, &dp).await {
                Ok(_) => n += 1,
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(source) => {
                    return Err(RemoteError::FinishDeletion {
                        namespace: ns.to_string(),
                        name: name.to_string(),
                        source,
                    });
                }
            }
        }
        Ok(n)
    }

    /// How many nodes, slices, classes and namespaces the whole cluster has: what an in-process
    /// scheduler's cache must have seen before the step's pods are created.
    pub async fn cluster_inventory(&mut self) -> Result<Inventory> {
        let mut inv = Inventory::default();
        let names = |list: kube::core::ObjectList<DynamicObject>| -> Vec<String> {
            list.items.into_iter().filter_map(|o| o.metadata.name).collect()
        };
        let (ar, _) = self.resolve("v1", "Node").await?;
        inv.nodes = self
            .api(&ar, None)
            .list(&ListParams::default())
            .await?
            .items
            .len();
        if let Ok((ar, _)) = self.resolve("resource.k8s.io/v1", "ResourceSlice").await {
            inv.slices = self
                .api(&ar, None)
                .list(&ListParams::default())
                .await?
                .items
                .len();
        }
        if let Ok((ar, _)) = self.resolve("resource.k8s.io/v1", "DeviceClass").await {
            inv.classes = names(self.api(&ar, None).list(&ListParams::default()).await?);
        }
        let (ar, _) = self.resolve("v1", "Namespace").await?;
        inv.namespaces = names(self.api(&ar, None).list(&ListParams::default()).await?);
        Ok(inv)
    }

    /// Deletes everything this run created, newest first, pods before anything they use.
    /// Returns what could not be deleted.
    pub async fn cleanup(&mut self) -> Vec<String> {
        let mut failed = Vec::new();
        let created = std::mem::take(&mut self.created);
        let (pods, rest): (Vec<_>, Vec<_>) = created.into_iter().partition(|c| c.kind == "Pod");
        for c in pods.iter().rev().chain(rest.iter().rev()) {
            if let Err(e) = self.delete_created(c).await {
                failed.push(crate::error_chain(&e));
            }
        }
        // What carries a finalizer lingers after the delete: a namespace while kube-controller-manager
        // empties it, a PersistentVolumeClaim or PersistentVolume until its protection controller
        // sees nothing using it. Wait for everything to be gone, as `kubectl delete` does, so that
        // the next run on this cluster can create the same names again.
        let deadline = Instant::now() + Duration::from_secs(60);
        for c in pods.iter().chain(rest.iter()) {
            let api = self.api(&c.resource, c.namespace.as_deref());
            while matches!(api.get_opt(&c.name).await, Ok(Some(_))) {
                if Instant::now() > deadline {
                    failed.push(format!(
                        "{} {} still terminating after 60s",
                        c.kind.to_lowercase(),
                        c.name
                    ));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        failed
    }
}

/// A client for the kubeconfig's current context, checked with one `GET /version`; returns it
/// with the server's URL.
pub(crate) async fn client_for(kubeconfig: &Path) -> Result<(Client, String)> {
    let kc =
        kube::config::Kubeconfig::read_from(kubeconfig).map_err(|source| RemoteError::ReadKubeconfig {
            path: kubeconfig.to_path_buf(),
            source,
        })?;
    let config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|source| RemoteError::LoadKubeconfig {
            path: kubeconfig.to_path_buf(),
            source,
        })?;
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(RemoteError::Client)?;
    if let Err(source) = client.apiserver_version().await {
        return Err(RemoteError::NoAnswer {
            server,
            path: kubeconfig.to_path_buf(),
            source,
        });
    }
    Ok((client, server))
}

/// Creates, retrying for a few seconds while an admission plugin refuses because its informers
/// have not yet seen an object written just before (kube-apiserver's NodeDeclaredFeatureValidator
/// looks a ResourceSlice's node up in a cache: "node … not found for device …").
async fn create_with_admission_retry(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
) -> Result<DynamicObject, kube::Error> {
    let start = Instant::now();
    loop {
        match api.create(&PostParams::default(), obj).await {
            Err(kube::Error::Api(s))
                if s.code == 403
                    && (s.message.contains("not found for device")
                        || s.message.contains("not yet ready to handle request"))
                    && start.elapsed() < Duration::from_secs(10) =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// The status to write for a scenario node: its own, plus a Ready condition if it has none.
fn node_status(node: &Value) -> Option<Value> {
    let mut status = node.get("status").cloned().unwrap_or_else(|| json!({}));
    let obj = status.as_object_mut()?;
    let conditions = obj.entry("conditions").or_insert_with(|| json!([]));
    if let Some(list) = conditions.as_array_mut()
        && !list.iter().any(|c| c["type"] == "Ready")
    {
        list.push(json!({
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "no kubelet: node created by unisched sim",
        }));
    }
    Some(status)
}

/// A fingerprint of a listing: changes whenever any listed object changes.
pub(crate) fn fingerprint(listing: &BTreeMap<String, Vec<Value>>) -> Vec<(String, String, String, String)> {
    let mut out: Vec<_> = listing
        .iter()
        .flat_map(|(plural, items)| {
            items.iter().map(move |o| {
                let m = &o["metadata"];
                (
                    plural.clone(),
                    m["namespace"].as_str().unwrap_or_default().to_string(),
                    m["name"].as_str().unwrap_or_default().to_string(),
                    m["resourceVersion"].as_str().unwrap_or_default().to_string(),
                )
            })
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_status_adds_ready_only_when_missing() {
        let bare = json!({"status": {"allocatable": {"cpu": "4"}}});
        let s = node_status(&bare).unwrap_or_default();
        assert_eq!(s["allocatable"]["cpu"], "4");
        assert_eq!(s["conditions"][0]["type"], "Ready");
        assert_eq!(s["conditions"][0]["status"], "True");

        let not_ready = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        let s = node_status(&not_ready).unwrap_or_default();
        assert_eq!(s["conditions"].as_array().map(Vec::len), Some(1));
        assert_eq!(s["conditions"][0]["status"], "False");
    }

    #[test]
    fn fingerprint_changes_with_resource_version() {
        let mut l = BTreeMap::new();
        l.insert(
            "pods".to_string(),
            vec![json!({"metadata": {"namespace": "a", "name": "p", "resourceVersion": "1"}})],
        );
        let before = fingerprint(&l);
        l.insert(
            "pods".to_string(),
            vec![json!({"metadata": {"namespace": "a", "name": "p", "resourceVersion": "2"}})],
        );
        assert_ne!(before, fingerprint(&l));
        assert_eq!(fingerprint(&l), fingerprint(&l.clone()));
    }
}

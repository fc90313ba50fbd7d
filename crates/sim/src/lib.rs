//! unisched-sim: the embedded control plane.
//!
//! An in-memory Kubernetes API server ([`ApiServer`]) that speaks the REST and watch protocol well
//! enough for the unchanged kube-rs client and `kubectl`, plus the controllers a scheduler needs
//! around it: the garbage collector, the ResourceClaim controller, a fake kubelet, an Event mirror,
//! a PersistentVolume controller that also provisions, and a Job controller.
//! It is a simulator: it runs no containers.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use unisched_sim::ApiServer;
//! let server = ApiServer::builder().history(50_000).build();
//! let running = server.serve("127.0.0.1:0".parse()?).await?;
//! std::fs::write("kubeconfig", unisched_sim::kubeconfig_yaml(running.addr))?;
//! let store = running.store();
//! store.create("pods", Some("default"), serde_json::json!({
//!     "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}))?;
//! running.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # What is served
//!
//! The resources of [`Registry::default`] (one line each): namespaces, nodes, pods (`/status`,
//! `/binding`, `/eviction`), core and `events.k8s.io` events, configmaps, secrets, service accounts, PVs, PVCs, leases, priority classes,
//! PDBs, storage classes, CSI nodes, the `resource.k8s.io/v1` DRA kinds and `batch/v1` Jobs (made into
//! pods, and with `WorkloadWithJob` into a Workload and PodGroup, by [`controllers::jobs`]), plus Services,
//! Deployments and the RBAC kinds as stored objects without behaviour (so `deploy/manifests`
//! applies); `/version`, legacy discovery (`/api`, `/apis`, per group/version),
//! `/healthz`/`/livez`/`/readyz`, `/openapi/v2` and `/openapi/v3` documents with the
//! k8s-openapi schemas; for components that delegate authentication and authorization (see
//! [`auth`]), ServiceAccount `TokenRequest`s, `TokenReview`s and `SubjectAccessReview`s decided by
//! the stored RBAC objects. Verbs: get, list (label and field selectors, `limit`/`continue`,
//! `resourceVersionMatch=Exact`), watch (resume from a resourceVersion, bookmarks, `timeoutSeconds`,
//! `sendInitialEvents`, 410 as an ERROR event), create (`generateName`, `dryRun`), update, patch
//! (merge, JSON, strategic merge, and an approximated server-side apply), delete (finalizers,
//! preconditions, propagation policies) and deletecollection; `dryRun=All` on every write. Bodies
//! are JSON, YAML, or protobuf for Pods and the kinds kubectl's generators and `drain` send; answers are JSON; `kubectl get` gets `Table`s.
//! `docs/sim-fidelity.md` compares all of this with kube-apiserver.
//!
//! # kubectl
//!
//! `kubectl --kubeconfig <file from kubeconfig_yaml>` works for `get` (tables, `-o yaml/json/wide`,
//! `-w`), `describe`, `create -f`, `apply -f` / `-k`, `apply --dry-run=server`, `diff`, `explain`,
//! `delete`, `label`, `annotate`, `cordon`, `drain`, `get --raw`.
//! No flag is needed: the OpenAPI v3 documents tell kubectl that the server validates fields, and
//! the server does (`fieldValidation=Strict` rejects unknown fields, `Warn` answers with `Warning`
//! headers). `create namespace|configmap|secret|serviceaccount` and `drain` send protobuf, which is
//! read for those kinds.
//!
//! # Semantics worth knowing
//!
//! - One global resourceVersion; every write is one event. Unchanged writes do not bump it.
//! - Objects are stored as JSON, so fields unknown to k8s-openapi survive; every write is decoded into
//!   the k8s-openapi type, and a failure is a 422 naming the field.
//! - Pods get the defaults and admission a default cluster applies (scheduler name, priority from
//!   the PriorityClass, requests from limits, QoS class, not-ready/unreachable tolerations), their spec
//!   is immutable except where Kubernetes allows changes, and `nodeName` changes only through
//!   `binding`. Binding adds no condition.
//! - Deleting a pod removes it at once (there is no graceful termination period) unless it has
//!   finalizers.
//! - Namespaced objects need their namespace (`default`, `kube-system`, `kube-public`,
//!   `kube-node-lease` exist); deleting a namespace deletes its contents.
#![forbid(unsafe_code)]

pub mod admission;
pub mod auth;
pub mod controllers;
pub mod error;
pub mod patch;
pub mod registry;
pub mod report;
pub mod scenario;
pub mod selector;
pub mod server;
pub mod store;
mod strategy;
pub mod util;

pub use error::{Cause, StoreError};
pub use patch::Patch;
pub use registry::{GenerationPolicy, KindId, Registry, ResourceType, StatusPolicy};
pub use selector::{FieldSelector, LabelSelector};
pub use server::{ApiServer, ApiServerBuilder, Faults, RunningServer, ServerError, kubeconfig_yaml};
pub use store::{
    DeleteOptions, Deletion, EventType, ListOptions, ObjectList, ObjectRef, Propagation, Store, StoreConfig,
    StoreEvent, StoredObject, Subscription, WatchEvent, WatchOptions,
};

//! unisched-sim: the embedded control plane.
//!
//! An in-memory Kubernetes API server ([`ApiServer`]) that speaks the REST and watch protocol well
//! enough for the unchanged kube-rs client and `kubectl`, plus the controllers a scheduler needs
//! around it: the garbage collector, the ResourceClaim controller and a fake kubelet. It is a
//! simulator: it runs no containers.
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
#![forbid(unsafe_code)]

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
pub use registry::{KindId, Registry, ResourceType, StatusPolicy};
pub use selector::{FieldSelector, LabelSelector};
pub use server::{ApiServer, ApiServerBuilder, RunningServer, ServerError, kubeconfig_yaml};
pub use store::{
    DeleteOptions, Deletion, EventType, ListOptions, ObjectList, ObjectRef, Propagation, Store, StoreConfig,
    StoreEvent, StoredObject, Subscription, WatchEvent, WatchOptions,
};

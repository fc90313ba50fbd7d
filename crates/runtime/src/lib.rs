//! Everything that talks to an API server: watchers feeding the cache and queue, the API writer,
//! events, leader election, metrics and health endpoints, and the loop that drives the
//! synchronous scheduling core.
#![forbid(unsafe_code)]

mod binding_threads;
mod composite_pod_groups;
mod debug_flags;
mod dra;
mod events;
mod explain;
mod extenders;
mod gated;
mod http;
mod in_flight;
mod informers;
mod leader;
mod lean;
mod metrics;
mod namespaces;
mod pod_groups;
mod preemption;
#[cfg(target_os = "linux")]
mod process;
#[cfg(target_os = "linux")]
mod profiling;
mod rest_client;
mod scheduler;
#[cfg(test)]
mod testing;
mod volume;
mod watches;
mod writer;

// What the binary, the simulator, the benchmark and the integration tests use; everything else
// is reached through these (or stays inside the crate).
pub use dra::{DELETE_PROTECTION_FINALIZER, DraHandler, DraKind, RuntimeDraApi};
pub use explain::Explanations;
pub use gated::GATED_REPORT_GRACE;
pub use http::{Health, router};
pub use informers::Handler;
pub use lean::Lean;
pub use metrics::Metrics;
pub use namespaces::NamespaceStore;
pub use rest_client::instrumented_client;
pub use scheduler::{RuntimeError, Scheduler, SchedulerOptions};
pub use writer::{ApiWriter, LeaderFlag, METADATA_ONLY, patch_for_metadata};

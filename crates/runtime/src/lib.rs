//! Everything that talks to an API server: watchers feeding the cache and queue, the API writer,
//! events, leader election, metrics and health endpoints, and the loop that drives the
//! synchronous scheduling core.
#![forbid(unsafe_code)]

mod binding_threads;
mod dra;
mod events;
mod explain;
mod gated;
mod http;
mod in_flight;
mod informers;
mod leader;
mod lean;
mod metrics;
mod namespaces;
mod preemption;
#[cfg(target_os = "linux")]
mod process;
mod rest_client;
mod scheduler;
#[cfg(test)]
mod testing;
mod volume;
mod watches;
mod writer;

pub use binding_threads::{BINDING_THREAD_KEEP_ALIVE, SyncWriter};
pub use dra::*;
pub use events::*;
pub use explain::*;
pub use gated::*;
pub use http::*;
pub use informers::*;
pub use leader::*;
pub use lean::Lean;
pub use metrics::*;
pub use namespaces::*;
pub use preemption::*;
#[cfg(target_os = "linux")]
pub use process::cpu_seconds;
pub use rest_client::*;
pub use scheduler::*;
pub use volume::*;
pub use writer::*;

//! The scheduling framework: plugin interfaces, `Status`, `CycleState`, `NodeInfo`/`PodInfo`,
//! `Snapshot`, configuration, and the scheduling and binding cycles.
//!
//! This crate is synchronous and knows nothing about HTTP or tokio. Given the same snapshot, pod,
//! configuration and seed it makes the same decision, which is what lets the whole scheduler be
//! tested with plain unit tests. The cache and the queue (crates above) plug in through
//! [`SchedulerCache`] and [`PodNominator`].
#![forbid(unsafe_code)]

mod algorithm;
mod cycle_state;
mod diagnosis;
mod events;
mod footprint;
mod node_info;
mod node_veto;
mod permit;
mod plugin;
mod plugin_clock;
mod pod_info;
mod profile;
mod rng;
mod scheduler;
mod snapshot;
mod split;
mod status;

pub mod config;

pub use algorithm::*;
pub use cycle_state::*;
pub use diagnosis::*;
pub use events::*;
pub use footprint::*;
pub use node_info::*;
pub use node_veto::*;
pub use permit::WaitingPods;
pub use plugin::*;
pub use plugin_clock::calibrate_plugin_clock;
pub use pod_info::*;
pub use profile::*;
pub use rng::SeededRng;
pub use scheduler::*;
pub use snapshot::*;
pub use split::SPLIT_MIN_WORK;
pub use status::*;

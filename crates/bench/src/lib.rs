//! `unisched-bench`: upstream scheduler_perf-style workloads run against the embedded control
//! plane, with the measurements upstream reports.
//!
//! A workload (YAML in `e2e/perf/`, see [`workload`]) creates nodes, DRA objects and pods; the
//! pods of its measured phase (`collectMetrics`) are timed. Each workload runs in up to three
//! modes ([`Mode`]):
//! - **full**: the real runtime ([`unisched_runtime::Scheduler`]) over HTTP against the embedded
//!   API server, with unlimited client QPS, exactly as `unisched run` would run;
//! - **limit**: a bind-only scheduler ([`LimitScheduler`]) through the same server and the same
//!   [`unisched_runtime::ApiWriter`]: the ceiling the harness and API path allow, so every figure
//!   can be read as a ratio `unisched / limit`;
//! - **engine**: the scheduling core on in-memory inputs, no HTTP: the cost of deciding alone.
//!
//! Measured per run: SchedulingThroughput sampled every second (Average, 50/90/95/99th
//! percentiles, as upstream), scheduling-attempt and per-extension-point latency from the
//! scheduler's own metrics, API writes per scheduled pod, CPU seconds per component and the
//! process's peak RSS. Objects are created by the harness directly in the store (in process) —
//! upstream's test client goes through the API server at 5000 QPS; ours costs the API server
//! nothing, the scheduler under test still sees everything through HTTP watches.
#![forbid(unsafe_code)]

mod alloc;
mod driver;
mod engine;
mod engine_dra;
mod engine_groups;
mod engine_preemption;
pub mod external;
pub mod leftovers;
mod limit;
mod measure;
mod progress;
mod run;
mod target;
mod tracker;

pub mod procstat;
pub mod promtext;
pub mod report;
pub mod sampler;
pub mod svg;
pub mod template;
pub mod workload;

use std::sync::Arc;

pub use external::{Contender, ExternalOptions, ExternalReport, ExternalRun};
pub use limit::LimitScheduler;
pub use report::{BenchReport, Machine, Mode, RunReport, SummaryRow, UnknownModeError};
pub use sampler::Throughput;
pub use workload::{Catalog, Op, Upstream, Workload};

use unisched_framework::config::KubeSchedulerConfiguration;

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A workload file or template is invalid.
    #[error("workload: {0}")]
    Workload(String),
    /// The control plane, scheduler or a thread could not start.
    #[error("setup: {0}")]
    Setup(String),
    /// An API call of the harness failed.
    #[error("API: {0}")]
    Api(String),
}

/// How to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Tie-break seed (and the seed of `allocResourceClaims`).
    pub seed: u64,
    /// Progress on stderr.
    pub progress: bool,
    /// Scheduler configuration (default: `KubeSchedulerConfiguration::defaulted()`); leader
    /// election is turned off and client QPS made unlimited.
    pub config: Option<KubeSchedulerConfiguration>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            seed: 1,
            progress: false,
            config: None,
        }
    }
}

/// Runs one workload in one mode, in this process.
///
/// Must not be called from inside a tokio runtime: each mode starts its own runtimes.
pub fn run(workload: &Workload, mode: Mode, opts: &RunOptions) -> Result<RunReport, BenchError> {
    match mode {
        Mode::Full | Mode::Limit => run::run_api(workload, mode, opts),
        Mode::Engine => engine::run_engine(workload, opts),
    }
}

/// The workload's `featureGates` over the defaults, as the scheduler under test runs them.
pub(crate) fn feature_gates(w: &Workload) -> Result<unisched_features::FeatureGates, BenchError> {
    unisched_features::FeatureGates::from_settings(w.feature_gates.clone())
        .map_err(|e| BenchError::Workload(format!("{}: featureGates: {e}", w.name)))
}

/// Whether the in-tree registry has the `DynamicResources` plugin (DRA workloads schedule their
/// claims only then).
pub fn dynamic_resources_registered() -> bool {
    struct Never;
    impl unisched_plugins::Binder for Never {
        fn bind(
            &self,
            _: &k8s_openapi::api::core::v1::Pod,
            _: &str,
        ) -> Result<(), unisched_plugins::BindError> {
            Ok(())
        }
    }
    unisched_plugins::Registry::in_tree(unisched_plugins::PluginContext::new(Arc::new(Never)))
        .names()
        .any(|n| n == "DynamicResources")
}

/// The current time, UTC, RFC 3339 (for reports).
pub fn now_utc() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

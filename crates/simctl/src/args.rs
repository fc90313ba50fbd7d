//! The flags of `unisched sim`, parsed by the binary and read by every part of the run.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Output format of the report.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Output {
    /// Readable tables.
    Table,
    /// One JSON document (stable shape).
    Json,
}

/// Flags of `unisched sim`.
#[derive(Args, Debug)]
pub struct SimArgs {
    /// Scenario files or directories (see README: steps, `*.delete.yaml`).
    #[arg(required_unless_present_any = ["serve", "from_cluster"])]
    pub paths: Vec<PathBuf>,
    /// Copy the cluster of this kubeconfig (read only: get and list) into the embedded control
    /// plane first, then apply the scenario, if any, and let unisched decide the pending pods.
    #[arg(long = "from-cluster", conflicts_with = "kubeconfig")]
    pub from_cluster: Option<PathBuf>,
    /// Report format.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Give up waiting for the cluster to settle after this many seconds (per step).
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// A `KubeSchedulerConfiguration` for the in-process scheduler (leader election is turned off).
    #[arg(long = "scheduler-config")]
    pub scheduler_config: Option<PathBuf>,
    /// Keep the control plane running after the scenario (Ctrl-C stops it).
    #[arg(long, conflicts_with = "kubeconfig")]
    pub serve: bool,
    /// Where to write a kubeconfig for kubectl and `unisched run` (with --serve; default
    /// `unisched-sim.kubeconfig` in the current directory).
    #[arg(long = "kubeconfig-out", requires = "serve")]
    pub kubeconfig_out: Option<PathBuf>,
    /// Apply the scenario to the API server of this kubeconfig instead of starting the embedded
    /// one. Only objects this run creates are touched, and they are deleted at the end.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// With --kubeconfig: leave the objects this run created in the cluster.
    #[arg(long, requires = "kubeconfig")]
    pub keep: bool,
    /// Run only the control plane (start `unisched run --kubeconfig …` separately).
    #[arg(long = "no-scheduler")]
    pub no_scheduler: bool,
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Seed for tie-breaks, so the same scenario gives the same placement.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How long nothing may change for the cluster to count as settled (milliseconds).
    #[arg(long = "settle-ms", default_value_t = 500)]
    pub settle_ms: u64,
    /// Feature gates for the in-process scheduler, as `unisched run --feature-gates` takes them
    /// (e.g. `GenericWorkload=false` to schedule pod groups pod by pod).
    #[arg(long = "feature-gates", default_value = "")]
    pub feature_gates: String,
    /// Explain every placement: the best-scored nodes with each score plugin's weighted score
    /// (a table after the report; `explanations` in JSON output).
    #[arg(long)]
    pub explain: bool,
}

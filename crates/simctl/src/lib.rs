//! The front end of `unisched sim`: a scenario applied to the embedded control plane (or, with
//! `--kubeconfig`, to any API server), placed by the real scheduler runtime over HTTP, and
//! reported.
//!
//! A library rather than part of the binary so that `unisched` stays options and wiring, and so
//! the pieces of a run (holding a step's pods until their claims exist, deciding when the cluster
//! has settled, copying a live cluster) each live in a module of their own:
//!
//! - [`args`]: the flags;
//! - `embedded`: a run on the embedded control plane (the default, and `--from-cluster`);
//! - `remote_scenario` and `remote`: a run against an API server this command did not start;
//! - `snapshot`: the read-only copy of a live cluster (`--from-cluster`);
//! - `hold`: the scheduling gate that releases a step's pods in creation order;
//! - `in_process`: the scheduler this command starts, and the barriers that wait for its caches;
//! - `settle`: when a run is done;
//! - [`scheduler_config`]: the `KubeSchedulerConfiguration` file, shared with `unisched run`;
//! - [`progress`]: what the user reads on stderr while it runs.
//!
//! Every module owns its errors (a `thiserror` enum each); [`SimError`] is the union the binary
//! prints, cause after cause.
#![forbid(unsafe_code)]

pub mod args;
mod embedded;
mod hold;
mod in_process;
pub mod progress;
mod remote;
mod remote_scenario;
pub mod scheduler_config;
mod settle;
mod snapshot;

use unisched_sim::{report, scenario};

pub use args::{Output, SimArgs};
pub use embedded::EmbeddedError;
pub use in_process::InProcessError;
use progress::progress;
pub use remote::RemoteError;
pub use remote_scenario::RemoteScenarioError;
pub use scheduler_config::SchedulerConfigError;
pub use snapshot::SnapshotError;

/// Why `unisched sim` failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A scenario file is invalid (nothing was applied).
    #[error(transparent)]
    Scenario(#[from] scenario::ScenarioError),
    /// The live cluster of `--from-cluster` could not be read.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// The run on the embedded control plane.
    #[error(transparent)]
    Embedded(#[from] EmbeddedError),
    /// The run on a remote API server (`--kubeconfig`).
    #[error(transparent)]
    Remote(#[from] RemoteScenarioError),
}

/// An error and its causes, `outer: inner: …`, as the binary prints them (for messages that
/// collect errors instead of returning them).
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

/// Prints the report on stdout in the format of `--output`.
pub(crate) fn print_report(args: &SimArgs, report: &report::Report) -> Result<(), serde_json::Error> {
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report.to_json())?),
        Output::Table => print!("{}", report.to_table()),
    }
    Ok(())
}

/// Runs the command; returns the exit code (0 settled, 3 did not settle in time).
pub async fn sim(args: SimArgs) -> Result<u8, SimError> {
    // Read and validate everything first: nothing is applied if any file is bad.
    let scenario = if args.paths.is_empty() {
        scenario::Scenario::default()
    } else {
        scenario::load(&args.paths)?
    };
    if let Some(kc) = args.kubeconfig.clone() {
        return Ok(remote_scenario::sim_remote(args, scenario, &kc).await?);
    }
    let snapshot = match &args.from_cluster {
        Some(kc) => {
            let snap = snapshot::read(kc).await?;
            snapshot::check_not_empty(&snap)?;
            progress(&format!(
                "read {} (get/list only; nothing is written to it)",
                snap.server
            ));
            Some(snap)
        }
        None => None,
    };
    Ok(embedded::sim_embedded(args, scenario, snapshot).await?)
}

//! Running a profile's plugins at each extension point, with upstream's semantics.
//!
//! Most points share one loop (`run_until_failure`): each plugin in profile order, timed on
//! attempts sampled for plugin metrics; a plugin with nothing to do for the pod (PreFilter and
//! PreScore Skips, PreBind's pre-flight Skip, plugins PreFilter skipped, a Permit Wait) is passed
//! over; the first status that is neither Success nor passed over stops the loop and becomes the
//! point's status, named after its plugin and reported as the point's `FailureReport` says.
//! The points keep only what is theirs: what a plugin's run is, and what a Skip or Wait means.
//!
//! Three points do not fit the loop, on purpose: Filter runs per node on the hot path and names
//! its failures with a shared name and a wording of its own; PostFilter stops at the first
//! success rather than the first failure; Bind is decided by the first plugin that does not
//! Skip. They still report failures through `FailureReport` where upstream's wording allows.

mod binding;
mod filter;
mod in_flight;
mod placement;
mod post_filter;
mod queueing;
mod score;

use std::sync::Arc;

pub use filter::FilterChain;
pub use in_flight::{BindInFlight, PreBindInFlight};
pub use score::{NodePluginScores, ScoreTable, WeightedScore};

use crate::{Code, Plugin, Status};

/// How an extension point reports a plugin's failure: named after the plugin, and wrapped as an
/// error that says `running {point} plugin "{name}"`, unless the status rejects the pod and the
/// point lets rejections stand (they then keep their code, which the queue needs).
#[derive(Clone, Copy, Debug)]
pub(super) struct FailureReport {
    /// How the wrapped error names the point ("PreFilter", "AddPod on PreFilter").
    point: &'static str,
    /// Whether a rejection keeps its code, or becomes an error like any other failure.
    rejections_stand: bool,
}

impl FailureReport {
    /// A point whose plugins may reject the pod.
    pub(super) const fn rejections_stand(point: &'static str) -> Self {
        FailureReport {
            point,
            rejections_stand: true,
        }
    }

    /// A point where any failure is an error (the pod cannot be rejected there).
    pub(super) const fn always_error(point: &'static str) -> Self {
        FailureReport {
            point,
            rejections_stand: false,
        }
    }

    /// `plugin`'s failure `status` as the point returns it, with the code it reports.
    pub(super) fn report(self, plugin: &str, status: Status) -> (Status, Code) {
        let status = status.with_plugin(plugin);
        if self.rejections_stand && status.is_rejected() {
            let code = status.code();
            return (status, code);
        }
        let context = format!("running {} plugin {plugin:?}", self.point);
        (status.wrap_error(context), Code::Error)
    }
}

/// Runs `plugins` in order until one fails, and returns the point's status with the code it
/// reports: Success when none failed, else the first failure as `failure` reports it.
///
/// `run` runs one plugin (timing it if the attempt is sampled) and returns its status, or `None`
/// when the plugin is passed over (the point noted its Skip or Wait, or it had nothing to do).
/// Generic and inlined, so each point's loop compiles to the loop it would write by hand.
#[inline]
pub(super) fn run_until_failure<'p, P: ?Sized + Plugin + 'p>(
    plugins: impl IntoIterator<Item = &'p Arc<P>>,
    failure: FailureReport,
    mut run: impl FnMut(&P) -> Option<Status>,
) -> (Status, Code) {
    for plugin in plugins {
        match run(plugin) {
            Some(status) if !status.is_success() => return failure.report(plugin.name(), status),
            _ => {}
        }
    }
    (Status::success(), Code::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rejections keep their code where the point allows them; everything else becomes an error
    /// that names the point and the plugin, and every failure carries the plugin's name.
    #[test]
    fn failures_are_named_and_wrapped_as_the_point_says() {
        let stand = FailureReport::rejections_stand("Reserve");
        let (s, code) = stand.report("Volumes", Status::unschedulable("no room"));
        assert_eq!((code, s.plugin()), (Code::Unschedulable, Some("Volumes")));
        let (s, code) = stand.report("Volumes", Status::error("boom"));
        assert_eq!((code, s.plugin()), (Code::Error, Some("Volumes")));
        assert!(
            s.message().contains("running Reserve plugin \"Volumes\""),
            "{s:?}"
        );

        let always = FailureReport::always_error("AddPod on PreFilter");
        let (s, code) = always.report("Spread", Status::unschedulable("no room"));
        assert_eq!((code, s.plugin()), (Code::Error, Some("Spread")));
        assert!(
            s.message()
                .contains("running AddPod on PreFilter plugin \"Spread\""),
            "{s:?}"
        );
    }
}

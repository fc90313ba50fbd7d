//! Preemption in engine mode: DefaultPreemption's evictions carried out in memory.
//!
//! In the runtime, the plugin hands each plan to a preemptor that writes asynchronously (each
//! victim's `DisruptionTarget` condition, then its deletion), and a victim leaves the cache when
//! the pod watch reports it deleted. The engine has no API server, so [`EnginePreemptor`] only
//! keeps the plans; once the scheduling cycle that made them has returned (the preemptor is then
//! back in the queue with its nomination, as it is when the writes land after the cycle), the
//! engine deletes the victims as the watch would report them, and counts the writes they would
//! have cost. What the plan does to the preemptor afterwards (retried on the deletions, bound
//! where the victims were) is the queue's and the framework's, exactly as in the runtime.

use parking_lot::Mutex;
use unisched_plugins::{PreemptionPlan, Preemptor};
use unisched_runtime::Metrics;

/// DefaultPreemption's preemptor in engine mode: keeps the plans for the engine to carry out.
pub(crate) struct EnginePreemptor {
    plans: Mutex<Vec<PreemptionPlan>>,
    metrics: Metrics,
}

impl EnginePreemptor {
    pub(crate) fn new(metrics: Metrics) -> Self {
        EnginePreemptor {
            plans: Mutex::new(Vec::new()),
            metrics,
        }
    }

    /// The plans made since the last call, in the order they were made.
    pub(crate) fn take(&self) -> Vec<PreemptionPlan> {
        std::mem::take(&mut *self.plans.lock())
    }

    /// Counts the API writes one plan would cost the runtime: per victim its status patch and its
    /// deletion, per lower-priority nomination on the node the patch that clears it.
    pub(crate) fn count_writes(&self, plan: &PreemptionPlan) {
        let writes = &self.metrics.api_writes;
        let victims = plan.victims.len() as u64;
        let clears = plan.clear_nominations.len() as u64;
        writes
            .with_label_values(&["patch", "pods/status", "2xx"])
            .inc_by(victims + clears);
        writes
            .with_label_values(&["delete", "pods", "2xx"])
            .inc_by(victims);
    }
}

impl Preemptor for EnginePreemptor {
    fn attempted(&self) {
        self.metrics.preemption_attempts.inc();
    }

    fn execute(&self, plan: PreemptionPlan) {
        self.metrics
            .preemption_victims
            .with_label_values::<&str>(&[])
            .observe((plan.victims.len() + plan.rejected_at_permit.len()) as f64);
        self.plans.lock().push(plan);
    }
}

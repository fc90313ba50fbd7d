//! The metrics of pod groups and of preemption by and of groups, with upstream's names, labels
//! and buckets.
//!
//! kube-scheduler registers most of these only when the feature they describe is on
//! (GenericWorkload for the pod-group cycle and workload preemption, TopologyAwareWorkloadScheduling
//! for placements), so a dashboard that finds them knows the feature is on. They are created with
//! the other metrics and registered by [`WorkloadMetrics::register`] once the gates are known; an
//! observation of a series that is not registered is simply not exported.

use std::time::Duration;

use prometheus::{HistogramVec, IntCounterVec, Opts, Registry, exponential_buckets};
use unisched_features::FeatureGates;
use unisched_framework::Code;

use super::hist;

/// `result` of a pod-group attempt: placed.
pub(crate) const SCHEDULED: &str = "scheduled";
/// `result` of a pod-group attempt: did not fit, and preemption could not help.
pub(crate) const UNSCHEDULABLE: &str = "unschedulable";
/// `result` of a pod-group attempt: did not fit, and its preemption is making room.
pub(crate) const WAITING_ON_PREEMPTION: &str = "waiting_on_preemption";
/// `result` of a pod-group attempt: an internal error.
pub(crate) const ERROR: &str = "error";
/// `result` of an asynchronous eviction task: every victim deleted (or already gone).
pub(crate) const TASK_SUCCESS: &str = "success";
/// `result` of an asynchronous eviction task: a victim could not be deleted.
pub(crate) const TASK_ERROR: &str = "error";

/// Pod groups, placements and workload preemption.
#[derive(Clone, Debug)]
pub struct WorkloadMetrics {
    /// `scheduler_podgroup_schedule_attempts_total{result,profile}`.
    pub podgroup_schedule_attempts: IntCounterVec,
    /// `scheduler_podgroup_scheduling_attempt_duration_seconds{result,profile}`.
    pub podgroup_attempt_duration: HistogramVec,
    /// `scheduler_podgroup_scheduling_algorithm_duration_seconds`.
    pub podgroup_algorithm_duration: HistogramVec,
    /// `scheduler_workload_preemption_attempts_total{result}`.
    pub workload_preemption_attempts: IntCounterVec,
    /// `scheduler_workload_preemption_victims`: pods evicted by one group preemption.
    pub workload_preemption_victims: HistogramVec,
    /// `scheduler_preemption_workload_disruptions{preemptor}`: group units one preemption evicts.
    pub preemption_workload_disruptions: HistogramVec,
    /// `scheduler_preemption_evaluation_duration_seconds{preemptor,result}`.
    pub preemption_evaluation_duration: HistogramVec,
    /// `scheduler_preemption_execution_duration_seconds{preemptor,result}`.
    pub preemption_execution_duration: HistogramVec,
    /// `scheduler_preemption_pdb_violations_total{preemptor}`.
    pub preemption_pdb_violations: IntCounterVec,
    /// `scheduler_generated_placements_total{profile}`.
    pub generated_placements: IntCounterVec,
    /// `scheduler_placement_evaluations_total{result,profile}` (`feasible` or `infeasible`).
    pub placement_evaluations: IntCounterVec,
    /// `scheduler_placement_evaluation_duration_seconds{result,profile}`.
    pub placement_evaluation_duration: HistogramVec,
    /// `scheduler_preemption_goroutines_duration_seconds{result}`: one asynchronous eviction task.
    pub preemption_tasks_duration: HistogramVec,
    /// `scheduler_preemption_goroutines_execution_total{result}`.
    pub preemption_tasks: IntCounterVec,
}

fn counter(name: &str, help: &str, labels: &[&str]) -> Result<IntCounterVec, prometheus::Error> {
    IntCounterVec::new(Opts::new(name, help), labels)
}

impl WorkloadMetrics {
    /// Creates them, unregistered.
    pub(super) fn new() -> Result<Self, prometheus::Error> {
        Ok(Self {
            podgroup_schedule_attempts: counter(
                "scheduler_podgroup_schedule_attempts_total",
                "Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod group could not be scheduled, while 'error' means an internal scheduler problem.",
                &["result", "profile"],
            )?,
            podgroup_attempt_duration: hist(
                "scheduler_podgroup_scheduling_attempt_duration_seconds",
                "Pod group scheduling attempt latency in seconds",
                exponential_buckets(0.001, 2.0, 15)?,
                &["result", "profile"],
            )?,
            podgroup_algorithm_duration: hist(
                "scheduler_podgroup_scheduling_algorithm_duration_seconds",
                "Pod group scheduling algorithm latency in seconds",
                exponential_buckets(0.001, 2.0, 15)?,
                &[],
            )?,
            workload_preemption_attempts: counter(
                "scheduler_workload_preemption_attempts_total",
                "Total preemption attempts initiated by workload (including pod groups) in the cluster till now.",
                &["result"],
            )?,
            workload_preemption_victims: hist(
                "scheduler_workload_preemption_victims",
                "Number of pod preemption victims caused by workload preemption.",
                exponential_buckets(1.0, 2.0, 11)?,
                &[],
            )?,
            preemption_workload_disruptions: hist(
                "scheduler_preemption_workload_disruptions",
                "Number of workload preemption units being preempted, a whole pod group (disruptionMode all) or a single pod (disruptionMode single) each.",
                exponential_buckets(1.0, 2.0, 11)?,
                &["preemptor"],
            )?,
            preemption_evaluation_duration: hist(
                "scheduler_preemption_evaluation_duration_seconds",
                "Duration in seconds for identifying the target preemption victims.",
                exponential_buckets(0.001, 2.0, 16)?,
                &["preemptor", "result"],
            )?,
            preemption_execution_duration: hist(
                "scheduler_preemption_execution_duration_seconds",
                "Duration in seconds for preempting the target preemption victims, which does not block the scheduling of other pods.",
                exponential_buckets(0.001, 2.0, 16)?,
                &["preemptor", "result"],
            )?,
            preemption_pdb_violations: counter(
                "scheduler_preemption_pdb_violations_total",
                "Total number of pod disruption budget violations caused by preemption.",
                &["preemptor"],
            )?,
            generated_placements: counter(
                "scheduler_generated_placements_total",
                "Number of candidate placements generated when scheduling pod groups.",
                &["profile"],
            )?,
            placement_evaluations: counter(
                "scheduler_placement_evaluations_total",
                "Number of candidate placements evaluated when scheduling pod groups, by result: 'feasible' when the pod group fit into the placement, 'infeasible' when it did not.",
                &["result", "profile"],
            )?,
            placement_evaluation_duration: hist(
                "scheduler_placement_evaluation_duration_seconds",
                "Latency in seconds of evaluating one candidate placement when scheduling pod groups, by result ('feasible' or 'infeasible').",
                exponential_buckets(0.001, 2.0, 15)?,
                &["result", "profile"],
            )?,
            preemption_tasks_duration: hist(
                "scheduler_preemption_goroutines_duration_seconds",
                "(Deprecated since 1.37.0) Duration in seconds for running goroutines for the preemption.",
                exponential_buckets(0.01, 2.0, 20)?,
                &["result"],
            )?,
            preemption_tasks: counter(
                "scheduler_preemption_goroutines_execution_total",
                "Number of preemption goroutines executed.",
                &["result"],
            )?,
        })
    }

    /// Registers what the gates turn on, as kube-scheduler does: the eviction-task series always
    /// (preemption here is always asynchronous), the pod-group and workload-preemption series
    /// with GenericWorkload, the placement series with TopologyAwareWorkloadScheduling.
    pub(super) fn register(
        &self,
        registry: &Registry,
        gates: &FeatureGates,
    ) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.preemption_tasks_duration.clone()))?;
        registry.register(Box::new(self.preemption_tasks.clone()))?;
        if gates.enabled("GenericWorkload") {
            registry.register(Box::new(self.podgroup_schedule_attempts.clone()))?;
            registry.register(Box::new(self.podgroup_attempt_duration.clone()))?;
            registry.register(Box::new(self.podgroup_algorithm_duration.clone()))?;
            registry.register(Box::new(self.workload_preemption_attempts.clone()))?;
            registry.register(Box::new(self.workload_preemption_victims.clone()))?;
            registry.register(Box::new(self.preemption_workload_disruptions.clone()))?;
            registry.register(Box::new(self.preemption_evaluation_duration.clone()))?;
            registry.register(Box::new(self.preemption_execution_duration.clone()))?;
            registry.register(Box::new(self.preemption_pdb_violations.clone()))?;
        }
        if gates.enabled("TopologyAwareWorkloadScheduling") {
            registry.register(Box::new(self.generated_placements.clone()))?;
            registry.register(Box::new(self.placement_evaluations.clone()))?;
            registry.register(Box::new(self.placement_evaluation_duration.clone()))?;
        }
        Ok(())
    }

    /// One pod-group attempt ended with `result` after `elapsed` (since its member was popped).
    pub(crate) fn podgroup_attempt(&self, result: &str, profile: &str, elapsed: Duration) {
        self.podgroup_attempt_duration
            .with_label_values(&[result, profile])
            .observe(elapsed.as_secs_f64());
        self.podgroup_schedule_attempts
            .with_label_values(&[result, profile])
            .inc();
    }

    /// The pod-group algorithm (placement and PostFilter excluded) took `elapsed` since the pop.
    pub(crate) fn podgroup_algorithm(&self, elapsed: Duration) {
        self.podgroup_algorithm_duration
            .with_label_values::<&str>(&[])
            .observe(elapsed.as_secs_f64());
    }

    /// One preemption chose its victims: what they cost, by `preemptor` (`pod` or `podgroup`).
    /// The victims of a group preemption go to `scheduler_workload_preemption_victims`, a pod's to
    /// `scheduler_preemption_victims` (recorded by the caller).
    pub(crate) fn preemption_chosen(
        &self,
        preemptor: &'static str,
        victims: usize,
        pdb_violations: usize,
        group_disruptions: usize,
    ) {
        if preemptor == "podgroup" {
            self.workload_preemption_victims
                .with_label_values::<&str>(&[])
                .observe(victims as f64);
        }
        if group_disruptions > 0 {
            self.preemption_workload_disruptions
                .with_label_values(&[preemptor])
                .observe(group_disruptions as f64);
        }
        if pdb_violations > 0 {
            self.preemption_pdb_violations
                .with_label_values(&[preemptor])
                .inc_by(pdb_violations as u64);
        }
    }

    /// One asynchronous eviction task of a `preemptor` ended with `result` after `elapsed`.
    pub(crate) fn preemption_executed(
        &self,
        preemptor: &'static str,
        result: &'static str,
        elapsed: Duration,
    ) {
        let secs = elapsed.as_secs_f64();
        self.preemption_execution_duration
            .with_label_values(&[preemptor, result])
            .observe(secs);
        self.preemption_tasks_duration
            .with_label_values(&[result])
            .observe(secs);
        self.preemption_tasks.with_label_values(&[result]).inc();
    }

    /// Choosing victims for a `preemptor` took `elapsed` and ended with `result`.
    pub(crate) fn preemption_evaluated(&self, preemptor: &'static str, result: Code, elapsed: Duration) {
        self.preemption_evaluation_duration
            .with_label_values(&[preemptor, result.as_str()])
            .observe(elapsed.as_secs_f64());
    }

    /// `count` candidate placements were generated for one group.
    pub(crate) fn placements_generated(&self, profile: &str, count: usize) {
        self.generated_placements
            .with_label_values(&[profile])
            .inc_by(count as u64);
    }

    /// One candidate placement was tried: the group fit (`feasible`) or not, in `elapsed`.
    pub(crate) fn placement_evaluated(&self, profile: &str, feasible: bool, elapsed: Duration) {
        let result = if feasible { "feasible" } else { "infeasible" };
        self.placement_evaluations
            .with_label_values(&[result, profile])
            .inc();
        self.placement_evaluation_duration
            .with_label_values(&[result, profile])
            .observe(elapsed.as_secs_f64());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::Metrics;
    use super::*;

    /// The two workload gates as given (unisched turns both on by default).
    fn gates(on: &[&str]) -> FeatureGates {
        let settings: BTreeMap<String, bool> = ["GenericWorkload", "TopologyAwareWorkloadScheduling"]
            .iter()
            .map(|g| (g.to_string(), on.contains(g)))
            .collect();
        FeatureGates::from_settings(settings).unwrap()
    }

    /// Observes one of each series and returns the exposition.
    fn exported(gates: &FeatureGates) -> String {
        let m = Metrics::new().unwrap();
        m.record_feature_gates(gates).unwrap();
        let w = &m.workload;
        w.podgroup_attempt(SCHEDULED, "unisched", Duration::from_millis(3));
        w.podgroup_algorithm(Duration::from_millis(2));
        w.preemption_evaluated("podgroup", Code::Success, Duration::from_millis(1));
        w.preemption_chosen("podgroup", 4, 1, 2);
        w.preemption_executed("podgroup", TASK_SUCCESS, Duration::from_millis(5));
        w.placements_generated("unisched", 3);
        w.placement_evaluated("unisched", false, Duration::from_millis(1));
        m.render()
    }

    #[test]
    fn the_gates_decide_which_series_are_exported() {
        let pod_group_series = [
            "scheduler_podgroup_schedule_attempts_total{profile=\"unisched\",result=\"scheduled\"} 1",
            "scheduler_podgroup_scheduling_attempt_duration_seconds_bucket{profile=\"unisched\",result=\"scheduled\",le=\"0.004\"} 1",
            "scheduler_podgroup_scheduling_algorithm_duration_seconds_count 1",
            "scheduler_workload_preemption_victims_sum 4",
            "scheduler_preemption_workload_disruptions_sum{preemptor=\"podgroup\"} 2",
            "scheduler_preemption_pdb_violations_total{preemptor=\"podgroup\"} 1",
            "scheduler_preemption_evaluation_duration_seconds_count{preemptor=\"podgroup\",result=\"Success\"} 1",
            "scheduler_preemption_execution_duration_seconds_count{preemptor=\"podgroup\",result=\"success\"} 1",
        ];
        let placement_series = [
            "scheduler_generated_placements_total{profile=\"unisched\"} 3",
            "scheduler_placement_evaluations_total{profile=\"unisched\",result=\"infeasible\"} 1",
            "scheduler_placement_evaluation_duration_seconds_count{profile=\"unisched\",result=\"infeasible\"} 1",
        ];
        let always = "scheduler_preemption_goroutines_execution_total{result=\"success\"} 1";

        let off = exported(&gates(&[]));
        assert!(off.contains(always), "{off}");
        for s in pod_group_series.iter().chain(&placement_series) {
            let name = s.split(['{', ' ']).next().unwrap_or_default();
            assert!(!off.contains(name), "{name} without its gate");
        }

        let workloads = exported(&gates(&["GenericWorkload"]));
        for s in pod_group_series {
            assert!(workloads.contains(s), "missing {s}");
        }
        assert!(!workloads.contains("scheduler_generated_placements_total"));

        let topology = exported(&gates(&["GenericWorkload", "TopologyAwareWorkloadScheduling"]));
        for s in pod_group_series.iter().chain(&placement_series) {
            assert!(topology.contains(s), "missing {s}");
        }
    }
}

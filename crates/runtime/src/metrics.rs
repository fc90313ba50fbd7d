//! Prometheus metrics with upstream names, types, labels and buckets, plus `unisched_*` metrics
//! for what upstream lacks.
//!
//! Dashboards and alerts written for kube-scheduler key on these names, so they are a compatibility
//! surface: change them only to follow upstream. The registry is per process (not the global
//! default) so tests can create several schedulers side by side.

use std::{sync::Arc, time::Duration};

use parking_lot::Mutex;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder, exponential_buckets,
};
use unisched_framework::{Code, DurationRecorder, FitError, FrameworkObserver};
use unisched_queue::QueueObserver;

mod workload;

pub use workload::WorkloadMetrics;
pub(crate) use workload::{
    ERROR as PODGROUP_ERROR, SCHEDULED as PODGROUP_SCHEDULED, TASK_ERROR, TASK_SUCCESS,
    UNSCHEDULABLE as PODGROUP_UNSCHEDULABLE, WAITING_ON_PREEMPTION as PODGROUP_WAITING_ON_PREEMPTION,
};

/// A metric could not be created or registered (a programming error: duplicate names).
#[derive(Debug, thiserror::Error)]
#[error("metrics: {0}")]
pub struct MetricsError(#[from] prometheus::Error);

/// Every metric the scheduler exports.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    /// `scheduler_schedule_attempts_total{result,profile}`.
    pub schedule_attempts: IntCounterVec,
    /// `scheduler_scheduling_attempt_duration_seconds{result,profile}`.
    pub attempt_duration: HistogramVec,
    /// `scheduler_scheduling_algorithm_duration_seconds`.
    pub algorithm_duration: HistogramVec,
    /// `scheduler_pod_scheduling_sli_duration_seconds{attempts}`.
    pub sli_duration: HistogramVec,
    /// `scheduler_pod_scheduling_attempts`.
    pub pod_scheduling_attempts: HistogramVec,
    /// `scheduler_framework_extension_point_duration_seconds{extension_point,status,profile}`.
    pub extension_point_duration: HistogramVec,
    /// `scheduler_plugin_execution_duration_seconds{plugin,extension_point,status}`.
    pub plugin_duration: HistogramVec,
    /// `scheduler_pending_pods{queue}`.
    pub pending_pods: IntGaugeVec,
    /// `scheduler_queue_incoming_pods_total{queue,event}`.
    pub queue_incoming: IntCounterVec,
    /// `scheduler_unschedulable_pods{plugin,profile}`.
    pub unschedulable_pods: IntGaugeVec,
    /// `scheduler_cache_size{type}`.
    pub cache_size: IntGaugeVec,
    /// `scheduler_goroutines{operation}` (tasks in flight, the closest Rust analogue).
    pub goroutines: IntGaugeVec,
    /// `scheduler_extender_request_duration_seconds{extender,verb,result}`: calls to scheduler
    /// extenders (upstream has no metric for them).
    pub extender_calls: HistogramVec,
    /// `scheduler_preemption_attempts_total`.
    pub preemption_attempts: IntCounter,
    /// `scheduler_preemption_victims`.
    pub preemption_victims: HistogramVec,
    /// `unisched_api_writes_total{verb,resource,code}`.
    pub api_writes: IntCounterVec,
    /// `unisched_api_write_duration_seconds{verb,resource}`.
    pub api_write_duration: HistogramVec,
    /// `unisched_leader` (1 while this replica leads).
    pub leader: IntGauge,
    /// `unisched_dra_allocations_total{driver,device_class}`.
    pub dra_allocations: IntCounterVec,
    /// `unisched_extended_resource_claims_total{operation}` (create, delete).
    pub special_claims: IntCounterVec,
    /// `unisched_node_allocatable_rejections_total{resource}`.
    pub node_allocatable_rejections: IntCounterVec,
    /// `unisched_events_dropped_total`: occurrences of events lost because the event queue was full
    /// (a new event for which no queued repeat could make room, or the repeats evicted for one).
    pub events_dropped: IntCounter,
    /// `scheduler_plugin_evaluation_total{plugin,extension_point,profile}`.
    pub plugin_evaluation: IntCounterVec,
    /// `scheduler_permit_wait_duration_seconds{result}`.
    pub permit_wait: HistogramVec,
    /// `scheduler_event_handling_duration_seconds{event}`.
    pub event_handling: HistogramVec,
    /// `leader_election_master_status{name}` (client-go's; mirrors [`Self::leader`] under the lease
    /// name, see [`Self::set_lease_name`]).
    pub leader_election_master_status: IntGaugeVec,
    /// `kubernetes_feature_enabled{name,stage}` (component-base's): 1 for each enabled feature
    /// gate, 0 for each disabled one, set once at start-up by [`Self::record_feature_gates`].
    pub feature_enabled: IntGaugeVec,
    /// Pod groups, placements and workload preemption, registered by the gates that turn them on
    /// ([`Self::record_feature_gates`]).
    pub workload: WorkloadMetrics,
    lease_name: Arc<Mutex<Option<String>>>,
}

fn hist(
    name: &str,
    help: &str,
    buckets: Vec<f64>,
    labels: &[&str],
) -> Result<HistogramVec, prometheus::Error> {
    HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
}

impl Metrics {
    /// Creates and registers every metric (and the process collector on Linux).
    pub fn new() -> Result<Self, MetricsError> {
        let registry = Registry::new();
        let m = Metrics {
            schedule_attempts: IntCounterVec::new(
                Opts::new(
                    "scheduler_schedule_attempts_total",
                    "Number of attempts to schedule pods, by the result.",
                ),
                &["result", "profile"],
            )?,
            attempt_duration: hist(
                "scheduler_scheduling_attempt_duration_seconds",
                "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
                exponential_buckets(0.001, 2.0, 15)?,
                &["result", "profile"],
            )?,
            algorithm_duration: hist(
                "scheduler_scheduling_algorithm_duration_seconds",
                "Scheduling algorithm latency in seconds",
                exponential_buckets(0.001, 2.0, 15)?,
                &[],
            )?,
            sli_duration: hist(
                "scheduler_pod_scheduling_sli_duration_seconds",
                "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue",
                exponential_buckets(0.01, 2.0, 20)?,
                &["attempts"],
            )?,
            pod_scheduling_attempts: hist(
                "scheduler_pod_scheduling_attempts",
                "Number of attempts to successfully schedule a pod.",
                exponential_buckets(1.0, 2.0, 5)?,
                &[],
            )?,
            extension_point_duration: hist(
                "scheduler_framework_extension_point_duration_seconds",
                "Latency for running all plugins of a specific extension point.",
                exponential_buckets(0.0001, 2.0, 12)?,
                &["extension_point", "status", "profile"],
            )?,
            plugin_duration: hist(
                "scheduler_plugin_execution_duration_seconds",
                "Duration for running a plugin at a specific extension point.",
                exponential_buckets(0.00001, 1.5, 20)?,
                &["plugin", "extension_point", "status"],
            )?,
            pending_pods: IntGaugeVec::new(
                Opts::new(
                    "scheduler_pending_pods",
                    "Number of pending pods, by the queue type.",
                ),
                &["queue"],
            )?,
            queue_incoming: IntCounterVec::new(
                Opts::new(
                    "scheduler_queue_incoming_pods_total",
                    "Number of pods added to scheduling queues by event and queue type.",
                ),
                &["queue", "event"],
            )?,
            unschedulable_pods: IntGaugeVec::new(
                Opts::new(
                    "scheduler_unschedulable_pods",
                    "The number of unschedulable pods broken down by plugin name.",
                ),
                &["plugin", "profile"],
            )?,
            cache_size: IntGaugeVec::new(
                Opts::new(
                    "scheduler_cache_size",
                    "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
                ),
                &["type"],
            )?,
            goroutines: IntGaugeVec::new(
                Opts::new(
                    "scheduler_goroutines",
                    "Number of running tasks split by the work they do such as binding.",
                ),
                &["operation"],
            )?,
            extender_calls: hist(
                "scheduler_extender_request_duration_seconds",
                "Duration of calls to scheduler extenders in seconds, by extender (its URL prefix), verb and result.",
                exponential_buckets(0.001, 2.0, 15)?,
                &["extender", "verb", "result"],
            )?,
            preemption_attempts: IntCounter::new(
                "scheduler_preemption_attempts_total",
                "Total preemption attempts in the cluster till now",
            )?,
            preemption_victims: hist(
                "scheduler_preemption_victims",
                "Number of selected preemption victims",
                exponential_buckets(1.0, 2.0, 7)?,
                &[],
            )?,
            api_writes: IntCounterVec::new(
                Opts::new(
                    "unisched_api_writes_total",
                    "API writes by verb, resource and HTTP status code.",
                ),
                &["verb", "resource", "code"],
            )?,
            api_write_duration: hist(
                "unisched_api_write_duration_seconds",
                "Latency of API writes, retries included.",
                exponential_buckets(0.0005, 2.0, 16)?,
                &["verb", "resource"],
            )?,
            leader: IntGauge::new("unisched_leader", "1 while this replica holds the leader lease.")?,
            dra_allocations: IntCounterVec::new(
                Opts::new(
                    "unisched_dra_allocations_total",
                    "Devices allocated by the scheduler, by driver and device class.",
                ),
                &["driver", "device_class"],
            )?,
            special_claims: IntCounterVec::new(
                Opts::new(
                    "unisched_extended_resource_claims_total",
                    "Extended-resource claims created or deleted by the scheduler.",
                ),
                &["operation"],
            )?,
            node_allocatable_rejections: IntCounterVec::new(
                Opts::new(
                    "unisched_node_allocatable_rejections_total",
                    "Nodes rejected because a pod's spec plus DRA node-allocatable demand did not fit, by resource.",
                ),
                &["resource"],
            )?,
            events_dropped: IntCounter::new(
                "unisched_events_dropped_total",
                "Event occurrences dropped because the event queue was full (evicted repeats included).",
            )?,
            plugin_evaluation: IntCounterVec::new(
                Opts::new(
                    "scheduler_plugin_evaluation_total",
                    "Number of attempts to schedule pods by each plugin and the extension point (available only in PreFilter, Filter, PreScore, and Score).",
                ),
                &["plugin", "extension_point", "profile"],
            )?,
            permit_wait: hist(
                "scheduler_permit_wait_duration_seconds",
                "Duration of waiting on permit.",
                exponential_buckets(0.001, 2.0, 15)?,
                &["result"],
            )?,
            event_handling: hist(
                "scheduler_event_handling_duration_seconds",
                "Event handling latency in seconds.",
                exponential_buckets(0.0001, 2.0, 12)?,
                &["event"],
            )?,
            leader_election_master_status: IntGaugeVec::new(
                Opts::new(
                    "leader_election_master_status",
                    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
                ),
                &["name"],
            )?,
            feature_enabled: IntGaugeVec::new(
                Opts::new(
                    "kubernetes_feature_enabled",
                    "This metric records the data about the stage and enablement of a k8s feature.",
                ),
                &["name", "stage"],
            )?,
            workload: WorkloadMetrics::new()?,
            lease_name: Arc::new(Mutex::new(None)),
            registry,
        };
        let r = &m.registry;
        r.register(Box::new(m.schedule_attempts.clone()))?;
        r.register(Box::new(m.attempt_duration.clone()))?;
        r.register(Box::new(m.algorithm_duration.clone()))?;
        r.register(Box::new(m.sli_duration.clone()))?;
        r.register(Box::new(m.pod_scheduling_attempts.clone()))?;
        r.register(Box::new(m.extension_point_duration.clone()))?;
        r.register(Box::new(m.plugin_duration.clone()))?;
        r.register(Box::new(m.pending_pods.clone()))?;
        r.register(Box::new(m.queue_incoming.clone()))?;
        r.register(Box::new(m.unschedulable_pods.clone()))?;
        r.register(Box::new(m.cache_size.clone()))?;
        r.register(Box::new(m.goroutines.clone()))?;
        r.register(Box::new(m.extender_calls.clone()))?;
        r.register(Box::new(m.preemption_attempts.clone()))?;
        r.register(Box::new(m.preemption_victims.clone()))?;
        r.register(Box::new(m.api_writes.clone()))?;
        r.register(Box::new(m.api_write_duration.clone()))?;
        r.register(Box::new(m.leader.clone()))?;
        r.register(Box::new(m.dra_allocations.clone()))?;
        r.register(Box::new(m.special_claims.clone()))?;
        r.register(Box::new(m.node_allocatable_rejections.clone()))?;
        r.register(Box::new(m.events_dropped.clone()))?;
        r.register(Box::new(m.plugin_evaluation.clone()))?;
        r.register(Box::new(m.permit_wait.clone()))?;
        r.register(Box::new(m.feature_enabled.clone()))?;
        r.register(Box::new(m.event_handling.clone()))?;
        r.register(Box::new(m.leader_election_master_status.clone()))?;
        crate::rest_client::register(r)?;
        #[cfg(target_os = "linux")]
        r.register(Box::new(crate::process::ProcessMetrics::new()))?;
        // Pre-create the label sets dashboards expect to see even before the first event.
        for q in ["active", "backoff", "unschedulable", "gated"] {
            m.pending_pods.with_label_values(&[q]).set(0);
        }
        for t in ["nodes", "pods", "assumed_pods"] {
            m.cache_size.with_label_values(&[t]).set(0);
        }
        m.goroutines.with_label_values(&["binding"]).set(0);
        Ok(m)
    }

    /// Names the lease for `leader_election_master_status{name}` (set when leader election is on;
    /// without it the gauge has no series, as upstream without leader election).
    pub fn set_lease_name(&self, name: &str) {
        *self.lease_name.lock() = Some(name.to_string());
    }

    /// Counts the nodes a failed attempt lost to the KEP-5517 node-allocatable check: the
    /// DynamicResources plugin's `Insufficient <resource>` reasons (its device-allocation failures
    /// use other wording), one count per node and resource.
    pub fn observe_fit_error(&self, fit: &FitError) {
        for (_, status) in fit.diagnosis.node_to_status.iter() {
            if status.plugin() != Some(DYNAMIC_RESOURCES) {
                continue;
            }
            for reason in status.reasons() {
                if let Some(resource) = reason.strip_prefix("Insufficient ") {
                    self.node_allocatable_rejections
                        .with_label_values(&[resource])
                        .inc();
                }
            }
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        if let Some(name) = self.lease_name.lock().as_deref() {
            self.leader_election_master_status
                .with_label_values(&[name])
                .set(self.leader.get());
        }
        let mut buf = Vec::new();
        let families = self.registry.gather();
        if TextEncoder::new().encode(&families, &mut buf).is_err() {
            return String::new();
        }
        String::from_utf8(buf).unwrap_or_default()
    }

    /// One `kubernetes_feature_enabled` sample per known gate, as kube-scheduler reports them, and
    /// the metrics of the features the gates turn on. Called once, at start-up.
    pub fn record_feature_gates(&self, gates: &unisched_features::FeatureGates) -> Result<(), MetricsError> {
        for (name, stage, enabled) in gates.all() {
            self.feature_enabled
                .with_label_values(&[name, stage.label()])
                .set(i64::from(enabled));
        }
        self.workload.register(&self.registry, gates)?;
        Ok(())
    }

    /// The registry (for tests and extra collectors).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Pre-creates the per-profile series so that rate() queries have data from the start.
    pub fn init_profile(&self, profile: &str) {
        for result in ["scheduled", "unschedulable", "error"] {
            self.schedule_attempts.with_label_values(&[result, profile]);
        }
    }
}

/// The plugin whose `Insufficient` reasons are KEP-5517 node-allocatable rejections.
const DYNAMIC_RESOURCES: &str = "DynamicResources";

impl QueueObserver for Metrics {
    fn incoming(&self, queue: &'static str, event: &str) {
        self.queue_incoming.with_label_values(&[queue, event]).inc();
    }

    fn unschedulable(&self, plugin: &str, profile: &str, delta: i64) {
        self.unschedulable_pods
            .with_label_values(&[plugin, profile])
            .add(delta);
    }

    fn event_handled(&self, event: &str, elapsed: Duration) {
        self.event_handling
            .with_label_values(&[event])
            .observe(elapsed.as_secs_f64());
    }
}

impl FrameworkObserver for Metrics {
    fn extension_point(&self, profile: &str, point: &'static str, status: Code, elapsed: Duration) {
        self.extension_point_duration
            .with_label_values(&[point, status.as_str(), profile])
            .observe(elapsed.as_secs_f64());
    }

    fn plugin(&self, point: &'static str, plugin: &str, status: Code, elapsed: Duration) {
        self.plugin_duration
            .with_label_values(&[plugin, point, status.as_str()])
            .observe(elapsed.as_secs_f64());
    }

    fn plugin_success_recorder(&self, point: &'static str, plugin: &str) -> Option<DurationRecorder> {
        let series = self
            .plugin_duration
            .with_label_values(&[plugin, point, Code::Success.as_str()]);
        // A batch goes through a local histogram: one atomic add per touched bucket instead of
        // several per duration.
        Some(Box::new(move |durations| {
            let local = series.local();
            for d in durations {
                local.observe(d.as_secs_f64());
            }
            local.flush();
        }))
    }

    fn plugin_evaluated(&self, profile: &str, point: &'static str, plugin: &str) {
        self.plugin_evaluation
            .with_label_values(&[plugin, point, profile])
            .inc();
    }

    fn permit_wait(&self, status: Code, elapsed: Duration) {
        self.permit_wait
            .with_label_values(&[status.as_str()])
            .observe(elapsed.as_secs_f64());
    }

    fn task_started(&self, operation: &'static str) {
        self.goroutines.with_label_values(&[operation]).inc();
    }

    fn placements_generated(&self, profile: &str, count: usize) {
        self.workload.placements_generated(profile, count);
    }

    fn placement_evaluated(&self, profile: &str, feasible: bool, elapsed: Duration) {
        self.workload.placement_evaluated(profile, feasible, elapsed);
    }

    fn task_finished(&self, operation: &'static str) {
        self.goroutines.with_label_values(&[operation]).dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_upstream_names_and_buckets() {
        let m = Metrics::new().unwrap();
        m.init_profile("unisched");
        m.schedule_attempts
            .with_label_values(&["scheduled", "unisched"])
            .inc();
        m.attempt_duration
            .with_label_values(&["scheduled", "unisched"])
            .observe(0.003);
        m.extension_point("unisched", "Filter", Code::Success, Duration::from_micros(150));
        let text = m.render();
        assert!(
            text.contains("scheduler_schedule_attempts_total{profile=\"unisched\",result=\"scheduled\"} 1"),
            "{text}"
        );
        assert!(text.contains("scheduler_schedule_attempts_total{profile=\"unisched\",result=\"error\"} 0"));
        assert!(text.contains("scheduler_scheduling_attempt_duration_seconds_bucket{profile=\"unisched\",result=\"scheduled\",le=\"0.004\"} 1"));
        assert!(text.contains("scheduler_scheduling_attempt_duration_seconds_bucket{profile=\"unisched\",result=\"scheduled\",le=\"16.384\"} 1"));
        assert!(text.contains("scheduler_framework_extension_point_duration_seconds_count{extension_point=\"Filter\",profile=\"unisched\",status=\"Success\"} 1"));
        assert!(text.contains("scheduler_pending_pods{queue=\"gated\"} 0"));
        assert!(text.contains("# TYPE scheduler_cache_size gauge"));
    }

    /// Extender prioritize calls in flight are `scheduler_goroutines{operation="prioritizing_extender"}`.
    #[test]
    fn prioritize_tasks_are_goroutines_of_their_operation() {
        let m = Metrics::new().unwrap();
        let operation = unisched_framework::extender::PRIORITIZING_EXTENDER;
        m.task_started(operation);
        m.task_started(operation);
        let gauge = |m: &Metrics| m.goroutines.with_label_values(&[operation]).get();
        assert_eq!(gauge(&m), 2);
        assert!(
            m.render()
                .contains("scheduler_goroutines{operation=\"prioritizing_extender\"} 2")
        );
        m.task_finished(operation);
        m.task_finished(operation);
        assert_eq!(gauge(&m), 0);
    }

    /// A success recorder feeds the series `plugin` feeds for a success: one histogram, counted
    /// together.
    #[test]
    fn success_recorder_feeds_the_plugin_series() {
        let m = Metrics::new().unwrap();
        m.plugin("Filter", "NodeName", Code::Success, Duration::from_micros(3));
        let record = m
            .plugin_success_recorder("Filter", "NodeName")
            .expect("the runtime resolves recorders");
        record(&[Duration::from_micros(5)]);
        record(&[Duration::from_micros(7), Duration::from_micros(9)]);
        m.plugin(
            "Filter",
            "NodeName",
            Code::UnschedulableAndUnresolvable,
            Duration::from_micros(2),
        );
        let text = m.render();
        let count = |status: &str| {
            let prefix = format!(
                "scheduler_plugin_execution_duration_seconds_count{{extension_point=\"Filter\",plugin=\"NodeName\",status=\"{status}\"}} "
            );
            text.lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .unwrap_or_else(|| panic!("no {prefix} in {text}"))
                .to_string()
        };
        assert_eq!(count("Success"), "4");
        // A batch lands whole: its sum too (3 + 5 + 7 + 9 µs).
        let sum_prefix = "scheduler_plugin_execution_duration_seconds_sum{extension_point=\"Filter\",plugin=\"NodeName\",status=\"Success\"} ";
        let sum: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix(sum_prefix))
            .and_then(|v| v.parse().ok())
            .expect("a sum line");
        assert!((sum - 24e-6).abs() < 1e-9, "{sum}");
        assert_eq!(count("UnschedulableAndUnresolvable"), "1");
    }
}

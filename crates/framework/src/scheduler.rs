//! One pod's attempt end to end: the scheduling cycle (synchronous, one pod at a time) and the
//! binding cycle (run by the caller on another thread so that API writes never block the next pod).
//!
//! The cache and the queue live in crates above this one; they are reached through the small
//! [`SchedulerCache`] trait and through the returned values, so this module stays testable with
//! in-memory fakes. Invariant 3 of DESIGN.md lives here: every path after `assume_pod` that does
//! not end in a bound pod runs Unreserve and `forget_pod`, exactly once.

use std::{collections::BTreeSet, error::Error, sync::Arc, time::Instant};

use crate::{
    BindInFlight, Code, CycleState, FitError, Framework, PodGroupAttempt, PodInfo, PodNominator,
    PreBindInFlight, ScheduleError, ScheduleResult, SchedulingAlgorithm, Snapshot, Status,
    diagnosis::truncate_message,
};

#[cfg(test)]
mod nomination_tests;

/// What the scheduling cycle needs from the cache.
pub trait SchedulerCache: Send + Sync {
    /// Brings the snapshot up to date and returns it.
    fn update_snapshot(&self) -> Arc<Snapshot>;
    /// Adds the pod (with `spec.nodeName` set) as assumed, before it is bound.
    fn assume_pod(&self, pod: Arc<PodInfo>) -> Result<(), CacheWriteError>;
    /// Removes an assumed pod after a failure.
    fn forget_pod(&self, pod: &PodInfo) -> Result<(), CacheWriteError>;
    /// Binding was sent; the pod stays assumed until the watch confirms it.
    fn finish_binding(&self, _pod: &PodInfo) {}
    /// True when the pod is already assumed (a duplicate pop).
    fn is_assumed(&self, _uid: &str) -> bool {
        false
    }
}

/// Why the cache refused to assume or forget a pod, as the cache reported it: the cache's own
/// error type lives in a crate above this one.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct CacheWriteError(Box<dyn Error + Send + Sync>);

impl CacheWriteError {
    /// The cache's error.
    pub fn new(source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        CacheWriteError(source.into())
    }
}

impl From<String> for CacheWriteError {
    fn from(message: String) -> Self {
        CacheWriteError::new(message)
    }
}

impl From<&str> for CacheWriteError {
    fn from(message: &str) -> Self {
        CacheWriteError::new(message)
    }
}

/// Upstream pod condition reasons.
pub mod reasons {
    /// PodScheduled=False because no node fits.
    pub const UNSCHEDULABLE: &str = "Unschedulable";
    /// PodScheduled=False because of an internal error.
    pub const SCHEDULER_ERROR: &str = "SchedulerError";
}

/// A failed attempt, with everything the caller needs to requeue the pod and tell the user.
#[derive(Clone, Debug)]
pub struct SchedulingFailure {
    /// The pod as it was popped.
    pub pod: Arc<PodInfo>,
    /// The deciding status.
    pub status: Status,
    /// Set when no node fits.
    pub fit_error: Option<Box<FitError>>,
    /// `Unschedulable` or `SchedulerError`.
    pub reason: &'static str,
    /// The event/condition message, upstream format, truncated.
    pub message: String,
    /// Plugins that rejected the pod.
    pub unschedulable_plugins: BTreeSet<String>,
    /// Plugins that returned Pending.
    pub pending_plugins: BTreeSet<String>,
    /// The node PostFilter nominated, if any (`Some("")` clears a nomination).
    pub nominated_node: Option<String>,
    /// True when the pod had been assumed (a failed binding cycle): resources it held are free again,
    /// so pods waiting for them should be retried (`AssignedPodDelete`).
    pub released_assumed: bool,
}

impl SchedulingFailure {
    /// A failure that is not a fit error: an error in the scheduling cycle, or a failure after
    /// the pod was assumed (Reserve, Permit, a failed binding cycle). Upstream clears the pod's
    /// nomination after each of these, and so does this failure (`nominated_node` is `Some("")`):
    /// a preemption's nomination is for a pod that did not fit, and one the binding cycle wrote
    /// ([`nomination_before_binding`]) no longer holds.
    fn from_status(pod: Arc<PodInfo>, status: Status, released_assumed: bool) -> Self {
        let rejected = status.is_rejected();
        let mut unschedulable_plugins = BTreeSet::new();
        let mut pending_plugins = BTreeSet::new();
        if let Some(p) = status.plugin() {
            match status.code() {
                Code::Pending => {
                    pending_plugins.insert(p.to_string());
                }
                Code::Unschedulable | Code::UnschedulableAndUnresolvable => {
                    unschedulable_plugins.insert(p.to_string());
                }
                _ => {}
            }
        }
        let message = if rejected {
            // A rejection after host selection concerns exactly one node.
            format!("0/1 nodes are available: {}.", status.message())
        } else {
            status.message()
        };
        let mut failure = Self::rejected_by(
            pod,
            status,
            &message,
            unschedulable_plugins,
            pending_plugins,
            released_assumed,
        );
        failure.nominated_node = Some(String::new());
        failure
    }

    /// A member of a pod group that failed as a whole: the group's verdict is the message
    /// (upstream's wording, not a node count). Only an unresolvable status named after a plugin
    /// (the group is missing) records that plugin, whose events then wake the member; for the
    /// rest the pod-group cycle and the runtime say which events may help
    /// (`pod_group::cycle::group_rejectors`, the runtime's GangScheduling fallback).
    pub fn from_pod_group(pod: Arc<PodInfo>, status: Status) -> Self {
        let mut unschedulable_plugins = BTreeSet::new();
        if status.code() == Code::UnschedulableAndUnresolvable
            && let Some(p) = status.plugin()
        {
            unschedulable_plugins.insert(p.to_string());
        }
        let message = status.message();
        Self::rejected_by(
            pod,
            status,
            &message,
            unschedulable_plugins,
            BTreeSet::new(),
            false,
        )
    }

    /// The failure for `status` with `message` (truncated as upstream truncates it) and the
    /// plugins that rejected the pod; the reason follows the status.
    fn rejected_by(
        pod: Arc<PodInfo>,
        status: Status,
        message: &str,
        unschedulable_plugins: BTreeSet<String>,
        pending_plugins: BTreeSet<String>,
        released_assumed: bool,
    ) -> Self {
        SchedulingFailure {
            pod,
            reason: if status.is_rejected() {
                reasons::UNSCHEDULABLE
            } else {
                reasons::SCHEDULER_ERROR
            },
            message: truncate_message(message),
            status,
            fit_error: None,
            unschedulable_plugins,
            pending_plugins,
            nominated_node: None,
            released_assumed,
        }
    }

    fn from_fit(pod: Arc<PodInfo>, fit: Box<FitError>, nominated: Option<String>) -> Self {
        let message = truncate_message(&fit.to_string());
        SchedulingFailure {
            pod,
            status: Status::unschedulable(message.clone()),
            reason: reasons::UNSCHEDULABLE,
            message,
            unschedulable_plugins: fit.diagnosis.unschedulable_plugins.clone(),
            pending_plugins: fit.diagnosis.pending_plugins.clone(),
            fit_error: Some(fit),
            nominated_node: nominated,
            released_assumed: false,
        }
    }
}

/// A pod assumed on a node, ready for its binding cycle.
#[derive(Debug)]
pub struct BindingTask {
    /// The attempt's state (moves to the binding thread).
    pub state: CycleState,
    /// The pod as popped.
    pub pod: Arc<PodInfo>,
    /// The pod as assumed (nodeName and plugin-provided status set).
    pub assumed: Arc<PodInfo>,
    /// The chosen node.
    pub node: String,
    /// How the node was chosen.
    pub result: ScheduleResult,
    /// When the scheduling cycle started.
    pub started: Instant,
}

/// What the scheduling cycle decided.
#[derive(Debug)]
pub enum CycleOutcome {
    /// Assumed; run [`run_binding_cycle`] next (possibly on another thread).
    Assumed(Box<BindingTask>),
    /// Not placed.
    Failed(Box<SchedulingFailure>),
    /// Not attempted (being deleted, already assumed); the caller just marks it done.
    Skipped(&'static str),
}

/// Runs the scheduling cycle for one pod.
pub fn run_scheduling_cycle(
    fwk: &Framework,
    algo: &mut SchedulingAlgorithm,
    cache: &dyn SchedulerCache,
    nominator: &dyn PodNominator,
    pod: Arc<PodInfo>,
    record_plugin_metrics: bool,
) -> CycleOutcome {
    run_member_cycle(fwk, algo, cache, nominator, pod, record_plugin_metrics, None)
}

/// The scheduling cycle of one pod, alone (`pod_group` is `None`) or as one member of a
/// pod-group cycle, which then owns what this cycle assumed.
pub(crate) fn run_member_cycle(
    fwk: &Framework,
    algo: &mut SchedulingAlgorithm,
    cache: &dyn SchedulerCache,
    nominator: &dyn PodNominator,
    pod: Arc<PodInfo>,
    record_plugin_metrics: bool,
    pod_group: Option<PodGroupAttempt>,
) -> CycleOutcome {
    let started = Instant::now();
    if pod.is_terminating() {
        return CycleOutcome::Skipped("skip schedule deleting pod");
    }
    if cache.is_assumed(&pod.uid) {
        return CycleOutcome::Skipped("pod is already assumed");
    }
    if let Some(bad) = pod.invalid_quantities().first() {
        let status = Status::unresolvable(format!(
            "pod has an invalid quantity {:?} for resource {:?}",
            bad.value, bad.resource
        ))
        .with_plugin("NodeResourcesFit");
        return CycleOutcome::Failed(Box::new(SchedulingFailure::from_status(pod, status, false)));
    }
    let snapshot = cache.update_snapshot();
    let mut state = CycleState::with_snapshot(snapshot);
    state.record_plugin_metrics = record_plugin_metrics;
    state.pod_group = pod_group;
    let result = match algo.schedule_pod(fwk, &mut state, &pod, nominator) {
        Ok(r) => r,
        Err(ScheduleError::Fit(fit, nomination)) => {
            let nominated = nomination.and_then(|n| n.nominated_node_name);
            return CycleOutcome::Failed(Box::new(SchedulingFailure::from_fit(pod, fit, nominated)));
        }
        Err(ScheduleError::Error(status)) => {
            return CycleOutcome::Failed(Box::new(SchedulingFailure::from_status(pod, status, false)));
        }
    };
    let node = result.suggested_host.clone();
    let assumed = Arc::new(fwk.prepare_assumed_pod(&state, &pod, &node));
    if let Err(e) = cache.assume_pod(assumed.clone()) {
        return CycleOutcome::Failed(Box::new(SchedulingFailure::from_status(
            pod,
            Status::error(format!("assuming pod: {e}")),
            false,
        )));
    }
    let s = fwk.run_reserve(&mut state, &assumed, &node);
    if !s.is_success() {
        fwk.run_unreserve(&mut state, &assumed, &node);
        let forget = cache.forget_pod(&assumed);
        let s = combine_forget(s, forget);
        return CycleOutcome::Failed(Box::new(SchedulingFailure::from_status(pod, s, true)));
    }
    let s = fwk.run_permit(&mut state, &assumed, &node);
    if !s.is_success() && s.code() != Code::Wait {
        fwk.run_unreserve(&mut state, &assumed, &node);
        let forget = cache.forget_pod(&assumed);
        let s = combine_forget(s, forget);
        return CycleOutcome::Failed(Box::new(SchedulingFailure::from_status(pod, s, true)));
    }
    state.release_snapshot();
    CycleOutcome::Assumed(Box::new(BindingTask {
        state,
        pod,
        assumed,
        node,
        result,
        started,
    }))
}

fn combine_forget(status: Status, forget: Result<(), CacheWriteError>) -> Status {
    match forget {
        Ok(()) => status,
        Err(e) => Status::error(format!("{}; forgetting assumed pod: {e}", status.message())),
    }
}

/// A pod that was bound.
#[derive(Debug)]
pub struct BoundPod {
    /// The pod as assumed.
    pub assumed: Arc<PodInfo>,
    /// The node.
    pub node: String,
    /// How the node was chosen.
    pub result: ScheduleResult,
    /// When its scheduling cycle started.
    pub started: Instant,
}

/// Runs Permit-wait, PreBind, Bind and PostBind. On any failure: Unreserve and forget, then the
/// failure is returned for requeueing.
pub fn run_binding_cycle(
    fwk: &Framework,
    cache: &dyn SchedulerCache,
    task: BindingTask,
) -> Result<BoundPod, Box<SchedulingFailure>> {
    let binding = start_binding_cycle(fwk, cache, task)?;
    // An interested extender binder binds instead of the Bind plugins, as upstream.
    let s = crate::extender::extender_binding(fwk.extenders(), &binding.task.assumed, &binding.task.node)
        .unwrap_or_else(|| fwk.run_bind(&binding.task.state, &binding.task.assumed, &binding.task.node));
    finish_binding_cycle(fwk, cache, binding, s)
}

/// A binding cycle past PreBind, waiting for its Bind ([`start_binding_cycle`]).
#[derive(Debug)]
pub struct BindingInProgress {
    task: BindingTask,
}

impl BindingInProgress {
    /// The cycle's state (for [`Framework::bind_future`]).
    pub fn state(&self) -> &CycleState {
        &self.task.state
    }

    /// The pod as assumed.
    pub fn assumed(&self) -> &Arc<PodInfo> {
        &self.task.assumed
    }

    /// The chosen node.
    pub fn node(&self) -> &str {
        &self.task.node
    }
}

/// A binding cycle's writes as futures ([`async_binding`]).
#[derive(Debug)]
pub struct AsyncBinding {
    /// PreBind, when some plugin has work for the pod (`None`: [`start_binding_cycle`] runs the
    /// plugins' checks and returns at once).
    pub pre_bind: Option<PreBindInFlight>,
    /// Bind.
    pub bind: BindInFlight,
}

/// The binding cycle's PreBind and Bind as futures, when it can run without a thread of its own:
/// the pod does not wait at Permit, every PreBind plugin with work for it offers a future
/// ([`Framework::pre_bind_future`]), and so does Bind ([`Framework::bind_future`]). Run it as
/// [`wait_for_permit`] (or [`start_binding_cycle`] when `pre_bind` is `None`), then
/// [`Framework::complete_pre_bind`], [`Framework::complete_bind`] and [`finish_binding_cycle`].
pub fn async_binding(fwk: &Framework, task: &BindingTask) -> Option<AsyncBinding> {
    // An extender's bind call blocks: such a cycle runs on a binding thread.
    if fwk.waits_at_permit(&task.assumed.uid)
        || crate::extender::has_interested_binder(fwk.extenders(), &task.assumed)
    {
        return None;
    }
    let pre_bind = if fwk.has_pre_bind_work(&task.state, &task.assumed, &task.node) {
        Some(fwk.pre_bind_future(&task.state, &task.assumed, &task.node)?)
    } else {
        None
    };
    let bind = fwk.bind_future(&task.state, &task.assumed, &task.node)?;
    Some(AsyncBinding { pre_bind, bind })
}

/// The node to write as the pod's `status.nominatedNodeName` before its binding cycle waits
/// (gate NominatedNodeNameForExpectation): when the pod will wait at Permit or some PreBind plugin
/// has work for it ([`Framework::run_pre_bind_pre_flights`]), binding is not immediate, and
/// autoscalers that watch pending pods should see where the pod is going meanwhile rather than
/// provision for it. A pod bound at once gets no such write (the binding says it), nor one already
/// nominated to that node. `Err` is a failed pre-flight check, which fails the binding cycle
/// ([`abandon_binding_cycle`]) before anything is written.
///
/// The caller writes the nomination on the binding cycle's side, before Permit-wait and PreBind,
/// and goes on binding whether the write succeeded or not (the nomination is a hint). The binding
/// clears it on the API server; a failed binding cycle clears it with its PodScheduled condition
/// (the failure's `nominated_node` is `Some("")`).
pub fn nomination_before_binding(fwk: &Framework, task: &BindingTask) -> Result<Option<String>, Status> {
    let pre_flight = fwk.run_pre_bind_pre_flights(&task.state, &task.assumed, &task.node);
    if !pre_flight.is_success() && !pre_flight.is_skip() {
        return Err(pre_flight);
    }
    if pre_flight.is_skip() && !fwk.waits_at_permit(&task.assumed.uid) {
        return Ok(None);
    }
    let current = task
        .assumed
        .pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .unwrap_or_default();
    Ok((current != task.node).then(|| task.node.clone()))
}

/// Fails a binding cycle before it started (a failed pre-flight check): Unreserve and forget, and
/// the failure is returned for requeueing.
pub fn abandon_binding_cycle(
    fwk: &Framework,
    cache: &dyn SchedulerCache,
    task: BindingTask,
    status: Status,
) -> Box<SchedulingFailure> {
    fail_binding(fwk, cache, BindingInProgress { task }, status)
}

/// The binding cycle's Permit-wait. On failure: Unreserve and forget, and the failure is returned
/// for requeueing.
pub fn wait_for_permit(
    fwk: &Framework,
    cache: &dyn SchedulerCache,
    task: BindingTask,
) -> Result<BindingInProgress, Box<SchedulingFailure>> {
    let binding = BindingInProgress { task };
    let s = fwk.wait_on_permit(&binding.task.assumed);
    if !s.is_success() {
        return Err(fail_binding(fwk, cache, binding, s));
    }
    Ok(binding)
}

/// The binding cycle up to Bind: Permit-wait and PreBind. On failure: Unreserve and forget, and
/// the failure is returned for requeueing.
pub fn start_binding_cycle(
    fwk: &Framework,
    cache: &dyn SchedulerCache,
    task: BindingTask,
) -> Result<BindingInProgress, Box<SchedulingFailure>> {
    let mut binding = wait_for_permit(fwk, cache, task)?;
    let BindingTask {
        state, assumed, node, ..
    } = &mut binding.task;
    let s = fwk.run_pre_bind(state, assumed, node);
    if !s.is_success() {
        return Err(fail_binding(fwk, cache, binding, s));
    }
    Ok(binding)
}

/// The binding cycle after its writes returned `bind` (Bind's status, or PreBind's failure):
/// PostBind on success; on failure (a Skip means no plugin bound the pod), Unreserve and forget,
/// and the failure is returned for requeueing.
pub fn finish_binding_cycle(
    fwk: &Framework,
    cache: &dyn SchedulerCache,
    binding: BindingInProgress,
    bind: Status,
) -> Result<BoundPod, Box<SchedulingFailure>> {
    if !bind.is_success() {
        let s = if bind.is_skip() {
            Status::error("no bind plugin bound the pod")
        } else {
            bind
        };
        return Err(fail_binding(fwk, cache, binding, s));
    }
    let BindingTask {
        state,
        assumed,
        node,
        result,
        started,
        ..
    } = binding.task;
    cache.finish_binding(&assumed);
    fwk.run_post_bind(&state, &assumed, &node);
    Ok(BoundPod {
        assumed,
        node,
        result,
        started,
    })
}

/// Undoes a failed binding cycle: Unreserve, then forget the assumed pod. The failure clears
/// the pod's nomination (see [`SchedulingFailure::from_status`]).
fn fail_binding(
    fwk: &Framework,
    cache: &dyn SchedulerCache,
    binding: BindingInProgress,
    s: Status,
) -> Box<SchedulingFailure> {
    let BindingTask {
        mut state,
        pod,
        assumed,
        node,
        ..
    } = binding.task;
    fwk.run_unreserve(&mut state, &assumed, &node);
    let forget = cache.forget_pod(&assumed);
    Box::new(SchedulingFailure::from_status(
        pod,
        combine_forget(s, forget),
        true,
    ))
}

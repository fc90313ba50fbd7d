//! The points from the chosen node to the bound pod: the assumed pod's preparation, Reserve and
//! Unreserve, Permit and its wait, PreBind, Bind and PostBind, run on the calling thread.
//!
//! Their futures' variants, for binding cycles that run on an async runtime, are in
//! `in_flight`; both report the same statuses and durations.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use super::{FailureReport, run_until_failure};
use crate::{Code, CycleState, Framework, PodInfo, Status};

/// Reserve plugins may reject the pod (the caller then runs Unreserve).
const RESERVE: FailureReport = FailureReport::rejections_stand("Reserve");
/// Permit plugins may reject the pod.
const PERMIT: FailureReport = FailureReport::rejections_stand("Permit");
/// PreBind plugins may reject the pod.
pub(super) const PRE_BIND: FailureReport = FailureReport::rejections_stand("PreBind");
/// Bind plugins may reject the pod.
const BIND: FailureReport = FailureReport::rejections_stand("Bind");

/// The longest a Permit plugin may make a pod wait, as upstream caps it.
const MAX_PERMIT_WAIT: Duration = Duration::from_secs(15 * 60);

/// What a Bind plugin's `status` makes of the Bind point, with the code it reports: a Skip
/// leaves the pod to the next plugin (a plain Skip when none is left), a success binds it, any
/// other status is the plugin's failure.
pub(super) fn bind_outcome(plugin: &str, status: Status) -> (Status, Code) {
    if status.is_skip() {
        (Status::skip(), Code::Skip)
    } else if status.is_success() {
        (status, Code::Success)
    } else {
        BIND.report(plugin, status)
    }
}

impl Framework {
    /// Lets plugins add their per-node results to the pod the cache will assume.
    pub fn prepare_assumed_pod(&self, state: &CycleState, pod: &PodInfo, node: &str) -> PodInfo {
        let mut assumed = pod.assumed_on(node);
        if self.assumed_pod.is_empty() {
            return assumed;
        }
        // One copy of the pod for all plugins; derived anew only if one of them changed it (a
        // DRA pod whose claims carry no node-allocatable statuses, the common case, is not).
        let mut changed = false;
        let obj = Arc::make_mut(&mut assumed.pod);
        for p in &self.assumed_pod {
            changed |= p.prepare_assumed_pod(state, obj, node);
        }
        if changed {
            assumed = PodInfo::from_arc(assumed.pod.clone());
        }
        assumed
    }

    /// Reserve; on failure the caller runs Unreserve.
    pub fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let record = state.record_plugin_metrics;
        self.timed("Reserve", || {
            run_until_failure(&self.reserve, RESERVE, |p| {
                Some(self.plugin_timed(
                    record,
                    "Reserve",
                    p.name(),
                    || p.reserve(state, pod, node),
                    Status::code,
                ))
            })
        })
    }

    /// Unreserve, in reverse order of Reserve. Every plugin runs: there is nothing to fail.
    pub fn run_unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        self.timed("Unreserve", || {
            let record = state.record_plugin_metrics;
            for p in self.reserve.iter().rev() {
                self.plugin_timed(
                    record,
                    "Unreserve",
                    p.name(),
                    || p.unreserve(state, pod, node),
                    |()| Code::Success,
                );
            }
            ((), Code::Success)
        });
    }

    /// Permit. Wait registers the pod as waiting (see [`Framework::wait_on_permit`]).
    pub fn run_permit(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let record = state.record_plugin_metrics;
        self.timed("Permit", || {
            let mut waits: BTreeMap<String, Duration> = BTreeMap::new();
            let failed = run_until_failure(&self.permit, PERMIT, |p| {
                let (s, timeout) = self.plugin_timed(
                    record,
                    "Permit",
                    p.name(),
                    || p.permit(state, pod, node),
                    |(s, _)| s.code(),
                );
                if s.code() == Code::Wait {
                    waits.insert(p.name().to_string(), timeout.min(MAX_PERMIT_WAIT));
                    return None;
                }
                Some(s)
            });
            if failed.1 != Code::Success || waits.is_empty() {
                return failed;
            }
            self.waiting_pods.add(&pod.uid, waits);
            let msg = format!(
                "one or more plugins asked to wait and no plugin rejected pod {:?}",
                pod.name
            );
            (Status::new(Code::Wait, [msg]), Code::Wait)
        })
    }

    /// Blocks until every plugin that asked the pod to wait allows it, one rejects it, or a timeout.
    pub fn wait_on_permit(&self, pod: &PodInfo) -> Status {
        if !self.waiting_pods.contains(&pod.uid) {
            return self.waiting_pods.wait(&pod.uid);
        }
        let start = Instant::now();
        let s = self.waiting_pods.wait(&pod.uid);
        self.observer.permit_wait(s.code(), start.elapsed());
        s
    }

    /// True while `uid` waits at Permit: its binding cycle may block in
    /// [`wait_on_permit`](Self::wait_on_permit).
    pub fn waits_at_permit(&self, uid: &str) -> bool {
        self.waiting_pods.contains(uid)
    }

    /// PreBind. A plugin whose pre-flight check Skips has nothing to do for this pod and is
    /// neither run nor timed.
    pub fn run_pre_bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let record = state.record_plugin_metrics;
        self.timed("PreBind", || {
            run_until_failure(&self.pre_bind, PRE_BIND, |p| {
                if p.pre_bind_pre_flight(state, pod, node).is_skip() {
                    return None;
                }
                Some(self.plugin_timed(
                    record,
                    "PreBind",
                    p.name(),
                    || p.pre_bind(state, pod, node),
                    Status::code,
                ))
            })
        })
    }

    /// PreBind's pre-flight checks, all of them, before the binding cycle decides whether to tell
    /// the cluster where the pod is going: Success when some plugin has work for the pod, Skip
    /// when none has (or there are no PreBind plugins), an Error when a check failed or answered
    /// with a code a pre-flight may not use (a rejection included: the node is chosen by now).
    pub fn run_pre_bind_pre_flights(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        self.timed("PreBindPreFlight", || {
            let mut outcome = Status::skip();
            for p in &self.pre_bind {
                let s = p.pre_bind_pre_flight(state, pod, node);
                match s.code() {
                    Code::Success => outcome = Status::success(),
                    Code::Skip => {}
                    Code::Error => {
                        let msg = format!("running PreBindPreFlight {:?}: {}", p.name(), s.message());
                        return (Status::error(msg), Code::Error);
                    }
                    other => {
                        let msg = format!(
                            "PreBindPreFlight {} returned {:?}, which is unsupported. It is supposed to return Success, Skip, or Error status",
                            p.name(),
                            other.as_str()
                        );
                        return (Status::error(msg), Code::Error);
                    }
                }
            }
            let code = outcome.code();
            (outcome, code)
        })
    }

    /// True when some PreBind plugin has work for this pod.
    pub fn has_pre_bind_work(&self, state: &CycleState, pod: &PodInfo, node: &str) -> bool {
        self.pre_bind
            .iter()
            .any(|p| !p.pre_bind_pre_flight(state, pod, node).is_skip())
    }

    /// Bind: the first plugin that does not Skip decides.
    pub fn run_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        self.timed("Bind", || {
            let decided = self.bind.iter().find_map(|p| {
                let s = self.plugin_timed(
                    state.record_plugin_metrics,
                    "Bind",
                    p.name(),
                    || p.bind(state, pod, node),
                    Status::code,
                );
                (!s.is_skip()).then_some((p, s))
            });
            match decided {
                Some((p, s)) => bind_outcome(p.name(), s),
                None => (Status::skip(), Code::Skip),
            }
        })
    }

    /// PostBind: informational, every plugin runs.
    pub fn run_post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        self.timed("PostBind", || {
            for p in &self.post_bind {
                self.plugin_timed(
                    state.record_plugin_metrics,
                    "PostBind",
                    p.name(),
                    || p.post_bind(state, pod, node),
                    |()| Code::Success,
                );
            }
            ((), Code::Success)
        });
    }
}

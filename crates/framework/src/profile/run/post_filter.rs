//! PostFilter: what to do for a pod no node can take (preemption, upstream's only in-tree
//! plugin), with a [`FrameworkHandle`] that lets the plugins dry-run Filter with nominated pods;
//! and its group counterpart, podGroupPostFilter, for a pod group that does not fit as a whole.
//!
//! Not the shared loop: the first success ends PostFilter, and rejections accumulate into one
//! Unschedulable status instead of stopping it.

use std::sync::Arc;

use crate::{
    Code, CycleState, Framework, FrameworkHandle, NodeInfo, NodeToStatus, PodGroupPostFilterInput,
    PodGroupPostFilterResult, PodGroupSimulator, PodInfo, PodNominator, PostFilterResult, Status,
};

/// The [`FrameworkHandle`] PostFilter plugins get: this profile plus the queue's nominations.
struct NominatingHandle<'a> {
    fwk: &'a Framework,
    nominator: &'a dyn PodNominator,
}

impl FrameworkHandle for NominatingHandle<'_> {
    fn profile_name(&self) -> &str {
        self.fwk.profile_name()
    }

    fn run_filter_with_nominated(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let nominated = self.nominator.nominated_pods_for_node(node.name());
        self.fwk.run_filter_with_nominated(state, pod, node, &nominated)
    }

    fn run_pre_filter_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_add: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        self.fwk.run_pre_filter_add_pod(state, pod, to_add, node)
    }

    fn run_pre_filter_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_remove: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        self.fwk.run_pre_filter_remove_pod(state, pod, to_remove, node)
    }

    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.nominator.nominated_pods_for_node(node)
    }

    fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        self.fwk.run_reserve(state, pod, node)
    }

    fn run_unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        self.fwk.run_unreserve(state, pod, node);
    }

    fn reject_waiting_pod(&self, uid: &str, plugin: &str, reason: &str) -> bool {
        let waiting = self.fwk.waiting_pods();
        if !waiting.uids().iter().any(|u| u == uid) {
            return false;
        }
        waiting.reject(uid, plugin, reason);
        true
    }

    fn extenders(&self) -> crate::extender::Extenders {
        self.fwk.extenders().clone()
    }
}

impl Framework {
    /// PostFilter: the first Success wins; UnschedulableAndUnresolvable stops; otherwise reasons
    /// accumulate into one Unschedulable status.
    /// `nominator` supplies the nominated pods the plugins' dry runs must respect.
    pub fn run_post_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        statuses: &NodeToStatus,
        nominator: &dyn PodNominator,
    ) -> (Option<PostFilterResult>, Status) {
        let handle = NominatingHandle { fwk: self, nominator };
        let record = state.record_plugin_metrics;
        self.timed("PostFilter", || {
            let mut reasons = Vec::new();
            let mut first_rejector: Option<String> = None;
            let mut result = None;
            for p in &self.post_filter {
                let (r, s) = self.plugin_timed(
                    record,
                    "PostFilter",
                    p.name(),
                    || p.post_filter(&handle, state, pod, statuses),
                    |(_, s)| s.code(),
                );
                if s.is_success() {
                    return ((r, s.with_plugin(p.name())), Code::Success);
                }
                if s.code() == Code::UnschedulableAndUnresolvable {
                    let code = s.code();
                    return ((r, s.with_plugin(p.name())), code);
                }
                if !s.is_rejected() {
                    return ((None, s.with_plugin(p.name())), Code::Error);
                }
                reasons.extend(s.reasons());
                first_rejector.get_or_insert_with(|| p.name().to_string());
                if r.as_ref().is_some_and(|r| r.nominated_node_name.is_some()) {
                    result = r;
                }
            }
            let mut s = Status::new(Code::Unschedulable, reasons);
            if let Some(p) = first_rejector {
                s.set_plugin(p);
            }
            ((result, s), Code::Unschedulable)
        })
    }

    /// True when the profile has podGroupPostFilter plugins.
    pub fn has_pod_group_post_filter_plugins(&self) -> bool {
        !self.pod_group_post_filter.is_empty()
    }

    /// podGroupPostFilter, as upstream's `RunPodGroupPostFilterPlugins`: the first Success wins;
    /// UnschedulableAndUnresolvable stops, named after its plugin; Unschedulable reasons
    /// accumulate; anything else is an error naming the plugin.
    pub fn run_pod_group_post_filter(
        &self,
        nominator: &dyn PodNominator,
        input: &PodGroupPostFilterInput<'_>,
        simulator: &mut dyn PodGroupSimulator,
    ) -> (Option<PodGroupPostFilterResult>, Status) {
        let handle = NominatingHandle { fwk: self, nominator };
        self.timed("PodGroupPostFilter", || {
            let mut reasons = Vec::new();
            let mut first_rejector: Option<String> = None;
            for p in &self.pod_group_post_filter {
                let (r, s) = p.pod_group_post_filter(&handle, input, simulator);
                match s.code() {
                    Code::Success => return ((r, s), Code::Success),
                    Code::UnschedulableAndUnresolvable => {
                        return ((r, s.with_plugin(p.name())), Code::UnschedulableAndUnresolvable);
                    }
                    Code::Unschedulable => {
                        reasons.extend(s.reasons());
                        first_rejector.get_or_insert_with(|| p.name().to_string());
                    }
                    _ => {
                        let error = Status::error(format!(
                            "error in {:?} PodGroupPostFilter plugins: {}",
                            p.name(),
                            s.message()
                        ))
                        .with_plugin(p.name());
                        return ((None, error), Code::Error);
                    }
                }
            }
            let mut s = Status::new(Code::Unschedulable, reasons);
            if let Some(p) = first_rejector {
                s.set_plugin(p);
            }
            ((None, s), Code::Unschedulable)
        })
    }
}

//! The group's placement tried again on a cluster without some pods (pod-group preemption's dry
//! run, upstream's `PodGroupSchedulingFunc`).
//!
//! The cycle runs unchanged, with the same plugins, on an [`OverlayCache`]: a private copy of
//! the snapshot with the removed pods gone, where members are assumed and forgotten without the
//! real cache ever seeing them. Plugins that keep their own ledger beside the snapshot (DRA's
//! allocated devices) learn which pods are gone from the attempt itself
//! ([`PodGroupAttempt::removed`](crate::PodGroupAttempt)), as single-pod preemption tells them
//! through its RemovePod extensions. Whatever the members reserved is taken back before the
//! placement is returned: only their cycle states are kept, for the victims' reprieve.

use std::{
    collections::{BTreeMap, HashSet},
    sync::Arc,
};

use parking_lot::Mutex;

use super::{
    PodGroupInfo, PodGroupSimulator, ProposedAssignment, SimulatedPlacement,
    cycle::{Context, Outcome, Tried, place},
};
use crate::{
    BindingTask, CacheWriteError, Framework, PodInfo, PodNominator, SchedulerCache, SchedulingAlgorithm,
    Snapshot,
};

/// A snapshot of its own, over the real cache's: removed pods are gone, and what the cycle
/// assumes stays here.
pub(super) struct OverlayCache<'a> {
    base: &'a dyn SchedulerCache,
    snapshot: Mutex<Snapshot>,
    assumed: Mutex<HashSet<String>>,
}

impl<'a> OverlayCache<'a> {
    /// The real cache's current snapshot without `removed`.
    pub(super) fn without(base: &'a dyn SchedulerCache, removed: &[Arc<PodInfo>]) -> Self {
        let mut snapshot = (*base.update_snapshot()).clone();
        let mut by_node: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for pod in removed {
            if let Some(node) = pod.node_name() {
                by_node.entry(node).or_default().push(&pod.uid);
            }
        }
        for (node, uids) in by_node {
            let Some(info) = snapshot.get(node) else { continue };
            let mut info = (**info).clone();
            for uid in uids {
                info.remove_pod(uid);
            }
            snapshot.replace(Arc::new(info));
        }
        OverlayCache {
            base,
            snapshot: Mutex::new(snapshot),
            assumed: Mutex::new(HashSet::new()),
        }
    }

    /// Applies `change` to the node `pod` is assumed on.
    fn change_node(
        &self,
        pod: &PodInfo,
        change: impl FnOnce(&mut crate::NodeInfo) -> bool,
    ) -> Result<(), CacheWriteError> {
        let node = pod
            .node_name()
            .ok_or_else(|| CacheWriteError::from(format!("pod {} has no node", pod.key())))?;
        let mut snapshot = self.snapshot.lock();
        let Some(info) = snapshot.get(node) else {
            return Err(format!("node {node:?} is not in the snapshot").into());
        };
        let mut info = (**info).clone();
        if !change(&mut info) {
            return Err(format!("pod {} is not assumed on node {node:?}", pod.key()).into());
        }
        snapshot.replace(Arc::new(info));
        Ok(())
    }
}

impl SchedulerCache for OverlayCache<'_> {
    fn update_snapshot(&self) -> Arc<Snapshot> {
        Arc::new(self.snapshot.lock().clone())
    }

    fn assume_pod(&self, pod: Arc<PodInfo>) -> Result<(), CacheWriteError> {
        let uid = pod.uid.clone();
        self.change_node(&pod.clone(), |info| {
            info.add_pod(pod);
            true
        })?;
        self.assumed.lock().insert(uid);
        Ok(())
    }

    fn forget_pod(&self, pod: &PodInfo) -> Result<(), CacheWriteError> {
        self.change_node(pod, |info| info.remove_pod(&pod.uid).is_some())?;
        self.assumed.lock().remove(&pod.uid);
        Ok(())
    }

    fn is_assumed(&self, uid: &str) -> bool {
        self.base.is_assumed(uid) || self.assumed.lock().contains(uid)
    }
}

/// The simulator the pod-group cycle hands to the group's PostFilter plugins.
pub(super) struct CycleSimulator<'a> {
    pub(super) fwk: &'a Framework,
    pub(super) algo: &'a mut SchedulingAlgorithm,
    pub(super) cache: &'a dyn SchedulerCache,
    pub(super) nominator: &'a dyn PodNominator,
    pub(super) group: &'a PodGroupInfo,
    pub(super) members: &'a [Arc<PodInfo>],
    pub(super) already_scheduled: usize,
    pub(super) record_plugin_metrics: bool,
}

impl PodGroupSimulator for CycleSimulator<'_> {
    fn place_without(&mut self, removed: &[Arc<PodInfo>]) -> SimulatedPlacement {
        let overlay = OverlayCache::without(self.cache, removed);
        let ctx = Context {
            fwk: self.fwk,
            cache: &overlay,
            nominator: self.nominator,
            group: self.group,
            already_scheduled: self.already_scheduled,
            record_plugin_metrics: self.record_plugin_metrics,
            removed: Some(Arc::from(removed.to_vec())),
            parent: super::Placement::all_nodes(),
            in_composite: false,
        };
        match place(&ctx, self.algo, self.members) {
            Outcome::NotTried(status) => SimulatedPlacement {
                status,
                assignments: Vec::new(),
            },
            Outcome::Tried { tried, .. } => {
                let status = tried.status.clone();
                let placed: Vec<BindingTask> = tried
                    .members
                    .into_iter()
                    .filter_map(|m| match m {
                        Some(Tried::Placed(task)) => Some(*task),
                        _ => None,
                    })
                    .collect();
                let assignments = take_back(self.fwk, &overlay, placed);
                SimulatedPlacement { status, assignments }
            }
        }
    }
}

/// Takes back what a simulated placement holds (the last placed first, as a failed try is) and
/// keeps each member's cycle state for the victims' reprieve, which runs Filter again on the
/// cluster without the removed pods and without the members.
pub(super) fn take_back(
    fwk: &Framework,
    overlay: &OverlayCache<'_>,
    mut placed: Vec<BindingTask>,
) -> Vec<ProposedAssignment> {
    for task in placed.iter_mut().rev() {
        let BindingTask {
            state, assumed, node, ..
        } = task;
        fwk.run_unreserve(state, assumed, node);
        if let Err(e) = overlay.forget_pod(assumed) {
            tracing::debug!(pod = %assumed.key(), error = %e, "forgetting a simulated member");
        }
    }
    let without_members = overlay.update_snapshot();
    placed
        .into_iter()
        .map(|task| {
            let BindingTask {
                mut state,
                pod,
                assumed,
                node,
                ..
            } = task;
            state.attach_snapshot(without_members.clone());
            ProposedAssignment {
                pod,
                assumed,
                node,
                state,
            }
        })
        .collect()
}

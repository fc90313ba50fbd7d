//! Choosing the victims on one node (upstream `SelectVictimsOnNode`).
//!
//! On a copy of the node and a deep copy of the cycle state: remove every pod of lower priority
//! than the preemptor (telling the PreFilter extensions, so that inter-pod affinity, topology
//! spread and DRA see them gone), and check that the pod then fits, with the pods nominated to the
//! node counted. If it does, put the removed pods back one by one, most important first — those
//! whose eviction would violate a PodDisruptionBudget before the others — keeping each one that
//! still lets the pod fit. What could not be put back are the victims: a minimal set in this
//! greedy order.

use std::sync::Arc;

use unisched_framework::{CycleState, FrameworkHandle, NodeInfo, PodInfo, Status};

use super::pdb::{Budget, split_by_violation};
use super::pick::{Victims, start_key};

/// Upstream reason: no pod on the node has a lower priority.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// Upstream `MoreImportantPod` as an ordering: higher priority first, then the earlier start. Ties
/// fall back to the UID so the order never depends on the node's pod order.
pub(crate) fn sort_most_important_first(pods: &mut [Arc<PodInfo>]) {
    pods.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then_with(|| start_key(a).cmp(&start_key(b)))
            .then_with(|| a.uid.cmp(&b.uid))
    });
}

fn remove(
    fwk: &dyn FrameworkHandle,
    state: &mut CycleState,
    pod: &PodInfo,
    node: &mut NodeInfo,
    victim: &Arc<PodInfo>,
) -> Result<(), Status> {
    node.remove_pod(&victim.uid);
    let s = fwk.run_pre_filter_remove_pod(state, pod, victim, node);
    if s.is_success() { Ok(()) } else { Err(s) }
}

fn add(
    fwk: &dyn FrameworkHandle,
    state: &mut CycleState,
    pod: &PodInfo,
    node: &mut NodeInfo,
    victim: &Arc<PodInfo>,
) -> Result<(), Status> {
    node.add_pod(victim.clone());
    let s = fwk.run_pre_filter_add_pod(state, pod, victim, node);
    if s.is_success() { Ok(()) } else { Err(s) }
}

/// The victims on `node` (a private copy, mutated), or the status explaining why preempting there
/// cannot help (a Filter rejection, `NO_VICTIMS`, or an error from an extension).
pub(crate) fn select_victims_on_node(
    fwk: &dyn FrameworkHandle,
    state: &mut CycleState,
    pod: &PodInfo,
    node: &mut NodeInfo,
    budgets: &[Budget],
) -> Result<Victims, Status> {
    let mut potential: Vec<Arc<PodInfo>> = node
        .pods
        .iter()
        .filter(|p| p.priority < pod.priority)
        .cloned()
        .collect();
    if potential.is_empty() {
        return Err(Status::unresolvable(NO_VICTIMS));
    }
    for v in &potential {
        remove(fwk, state, pod, node, v)?;
    }
    let fits = fwk.run_filter_with_nominated(state, pod, node);
    if !fits.is_success() {
        return Err(fits);
    }
    sort_most_important_first(&mut potential);
    let (violating, fine) = split_by_violation(&potential, budgets);
    let mut victims = Vec::new();
    let mut num_pdb_violations = 0;
    for (list, counts_violation) in [(violating, true), (fine, false)] {
        for p in list {
            add(fwk, state, pod, node, &p)?;
            if !fwk.run_filter_with_nominated(state, pod, node).is_success() {
                remove(fwk, state, pod, node, &p)?;
                if counts_violation {
                    num_pdb_violations += 1;
                }
                victims.push(p);
            }
        }
    }
    sort_most_important_first(&mut victims);
    Ok(Victims {
        pods: victims,
        num_pdb_violations,
    })
}

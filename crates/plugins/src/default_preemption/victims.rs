//! Choosing the victims on one node (upstream `SelectVictimsOnNode`).
//!
//! On a copy of the node and a deep copy of the cycle state: remove every victim of lower
//! priority than the preemptor that has a pod on the node (telling the PreFilter extensions, so
//! that inter-pod affinity, topology spread and DRA see it gone), and check that the pod then
//! fits, with the pods nominated to the node counted. If it does, put the removed victims back one
//! by one, most important first — those whose eviction would violate a PodDisruptionBudget before
//! the others — keeping each one that still lets the pod fit. What could not be put back are the
//! victims: a minimal set in this greedy order.
//!
//! A victim is a unit ([`victim`](super::victim)): a PodGroup disrupted as a whole has members on
//! other nodes too. Only this node's copy changes; the members elsewhere go through the PreFilter
//! extensions alone, with their own node as it is in the snapshot (upstream does the same: Filter
//! runs on this node only).

use unisched_framework::{CycleState, FrameworkHandle, NodeInfo, PodInfo, Snapshot, Status};

use super::pdb::{Budget, split_victims_by_violation};
use super::pick::Victims;
use super::victim::{Victim, sort_most_important_first};

/// Upstream reason: no pod on the node has a lower priority.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// The node a victim's pod is on: the copy being changed, or the snapshot's for another node.
struct Nodes<'a> {
    main: &'a mut NodeInfo,
    snapshot: &'a Snapshot,
}

impl Nodes<'_> {
    fn remove(
        &mut self,
        fwk: &dyn FrameworkHandle,
        state: &mut CycleState,
        pod: &PodInfo,
        victim: &Victim,
    ) -> Result<(), Status> {
        for v in &victim.pods {
            let s = if v.node_name() == Some(self.main.name()) {
                self.main.remove_pod(&v.uid);
                fwk.run_pre_filter_remove_pod(state, pod, v, self.main)
            } else {
                match v.node_name().and_then(|n| self.snapshot.get(n)) {
                    Some(other) => fwk.run_pre_filter_remove_pod(state, pod, v, other),
                    None => continue,
                }
            };
            if !s.is_success() {
                return Err(s);
            }
        }
        Ok(())
    }

    fn add(
        &mut self,
        fwk: &dyn FrameworkHandle,
        state: &mut CycleState,
        pod: &PodInfo,
        victim: &Victim,
    ) -> Result<(), Status> {
        for v in &victim.pods {
            let s = if v.node_name() == Some(self.main.name()) {
                self.main.add_pod(v.clone());
                fwk.run_pre_filter_add_pod(state, pod, v, self.main)
            } else {
                match v.node_name().and_then(|n| self.snapshot.get(n)) {
                    Some(other) => fwk.run_pre_filter_add_pod(state, pod, v, other),
                    None => continue,
                }
            };
            if !s.is_success() {
                return Err(s);
            }
        }
        Ok(())
    }
}

/// The victims on `node` (a private copy, mutated), or the status explaining why preempting there
/// cannot help (a Filter rejection, `NO_VICTIMS`, or an error from an extension). `candidates` are
/// the victims with a pod on the node, whatever their priority.
pub(crate) fn select_victims_on_node(
    fwk: &dyn FrameworkHandle,
    state: &mut CycleState,
    pod: &PodInfo,
    node: &mut NodeInfo,
    candidates: Vec<Victim>,
    budgets: &[Budget],
) -> Result<Victims, Status> {
    let mut potential: Vec<Victim> = candidates
        .into_iter()
        .filter(|v| v.priority < pod.priority)
        .collect();
    if potential.is_empty() {
        return Err(Status::unresolvable(NO_VICTIMS));
    }
    let snapshot = state.snapshot();
    let mut nodes = Nodes {
        main: node,
        snapshot: &snapshot,
    };
    for v in &potential {
        nodes.remove(fwk, state, pod, v)?;
    }
    let fits = fwk.run_filter_with_nominated(state, pod, nodes.main);
    if !fits.is_success() {
        return Err(fits);
    }
    sort_most_important_first(&mut potential);
    let (violating, fine) = split_victims_by_violation(potential, budgets);
    let mut victims = Vec::new();
    let mut num_pdb_violations = 0;
    let lists = [violating, fine.into_iter().map(|v| (v, 0)).collect::<Vec<_>>()];
    for list in lists {
        for (v, violations) in list {
            nodes.add(fwk, state, pod, &v)?;
            if !fwk.run_filter_with_nominated(state, pod, nodes.main).is_success() {
                nodes.remove(fwk, state, pod, &v)?;
                num_pdb_violations += violations;
                victims.push(v);
            }
        }
    }
    sort_most_important_first(&mut victims);
    Ok(Victims {
        pods: victims.into_iter().flat_map(|v| v.pods).collect(),
        num_pdb_violations,
    })
}

//! When the scheduler calls its extenders and what it makes of their answers: filter after the
//! Filter plugins, prioritize after the Score plugins, bind before the Bind plugins, as upstream.

use std::{collections::BTreeMap, sync::Arc};

use super::{EXTENDER_NAME, Extender, ExtenderError, Extenders, HostPriority, MAX_EXTENDER_PRIORITY};
use crate::{Diagnosis, FrameworkObserver, MAX_NODE_SCORE, NodeInfo, PodInfo, ScoreTable, Status};

/// The `scheduler_goroutines` operation of a prioritize call in flight (upstream's label).
pub const PRIORITIZING_EXTENDER: &str = "prioritizing_extender";

/// One prioritize call, counted as a task of [`PRIORITIZING_EXTENDER`] while it runs (also when
/// it panics), as upstream counts the goroutine of each call.
fn counted_prioritize(
    extender: &dyn Extender,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
    observer: &dyn FrameworkObserver,
) -> Result<(Vec<HostPriority>, i64), ExtenderError> {
    struct InFlight<'a>(&'a dyn FrameworkObserver);
    impl Drop for InFlight<'_> {
        fn drop(&mut self) {
            self.0.task_finished(PRIORITIZING_EXTENDER);
        }
    }
    observer.task_started(PRIORITIZING_EXTENDER);
    let _in_flight = InFlight(observer);
    extender.prioritize(pod, nodes)
}

/// Runs the extenders' filters one after the other on the nodes the Filter plugins passed, each
/// on what the previous one kept. Rejected nodes get the extender's reason in `diagnosis`
/// (unresolvable ones as such, so preemption skips them), and the pod is marked as rejected by
/// [`EXTENDER_NAME`] when an extender removed a node. An extender that fails ends the attempt
/// with an error, unless it is ignorable: then it is skipped.
pub fn find_nodes_that_pass_extenders(
    extenders: &Extenders,
    pod: &PodInfo,
    mut feasible: Vec<Arc<NodeInfo>>,
    diagnosis: &mut Diagnosis,
) -> Result<Vec<Arc<NodeInfo>>, Status> {
    let before = feasible.len();
    for extender in extenders.iter() {
        if feasible.is_empty() {
            break;
        }
        if !extender.is_interested(pod) {
            continue;
        }
        let outcome = match extender.filter(pod, &feasible) {
            Ok(outcome) => outcome,
            Err(e) if extender.is_ignorable() => {
                tracing::info!(
                    extender = extender.name(),
                    error = %e,
                    "Skipping extender as it returned error and has ignorable flag set"
                );
                continue;
            }
            Err(e) => return Err(Status::error(e)),
        };
        for (node, reason) in &outcome.failed_and_unresolvable {
            diagnosis
                .node_to_status
                .set(node.clone(), Status::unresolvable(reason.clone()));
        }
        for (node, reason) in &outcome.failed {
            // An extender that lists a node in both maps means the unresolvable one.
            if !outcome.failed_and_unresolvable.contains_key(node) {
                diagnosis
                    .node_to_status
                    .set(node.clone(), Status::unschedulable(reason.clone()));
            }
        }
        feasible = outcome.feasible;
    }
    if feasible.len() != before {
        // Extenders register no events: any cluster event may make the pod schedulable again.
        diagnosis.unschedulable_plugins.insert(EXTENDER_NAME.to_string());
    }
    Ok(feasible)
}

/// Adds the interested extenders' scores to `table` (computed by the Score plugins for `nodes`),
/// one column per extender that answered, each score scaled to the plugins' range and
/// multiplied by the extender's weight. The extenders are called at the same time; one that
/// fails gives no score (upstream ignores prioritize failures, ignorable or not). Each call in
/// flight counts in `observer`'s tasks of [`PRIORITIZING_EXTENDER`].
pub fn prioritize_with_extenders(
    extenders: &Extenders,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
    table: &mut ScoreTable,
    observer: &dyn FrameworkObserver,
) {
    let interested: Vec<_> = extenders.iter().filter(|e| e.is_interested(pod)).collect();
    if interested.is_empty() {
        return;
    }
    let answers: Vec<_> = if interested.len() == 1 {
        interested
            .iter()
            .map(|e| counted_prioritize(e.as_ref(), pod, nodes, observer))
            .collect()
    } else {
        std::thread::scope(|scope| {
            let calls: Vec<_> = interested
                .iter()
                .map(|e| scope.spawn(move || counted_prioritize(e.as_ref(), pod, nodes, observer)))
                .collect();
            calls
                .into_iter()
                .map(|c| {
                    c.join()
                        .unwrap_or_else(|_| Err(ExtenderError::new("the extender call panicked")))
                })
                .collect()
        })
    };
    let index: BTreeMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.name(), i)).collect();
    if table.totals.len() < nodes.len() {
        table.totals.resize(nodes.len(), 0);
    }
    for (extender, answer) in interested.iter().zip(answers) {
        let (priorities, weight) = match answer {
            Ok(answer) => answer,
            Err(e) => {
                tracing::debug!(
                    extender = extender.name(),
                    pod = %pod.key(),
                    error = %e,
                    "Failed to run extender's priority function. No score given by this extender."
                );
                continue;
            }
        };
        let mut column = vec![0i64; nodes.len()];
        for p in priorities {
            let Some(&i) = index.get(p.host.as_str()) else {
                continue;
            };
            let score = p
                .score
                .saturating_mul(weight)
                .saturating_mul(MAX_NODE_SCORE / MAX_EXTENDER_PRIORITY);
            column[i] = column[i].saturating_add(score);
            table.totals[i] = table.totals[i].saturating_add(score);
        }
        table.plugins.push(extender.name().to_string());
        table.weighted.push(column);
    }
}

/// True when an extender will bind the pod (the binding then needs a thread: the extender's
/// call blocks).
pub fn has_interested_binder(extenders: &Extenders, pod: &PodInfo) -> bool {
    extenders.iter().any(|e| e.is_binder() && e.is_interested(pod))
}

/// Binds through the first interested binder, as upstream does before the Bind plugins: `None`
/// when no extender binds the pod (the Bind plugins then do), else the binding's status. An
/// ignorable binder that fails leaves the pod to the next binder or the plugins.
pub fn extender_binding(extenders: &Extenders, pod: &PodInfo, node: &str) -> Option<Status> {
    for extender in extenders.iter() {
        if !extender.is_binder() || !extender.is_interested(pod) {
            continue;
        }
        match extender.bind(pod, node) {
            Ok(()) => return Some(Status::success()),
            Err(e) if extender.is_ignorable() => {
                tracing::info!(
                    extender = extender.name(),
                    error = %e,
                    "Skipping extender in bind as it returned error and has ignorable flag set"
                );
            }
            Err(e) => return Some(Status::error(e)),
        }
    }
    None
}

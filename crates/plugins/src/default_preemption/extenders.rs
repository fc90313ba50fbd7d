//! Preemption's candidates offered to the extenders that have a preempt verb, as upstream's
//! `callExtenders`: each interested one may drop candidates or change their victims, and the
//! next one sees what the previous one kept.

use std::{collections::BTreeMap, sync::Arc};

use unisched_framework::{
    NodeInfo, PodInfo, Snapshot, Status,
    extender::{Extenders, Victims as ExtenderVictims},
};

use super::pick::{Candidate, Victims};

/// The candidates the extenders keep, in the dry run's order; an error status when a
/// non-ignorable extender fails or keeps a node without victims.
pub(super) fn call_extenders(
    extenders: &Extenders,
    pod: &PodInfo,
    candidates: Vec<Candidate>,
    snapshot: &Arc<Snapshot>,
) -> Result<Vec<Candidate>, Status> {
    if extenders.is_empty() || candidates.is_empty() {
        return Ok(candidates);
    }
    let order: Vec<String> = candidates.iter().map(|c| c.node.clone()).collect();
    let mut victims: BTreeMap<String, ExtenderVictims> = candidates
        .into_iter()
        .map(|c| {
            let v = ExtenderVictims {
                pods: c.victims.pods,
                num_pdb_violations: i64::try_from(c.victims.num_pdb_violations).unwrap_or(i64::MAX),
            };
            (c.node, v)
        })
        .collect();
    let lookup = |name: &str| -> Option<Arc<NodeInfo>> { snapshot.get(name).cloned() };
    for extender in extenders.iter() {
        if !extender.supports_preemption() || !extender.is_interested(pod) {
            continue;
        }
        let mut kept = match extender.process_preemption(pod, victims.clone(), &lookup) {
            Ok(kept) => kept,
            Err(e) if extender.is_ignorable() => {
                tracing::debug!(extender = extender.name(), error = %e, "Skipped extender as it returned error and has ignorable flag set");
                continue;
            }
            Err(e) => return Err(Status::error(e)),
        };
        let empty: Vec<String> = kept
            .iter()
            .filter(|(_, v)| v.pods.is_empty())
            .map(|(n, _)| n.clone())
            .collect();
        for node in empty {
            if !extender.is_ignorable() {
                return Err(Status::error(format!(
                    "expected at least one victim pod on node {node:?}"
                )));
            }
            tracing::debug!(
                extender = extender.name(),
                node,
                "Ignored node for which the extender didn't report victims"
            );
            kept.remove(&node);
        }
        victims = kept;
        if victims.is_empty() {
            break;
        }
    }
    // The dry run's order first (it decides ties when a candidate is picked), then any node the
    // extenders added.
    let mut out = Vec::with_capacity(victims.len());
    for node in order {
        if let Some(v) = victims.remove(&node) {
            out.push(candidate(node, v));
        }
    }
    out.extend(victims.into_iter().map(|(node, v)| candidate(node, v)));
    Ok(out)
}

fn candidate(node: String, v: ExtenderVictims) -> Candidate {
    Candidate {
        node,
        victims: Victims {
            pods: v.pods,
            num_pdb_violations: usize::try_from(v.num_pdb_violations).unwrap_or(0),
        },
    }
}

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeMap;

    use unisched_framework::{
        CycleState, Framework, NoNominations, ScheduleError, SchedulingAlgorithm,
        config::KubeSchedulerProfile,
        extender::{Extender, ExtenderError, ExtenderFilterOutcome, HostPriority},
    };

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, RecordingBinder, snapshot};
    use crate::{PluginContext, Registry};

    /// What the fake extender's preempt verb does with the candidates it is given.
    #[derive(Clone, Copy)]
    enum Preempt {
        /// Keeps only this node.
        Keep(&'static str),
        /// Keeps every node but without victims.
        NoVictims,
        /// Fails.
        Fail,
    }

    struct PreemptingExtender {
        preempt: Preempt,
        ignorable: bool,
    }

    impl Extender for PreemptingExtender {
        fn name(&self) -> &str {
            "FakeExtender1"
        }
        fn is_ignorable(&self) -> bool {
            self.ignorable
        }
        fn is_interested(&self, _: &PodInfo) -> bool {
            true
        }
        fn is_filter(&self) -> bool {
            false
        }
        fn is_prioritizer(&self) -> bool {
            false
        }
        fn is_binder(&self) -> bool {
            false
        }
        fn supports_preemption(&self) -> bool {
            true
        }
        fn filter(
            &self,
            _: &PodInfo,
            nodes: &[Arc<NodeInfo>],
        ) -> Result<ExtenderFilterOutcome, ExtenderError> {
            Ok(ExtenderFilterOutcome {
                feasible: nodes.to_vec(),
                ..ExtenderFilterOutcome::default()
            })
        }
        fn prioritize(
            &self,
            _: &PodInfo,
            _: &[Arc<NodeInfo>],
        ) -> Result<(Vec<HostPriority>, i64), ExtenderError> {
            Ok((Vec::new(), 0))
        }
        fn bind(&self, _: &PodInfo, _: &str) -> Result<(), ExtenderError> {
            Err(ExtenderError::new("not a binder"))
        }
        fn process_preemption(
            &self,
            _: &PodInfo,
            mut victims: BTreeMap<String, ExtenderVictims>,
            nodes: &dyn Fn(&str) -> Option<Arc<NodeInfo>>,
        ) -> Result<BTreeMap<String, ExtenderVictims>, ExtenderError> {
            match self.preempt {
                Preempt::Keep(node) => {
                    assert!(
                        nodes("node1").is_some(),
                        "the snapshot resolves the candidates' nodes"
                    );
                    victims.retain(|n, _| n == node);
                    Ok(victims)
                }
                Preempt::NoVictims => Ok(victims
                    .into_keys()
                    .map(|n| (n, ExtenderVictims::default()))
                    .collect()),
                Preempt::Fail => Err(ExtenderError::new("extender down")),
            }
        }
    }

    fn low(name: &str, node: &str, prio: i32) -> PodInfo {
        PodBuilder::new(name)
            .node_name(node)
            .req("cpu", "2")
            .priority(prio)
            .info()
    }

    fn node(name: &str, pods: Vec<PodInfo>) -> NodeInfo {
        NodeBuilder::new(name)
            .alloc("cpu", "2")
            .alloc("memory", "8Gi")
            .alloc("pods", "110")
            .info_with(pods)
    }

    /// Preempts for a 2-CPU pod on two full nodes; without extenders node2 (whose victim has the
    /// lower priority) is chosen. Returns the nomination and the PostFilter message.
    fn preempt_with(extender: Option<PreemptingExtender>) -> Result<(Option<String>, String), String> {
        let ctx = PluginContext::new(RecordingBinder::new());
        let mut fwk = Framework::new(&KubeSchedulerProfile::default(), &Registry::in_tree(ctx)).unwrap();
        if let Some(e) = extender {
            fwk = fwk.with_extenders(Extenders::new(vec![Arc::new(e)]));
        }
        let nodes = vec![
            node("node1", vec![low("p1", "node1", 5)]),
            node("node2", vec![low("p2", "node2", 1)]),
        ];
        let mut state = CycleState::with_snapshot(snapshot(nodes));
        let pod = PodBuilder::new("p").req("cpu", "2").priority(100).info();
        match SchedulingAlgorithm::new(1, None, 7).schedule_pod(&fwk, &mut state, &pod, &NoNominations) {
            Err(ScheduleError::Fit(fit, nomination)) => Ok((
                nomination.and_then(|n| n.nominated_node_name),
                fit.diagnosis.post_filter_msg.unwrap_or_default(),
            )),
            Err(ScheduleError::Error(s)) => Err(s.message()),
            Ok(r) => panic!("scheduled on {}", r.suggested_host),
        }
    }

    /// upstream's "preemption result filtered out by extenders", and how failures are handled.
    #[test]
    fn extenders_narrow_the_candidates() {
        assert_eq!(preempt_with(None).unwrap().0.as_deref(), Some("node2"));
        let keep_node1 = PreemptingExtender {
            preempt: Preempt::Keep("node1"),
            ignorable: false,
        };
        assert_eq!(
            preempt_with(Some(keep_node1)).unwrap().0.as_deref(),
            Some("node1")
        );

        let keep_none = PreemptingExtender {
            preempt: Preempt::Keep("elsewhere"),
            ignorable: false,
        };
        let (nominated, message) = preempt_with(Some(keep_none)).unwrap();
        assert_eq!(nominated, None);
        assert!(message.contains("no candidate node for preemption"), "{message}");

        let failing = |ignorable| PreemptingExtender {
            preempt: Preempt::Fail,
            ignorable,
        };
        let err = preempt_with(Some(failing(false))).unwrap_err();
        assert!(err.contains("extender down"), "{err}");
        assert_eq!(
            preempt_with(Some(failing(true))).unwrap().0.as_deref(),
            Some("node2")
        );

        let no_victims = |ignorable| PreemptingExtender {
            preempt: Preempt::NoVictims,
            ignorable,
        };
        let err = preempt_with(Some(no_victims(false))).unwrap_err();
        assert!(err.contains("expected at least one victim pod on node"), "{err}");
        // An ignorable extender's nodes without victims are dropped: none is left.
        let (nominated, message) = preempt_with(Some(no_victims(true))).unwrap();
        assert_eq!(nominated, None);
        assert!(message.contains("no candidate node for preemption"), "{message}");
    }
}

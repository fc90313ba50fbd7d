//! DefaultPreemption: when no node fits a pod, find a node where evicting lower-priority pods
//! would make it fit, evict them, and nominate the pod to that node.
//!
//! PostFilter only, as upstream (`defaultpreemption` + `framework/preemption`):
//!
//! 1. [`eligibility`] — `preemptionPolicy: Never`, or an earlier preemption still terminating on the
//!    nominated node, stop here.
//! 2. Potential nodes are those Filter rejected as `Unschedulable` (an `UnschedulableAndUnresolvable`
//!    node cannot be fixed by evicting pods).
//! 3. Dry run ([`victims`]) on each potential node, starting at an offset derived from the pod's UID
//!    (deterministic, yet spreading different pods over different nodes), until enough candidates
//!    are found (`DefaultPreemptionArgs`) and at least one violates no PodDisruptionBudget ([`pdb`]).
//! 4. [`pick`] one candidate; hand the evictions to the [`Preemptor`] ([`execution`]), which writes
//!    asynchronously, and return the node as the pod's nomination. The pod is retried when its
//!    victims' deletions arrive, and Filter then counts it as nominated on that node.
//!
//! Messages follow upstream and are prefixed with `preemption: `; when nothing helps, the message is
//! a second `0/N nodes are available: …` histogram over the dry-run outcomes.
//!
//! While a pod's evictions are still being written it is held in PreEnqueue, as upstream's
//! asynchronous preemption does (`waiting for the preemption for this pod to be finished`; not
//! reported on the pod, it is momentary), and does not preempt again
//! ([`Preemptor::holds_until_preempted`], [`Preemptor::is_preempting`]). The victims' deletions
//! requeue it through the plugins that rejected it (this plugin's own hint for them is Skip, as
//! upstream's); the preemptor activates a pod it held once the evictions are written, in case
//! the last deletion was seen while it was held. A pod of a PodGroup is held instead while its
//! group's preemption is being written (`waiting for the preemption for this pod group to be
//! finished`). Extenders with a preempt verb may drop candidates or change their victims before
//! one is picked ([`extenders`]).
//!
//! Victims are units ([`victim`]): a PodGroup with `disruptionMode: All` is evicted whole or not
//! at all, here as in pod-group preemption. A PodGroup that does not fit as a whole preempts as
//! one ([`pod_group`], the `podGroupPostFilter` point): victims for all its members at once.

mod args;
mod eligibility;
mod execution;
mod extenders;
mod pdb;
mod pick;
mod pod_group;
#[cfg(test)]
mod pod_group_tests;
#[cfg(test)]
mod tests;
mod victim;
mod victims;

use std::{sync::Arc, time::Instant};

use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, Code, CycleState, Diagnosis, EnqueueExtensions,
    EventResource, FitError, FrameworkHandle, GroupNodeKey, GroupRef, NodeInfo, NodeToStatus, Plugin,
    PodGroupKey, PodGroupPostFilterPlugin, PodGroupStore, PodInfo, PostFilterPlugin, PostFilterResult,
    PreEnqueuePlugin, QueueingHint, Status,
};

pub use args::{
    DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE, DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE, DefaultPreemptionArgs,
};
pub use eligibility::{NOT_ELIGIBLE_NEVER, NOT_ELIGIBLE_TERMINATING, WAITING_FOR_PREEMPTION};
pub use execution::{
    DISRUPTION_TARGET, EVENT_PREEMPTED, GroupPreemptor, PreemptionCounts, PreemptionPlan, Preemptor,
    REASON_PREEMPTION_BY_SCHEDULER, RecordingPreemptor,
};
pub use pdb::{PdbLister, StaticPdbs};
pub use pick::{Candidate, Victims};
pub use pod_group::{
    NO_GROUP_VICTIMS, ONGOING_PREEMPTION, WAITING_FOR_GROUP_PREEMPTION, resolve_preemption_policy,
};
pub use victim::{Victim, VictimKind};
pub use victims::NO_VICTIMS;

use args::CandidateLimits;
use pdb::Budget;
use victim::GroupView;

/// The plugin name.
pub const NAME: &str = "DefaultPreemption";

/// Upstream reason for nodes where evicting pods cannot help.
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";

/// Upstream's message when the extenders kept no candidate.
const NO_CANDIDATE: &str = "no candidate node for preemption";

/// The plugin. See the module documentation.
pub struct DefaultPreemption {
    limits: CandidateLimits,
    preemptor: Option<Arc<dyn Preemptor>>,
    pdbs: Option<Arc<dyn PdbLister>>,
    /// The PodGroups, when pods of PodGroups are scheduled as groups (GenericWorkload): victims
    /// are then units, and groups preempt as groups.
    pod_groups: Option<Arc<PodGroupStore>>,
    /// PodGroupPreemptionPolicy: a group's own `preemptionPolicy` decides whether it preempts.
    group_preemption_policy: bool,
}

impl std::fmt::Debug for DefaultPreemption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefaultPreemption")
            .field("limits", &self.limits)
            .field("preemptor", &self.preemptor.is_some())
            .field("pdbs", &self.pdbs.is_some())
            .field("pod_groups", &self.pod_groups.is_some())
            .finish()
    }
}

/// FNV-1a: a stable hash (unlike `DefaultHasher`, fixed across releases) for the start offset.
fn stable_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn has_nomination(pod: &PodInfo) -> bool {
    pod.pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

impl DefaultPreemption {
    /// A plugin with validated args. Without a preemptor, candidates are found and the pod is
    /// nominated, but nobody is evicted; without a PDB lister, no budget is considered.
    pub fn new(
        args: &DefaultPreemptionArgs,
        preemptor: Option<Arc<dyn Preemptor>>,
        pdbs: Option<Arc<dyn PdbLister>>,
    ) -> Result<Self, crate::helper::PluginArgsError> {
        Ok(DefaultPreemption {
            limits: args.limits()?,
            preemptor,
            pdbs,
            pod_groups: None,
            group_preemption_policy: false,
        })
    }

    /// The dry run over the potential nodes: candidates in dry-run order, the per-node statuses of
    /// the nodes that cannot help, and the first error.
    fn dry_run(
        &self,
        fwk: &dyn FrameworkHandle,
        state: &CycleState,
        pod: &PodInfo,
        potential: &[&Arc<NodeInfo>],
        groups: &GroupView,
    ) -> (Vec<Candidate>, NodeToStatus, Option<Status>) {
        let pdbs = self.pdbs.as_ref().map(|l| l.list()).unwrap_or_default();
        let budgets = Budget::parse_all(&pdbs);
        let n = potential.len();
        let want = self.limits.num_candidates(n);
        let offset = usize::try_from(stable_hash(&pod.uid) % (n.max(1) as u64)).unwrap_or(0);
        let mut non_violating = Vec::new();
        let mut violating = Vec::new();
        let mut statuses = NodeToStatus::default();
        statuses.set_absent(Status::unresolvable(NOT_HELPFUL));
        let mut first_error = None;
        for i in 0..n {
            let info = potential[(offset + i) % n];
            // The common case in clusters without priorities: nothing to evict. Answer before
            // copying the node and the cycle state.
            if !info.pods.iter().any(|p| groups.priority_of(p) < pod.priority) {
                statuses.set(info.name(), Status::unresolvable(NO_VICTIMS));
                continue;
            }
            let candidates = groups.victims_on([info]);
            let mut node = (**info).clone();
            let mut st = state.deep_clone();
            let status =
                match victims::select_victims_on_node(fwk, &mut st, pod, &mut node, candidates, &budgets) {
                    Ok(v) if !v.pods.is_empty() => {
                        let c = Candidate {
                            node: info.name().to_string(),
                            victims: v,
                        };
                        if c.victims.num_pdb_violations == 0 {
                            non_violating.push(c);
                        } else {
                            violating.push(c);
                        }
                        if !non_violating.is_empty() && non_violating.len() + violating.len() >= want {
                            break;
                        }
                        continue;
                    }
                    Ok(_) => Status::error(format!(
                        "expected at least one victim pod on node {:?}",
                        info.name()
                    )),
                    Err(s) => s,
                };
            if status.code() == Code::Error && first_error.is_none() {
                first_error = Some(status.clone());
            }
            statuses.set(info.name(), status);
        }
        non_violating.extend(violating);
        (non_violating, statuses, first_error)
    }

    /// Upstream `Evaluator.Preempt`, without the `preemption: ` prefix.
    fn preempt(
        &self,
        fwk: &dyn FrameworkHandle,
        state: &CycleState,
        pod: &PodInfo,
        statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        if self.preemptor.as_ref().is_some_and(|p| p.is_preempting(&pod.uid)) {
            return (None, Status::unschedulable(WAITING_FOR_PREEMPTION));
        }
        let snapshot = state.snapshot();
        let groups = GroupView::build(self.pod_groups.as_deref(), &snapshot);
        if let Err(reason) = eligibility::check(pod, &snapshot, statuses, &|p| groups.priority_of(p)) {
            return (None, Status::unschedulable(reason));
        }
        let all = snapshot.nodes();
        let potential: Vec<&Arc<NodeInfo>> = all
            .iter()
            .filter(|n| statuses.get(n.name()).code() == Code::Unschedulable)
            .collect();
        let (candidates, node_statuses, error) = if potential.is_empty() {
            let mut s = NodeToStatus::default();
            s.set_absent(Status::unresolvable(NOT_HELPFUL));
            (Vec::new(), s, None)
        } else {
            self.dry_run(fwk, state, pod, &potential, &groups)
        };
        // The extenders with a preempt verb have their say on the candidates.
        let candidates = if candidates.is_empty() {
            candidates
        } else {
            match extenders::call_extenders(&fwk.extenders(), pod, candidates, &snapshot) {
                Ok(kept) if kept.is_empty() => return (None, Status::unschedulable(NO_CANDIDATE)),
                Ok(kept) => kept,
                Err(s) => return (None, s),
            }
        };
        let Some(chosen) = pick::pick_one(&candidates).and_then(|i| candidates.into_iter().nth(i)) else {
            if let Some(e) = error {
                return (None, e);
            }
            let fit = FitError {
                num_all_nodes: all.len(),
                diagnosis: Diagnosis {
                    node_to_status: node_statuses,
                    ..Diagnosis::default()
                },
            };
            // A nomination left over from an earlier preemption no longer holds.
            let clear = has_nomination(pod).then(|| PostFilterResult {
                nominated_node_name: Some(String::new()),
            });
            return (clear, Status::unschedulable(fit.to_string()));
        };
        let clear_nominations = fwk
            .nominated_pods_for_node(&chosen.node)
            .into_iter()
            .filter(|p| p.uid != pod.uid && p.priority < pod.priority)
            .collect();
        // A victim still waiting at Permit is not bound: reject it there instead of deleting it.
        let (rejected_at_permit, victims) = chosen
            .victims
            .pods
            .into_iter()
            .partition(|v| fwk.reject_waiting_pod(&v.uid, NAME, "preempted"));
        let plan = PreemptionPlan {
            preemptor: Arc::new(pod.clone()),
            group: None,
            node: chosen.node.clone(),
            scheduler_name: fwk.profile_name().to_string(),
            victims,
            rejected_at_permit,
            clear_nominations,
            counts: PreemptionCounts {
                pdb_violations: chosen.victims.num_pdb_violations,
                // Upstream counts group disruptions only when a group preempts.
                group_disruptions: 0,
            },
        };
        match &self.preemptor {
            Some(p) => p.execute(plan),
            None => {
                tracing::debug!(pod = %pod.key(), node = %plan.node, "no preemptor configured; not evicting")
            }
        }
        (
            Some(PostFilterResult {
                nominated_node_name: Some(chosen.node),
            }),
            Status::success(),
        )
    }
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &str {
        NAME
    }

    unisched_framework::serves!(as_pre_enqueue, as_post_filter, as_enqueue_extensions);

    /// Groups preempt as groups only where pods of PodGroups are scheduled as groups.
    fn as_pod_group_post_filter(self: Arc<Self>) -> Option<Arc<dyn PodGroupPostFilterPlugin>> {
        if self.pod_groups.is_some() {
            Some(self)
        } else {
            None
        }
    }
}

impl DefaultPreemption {
    /// Pods that belong to a PodGroup are decided as groups (GenericWorkload on and served):
    /// `groups` are the PodGroups.
    #[must_use]
    pub fn with_pod_groups(mut self, groups: Option<Arc<PodGroupStore>>) -> Self {
        self.pod_groups = groups;
        self
    }

    /// PodGroupPreemptionPolicy: whether a group's own `preemptionPolicy` decides (otherwise a
    /// member with `preemptionPolicy: Never` keeps the whole group from preempting).
    #[must_use]
    pub fn with_group_preemption_policy(mut self, on: bool) -> Self {
        self.group_preemption_policy = on;
        self
    }
}

impl PreEnqueuePlugin for DefaultPreemption {
    /// Holds the pod while its own preemption's evictions, or its group's, are still being
    /// written.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if let (Some(groups), Some(key)) = (&self.pod_groups, PodGroupKey::of_pod(&pod.pod)) {
            // A pod whose group (or whose tree's root) is not known is not this plugin's to
            // hold; with composite groups the whole tree waits for its root's preemption.
            // (Without the CompositePodGroup gate every group is its own root.)
            let id = match groups.root_of(&GroupNodeKey::Group(key)) {
                Some(GroupNodeKey::Composite(root)) => groups
                    .composite(&root)
                    .map(|c| pod_group::group_preemptor_id(GroupRef::Composite(&c))),
                Some(GroupNodeKey::Group(root)) => groups
                    .group(&root)
                    .map(|g| pod_group::group_preemptor_id(GroupRef::Group(&g))),
                None => None,
            };
            let Some(id) = id else {
                return Status::success();
            };
            return match &self.preemptor {
                Some(p) if p.holds_until_preempted(&id) => Status::unresolvable(WAITING_FOR_GROUP_PREEMPTION),
                _ => Status::success(),
            };
        }
        match &self.preemptor {
            Some(p) if p.holds_until_preempted(&pod.uid) => Status::unresolvable(WAITING_FOR_PREEMPTION),
            _ => Status::success(),
        }
    }

    /// Momentary: the pod keeps the message of the attempt that preempted.
    fn rejection_message(&self, _pod: &PodInfo, _status: &Status) -> Option<String> {
        None
    }
}

impl EnqueueExtensions for DefaultPreemption {
    /// A held pod moves on a victim's deletion; whether it is worth retrying is for the plugins
    /// that rejected it to say, so this plugin's own hint skips.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![ClusterEventWithHint::with_hint(
            ClusterEvent::new(
                EventResource::AssignedPod,
                ActionType::DELETE,
                "AssignedPodDelete",
            ),
            |_, _, _| Ok(QueueingHint::Skip),
        )]
    }
}

impl PostFilterPlugin for DefaultPreemption {
    fn post_filter(
        &self,
        fwk: &dyn FrameworkHandle,
        state: &mut CycleState,
        pod: &PodInfo,
        statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        if let Some(p) = &self.preemptor {
            p.attempted();
        }
        let started = Instant::now();
        let (result, status) = self.preempt(fwk, state, pod, statuses);
        if let Some(p) = &self.preemptor {
            p.evaluated("pod", status.code(), started.elapsed());
        }
        if status.is_rejected() {
            let msg = status.message();
            if !msg.is_empty() {
                return (result, Status::new(status.code(), [format!("preemption: {msg}")]));
            }
        }
        (result, status)
    }
}

//! Victims as units: what preemption evicts together.
//!
//! A pod is a victim on its own, unless its PodGroup asks to be disrupted as a whole
//! (`disruptionMode: All`): then every placed member of the group, on any node, is one victim —
//! evicted together or not at all, so no gang is ever left below its quorum holding resources.
//! A member of a group with `disruptionMode: Single` (or none) is a victim on its own. A victim
//! in a group has the group's priority (upstream's `GetPodPriority`), which the group's members
//! share anyway.
//!
//! Which victim matters more (upstream's `MoreImportantVictim`) decides the reprieve order: the
//! higher priority; then a group before a lone pod; then the larger group; then the earlier
//! start; then (ours, so the order never depends on the snapshot's) the first pod's UID.

use std::{
    cmp::Ordering,
    collections::{BTreeMap, HashSet},
    sync::Arc,
};

use unisched_framework::{NodeInfo, PodGroupKey, PodGroupStore, PodInfo, Snapshot};

use super::pick::start_key;

/// What a victim is, in the order of importance upstream gives the kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum VictimKind {
    /// A pod of no group.
    Pod,
    /// Of a group: every placed member of a PodGroup with `disruptionMode: All`, or one member
    /// of a group disrupted member by member (upstream ranks it with groups too).
    PodGroup,
}

/// One unit of eviction.
#[derive(Clone, Debug)]
pub struct Victim {
    /// Its pods (one for a lone pod).
    pub pods: Vec<Arc<PodInfo>>,
    /// Its priority: the group's for a member of a group, else the pod's.
    pub priority: i32,
    /// Pod or group.
    pub kind: VictimKind,
}

impl Victim {
    /// The earliest start among its pods (`(true, None)`, i.e. "now", when none started).
    fn earliest_start(&self) -> (bool, Option<k8s_openapi::jiff::Timestamp>) {
        self.pods
            .iter()
            .map(|p| start_key(p))
            .min()
            .unwrap_or((true, None))
    }

    /// Upstream's `MoreImportantVictim` as an ordering: the more important victim first.
    pub fn importance_order(a: &Victim, b: &Victim) -> Ordering {
        b.priority
            .cmp(&a.priority)
            .then_with(|| b.kind.cmp(&a.kind))
            .then_with(|| b.pods.len().cmp(&a.pods.len()))
            .then_with(|| a.earliest_start().cmp(&b.earliest_start()))
            .then_with(|| {
                let uid = |v: &Victim| v.pods.first().map(|p| p.uid.clone()).unwrap_or_default();
                uid(a).cmp(&uid(b))
            })
    }

    /// The nodes its pods are on.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.pods.iter().filter_map(|p| p.node_name())
    }
}

/// Sorts victims, the most important first.
pub fn sort_most_important_first(victims: &mut [Victim]) {
    victims.sort_by(Victim::importance_order);
}

/// The PodGroups' view preemption needs: each group's priority and disruption mode, and the
/// placed members of every group disrupted as a whole.
#[derive(Debug, Default)]
pub(crate) struct GroupView {
    /// Pod groups are scheduled (GenericWorkload): group members rank as groups.
    enabled: bool,
    /// Priority and "disrupted together" of each known group.
    groups: BTreeMap<PodGroupKey, (i32, bool)>,
    /// Placed members of the groups disrupted together, found in the snapshot.
    members: BTreeMap<PodGroupKey, Vec<Arc<PodInfo>>>,
}

impl GroupView {
    /// The view over `snapshot`; empty without a store (pods are then victims on their own, with
    /// their own priority, as upstream without GenericWorkload).
    pub(crate) fn build(store: Option<&PodGroupStore>, snapshot: &Snapshot) -> Self {
        let Some(store) = store else {
            return GroupView::default();
        };
        let groups: BTreeMap<PodGroupKey, (i32, bool)> = store
            .groups()
            .iter()
            .map(|g| (g.key.clone(), (g.priority, g.disrupted_together)))
            .collect();
        let mut members: BTreeMap<PodGroupKey, Vec<Arc<PodInfo>>> = BTreeMap::new();
        if groups.values().any(|(_, together)| *together) {
            for node in snapshot.nodes() {
                for pod in &node.pods {
                    if let Some(key) = PodGroupKey::of_pod(&pod.pod)
                        && groups.get(&key).is_some_and(|(_, together)| *together)
                    {
                        members.entry(key).or_default().push(pod.clone());
                    }
                }
            }
        }
        GroupView {
            enabled: true,
            groups,
            members,
        }
    }

    /// The pod's priority as preemption compares it: its group's, else its own.
    pub(crate) fn priority_of(&self, pod: &PodInfo) -> i32 {
        PodGroupKey::of_pod(&pod.pod)
            .and_then(|k| self.groups.get(&k))
            .map_or(pod.priority, |(priority, _)| *priority)
    }

    /// The victims the pods of `nodes` make, each once, in node and pod order.
    pub(crate) fn victims_on<'a>(&self, nodes: impl IntoIterator<Item = &'a Arc<NodeInfo>>) -> Vec<Victim> {
        let mut seen_groups: HashSet<&PodGroupKey> = HashSet::new();
        let mut out = Vec::new();
        for node in nodes {
            for pod in &node.pods {
                let key = PodGroupKey::of_pod(&pod.pod);
                let together = key
                    .as_ref()
                    .and_then(|k| self.members.get_key_value(k))
                    .filter(|(_, pods)| !pods.is_empty());
                match together {
                    Some((k, pods)) => {
                        if seen_groups.insert(k) {
                            out.push(Victim {
                                pods: pods.clone(),
                                priority: self.priority_of(pod),
                                kind: VictimKind::PodGroup,
                            });
                        }
                    }
                    None => out.push(Victim {
                        pods: vec![pod.clone()],
                        priority: self.priority_of(pod),
                        kind: if self.enabled && key.is_some() {
                            VictimKind::PodGroup
                        } else {
                            VictimKind::Pod
                        },
                    }),
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::scheduling::v1beta1::{
        AllDisruptionMode, BasicSchedulingPolicy, DisruptionMode, PodGroup, PodGroupSchedulingPolicy,
        PodGroupSpec, SingleDisruptionMode,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, snapshot};

    fn group(name: &str, priority: i32, all: Option<bool>) -> Arc<PodGroup> {
        Arc::new(PodGroup {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: PodGroupSpec {
                priority: Some(priority),
                scheduling_policy: PodGroupSchedulingPolicy {
                    basic: Some(BasicSchedulingPolicy::default()),
                    gang: None,
                },
                disruption_mode: all.map(|all| DisruptionMode {
                    all: all.then(AllDisruptionMode::default),
                    single: (!all).then(SingleDisruptionMode::default),
                }),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    /// Upstream `TestNewDomainForWorkloadPreemption` (PodGroups only): which pods make one victim.
    #[test]
    fn victims_are_pods_or_whole_groups() {
        let pod = |name: &str, node: &str, group: Option<&str>| {
            let mut b = PodBuilder::new(name).node_name(node).priority(1);
            if let Some(g) = group {
                b = b.pod_group(g);
            }
            b.info()
        };
        type Want = Vec<(Vec<&'static str>, VictimKind, i32)>;
        let cases: Vec<(&str, Vec<PodInfo>, Vec<PodInfo>, Vec<Arc<PodGroup>>, Want)> = vec![
            ("no pods", vec![], vec![], vec![], vec![]),
            (
                "pods of no group",
                vec![pod("p1", "n1", None)],
                vec![pod("p2", "n2", None)],
                vec![],
                vec![(vec!["p1"], VictimKind::Pod, 1), (vec!["p2"], VictimKind::Pod, 1)],
            ),
            (
                "a group disrupted as a whole: one victim across nodes, at the group's priority",
                vec![pod("p1", "n1", Some("pg"))],
                vec![pod("p2", "n2", Some("pg"))],
                vec![group("pg", 7, Some(true))],
                vec![(vec!["p1", "p2"], VictimKind::PodGroup, 7)],
            ),
            (
                "a group disrupted member by member: a victim per member, ranked as a group",
                vec![pod("p1", "n1", Some("pg"))],
                vec![pod("p2", "n2", Some("pg"))],
                vec![group("pg", 7, Some(false))],
                vec![
                    (vec!["p1"], VictimKind::PodGroup, 7),
                    (vec!["p2"], VictimKind::PodGroup, 7),
                ],
            ),
            (
                "no disruption mode is member by member",
                vec![pod("p1", "n1", Some("pg"))],
                vec![],
                vec![group("pg", 7, None)],
                vec![(vec!["p1"], VictimKind::PodGroup, 7)],
            ),
            (
                "a mix",
                vec![pod("p1", "n1", Some("pg")), pod("lone", "n1", None)],
                vec![pod("p2", "n2", Some("pg"))],
                vec![group("pg", 7, Some(true))],
                vec![
                    (vec!["p1", "p2"], VictimKind::PodGroup, 7),
                    (vec!["lone"], VictimKind::Pod, 1),
                ],
            ),
            (
                "a group nobody knows: its pods are victims on their own, at their own priority",
                vec![pod("p1", "n1", Some("missing"))],
                vec![],
                vec![],
                vec![(vec!["p1"], VictimKind::PodGroup, 1)],
            ),
        ];
        for (name, on_n1, on_n2, groups, want) in cases {
            let snap = snapshot([
                NodeBuilder::new("n1").info_with(on_n1),
                NodeBuilder::new("n2").info_with(on_n2),
            ]);
            let store = PodGroupStore::new();
            for g in groups {
                store.set_group(g);
            }
            let view = GroupView::build(Some(&store), &snap);
            let got: Vec<(Vec<String>, VictimKind, i32)> = view
                .victims_on(snap.nodes())
                .into_iter()
                .map(|v| {
                    (
                        v.pods.iter().map(|p| p.name.clone()).collect(),
                        v.kind,
                        v.priority,
                    )
                })
                .collect();
            let want: Vec<(Vec<String>, VictimKind, i32)> = want
                .into_iter()
                .map(|(names, kind, priority)| {
                    (names.into_iter().map(String::from).collect(), kind, priority)
                })
                .collect();
            assert_eq!(got, want, "{name}");
        }
        // Without pod groups, every pod is a victim of its own, at its own priority.
        let snap = snapshot([NodeBuilder::new("n1").info_with([pod("p1", "n1", Some("pg"))])]);
        let v = GroupView::build(None, &snap).victims_on(snap.nodes());
        assert_eq!((v[0].kind, v[0].priority), (VictimKind::Pod, 1));
    }

    /// Upstream `MoreImportantVictim`: priority, then groups before pods, then the larger group,
    /// then the earlier start.
    #[test]
    fn importance() {
        let victim = |n: usize, priority: i32, kind: VictimKind| Victim {
            pods: (0..n)
                .map(|i| PodBuilder::new(&format!("p{n}{i}{priority}")).arc())
                .collect(),
            priority,
            kind,
        };
        let mut v = vec![
            victim(1, 1, VictimKind::Pod),
            victim(2, 1, VictimKind::PodGroup),
            victim(1, 1, VictimKind::PodGroup),
            victim(1, 2, VictimKind::Pod),
        ];
        sort_most_important_first(&mut v);
        let order: Vec<(usize, i32, VictimKind)> =
            v.iter().map(|v| (v.pods.len(), v.priority, v.kind)).collect();
        assert_eq!(
            order,
            [
                (1, 2, VictimKind::Pod),
                (2, 1, VictimKind::PodGroup),
                (1, 1, VictimKind::PodGroup),
                (1, 1, VictimKind::Pod),
            ]
        );
    }
}

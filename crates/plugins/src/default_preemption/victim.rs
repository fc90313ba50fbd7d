//! Victims as units: what preemption evicts together.
//!
//! A pod is a victim on its own, unless its PodGroup asks to be disrupted as a whole
//! (`disruptionMode: All`): then every placed member of the group, on any node, is one victim —
//! evicted together or not at all, so no gang is ever left below its quorum holding resources.
//! A member of a group with `disruptionMode: Single` (or none) is a victim on its own. A victim
//! in a group has the group's priority (upstream's `GetPodPriority`), which the group's members
//! share anyway.
//!
//! With composite groups (the CompositePodGroup gate) the tree above a PodGroup counts too: the
//! unit is the *highest* group on the way up — the PodGroup or a CompositePodGroup — that asks
//! to be disrupted as a whole, and it takes every placed pod of its subtree, on any node. A
//! pod's priority is that of the highest group the walk up reaches (the tree's root, or the last
//! group before a missing parent), since the root's priority is the whole tree's.
//!
//! Which victim matters more (upstream's `MoreImportantVictim`) decides the reprieve order: the
//! higher priority; then a composite before a group before a lone pod; then the larger unit;
//! then the earlier start; then (ours, so the order never depends on the snapshot's) the first
//! pod's UID.

use std::{
    cmp::Ordering,
    collections::{BTreeMap, HashSet},
    sync::Arc,
};

use unisched_framework::{GroupNodeKey, NodeInfo, PodGroupKey, PodGroupStore, PodInfo, Snapshot};

use super::pick::start_key;

/// What a victim is, in the order of importance upstream gives the kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum VictimKind {
    /// A pod of no group.
    Pod,
    /// Of a group: every placed member of a PodGroup with `disruptionMode: All`, or one member
    /// of a group disrupted member by member (upstream ranks it with groups too).
    PodGroup,
    /// Every placed pod of a CompositePodGroup's subtree (`disruptionMode: All`).
    CompositePodGroup,
}

/// How many groups a walk up a tree visits at most (the API's depth limit), so a loop left by a
/// racing update ends.
const MAX_TREE_DEPTH: usize = 4;

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

/// What preemption reads of one PodGroup.
#[derive(Debug, Clone)]
struct GroupFacts {
    /// The priority its pods are compared at: the highest group's the walk up reaches.
    priority: i32,
    /// The unit its placed pods are evicted in, when a group on the way up is disrupted as a
    /// whole (the highest such group).
    unit: Option<GroupNodeKey>,
}

/// The PodGroups' view preemption needs: each group's priority and disruption unit, and the
/// placed pods of every unit disrupted as a whole.
#[derive(Debug, Default)]
pub(crate) struct GroupView {
    /// Pod groups are scheduled (GenericWorkload): group members rank as groups.
    enabled: bool,
    /// Priority and unit of each known PodGroup.
    groups: BTreeMap<PodGroupKey, GroupFacts>,
    /// Placed pods of the units disrupted together, found in the snapshot.
    members: BTreeMap<GroupNodeKey, Vec<Arc<PodInfo>>>,
}

/// A PodGroup's facts: its own, or (with composites) those of the walk up its tree.
fn facts_of(store: &PodGroupStore, group: &unisched_framework::PodGroupInfo) -> GroupFacts {
    let mut facts = GroupFacts {
        priority: group.priority,
        unit: group
            .disrupted_together
            .then(|| GroupNodeKey::Group(group.key.clone())),
    };
    if !store.composites_enabled() {
        return facts;
    }
    let mut visited: HashSet<PodGroupKey> = HashSet::new();
    let mut parent = group.parent.clone();
    for _ in 1..MAX_TREE_DEPTH {
        let Some(name) = parent.take() else { break };
        let key = PodGroupKey::new(group.key.namespace.clone(), name);
        if !visited.insert(key.clone()) {
            break;
        }
        let Some(composite) = store.composite(&key) else {
            break;
        };
        facts.priority = composite.priority;
        if composite.disrupted_together {
            facts.unit = Some(GroupNodeKey::Composite(key));
        }
        parent = composite.parent.clone();
    }
    facts
}

impl GroupView {
    /// The view over `snapshot`; empty without a store (pods are then victims on their own, with
    /// their own priority, as upstream without GenericWorkload).
    pub(crate) fn build(store: Option<&PodGroupStore>, snapshot: &Snapshot) -> Self {
        let Some(store) = store else {
            return GroupView::default();
        };
        let groups: BTreeMap<PodGroupKey, GroupFacts> = store
            .groups()
            .iter()
            .map(|g| (g.key.clone(), facts_of(store, g)))
            .collect();
        let mut members: BTreeMap<GroupNodeKey, Vec<Arc<PodInfo>>> = BTreeMap::new();
        if groups.values().any(|f| f.unit.is_some()) {
            for node in snapshot.nodes() {
                for pod in &node.pods {
                    if let Some(unit) = PodGroupKey::of_pod(&pod.pod)
                        .and_then(|k| groups.get(&k))
                        .and_then(|f| f.unit.clone())
                    {
                        members.entry(unit).or_default().push(pod.clone());
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

    /// The pod's priority as preemption compares it: its group's (its tree root's), else its
    /// own.
    pub(crate) fn priority_of(&self, pod: &PodInfo) -> i32 {
        PodGroupKey::of_pod(&pod.pod)
            .and_then(|k| self.groups.get(&k))
            .map_or(pod.priority, |f| f.priority)
    }

    /// The victims the pods of `nodes` make, each once, in node and pod order.
    pub(crate) fn victims_on<'a>(&self, nodes: impl IntoIterator<Item = &'a Arc<NodeInfo>>) -> Vec<Victim> {
        let mut seen_units: HashSet<&GroupNodeKey> = HashSet::new();
        let mut out = Vec::new();
        for node in nodes {
            for pod in &node.pods {
                let key = PodGroupKey::of_pod(&pod.pod);
                let together = key
                    .as_ref()
                    .and_then(|k| self.groups.get(k))
                    .and_then(|f| f.unit.as_ref())
                    .and_then(|u| self.members.get_key_value(u))
                    .filter(|(_, pods)| !pods.is_empty());
                match together {
                    Some((unit, pods)) => {
                        if seen_units.insert(unit) {
                            out.push(Victim {
                                pods: pods.clone(),
                                priority: self.priority_of(pod),
                                kind: match unit {
                                    GroupNodeKey::Group(_) => VictimKind::PodGroup,
                                    GroupNodeKey::Composite(_) => VictimKind::CompositePodGroup,
                                },
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
    use k8s_openapi::api::scheduling::v1alpha3::{
        AllCompositeDisruptionMode, CompositeDisruptionMode, CompositePodGroup, CompositePodGroupSpec,
        SingleCompositeDisruptionMode,
    };
    use k8s_openapi::api::scheduling::v1beta1::{
        AllDisruptionMode, BasicSchedulingPolicy, DisruptionMode, PodGroup, PodGroupSchedulingPolicy,
        PodGroupSpec, SingleDisruptionMode,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, snapshot};

    type Described = Vec<(Vec<String>, VictimKind, i32)>;

    /// Victims as (pod names, kind, priority), beside the wanted ones in the same form.
    fn described(got: Vec<Victim>, want: Vec<(Vec<&str>, VictimKind, i32)>) -> (Described, Described) {
        let got = got
            .into_iter()
            .map(|v| {
                (
                    v.pods.iter().map(|p| p.name.clone()).collect(),
                    v.kind,
                    v.priority,
                )
            })
            .collect();
        let want = want
            .into_iter()
            .map(|(names, kind, priority)| (names.into_iter().map(String::from).collect(), kind, priority))
            .collect();
        (got, want)
    }

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
            let (got, want) = described(view.victims_on(snap.nodes()), want);
            assert_eq!(got, want, "{name}");
        }
        // Without pod groups, every pod is a victim of its own, at its own priority.
        let snap = snapshot([NodeBuilder::new("n1").info_with([pod("p1", "n1", Some("pg"))])]);
        let v = GroupView::build(None, &snap).victims_on(snap.nodes());
        assert_eq!((v[0].kind, v[0].priority), (VictimKind::Pod, 1));
    }

    fn composite(
        name: &str,
        priority: i32,
        parent: Option<&str>,
        all: Option<bool>,
    ) -> Arc<CompositePodGroup> {
        Arc::new(CompositePodGroup {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: CompositePodGroupSpec {
                priority: Some(priority),
                parent_composite_pod_group_name: parent.map(str::to_string),
                disruption_mode: all.map(|all| CompositeDisruptionMode {
                    all: all.then(AllCompositeDisruptionMode::default),
                    single: (!all).then(SingleCompositeDisruptionMode::default),
                }),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn child(name: &str, priority: i32, parent: &str, all: Option<bool>) -> Arc<PodGroup> {
        let mut g = (*group(name, priority, all)).clone();
        g.spec.parent_composite_pod_group_name = Some(parent.into());
        Arc::new(g)
    }

    /// Upstream `TestGetHighestAllAncestor` and `TestGetPodPriority` (the composite rows): the
    /// unit is the highest group disrupted as a whole on the way up, the priority the highest
    /// group's the walk reaches; a missing parent ends the walk; without the gate the tree above
    /// a PodGroup is not read.
    #[test]
    fn a_walk_up_the_tree_finds_the_unit_and_the_priority() {
        let group_key = |n: &str| Some(GroupNodeKey::Group(PodGroupKey::new("default", n)));
        let composite_key = |n: &str| Some(GroupNodeKey::Composite(PodGroupKey::new("default", n)));
        type Case = (
            &'static str,
            bool,
            Vec<Arc<PodGroup>>,
            Vec<Arc<CompositePodGroup>>,
            Option<GroupNodeKey>,
            i32,
        );
        let cases: Vec<Case> = vec![
            (
                "a group disrupted pod by pod",
                true,
                vec![group("pg1", 1, Some(false))],
                vec![],
                None,
                1,
            ),
            (
                "a group disrupted as a whole",
                true,
                vec![group("pg1", 1, Some(true))],
                vec![],
                group_key("pg1"),
                1,
            ),
            (
                "parent composite All, group Single",
                true,
                vec![child("pg1", 1, "cpg1", Some(false))],
                vec![composite("cpg1", 5, None, Some(true))],
                composite_key("cpg1"),
                5,
            ),
            (
                "grandparent All, parent Single, group Single",
                true,
                vec![child("pg1", 1, "cpg1", Some(false))],
                vec![
                    composite("cpg1", 5, Some("cpg2"), Some(false)),
                    composite("cpg2", 9, None, Some(true)),
                ],
                composite_key("cpg2"),
                9,
            ),
            (
                "the highest All wins when both say All",
                true,
                vec![child("pg1", 1, "cpg1", Some(true))],
                vec![composite("cpg1", 5, None, Some(true))],
                composite_key("cpg1"),
                5,
            ),
            (
                "a root All over a group All: the root",
                true,
                vec![child("pg1", 1, "cpg1", Some(true))],
                vec![
                    composite("cpg1", 5, Some("cpg2"), None),
                    composite("cpg2", 9, None, Some(true)),
                ],
                composite_key("cpg2"),
                9,
            ),
            (
                "a missing parent: the group's own unit and priority",
                true,
                vec![child("pg1", 1, "cpg1", Some(true))],
                vec![],
                group_key("pg1"),
                1,
            ),
            (
                "a missing grandparent: the parent's priority",
                true,
                vec![child("pg1", 1, "cpg1", None)],
                vec![composite("cpg1", 5, Some("gone"), None)],
                None,
                5,
            ),
            (
                "gate off: the parent is not read",
                false,
                vec![child("pg1", 1, "cpg1", Some(false))],
                vec![composite("cpg1", 5, None, Some(true))],
                None,
                1,
            ),
            (
                "a loop ends the walk",
                true,
                vec![child("pg1", 1, "cpg1", None)],
                vec![
                    composite("cpg1", 5, Some("cpg2"), None),
                    composite("cpg2", 9, Some("cpg1"), Some(true)),
                ],
                composite_key("cpg2"),
                9,
            ),
        ];
        for (name, gate, groups, composites, want_unit, want_priority) in cases {
            let store = if gate {
                PodGroupStore::with_composites()
            } else {
                PodGroupStore::new()
            };
            for c in composites {
                store.set_composite(c);
            }
            for g in groups {
                store.set_group(g);
            }
            let info = store.group(&PodGroupKey::new("default", "pg1")).unwrap();
            let facts = facts_of(&store, &info);
            assert_eq!(facts.unit, want_unit, "{name}");
            assert_eq!(facts.priority, want_priority, "{name}");
        }
    }

    /// Upstream `TestNewDomainForWorkloadPreemption` (composite rows): a composite disrupted as a
    /// whole is one victim of every placed pod under it, across its child groups and nodes.
    #[test]
    fn a_composite_disrupted_as_a_whole_is_one_victim() {
        let pod = |name: &str, node: &str, group: &str| {
            PodBuilder::new(name)
                .node_name(node)
                .priority(1)
                .pod_group(group)
                .info()
        };
        let snap = snapshot([
            NodeBuilder::new("n1").info_with([pod("a0", "n1", "pg-a"), pod("c0", "n1", "pg-c")]),
            NodeBuilder::new("n2").info_with([pod("b0", "n2", "pg-b")]),
        ]);
        for (gate, want) in [
            (
                true,
                vec![
                    (vec!["a0", "b0"], VictimKind::CompositePodGroup, 7),
                    (vec!["c0"], VictimKind::PodGroup, 3),
                ],
            ),
            (
                false,
                vec![
                    (vec!["a0"], VictimKind::PodGroup, 1),
                    (vec!["c0"], VictimKind::PodGroup, 3),
                    (vec!["b0"], VictimKind::PodGroup, 1),
                ],
            ),
        ] {
            let store = if gate {
                PodGroupStore::with_composites()
            } else {
                PodGroupStore::new()
            };
            store.set_composite(composite("train", 7, None, Some(true)));
            store.set_group(child("pg-a", 1, "train", Some(false)));
            store.set_group(child("pg-b", 1, "train", None));
            store.set_group(group("pg-c", 3, Some(false)));
            let view = GroupView::build(Some(&store), &snap);
            let (got, want) = described(view.victims_on(snap.nodes()), want);
            assert_eq!(got, want, "gate {gate}");
        }
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
            victim(1, 1, VictimKind::CompositePodGroup),
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
                (1, 1, VictimKind::CompositePodGroup),
                (2, 1, VictimKind::PodGroup),
                (1, 1, VictimKind::PodGroup),
                (1, 1, VictimKind::Pod),
            ]
        );
    }
}

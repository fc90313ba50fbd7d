//! `GangScheduling`: all or nothing for pods of a gang PodGroup.

use std::sync::Arc;

use k8s_openapi::api::{core::v1::Pod, scheduling::v1beta1::PodGroup};
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, Code, CompositePodGroupInfo, EnqueueExtensions,
    EventObject, EventResource, GroupNodeKey, PlacementFeasiblePlugin, PlacementProgress, Plugin,
    PodGroupInfo, PodGroupKey, PodGroupStore, PodInfo, PreEnqueuePlugin, QueueingHint, QueueingHintError,
    Status,
};

use super::hierarchy;
use crate::{helper::event_pod_objects, names::GANG_SCHEDULING};

/// Gates a gang's pods until the quorum exists, and judges pod-group attempts by it.
#[derive(Clone, Debug, Default)]
pub struct GangScheduling {
    groups: Option<Arc<PodGroupStore>>,
}

impl GangScheduling {
    /// The plugin over the runtime's groups (`None`: every pod passes).
    pub fn new(groups: Option<Arc<PodGroupStore>>) -> Self {
        GangScheduling { groups }
    }
}

impl Plugin for GangScheduling {
    fn name(&self) -> &str {
        GANG_SCHEDULING
    }
    unisched_framework::serves!(as_pre_enqueue, as_enqueue_extensions, as_placement_feasible);
}

impl PreEnqueuePlugin for GangScheduling {
    /// A pod of a group waits, `UnschedulableAndUnresolvable`, until its PodGroup exists and,
    /// for a gang, until `minCount` of the group's pods exist.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let (Some(groups), Some(key)) = (&self.groups, PodGroupKey::of_pod(&pod.pod)) else {
            return Status::success();
        };
        let Some(group) = groups.group(&key) else {
            if groups.composites_enabled() {
                return hierarchy::group_missing(groups, &key);
            }
            return Status::unresolvable(format!(
                "waiting for pods's pod group {:?} to appear in scheduling queue",
                key.name
            ));
        };
        if groups.composites_enabled()
            && let Some(parent) = &group.parent
        {
            return hierarchy::pre_enqueue(groups, &key.namespace, parent);
        }
        if !group.is_gang() {
            return Status::success();
        }
        if groups.member_count(&key) < group.min_count() {
            return Status::unresolvable(
                "waiting for minCount pods from a gang to appear in scheduling queue",
            );
        }
        Status::success()
    }
}

impl PlacementFeasiblePlugin for GangScheduling {
    /// Success once `minCount` members are placed; `Wait` while the remaining ones could still
    /// make it; Unschedulable when they cannot. A basic group's `minCount` is 1.
    fn placement_feasible(&self, group: &PodGroupInfo, progress: PlacementProgress) -> Status {
        quorum(group.min_count(), progress)
    }

    /// The same for a composite, counting children: `minGroupCount` of them for a gang
    /// composite, one for a basic one (upstream words it as `minCount` too).
    fn composite_placement_feasible(
        &self,
        composite: &CompositePodGroupInfo,
        progress: PlacementProgress,
    ) -> Status {
        quorum(composite.min_count(), progress)
    }
}

/// The quorum check: `min` placed, or still reachable (`Wait`), or out of reach.
fn quorum(min: usize, progress: PlacementProgress) -> Status {
    let PlacementProgress { scheduled, remaining } = progress;
    if remaining + scheduled < min {
        return Status::unschedulable(format!(
            "minCount ({min}) cannot be satisfied: {scheduled} scheduled, {remaining} remaining"
        ));
    }
    if scheduled < min {
        return Status::new(
            Code::Wait,
            [format!(
                "minCount ({min}) is not yet satisfied: {scheduled} scheduled, {remaining} remaining"
            )],
        );
    }
    Status::success()
}

/// The group a pod names, or `None`.
fn group_of(pod: &Pod) -> Option<PodGroupKey> {
    PodGroupKey::of_pod(pod)
}

/// A pod was added (unscheduled or bound): it may complete the waiting pod's gang.
pub(super) fn pod_added(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let (_, added) = event_pod_objects(old, new)?;
    let (Some(mine), Some(added)) = (group_of(pod), added.and_then(group_of)) else {
        return Ok(QueueingHint::Skip);
    };
    Ok(if mine == added {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    })
}

fn event_groups<'a>(
    old: Option<&'a EventObject>,
    new: Option<&'a EventObject>,
) -> Result<(Option<&'a PodGroup>, Option<&'a PodGroup>), QueueingHintError> {
    let read = |o: Option<&'a EventObject>, side| match o {
        None => Ok(None),
        Some(EventObject::PodGroup(g)) => Ok(Some(&**g)),
        Some(other) => Err(QueueingHintError::UnexpectedObject {
            expected: "PodGroup",
            side,
            got: crate::helper::object_kind(other),
        }),
    };
    Ok((
        read(old, unisched_framework::EventSide::Old)?,
        read(new, unisched_framework::EventSide::New)?,
    ))
}

/// The waiting pod's own PodGroup was created.
pub(super) fn pod_group_added(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let (_, added) = event_groups(old, new)?;
    let Some(added) = added else {
        return Err(QueueingHintError::MissingObject {
            expected: "PodGroup",
            side: unisched_framework::EventSide::New,
        });
    };
    Ok(match group_of(pod) {
        Some(mine) if mine == PodGroupKey::of_group(added) => QueueingHint::Queue,
        _ => QueueingHint::Skip,
    })
}

/// The waiting pod's gang lowered its `minCount`.
pub(super) fn pod_group_updated(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let (Some(old), Some(new)) = event_groups(old, new)? else {
        return Err(QueueingHintError::EmptyEvent { kind: "pod group" });
    };
    match group_of(pod) {
        Some(mine) if mine == PodGroupKey::of_group(new) => {}
        _ => return Ok(QueueingHint::Skip),
    }
    let (Some(was), Some(now)) = (
        old.spec.scheduling_policy.gang.as_ref(),
        new.spec.scheduling_policy.gang.as_ref(),
    ) else {
        return Ok(QueueingHint::Skip);
    };
    Ok(if now.min_count < was.min_count {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    })
}

/// The key a pod's group is indexed by in the queue's pool (see [`EventNarrowing`]).
///
/// [`EventNarrowing`]: unisched_framework::EventNarrowing
fn pool_key(key: &PodGroupKey) -> String {
    format!("podgroup:{key}")
}

/// The pool keys of a pod: its group's, if it names one.
fn pod_pool_keys(pod: &Pod) -> Vec<String> {
    group_of(pod).map(|k| pool_key(&k)).into_iter().collect()
}

impl GangScheduling {
    /// Whether a pod added to `key`'s group can change what PreEnqueue says of the group's
    /// waiting pods: not while the group exists as a gang short of its quorum (they were told
    /// exactly that already); otherwise it can (they may pass, or learn that the group is gone).
    /// Without a store (tests of the bare hints) it can, as upstream's hint answers.
    ///
    /// A pod added to a group of a tree may complete the tree: it always matters.
    fn addition_matters(&self, key: &PodGroupKey) -> bool {
        self.groups.as_ref().is_none_or(|g| {
            g.group(key).is_none() || g.admits_members(key) || hierarchy::root_composite(g, key).is_some()
        })
    }

    /// True when the pod added and the waiting pod are in groups of the same tree.
    fn same_tree(&self, waiting: &Pod, old: Option<&EventObject>, new: Option<&EventObject>) -> bool {
        let Some(groups) = &self.groups else {
            return false;
        };
        let Ok((_, added)) = event_pod_objects(old, new) else {
            return false;
        };
        match (group_of(waiting), added.and_then(group_of)) {
            (Some(mine), Some(added)) => hierarchy::same_tree(groups, &mine, &added),
            _ => false,
        }
    }

    /// True when a PodGroup added is in the tree of the waiting pod's group (it may complete it).
    fn group_completes_tree(&self, waiting: &Pod, new: Option<&EventObject>) -> bool {
        let (Some(groups), Some(mine), Some(EventObject::PodGroup(added))) =
            (&self.groups, group_of(waiting), new)
        else {
            return false;
        };
        hierarchy::same_tree(groups, &mine, &PodGroupKey::of_group(added))
    }

    /// The pool keys a pod added to `key`'s group concerns: its group's, or every group's of
    /// its tree.
    fn added_pool_keys(&self, key: &PodGroupKey) -> Vec<String> {
        match &self.groups {
            Some(groups) => hierarchy::tree_groups(groups, key).iter().map(pool_key).collect(),
            None => vec![pool_key(key)],
        }
    }

    /// A CompositePodGroup was added: it may complete the tree of the waiting pod's group.
    fn composite_added(
        &self,
        pod: &Pod,
        new: Option<&EventObject>,
    ) -> Result<QueueingHint, QueueingHintError> {
        let added = match new {
            Some(EventObject::CompositePodGroup(c)) => c,
            Some(other) => {
                return Err(QueueingHintError::UnexpectedObject {
                    expected: "CompositePodGroup",
                    side: unisched_framework::EventSide::New,
                    got: crate::helper::object_kind(other),
                });
            }
            None => {
                return Err(QueueingHintError::MissingObject {
                    expected: "CompositePodGroup",
                    side: unisched_framework::EventSide::New,
                });
            }
        };
        let (Some(groups), Some(mine)) = (&self.groups, group_of(pod)) else {
            return Ok(QueueingHint::Skip);
        };
        let added = PodGroupKey::new(
            added.metadata.namespace.clone().unwrap_or_default(),
            added.metadata.name.clone().unwrap_or_default(),
        );
        let roots = (
            hierarchy::root_composite(groups, &mine),
            groups.root_of(&GroupNodeKey::Composite(added)),
        );
        Ok(match roots {
            (Some(a), Some(GroupNodeKey::Composite(b))) if a == b => QueueingHint::Queue,
            _ => QueueingHint::Skip,
        })
    }

    /// A pod joining a group is offered only to that group's waiting members, and not while the
    /// gang is still short of its quorum. Why: a gang of n pods arrives one pod at a time;
    /// offering each arrival to every waiting member re-ran PreEnqueue about n²/2 times per gang,
    /// all refused for the same reason until the last one. PreEnqueue would have said the same,
    /// so only the work changes.
    fn pod_added_event(&self, event: ClusterEvent) -> ClusterEventWithHint {
        let for_hint = self.clone();
        let for_keys = self.clone();
        ClusterEventWithHint::with_hint(event, move |pod, old, new| {
            let mut hint = pod_added(pod, old, new)?;
            if hint == QueueingHint::Skip && for_hint.same_tree(pod, old, new) {
                hint = QueueingHint::Queue;
            }
            Ok(match group_of(pod) {
                Some(key) if hint == QueueingHint::Queue && !for_hint.addition_matters(&key) => {
                    QueueingHint::Skip
                }
                _ => hint,
            })
        })
        .narrowed_by(
            move |old, new| {
                let (_, added) = event_pod_objects(old, new).ok()?;
                // A pod of no group, or of a gang still short of its quorum, concerns nobody.
                Some(match added.and_then(group_of) {
                    Some(key) if for_keys.addition_matters(&key) => for_keys.added_pool_keys(&key),
                    _ => Vec::new(),
                })
            },
            pod_pool_keys,
        )
    }
}

impl EnqueueExtensions for GangScheduling {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let composites = self.groups.as_ref().is_some_and(|g| g.composites_enabled());
        let for_composite = self.clone();
        let for_group = self.clone();
        let composite_added = composites.then(|| {
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::CompositePodGroup,
                    ActionType::ADD,
                    "CompositePodGroupAdd",
                ),
                move |pod, _old, new| for_composite.composite_added(pod, new),
            )
        });
        let mut events = vec![
            self.pod_added_event(ClusterEvent::new(
                EventResource::UnscheduledPod,
                ActionType::ADD,
                "UnscheduledPodAdd",
            )),
            self.pod_added_event(ClusterEvent::new(
                EventResource::AssignedPod,
                ActionType::ADD,
                "AssignedPodAdd",
            )),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(EventResource::PodGroup, ActionType::ADD, "PodGroupAdd"),
                move |pod, old, new| {
                    let hint = pod_group_added(pod, old, new)?;
                    Ok(
                        if hint == QueueingHint::Skip && for_group.group_completes_tree(pod, new) {
                            QueueingHint::Queue
                        } else {
                            hint
                        },
                    )
                },
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::PodGroup,
                    ActionType::UPDATE_OTHER,
                    "PodGroupUpdate",
                ),
                pod_group_updated,
            ),
        ];
        events.extend(composite_added);
        events
    }
}

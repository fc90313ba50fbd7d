//! Cluster events and queueing hints: which changes in the cluster can make a rejected pod fit.
//!
//! Each plugin registers the events that could change its verdict, each with an optional hint
//! function that looks at the old and new object and says whether *this* pod is worth retrying. The
//! queue runs only the hints of the plugins that rejected the pod, so a node label change does not
//! wake every pod waiting for a GPU.

use std::{error::Error, fmt, sync::Arc};

use k8s_openapi::api::{
    core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod},
    resource::v1::{DeviceClass, ResourceClaim, ResourceSlice},
    scheduling::v1beta1::PodGroup,
    storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment},
};

use crate::PodInfo;

/// The kind of object an event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventResource {
    /// Any pod (matches assigned and unscheduled pods).
    Pod,
    /// A pod bound to a node.
    AssignedPod,
    /// A pod not yet bound.
    UnscheduledPod,
    /// A node.
    Node,
    /// resource.k8s.io ResourceClaim.
    ResourceClaim,
    /// resource.k8s.io ResourceSlice.
    ResourceSlice,
    /// resource.k8s.io DeviceClass.
    DeviceClass,
    /// A PersistentVolume.
    PersistentVolume,
    /// A PersistentVolumeClaim.
    PersistentVolumeClaim,
    /// storage.k8s.io StorageClass.
    StorageClass,
    /// storage.k8s.io CSINode.
    CsiNode,
    /// storage.k8s.io CSIDriver.
    CsiDriver,
    /// storage.k8s.io CSIStorageCapacity.
    CsiStorageCapacity,
    /// storage.k8s.io VolumeAttachment.
    VolumeAttachment,
    /// scheduling.k8s.io PodGroup.
    PodGroup,
    /// scheduling.k8s.io CompositePodGroup (the CompositePodGroup gate).
    CompositePodGroup,
    /// Every resource.
    Wildcard,
}

impl EventResource {
    /// The upstream label prefix (`Node`, `resource.k8s.io/ResourceClaim`, …).
    pub fn label(self) -> &'static str {
        match self {
            EventResource::Pod => "Pod",
            EventResource::AssignedPod => "AssignedPod",
            EventResource::UnscheduledPod => "UnscheduledPod",
            EventResource::Node => "Node",
            EventResource::ResourceClaim => "resource.k8s.io/ResourceClaim",
            EventResource::ResourceSlice => "resource.k8s.io/ResourceSlice",
            EventResource::DeviceClass => "resource.k8s.io/DeviceClass",
            EventResource::PersistentVolume => "PersistentVolume",
            EventResource::PersistentVolumeClaim => "PersistentVolumeClaim",
            EventResource::StorageClass => "storage.k8s.io/StorageClass",
            EventResource::CsiNode => "storage.k8s.io/CSINode",
            EventResource::CsiDriver => "storage.k8s.io/CSIDriver",
            EventResource::CsiStorageCapacity => "storage.k8s.io/CSIStorageCapacity",
            EventResource::VolumeAttachment => "storage.k8s.io/VolumeAttachment",
            EventResource::PodGroup => "scheduling.k8s.io/PodGroup",
            EventResource::CompositePodGroup => "scheduling.k8s.io/CompositePodGroup",
            EventResource::Wildcard => "*",
        }
    }
}

/// A bit set of actions. `UPDATE` is the union of every specific update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ActionType(pub u32);

impl ActionType {
    /// No action.
    pub const NONE: ActionType = ActionType(0);
    /// Object added.
    pub const ADD: ActionType = ActionType(1);
    /// Object deleted.
    pub const DELETE: ActionType = ActionType(1 << 1);
    /// Node allocatable changed.
    pub const UPDATE_NODE_ALLOCATABLE: ActionType = ActionType(1 << 2);
    /// Node labels changed.
    pub const UPDATE_NODE_LABEL: ActionType = ActionType(1 << 3);
    /// Node taints or `spec.unschedulable` changed.
    pub const UPDATE_NODE_TAINT: ActionType = ActionType(1 << 4);
    /// Node conditions changed.
    pub const UPDATE_NODE_CONDITION: ActionType = ActionType(1 << 5);
    /// Node annotations changed.
    pub const UPDATE_NODE_ANNOTATION: ActionType = ActionType(1 << 6);
    /// Pod labels changed.
    pub const UPDATE_POD_LABEL: ActionType = ActionType(1 << 7);
    /// Pod requests went down.
    pub const UPDATE_POD_SCALE_DOWN: ActionType = ActionType(1 << 8);
    /// Pod tolerations were added.
    pub const UPDATE_POD_TOLERATION: ActionType = ActionType(1 << 9);
    /// Pod scheduling gates were all removed.
    pub const UPDATE_POD_SCHEDULING_GATES_ELIMINATED: ActionType = ActionType(1 << 10);
    /// `status.resourceClaimStatuses` or `extendedResourceClaimStatus` changed.
    pub const UPDATE_POD_GENERATED_RESOURCE_CLAIM: ActionType = ActionType(1 << 11);
    /// Any other update (used for non-node, non-pod resources).
    pub const UPDATE_OTHER: ActionType = ActionType(1 << 12);
    /// Node `status.declaredFeatures` changed (the features its kubelet says it has).
    pub const UPDATE_NODE_DECLARED_FEATURE: ActionType = ActionType(1 << 13);
    /// Every update.
    pub const UPDATE: ActionType = ActionType(((1 << 14) - 1) & !0b11);
    /// Everything.
    pub const ALL: ActionType = ActionType((1 << 14) - 1);

    /// Union.
    #[must_use]
    pub const fn or(self, other: ActionType) -> ActionType {
        ActionType(self.0 | other.0)
    }

    /// True when the sets intersect.
    pub const fn intersects(self, other: ActionType) -> bool {
        self.0 & other.0 != 0
    }
}

/// A change in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClusterEvent {
    /// What changed.
    pub resource: EventResource,
    /// How it changed.
    pub action: ActionType,
    /// A label for metrics and logs; the built-in events have upstream names.
    pub label: &'static str,
}

impl ClusterEvent {
    /// An event with a label derived by the caller.
    pub const fn new(resource: EventResource, action: ActionType, label: &'static str) -> Self {
        ClusterEvent {
            resource,
            action,
            label,
        }
    }

    /// True when a plugin that registered `self` is interested in `incoming`.
    pub fn matches(&self, incoming: &ClusterEvent) -> bool {
        if self.resource == EventResource::Wildcard && self.action == ActionType::ALL {
            return true;
        }
        let resource_ok = self.resource == incoming.resource
            || self.resource == EventResource::Wildcard
            || (self.resource == EventResource::Pod
                && matches!(
                    incoming.resource,
                    EventResource::AssignedPod | EventResource::UnscheduledPod
                ));
        resource_ok && self.action.intersects(incoming.action) && incoming.action.0 <= self.action.0
    }
}

impl fmt::Display for ClusterEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label)
    }
}

/// Well-known events, with upstream labels.
pub mod well_known {
    use super::{ActionType as A, ClusterEvent as E, EventResource as R};
    /// A pod was waiting longer than the unschedulable timeout.
    pub const UNSCHEDULABLE_TIMEOUT: E = E::new(R::Wildcard, A::ALL, "UnschedulableTimeout");
    /// Forced activation.
    pub const FORCE_ACTIVATE: E = E::new(R::Wildcard, A::ALL, "ForceActivate");
    /// An assumed pod's binding failed; what it held is free again.
    pub const ASSIGNED_POD_DELETE: E = E::new(R::AssignedPod, A::DELETE, "AssignedPodDelete");
    /// A bound pod was added.
    pub const ASSIGNED_POD_ADD: E = E::new(R::AssignedPod, A::ADD, "AssignedPodAdd");
    /// An unscheduled pod was added.
    pub const UNSCHEDULED_POD_ADD: E = E::new(R::UnscheduledPod, A::ADD, "UnscheduledPodAdd");
    /// A node was added.
    pub const NODE_ADD: E = E::new(R::Node, A::ADD, "NodeAdd");
    /// A node was deleted.
    pub const NODE_DELETE: E = E::new(R::Node, A::DELETE, "NodeDelete");
}

/// A changed object handed to queueing hints.
#[derive(Clone, Debug)]
pub enum EventObject {
    /// A pod, with what the scheduler derived from it. Hints read requests and host ports from
    /// the derived fields, never from the containers: a bound pod's [`PodInfo`] is
    /// [lean](PodInfo::lean) and its `pod` has no containers.
    Pod(Arc<PodInfo>),
    /// A node.
    Node(Arc<Node>),
    /// A claim.
    ResourceClaim(Arc<ResourceClaim>),
    /// A slice.
    ResourceSlice(Arc<ResourceSlice>),
    /// A device class.
    DeviceClass(Arc<DeviceClass>),
    /// A PersistentVolume.
    PersistentVolume(Arc<PersistentVolume>),
    /// A PersistentVolumeClaim.
    PersistentVolumeClaim(Arc<PersistentVolumeClaim>),
    /// A StorageClass.
    StorageClass(Arc<StorageClass>),
    /// A CSINode.
    CsiNode(Arc<CSINode>),
    /// A CSIDriver.
    CsiDriver(Arc<CSIDriver>),
    /// A CSIStorageCapacity.
    CsiStorageCapacity(Arc<CSIStorageCapacity>),
    /// A VolumeAttachment.
    VolumeAttachment(Arc<VolumeAttachment>),
    /// A PodGroup.
    PodGroup(Arc<PodGroup>),
    /// A CompositePodGroup.
    CompositePodGroup(Arc<k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup>),
    /// Something the hint does not need to inspect.
    Other,
}

impl EventObject {
    /// A pod event object for a pod that has no [`PodInfo`] yet: derived as the watch handler
    /// derives it ([`PodInfo::watched`], lean when bound).
    pub fn pod(pod: Pod) -> Self {
        EventObject::Pod(Arc::new(PodInfo::watched(pod)))
    }
}

/// What a hint says about one pod and one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueingHint {
    /// The event cannot help this pod.
    Skip,
    /// The event may help; retry the pod.
    Queue,
}

/// Which object of an event a hint reads: the one before the change or the one after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventSide {
    /// The object before the change (absent on Add).
    Old,
    /// The object after the change (absent on Delete).
    New,
}

impl fmt::Display for EventSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EventSide::Old => "old",
            EventSide::New => "new",
        })
    }
}

/// Why a queueing hint could not answer. The queue logs it and retries the pod as if the hint had
/// said `Queue`: a hint that cannot read an event must not leave a pod waiting forever.
///
/// Most failures are an event that does not carry what the hint reads (a registration bug, or an
/// informer delivering a tombstone); the rest are the plugin's own, such as a pod whose terms do
/// not parse.
#[derive(Debug, thiserror::Error)]
pub enum QueueingHintError {
    /// The event carries another kind of object than the hint reads.
    #[error("expected a {expected} as the {side} object, got {got}")]
    UnexpectedObject {
        /// The kind the hint reads (`Node`, `Pod`, …).
        expected: &'static str,
        /// Which of the event's objects.
        side: EventSide,
        /// The kind the event carried.
        got: &'static str,
    },
    /// The event lacks the object the hint reads.
    #[error("expected a {expected} as the {side} object, got nothing")]
    MissingObject {
        /// The kind the hint reads.
        expected: &'static str,
        /// Which of the event's objects.
        side: EventSide,
    },
    /// The event's object is absent or of another kind; the hint does not tell which.
    #[error("expected a {expected} as the {side} object")]
    NotObject {
        /// The kind the hint reads.
        expected: &'static str,
        /// Which of the event's objects.
        side: EventSide,
    },
    /// The object the hint reads (old or new, whichever is present) is of another kind.
    #[error("expected a {expected}, got {got}")]
    UnexpectedKind {
        /// The kind the hint reads.
        expected: &'static str,
        /// The kind the event carried.
        got: &'static str,
    },
    /// The event carries neither an old nor a new object.
    #[error("a {kind} event without a {kind}")]
    EmptyEvent {
        /// The event's kind in words (`pod`, `node`, `claim`).
        kind: &'static str,
    },
    /// The plugin's own failure, such as the pod's terms not parsing; printed as the failure.
    #[error(transparent)]
    Plugin(Box<dyn Error + Send + Sync>),
    /// A failure told in words only.
    #[error("{0}")]
    Message(String),
}

impl QueueingHintError {
    /// Wraps a plugin's own error.
    pub fn plugin(err: impl Error + Send + Sync + 'static) -> Self {
        QueueingHintError::Plugin(Box::new(err))
    }
}

impl From<String> for QueueingHintError {
    fn from(message: String) -> Self {
        QueueingHintError::Message(message)
    }
}

impl From<&str> for QueueingHintError {
    fn from(message: &str) -> Self {
        QueueingHintError::Message(message.to_string())
    }
}

/// A hint function: `(pod, old, new)`. An error counts as `Queue`.
pub type QueueingHintFn = Arc<
    dyn Fn(&Pod, Option<&EventObject>, Option<&EventObject>) -> Result<QueueingHint, QueueingHintError>
        + Send
        + Sync,
>;

/// The keys an event carries for [`EventNarrowing`]: `None` when it may concern any pod.
pub type EventKeysFn =
    Arc<dyn Fn(Option<&EventObject>, Option<&EventObject>) -> Option<Vec<String>> + Send + Sync>;

/// The keys a pod carries for [`EventNarrowing`].
pub type PodKeysFn = Arc<dyn Fn(&Pod) -> Vec<String> + Send + Sync>;

/// Tells the queue which waiting pods a hinted event can concern, so that it asks the hint only
/// for those instead of for the whole unschedulable pool.
///
/// Why: a hint is asked once per pooled pod and event. With thousands of pods waiting for their
/// claims and an event per claim written, that product (not the hints themselves) was the largest
/// part of the runtime's CPU. A claim event concerns the pods that own or name the claim; keys say
/// so in a form the queue can index.
///
/// The contract, which the plugin's tests must check: whenever `event_keys(old, new)` returns
/// `Some(keys)` and none of `keys` is among `pod_keys(pod)`, the hint answers `Skip` for `pod`.
/// `None` makes no promise (every pod the plugin rejected is asked). Narrowing never changes what
/// the hints decide, only how many pods are asked.
#[derive(Clone)]
pub struct EventNarrowing {
    /// The event's keys.
    pub event_keys: EventKeysFn,
    /// A pod's keys (computed when the pod enters the unschedulable pool).
    pub pod_keys: PodKeysFn,
}

/// An event a plugin cares about, with an optional hint (no hint = always `Queue`).
#[derive(Clone)]
pub struct ClusterEventWithHint {
    /// The event.
    pub event: ClusterEvent,
    /// The hint.
    pub hint: Option<QueueingHintFn>,
    /// Which pooled pods the hint can answer other than `Skip` for (only with a hint).
    pub narrowing: Option<EventNarrowing>,
}

impl fmt::Debug for ClusterEventWithHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterEventWithHint")
            .field("event", &self.event)
            .field("hint", &self.hint.is_some())
            .field("narrowing", &self.narrowing.is_some())
            .finish()
    }
}

impl ClusterEventWithHint {
    /// An event without a hint.
    pub fn new(event: ClusterEvent) -> Self {
        ClusterEventWithHint {
            event,
            hint: None,
            narrowing: None,
        }
    }

    /// Adds [`EventNarrowing`] to an event with a hint (see its contract).
    pub fn narrowed_by(
        mut self,
        event_keys: impl Fn(Option<&EventObject>, Option<&EventObject>) -> Option<Vec<String>>
        + Send
        + Sync
        + 'static,
        pod_keys: impl Fn(&Pod) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.narrowing = Some(EventNarrowing {
            event_keys: Arc::new(event_keys),
            pod_keys: Arc::new(pod_keys),
        });
        self
    }

    /// An event with a hint.
    pub fn with_hint(
        event: ClusterEvent,
        hint: impl Fn(&Pod, Option<&EventObject>, Option<&EventObject>) -> Result<QueueingHint, QueueingHintError>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        ClusterEventWithHint {
            event,
            hint: Some(Arc::new(hint)),
            narrowing: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_table() {
        let node_update_alloc =
            ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_ALLOCATABLE, "x");
        let node_add = ClusterEvent::new(EventResource::Node, ActionType::ADD, "x");
        let pod_delete = ClusterEvent::new(EventResource::Pod, ActionType::DELETE, "x");
        let assigned_delete = ClusterEvent::new(EventResource::AssignedPod, ActionType::DELETE, "x");
        let claim_update = ClusterEvent::new(EventResource::ResourceClaim, ActionType::UPDATE_OTHER, "x");
        let cases = [
            (well_known::UNSCHEDULABLE_TIMEOUT, node_add, true),
            (
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD.or(ActionType::UPDATE_NODE_ALLOCATABLE),
                    "r",
                ),
                node_update_alloc,
                true,
            ),
            (
                ClusterEvent::new(EventResource::Node, ActionType::ADD, "r"),
                node_update_alloc,
                false,
            ),
            (
                ClusterEvent::new(EventResource::Node, ActionType::UPDATE, "r"),
                node_update_alloc,
                true,
            ),
            (pod_delete, assigned_delete, true),
            (assigned_delete, pod_delete, false),
            (
                ClusterEvent::new(EventResource::ResourceClaim, ActionType::ALL, "r"),
                claim_update,
                true,
            ),
            (
                ClusterEvent::new(EventResource::ResourceSlice, ActionType::ALL, "r"),
                claim_update,
                false,
            ),
        ];
        for (i, (registered, incoming, want)) in cases.iter().enumerate() {
            assert_eq!(
                registered.matches(incoming),
                *want,
                "case {i}: {registered:?} vs {incoming:?}"
            );
        }
    }

    #[test]
    fn hint_errors_read_as_the_plugins_wrote_them() {
        let cases = [
            (
                QueueingHintError::UnexpectedObject {
                    expected: "Node",
                    side: EventSide::Old,
                    got: "Pod",
                },
                "expected a Node as the old object, got Pod",
            ),
            (
                QueueingHintError::MissingObject {
                    expected: "Node",
                    side: EventSide::New,
                },
                "expected a Node as the new object, got nothing",
            ),
            (
                QueueingHintError::NotObject {
                    expected: "StorageClass",
                    side: EventSide::New,
                },
                "expected a StorageClass as the new object",
            ),
            (
                QueueingHintError::UnexpectedKind {
                    expected: "DeviceClass",
                    got: "CSINode",
                },
                "expected a DeviceClass, got CSINode",
            ),
            (
                QueueingHintError::EmptyEvent { kind: "pod" },
                "a pod event without a pod",
            ),
            (QueueingHintError::from("boom"), "boom"),
            (
                QueueingHintError::plugin(std::fmt::Error),
                "an error occurred when formatting an argument",
            ),
        ];
        for (err, want) in cases {
            assert_eq!(err.to_string(), want);
        }
    }
}

//! The plugin interfaces: one small trait per extension point.
//!
//! A plugin is one value implementing [`Plugin`] plus any extension-point traits; the `as_*`
//! conversions tell the framework which points it serves, so one configuration entry under
//! `multiPoint` enables every point a plugin implements (as upstream). Plugins must not mutate the
//! `NodeInfo`s they are given; Filter and Score run in parallel over nodes and get `&CycleState`.
//!
//! Order of one attempt: PreFilter → Filter (per node, parallel) → PostFilter (only with 0 feasible
//! nodes) → PreScore → Score (per node, parallel) → NormalizeScore → Reserve → Permit, then in the
//! binding cycle PreBind → Bind → PostBind. Unreserve undoes Reserve on any later failure and must be
//! idempotent: it may run for a plugin whose Reserve never ran.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use crate::{
    ClusterEventWithHint, CycleState, NodeInfo, NodeToStatus, PlacementFeasiblePlugin,
    PlacementGeneratePlugin, PlacementScorePlugin, PodGroupPostFilterPlugin, PodInfo, QueuedPodInfo, Status,
};

/// Highest score a Score plugin may return after normalisation.
pub const MAX_NODE_SCORE: i64 = 100;
/// Lowest score.
pub const MIN_NODE_SCORE: i64 = 0;

macro_rules! conversions {
    ($($fn:ident => $tr:ident),* $(,)?) => {
        $(
            #[doc = concat!("This plugin as a [`", stringify!($tr), "`], when it is one.")]
            fn $fn(self: Arc<Self>) -> Option<Arc<dyn $tr>> { None }
        )*
    };
}

/// Every plugin: a name and the extension points it serves.
pub trait Plugin: Send + Sync + 'static {
    /// The plugin name used in configuration (`NodeResourcesFit`).
    fn name(&self) -> &str;

    conversions! {
        as_pre_enqueue => PreEnqueuePlugin,
        as_queue_sort => QueueSortPlugin,
        as_pre_filter => PreFilterPlugin,
        as_filter => FilterPlugin,
        as_post_filter => PostFilterPlugin,
        as_pre_score => PreScorePlugin,
        as_score => ScorePlugin,
        as_reserve => ReservePlugin,
        as_permit => PermitPlugin,
        as_pre_bind => PreBindPlugin,
        as_bind => BindPlugin,
        as_post_bind => PostBindPlugin,
        as_enqueue_extensions => EnqueueExtensions,
        as_assumed_pod => AssumedPodPlugin,
        as_placement_generate => PlacementGeneratePlugin,
        as_placement_score => PlacementScorePlugin,
        as_placement_feasible => PlacementFeasiblePlugin,
        as_pod_group_post_filter => PodGroupPostFilterPlugin,
    }
}

/// Implements the `as_*` conversions of [`Plugin`] for the listed extension points.
///
/// ```text
/// impl Plugin for NodeName {
///     fn name(&self) -> &str { NAME }
///     unisched_framework::serves!(as_filter, as_enqueue_extensions);
/// }
/// ```
#[macro_export]
macro_rules! serves {
    ($($fn:ident),* $(,)?) => {
        $( $crate::serves!(@one $fn); )*
    };
    (@one as_pre_enqueue) => { fn as_pre_enqueue(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::PreEnqueuePlugin>> { Some(self) } };
    (@one as_queue_sort) => { fn as_queue_sort(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::QueueSortPlugin>> { Some(self) } };
    (@one as_pre_filter) => { fn as_pre_filter(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::PreFilterPlugin>> { Some(self) } };
    (@one as_filter) => { fn as_filter(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::FilterPlugin>> { Some(self) } };
    (@one as_post_filter) => { fn as_post_filter(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::PostFilterPlugin>> { Some(self) } };
    (@one as_pre_score) => { fn as_pre_score(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::PreScorePlugin>> { Some(self) } };
    (@one as_score) => { fn as_score(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::ScorePlugin>> { Some(self) } };
    (@one as_reserve) => { fn as_reserve(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::ReservePlugin>> { Some(self) } };
    (@one as_permit) => { fn as_permit(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::PermitPlugin>> { Some(self) } };
    (@one as_pre_bind) => { fn as_pre_bind(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::PreBindPlugin>> { Some(self) } };
    (@one as_bind) => { fn as_bind(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::BindPlugin>> { Some(self) } };
    (@one as_post_bind) => { fn as_post_bind(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::PostBindPlugin>> { Some(self) } };
    (@one as_assumed_pod) => { fn as_assumed_pod(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::AssumedPodPlugin>> { Some(self) } };
    (@one as_enqueue_extensions) => { fn as_enqueue_extensions(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::EnqueueExtensions>> { Some(self) } };
    (@one as_placement_generate) => { fn as_placement_generate(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::PlacementGeneratePlugin>> { Some(self) } };
    (@one as_placement_score) => { fn as_placement_score(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::PlacementScorePlugin>> { Some(self) } };
    (@one as_pod_group_post_filter) => { fn as_pod_group_post_filter(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::PodGroupPostFilterPlugin>> { Some(self) } };
    (@one as_placement_feasible) => { fn as_placement_feasible(self: ::std::sync::Arc<Self>) -> Option<::std::sync::Arc<dyn $crate::PlacementFeasiblePlugin>> { Some(self) } };
}

/// Decides whether a pod may enter the active queue at all (scheduling gates, missing claims).
/// A non-success status gates the pod until an event registered by this plugin arrives. Must be cheap.
pub trait PreEnqueuePlugin: Plugin {
    /// Success lets the pod in.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status;

    /// What the user is told about `status`, a refusal of `pod` by this plugin (KEP-5501: the
    /// runtime writes it as an event and a `PodScheduled=False` condition if the refusal lasts).
    /// `None` opts out: for a wait on another component that ends in seconds in a healthy cluster
    /// and that the component reports on itself if it does not, or for a state the API server
    /// already shows. By default, the status message.
    fn rejection_message(&self, pod: &PodInfo, status: &Status) -> Option<String> {
        let _ = pod;
        Some(status.message())
    }
}

/// Orders the active queue. Exactly one per profile.
pub trait QueueSortPlugin: Plugin {
    /// True when `a` should be scheduled before `b`.
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool;
}

/// A PreFilter's restriction of the candidate nodes. `None` means all nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PreFilterResult {
    /// The only nodes worth filtering.
    pub node_names: Option<BTreeSet<String>>,
}

impl PreFilterResult {
    /// A result restricting to `names`.
    pub fn nodes(names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        PreFilterResult {
            node_names: Some(names.into_iter().map(Into::into).collect()),
        }
    }

    /// Intersection of two results.
    #[must_use]
    pub fn merge(self, other: PreFilterResult) -> PreFilterResult {
        match (self.node_names, other.node_names) {
            (None, x) | (x, None) => PreFilterResult { node_names: x },
            (Some(a), Some(b)) => PreFilterResult {
                node_names: Some(a.intersection(&b).cloned().collect()),
            },
        }
    }
}

/// Runs once per attempt before Filter; computes per-pod state and may narrow the nodes.
pub trait PreFilterPlugin: Plugin {
    /// Returns Skip to disable this plugin's Filter for the attempt.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status);

    /// True when `add_pod`/`remove_pod` are meaningful (pods this plugin's state depends on).
    fn has_extensions(&self) -> bool {
        false
    }

    /// Updates the state as if `pod_to_add` were on `node` (nominated pods, preemption dry runs).
    fn add_pod(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _pod_to_add: &Arc<PodInfo>,
        _node: &NodeInfo,
    ) -> Status {
        Status::success()
    }

    /// Updates the state as if `pod_to_remove` were gone from `node`.
    fn remove_pod(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _pod_to_remove: &Arc<PodInfo>,
        _node: &NodeInfo,
    ) -> Status {
        Status::success()
    }
}

/// Decides whether the pod fits one node. Runs in parallel over nodes.
pub trait FilterPlugin: Plugin {
    /// Success, or a rejection with upstream-format reasons.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
}

/// The nomination a PostFilter made (preemption).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostFilterResult {
    /// The node the pod is nominated to, when any.
    pub nominated_node_name: Option<String>,
}

/// What a PostFilter plugin may ask of its profile: preemption simulates removing pods from a
/// copy of a node and must re-run the profile's own PreFilter extensions and Filter plugins there,
/// with the pods nominated to that node taken into account as in the Filter pass.
pub trait FrameworkHandle: Sync {
    /// The profile's scheduler name (preemption writes it into the victims' condition message).
    fn profile_name(&self) -> &str;
    /// Filter on `node` with the pods nominated to it (priority ≥ the pod's) added, then without.
    fn run_filter_with_nominated(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
    /// The PreFilter AddPod extensions.
    fn run_pre_filter_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_add: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status;
    /// The PreFilter RemovePod extensions.
    fn run_pre_filter_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_remove: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status;
    /// The Reserve plugins, in a dry run: a pod-group preemption's reprieve holds each member's
    /// resources (its devices) before checking the next member, and lets them go with
    /// [`run_unreserve`](Self::run_unreserve). None by default.
    fn run_reserve(&self, _state: &mut CycleState, _pod: &PodInfo, _node: &str) -> Status {
        Status::success()
    }
    /// Undoes [`run_reserve`](Self::run_reserve).
    fn run_unreserve(&self, _state: &mut CycleState, _pod: &PodInfo, _node: &str) {}
    /// Pods currently nominated to `node`.
    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>>;
    /// Rejects the pod with `uid` if it is waiting at Permit (a preemption victim that is not
    /// bound yet is rejected, not deleted); true when it was waiting.
    fn reject_waiting_pod(&self, _uid: &str, _plugin: &str, _reason: &str) -> bool {
        false
    }
    /// The scheduler's extenders (preemption offers them its candidates); none by default.
    fn extenders(&self) -> crate::extender::Extenders {
        crate::extender::Extenders::default()
    }
}

/// Runs when no node passed Filter (preemption, DRA deallocation).
pub trait PostFilterPlugin: Plugin {
    /// Success means the plugin made room (the pod is retried). `fwk` gives access to the
    /// profile's Filter and PreFilter extensions for dry runs.
    fn post_filter(
        &self,
        fwk: &dyn FrameworkHandle,
        state: &mut CycleState,
        pod: &PodInfo,
        statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status);
}

/// Runs once before Score over the feasible nodes.
pub trait PreScorePlugin: Plugin {
    /// Skip disables this plugin's Score for the attempt.
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Status;
}

/// One node's score from one plugin. The name is borrowed from the snapshot: a normalisation runs
/// over every feasible node of every attempt, and owned names cost an allocation each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeScore<'n> {
    /// The node.
    pub name: &'n str,
    /// The score.
    pub score: i64,
}

/// Ranks feasible nodes. Runs in parallel over nodes.
pub trait ScorePlugin: Plugin {
    /// A raw score; after `normalize_score` it must be within `[0, 100]`.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;

    /// Scores `nodes` in order into `out` (as long as `nodes`), stopping at the first failure,
    /// which comes back with its node's index. Must give exactly what [`Self::score`] gives node
    /// by node; the default is that loop. A plugin whose every call starts with the same lookups
    /// (its PreScore state) overrides it to do them once per attempt. The framework calls it when
    /// the attempt does not time plugins one call at a time.
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        out: &mut [i64],
    ) -> Result<(), (usize, Status)> {
        score_each(nodes, out, |node| self.score(state, pod, node))
    }

    /// True when `normalize_score` must be called.
    fn has_normalize(&self) -> bool {
        false
    }

    /// Rescales all nodes' scores in place.
    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, _scores: &mut [NodeScore<'_>]) -> Status {
        Status::success()
    }
}

/// The loop of [`ScorePlugin::score_nodes`]: `score` for each of `nodes` in order into `out`,
/// stopping at the first failure, which comes back with its node's index. For overrides that
/// look their per-attempt state up once and then score node by node.
pub fn score_each(
    nodes: &[Arc<NodeInfo>],
    out: &mut [i64],
    mut score: impl FnMut(&NodeInfo) -> Result<i64, Status>,
) -> Result<(), (usize, Status)> {
    for (i, (node, slot)) in nodes.iter().zip(out.iter_mut()).enumerate() {
        *slot = score(node).map_err(|s| (i, s))?;
    }
    Ok(())
}

/// Reserves cluster state for the pod on the chosen node before binding.
pub trait ReservePlugin: Plugin {
    /// Reserve; a failure triggers Unreserve of every Reserve plugin.
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
    /// Undo; idempotent, may run without a prior Reserve.
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str);
}

/// Approves, rejects or delays binding.
pub trait PermitPlugin: Plugin {
    /// Success, Wait (with a timeout) or a rejection.
    fn permit(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> (Status, Duration);
}

/// Prepares binding (volumes, DRA claim status). May do API calls; runs in the binding cycle.
pub trait PreBindPlugin: Plugin {
    /// Skip means there is nothing to do for this pod (lets the caller skip work such as writing
    /// `nominatedNodeName`). The default is Success.
    fn pre_bind_pre_flight(&self, _state: &CycleState, _pod: &PodInfo, _node: &str) -> Status {
        Status::success()
    }
    /// Do it.
    fn pre_bind(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;

    /// The same work as a future that waits without a thread of its own (API writes only), or
    /// `None` (the default) when this pod's PreBind needs a thread (it may sleep or poll, or the
    /// plugin has no such form). When `Some`, awaiting it must have exactly the effect and
    /// result [`pre_bind`](Self::pre_bind) would have had; what it records for Unreserve lives in
    /// state it shares with the cycle's [`CycleState`].
    fn pre_bind_async(&self, _state: &CycleState, _pod: &PodInfo, _node: &str) -> Option<StatusFuture> {
        None
    }
}

/// A plugin's work as a future that owns what it needs: it runs on an async runtime, and it
/// must never block that runtime's thread.
pub type StatusFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Status> + Send + 'static>>;

/// Binds the pod. The first plugin that does not return Skip decides.
pub trait BindPlugin: Plugin {
    /// Success, Skip, or an error.
    fn bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;

    /// The same binding as a future that waits without a thread of its own (an API write), or
    /// `None` (the default) when this plugin binds only synchronously. When `Some`, awaiting it
    /// must have exactly the effect and result [`bind`](Self::bind) would have had.
    fn bind_async(&self, _state: &CycleState, _pod: &PodInfo, _node: &str) -> Option<StatusFuture> {
        None
    }
}

/// Informational, after a successful bind.
pub trait PostBindPlugin: Plugin {
    /// Called once the pod is bound.
    fn post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str);
}

/// The cluster events that can make a pod this plugin rejected schedulable.
pub trait EnqueueExtensions: Plugin {
    /// Evaluated once at startup.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint>;
}

/// Adds what a plugin computed for the chosen node to the pod the cache assumes, so the cache
/// accounts for it at once (DynamicResources: `status.nodeAllocatableResourceClaimStatuses`).
/// Runs after host selection, before the pod is assumed.
pub trait AssumedPodPlugin: Plugin {
    /// Mutates the copy of the pod that will be assumed on `node`. Returns whether it changed
    /// anything: an unchanged pod keeps what was derived from it (requests, affinity terms), a
    /// changed one is derived anew.
    fn prepare_assumed_pod(
        &self,
        state: &CycleState,
        pod: &mut k8s_openapi::api::core::v1::Pod,
        node: &str,
    ) -> bool;
}

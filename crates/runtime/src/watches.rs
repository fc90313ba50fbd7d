//! The kinds the scheduler watches, in one table, and the one function that starts any of them.
//!
//! Every watch is the same loop ([`informers::run_watch`]) over a different kind and handler, so
//! the differences are data: which kind, whether readiness waits for its first list. Adding a
//! kind is a row in [`WATCHES`] and an arm in [`spawn_watch`]; readiness counts itself, so there is
//! no hand-kept total to update. Every watch runs until its cancellation token fires: shutdown
//! ends them by cancelling, after the lease is given up.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use k8s_openapi::api::{
    core::v1::{PersistentVolume, PersistentVolumeClaim},
    resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice},
    storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment},
};
use kube::{Client, runtime::watcher};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use unisched_cache::{Cache, DraCache, VolumeCache};
use unisched_framework::PodGroupStore;
use unisched_queue::SchedulingQueue;

use crate::{
    composite_pod_groups::CompositePodGroupHandler,
    dra::DraHandler,
    http::Health,
    informers::{self, Handler, NodeHandler, PodHandler, WatchedObject},
    namespaces::{NamespaceHandler, NamespaceStore},
    pod_groups::PodGroupHandler,
    preemption::{PdbHandler, PdbStore},
    volume::VolumeHandler,
};

/// A kind the scheduler watches (each has its own handler).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchedKind {
    /// Namespace labels, for InterPodAffinity's `namespaceSelector`.
    Namespaces,
    /// Nodes, into the cache.
    Nodes,
    /// Pods: bound ones into the cache, pending ones of our profiles into the queue.
    Pods,
    /// DRA ResourceSlices.
    ResourceSlices,
    /// DRA DeviceClasses.
    DeviceClasses,
    /// DRA DeviceTaintRules.
    DeviceTaintRules,
    /// DRA ResourceClaims.
    ResourceClaims,
    /// PodDisruptionBudgets, for DefaultPreemption.
    PodDisruptionBudgets,
    /// PersistentVolumes, for the volume plugins.
    PersistentVolumes,
    /// PersistentVolumeClaims, for the volume plugins.
    PersistentVolumeClaims,
    /// StorageClasses, for the volume plugins.
    StorageClasses,
    /// CSINodes, for the volume plugins.
    CsiNodes,
    /// CSIDrivers, for VolumeBinding's capacity check and NodeVolumeLimits' installed-driver check.
    CsiDrivers,
    /// CSIStorageCapacities, for VolumeBinding's capacity check and scoring.
    CsiStorageCapacities,
    /// VolumeAttachments, for NodeVolumeLimits: volumes attached to a node count against its
    /// limits whether or not a pod there still uses them.
    VolumeAttachments,
    /// scheduling.k8s.io PodGroups, when pod groups are scheduled together.
    PodGroups,
    /// scheduling.k8s.io CompositePodGroups, when the store keeps the forest (the
    /// CompositePodGroup gate).
    CompositePodGroups,
}

/// One row of the watch table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Watch {
    /// What is watched and which handler it feeds.
    pub(crate) kind: WatchedKind,
    /// Whether `/readyz` (and the first scheduling cycle) waits for this watch's first list.
    pub(crate) gates_readiness: bool,
}

impl Watch {
    /// A watch whose first list readiness waits for.
    const fn gating(kind: WatchedKind) -> Self {
        Watch {
            kind,
            gates_readiness: true,
        }
    }
}

/// Every watch the scheduler runs, in the order they start. Each gates readiness: a pod scheduled
/// before any of these lists is complete could be placed on a partial view of the cluster.
pub(crate) const WATCHES: [Watch; 15] = [
    Watch::gating(WatchedKind::Namespaces),
    Watch::gating(WatchedKind::Nodes),
    Watch::gating(WatchedKind::Pods),
    Watch::gating(WatchedKind::ResourceSlices),
    Watch::gating(WatchedKind::DeviceClasses),
    Watch::gating(WatchedKind::DeviceTaintRules),
    Watch::gating(WatchedKind::ResourceClaims),
    Watch::gating(WatchedKind::PodDisruptionBudgets),
    Watch::gating(WatchedKind::PersistentVolumes),
    Watch::gating(WatchedKind::PersistentVolumeClaims),
    Watch::gating(WatchedKind::StorageClasses),
    Watch::gating(WatchedKind::CsiNodes),
    Watch::gating(WatchedKind::CsiDrivers),
    Watch::gating(WatchedKind::CsiStorageCapacities),
    Watch::gating(WatchedKind::VolumeAttachments),
];

/// What the watches feed: the state the handlers are built over.
pub(crate) struct WatchTargets {
    /// The client every watch lists and watches through.
    pub(crate) client: Client,
    /// Nodes and bound pods.
    pub(crate) cache: Arc<Cache>,
    /// Pending pods, and the cluster events that move them.
    pub(crate) queue: Arc<SchedulingQueue>,
    /// The pod handler (built once: the scheduler also reads the last object it saw).
    pub(crate) pods: Arc<PodHandler>,
    /// DRA objects.
    pub(crate) dra: Arc<DraCache>,
    /// Namespace labels.
    pub(crate) namespaces: Arc<NamespaceStore>,
    /// PodDisruptionBudgets.
    pub(crate) pdbs: Arc<PdbStore>,
    /// Volume objects.
    pub(crate) volumes: Arc<VolumeCache>,
    /// PodGroups, when pod groups are scheduled together (then they are watched too).
    pub(crate) pod_groups: Option<Arc<PodGroupStore>>,
}

/// Marks the scheduler synced once every readiness-gating watch has finished its first list.
///
/// It counts itself: every [`ReadinessGate::hold`] adds one pending sync when it is taken (before
/// its watch is spawned), and the gate holds one of its own until [`ReadinessGate::all_spawned`],
/// so readiness can never be reported while watches are still being started.
pub(crate) struct ReadinessGate {
    pending: Arc<AtomicUsize>,
    health: Health,
    /// The gate's own hold, released by [`ReadinessGate::all_spawned`].
    own: Box<dyn Fn() + Send>,
}

impl ReadinessGate {
    /// A gate over `health`, holding readiness until [`ReadinessGate::all_spawned`].
    pub(crate) fn new(health: Health) -> Self {
        let pending = Arc::new(AtomicUsize::new(0));
        let own = Box::new(Self::hold_on(&pending, &health));
        ReadinessGate { pending, health, own }
    }

    /// One more sync to wait for; the returned callback reports it done.
    pub(crate) fn hold(&self) -> impl Fn() + Send + 'static {
        Self::hold_on(&self.pending, &self.health)
    }

    fn hold_on(pending: &Arc<AtomicUsize>, health: &Health) -> impl Fn() + Send + 'static {
        pending.fetch_add(1, Ordering::SeqCst);
        let (pending, health) = (pending.clone(), health.clone());
        move || {
            if pending.fetch_sub(1, Ordering::SeqCst) == 1 {
                health.set_synced();
                tracing::info!("caches synced");
            }
        }
    }

    /// Every watch has been spawned: only their first lists are waited for now.
    pub(crate) fn all_spawned(self) {
        (self.own)();
    }
}

/// The watch of PodGroups, started beside [`WATCHES`] when the targets have a store: the API is
/// served and the feature on (a watch of an unserved kind would only log errors).
pub(crate) const POD_GROUP_WATCH: Watch = Watch::gating(WatchedKind::PodGroups);

/// The watch of CompositePodGroups, started beside [`POD_GROUP_WATCH`] when the store keeps the
/// forest (the gate is on and the API served).
pub(crate) const COMPOSITE_POD_GROUP_WATCH: Watch = Watch::gating(WatchedKind::CompositePodGroups);

/// Starts every watch of [`WATCHES`] (and [`POD_GROUP_WATCH`] when pod groups are scheduled,
/// [`COMPOSITE_POD_GROUP_WATCH`] when composites are too);
/// each ends when `stop` is cancelled.
pub(crate) fn spawn_all(
    targets: &WatchTargets,
    readiness: &ReadinessGate,
    stop: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    let optional = targets.pod_groups.as_ref().map(|_| POD_GROUP_WATCH);
    let composites = targets
        .pod_groups
        .as_ref()
        .filter(|g| g.composites_enabled())
        .map(|_| COMPOSITE_POD_GROUP_WATCH);
    WATCHES
        .iter()
        .copied()
        .chain(optional)
        .chain(composites)
        .map(|watch| spawn_watch(watch, targets, readiness, stop.clone()))
        .collect()
}

/// Starts one watch: builds its handler over `targets` and runs it until `stop` is cancelled.
pub(crate) fn spawn_watch(
    watch: Watch,
    targets: &WatchTargets,
    readiness: &ReadinessGate,
    stop: CancellationToken,
) -> JoinHandle<()> {
    let on_synced: Box<dyn Fn() + Send> = if watch.gates_readiness {
        Box::new(readiness.hold())
    } else {
        Box::new(|| {})
    };
    let run = Runner {
        client: targets.client.clone(),
        on_synced,
        stop,
    };
    let (queue, dra, volumes) = (&targets.queue, &targets.dra, &targets.volumes);
    match watch.kind {
        WatchedKind::Namespaces => {
            run.spawn(NamespaceHandler::new(targets.namespaces.clone(), queue.clone()))
        }
        WatchedKind::Nodes => run.spawn(NodeHandler::new(targets.cache.clone(), queue.clone())),
        WatchedKind::Pods => run.spawn_shared(targets.pods.clone()),
        WatchedKind::ResourceSlices => {
            run.spawn(DraHandler::<ResourceSlice>::new(dra.clone(), queue.clone()))
        }
        WatchedKind::DeviceClasses => run.spawn(DraHandler::<DeviceClass>::new(dra.clone(), queue.clone())),
        WatchedKind::DeviceTaintRules => {
            run.spawn(DraHandler::<DeviceTaintRule>::new(dra.clone(), queue.clone()))
        }
        WatchedKind::ResourceClaims => {
            run.spawn(DraHandler::<ResourceClaim>::new(dra.clone(), queue.clone()))
        }
        WatchedKind::PodDisruptionBudgets => run.spawn(PdbHandler::new(targets.pdbs.clone())),
        WatchedKind::PersistentVolumes => run.spawn(VolumeHandler::<PersistentVolume>::new(
            volumes.clone(),
            queue.clone(),
        )),
        WatchedKind::PersistentVolumeClaims => run.spawn(VolumeHandler::<PersistentVolumeClaim>::new(
            volumes.clone(),
            queue.clone(),
        )),
        WatchedKind::StorageClasses => {
            run.spawn(VolumeHandler::<StorageClass>::new(volumes.clone(), queue.clone()))
        }
        WatchedKind::CsiNodes => run.spawn(VolumeHandler::<CSINode>::new(volumes.clone(), queue.clone())),
        WatchedKind::CsiDrivers => run.spawn(VolumeHandler::<CSIDriver>::new(volumes.clone(), queue.clone())),
        WatchedKind::CsiStorageCapacities => run.spawn(VolumeHandler::<CSIStorageCapacity>::new(
            volumes.clone(),
            queue.clone(),
        )),
        WatchedKind::VolumeAttachments => run.spawn(VolumeHandler::<VolumeAttachment>::new(
            volumes.clone(),
            queue.clone(),
        )),
        WatchedKind::PodGroups => match &targets.pod_groups {
            Some(groups) => run.spawn(PodGroupHandler::new(groups.clone(), queue.clone())),
            None => tokio::spawn(async {}),
        },
        WatchedKind::CompositePodGroups => match &targets.pod_groups {
            Some(groups) => run.spawn(CompositePodGroupHandler::new(groups.clone(), queue.clone())),
            None => tokio::spawn(async {}),
        },
    }
}

/// What every watch needs besides its handler.
struct Runner {
    client: Client,
    on_synced: Box<dyn Fn() + Send>,
    stop: CancellationToken,
}

impl Runner {
    fn spawn<H, K>(self, handler: H) -> JoinHandle<()>
    where
        H: Handler<Obj = K>,
        K: WatchedObject,
    {
        self.spawn_shared(Arc::new(handler))
    }

    fn spawn_shared<H, K>(self, handler: Arc<H>) -> JoinHandle<()>
    where
        H: Handler<Obj = K>,
        K: WatchedObject,
    {
        let Runner {
            client,
            on_synced,
            stop,
        } = self;
        tokio::spawn(async move {
            let watch = informers::run_watch(client, watcher::Config::default(), handler, on_synced);
            let _ = stop.run_until_cancelled(watch).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_watched_once() {
        let mut kinds: Vec<String> = WATCHES.iter().map(|w| format!("{:?}", w.kind)).collect();
        let all = kinds.len();
        kinds.sort();
        kinds.dedup();
        assert_eq!(kinds.len(), all, "a kind is watched twice");
    }

    /// Readiness is reported once: after the gate's own hold and every watch's first list.
    #[test]
    fn readiness_waits_for_every_hold() {
        let health = Health::default();
        let gate = ReadinessGate::new(health.clone());
        let (first, second) = (gate.hold(), gate.hold());
        first();
        gate.all_spawned();
        assert!(!health.is_synced(), "the second watch has not listed yet");
        second();
        assert!(health.is_synced());
    }
}

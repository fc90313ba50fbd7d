//! [`Cache`]: the scheduler's view of nodes and of the pods on them, assumed pods included.
//!
//! # Why assumed pods
//! Binding a pod takes an API round trip and runs on another thread, while the scheduling cycle moves
//! on to the next pod at once. The cycle therefore *assumes* the pod on its node before binding: the
//! pod counts against the node immediately, so the next pod cannot take the same resources. The
//! watch later confirms the pod (`add_pod`), or a failed binding cycle forgets it (`forget_pod`),
//! which must leave the node exactly as if the pod had never been assumed (DESIGN.md invariant 3).
//!
//! # Why copy-on-write NodeInfos
//! Each node is held as an `Arc<NodeInfo>` that the current snapshot shares. A mutation goes through
//! [`Arc::make_mut`]: the first change to a node after a snapshot clones that one `NodeInfo` (pods are
//! `Arc`s, so that clone is shallow), later changes before the next snapshot mutate in place. Nodes
//! that did not change are never copied, and the snapshot and the cache share one copy of them, so a
//! 5,000-node cluster is held once, not twice.
//!
//! # Why a dirty list
//! The scheduling loop calls [`Cache::update_snapshot`] once per pod, so it must cost O(changed
//! nodes). Every mutation records the node's name once in a dirty list; `update_snapshot` swaps just
//! those entries into the snapshot, rebuilds the zone-interleaved order only when the set of nodes
//! changed, and hands back the very same `Arc<Snapshot>` when nothing changed at all. This plays the
//! role of upstream's most-recently-updated list walked down to the last snapshot's generation.
//! Snapshots still held by binding cycles are never modified; the `snapshots` module recycles
//! released ones so that this holds without copying the node list.
//!
//! # Ghosts and placeholders
//! Pods and nodes arrive on different watches, so their events can be observed out of order. A pod
//! bound to a node the cache has not seen yet lands on a *placeholder* `NodeInfo`; a node deleted
//! while its pods' deletions are still in flight stays as a *ghost* holding those pods. Neither is in
//! snapshots (there is no node object to filter against); each disappears with its last pod, and a
//! placeholder becomes a real node when the node arrives.

use std::{collections::HashMap, mem, sync::Arc};

use k8s_openapi::api::core::v1::Node;
use parking_lot::RwLock;
use unisched_framework::{NodeInfo, PodInfo, SchedulerCache, Snapshot};

use crate::{
    AssumedPodDump, CacheDump, CacheError, NodeDump, NodeState,
    images::ImageIndex,
    node_tree::{NodeTree, zone_key},
    snapshots::SnapshotPool,
};

/// One node as the cache holds it.
#[derive(Debug)]
struct NodeEntry {
    /// Shared with the current snapshot until the next change (copy-on-write).
    info: Arc<NodeInfo>,
    /// Already in `Inner::dirty`.
    dirty: bool,
    /// The node object was seen at some point (tells a ghost from a placeholder).
    had_node: bool,
}

/// One pod as the cache holds it.
#[derive(Debug)]
struct PodState {
    pod: Arc<PodInfo>,
    /// The node the pod is counted on (its `spec.nodeName` when it was stored).
    node: String,
    /// Assumed by the scheduler and not yet confirmed by the watch.
    assumed: bool,
    /// The binding request was sent (informational; there is no assumed-pod expiry).
    binding_finished: bool,
}

#[derive(Debug, Default)]
struct Inner {
    nodes: HashMap<String, NodeEntry>,
    pods: HashMap<String, PodState>,
    assumed: usize,
    tree: NodeTree,
    images: ImageIndex,
    /// Names of nodes changed since the last snapshot (each at most once while its entry lives).
    dirty: Vec<String>,
    /// The set of real nodes or their zones changed: the snapshot order must be rebuilt.
    order_dirty: bool,
    snapshots: SnapshotPool,
}

/// The scheduler cache.
///
/// All methods take `&self`: watch handlers, the scheduling cycle and binding cycles call it from
/// different threads, and one `parking_lot` lock guards the state. Pods are keyed by
/// [`PodInfo::uid`]. Watch events go to `add_node`/`update_node`/`remove_node` and
/// `add_pod`/`update_pod`/`remove_pod`; the scheduling cycle uses `update_snapshot`, `assume_pod`,
/// `forget_pod`, `finish_binding` and `is_assumed` (also through [`SchedulerCache`]).
#[derive(Debug, Default)]
pub struct Cache {
    inner: RwLock<Inner>,
}

fn pod_ids(pod: &PodInfo) -> (String, String) {
    (pod.uid.clone(), pod.key())
}

/// The entry for `name`, created as a placeholder if unknown, recorded as changed.
fn touch<'a>(
    nodes: &'a mut HashMap<String, NodeEntry>,
    dirty: &mut Vec<String>,
    name: &str,
) -> &'a mut NodeEntry {
    let entry = nodes.entry(name.to_string()).or_insert_with(|| NodeEntry {
        info: Arc::new(NodeInfo::placeholder(name)),
        dirty: false,
        had_node: false,
    });
    if !entry.dirty {
        entry.dirty = true;
        dirty.push(name.to_string());
    }
    entry
}

impl Inner {
    /// The node's `NodeInfo` for writing (copied first if a snapshot shares it); see [`touch`].
    fn node_mut(&mut self, name: &str) -> &mut NodeInfo {
        Arc::make_mut(&mut touch(&mut self.nodes, &mut self.dirty, name).info)
    }

    fn insert_pod(&mut self, pod: Arc<PodInfo>, node: &str, assumed: bool) {
        self.node_mut(node).add_pod(pod.clone());
        if assumed {
            self.assumed += 1;
        }
        let state = PodState {
            pod,
            node: node.to_string(),
            assumed,
            binding_finished: false,
        };
        self.pods.insert(state.pod.uid.clone(), state);
    }

    /// Removes the pod with `uid` from its node (dropping the node if it was a ghost or placeholder
    /// holding only this pod) and from the pod index.
    fn take_pod(&mut self, uid: &str) -> Option<PodState> {
        let state = self.pods.remove(uid)?;
        if state.assumed {
            self.assumed = self.assumed.saturating_sub(1);
        }
        if self.nodes.contains_key(&state.node) {
            let info = self.node_mut(&state.node);
            if info.remove_pod(uid).is_none() {
                tracing::warn!(pod = %state.pod.key(), node = %state.node, "pod missing from its node");
            }
            if info.node().is_none() && info.pods.is_empty() {
                self.nodes.remove(&state.node);
            }
        } else {
            tracing::warn!(pod = %state.pod.key(), node = %state.node, "node of a cached pod not found");
        }
        Some(state)
    }

    fn set_node(&mut self, node: Arc<Node>) {
        let Some(name) = node.metadata.name.clone().filter(|n| !n.is_empty()) else {
            tracing::warn!("ignoring a node without a name");
            return;
        };
        let zone = zone_key(&node);
        let Inner {
            nodes,
            dirty,
            images,
            tree,
            order_dirty,
            ..
        } = self;
        let entry = touch(nodes, dirty, &name);
        entry.had_node = true;
        let info = Arc::make_mut(&mut entry.info);
        images.remove_node(&info.image_states);
        info.image_states = images.add_node(&node);
        info.set_node(node);
        if tree.upsert(&name, zone) {
            *order_dirty = true;
        }
    }

    fn remove_node(&mut self, name: &str) -> Result<(), CacheError> {
        let exists = self.nodes.get(name).is_some_and(|e| e.info.node().is_some());
        if !exists {
            return Err(CacheError::NodeNotFound {
                name: name.to_string(),
            });
        }
        let info = self.node_mut(name);
        let old_images = mem::take(&mut info.image_states);
        info.remove_node();
        let empty = info.pods.is_empty();
        self.images.remove_node(&old_images);
        if empty {
            self.nodes.remove(name);
        }
        self.tree.remove(name);
        self.order_dirty = true;
        Ok(())
    }

    /// Brings the snapshot up to date; see the module docs.
    fn update_snapshot(&mut self) -> Arc<Snapshot> {
        let Inner {
            nodes,
            images,
            dirty,
            order_dirty,
            tree,
            snapshots,
            ..
        } = self;
        let mut changed = Vec::with_capacity(dirty.len());
        for name in dirty.drain(..) {
            let Some(entry) = nodes.get_mut(&name) else {
                continue;
            };
            entry.dirty = false;
            if entry.info.node().is_none() {
                continue;
            }
            if images.is_stale(&entry.info.image_states) {
                images.refresh(&mut Arc::make_mut(&mut entry.info).image_states);
            }
            changed.push(entry.info.clone());
        }
        if !*order_dirty {
            let lookup = |name: &str| nodes.get(name).map(|e| e.info.clone());
            if snapshots.apply(changed, lookup).is_err() {
                tracing::warn!("snapshot lacks a node the cache has; rebuilding the node list");
                *order_dirty = true;
            }
        }
        if *order_dirty {
            let list: Vec<Arc<NodeInfo>> = tree
                .list()
                .into_iter()
                .filter_map(|name| nodes.get(name))
                .filter(|e| e.info.node().is_some())
                .map(|e| e.info.clone())
                .collect();
            if list.len() != tree.len() {
                tracing::error!(
                    listed = list.len(),
                    in_tree = tree.len(),
                    "snapshot state is not consistent: node tree and node map disagree"
                );
            }
            *order_dirty = false;
            snapshots.rebuild(list);
        }
        snapshots.current().clone()
    }
}

impl Cache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    // ----- nodes -----

    /// A node was added (watch add). Adding a node the cache already has acts as an update; adding a
    /// node that pods arrived for first turns its placeholder into a real node.
    pub fn add_node(&self, node: Arc<Node>) {
        self.inner.write().set_node(node);
    }

    /// A node changed (watch update). The cache compares against its own copy, so only the new
    /// object is needed; an unknown node is added.
    pub fn update_node(&self, node: Arc<Node>) {
        self.inner.write().set_node(node);
    }

    /// A node was deleted (watch delete). Pods still on it keep it as a ghost, left out of snapshots,
    /// until their deletions arrive.
    pub fn remove_node(&self, name: &str) -> Result<(), CacheError> {
        self.inner.write().remove_node(name)
    }

    // ----- pods -----

    /// Assumes a pod (with `spec.nodeName` set) on its node before it is bound. The UID must be new
    /// to the cache.
    pub fn assume_pod(&self, pod: Arc<PodInfo>) -> Result<(), CacheError> {
        let (uid, key) = pod_ids(&pod);
        let Some(node) = pod.node_name().map(str::to_string) else {
            return Err(CacheError::NoNodeName { uid, pod: key });
        };
        let mut inner = self.inner.write();
        if inner.pods.contains_key(&uid) {
            return Err(CacheError::AlreadyInCache { uid, pod: key });
        }
        inner.insert_pod(pod, &node, true);
        Ok(())
    }

    /// Undoes [`Cache::assume_pod`] after a failed scheduling or binding cycle. The pod must be
    /// assumed on the same node. Forgetting a pod the cache no longer holds (forgotten already, or
    /// deleted meanwhile) succeeds and does nothing, as upstream.
    pub fn forget_pod(&self, pod: &PodInfo) -> Result<(), CacheError> {
        let (uid, key) = pod_ids(pod);
        let mut inner = self.inner.write();
        let Some(state) = inner.pods.get(&uid) else {
            return Ok(());
        };
        let node = pod.node_name().unwrap_or("");
        if state.node != node {
            return Err(CacheError::AssumedOnDifferentNode {
                uid,
                pod: key,
                assumed_on: node.to_string(),
                cached_on: state.node.clone(),
            });
        }
        if !state.assumed {
            return Err(CacheError::NotAssumed { uid, pod: key });
        }
        inner.take_pod(&uid);
        Ok(())
    }

    /// The binding request for an assumed pod was sent. The pod stays assumed until the watch
    /// confirms it with [`Cache::add_pod`]; there is no expiry (as in current upstream).
    pub fn finish_binding(&self, pod: &PodInfo) {
        if let Some(state) = self.inner.write().pods.get_mut(&pod.uid)
            && state.assumed
        {
            state.binding_finished = true;
        }
    }

    /// A bound pod appeared (watch add). An assumed pod is confirmed and replaced by this object,
    /// moving it if it was bound elsewhere than assumed; an unknown pod is added; a pod the watch
    /// already added is an error.
    pub fn add_pod(&self, pod: Arc<PodInfo>) -> Result<(), CacheError> {
        let (uid, key) = pod_ids(&pod);
        let Some(node) = pod.node_name().map(str::to_string) else {
            return Err(CacheError::NoNodeName { uid, pod: key });
        };
        let mut inner = self.inner.write();
        match inner.pods.get(&uid) {
            Some(state) if state.assumed => {
                if state.node != node {
                    tracing::info!(
                        pod = %key,
                        assumed_node = %state.node,
                        current_node = %node,
                        "pod was added to a different node than it was assumed"
                    );
                }
                inner.take_pod(&uid);
                inner.insert_pod(pod, &node, false);
                Ok(())
            }
            Some(_) => Err(CacheError::AlreadyAdded { uid, pod: key }),
            None => {
                inner.insert_pod(pod, &node, false);
                Ok(())
            }
        }
    }

    /// A bound pod changed (watch update). The pod must have been added (not merely assumed). A
    /// changed node is reported as [`CacheError::CorruptedUpdate`] after the update was applied.
    pub fn update_pod(&self, old: &PodInfo, new: Arc<PodInfo>) -> Result<(), CacheError> {
        let (uid, key) = pod_ids(old);
        if new.uid != uid {
            return Err(CacheError::UidChanged {
                pod: new.key(),
                old_uid: uid,
                new_uid: new.uid.clone(),
            });
        }
        let mut inner = self.inner.write();
        let Some(state) = inner.pods.get(&uid) else {
            return Err(CacheError::NotAdded { uid, pod: key });
        };
        if state.assumed {
            return Err(CacheError::UpdateOfAssumed { uid, pod: key });
        }
        let Some(new_node) = new.node_name().map(str::to_string) else {
            return Err(CacheError::NoNodeName { uid, pod: new.key() });
        };
        let old_node = state.node.clone();
        inner.take_pod(&uid);
        inner.insert_pod(new, &new_node, false);
        if old_node != new_node {
            tracing::error!(pod = %key, %old_node, %new_node, "pod updated on a different node");
            return Err(CacheError::CorruptedUpdate {
                uid,
                pod: key,
                old_node,
                new_node,
            });
        }
        Ok(())
    }

    /// A pod was deleted (watch delete), assumed or added. The cache removes the pod it holds under
    /// that UID from wherever it holds it, so a delete whose object has an empty `spec.nodeName` (a
    /// missed delete replayed from the last known state) still frees the right node. A delete naming
    /// another node is reported as [`CacheError::CorruptedRemove`] after the pod was removed.
    pub fn remove_pod(&self, pod: &PodInfo) -> Result<(), CacheError> {
        let (uid, key) = pod_ids(pod);
        let mut inner = self.inner.write();
        let Some(state) = inner.take_pod(&uid) else {
            return Err(CacheError::NotFound { uid, pod: key });
        };
        match pod.node_name() {
            Some(node) if node != state.node => {
                tracing::error!(pod = %key, deleted_on = %node, cached_on = %state.node, "pod deleted from a different node");
                Err(CacheError::CorruptedRemove {
                    uid,
                    pod: key,
                    deleted_on: node.to_string(),
                    cached_on: state.node,
                })
            }
            _ => Ok(()),
        }
    }

    // ----- queries -----

    /// True when the pod with this UID is assumed and not yet confirmed.
    pub fn is_assumed(&self, uid: &str) -> bool {
        self.inner.read().pods.get(uid).is_some_and(|s| s.assumed)
    }

    /// The pod the cache holds under this UID (also when its node is a ghost).
    pub fn get_pod(&self, uid: &str) -> Option<Arc<PodInfo>> {
        self.inner.read().pods.get(uid).map(|s| s.pod.clone())
    }

    /// The cache's current `NodeInfo` for a node, ghosts and placeholders included. Holding the
    /// returned `Arc` is cheap but makes the cache copy the node on its next change.
    pub fn node_info(&self, name: &str) -> Option<Arc<NodeInfo>> {
        self.inner.read().nodes.get(name).map(|e| e.info.clone())
    }

    /// Pods held, assumed ones included (`scheduler_cache_size{type="pods"}`).
    pub fn pod_count(&self) -> usize {
        self.inner.read().pods.len()
    }

    /// Assumed pods (`scheduler_cache_size{type="assumed_pods"}`).
    pub fn assumed_pod_count(&self) -> usize {
        self.inner.read().assumed
    }

    /// `NodeInfo`s held, ghosts and placeholders included (`scheduler_cache_size{type="nodes"}`).
    pub fn node_count(&self) -> usize {
        self.inner.read().nodes.len()
    }

    /// Brings the snapshot up to date in O(changed nodes) and returns it. When nothing changed since
    /// the last call, the same `Arc` is returned. Nodes that did not change are the same `Arc`s as in
    /// the previous snapshot.
    pub fn update_snapshot(&self) -> Arc<Snapshot> {
        {
            let inner = self.inner.read();
            if inner.dirty.is_empty() && !inner.order_dirty {
                return inner.snapshots.current().clone();
            }
        }
        self.inner.write().update_snapshot()
    }

    /// Everything the cache holds, for debugging (O(cluster); not for the scheduling path). Nodes
    /// are sorted by name, assumed pods by namespace/name.
    pub fn dump(&self) -> CacheDump {
        let inner = self.inner.read();
        let mut nodes: Vec<NodeDump> = inner
            .nodes
            .iter()
            .map(|(name, e)| NodeDump {
                name: name.clone(),
                state: match (e.info.node().is_some(), e.had_node) {
                    (true, _) => NodeState::Ready,
                    (false, true) => NodeState::Ghost,
                    (false, false) => NodeState::Placeholder,
                },
                info: e.info.clone(),
            })
            .collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let mut assumed_pods: Vec<AssumedPodDump> = inner
            .pods
            .values()
            .filter(|s| s.assumed)
            .map(|s| AssumedPodDump {
                pod: s.pod.key(),
                uid: s.pod.uid.clone(),
                node: s.node.clone(),
                binding_finished: s.binding_finished,
            })
            .collect();
        assumed_pods.sort_by(|a, b| a.pod.cmp(&b.pod).then_with(|| a.uid.cmp(&b.uid)));
        CacheDump { nodes, assumed_pods }
    }
}

impl SchedulerCache for Cache {
    fn update_snapshot(&self) -> Arc<Snapshot> {
        Cache::update_snapshot(self)
    }

    fn assume_pod(&self, pod: Arc<PodInfo>) -> Result<(), unisched_framework::CacheWriteError> {
        Cache::assume_pod(self, pod).map_err(unisched_framework::CacheWriteError::new)
    }

    fn forget_pod(&self, pod: &PodInfo) -> Result<(), unisched_framework::CacheWriteError> {
        Cache::forget_pod(self, pod).map_err(unisched_framework::CacheWriteError::new)
    }

    fn finish_binding(&self, pod: &PodInfo) {
        Cache::finish_binding(self, pod);
    }

    fn is_assumed(&self, uid: &str) -> bool {
        Cache::is_assumed(self, uid)
    }
}

//! `NodeInfo`: one node and the pods on it, aggregated for Filter and Score.
//!
//! The cache owns one `NodeInfo` per node and mutates it as pods come and go; the scheduling cycle
//! sees immutable copies in a [`Snapshot`](crate::Snapshot). `generation` comes from one global counter
//! so that the cache can find what changed since the last snapshot in O(changed), even across a node
//! being deleted and re-added.
//!
//! Invariant (tested): `requested` and `non_zero_requested` always equal the sum over `pods`.
//! The sums are kept exactly ([`ResourceSum`], `i128`) so that removing a pod undoes adding it
//! even when the total leaves the `i64` range; the public `i64` fields are views of them, clamped
//! at the bounds (a clamped requested total refuses every further request).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use k8s_openapi::api::core::v1::{Node, Taint};
use unisched_resource::{Resource, ResourceSum};

use crate::{HostPort, PodInfo};

static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The next value of the global generation counter.
pub(crate) fn next_generation() -> u64 {
    GENERATION.fetch_add(1, Ordering::Relaxed) + 1
}

/// A node's slot in an index a plugin keeps by node name, remembered on the node together with
/// the identity of the index it was looked up in.
///
/// Why: the DRA plugin finds a node's slices through such an index, once per node and attempt,
/// in its node veto and again in Filter; hashing the node name and comparing it with the stored
/// one cost a cache miss or two each time, several percent of the scheduling thread on the DRA
/// benchmark. The memo lives in the `NodeInfo` the algorithm already reads, survives the copies
/// the cache makes when pods change (the name never changes), and is simply recomputed when the
/// plugin's index is replaced (slices changed). One plugin uses it; a second would need a second
/// memo, or the two would keep replacing each other's entry (correct, only slower).
#[derive(Debug, Default)]
pub struct SlotMemo(AtomicU64);

/// Bits of [`SlotMemo`]'s word that hold the slot (plus one; zero for "no slot").
const SLOT_BITS: u32 = 24;

impl SlotMemo {
    /// The slot remembered for index `index_id`, or `lookup()`'s answer, remembered for it.
    /// `index_id` must not be 0 (that is the empty memo) and must fit in 40 bits; a slot that
    /// does not fit in [`SLOT_BITS`] is looked up every time.
    pub fn get_or_lookup(&self, index_id: u64, lookup: impl FnOnce() -> Option<u32>) -> Option<u32> {
        let word = self.0.load(Ordering::Relaxed);
        if index_id != 0 && word >> SLOT_BITS == index_id {
            let stored = (word & ((1 << SLOT_BITS) - 1)) as u32;
            return stored.checked_sub(1);
        }
        let slot = lookup();
        let stored = slot.map_or(Some(0), |s| s.checked_add(1).filter(|v| *v < 1 << SLOT_BITS));
        if let Some(stored) = stored
            && index_id != 0
            && index_id < 1 << (64 - SLOT_BITS)
        {
            self.0
                .store((index_id << SLOT_BITS) | u64::from(stored), Ordering::Relaxed);
        }
        slot
    }
}

impl Clone for SlotMemo {
    fn clone(&self) -> Self {
        SlotMemo(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

/// Host ports in use on a node: IP → set of (protocol, port).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostPortInfo(BTreeMap<String, BTreeSet<(String, i32)>>);

const ANY_IP: &str = "0.0.0.0";

impl HostPortInfo {
    /// Records a port.
    pub fn add(&mut self, p: &HostPort) {
        self.0
            .entry(p.ip.clone())
            .or_default()
            .insert((p.protocol.clone(), p.port));
    }

    /// Forgets a port.
    pub fn remove(&mut self, p: &HostPort) {
        if let Some(set) = self.0.get_mut(&p.ip) {
            set.remove(&(p.protocol.clone(), p.port));
            if set.is_empty() {
                self.0.remove(&p.ip);
            }
        }
    }

    /// True when `p` collides with a port in use. `0.0.0.0` collides with every IP.
    pub fn conflicts(&self, p: &HostPort) -> bool {
        let key = (p.protocol.clone(), p.port);
        if p.ip == ANY_IP {
            return self.0.values().any(|s| s.contains(&key));
        }
        [p.ip.as_str(), ANY_IP]
            .iter()
            .any(|ip| self.0.get(*ip).is_some_and(|s| s.contains(&key)))
    }

    /// Number of (ip, protocol, port) entries.
    pub fn len(&self) -> usize {
        self.0.values().map(BTreeSet::len).sum()
    }

    /// True when no port is in use.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Image presence on a node, for ImageLocality.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageStateSummary {
    /// Image size in bytes.
    pub size: i64,
    /// How many nodes have the image.
    pub num_nodes: usize,
}

/// A node with its pods and aggregated requests.
///
/// The fields are laid out in declaration order (`repr(C)`), those that every Filter and Score
/// attempt reads first: a scheduling attempt visits hundreds of nodes, each one's `NodeInfo`
/// is usually out of the nearest caches, and the compiler's own order (widest alignment first)
/// put the 128-bit sums, which only pod additions and removals read, ahead of them and spread
/// the hot fields over twice as many cache lines.
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct NodeInfo {
    node: Option<Arc<Node>>,
    /// `spec.unschedulable` and "has taints", kept beside the counters every Filter reads: the
    /// first plugins of the chain read only these, and fetching them from the node object cost
    /// a cache miss per node and attempt.
    cordoned: bool,
    tainted: bool,
    /// Sum of the pods' exact requests (DRA node-allocatable footprints included), as an `i64`
    /// view of `requested_sum`. Maintained by [`NodeInfo::add_pod`] / [`NodeInfo::remove_pod`].
    pub requested: Resource,
    /// The node's allocatable.
    pub allocatable: Resource,
    /// Sum of the pods' requests with non-zero cpu/memory defaults (for scoring), as an `i64`
    /// view of `non_zero_requested_sum`.
    pub non_zero_requested: Resource,
    /// Pods on the node, assumed ones included.
    pub pods: Vec<Arc<PodInfo>>,
    /// Images on the node.
    pub image_states: BTreeMap<String, ImageStateSummary>,
    name: String,
    /// Pods with (anti-)affinity terms.
    pub pods_with_affinity: Vec<Arc<PodInfo>>,
    /// Pods with required anti-affinity terms.
    pub pods_with_required_anti_affinity: Vec<Arc<PodInfo>>,
    /// Host ports in use.
    pub used_ports: HostPortInfo,
    requested_sum: ResourceSum,
    non_zero_requested_sum: ResourceSum,
    /// Global generation of the last change.
    pub generation: u64,
    /// The node's slot in the DRA plugin's slice index ([`SlotMemo`]).
    pub dra_slot: SlotMemo,
}

impl NodeInfo {
    /// A NodeInfo for `node` with no pods.
    pub fn new(node: Arc<Node>) -> Self {
        let mut ni = NodeInfo::default();
        ni.set_node(node);
        ni
    }

    /// A NodeInfo that only knows the node's name (pods arrived before the node).
    pub fn placeholder(name: impl Into<String>) -> Self {
        NodeInfo {
            name: name.into(),
            generation: next_generation(),
            ..Default::default()
        }
    }

    /// The node object (None for a node that was deleted while pods remain, or not yet seen).
    pub fn node(&self) -> Option<&Arc<Node>> {
        self.node.as_ref()
    }

    /// The node name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Loads the fields at the front of the struct, those the Filter chain and the resource
    /// scorers read first, and folds them into a value the caller feeds to
    /// `std::hint::black_box` so the loads are kept.
    ///
    /// Why: a scheduling attempt visits hundreds of nodes whose `NodeInfo`s are scattered over
    /// the heap and out of the nearest caches, so each visit begins with a miss to memory on
    /// each of these lines, one after the other. A tight loop of these loads over a group of
    /// nodes first (`warm_nodes` in `algorithm.rs`: 64 at a time on one thread, the whole batch
    /// before the workers start) lets the processor fetch many nodes' lines at once; the Filter
    /// chain then finds them in cache. The fields read are about 40 bytes apart from the first
    /// to `pods`, so every cache line of that span is touched whatever the allocation's alignment.
    pub fn touch_hot_fields(&self) -> u64 {
        let words = [
            u64::from(self.node.is_some()) ^ u64::from(self.cordoned) ^ u64::from(self.tainted),
            self.requested.milli_cpu as u64,
            self.requested.scalar_resources.len() as u64,
            self.allocatable.memory as u64,
            self.allocatable.scalar_resources.len() as u64,
            self.non_zero_requested.ephemeral_storage as u64,
            self.non_zero_requested.scalar_resources.len() as u64,
            self.pods.len() as u64,
        ];
        words.iter().fold(0, |acc, w| acc ^ w)
    }

    /// Whether the node is cordoned (`spec.unschedulable`); false without a node object.
    pub fn is_unschedulable(&self) -> bool {
        self.cordoned
    }

    /// The node's taints (none without a node object). An untainted node's object is not read.
    pub fn taints(&self) -> &[Taint] {
        if !self.tainted {
            return &[];
        }
        self.node
            .as_ref()
            .and_then(|n| n.spec.as_ref())
            .and_then(|s| s.taints.as_deref())
            .unwrap_or(&[])
    }

    /// Replaces the node object and recomputes allocatable.
    pub fn set_node(&mut self, node: Arc<Node>) {
        self.name = node.metadata.name.clone().unwrap_or_default();
        let spec = node.spec.as_ref();
        self.cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        self.tainted = spec
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| !t.is_empty());
        self.allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .map(Resource::from_list_lossy)
            .unwrap_or_default();
        self.node = Some(node);
        self.generation = next_generation();
    }

    /// Forgets the node object (keeping pods: a "ghost" until they are gone).
    pub fn remove_node(&mut self) {
        self.node = None;
        self.cordoned = false;
        self.tainted = false;
        self.generation = next_generation();
    }

    /// Adds a pod and its requests.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested_sum.add(pod.requests());
        self.non_zero_requested_sum.add(pod.non_zero_requests());
        self.refresh_requested();
        for p in &pod.host_ports {
            self.used_ports.add(p);
        }
        if pod.has_affinity {
            self.pods_with_affinity.push(pod.clone());
        }
        if pod.has_required_anti_affinity {
            self.pods_with_required_anti_affinity.push(pod.clone());
        }
        self.pods.push(pod);
        self.generation = next_generation();
    }

    /// Removes the pod with `uid`; returns it when it was present.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        let idx = self.pods.iter().position(|p| p.uid == uid)?;
        let pod = self.pods.swap_remove(idx);
        self.pods_with_affinity.retain(|p| p.uid != uid);
        self.pods_with_required_anti_affinity.retain(|p| p.uid != uid);
        self.requested_sum.sub(pod.requests());
        self.non_zero_requested_sum.sub(pod.non_zero_requests());
        self.refresh_requested();
        for p in &pod.host_ports {
            self.used_ports.remove(p);
        }
        // Another pod may use the same port (it would have been rejected, but assumed pods and bound
        // pods can disagree transiently): rebuild the ports from the remaining pods.
        if !pod.host_ports.is_empty() {
            self.used_ports = HostPortInfo::default();
            for other in &self.pods {
                for p in &other.host_ports {
                    self.used_ports.add(p);
                }
            }
        }
        self.generation = next_generation();
        Some(pod)
    }

    /// The pod with `uid`, if on this node.
    pub fn pod(&self, uid: &str) -> Option<&Arc<PodInfo>> {
        self.pods.iter().find(|p| p.uid == uid)
    }

    fn refresh_requested(&mut self) {
        self.requested = self.requested_sum.to_resource();
        self.non_zero_requested = self.non_zero_requested_sum.to_resource();
    }

    /// The exact sum of the pods' requests (`requested` is its `i64` view).
    pub fn requested_sum(&self) -> &ResourceSum {
        &self.requested_sum
    }

    /// Recomputes the aggregates from the pods (used by tests and consistency checks).
    pub fn recomputed_requested(&self) -> (Resource, Resource) {
        let mut req = ResourceSum::default();
        let mut nz = ResourceSum::default();
        for p in &self.pods {
            req.add(p.requests());
            nz.add(p.non_zero_requests());
        }
        (req.to_resource(), nz.to_resource())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeSpec, Pod};

    use super::*;

    fn node(unschedulable: Option<bool>, taints: Option<Vec<&str>>) -> Arc<Node> {
        let mut n = Node::default();
        n.metadata.name = Some("n".into());
        n.spec = Some(NodeSpec {
            unschedulable,
            taints: taints.map(|keys| {
                keys.into_iter()
                    .map(|k| Taint {
                        key: k.into(),
                        effect: "NoSchedule".into(),
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        });
        Arc::new(n)
    }

    fn taint_keys(info: &NodeInfo) -> Vec<&str> {
        info.taints().iter().map(|t| t.key.as_str()).collect()
    }

    /// The cordon and taint answers kept in the NodeInfo follow every change of the node object.
    #[test]
    fn cordon_and_taints_follow_the_node_object() {
        // (unschedulable, taints, expected cordon, expected taint keys)
        let steps: [(Option<bool>, Option<Vec<&str>>, bool, Vec<&str>); 5] = [
            (Some(true), Some(vec!["a", "b"]), true, vec!["a", "b"]),
            (Some(false), Some(vec![]), false, vec![]),
            (None, Some(vec!["c"]), false, vec!["c"]),
            (Some(true), None, true, vec![]),
            (None, None, false, vec![]),
        ];
        let mut info = NodeInfo::placeholder("n");
        assert!(!info.is_unschedulable() && info.taints().is_empty());
        for (i, (unschedulable, taints, cordoned, keys)) in steps.into_iter().enumerate() {
            info.set_node(node(unschedulable, taints));
            assert_eq!(info.is_unschedulable(), cordoned, "step {i}");
            assert_eq!(taint_keys(&info), keys, "step {i}");
        }
        info.set_node(node(Some(true), Some(vec!["d"])));
        info.remove_node();
        assert!(!info.is_unschedulable());
        assert!(info.taints().is_empty());
    }

    /// The warm-up pass reads every field it is meant to fetch: changing any one of them
    /// changes its result (a pass folded to a constant would fetch nothing).
    #[test]
    fn touching_the_hot_fields_reads_each_of_them() {
        let base = NodeInfo::placeholder("n");
        let changes: [(&str, fn(&mut NodeInfo)); 8] = [
            ("node", |n| n.set_node(node(None, None))),
            ("requested cpu", |n| n.requested.milli_cpu = 250),
            ("requested scalars", |n| {
                n.requested.scalar_resources.insert("example.com/gpu".into(), 1);
            }),
            ("allocatable memory", |n| n.allocatable.memory = 1 << 30),
            ("allocatable scalars", |n| {
                n.allocatable.scalar_resources.insert("example.com/gpu".into(), 8);
            }),
            ("non-zero requested storage", |n| {
                n.non_zero_requested.ephemeral_storage = 7
            }),
            ("non-zero requested scalars", |n| {
                n.non_zero_requested
                    .scalar_resources
                    .insert("hugepages-2Mi".into(), 2);
            }),
            ("pods", |n| n.pods.push(Arc::new(PodInfo::new(Pod::default())))),
        ];
        for (what, change) in changes {
            let mut changed = base.clone();
            change(&mut changed);
            assert_ne!(
                changed.touch_hot_fields(),
                base.touch_hot_fields(),
                "{what} is not read"
            );
        }
    }

    #[test]
    fn a_slot_memo_answers_for_the_index_it_was_filled_for_only() {
        let memo = SlotMemo::default();
        let lookups = std::cell::Cell::new(0);
        let look = |slot: Option<u32>| {
            lookups.set(lookups.get() + 1);
            slot
        };
        assert_eq!(memo.get_or_lookup(7, || look(Some(3))), Some(3));
        assert_eq!(
            memo.get_or_lookup(7, || look(Some(99))),
            Some(3),
            "remembered for index 7"
        );
        assert_eq!(lookups.get(), 1);
        // A copy (the cache copies NodeInfos when pods change) keeps the answer.
        assert_eq!(memo.clone().get_or_lookup(7, || look(None)), Some(3));
        assert_eq!(lookups.get(), 1);
        // Another index: looked up again, and "no slot" is remembered too.
        assert_eq!(memo.get_or_lookup(8, || look(None)), None);
        assert_eq!(memo.get_or_lookup(8, || look(Some(1))), None);
        assert_eq!(lookups.get(), 2);
        // Slot 0 is a slot.
        assert_eq!(memo.get_or_lookup(9, || look(Some(0))), Some(0));
        assert_eq!(memo.get_or_lookup(9, || look(None)), Some(0));
        assert_eq!(lookups.get(), 3);
        // What the word cannot hold is looked up every time: id 0, ids past 40 bits, huge slots.
        for id in [0, 1 << 40] {
            let m = SlotMemo::default();
            assert_eq!(m.get_or_lookup(id, || look(Some(5))), Some(5));
            assert_eq!(m.get_or_lookup(id, || look(Some(6))), Some(6));
        }
        let m = SlotMemo::default();
        assert_eq!(m.get_or_lookup(10, || look(Some(1 << 24))), Some(1 << 24));
        assert_eq!(m.get_or_lookup(10, || look(Some(4))), Some(4));
        assert_eq!(lookups.get(), 9);
    }
}

//! The PodGroups the watches saw, and which pods belong to each.
//!
//! Pods may arrive before their group and groups before their pods, so membership is kept by the
//! key the pod names, whether or not the group exists yet. The watch handlers write; the queue
//! (which members to take out together), the gang plugin (is the quorum there?) and the
//! pod-group cycle (how many are placed already, and where) read.
//!
//! With the CompositePodGroup gate the store also keeps the forest (which CompositePodGroup each
//! group is a child of), under the same lock, so a tree is always read together with its leaves.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
};

use k8s_openapi::api::{
    core::v1::Pod,
    scheduling::{v1alpha3::CompositePodGroup, v1beta1::PodGroup},
};
use parking_lot::RwLock;

use super::{
    CompositePodGroupInfo, GroupNodeKey, GroupTree, PodGroupInfo, PodGroupKey,
    forest::{Forest, NoRoot},
};

/// One member pod.
#[derive(Clone, Debug, Default)]
struct Member {
    /// The node it is bound to (`spec.nodeName`), once bound.
    node: Option<String>,
}

/// How many pods a group has, and how many are placed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberCounts {
    /// Every member pod the watches saw (upstream's "all pods" count, which PreEnqueue compares
    /// with `minCount`).
    pub all: usize,
    /// Members bound or assumed.
    pub scheduled: usize,
}

#[derive(Default)]
struct Inner {
    groups: HashMap<PodGroupKey, Arc<PodGroupInfo>>,
    /// Members by the group they name, by uid (ordered, so reads are deterministic).
    members: HashMap<PodGroupKey, BTreeMap<String, Member>>,
    /// Parents and children (only with composites enabled).
    forest: Forest,
}

/// The groups and their members. Cheap to share (`Arc`), safe to read from any thread.
#[derive(Default)]
pub struct PodGroupStore {
    inner: RwLock<Inner>,
    /// The CompositePodGroup gate: without it a group's parent is ignored (every group is a root).
    composites: bool,
}

impl std::fmt::Debug for PodGroupStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.read();
        f.debug_struct("PodGroupStore")
            .field("groups", &inner.groups.len())
            .field("members", &inner.members.len())
            .finish()
    }
}

impl PodGroupStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store that keeps the forest of CompositePodGroups (the CompositePodGroup gate).
    pub fn with_composites() -> Self {
        PodGroupStore {
            inner: RwLock::default(),
            composites: true,
        }
    }

    /// Whether groups may have parents (the CompositePodGroup gate).
    pub fn composites_enabled(&self) -> bool {
        self.composites
    }

    /// A group was added or changed; returns the decoded group.
    pub fn set_group(&self, group: Arc<PodGroup>) -> Arc<PodGroupInfo> {
        let info = Arc::new(PodGroupInfo::new(group));
        let mut inner = self.inner.write();
        if self.composites {
            inner.forest.set_group(&info);
        }
        inner.groups.insert(info.key.clone(), info.clone());
        info
    }

    /// A group was deleted. Its members stay known: the group may be recreated.
    pub fn remove_group(&self, key: &PodGroupKey) -> Option<Arc<PodGroupInfo>> {
        let mut inner = self.inner.write();
        inner.forest.remove_group(key);
        inner.groups.remove(key)
    }

    /// A CompositePodGroup was added or changed; returns the decoded composite (nothing is kept
    /// without the gate).
    pub fn set_composite(&self, composite: Arc<CompositePodGroup>) -> Arc<CompositePodGroupInfo> {
        let info = Arc::new(CompositePodGroupInfo::new(composite));
        if self.composites {
            self.inner.write().forest.set_composite(info.clone());
        }
        info
    }

    /// A CompositePodGroup was deleted.
    pub fn remove_composite(&self, key: &PodGroupKey) -> Option<Arc<CompositePodGroupInfo>> {
        self.inner.write().forest.remove_composite(key)
    }

    /// The composite, if it exists.
    pub fn composite(&self, key: &PodGroupKey) -> Option<Arc<CompositePodGroupInfo>> {
        self.inner.read().forest.composite(key)
    }

    /// Every composite, in key order.
    pub fn composites(&self) -> Vec<Arc<CompositePodGroupInfo>> {
        self.inner.read().forest.composites()
    }

    /// The children that name a composite, in key order (existing or not).
    pub fn children(&self, composite: &PodGroupKey) -> Vec<GroupNodeKey> {
        self.inner.read().forest.children(composite)
    }

    /// The composite a node names as its parent, if any.
    pub fn parent(&self, node: &GroupNodeKey) -> Option<PodGroupKey> {
        self.inner.read().forest.parent(node).cloned()
    }

    /// The root of the tree a group is in: the group itself when it has no parent (or the gate
    /// is off). `None` when the group does not exist, an ancestor does not exist yet, or the
    /// chain of parents loops.
    pub fn root_of(&self, node: &GroupNodeKey) -> Option<GroupNodeKey> {
        self.root(node).ok()
    }

    /// [`Self::root_of`], saying why there is none.
    pub fn root(&self, node: &GroupNodeKey) -> Result<GroupNodeKey, NoRoot> {
        let inner = self.inner.read();
        match node {
            GroupNodeKey::Group(k) if !inner.groups.contains_key(k) => return Err(NoRoot::Unknown),
            GroupNodeKey::Composite(k) if inner.forest.composite(k).is_none() => {
                return Err(NoRoot::Unknown);
            }
            _ => {}
        }
        if !self.composites {
            return Ok(node.clone());
        }
        inner.forest.root_of(node)
    }

    /// Whether the pods of the tree under `composite` may enter the queue now: enough of its
    /// children are ready, each PodGroup child with `minCount` pods (one when basic) and each
    /// composite child by the same rule, down the tree (upstream's hierarchy readiness).
    pub fn tree_admits_members(&self, composite: &PodGroupKey) -> bool {
        let inner = self.inner.read();
        composite_ready(&inner, composite, &mut HashSet::new())
    }

    /// The tree under a composite, with the PodGroups that exist now; `None` when the composite
    /// does not exist.
    pub fn tree(&self, composite: &PodGroupKey) -> Option<GroupTree> {
        let inner = self.inner.read();
        inner.forest.tree(composite, &|k| inner.groups.get(k).cloned())
    }

    /// The group, if it exists.
    pub fn group(&self, key: &PodGroupKey) -> Option<Arc<PodGroupInfo>> {
        self.inner.read().groups.get(key).cloned()
    }

    /// Every group, in key order.
    pub fn groups(&self) -> Vec<Arc<PodGroupInfo>> {
        let inner = self.inner.read();
        let mut out: Vec<_> = inner.groups.values().cloned().collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// A pod was added or changed: recorded under the group it names (nothing when it names
    /// none). A pod that finished (Succeeded or Failed) no longer counts.
    pub fn observe_pod(&self, pod: &Pod) {
        let Some(key) = PodGroupKey::of_pod(pod) else {
            return;
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let finished = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        let mut inner = self.inner.write();
        if finished {
            remove_member(&mut inner, &key, &uid);
            return;
        }
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        inner.members.entry(key).or_default().insert(uid, Member { node });
    }

    /// A pod was deleted.
    pub fn forget_pod(&self, pod: &Pod) {
        let Some(key) = PodGroupKey::of_pod(pod) else {
            return;
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        remove_member(&mut self.inner.write(), &key, &uid);
    }

    /// How many member pods the watches saw (bound or not): upstream's "all pods" count. Cheaper
    /// than [`Self::counts`], which walks the members for the placed ones.
    pub fn member_count(&self, key: &PodGroupKey) -> usize {
        self.inner.read().members.get(key).map_or(0, BTreeMap::len)
    }

    /// Whether the group's pods may enter the queue now: the group exists and, for a gang,
    /// `minCount` of its pods exist. GangScheduling's PreEnqueue refuses exactly when this is false.
    pub fn admits_members(&self, key: &PodGroupKey) -> bool {
        let inner = self.inner.read();
        let Some(group) = inner.groups.get(key) else {
            return false;
        };
        !group.is_gang() || inner.members.get(key).map_or(0, BTreeMap::len) >= group.min_count()
    }

    /// How many members the group has and how many are placed: bound ones, plus those
    /// `is_assumed` says are assumed (the cache knows; the watches do not yet).
    pub fn counts(&self, key: &PodGroupKey, is_assumed: &dyn Fn(&str) -> bool) -> MemberCounts {
        let inner = self.inner.read();
        let Some(members) = inner.members.get(key) else {
            return MemberCounts::default();
        };
        MemberCounts {
            all: members.len(),
            scheduled: members
                .iter()
                .filter(|(uid, m)| m.node.is_some() || is_assumed(uid))
                .count(),
        }
    }

    /// The nodes the group's bound members are on, in uid order.
    pub fn bound_nodes(&self, key: &PodGroupKey) -> Vec<String> {
        let inner = self.inner.read();
        inner
            .members
            .get(key)
            .map(|m| m.values().filter_map(|m| m.node.clone()).collect())
            .unwrap_or_default()
    }

    /// The nodes the bound members of every PodGroup under a composite are on.
    pub fn subtree_bound_nodes(&self, composite: &PodGroupKey) -> Vec<String> {
        let Some(tree) = self.tree(composite) else {
            return Vec::new();
        };
        tree.leaves()
            .iter()
            .flat_map(|g| self.bound_nodes(&g.key))
            .collect()
    }

    /// The uids of the group's members that are bound, in uid order.
    pub fn bound_members(&self, key: &PodGroupKey) -> Vec<String> {
        self.members_where(key, true)
    }

    /// The uids of the group's members that are not bound, in uid order.
    pub fn unbound_members(&self, key: &PodGroupKey) -> Vec<String> {
        self.members_where(key, false)
    }

    /// The uids of the group's members that are bound (or not), in uid order.
    fn members_where(&self, key: &PodGroupKey, bound: bool) -> Vec<String> {
        let inner = self.inner.read();
        inner
            .members
            .get(key)
            .map(|m| {
                m.iter()
                    .filter(|(_, m)| m.node.is_some() == bound)
                    .map(|(uid, _)| uid.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Whether enough of a composite's children are ready (see
/// [`PodGroupStore::tree_admits_members`]); a loop is not ready.
fn composite_ready(inner: &Inner, key: &PodGroupKey, seen: &mut HashSet<PodGroupKey>) -> bool {
    let Some(info) = inner.forest.composite(key) else {
        return false;
    };
    if !seen.insert(key.clone()) {
        return false;
    }
    let ready = inner
        .forest
        .children(key)
        .iter()
        .filter(|child| match child {
            GroupNodeKey::Composite(k) => composite_ready(inner, k, seen),
            GroupNodeKey::Group(k) => inner
                .groups
                .get(k)
                .is_some_and(|g| inner.members.get(k).map_or(0, BTreeMap::len) >= g.min_count()),
        })
        .count();
    ready >= info.min_count()
}

fn remove_member(inner: &mut Inner, key: &PodGroupKey, uid: &str) {
    if let Some(members) = inner.members.get_mut(key) {
        members.remove(uid);
        if members.is_empty() {
            inner.members.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::{
            core::v1::{PodSchedulingGroup, PodSpec, PodStatus},
            scheduling::v1beta1::{GangSchedulingPolicy, PodGroupSchedulingPolicy, PodGroupSpec},
        },
        apimachinery::pkg::apis::meta::v1::ObjectMeta,
    };

    use super::*;

    fn pod(uid: &str, group: &str, node: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(uid.into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(str::to_string),
                scheduling_group: Some(PodSchedulingGroup {
                    pod_group_name: Some(group.into()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn gang(name: &str, min: i32) -> Arc<PodGroup> {
        Arc::new(PodGroup {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                ..Default::default()
            },
            spec: PodGroupSpec {
                scheduling_policy: PodGroupSchedulingPolicy {
                    gang: Some(GangSchedulingPolicy { min_count: min }),
                    ..Default::default()
                },
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[test]
    fn members_are_counted_before_and_after_their_group_exists() {
        let store = PodGroupStore::new();
        let key = PodGroupKey::new("ns", "g");
        store.observe_pod(&pod("a", "g", None));
        store.observe_pod(&pod("b", "g", Some("n1")));
        store.observe_pod(&pod("c", "other", None));
        assert!(store.group(&key).is_none());
        assert_eq!(
            store.counts(&key, &|_| false),
            MemberCounts { all: 2, scheduled: 1 }
        );
        assert_eq!(
            store.counts(&key, &|uid| uid == "a"),
            MemberCounts { all: 2, scheduled: 2 }
        );
        let info = store.set_group(gang("g", 3));
        assert_eq!(info.min_count(), 3);
        assert_eq!(store.bound_nodes(&key), vec!["n1".to_string()]);
        assert_eq!(store.unbound_members(&key), vec!["a".to_string()]);
        store.remove_group(&key);
        assert_eq!(
            store.counts(&key, &|_| false).all,
            2,
            "members outlive their group"
        );
    }

    #[test]
    fn deleted_and_finished_pods_leave_the_group() {
        let store = PodGroupStore::new();
        let key = PodGroupKey::new("ns", "g");
        store.observe_pod(&pod("a", "g", None));
        store.observe_pod(&pod("b", "g", None));
        store.forget_pod(&pod("a", "g", None));
        let mut done = pod("b", "g", Some("n1"));
        done.status = Some(PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        store.observe_pod(&done);
        assert_eq!(store.counts(&key, &|_| false), MemberCounts::default());
    }

    #[test]
    fn a_non_positive_min_count_is_taken_as_one() {
        let store = PodGroupStore::new();
        assert_eq!(store.set_group(gang("g", 0)).min_count(), 1);
    }
}

//! The forest of groups: which CompositePodGroup each group is a child of, and the tree a root
//! composite heads.
//!
//! Parents, children and pods arrive in any order, so the links are kept by the parent's *name*
//! whether or not the parent exists yet; a tree is assembled when it is asked for, from what
//! exists then. A group whose chain of parents is broken (a parent not seen yet) has no root and
//! cannot be scheduled until it has one. A chain that loops (the API server refuses it, a stored
//! one must not hang the scheduler) has no root either.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::Arc,
};

use super::{CompositePodGroupInfo, GroupNodeKey, GroupTree, PodGroupInfo, PodGroupKey};

/// Why a group has no root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoRoot {
    /// The group itself is not known.
    Unknown,
    /// This ancestor is named but does not exist (yet).
    MissingParent(PodGroupKey),
    /// The chain of parents loops.
    Cycle,
}

/// The links between groups. Not locked: [`PodGroupStore`](super::PodGroupStore) keeps it under
/// its own lock, beside the groups.
#[derive(Debug, Default)]
pub(super) struct Forest {
    composites: HashMap<PodGroupKey, Arc<CompositePodGroupInfo>>,
    /// The parent each node names (only nodes that name one).
    parents: HashMap<GroupNodeKey, PodGroupKey>,
    /// The children that name each composite (existing or not).
    children: HashMap<PodGroupKey, BTreeSet<GroupNodeKey>>,
}

impl Forest {
    /// A composite was added or changed.
    pub(super) fn set_composite(&mut self, info: Arc<CompositePodGroupInfo>) {
        let node = GroupNodeKey::Composite(info.key.clone());
        let parent = info
            .parent
            .as_ref()
            .map(|p| PodGroupKey::new(info.key.namespace.clone(), p.clone()));
        self.link(node, parent);
        self.composites.insert(info.key.clone(), info);
    }

    /// A composite was deleted. Its children keep naming it: it may be recreated.
    pub(super) fn remove_composite(&mut self, key: &PodGroupKey) -> Option<Arc<CompositePodGroupInfo>> {
        self.link(GroupNodeKey::Composite(key.clone()), None);
        self.composites.remove(key)
    }

    /// A PodGroup was added or changed: linked under the parent it names, if any.
    pub(super) fn set_group(&mut self, group: &PodGroupInfo) {
        let parent = group
            .parent
            .as_ref()
            .map(|p| PodGroupKey::new(group.key.namespace.clone(), p.clone()));
        self.link(GroupNodeKey::Group(group.key.clone()), parent);
    }

    /// A PodGroup was deleted.
    pub(super) fn remove_group(&mut self, key: &PodGroupKey) {
        self.link(GroupNodeKey::Group(key.clone()), None);
    }

    /// The composite, if it exists.
    pub(super) fn composite(&self, key: &PodGroupKey) -> Option<Arc<CompositePodGroupInfo>> {
        self.composites.get(key).cloned()
    }

    /// Every composite, in key order.
    pub(super) fn composites(&self) -> Vec<Arc<CompositePodGroupInfo>> {
        let mut out: Vec<_> = self.composites.values().cloned().collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// The children that name the composite, in key order (whether they exist or not).
    pub(super) fn children(&self, key: &PodGroupKey) -> Vec<GroupNodeKey> {
        self.children
            .get(key)
            .map(|c| c.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The parent a node names, if any.
    pub(super) fn parent(&self, node: &GroupNodeKey) -> Option<&PodGroupKey> {
        self.parents.get(node)
    }

    /// The root of the tree `node` is in: itself when it names no parent; else the first
    /// ancestor that names none. An error when an ancestor does not exist (yet) or the chain
    /// loops.
    pub(super) fn root_of(&self, node: &GroupNodeKey) -> Result<GroupNodeKey, NoRoot> {
        let mut current = node.clone();
        let mut seen = HashSet::new();
        loop {
            let Some(parent) = self.parents.get(&current) else {
                return Ok(current);
            };
            if !seen.insert(parent.clone()) {
                tracing::warn!(%node, "cycle detected in composite pod group hierarchy");
                return Err(NoRoot::Cycle);
            }
            if !self.composites.contains_key(parent) {
                return Err(NoRoot::MissingParent(parent.clone()));
            }
            current = GroupNodeKey::Composite(parent.clone());
        }
    }

    /// The tree under the composite `root`, with the PodGroups `group` finds. Children that do
    /// not exist are left out; a composite seen twice (a loop) ends the branch.
    pub(super) fn tree(
        &self,
        root: &PodGroupKey,
        group: &dyn Fn(&PodGroupKey) -> Option<Arc<PodGroupInfo>>,
    ) -> Option<GroupTree> {
        let mut seen = HashSet::new();
        self.subtree(root, group, &mut seen)
    }

    fn subtree(
        &self,
        key: &PodGroupKey,
        group: &dyn Fn(&PodGroupKey) -> Option<Arc<PodGroupInfo>>,
        seen: &mut HashSet<PodGroupKey>,
    ) -> Option<GroupTree> {
        let info = self.composites.get(key)?.clone();
        if !seen.insert(key.clone()) {
            tracing::warn!(composite = %key, "cycle detected in composite pod group hierarchy");
            return None;
        }
        let mut children: Vec<GroupTree> = self
            .children(key)
            .iter()
            .filter_map(|child| match child {
                GroupNodeKey::Group(k) => group(k).map(GroupTree::Leaf),
                GroupNodeKey::Composite(k) => self.subtree(k, group, seen),
            })
            .collect();
        children.sort_by(|a, b| {
            created(a)
                .cmp(&created(b))
                .then_with(|| a.node_key().key().name.cmp(&b.node_key().key().name))
                .then_with(|| a.node_key().cmp(&b.node_key()))
        });
        Some(GroupTree::Composite { info, children })
    }

    /// Moves `node` under `parent` (or under none).
    fn link(&mut self, node: GroupNodeKey, parent: Option<PodGroupKey>) {
        if let Some(old) = self.parents.remove(&node)
            && let Some(siblings) = self.children.get_mut(&old)
        {
            siblings.remove(&node);
            if siblings.is_empty() {
                self.children.remove(&old);
            }
        }
        if let Some(parent) = parent {
            self.children
                .entry(parent.clone())
                .or_default()
                .insert(node.clone());
            self.parents.insert(node, parent);
        }
    }
}

/// When a node's object was created (`None` sorts first, as upstream's zero time does).
fn created(node: &GroupTree) -> Option<&k8s_openapi::jiff::Timestamp> {
    match node {
        GroupTree::Leaf(g) => g.object.metadata.creation_timestamp.as_ref().map(|t| &t.0),
        GroupTree::Composite { info, .. } => info.created().map(|t| &t.0),
    }
}

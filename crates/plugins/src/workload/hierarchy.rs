//! GangScheduling over trees of groups (the CompositePodGroup gate): a pod of a group with a
//! parent composite is admitted when its whole tree is ready, and an event in one group of a
//! tree concerns the waiting pods of every group of it.
//!
//! A tree is ready when its root composite is: enough of its children ready (`minGroupCount`
//! for a gang composite, one for a basic one), a PodGroup child being ready when `minCount` of
//! its pods exist (one for a basic group). The whole tree is decided in one cycle, so a pod
//! entering the queue before its tree is ready would only be tried and refused.

use unisched_framework::{GroupNodeKey, NoRoot, PodGroupKey, PodGroupStore, Status};

/// PreEnqueue for a pod of a group whose parent composite is `parent`.
pub(super) fn pre_enqueue(groups: &PodGroupStore, namespace: &str, parent: &str) -> Status {
    let parent_key = PodGroupKey::new(namespace, parent);
    let root = match groups.root(&GroupNodeKey::Composite(parent_key.clone())) {
        Ok(GroupNodeKey::Composite(root)) => root,
        Ok(GroupNodeKey::Group(_)) | Err(NoRoot::Cycle) => {
            return Status::unresolvable(format!(
                "failed to build hierarchy snapshot: composite pod group object not found in state for {}",
                entity(&parent_key)
            ));
        }
        Err(NoRoot::Unknown) => {
            return Status::unresolvable(format!(
                "failed to build hierarchy snapshot: parent composite pod group state not found for {}",
                entity(&parent_key)
            ));
        }
        Err(NoRoot::MissingParent(missing)) => {
            return Status::unresolvable(format!(
                "failed to build hierarchy snapshot: parent composite pod group state not found for {}",
                entity(&missing)
            ));
        }
    };
    if groups.tree_admits_members(&root) {
        Status::success()
    } else {
        Status::unresolvable(format!(
            "waiting for composite pod group {:?} tree to meet quorum",
            root.name
        ))
    }
}

/// PreEnqueue for a pod whose PodGroup does not exist: with the gate, upstream looks the group up
/// in its hierarchy snapshot first, and says so in that lookup's words (its members being known
/// or not).
pub(super) fn group_missing(groups: &PodGroupStore, key: &PodGroupKey) -> Status {
    let what = if groups.member_count(key) > 0 {
        "pod group object not found in state for"
    } else {
        "pod group state not found for"
    };
    Status::unresolvable(format!(
        "failed to build hierarchy snapshot: {what} podgroup/{}/{}",
        key.namespace, key.name
    ))
}

/// The root composite of the tree a PodGroup is in, when it is in one.
pub(super) fn root_composite(groups: &PodGroupStore, group: &PodGroupKey) -> Option<PodGroupKey> {
    if !groups.composites_enabled() {
        return None;
    }
    match groups.root_of(&GroupNodeKey::Group(group.clone()))? {
        GroupNodeKey::Composite(root) => Some(root),
        GroupNodeKey::Group(_) => None,
    }
}

/// True when two PodGroups are in the same tree.
pub(super) fn same_tree(groups: &PodGroupStore, a: &PodGroupKey, b: &PodGroupKey) -> bool {
    match (root_composite(groups, a), root_composite(groups, b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Every PodGroup of the tree `group` is in (only `group` when it is in none).
pub(super) fn tree_groups(groups: &PodGroupStore, group: &PodGroupKey) -> Vec<PodGroupKey> {
    root_composite(groups, group)
        .and_then(|root| groups.tree(&root))
        .map(|tree| tree.leaves().iter().map(|g| g.key.clone()).collect())
        .unwrap_or_else(|| vec![group.clone()])
}

/// Upstream's printed entity key of a composite (`compositepodgroup/<namespace>/<name>`).
fn entity(key: &PodGroupKey) -> String {
    format!("compositepodgroup/{}/{}", key.namespace, key.name)
}

//! Nodes found short of free devices, remembered across attempts, and the node veto built on them.
//!
//! Once most devices of a class are taken, a pod that needs one is feasible on few nodes, and
//! every attempt used to run the whole Filter chain on thousands of nodes to find them, each
//! time asking the device summary the same question about the same full nodes. This module
//! remembers the answer.
//!
//! For the claim shape the summary decides ([`unisched_dra::summary_shape`]), a node's verdict is
//! a function of how many devices matching the claim's selectors are free there. When Filter's
//! summary finds a node short it records that free count, per selector list and node slot
//! ([`unisched_dra::DraSnapshotIndex::node_slot`]). The count stays an upper bound for as long as
//! the slice index is the same and no device can have been freed
//! ([`unisched_cache::DraSnapshot::frees`]): later allocations only lower it. A table is tied to
//! those two and replaced when either moves.
//!
//! The next pod with the same selector list gets a [`ShortNodeVeto`]: a node whose recorded count
//! is below the pod's device count is rejected by this plugin's Filter for certain, so the
//! algorithm may pass over it ([`unisched_framework::NodeVeto`]). So is a node without slices of
//! its own when no slice serves several nodes: it has no devices at all.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;
use unisched_cache::DraSnapshot;
use unisched_dra::{DraSnapshotIndex, SelectorId};
use unisched_framework::{NodeInfo, NodeVeto};

/// Selector lists remembered at once; more start over (a cluster has a handful of classes).
const MAX_TABLES: usize = 16;

/// No count recorded for the node.
const UNKNOWN: u32 = u32::MAX;

/// Free matching devices per node slot for one selector list (see the module documentation).
#[derive(Debug)]
pub(crate) struct ShortTable {
    key: Box<[SelectorId]>,
    free: Box<[AtomicU32]>,
}

impl ShortTable {
    /// Records that the node in `slot` has `free` matching devices free.
    pub fn record(&self, slot: u32, free: usize) {
        if let Some(cell) = self.free.get(slot as usize) {
            let free = u32::try_from(free).unwrap_or(UNKNOWN - 1);
            cell.fetch_min(free, Ordering::Relaxed);
        }
    }

    /// The recorded free count of the node in `slot`, if any.
    fn free(&self, slot: u32) -> Option<u32> {
        let v = self.free.get(slot as usize)?.load(Ordering::Relaxed);
        (v != UNKNOWN).then_some(v)
    }
}

#[derive(Debug, Default)]
struct Tables {
    index: Option<Arc<DraSnapshotIndex>>,
    frees: u64,
    tables: Vec<Arc<ShortTable>>,
}

/// The plugin's memory of short nodes (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct ShortNodes(Mutex<Tables>);

impl ShortNodes {
    /// The table for selector list `key` that is valid for `snapshot`, new if none is.
    pub fn table_for(&self, snapshot: &DraSnapshot, key: &[SelectorId]) -> Arc<ShortTable> {
        let mut t = self.0.lock();
        let same_index = t.index.as_ref().is_some_and(|i| Arc::ptr_eq(i, snapshot.index()));
        if !same_index || t.frees != snapshot.frees() || t.tables.len() >= MAX_TABLES {
            t.index = Some(snapshot.index().clone());
            t.frees = snapshot.frees();
            t.tables.clear();
        }
        if let Some(table) = t.tables.iter().find(|tb| *tb.key == *key) {
            return table.clone();
        }
        let slots = snapshot.index().node_slot_count();
        let table = Arc::new(ShortTable {
            key: key.into(),
            free: (0..slots).map(|_| AtomicU32::new(UNKNOWN)).collect(),
        });
        t.tables.push(table.clone());
        table
    }
}

/// The node's slot in `index` ([`DraSnapshotIndex::node_slot`]), remembered on the node for the
/// index's id ([`unisched_framework::SlotMemo`]): the veto and Filter ask it for every node and
/// attempt, and the index changes only when slices do.
pub(crate) fn node_slot(index: &DraSnapshotIndex, node: &NodeInfo) -> Option<u32> {
    node.dra_slot
        .get_or_lookup(index.id(), || index.node_slot(node.name()))
}

/// The veto for one pod: its one claim of the summary's shape needs `needed` devices.
pub(crate) struct ShortNodeVeto {
    pub index: Arc<DraSnapshotIndex>,
    pub table: Arc<ShortTable>,
    pub needed: usize,
}

impl NodeVeto for ShortNodeVeto {
    fn vetoes(&self, node: &NodeInfo) -> bool {
        if self.needed == 0 {
            return false;
        }
        match node_slot(&self.index, node) {
            Some(slot) => self
                .table
                .free(slot)
                .is_some_and(|free| (free as usize) < self.needed),
            None => !self.index.has_node_independent_slices(),
        }
    }
}

#[cfg(test)]
mod tests {
    use unisched_dra::PreparedSlice;
    use unisched_dra::testing::slice;

    use super::*;
    use crate::testing::NodeBuilder;

    fn index(nodes: &[&str]) -> DraSnapshotIndex {
        DraSnapshotIndex::new(nodes.iter().map(|n| {
            Arc::new(PreparedSlice::new(Arc::new(
                slice(&format!("{n}-slice"), "gpu.example.com", n, n).build(),
            )))
        }))
    }

    /// The slot remembered on a node is the one of the index asked: a new index (slices
    /// changed) numbers its nodes anew, and the node's memo follows it.
    #[test]
    fn node_slot_follows_the_index_it_is_asked_for() {
        let node = NodeBuilder::new("b").info();
        let first = index(&["a", "b"]);
        let second = index(&["b"]);
        let third = index(&["a"]);
        assert_ne!(
            first.node_slot("b"),
            second.node_slot("b"),
            "the test needs the slot to move"
        );
        for idx in [&first, &second, &third, &first, &third, &second] {
            assert_eq!(node_slot(idx, &node), idx.node_slot("b"));
        }
        // A copy of the NodeInfo (made when pods change) answers the same.
        assert_eq!(node_slot(&second, &node.clone()), second.node_slot("b"));
    }
}

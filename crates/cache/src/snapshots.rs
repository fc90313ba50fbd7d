//! Recycling snapshots so that a new one costs O(changed nodes) even while old ones are held.
//!
//! A snapshot is shared (`Arc<Snapshot>`): the scheduling cycle of one pod hands it on to that pod's
//! binding cycle, which still holds it while the next pod is scheduled. A held snapshot must never
//! change, so the next one cannot simply be updated in place; copying its node list costs one
//! reference-count increment per node, and each of those touches another `NodeInfo`'s cache line
//! (about 60 µs at 5,000 nodes), plus as much again when the copy is dropped later.
//!
//! Instead the pool keeps the last few snapshots once they have been replaced. When none of them is
//! held any more (its binding cycle finished), the oldest free one is brought up to date by replaying
//! the node names changed since its version (kept in a short log) and becomes the new snapshot. Only
//! when every kept snapshot is still held is the node list copied. When the set of nodes changes, the
//! order is rebuilt and the kept snapshots (with the old order) are discarded.

use std::{collections::VecDeque, sync::Arc};

use unisched_framework::{NodeInfo, Snapshot};

/// How many replaced snapshots are kept for reuse. More than the binding cycles usually in flight at
/// once; each costs one pointer per node.
const SPARES: usize = 4;

/// A replaced snapshot and the version it shows.
#[derive(Debug)]
struct Spare {
    snap: Arc<Snapshot>,
    version: u64,
}

/// The current snapshot plus replaced ones kept for reuse.
#[derive(Debug, Default)]
pub(crate) struct SnapshotPool {
    current: Arc<Snapshot>,
    /// Version of `current`; bumped whenever a new snapshot is produced.
    version: u64,
    spares: Vec<Spare>,
    /// For each version still needed by a spare: the nodes that changed to reach it.
    log: VecDeque<(u64, Vec<String>)>,
}

/// A changed node that the snapshot does not have: the caller must rebuild the order.
#[derive(Debug)]
pub(crate) struct MissingNode;

impl SnapshotPool {
    /// The current snapshot.
    pub(crate) fn current(&self) -> &Arc<Snapshot> {
        &self.current
    }

    /// Installs a snapshot of `list` (in that order). If it equals the current one node for node,
    /// the current one stays (nothing visible changed).
    pub(crate) fn rebuild(&mut self, list: Vec<Arc<NodeInfo>>) {
        let same = list.len() == self.current.len()
            && list
                .iter()
                .zip(self.current.nodes())
                .all(|(a, b)| Arc::ptr_eq(a, b));
        if same {
            return;
        }
        self.current = Arc::new(Snapshot::new(list));
        self.version += 1;
        self.spares.clear();
        self.log.clear();
    }

    /// Produces a snapshot with `changed` swapped in, keeping the order. `lookup` gives the cache's
    /// current `NodeInfo` for a node name (used to bring a spare up to date).
    pub(crate) fn apply(
        &mut self,
        changed: Vec<Arc<NodeInfo>>,
        lookup: impl Fn(&str) -> Option<Arc<NodeInfo>>,
    ) -> Result<(), MissingNode> {
        if changed.is_empty() {
            return Ok(());
        }
        self.version += 1;
        let names = changed.iter().map(|n| n.name().to_string()).collect();
        self.log.push_back((self.version, names));

        if let Some(snap) = Arc::get_mut(&mut self.current) {
            // Nobody holds the current snapshot: update it in place.
            replace_all(snap, changed)?;
        } else if let Some(i) = self.free_spare() {
            let mut spare = self.spares.swap_remove(i);
            let snap = Arc::get_mut(&mut spare.snap).ok_or(MissingNode)?;
            for (_, names) in self.log.iter().filter(|(v, _)| *v > spare.version) {
                for name in names {
                    let info = lookup(name).ok_or(MissingNode)?;
                    if !snap.replace(info) {
                        return Err(MissingNode);
                    }
                }
            }
            self.retire(spare.snap);
        } else {
            let mut next = Snapshot::clone(&self.current);
            replace_all(&mut next, changed)?;
            self.retire(Arc::new(next));
        }
        self.trim_log();
        Ok(())
    }

    /// The oldest spare nobody holds.
    fn free_spare(&mut self) -> Option<usize> {
        let mut best: Option<(usize, u64)> = None;
        for (i, s) in self.spares.iter_mut().enumerate() {
            if Arc::get_mut(&mut s.snap).is_some() && best.is_none_or(|(_, v)| s.version < v) {
                best = Some((i, s.version));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Makes `next` current and keeps the previous one as a spare.
    fn retire(&mut self, next: Arc<Snapshot>) {
        let previous = std::mem::replace(&mut self.current, next);
        self.spares.push(Spare {
            snap: previous,
            version: self.version - 1,
        });
        if self.spares.len() > SPARES
            && let Some(oldest) = (0..self.spares.len()).min_by_key(|i| self.spares[*i].version)
        {
            self.spares.swap_remove(oldest);
        }
    }

    /// Drops log entries no spare needs.
    fn trim_log(&mut self) {
        let oldest = self
            .spares
            .iter()
            .map(|s| s.version)
            .min()
            .unwrap_or(self.version);
        while self.log.front().is_some_and(|(v, _)| *v <= oldest) {
            self.log.pop_front();
        }
    }

    /// Number of kept spares (tests).
    #[cfg(test)]
    pub(crate) fn spare_count(&self) -> usize {
        self.spares.len()
    }
}

fn replace_all(snap: &mut Snapshot, changed: Vec<Arc<NodeInfo>>) -> Result<(), MissingNode> {
    for info in changed {
        if !snap.replace(info) {
            return Err(MissingNode);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use k8s_openapi::{api::core::v1::Node, apimachinery::pkg::apis::meta::v1::ObjectMeta};

    use super::*;

    fn info(name: &str, tag: u64) -> Arc<NodeInfo> {
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut ni = NodeInfo::new(Arc::new(node));
        ni.requested.milli_cpu = i64::try_from(tag).unwrap_or(0);
        Arc::new(ni)
    }

    fn tags(s: &Snapshot) -> Vec<i64> {
        s.nodes().iter().map(|n| n.requested.milli_cpu).collect()
    }

    /// A fake cache: name → current NodeInfo.
    struct Live(HashMap<String, Arc<NodeInfo>>);

    impl Live {
        fn set(&mut self, name: &str, tag: u64) -> Arc<NodeInfo> {
            let i = info(name, tag);
            self.0.insert(name.into(), i.clone());
            i
        }
    }

    #[test]
    fn reuses_free_spares_and_copies_only_when_all_are_held() {
        let mut live = Live(HashMap::new());
        let list: Vec<_> = ["a", "b", "c"].iter().map(|n| live.set(n, 0)).collect();
        let mut pool = SnapshotPool::default();
        pool.rebuild(list);

        // Held snapshots force copies; each replaced one is kept as a spare.
        let mut held = Vec::new();
        for round in 1..=6u64 {
            held.push(pool.current().clone());
            let changed = live.set("b", round);
            pool.apply(vec![changed], |n| live.0.get(n).cloned()).unwrap();
            assert_eq!(tags(pool.current()), [0, i64::try_from(round).unwrap(), 0]);
        }
        assert_eq!(pool.spare_count(), SPARES);
        // Every held snapshot still shows what it showed.
        for (i, s) in held.iter().enumerate() {
            assert_eq!(tags(s), [0, i64::try_from(i).unwrap(), 0]);
        }

        // Release them (but hold the current one): the next update reuses the oldest free spare,
        // replaying the log.
        held.clear();
        let keep = pool.current().clone();
        let spare_ptrs: Vec<*const Snapshot> = pool.spares.iter().map(|s| Arc::as_ptr(&s.snap)).collect();
        let a = live.set("a", 7);
        pool.apply(vec![a], |n| live.0.get(n).cloned()).unwrap();
        assert_eq!(tags(pool.current()), [7, 6, 0]);
        assert!(
            spare_ptrs.contains(&Arc::as_ptr(pool.current())),
            "a spare was reused"
        );
        assert_eq!(tags(&keep), [0, 6, 0], "the held snapshot is untouched");
        drop(keep);
        for n in pool.current().nodes() {
            assert!(Arc::ptr_eq(n, &live.0[n.name()]));
        }

        // Nobody holds the current one: updated in place.
        let before = Arc::as_ptr(pool.current());
        let c = live.set("c", 9);
        pool.apply(vec![c], |n| live.0.get(n).cloned()).unwrap();
        assert_eq!(Arc::as_ptr(pool.current()), before);
        assert_eq!(tags(pool.current()), [7, 6, 9]);

        // A spare reused much later still catches up with every change since its version.
        let h1 = pool.current().clone();
        let b = live.set("b", 10);
        pool.apply(vec![b], |n| live.0.get(n).cloned()).unwrap();
        let h2 = pool.current().clone();
        let a = live.set("a", 11);
        pool.apply(vec![a], |n| live.0.get(n).cloned()).unwrap();
        drop(h1);
        let c = live.set("c", 12);
        pool.apply(vec![c], |n| live.0.get(n).cloned()).unwrap();
        assert_eq!(tags(pool.current()), [11, 10, 12]);
        assert_eq!(tags(&h2), [7, 10, 9]);

        // A missing node is reported.
        let z = info("z", 1);
        assert!(pool.apply(vec![z], |n| live.0.get(n).cloned()).is_err());
    }
}

//! An index over the unschedulable pool, so that an event is offered only to the pods it can
//! concern.
//!
//! Upstream offers every cluster event to every pooled pod and lets the queueing hints sort them
//! out. That is a product of two large numbers when thousands of pods wait for their claims and
//! every claim write is an event: the per-pod hint calls, not the hints, dominated the runtime's
//! CPU. The index keeps, for every pooled pod, the keys plugins gave it
//! ([`unisched_framework::EventNarrowing`]), the plugins that rejected it, and whether it has a
//! required pod-affinity term, so that the queue can compute a *superset* of the pods an event can
//! move and ask the hints only for those. The decisions are the same as walking the whole pool
//! (the queue's property test runs both and compares); only the number of pods asked changes.
//!
//! Invariant: the index describes exactly the pods in `State::unschedulable`, as they were put
//! there (pool entries are never changed in place, only taken out and put back).

use std::{
    collections::{BTreeSet, HashMap},
    fmt,
};

use unisched_framework::{PodKeysFn, QueuedPodInfo};

use crate::affinity::has_required_affinity;

/// See the module documentation.
#[derive(Default)]
pub(crate) struct PoolIndex {
    /// Every narrowing's pod-key function, from every profile.
    key_fns: Vec<PodKeysFn>,
    /// key → uids of the pooled pods carrying it.
    by_key: HashMap<String, BTreeSet<String>>,
    /// uid → the keys it was indexed under (to remove them again).
    keys_of: HashMap<String, Vec<String>>,
    /// plugin → uids of the pooled pods it rejected (unschedulable or pending).
    by_plugin: HashMap<String, BTreeSet<String>>,
    /// Pooled pods no plugin rejected (failed with an error, or never attempted): every event a
    /// profile registered moves them.
    unrejected: BTreeSet<String>,
    /// Pooled pods with a required pod-affinity term.
    with_required_affinity: BTreeSet<String>,
}

impl fmt::Debug for PoolIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolIndex")
            .field("key_fns", &self.key_fns.len())
            .field("keys", &self.by_key.len())
            .field("pods", &self.keys_of.len())
            .finish()
    }
}

fn add(map: &mut HashMap<String, BTreeSet<String>>, key: &str, uid: &str) {
    match map.get_mut(key) {
        Some(set) => {
            set.insert(uid.to_string());
        }
        None => {
            map.insert(key.to_string(), BTreeSet::from([uid.to_string()]));
        }
    }
}

fn remove(map: &mut HashMap<String, BTreeSet<String>>, key: &str, uid: &str) {
    if let Some(set) = map.get_mut(key) {
        set.remove(uid);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

impl PoolIndex {
    /// An empty index that keys pods with `key_fns`.
    pub(crate) fn new(key_fns: Vec<PodKeysFn>) -> Self {
        PoolIndex {
            key_fns,
            ..PoolIndex::default()
        }
    }

    /// Indexes a pod entering the pool.
    pub(crate) fn insert(&mut self, q: &QueuedPodInfo) {
        let uid = q.pod_info.uid.as_str();
        let mut keys: Vec<String> = self.key_fns.iter().flat_map(|f| f(&q.pod_info.pod)).collect();
        keys.sort_unstable();
        keys.dedup();
        for k in &keys {
            add(&mut self.by_key, k, uid);
        }
        if !keys.is_empty() {
            self.keys_of.insert(uid.to_string(), keys);
        }
        for p in q.unschedulable_plugins.union(&q.pending_plugins) {
            add(&mut self.by_plugin, p, uid);
        }
        if q.unschedulable_plugins.is_empty() && q.pending_plugins.is_empty() {
            self.unrejected.insert(uid.to_string());
        }
        if has_required_affinity(&q.pod_info.pod) {
            self.with_required_affinity.insert(uid.to_string());
        }
    }

    /// Forgets a pod leaving the pool (`q` as it was inserted).
    pub(crate) fn remove(&mut self, q: &QueuedPodInfo) {
        let uid = q.pod_info.uid.as_str();
        for k in self.keys_of.remove(uid).unwrap_or_default() {
            remove(&mut self.by_key, &k, uid);
        }
        for p in q.unschedulable_plugins.union(&q.pending_plugins) {
            remove(&mut self.by_plugin, p, uid);
        }
        self.unrejected.remove(uid);
        self.with_required_affinity.remove(uid);
    }

    /// The pooled pods carrying `key`.
    pub(crate) fn with_key<'a>(&'a self, key: &str) -> impl Iterator<Item = &'a str> + 'a {
        self.by_key.get(key).into_iter().flatten().map(String::as_str)
    }

    /// The pooled pods `plugin` rejected.
    pub(crate) fn rejected_by<'a>(&'a self, plugin: &str) -> impl Iterator<Item = &'a str> + 'a {
        self.by_plugin
            .get(plugin)
            .into_iter()
            .flatten()
            .map(String::as_str)
    }

    /// The pooled pods no plugin rejected.
    pub(crate) fn unrejected(&self) -> impl Iterator<Item = &str> {
        self.unrejected.iter().map(String::as_str)
    }

    /// The pooled pods with a required pod-affinity term.
    pub(crate) fn with_required_affinity(&self) -> impl Iterator<Item = &str> {
        self.with_required_affinity.iter().map(String::as_str)
    }

    /// Checks the index against the pool (for `check_consistency`).
    pub(crate) fn check<'a>(
        &self,
        pool: impl Iterator<Item = (&'a String, &'a QueuedPodInfo)>,
    ) -> Result<(), String> {
        let mut expected = PoolIndex::new(self.key_fns.clone());
        for (_, q) in pool {
            expected.insert(q);
        }
        let same = expected.by_key == self.by_key
            && expected.keys_of == self.keys_of
            && expected.by_plugin == self.by_plugin
            && expected.unrejected == self.unrejected
            && expected.with_required_affinity == self.with_required_affinity;
        if same {
            Ok(())
        } else {
            Err(format!(
                "the pool index does not describe the pool: {self:?} vs {expected:?} (by plugin {:?} vs {:?})",
                self.by_plugin, expected.by_plugin
            ))
        }
    }
}

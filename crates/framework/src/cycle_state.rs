//! `CycleState`: data a plugin computes once per scheduling attempt and reads at later points.
//!
//! PreFilter typically parses the pod once and stores the result here so that Filter, run for every
//! node in parallel, only reads. The state is therefore read-only during Filter and Score (`&self`);
//! a plugin that must record per-node results in Filter (DynamicResources does) stores a value with
//! its own interior mutability. Values are `Arc`ed so that cloning the state for preemption dry runs
//! is cheap; a plugin whose data is changed by `AddPod`/`RemovePod` stores it behind `StateData::clone_data`
//! so that the clone is deep where it has to be.

use std::{
    any::Any,
    borrow::Cow,
    collections::{BTreeSet, HashSet},
    fmt,
    sync::Arc,
};

use crate::Snapshot;

/// Data stored in the cycle state. `clone_data` is used when the state is cloned (preemption, the
/// nominated-pods pass); return a deep copy of whatever `AddPod`/`RemovePod` mutate.
pub trait StateData: Any + Send + Sync {
    /// A copy for a cloned cycle state.
    fn clone_data(&self) -> Arc<dyn StateData>;
    /// Upcast for downcasting.
    fn as_any(&self) -> &dyn Any;
    /// Upcast for downcasting, to change a value nobody else holds.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// Any `Clone` type is state data whose clone is its `Clone`.
impl<T: Any + Send + Sync + Clone> StateData for T {
    fn clone_data(&self) -> Arc<dyn StateData> {
        Arc::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Per-attempt key/value store shared by the plugins of one profile.
#[derive(Default, Clone)]
pub struct CycleState {
    /// Read by key in every plugin's Filter and Score, per node. A short list rather than a
    /// map: an attempt holds a dozen or two keys, nearly all the plugins' `&'static str`
    /// constants, so a lookup is mostly length and address compares, where hashing the key and
    /// comparing it byte by byte was ~8 % of SchedulingBasic's Filter and Score.
    data: Vec<(Cow<'static, str>, Arc<dyn StateData>)>,
    snapshot: Option<Arc<Snapshot>>,
    /// Filter plugins whose PreFilter returned Skip.
    pub skip_filter_plugins: HashSet<String>,
    /// Score plugins whose PreScore returned Skip.
    pub skip_score_plugins: HashSet<String>,
    /// Pods that plugins ask the queue to activate at the end of the cycle, by `namespace/name`.
    pub pods_to_activate: Vec<String>,
    /// Whether per-plugin duration metrics are recorded for this attempt (a sample, as upstream).
    pub record_plugin_metrics: bool,
    /// Set when the attempt is one member's of a pod-group cycle: PostFilter does not run (a
    /// member must not preempt for a group that may not fit as a whole), and Filter considers
    /// only the placement's nodes when there is one.
    pub pod_group: Option<PodGroupAttempt>,
}

/// What a pod-group cycle tells one member's attempt.
#[derive(Clone, Debug, Default)]
pub struct PodGroupAttempt {
    /// The nodes the member may go to (`None`: any).
    pub placement: Option<Arc<BTreeSet<String>>>,
    /// Names this try of the group, the same for all its members and never reused: what one
    /// member reserves for the group (a PodGroup's ResourceClaim allocation) the others of the
    /// same try may share, and nobody else.
    pub try_key: Arc<str>,
    /// Pods a pod-group preemption's dry run took out of the cluster: the snapshot no longer
    /// holds them, and plugins with a ledger of their own (DRA's allocated devices) must free
    /// what they hold, as a single pod's preemption tells them through RemovePod.
    pub removed: Option<Arc<[Arc<crate::PodInfo>]>>,
}

impl fmt::Debug for CycleState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CycleState")
            .field("keys", &self.data.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("skip_filter_plugins", &self.skip_filter_plugins)
            .field("skip_score_plugins", &self.skip_score_plugins)
            .finish()
    }
}

/// A key was read that no plugin wrote, or it held another type.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    /// Nothing was written under the key (usually: the PreFilter that writes it did not run).
    #[error("{0:?} not found in cycle state")]
    NotFound(String),
    /// The key holds a value of another type (two plugins using one key).
    #[error("cycle state key {0:?} holds a different type")]
    WrongType(String),
}

impl CycleState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty state bound to the snapshot of this attempt.
    pub fn with_snapshot(snapshot: Arc<Snapshot>) -> Self {
        CycleState {
            snapshot: Some(snapshot),
            ..Self::default()
        }
    }

    /// The snapshot this attempt schedules against (empty when none was set, as in unit tests).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.clone().unwrap_or_default()
    }

    /// Binds the state to a snapshot again: a pod-group preemption's dry run goes on using a
    /// member's state after the member's cycle let its snapshot go.
    pub fn attach_snapshot(&mut self, snapshot: Arc<Snapshot>) {
        self.snapshot = Some(snapshot);
    }

    /// Lets go of the attempt's snapshot. The scheduling cycle does so before handing the state
    /// to the binding cycle, whose plugins do not read it: a snapshot held until the bind
    /// finished pinned one per binding in flight, so the cache could no longer update its
    /// snapshot in place and copied the whole node list for every attempt.
    pub fn release_snapshot(&mut self) {
        self.snapshot = None;
    }

    /// How many nodes the attempt's snapshot has (without taking a reference to it: plugins ask
    /// per node, from every filter worker at once).
    pub fn node_count(&self) -> usize {
        self.snapshot.as_ref().map_or(0, |s| s.len())
    }

    /// Where `key` is in `data`: the same constant is found by its address, another string of
    /// the same length by comparing it.
    fn position(&self, key: &str) -> Option<usize> {
        self.data.iter().position(|(k, _)| {
            k.len() == key.len() && (std::ptr::eq(k.as_ptr(), key.as_ptr()) || **k == *key)
        })
    }

    /// Stores a value under `key`.
    pub fn write<T: StateData>(&mut self, key: impl Into<Cow<'static, str>>, value: T) {
        self.write_arc(key, Arc::new(value));
    }

    /// Stores an already shared value under `key`.
    pub fn write_arc(&mut self, key: impl Into<Cow<'static, str>>, value: Arc<dyn StateData>) {
        let key = key.into();
        match self.position(&key) {
            Some(i) => self.data[i].1 = value,
            None => self.data.push((key, value)),
        }
    }

    /// Reads the value under `key` as `T`.
    pub fn read<T: StateData>(&self, key: &str) -> Result<&T, StateError> {
        let i = self
            .position(key)
            .ok_or_else(|| StateError::NotFound(key.to_string()))?;
        (*self.data[i].1)
            .as_any()
            .downcast_ref::<T>()
            .ok_or_else(|| StateError::WrongType(key.to_string()))
    }

    /// Removes the value under `key`.
    pub fn delete(&mut self, key: &str) {
        if let Some(i) = self.position(key) {
            self.data.swap_remove(i);
        }
    }

    /// Changes the value under `key` (for `AddPod`/`RemovePod`, which run on a cloned state and
    /// must not touch the original's data): in place when this state alone holds it, else on a
    /// copy that replaces it. A preemption dry run adds and removes pods thousands of times on
    /// states of its own; copying the value each time was most of a group preemption's work.
    pub fn update<T: StateData + Clone>(
        &mut self,
        key: &str,
        f: impl FnOnce(&mut T),
    ) -> Result<(), StateError> {
        let i = self
            .position(key)
            .ok_or_else(|| StateError::NotFound(key.to_string()))?;
        if let Some(only) = Arc::get_mut(&mut self.data[i].1) {
            let v = only
                .as_any_mut()
                .downcast_mut::<T>()
                .ok_or_else(|| StateError::WrongType(key.to_string()))?;
            f(v);
            return Ok(());
        }
        let mut v = self.read::<T>(key)?.clone();
        f(&mut v);
        self.data[i].1 = Arc::new(v);
        Ok(())
    }

    /// A copy in which every value is `clone_data`'d.
    pub fn deep_clone(&self) -> CycleState {
        CycleState {
            data: self
                .data
                .iter()
                .map(|(k, v)| (k.clone(), (**v).clone_data()))
                .collect(),
            snapshot: self.snapshot.clone(),
            skip_filter_plugins: self.skip_filter_plugins.clone(),
            skip_score_plugins: self.skip_score_plugins.clone(),
            pods_to_activate: self.pods_to_activate.clone(),
            record_plugin_metrics: self.record_plugin_metrics,
            pod_group: self.pod_group.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Counter(u32);

    #[test]
    fn read_write_update_clone() {
        let mut s = CycleState::new();
        assert_eq!(
            s.read::<Counter>("c").unwrap_err(),
            StateError::NotFound("c".into())
        );
        s.write("c", Counter(1));
        assert_eq!(s.read::<Counter>("c").unwrap(), &Counter(1));
        assert_eq!(
            s.read::<String>("c").unwrap_err(),
            StateError::WrongType("c".into())
        );
        let mut copy = s.deep_clone();
        copy.update::<Counter>("c", |c| c.0 += 1).unwrap();
        assert_eq!(copy.read::<Counter>("c").unwrap(), &Counter(2));
        assert_eq!(
            s.read::<Counter>("c").unwrap(),
            &Counter(1),
            "the original is untouched"
        );
        s.delete("c");
        assert!(s.read::<Counter>("c").is_err());
    }

    /// A value this state alone holds is changed where it is; one shared with another state (a
    /// plain `clone`) is copied first, so the other state keeps its own.
    #[test]
    fn update_changes_in_place_only_what_nobody_shares() {
        let mut s = CycleState::new();
        s.write("c", Counter(1));
        let before: *const Counter = s.read::<Counter>("c").unwrap();
        s.update::<Counter>("c", |c| c.0 += 1).unwrap();
        let after: *const Counter = s.read::<Counter>("c").unwrap();
        assert_eq!(before, after, "unshared: changed in place");
        assert_eq!(s.read::<Counter>("c").unwrap(), &Counter(2));

        let shared = s.clone();
        s.update::<Counter>("c", |c| c.0 += 1).unwrap();
        assert_eq!(s.read::<Counter>("c").unwrap(), &Counter(3));
        assert_eq!(
            shared.read::<Counter>("c").unwrap(),
            &Counter(2),
            "the sharer keeps its value"
        );
        let copied: *const Counter = s.read::<Counter>("c").unwrap();
        assert_ne!(copied, after, "shared: copied");
        assert_eq!(
            s.update::<String>("c", |_| {}).unwrap_err(),
            StateError::WrongType("c".into())
        );
        assert_eq!(
            s.update::<Counter>("missing", |_| {}).unwrap_err(),
            StateError::NotFound("missing".into())
        );
    }

    /// Keys are matched by content whatever string they came from: a constant, an owned
    /// string, keys of one length; writing a key again replaces its value, deleting one leaves
    /// the others.
    #[test]
    fn keys_match_by_content() {
        let mut s = CycleState::new();
        s.write("PreFilterA", Counter(1));
        s.write(String::from("PreFilterB"), Counter(2));
        s.write("PreScoreA", Counter(3));
        let owned = String::from("PreFilterA");
        assert_eq!(s.read::<Counter>(&owned).unwrap(), &Counter(1));
        assert_eq!(s.read::<Counter>("PreFilterB").unwrap(), &Counter(2));
        assert_eq!(s.read::<Counter>("PreScoreA").unwrap(), &Counter(3));
        assert!(matches!(
            s.read::<Counter>("PreFilterC"),
            Err(StateError::NotFound(_))
        ));
        s.write(owned.clone(), Counter(4));
        assert_eq!(s.read::<Counter>("PreFilterA").unwrap(), &Counter(4));
        s.update::<Counter>("PreFilterB", |c| c.0 = 5).unwrap();
        assert_eq!(s.read::<Counter>("PreFilterB").unwrap(), &Counter(5));
        s.delete("PreFilterA");
        assert!(s.read::<Counter>("PreFilterA").is_err());
        assert_eq!(s.read::<Counter>("PreFilterB").unwrap(), &Counter(5));
        assert_eq!(s.read::<Counter>("PreScoreA").unwrap(), &Counter(3));
        let copy = s.deep_clone();
        assert_eq!(copy.read::<Counter>("PreScoreA").unwrap(), &Counter(3));
        assert!(copy.read::<Counter>("PreFilterA").is_err());
    }

    #[test]
    fn node_count_is_the_snapshot_size() {
        use crate::NodeInfo;
        assert_eq!(CycleState::new().node_count(), 0);
        let snapshot = Snapshot::from_node_infos(["a", "b", "c"].map(NodeInfo::placeholder));
        let state = CycleState::with_snapshot(Arc::new(snapshot));
        assert_eq!(state.node_count(), 3);
        assert_eq!(state.node_count(), state.snapshot().len());
    }
}

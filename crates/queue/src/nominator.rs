//! Pods nominated to nodes by preemption.
//!
//! A preemptor waits for its victims to terminate; until it is bound, the Filter pass on its node
//! must count it as if it were there, or a lower-priority pod would take the freed room. The
//! nominator is a separate lock from the queue's so that Filter, which asks for every node in
//! parallel, only takes a read lock and never waits on queue bookkeeping.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use k8s_openapi::api::core::v1::Pod;
use unisched_framework::PodInfo;

fn status_nomination(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
}

#[derive(Debug, Default)]
pub(crate) struct Nominator {
    by_node: BTreeMap<String, Vec<Arc<PodInfo>>>,
    node_of: HashMap<String, String>,
}

impl Nominator {
    /// Nominates `pod` to `node` (`Some("")` clears), or, with `None`, to the node in its
    /// `status.nominatedNodeName` (no nomination when that is empty). Replaces any older entry.
    pub(crate) fn add(&mut self, pod: Arc<PodInfo>, node: Option<&str>) {
        self.delete(&pod.uid);
        let node = match node {
            Some(n) => n.to_string(),
            None => match status_nomination(&pod.pod) {
                Some(n) => n.to_string(),
                None => return,
            },
        };
        if node.is_empty() {
            return;
        }
        self.node_of.insert(pod.uid.clone(), node.clone());
        self.by_node.entry(node).or_default().push(pod);
    }

    /// Every nomination by node (empty in the common case, so cheap to take per attempt).
    pub(crate) fn all(&self) -> HashMap<String, Vec<Arc<PodInfo>>> {
        self.by_node.iter().map(|(n, v)| (n.clone(), v.clone())).collect()
    }

    /// Removes the pod's nomination; true when it had one.
    pub(crate) fn delete(&mut self, uid: &str) -> bool {
        let Some(node) = self.node_of.remove(uid) else {
            return false;
        };
        if let Some(list) = self.by_node.get_mut(&node) {
            list.retain(|p| p.uid != uid);
            if list.is_empty() {
                self.by_node.remove(&node);
            }
        }
        true
    }

    /// Refreshes the stored pod after an update. A nomination made in memory survives an update
    /// that carries no nomination on either side (the API write may simply not have landed yet);
    /// an update that sets, changes or clears `status.nominatedNodeName` wins.
    pub(crate) fn update(&mut self, old: Option<&Pod>, new: Arc<PodInfo>) {
        let keep =
            if old.is_none_or(|o| status_nomination(o).is_none()) && status_nomination(&new.pod).is_none() {
                self.node_of.get(&new.uid).cloned()
            } else {
                None
            };
        match keep {
            Some(node) => self.add(new, Some(&node)),
            None => self.add(new, None),
        }
    }

    pub(crate) fn pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.by_node.get(node).cloned().unwrap_or_default()
    }

    pub(crate) fn node_of(&self, uid: &str) -> Option<&str> {
        self.node_of.get(uid).map(String::as_str)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.node_of.len()
    }
}

//! Pods held at Permit until every waiting plugin allows them.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use parking_lot::{Condvar, Mutex};

use crate::Status;

#[derive(Debug)]
struct Waiting {
    /// Plugins still to allow, with their deadlines.
    pending: BTreeMap<String, Instant>,
    /// Set when a plugin rejected the pod.
    rejected: Option<Status>,
}

/// The pods waiting at Permit, by UID.
#[derive(Debug, Default, Clone)]
pub struct WaitingPods {
    inner: Arc<(Mutex<HashMap<String, Waiting>>, Condvar)>,
}

impl WaitingPods {
    /// Registers a waiting pod with per-plugin timeouts.
    pub fn add(&self, uid: &str, waits: BTreeMap<String, Duration>) {
        let now = Instant::now();
        let pending = waits.into_iter().map(|(p, d)| (p, now + d)).collect();
        self.inner.0.lock().insert(
            uid.to_string(),
            Waiting {
                pending,
                rejected: None,
            },
        );
    }

    /// A plugin allows the pod.
    pub fn allow(&self, uid: &str, plugin: &str) {
        let (lock, cv) = &*self.inner;
        if let Some(w) = lock.lock().get_mut(uid) {
            w.pending.remove(plugin);
        }
        cv.notify_all();
    }

    /// A plugin rejects the pod.
    pub fn reject(&self, uid: &str, plugin: &str, reason: &str) {
        let (lock, cv) = &*self.inner;
        if let Some(w) = lock.lock().get_mut(uid) {
            w.rejected = Some(Status::unschedulable(reason).with_plugin(plugin));
        }
        cv.notify_all();
    }

    /// True while the pod waits at Permit (or its rejection has not been collected yet).
    pub fn contains(&self, uid: &str) -> bool {
        self.inner.0.lock().contains_key(uid)
    }

    /// UIDs of waiting pods.
    pub fn uids(&self) -> Vec<String> {
        self.inner.0.lock().keys().cloned().collect()
    }

    /// Blocks until allowed (Success), rejected, or timed out (Unschedulable). A pod that is not
    /// waiting is allowed at once.
    pub fn wait(&self, uid: &str) -> Status {
        let (lock, cv) = &*self.inner;
        let mut map = lock.lock();
        loop {
            let Some(w) = map.get(uid) else {
                return Status::success();
            };
            if let Some(r) = &w.rejected {
                let r = r.clone();
                map.remove(uid);
                return r;
            }
            if w.pending.is_empty() {
                map.remove(uid);
                return Status::success();
            }
            let now = Instant::now();
            if let Some((plugin, deadline)) = w
                .pending
                .iter()
                .min_by_key(|(_, d)| **d)
                .map(|(p, d)| (p.clone(), *d))
            {
                if deadline <= now {
                    map.remove(uid);
                    return Status::unschedulable(format!(
                        "rejected due to timeout after waiting at plugin {plugin}"
                    ))
                    .with_plugin(plugin);
                }
                cv.wait_for(&mut map, deadline - now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_reject_timeout() {
        let w = WaitingPods::default();
        assert!(w.wait("absent").is_success());
        w.add("a", BTreeMap::from([("P".to_string(), Duration::from_secs(60))]));
        let w2 = w.clone();
        let t = std::thread::spawn(move || w2.wait("a"));
        w.allow("a", "P");
        assert!(t.join().unwrap().is_success());
        w.add("b", BTreeMap::from([("P".to_string(), Duration::from_secs(60))]));
        w.reject("b", "P", "no");
        let s = w.wait("b");
        assert!(s.is_rejected() && s.message() == "no" && s.plugin() == Some("P"));
        w.add("c", BTreeMap::from([("Q".to_string(), Duration::from_millis(1))]));
        let s = w.wait("c");
        assert!(s.is_rejected() && s.message().contains("timeout"), "{s:?}");
        assert!(w.uids().is_empty());
    }
}

//! Follows pods in the embedded store (in process, no HTTP), or of an external API server through
//! a watch, to count, per namespace, pods created, scheduled (`spec.nodeName` went from empty to
//! set, as upstream's throughput collector counts), still pending, and rejected (pending with
//! `PodScheduled=False`).

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    api::{ListParams, WatchEvent, WatchParams},
};
use parking_lot::Mutex;
use serde_json::{Value, json};
use unisched_sim::{EventType, Store, WatchOptions};

/// Per-namespace pod counts.
#[derive(Clone, Debug, Default)]
pub struct NsStats {
    /// Pods created.
    pub created: u64,
    /// Created with `spec.nodeName` already set.
    pub prebound: u64,
    /// Scheduled (nodeName set after creation).
    pub scheduled: u64,
    /// Deleted.
    pub deleted: u64,
    /// Pending pods by UID.
    pending: HashSet<String>,
    /// Pending pods carrying `PodScheduled=False`.
    rejected: HashSet<String>,
}

impl NsStats {
    /// Pods not bound yet.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
    /// Pending pods the scheduler rejected (at least once, and not bound since).
    pub fn rejected(&self) -> usize {
        self.rejected.len()
    }
}

struct State {
    ns: HashMap<String, NsStats>,
    measured: HashSet<String>,
    steady: Option<(String, std::sync::mpsc::Sender<String>)>,
    last_progress: Instant,
    lost_events: bool,
}

/// Pod counts from the store's event stream.
pub struct Tracker {
    state: Arc<Mutex<State>>,
    measured_scheduled: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker").finish_non_exhaustive()
    }
}

impl State {
    fn new() -> Self {
        State {
            ns: HashMap::new(),
            measured: HashSet::new(),
            steady: None,
            last_progress: Instant::now(),
            lost_events: false,
        }
    }
}

fn is_bound(v: &Value) -> bool {
    v["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty())
}

fn is_rejected(v: &Value) -> bool {
    v["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "PodScheduled" && c["status"] == "False")
}

impl Tracker {
    /// Starts following pods from the store's current resourceVersion, on `rt`.
    pub fn start(store: &Store, rt: &tokio::runtime::Handle) -> Self {
        let state = Arc::new(Mutex::new(State::new()));
        let measured_scheduled = Arc::new(AtomicU64::new(0));
        let opts = WatchOptions {
            resource_version: Some(store.resource_version().to_string()),
            send_initial_events: Some(false),
            ..Default::default()
        };
        let sub = store.watch("pods", None, &opts);
        let (st, counter, store2) = (state.clone(), measured_scheduled.clone(), store.clone());
        let task = rt.spawn(async move {
            let mut sub = match sub {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "bench tracker cannot watch pods");
                    st.lock().lost_events = true;
                    return;
                }
            };
            loop {
                match sub.next().await {
                    Ok(ev) => {
                        let prev = ev.source.as_ref().and_then(|s| s.previous.clone());
                        apply(
                            &st,
                            &counter,
                            ev.event_type,
                            ev.object.value(),
                            prev.as_deref().map(|p| p.value()),
                        );
                    }
                    Err(e) if e.code() == 410 => {
                        tracing::warn!("bench tracker fell behind the store history; counts may be off");
                        st.lock().lost_events = true;
                        let opts = WatchOptions {
                            resource_version: Some(store2.resource_version().to_string()),
                            send_initial_events: Some(false),
                            ..Default::default()
                        };
                        match store2.watch("pods", None, &opts) {
                            Ok(s) => sub = s,
                            Err(_) => return,
                        }
                    }
                    Err(_) => return,
                }
            }
        });
        Tracker {
            state,
            measured_scheduled,
            task,
        }
    }

    /// Starts following the pods of an external API server, on `rt`: a watch from the current
    /// resourceVersion, resumed where it stopped (after a 410, from a fresh list, noting that
    /// events may have been lost).
    pub fn start_external(client: kube::Client, rt: &tokio::runtime::Handle) -> Self {
        let state = Arc::new(Mutex::new(State::new()));
        let measured_scheduled = Arc::new(AtomicU64::new(0));
        let (st, counter) = (state.clone(), measured_scheduled.clone());
        let task = rt.spawn(async move {
            let api: Api<Pod> = Api::all(client);
            let current = async |api: &Api<Pod>| {
                api.list_metadata(&ListParams::default().limit(1))
                    .await
                    .map(|l| l.metadata.resource_version.unwrap_or_default())
            };
            let mut rv = match current(&api).await {
                Ok(rv) => rv,
                Err(e) => {
                    tracing::error!(error = %e, "bench tracker cannot list pods");
                    st.lock().lost_events = true;
                    return;
                }
            };
            // Whether each pod was bound at its last event: the "previous object" of the next one.
            let mut bound: HashMap<String, bool> = HashMap::new();
            loop {
                let wp = WatchParams::default().timeout(290);
                let stream = match api.watch(&wp, &rv).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(error = %e, "bench tracker: watch failed, retrying");
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                        continue;
                    }
                };
                let mut stream = std::pin::pin!(stream);
                while let Some(ev) = stream.next().await {
                    let (et, pod) = match ev {
                        Ok(WatchEvent::Added(p)) => (EventType::Added, p),
                        Ok(WatchEvent::Modified(p)) => (EventType::Modified, p),
                        Ok(WatchEvent::Deleted(p)) => (EventType::Deleted, p),
                        Ok(WatchEvent::Bookmark(b)) => {
                            rv = b.metadata.resource_version;
                            continue;
                        }
                        Ok(WatchEvent::Error(status)) => {
                            if status.code == 410 {
                                st.lock().lost_events = true;
                                if let Ok(fresh) = current(&api).await {
                                    rv = fresh;
                                }
                            }
                            break;
                        }
                        Err(_) => break,
                    };
                    if let Some(v) = pod.metadata.resource_version.clone() {
                        rv = v;
                    }
                    let Ok(value) = serde_json::to_value(&pod) else {
                        continue;
                    };
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    let prev = match bound.get(&uid) {
                        Some(true) => Some(json!({"spec": {"nodeName": "-"}})),
                        Some(false) => Some(json!({"spec": {}})),
                        None => None,
                    };
                    apply(&st, &counter, et, &value, prev.as_ref());
                    if et == EventType::Deleted {
                        bound.remove(&uid);
                    } else {
                        bound.insert(uid, is_bound(&value));
                    }
                }
            }
        });
        Tracker {
            state,
            measured_scheduled,
            task,
        }
    }

    /// Counts scheduled pods of `ns` into the measured counter from now on.
    pub fn add_measured(&self, ns: &str) {
        self.state.lock().measured.insert(ns.to_string());
    }

    /// The measured counter (scheduled pods in measured namespaces).
    pub fn measured_counter(&self) -> Arc<AtomicU64> {
        self.measured_scheduled.clone()
    }

    /// Sends the name of every pod scheduled in `ns` to `tx` (steady state), or stops (`None`).
    pub fn set_steady(&self, steady: Option<(String, std::sync::mpsc::Sender<String>)>) {
        self.state.lock().steady = steady;
    }

    /// Counts of one namespace.
    pub fn ns(&self, ns: &str) -> NsStats {
        self.state.lock().ns.get(ns).cloned().unwrap_or_default()
    }

    /// (pending, rejected) summed over `namespaces` (all when empty).
    pub fn outstanding(&self, namespaces: &[String]) -> (usize, usize) {
        let st = self.state.lock();
        st.ns
            .iter()
            .filter(|(k, _)| namespaces.is_empty() || namespaces.contains(k))
            .fold((0, 0), |(p, r), (_, s)| (p + s.pending(), r + s.rejected()))
    }

    /// When a pod was last scheduled, newly rejected, or deleted while bound.
    pub fn last_progress(&self) -> Instant {
        self.state.lock().last_progress
    }

    /// Whether the tracker missed events (store history too short).
    pub fn lost_events(&self) -> bool {
        self.state.lock().lost_events
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn apply(st: &Mutex<State>, counter: &AtomicU64, et: EventType, v: &Value, prev: Option<&Value>) {
    let ns = v["metadata"]["namespace"].as_str().unwrap_or_default();
    let uid = v["metadata"]["uid"].as_str().unwrap_or_default();
    let mut guard = st.lock();
    let state = &mut *guard;
    let measured = state.measured.contains(ns);
    let s = state.ns.entry(ns.to_string()).or_default();
    match et {
        EventType::Added => {
            s.created += 1;
            if is_bound(v) {
                s.prebound += 1;
            } else {
                s.pending.insert(uid.to_string());
                if is_rejected(v) {
                    s.rejected.insert(uid.to_string());
                }
            }
        }
        EventType::Modified => {
            let was_bound = prev.is_some_and(is_bound);
            if is_bound(v) {
                if !was_bound {
                    s.scheduled += 1;
                    s.pending.remove(uid);
                    s.rejected.remove(uid);
                    state.last_progress = Instant::now();
                    if measured {
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                    if let Some((steady_ns, tx)) = &state.steady
                        && steady_ns == ns
                    {
                        let _ = tx.send(v["metadata"]["name"].as_str().unwrap_or_default().to_string());
                    }
                }
            } else if is_rejected(v) {
                if s.pending.contains(uid) && s.rejected.insert(uid.to_string()) {
                    state.last_progress = Instant::now();
                }
            } else {
                s.rejected.remove(uid);
            }
        }
        EventType::Deleted => {
            s.deleted += 1;
            s.pending.remove(uid);
            s.rejected.remove(uid);
            // While the harness waits, a bound pod going away is a preemption's eviction: the
            // preemptor it made room for is about to be bound, so waiting is not stalled.
            if is_bound(v) {
                state.last_progress = Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_transitions() {
        let st = Mutex::new(State {
            ns: HashMap::new(),
            measured: ["m".to_string()].into(),
            steady: None,
            last_progress: Instant::now(),
            lost_events: false,
        });
        let c = AtomicU64::new(0);
        let p = json!({"metadata": {"namespace": "m", "uid": "u1", "name": "a"}, "spec": {}});
        apply(&st, &c, EventType::Added, &p, None);
        let rejected = json!({"metadata": {"namespace": "m", "uid": "u1", "name": "a"}, "spec": {},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}});
        apply(&st, &c, EventType::Modified, &rejected, Some(&p));
        assert_eq!(st.lock().ns["m"].rejected(), 1);
        let bound =
            json!({"metadata": {"namespace": "m", "uid": "u1", "name": "a"}, "spec": {"nodeName": "n"}});
        apply(&st, &c, EventType::Modified, &bound, Some(&rejected));
        apply(&st, &c, EventType::Modified, &bound, Some(&bound));
        let s = st.lock().ns["m"].clone();
        assert_eq!((s.created, s.scheduled, s.pending(), s.rejected()), (1, 1, 0, 0));
        assert_eq!(c.load(Ordering::SeqCst), 1);
        let pre = json!({"metadata": {"namespace": "x", "uid": "u2"}, "spec": {"nodeName": "n"}});
        apply(&st, &c, EventType::Added, &pre, None);
        assert_eq!(st.lock().ns["x"].prebound, 1);
        assert_eq!(c.load(Ordering::SeqCst), 1);
    }
}

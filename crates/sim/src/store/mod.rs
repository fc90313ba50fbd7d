//! The object store: every object as JSON, one global resourceVersion, a bounded event history and
//! watchers that pull from it.
//!
//! Writes take a short exclusive lock to stamp the next resourceVersion, swap the object and append
//! the event; everything expensive (decoding for validation, patching, serialising) happens outside
//! the lock. Watchers are woken through a `tokio::sync::watch` channel carrying the latest
//! resourceVersion and read the history themselves, so one slow watcher never holds up a writer and
//! each event is serialised once no matter how many watchers receive it.

mod eviction;
mod list;
mod object;
mod watch;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Binding;
use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};

pub use list::{ListOptions, ObjectList};
pub use object::{EventType, ObjectRef, StoreEvent, StoredObject};
pub use watch::{Subscription, WatchEvent, WatchOptions};

use crate::error::StoreError;
use crate::patch::Patch;
use crate::registry::{KindId, Registry, ResourceType};
use crate::strategy::{self, Lookup, UpdateMode};
use crate::util::{self, get_path, get_str, meta_mut};

/// (namespace, name); namespace is "" for cluster-scoped objects.
pub(crate) type Key = (String, String);

/// Store settings.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// How many events are retained for watch resumption and consistent paging (at least 1).
    pub history: usize,
    /// Whether namespaced objects need an existing namespace (as with the NamespaceLifecycle
    /// admission plugin). `default`, `kube-system`, `kube-public` and `kube-node-lease` always exist.
    pub require_namespaces: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            history: 100_000,
            require_namespaces: true,
        }
    }
}

/// How dependents are treated when their owner is deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// Delete the owner now, the garbage collector deletes dependents afterwards (the default).
    #[default]
    Background,
    /// Keep the owner (with the `foregroundDeletion` finalizer) until its dependents are gone.
    Foreground,
    /// Remove the owner reference from dependents and keep them.
    Orphan,
}

/// Options of a delete.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// Dependent handling.
    pub propagation: Propagation,
    /// Only delete if the object has this UID.
    pub precondition_uid: Option<String>,
    /// Only delete if the object has this resourceVersion.
    pub precondition_resource_version: Option<String>,
    /// Validate only.
    pub dry_run: bool,
}

/// The outcome of a delete.
#[derive(Clone, Debug)]
pub enum Deletion {
    /// The object is gone; this is its last state.
    Removed(ObjectRef),
    /// The object has finalizers: it now carries a deletionTimestamp and stays until they are removed.
    Pending(ObjectRef),
}

impl Deletion {
    /// The object in either case.
    pub fn object(&self) -> &ObjectRef {
        match self {
            Self::Removed(o) | Self::Pending(o) => o,
        }
    }
}

pub(crate) struct State {
    pub(crate) rv: u64,
    pub(crate) objects: Vec<BTreeMap<Key, ObjectRef>>,
    pub(crate) history: VecDeque<Arc<StoreEvent>>,
    /// The resourceVersion of the last event of each kind (by [`KindId`]), 0 before the first.
    pub(crate) kind_written: Vec<u64>,
    /// The resourceVersion of the last event of each kind dropped from `history`, 0 before the
    /// first: a watch of one kind has missed an event (410) only when this is past its position,
    /// whatever other kinds' events were dropped meanwhile.
    pub(crate) kind_dropped: Vec<u64>,
    uids: HashMap<String, (KindId, Key)>,
    dependents: HashMap<String, BTreeSet<(KindId, Key)>>,
}

impl State {
    /// The resourceVersion of the oldest retained event.
    pub(crate) fn first_rv(&self) -> u64 {
        self.history.front().map_or(self.rv + 1, |e| e.resource_version())
    }
}

struct Inner {
    registry: Registry,
    state: RwLock<State>,
    /// The last committed resourceVersion, for waiters on any write.
    notify: tokio::sync::watch::Sender<u64>,
    /// The last committed resourceVersion of each kind (by [`KindId`]), for watches of one kind:
    /// a write wakes the watchers of its own kind only. With one task per watch connection (a
    /// scheduler alone opens a dozen), waking every watcher on every write was a tenth of the
    /// embedded API server's CPU in the benchmark, nearly all of it for watchers with nothing to
    /// read.
    notify_kind: Vec<tokio::sync::watch::Sender<u64>>,
    history_limit: usize,
    require_namespaces: bool,
    namespaces: Option<KindId>,
    pods: Option<KindId>,
    /// Kinds whose first read runs a hook first (see [`Store::on_first_read`]); checked on every
    /// read, so a flag per kind keeps the common case to one load.
    first_read_pending: Vec<AtomicBool>,
    first_read_hooks: Vec<Mutex<Option<FirstReadHook>>>,
}

/// Work that must happen before a kind is first read; it runs once, on the reading thread.
type FirstReadHook = Box<dyn FnOnce(&Store) + Send>;

/// The in-memory object store. Cheap to clone; all clones share the same data.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("resource_version", &self.resource_version())
            .finish()
    }
}

const MAX_ATTEMPTS: usize = 64;

fn key_of(ns: &str, name: &str) -> Key {
    (ns.to_string(), name.to_string())
}

fn finalizers_of(v: &Value) -> Vec<String> {
    get_path(v, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn owner_uids(v: &Value) -> Vec<String> {
    get_path(v, &["metadata", "ownerReferences"])
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|o| get_str(o, &["uid"]).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// What a write of the status subresource stores: `cand`'s `status` (none when absent or `null`)
/// and every other top-level field as `stored` has it, except that `cand`'s metadata is taken
/// with the fields `kept` restored from `stored` when the kind lets a status write change
/// metadata (`kept` is `Some`, see [`strategy::metadata_kept_by_status_write`]).
///
/// Why not a copy of `stored` with the new status put in: the candidate of a status write is
/// almost always `stored` itself with the status changed (a status patch applies to a copy of the
/// stored object), so its other fields are already right. Putting back only those that differ
/// saves a second copy of the whole object (the pod's spec, the claim's spec) on every status
/// write (`cargo bench -p unisched-sim --bench apiserver`: in-process status patches of a pod
/// 105,000 → 124,000 per second).
fn keep_all_but_status(cand: Value, stored: &Value, kept: Option<&[&str]>) -> Value {
    let (Value::Object(mut m), Value::Object(stored)) = (cand, stored) else {
        // Not objects (check_type has already refused such a body): keep the stored object.
        let mut n = stored.clone();
        if let Value::Object(m) = &mut n {
            m.remove("status");
        }
        return n;
    };
    m.retain(|k, v| {
        if k == "status" {
            !v.is_null()
        } else {
            stored.contains_key(k)
        }
    });
    for (k, v) in stored {
        match (k.as_str(), kept) {
            ("status", _) => {}
            ("metadata", Some(kept)) => {
                let meta = util::ensure_object(m.entry("metadata").or_insert(Value::Null));
                for &field in kept {
                    match v.get(field) {
                        Some(want) => restore(meta, field, want),
                        None => {
                            meta.remove(field);
                        }
                    }
                }
            }
            _ => restore(&mut m, k, v),
        }
    }
    Value::Object(m)
}

/// Sets `m[key]` to a copy of `want` unless it already equals it (comparing costs no allocation;
/// copying a pod's spec does).
fn restore(m: &mut serde_json::Map<String, Value>, key: &str, want: &Value) {
    if m.get(key) != Some(want) {
        m.insert(key.to_string(), want.clone());
    }
}

/// kube-apiserver keeps objects as typed structs, whose empty `omitempty` metadata maps and lists
/// vanish on the way through: a patch adding `annotations: {}` (as `kubectl diff` of an object
/// created without annotations sends) leaves the object unchanged. The JSON store drops them too.
fn drop_empty_metadata_collections(v: &mut Value) {
    if let Some(Value::Object(meta)) = v.get_mut("metadata") {
        for f in [
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "managedFields",
        ] {
            let empty = match meta.get(f) {
                Some(Value::Object(m)) => m.is_empty(),
                Some(Value::Array(a)) => a.is_empty(),
                Some(Value::Null) => true,
                _ => false,
            };
            if empty {
                meta.remove(f);
            }
        }
    }
}

impl Store {
    /// A store serving `registry`, with the default namespaces and priority classes created.
    pub fn new(registry: Registry, config: StoreConfig) -> Self {
        let n = registry.types().len();
        let namespaces = registry.by_gvr("", "v1", "namespaces");
        let pods = registry.by_gvr("", "v1", "pods");
        let (notify, _) = tokio::sync::watch::channel(0);
        let notify_kind = (0..n).map(|_| tokio::sync::watch::channel(0).0).collect();
        let store = Self {
            inner: Arc::new(Inner {
                registry,
                state: RwLock::new(State {
                    rv: 0,
                    objects: vec![BTreeMap::new(); n],
                    history: VecDeque::new(),
                    kind_written: vec![0; n],
                    kind_dropped: vec![0; n],
                    uids: HashMap::new(),
                    dependents: HashMap::new(),
                }),
                notify,
                notify_kind,
                history_limit: config.history.max(1),
                require_namespaces: config.require_namespaces,
                namespaces,
                pods,
                first_read_pending: (0..n).map(|_| AtomicBool::new(false)).collect(),
                first_read_hooks: (0..n).map(|_| Mutex::new(None)).collect(),
            }),
        };
        if let Some(ns) = namespaces {
            for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let obj = json!({"metadata": {"name": name}});
                if let Err(e) = store.create_in(ns, None, obj, false) {
                    tracing::warn!(namespace = name, error = %e, "could not create a default namespace");
                }
            }
        }
        if let Some(pc) = store
            .inner
            .registry
            .by_gvr("scheduling.k8s.io", "v1", "priorityclasses")
        {
            for obj in strategy::builtin_priority_classes() {
                if let Err(e) = store.create_in(pc, None, obj, false) {
                    tracing::warn!(error = %e, "could not create a built-in priority class");
                }
            }
        }
        store
    }

    /// The served resources.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Resolves a resource name (see [`Registry::resolve`]).
    pub fn resolve(&self, resource: &str) -> Result<KindId, StoreError> {
        self.inner
            .registry
            .resolve(resource)
            .ok_or_else(|| StoreError::UnknownResource(resource.to_string()))
    }

    fn rt(&self, kind: KindId) -> &ResourceType {
        self.inner.registry.get(kind)
    }

    /// The latest committed resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inner.state.read().rv
    }

    /// The resourceVersion of the oldest event still retained (watches from older versions get 410).
    pub fn oldest_resource_version(&self) -> u64 {
        self.inner.state.read().first_rv()
    }

    pub(crate) fn state(&self) -> &RwLock<State> {
        &self.inner.state
    }

    pub(crate) fn notifier(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.notify.subscribe()
    }

    /// Changes when an object of `kind` is written (see [`Inner::notify_kind`]).
    pub(crate) fn kind_notifier(&self, kind: KindId) -> tokio::sync::watch::Receiver<u64> {
        self.inner.notify_kind[kind.0].subscribe()
    }

    fn namespace_for(&self, rt: &ResourceType, ns: Option<&str>) -> String {
        if rt.namespaced {
            ns.unwrap_or("default").to_string()
        } else {
            String::new()
        }
    }

    fn not_found(&self, rt: &ResourceType, name: &str) -> StoreError {
        StoreError::NotFound {
            group: rt.group.to_string(),
            resource: rt.plural.to_string(),
            name: name.to_string(),
        }
    }

    /// Runs `hook` before the first read of `kind` through the public API (`get`, `list`,
    /// `list_all`, and every HTTP request for the resource), on the reader's thread, so that
    /// reader already sees what the hook wrote. Used for work nobody needs until somebody looks,
    /// such as the core copies of `events.k8s.io` Events. A later registration for the same kind
    /// replaces an earlier one that has not run yet.
    ///
    /// The hook must not read `kind` through the public API itself (it would wait for itself);
    /// crate-internal reads such as [`Self::get_in`] do not run hooks.
    pub fn on_first_read(&self, kind: KindId, hook: impl FnOnce(&Store) + Send + 'static) {
        *self.inner.first_read_hooks[kind.0].lock() = Some(Box::new(hook));
        self.inner.first_read_pending[kind.0].store(true, Ordering::Release);
    }

    /// Runs `kind`'s first-read hook if it has not run yet. A concurrent reader waits until the
    /// hook is done, so no reader sees its half-done work.
    pub(crate) fn before_read(&self, kind: KindId) {
        if !self.inner.first_read_pending[kind.0].load(Ordering::Acquire) {
            return;
        }
        // Held while the hook runs: a second first reader waits here.
        let mut slot = self.inner.first_read_hooks[kind.0].lock();
        if let Some(hook) = slot.take() {
            hook(self);
        }
        self.inner.first_read_pending[kind.0].store(false, Ordering::Release);
    }

    // ----- reads -----

    pub(crate) fn get_in(&self, kind: KindId, ns: &str, name: &str) -> Result<ObjectRef, StoreError> {
        let st = self.inner.state.read();
        st.objects[kind.0]
            .get(&key_of(ns, name))
            .cloned()
            .ok_or_else(|| self.not_found(self.rt(kind), name))
    }

    /// One object. `namespace` is ignored for cluster-scoped resources and defaults to `default`.
    pub fn get(&self, resource: &str, namespace: Option<&str>, name: &str) -> Result<ObjectRef, StoreError> {
        let kind = self.resolve(resource)?;
        self.before_read(kind);
        let ns = self.namespace_for(self.rt(kind), namespace);
        self.get_in(kind, &ns, name)
    }

    /// One object, or None.
    pub fn try_get(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<ObjectRef> {
        self.get(resource, namespace, name).ok()
    }

    /// Every object of a resource (in one namespace, or all when `namespace` is None), in key order.
    pub fn list_all(&self, resource: &str, namespace: Option<&str>) -> Result<Vec<ObjectRef>, StoreError> {
        let kind = self.resolve(resource)?;
        self.before_read(kind);
        Ok(self.snapshot(kind, namespace))
    }

    pub(crate) fn snapshot(&self, kind: KindId, namespace: Option<&str>) -> Vec<ObjectRef> {
        let st = self.inner.state.read();
        st.objects[kind.0]
            .iter()
            .filter(|(k, _)| namespace.is_none_or(|n| k.0 == n))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Lists with selectors and paging (see [`ListOptions`]).
    pub fn list(
        &self,
        resource: &str,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList, StoreError> {
        let kind = self.resolve(resource)?;
        self.before_read(kind);
        self.list_in(kind, namespace, opts)
    }

    /// The object with this UID, if any (with its resource).
    pub fn get_by_uid(&self, uid: &str) -> Option<(KindId, ObjectRef)> {
        let st = self.inner.state.read();
        let (kind, key) = st.uids.get(uid)?;
        st.objects[kind.0].get(key).map(|o| (*kind, o.clone()))
    }

    /// The objects whose ownerReferences name this UID.
    pub fn dependents_of(&self, uid: &str) -> Vec<(KindId, ObjectRef)> {
        let st = self.inner.state.read();
        st.dependents
            .get(uid)
            .map(|set| {
                set.iter()
                    .filter_map(|(k, key)| st.objects[k.0].get(key).map(|o| (*k, o.clone())))
                    .collect()
            })
            .unwrap_or_default()
    }

    // ----- commit machinery -----

    fn index_add(st: &mut State, kind: KindId, key: &Key, obj: &Value) {
        let uid = util::uid_of(obj);
        if !uid.is_empty() {
            st.uids.insert(uid.to_string(), (kind, key.clone()));
        }
        for owner in owner_uids(obj) {
            st.dependents
                .entry(owner)
                .or_default()
                .insert((kind, key.clone()));
        }
    }

    fn index_remove(st: &mut State, kind: KindId, key: &Key, obj: &Value) {
        let uid = util::uid_of(obj);
        if st.uids.get(uid).is_some_and(|(k, kk)| *k == kind && kk == key) {
            st.uids.remove(uid);
        }
        for owner in owner_uids(obj) {
            if let Some(set) = st.dependents.get_mut(&owner) {
                set.remove(&(kind, key.clone()));
                if set.is_empty() {
                    st.dependents.remove(&owner);
                }
            }
        }
    }

    fn push_history(&self, st: &mut State, ev: Arc<StoreEvent>) {
        st.kind_written[ev.kind.0] = ev.resource_version();
        st.history.push_back(ev);
        while st.history.len() > self.inner.history_limit {
            if let Some(dropped) = st.history.pop_front() {
                st.kind_dropped[dropped.kind.0] = dropped.resource_version();
            }
        }
    }

    fn commit_put(
        &self,
        st: &mut State,
        kind: KindId,
        key: Key,
        mut value: Value,
        event_type: EventType,
        prev: Option<ObjectRef>,
    ) -> Arc<StoreEvent> {
        st.rv += 1;
        let rv = st.rv;
        meta_mut(&mut value).insert("resourceVersion".into(), Value::String(rv.to_string()));
        let obj = Arc::new(StoredObject::new(value, rv));
        if let Some(p) = &prev {
            Self::index_remove(st, kind, &key, p.value());
        }
        Self::index_add(st, kind, &key, obj.value());
        st.objects[kind.0].insert(key, obj.clone());
        let ev = Arc::new(StoreEvent::new(event_type, kind, obj, prev));
        self.push_history(st, ev.clone());
        ev
    }

    fn commit_delete(&self, st: &mut State, kind: KindId, key: Key, prev: ObjectRef) -> Arc<StoreEvent> {
        st.rv += 1;
        let rv = st.rv;
        let mut value = prev.to_value();
        meta_mut(&mut value).insert("resourceVersion".into(), Value::String(rv.to_string()));
        let obj = Arc::new(StoredObject::new(value, rv));
        st.objects[kind.0].remove(&key);
        Self::index_remove(st, kind, &key, prev.value());
        let ev = Arc::new(StoreEvent::new(EventType::Deleted, kind, obj, Some(prev)));
        self.push_history(st, ev.clone());
        ev
    }

    /// Wakes the waiters on any write and those on writes of `kind`.
    fn notify(&self, kind: KindId, rv: u64) {
        let advance = |cur: &mut u64| {
            let newer = rv > *cur;
            if newer {
                *cur = rv;
            }
            newer
        };
        self.inner.notify_kind[kind.0].send_if_modified(advance);
        self.inner.notify.send_if_modified(advance);
    }

    fn check_type(rt: &ResourceType, obj: &mut Value) -> Result<(), StoreError> {
        let Value::Object(m) = obj else {
            return Err(StoreError::BadRequest(format!(
                "the body of a {} must be a JSON object",
                rt.kind
            )));
        };
        match m.get("apiVersion").and_then(Value::as_str) {
            Some(av) if !av.is_empty() && av != rt.api_version => {
                return Err(StoreError::BadRequest(format!(
                    "the API version in the data ({av}) does not match the expected API version ({})",
                    rt.api_version
                )));
            }
            _ => {}
        }
        match m.get("kind").and_then(Value::as_str) {
            Some(k) if !k.is_empty() && k != rt.kind => {
                return Err(StoreError::BadRequest(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    rt.kind
                )));
            }
            _ => {}
        }
        m.insert("apiVersion".into(), json!(rt.api_version));
        m.insert("kind".into(), json!(rt.kind));
        if !m.get("metadata").is_some_and(Value::is_object) {
            m.insert("metadata".into(), json!({}));
        }
        Ok(())
    }

    // ----- create -----

    pub(crate) fn create_in(
        &self,
        kind: KindId,
        ns: Option<&str>,
        mut obj: Value,
        dry_run: bool,
    ) -> Result<ObjectRef, StoreError> {
        let rt = self.rt(kind);
        Self::check_type(rt, &mut obj)?;
        let namespace = if rt.namespaced {
            let meta_ns = util::namespace_of(&obj).to_string();
            let ns = match (ns, meta_ns.as_str()) {
                (Some(u), m) if !m.is_empty() && u != m => {
                    return Err(StoreError::BadRequest(
                        "the namespace of the provided object does not match the namespace sent on the request".into(),
                    ));
                }
                (Some(u), _) => u.to_string(),
                (None, "") => "default".to_string(),
                (None, m) => m.to_string(),
            };
            if let Err(msg) = util::check_dns_label(&ns) {
                return Err(StoreError::invalid(
                    &rt.qualified_kind(),
                    util::name_of(&obj),
                    "metadata.namespace",
                    format!("Invalid value: {ns:?}: {msg}"),
                ));
            }
            ns
        } else {
            String::new()
        };
        let generate_base = {
            let meta = meta_mut(&mut obj);
            if rt.namespaced {
                meta.insert("namespace".into(), json!(namespace));
            } else {
                meta.remove("namespace");
            }
            for f in [
                "resourceVersion",
                "selfLink",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ] {
                meta.remove(f);
            }
            meta.insert("uid".into(), json!(util::new_uid()));
            meta.insert("creationTimestamp".into(), json!(util::now_rfc3339()));
            if rt.generation.starts_at_one() {
                meta.insert("generation".into(), json!(1));
            }
            let name = meta
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let base = meta
                .get("generateName")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if name.is_empty() {
                if base.is_empty() {
                    return Err(StoreError::invalid(
                        &rt.qualified_kind(),
                        "",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    ));
                }
                meta.insert("name".into(), json!(util::generate_name(&base)));
                Some(base)
            } else {
                None
            }
        };
        drop_empty_metadata_collections(&mut obj);
        strategy::prepare_create(rt, &mut obj, self)?;
        strategy::validate(rt, &obj, None)?;
        for _ in 0..MAX_ATTEMPTS {
            let name = util::name_of(&obj).to_string();
            let key = key_of(&namespace, &name);
            let mut st = self.inner.state.write();
            if rt.namespaced
                && self.inner.require_namespaces
                && let Some(nsk) = self.inner.namespaces
            {
                match st.objects[nsk.0].get(&key_of("", &namespace)) {
                    None => {
                        return Err(StoreError::NotFound {
                            group: String::new(),
                            resource: "namespaces".into(),
                            name: namespace,
                        });
                    }
                    Some(n) if get_path(n, &["metadata", "deletionTimestamp"]).is_some() => {
                        return Err(StoreError::Forbidden(format!(
                            "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                            rt.plural
                        )));
                    }
                    Some(_) => {}
                }
            }
            if st.objects[kind.0].contains_key(&key) {
                drop(st);
                match &generate_base {
                    Some(base) => {
                        meta_mut(&mut obj).insert("name".into(), json!(util::generate_name(base)));
                        continue;
                    }
                    None => {
                        return Err(StoreError::AlreadyExists {
                            group: rt.group.to_string(),
                            resource: rt.plural.to_string(),
                            name,
                        });
                    }
                }
            }
            if dry_run {
                return Ok(Arc::new(StoredObject::new(obj, st.rv)));
            }
            let ev = self.commit_put(&mut st, kind, key, obj, EventType::Added, None);
            let rv = st.rv;
            drop(st);
            self.notify(ev.kind, rv);
            return Ok(ev.object.clone());
        }
        Err(StoreError::Internal("could not generate a unique name".into()))
    }

    /// Creates an object. `namespace` overrides `metadata.namespace` (they must agree if both are set).
    pub fn create(
        &self,
        resource: &str,
        namespace: Option<&str>,
        obj: Value,
    ) -> Result<ObjectRef, StoreError> {
        let kind = self.resolve(resource)?;
        self.create_in(kind, namespace, obj, false)
    }

    // ----- update -----

    fn finish_update(
        &self,
        rt: &ResourceType,
        cur: &ObjectRef,
        mut cand: Value,
        mode: UpdateMode,
    ) -> Result<Value, StoreError> {
        Self::check_type(rt, &mut cand)?;
        let name = cur.name().to_string();
        {
            let meta = meta_mut(&mut cand);
            match meta.get("name").and_then(Value::as_str) {
                Some(n) if !n.is_empty() && n != name => {
                    return Err(StoreError::BadRequest(format!(
                        "the name of the object ({n}) does not match the name on the URL ({name})"
                    )));
                }
                _ => {}
            }
            if rt.namespaced {
                match meta.get("namespace").and_then(Value::as_str) {
                    Some(n) if !n.is_empty() && n != cur.namespace() => {
                        return Err(StoreError::BadRequest(
                            "the namespace of the provided object does not match the namespace sent on the request"
                                .into(),
                        ));
                    }
                    _ => {}
                }
            }
        }
        let mut next = match mode {
            UpdateMode::Status => {
                keep_all_but_status(cand, cur.value(), strategy::metadata_kept_by_status_write(rt))
            }
            // A server-internal write (binding) may set status too (PodScheduled=True).
            UpdateMode::Internal => cand,
            UpdateMode::Main => {
                if rt.status.has_subresource()
                    && let Value::Object(m) = &mut cand
                {
                    match cur.get("status") {
                        Some(s) => restore(m, "status", s),
                        None => {
                            m.remove("status");
                        }
                    }
                }
                cand
            }
        };
        drop_empty_metadata_collections(&mut next);
        let cur_meta = cur.get("metadata").unwrap_or(&Value::Null);
        let new_finalizers = finalizers_of(&next);
        {
            let meta = meta_mut(&mut next);
            meta.insert("name".into(), json!(name));
            for f in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "namespace",
                "generation",
            ] {
                match cur_meta.get(f) {
                    Some(v) => meta.insert(f.into(), v.clone()),
                    None => meta.remove(f),
                };
            }
            meta.remove("selfLink");
        }
        if cur_meta.get("deletionTimestamp").is_some() {
            let old = finalizers_of(cur.value());
            let added: Vec<&String> = new_finalizers.iter().filter(|f| !old.contains(f)).collect();
            if !added.is_empty() {
                return Err(StoreError::invalid(
                    &rt.qualified_kind(),
                    &name,
                    "metadata.finalizers",
                    format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                    ),
                ));
            }
        }
        strategy::prepare_update(rt, cur.value(), &mut next, mode)?;
        // Only client writes of the main resource make a new generation, judged after defaulting
        // as upstream compares the defaulted objects. Status writes never do, and neither does the
        // binding subresource (upstream writes `spec.nodeName` past the pod strategy).
        if mode == UpdateMode::Main && rt.generation.bumps(cur.value(), &next) {
            let generation = cur_meta.get("generation").and_then(Value::as_i64).unwrap_or(0) + 1;
            meta_mut(&mut next).insert("generation".into(), json!(generation));
        }
        // The binding writes past the pod strategy, as upstream's does: it changes only
        // `spec.nodeName`, the PodScheduled condition and annotations the binding carries (typed
        // in `bind_in`) on an object validated when it was written, and decoding the whole pod
        // again was a third of each binding's cost.
        if mode != UpdateMode::Internal {
            strategy::validate(rt, &next, Some(cur.value()))?;
        }
        meta_mut(&mut next).insert(
            "resourceVersion".into(),
            Value::String(cur.resource_version().to_string()),
        );
        Ok(next)
    }

    /// Read-modify-write with retries: `f` maps the current object to the wanted one, and is run
    /// again on the fresh object when another write wins the race. A `metadata.resourceVersion`
    /// in the wanted object is a precondition (409 when it is not the object's current one).
    pub(crate) fn guaranteed_update(
        &self,
        kind: KindId,
        ns: &str,
        name: &str,
        mode: UpdateMode,
        dry_run: bool,
        f: &mut dyn FnMut(&ObjectRef) -> Result<Value, StoreError>,
    ) -> Result<ObjectRef, StoreError> {
        let rt = self.rt(kind);
        let resource = rt.qualified_plural();
        for _ in 0..MAX_ATTEMPTS {
            let cur = self.get_in(kind, ns, name)?;
            let cand = f(&cur)?;
            let wanted_rv = get_str(&cand, &["metadata", "resourceVersion"])
                .unwrap_or_default()
                .to_string();
            let has_precondition = !wanted_rv.is_empty();
            if has_precondition && wanted_rv != cur.resource_version().to_string() {
                return Err(StoreError::stale(&resource, name));
            }
            let next = self.finish_update(rt, &cur, cand, mode)?;
            if next == *cur.value() {
                return Ok(cur);
            }
            if dry_run {
                return Ok(Arc::new(StoredObject::new(next, cur.resource_version())));
            }
            let finalize = get_path(&next, &["metadata", "deletionTimestamp"]).is_some()
                && finalizers_of(&next).is_empty();
            let key = key_of(ns, name);
            let mut st = self.inner.state.write();
            let Some(latest) = st.objects[kind.0].get(&key).cloned() else {
                return Err(self.not_found(rt, name));
            };
            if latest.resource_version() != cur.resource_version() {
                // Another write landed between the read and this commit: decide again on the
                // fresh object, as kube-apiserver's guaranteed update does. A precondition the
                // client set (an update body's resourceVersion, or one inside a patch) no longer
                // matches there and answers 409 above; a resourceVersion the candidate merely
                // inherited from the object it was computed from (any patch, the binding) matches
                // the fresh object, so the write goes through instead of failing a racing client.
                drop(st);
                continue;
            }
            let ev = if finalize {
                self.commit_delete(&mut st, kind, key, latest)
            } else {
                self.commit_put(&mut st, kind, key, next, EventType::Modified, Some(latest))
            };
            let rv = st.rv;
            drop(st);
            self.notify(ev.kind, rv);
            return Ok(ev.object.clone());
        }
        Err(StoreError::stale(&resource, name))
    }

    pub(crate) fn update_in(
        &self,
        kind: KindId,
        ns: &str,
        name: &str,
        body: Value,
        status: bool,
        dry_run: bool,
    ) -> Result<ObjectRef, StoreError> {
        let mode = if status {
            UpdateMode::Status
        } else {
            UpdateMode::Main
        };
        self.guaranteed_update(kind, ns, name, mode, dry_run, &mut |_| Ok(body.clone()))
    }

    /// Replaces an object (PUT). Its `metadata.resourceVersion`, if set, must be current (else 409).
    /// For kinds with a status subresource the stored status is kept.
    pub fn update(
        &self,
        resource: &str,
        namespace: Option<&str>,
        obj: Value,
    ) -> Result<ObjectRef, StoreError> {
        let kind = self.resolve(resource)?;
        let ns = self.namespace_for(
            self.rt(kind),
            namespace.or(Some(util::namespace_of(&obj)).filter(|s| !s.is_empty())),
        );
        let name = util::name_of(&obj).to_string();
        self.update_in(kind, &ns, &name, obj, false, false)
    }

    /// Replaces an object's status (PUT `/status`); everything else in `obj` is ignored.
    pub fn update_status(
        &self,
        resource: &str,
        namespace: Option<&str>,
        obj: Value,
    ) -> Result<ObjectRef, StoreError> {
        let kind = self.resolve(resource)?;
        let ns = self.namespace_for(
            self.rt(kind),
            namespace.or(Some(util::namespace_of(&obj)).filter(|s| !s.is_empty())),
        );
        let name = util::name_of(&obj).to_string();
        self.update_in(kind, &ns, &name, obj, true, false)
    }

    pub(crate) fn patch_in(
        &self,
        kind: KindId,
        ns: &str,
        name: &str,
        patch: &Patch,
        status: bool,
        dry_run: bool,
    ) -> Result<(ObjectRef, bool), StoreError> {
        let mode = if status {
            UpdateMode::Status
        } else {
            UpdateMode::Main
        };
        let res = self.guaranteed_update(kind, ns, name, mode, dry_run, &mut |cur| {
            let mut v = cur.to_value();
            patch.apply_to(&mut v)?;
            Ok(v)
        });
        match (res, patch) {
            (Err(StoreError::NotFound { resource, .. }), Patch::Apply(body))
                if !status && resource == self.rt(kind).plural =>
            {
                let mut obj = body.clone();
                meta_mut(&mut obj).insert("name".into(), json!(name));
                let ns = if self.rt(kind).namespaced { Some(ns) } else { None };
                self.create_in(kind, ns, obj, dry_run).map(|o| (o, true))
            }
            (res, _) => res.map(|o| (o, false)),
        }
    }

    /// Patches an object (main resource; the status of kinds with a status subresource is kept).
    pub fn patch(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> Result<ObjectRef, StoreError> {
        let kind = self.resolve(resource)?;
        let ns = self.namespace_for(self.rt(kind), namespace);
        self.patch_in(kind, &ns, name, patch, false, false)
            .map(|(o, _)| o)
    }

    /// Patches an object's `/status` subresource (only `status` changes).
    pub fn patch_status(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> Result<ObjectRef, StoreError> {
        let kind = self.resolve(resource)?;
        let ns = self.namespace_for(self.rt(kind), namespace);
        self.patch_in(kind, &ns, name, patch, true, false).map(|(o, _)| o)
    }

    /// Creates the object or, if it exists, strategic-merges it into the stored one; a given `status` is
    /// written through the status subresource too. The resource comes from `apiVersion` and `kind`.
    /// Meant for scenario loading.
    pub fn apply(&self, obj: Value) -> Result<ObjectRef, StoreError> {
        let api_version = get_str(&obj, &["apiVersion"]).unwrap_or_default();
        let kind_name = get_str(&obj, &["kind"]).unwrap_or_default();
        let kind = self
            .inner
            .registry
            .by_api_version_kind(api_version, kind_name)
            .ok_or_else(|| {
                StoreError::BadRequest(format!(
                    "no resource is served for apiVersion {api_version:?}, kind {kind_name:?}"
                ))
            })?;
        let rt = self.rt(kind);
        let ns = self.namespace_for(rt, Some(util::namespace_of(&obj)).filter(|s| !s.is_empty()));
        let name = util::name_of(&obj).to_string();
        let status = obj.get("status").cloned();
        let exists = !name.is_empty() && self.get_in(kind, &ns, &name).is_ok();
        let mut out = if exists {
            let mut body = obj.clone();
            if let Value::Object(m) = &mut body {
                m.remove("status");
            }
            self.patch_in(kind, &ns, &name, &Patch::Strategic(body), false, false)?
                .0
        } else {
            self.create_in(kind, if rt.namespaced { Some(&ns) } else { None }, obj, false)?
        };
        if let Some(status) = status
            && rt.status.has_subresource()
            && out.get("status") != Some(&status)
        {
            let name = out.name().to_string();
            out = self
                .patch_in(
                    kind,
                    &ns,
                    &name,
                    &Patch::Merge(json!({"status": status})),
                    true,
                    false,
                )?
                .0;
        }
        Ok(out)
    }

    // ----- delete -----

    pub(crate) fn delete_in(
        &self,
        kind: KindId,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deletion, StoreError> {
        let rt = self.rt(kind);
        let resource = rt.qualified_plural();
        for _ in 0..MAX_ATTEMPTS {
            let cur = self.get_in(kind, ns, name)?;
            if let Some(uid) = &opts.precondition_uid
                && uid != cur.uid()
            {
                return Err(StoreError::Conflict {
                    resource,
                    name: name.to_string(),
                    message: format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        cur.uid()
                    ),
                });
            }
            if let Some(rv) = &opts.precondition_resource_version
                && *rv != cur.resource_version().to_string()
            {
                return Err(StoreError::Conflict {
                    resource,
                    name: name.to_string(),
                    message: format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        cur.resource_version()
                    ),
                });
            }
            let mut finalizers = finalizers_of(cur.value());
            let propagation_finalizer = match opts.propagation {
                Propagation::Orphan => Some("orphan"),
                Propagation::Foreground => Some("foregroundDeletion"),
                Propagation::Background => None,
            };
            if let Some(f) = propagation_finalizer
                && !self.dependents_of(cur.uid()).is_empty()
                && !finalizers.iter().any(|x| x == f)
            {
                finalizers.push(f.to_string());
            }
            let key = key_of(ns, name);
            if !finalizers.is_empty() {
                let deleting = get_path(cur.value(), &["metadata", "deletionTimestamp"]).is_some();
                if deleting && finalizers == finalizers_of(cur.value()) {
                    return Ok(Deletion::Pending(cur));
                }
                let mut next = cur.to_value();
                {
                    let meta = meta_mut(&mut next);
                    meta.insert("finalizers".into(), json!(finalizers));
                    if !deleting {
                        meta.insert("deletionTimestamp".into(), json!(util::now_rfc3339()));
                        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
                        // Controllers must notice that the object is going away: upstream makes
                        // the first deletionTimestamp a new generation for kinds that have one.
                        if let Some(g) = meta.get("generation").and_then(Value::as_i64).filter(|g| *g > 0) {
                            meta.insert("generation".into(), json!(g + 1));
                        }
                    }
                }
                if opts.dry_run {
                    return Ok(Deletion::Pending(Arc::new(StoredObject::new(
                        next,
                        cur.resource_version(),
                    ))));
                }
                let mut st = self.inner.state.write();
                if st.objects[kind.0].get(&key).map(|o| o.resource_version()) != Some(cur.resource_version())
                {
                    continue;
                }
                let ev = self.commit_put(&mut st, kind, key, next, EventType::Modified, Some(cur));
                let rv = st.rv;
                drop(st);
                self.notify(ev.kind, rv);
                return Ok(Deletion::Pending(ev.object.clone()));
            }
            if opts.dry_run {
                return Ok(Deletion::Removed(cur));
            }
            let mut st = self.inner.state.write();
            if st.objects[kind.0].get(&key).map(|o| o.resource_version()) != Some(cur.resource_version()) {
                continue;
            }
            let ev = self.commit_delete(&mut st, kind, key, cur);
            let rv = st.rv;
            drop(st);
            self.notify(ev.kind, rv);
            return Ok(Deletion::Removed(ev.object.clone()));
        }
        Err(StoreError::stale(&resource, name))
    }

    /// Deletes an object: removed at once without finalizers, otherwise marked with a deletionTimestamp.
    pub fn delete(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deletion, StoreError> {
        let kind = self.resolve(resource)?;
        let ns = self.namespace_for(self.rt(kind), namespace);
        self.delete_in(kind, &ns, name, opts)
    }

    // ----- binding -----

    pub(crate) fn bind_in(&self, ns: &str, name: &str, binding: &Value) -> Result<ObjectRef, StoreError> {
        let pods = self
            .inner
            .pods
            .ok_or_else(|| StoreError::UnknownResource("pods".into()))?;
        let node = get_str(binding, &["target", "name"])
            .unwrap_or_default()
            .to_string();
        if node.is_empty() {
            return Err(StoreError::invalid(
                "Binding",
                name,
                "target.name",
                "Required value",
            ));
        }
        if let Some(k) = get_str(binding, &["target", "kind"])
            && !k.is_empty()
            && k != "Node"
        {
            return Err(StoreError::invalid(
                "Binding",
                name,
                "target.kind",
                format!("Unsupported value: {k:?}: supported values: \"Node\""),
            ));
        }
        if let Some(n) = get_str(binding, &["metadata", "name"])
            && !n.is_empty()
            && n != name
        {
            return Err(StoreError::BadRequest(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        // The body is a Binding as the API defines it (annotations are strings): what it carries
        // lands in the pod unvalidated.
        if let Err(e) = serde_path_to_error::deserialize::<_, Binding>(binding) {
            return Err(StoreError::BadRequest(format!(
                "the body is not a valid Binding: {}: {}",
                e.path(),
                e.inner()
            )));
        }
        let uid = get_str(binding, &["metadata", "uid"])
            .filter(|u| !u.is_empty())
            .map(str::to_string);
        let annotations = get_path(binding, &["metadata", "annotations"])
            .and_then(Value::as_object)
            .cloned();
        let conflict = |message: String| StoreError::Conflict {
            resource: "pods/binding".into(),
            name: name.to_string(),
            message,
        };
        self.guaranteed_update(pods, ns, name, UpdateMode::Internal, false, &mut |cur| {
            if let Some(u) = &uid
                && u != cur.uid()
            {
                return Err(conflict(format!(
                    "Precondition failed: UID in precondition: {u}, UID in object meta: {}",
                    cur.uid()
                )));
            }
            if get_path(cur.value(), &["metadata", "deletionTimestamp"]).is_some() {
                return Err(conflict(format!(
                    "pod {name} is being deleted, cannot be assigned to a host"
                )));
            }
            let current = get_str(cur.value(), &["spec", "nodeName"]).unwrap_or_default();
            if !current.is_empty() {
                return Err(conflict(format!(
                    "pod {name} is already assigned to node {current:?}"
                )));
            }
            if get_path(cur.value(), &["spec", "schedulingGates"])
                .and_then(Value::as_array)
                .is_some_and(|g| !g.is_empty())
            {
                return Err(conflict(format!(
                    "pod {name} has non-empty .spec.schedulingGates"
                )));
            }
            let mut v = cur.to_value();
            util::object_at(&mut v, &["spec"]).insert("nodeName".into(), json!(node));
            // ClearingNominatedNodeNameAfterBinding (on by default in kube-apiserver 1.37): the
            // nomination was a hint for where the pod would go; the binding says it.
            util::object_at(&mut v, &["status"]).remove("nominatedNodeName");
            set_pod_scheduled(&mut v);
            if let Some(a) = &annotations {
                let target = util::object_at(&mut v, &["metadata", "annotations"]);
                for (k, val) in a {
                    target.insert(k.clone(), val.clone());
                }
            }
            Ok(v)
        })
    }

    /// Binds a pod to a node, as `POST pods/{name}/binding` does: only if `spec.nodeName` is empty
    /// (409 otherwise) and, when `uid` is given, only if it matches the pod.
    pub fn bind(
        &self,
        namespace: &str,
        pod: &str,
        node: &str,
        uid: Option<&str>,
    ) -> Result<ObjectRef, StoreError> {
        let mut binding = json!({"metadata": {"name": pod}, "target": {"kind": "Node", "name": node}});
        if let Some(u) = uid {
            binding["metadata"]["uid"] = json!(u);
        }
        self.bind_in(namespace, pod, &binding)
    }

    // ----- waiting -----

    /// Waits until the object exists and `pred` holds for it, or `timeout` passes (504 `Timeout`).
    pub async fn wait_for(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Result<ObjectRef, StoreError> {
        let kind = self.resolve(resource)?;
        let ns = self.namespace_for(self.rt(kind), namespace);
        let mut rx = self.notifier();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            rx.borrow_and_update();
            if let Ok(o) = self.get_in(kind, &ns, name)
                && pred(o.value())
            {
                return Ok(o);
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(StoreError::Internal("store closed".into())),
                Err(_) => {
                    return Err(StoreError::Timeout(format!(
                        "timed out after {timeout:?} waiting for {} {ns}/{name}",
                        self.rt(kind).plural
                    )));
                }
            }
        }
    }

    /// Waits until no write has happened for `quiet` (the store has settled), or `timeout` passes.
    /// Returns whether it settled.
    pub async fn wait_quiet(&self, quiet: Duration, timeout: Duration) -> bool {
        let mut rx = self.notifier();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            rx.borrow_and_update();
            let until = tokio::time::Instant::now() + quiet;
            if until > deadline {
                return false;
            }
            match tokio::time::timeout_at(until, rx.changed()).await {
                Err(_) => return true,
                Ok(Ok(())) => {}
                Ok(Err(_)) => return false,
            }
        }
    }
}

impl Lookup for Store {
    fn lookup(&self, resource: &str, namespace: &str, name: &str) -> Option<ObjectRef> {
        let kind = self.inner.registry.resolve(resource)?;
        self.get_in(kind, namespace, name).ok()
    }

    fn all(&self, resource: &str) -> Vec<ObjectRef> {
        match self.inner.registry.resolve(resource) {
            Some(kind) => self.snapshot(kind, None),
            None => Vec::new(),
        }
    }
}

/// The binding subresource of kube-apiserver marks the pod `PodScheduled=True` in the same write
/// (replacing a `False` condition the scheduler left from earlier attempts), so clients see a
/// scheduled pod without a second status write.
fn set_pod_scheduled(pod: &mut Value) {
    let now = util::now_rfc3339();
    let status = util::object_at(pod, &["status"]);
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    if let Some(list) = conditions.as_array_mut() {
        list.retain(|c| c["type"] != "PodScheduled");
        list.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}));
    }
}

#[cfg(test)]
mod first_read_tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::AtomicUsize;

    use serde_json::json;

    use super::*;
    use crate::ApiServer;

    fn config_map(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}})
    }

    #[test]
    fn a_first_read_hook_runs_once_before_the_first_public_read() {
        let s = ApiServer::builder().controllers(false).build().store().clone();
        let kind = s.resolve("configmaps").unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        s.on_first_read(kind, move |s| {
            counted.fetch_add(1, Ordering::SeqCst);
            s.create("configmaps", Some("default"), config_map("made-by-hook"))
                .unwrap();
        });
        // Writes and crate-internal reads do not run it.
        s.create("configmaps", Some("default"), config_map("written"))
            .unwrap();
        assert_eq!(s.snapshot(kind, None).len(), 1);
        assert_eq!(runs.load(Ordering::SeqCst), 0);

        // The first public read does, before it reads; later reads do not.
        assert!(s.get("configmaps", Some("default"), "made-by-hook").is_ok());
        assert_eq!(s.list_all("configmaps", None).unwrap().len(), 2);
        assert_eq!(
            s.list("configmaps", None, &ListOptions::default())
                .unwrap()
                .items
                .len(),
            2
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_hook_on_one_kind_leaves_other_kinds_alone() {
        let s = ApiServer::builder().controllers(false).build().store().clone();
        let kind = s.resolve("configmaps").unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        s.on_first_read(kind, move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        s.list_all("secrets", None).unwrap();
        s.list_all("pods", None).unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        s.list_all("configmaps", None).unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}

#[cfg(test)]
mod race_tests {
    #![allow(clippy::unwrap_used)]
    //! A write that loses the race between its read and its commit: `f` itself performs the
    //! competing write on its first call, so the race happens every time, not by chance.

    use serde_json::json;

    use super::*;
    use crate::{ApiServer, Patch};

    fn store_with_pod() -> Store {
        let s = ApiServer::builder().controllers(false).build().store().clone();
        s.create(
            "pods",
            Some("default"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                   "spec": {"containers": [{"name": "c", "image": "x"}]}}),
        )
        .unwrap();
        s
    }

    /// Runs `f` under `guaranteed_update` with a competing label patch from another writer landing
    /// after the first read.
    fn racing(
        s: &Store,
        f: &mut dyn FnMut(&ObjectRef) -> Result<Value, StoreError>,
    ) -> Result<ObjectRef, StoreError> {
        let kind = s.resolve("pods").unwrap();
        let mut raced = false;
        s.guaranteed_update(kind, "default", "p", UpdateMode::Main, false, &mut |cur| {
            if !raced {
                raced = true;
                let other = Patch::Merge(json!({"metadata": {"labels": {"other": "writer"}}}));
                s.patch("pods", Some("default"), "p", &other).unwrap();
            }
            f(cur)
        })
    }

    #[test]
    fn a_patch_that_loses_the_race_is_applied_to_the_fresh_object() {
        let s = store_with_pod();
        let mine = Patch::Merge(json!({"metadata": {"labels": {"mine": "yes"}}}));
        let out = racing(&s, &mut |cur| {
            let mut v = cur.to_value();
            mine.apply_to(&mut v)?;
            Ok(v)
        })
        .unwrap();
        let labels = &out.value()["metadata"]["labels"];
        assert_eq!(labels["mine"], "yes");
        assert_eq!(
            labels["other"], "writer",
            "the competing write is kept, not overwritten"
        );
    }

    #[test]
    fn an_update_whose_precondition_the_race_made_stale_answers_409() {
        let s = store_with_pod();
        let read = s.get("pods", Some("default"), "p").unwrap();
        let mut body = read.to_value();
        body["metadata"]["labels"] = json!({"mine": "yes"});
        let err = racing(&s, &mut |_| Ok(body.clone())).unwrap_err();
        assert!(matches!(err, StoreError::Conflict { .. }), "{err:?}");
        let now = s.get("pods", Some("default"), "p").unwrap();
        assert!(now.value()["metadata"]["labels"].get("mine").is_none());
        assert_eq!(now.value()["metadata"]["labels"]["other"], "writer");
    }

    #[test]
    fn a_patch_carrying_a_stale_resource_version_answers_409() {
        let s = store_with_pod();
        let rv = s
            .get("pods", Some("default"), "p")
            .unwrap()
            .resource_version()
            .to_string();
        let mine = Patch::Merge(json!({"metadata": {"resourceVersion": rv, "labels": {"mine": "yes"}}}));
        let err = racing(&s, &mut |cur| {
            let mut v = cur.to_value();
            mine.apply_to(&mut v)?;
            Ok(v)
        })
        .unwrap_err();
        assert!(matches!(err, StoreError::Conflict { .. }), "{err:?}");
    }
}

//! Watches: a cursor over the store's event history, filtered by resource, namespace and selectors.

use std::collections::VecDeque;

use crate::error::StoreError;
use crate::registry::KindId;
use crate::selector::{FieldSelector, LabelSelector};

use super::{EventType, ObjectRef, Store, StoreEvent};

/// Options of a watch.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    /// `labelSelector`.
    pub label_selector: LabelSelector,
    /// `fieldSelector`.
    pub field_selector: FieldSelector,
    /// `resourceVersion`: start after this version. Unset or `"0"` starts now and first delivers every
    /// existing object as ADDED.
    pub resource_version: Option<String>,
    /// `sendInitialEvents`: force (true) or suppress (false) the initial ADDED events.
    pub send_initial_events: Option<bool>,
}

/// One event as a watcher sees it (after selector filtering: an object that stops matching is
/// DELETED, one that starts matching is ADDED).
#[derive(Clone, Debug)]
pub struct WatchEvent {
    /// What happened.
    pub event_type: EventType,
    /// The resource.
    pub kind: KindId,
    /// The object.
    pub object: ObjectRef,
    /// The underlying store event (None for initial ADDED events).
    pub source: Option<std::sync::Arc<StoreEvent>>,
}

impl WatchEvent {
    /// The event's resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.object.resource_version()
    }
}

/// A live cursor over store events. Dropping it ends the watch.
pub struct Subscription {
    store: Store,
    kind: Option<KindId>,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    pos: u64,
    rx: tokio::sync::watch::Receiver<u64>,
    pending: VecDeque<WatchEvent>,
    initial_left: usize,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("kind", &self.kind)
            .field("position", &self.pos)
            .finish()
    }
}

/// How many history entries one poll scans at most.
const SCAN: usize = 2048;

impl Subscription {
    fn matches(&self, obj: &serde_json::Value) -> bool {
        if let Some(ns) = &self.namespace
            && crate::util::namespace_of(obj) != ns
        {
            return false;
        }
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    fn convert(&self, ev: &std::sync::Arc<StoreEvent>) -> Option<WatchEvent> {
        if self.kind.is_some_and(|k| k != ev.kind) {
            return None;
        }
        let now = self.matches(ev.object.value());
        let (event_type, object) = match ev.event_type {
            EventType::Added | EventType::Deleted => {
                if !now {
                    return None;
                }
                (ev.event_type, ev.object.clone())
            }
            EventType::Modified => {
                let before = ev.previous.as_ref().is_some_and(|p| self.matches(p.value()));
                match (before, now) {
                    (true, true) => (EventType::Modified, ev.object.clone()),
                    (false, true) => (EventType::Added, ev.object.clone()),
                    (true, false) => (EventType::Deleted, ev.previous_at_rv()),
                    (false, false) => return None,
                }
            }
        };
        Some(WatchEvent {
            event_type,
            kind: ev.kind,
            object,
            source: Some(ev.clone()),
        })
    }

    /// The resourceVersion up to which events have been read (matching or not).
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// How many initial ADDED events are still to be delivered.
    pub fn initial_events_left(&self) -> usize {
        self.initial_left
    }

    /// Events available now, without waiting: pending initial events first, then history. Errors
    /// with 410 Gone when the cursor fell behind the retained history.
    pub fn poll_batch(&mut self, max: usize) -> Result<Vec<WatchEvent>, StoreError> {
        let max = max.max(1);
        if !self.pending.is_empty() {
            let n = self.pending.len().min(max);
            self.initial_left = self.initial_left.saturating_sub(n);
            return Ok(self.pending.drain(..n).collect());
        }
        self.rx.borrow_and_update();
        // Window after window (the lock released between them) until something matches or the
        // history is read to its end: a poll that came back empty with history left unread
        // would leave the watch waiting for a wake-up, and a watch of one kind is woken only by
        // its own kind's writes, which may not come.
        loop {
            let (out, more) = self.scan_window(max)?;
            if !out.is_empty() || !more {
                return Ok(out);
            }
        }
    }

    /// The matching events of the next [`SCAN`] history entries (at most `max`), and whether
    /// history is left after them.
    fn scan_window(&mut self, max: usize) -> Result<(Vec<WatchEvent>, bool), StoreError> {
        let mut out = Vec::new();
        let st = self.store.state().read();
        let first = st.first_rv();
        // A watch of one kind is woken by its kind's writes only, so it may sleep through any
        // number of other writes: it has lost something only if an event of its own kind past
        // its position was dropped (as with kube-apiserver's watch cache, which is per
        // resource), and with nothing of its kind past its position it is simply current.
        let expired = match self.kind {
            Some(kind) => st.kind_dropped[kind.0] > self.pos,
            None => self.pos + 1 < first,
        };
        if expired {
            return Err(StoreError::Gone(format!(
                "too old resource version: {} ({})",
                self.pos,
                first - 1
            )));
        }
        if let Some(kind) = self.kind {
            if st.kind_written[kind.0] <= self.pos {
                self.pos = self.pos.max(st.rv);
                return Ok((out, false));
            }
            self.pos = self.pos.max(first.saturating_sub(1));
        }
        let start = (self.pos + 1 - first) as usize;
        if start >= st.history.len() {
            return Ok((out, false));
        }
        let end = st.history.len().min(start + SCAN);
        for ev in st.history.range(start..end) {
            if let Some(we) = self.convert(ev) {
                out.push(we);
                if out.len() >= max {
                    self.pos = ev.resource_version();
                    return Ok((out, true));
                }
            }
        }
        if let Some(ev) = st.history.get(end - 1) {
            self.pos = ev.resource_version();
        }
        Ok((out, end < st.history.len()))
    }

    /// Moves a one-kind watch's position past the other kinds' writes when nothing of its own
    /// kind is left to read, so that a bookmark carries a current resourceVersion although the
    /// watch is not woken by those writes.
    pub fn catch_up(&mut self) {
        let Some(kind) = self.kind else { return };
        if !self.pending.is_empty() {
            return;
        }
        let st = self.store.state().read();
        if st.kind_written[kind.0] <= self.pos && st.kind_dropped[kind.0] <= self.pos {
            self.pos = self.pos.max(st.rv);
        }
    }

    /// Waits until the store has changed since the last poll.
    pub async fn changed(&mut self) -> Result<(), StoreError> {
        self.rx
            .changed()
            .await
            .map_err(|_| StoreError::Internal("store closed".into()))
    }

    /// The next event, waiting for one if needed.
    pub async fn next(&mut self) -> Result<WatchEvent, StoreError> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                self.initial_left = self.initial_left.saturating_sub(1);
                return Ok(e);
            }
            let batch = self.poll_batch(SCAN)?;
            if batch.is_empty() {
                self.changed().await?;
            } else {
                self.pending.extend(batch);
            }
        }
    }

    /// The next event if one is available now.
    pub fn try_next(&mut self) -> Result<Option<WatchEvent>, StoreError> {
        if self.pending.is_empty() {
            let batch = self.poll_batch(SCAN)?;
            self.pending.extend(batch);
        }
        if self.pending.is_empty() {
            return Ok(None);
        }
        self.initial_left = self.initial_left.saturating_sub(1);
        Ok(self.pending.pop_front())
    }
}

impl Store {
    /// Every event of every resource from now on.
    pub fn subscribe(&self) -> Subscription {
        let rx = self.notifier();
        let pos = self.resource_version();
        Subscription {
            store: self.clone(),
            kind: None,
            namespace: None,
            labels: LabelSelector::default(),
            fields: FieldSelector::default(),
            pos,
            rx,
            pending: VecDeque::new(),
            initial_left: 0,
        }
    }

    /// Every event of one resource from now on; it wakes only on writes of that resource.
    pub fn subscribe_kind(&self, kind: KindId) -> Subscription {
        Subscription {
            kind: Some(kind),
            rx: self.kind_notifier(kind),
            ..self.subscribe()
        }
    }

    /// Every event of every resource after `resource_version` (410 later if that is too old).
    pub fn subscribe_from(&self, resource_version: u64) -> Subscription {
        let mut s = self.subscribe();
        s.pos = resource_version;
        s
    }

    pub(crate) fn watch_in(
        &self,
        kind: KindId,
        namespace: Option<&str>,
        opts: &WatchOptions,
    ) -> Result<Subscription, StoreError> {
        let rv = opts.resource_version.as_deref().unwrap_or_default();
        let (start, initial) = match rv {
            "" | "0" => (None, opts.send_initial_events != Some(false)),
            other => {
                let n = other
                    .parse::<u64>()
                    .map_err(|_| StoreError::BadRequest(format!("invalid resourceVersion {other:?}")))?;
                (Some(n), opts.send_initial_events == Some(true))
            }
        };
        let rx = self.kind_notifier(kind);
        let mut sub = Subscription {
            store: self.clone(),
            kind: Some(kind),
            namespace: namespace.map(str::to_string),
            labels: opts.label_selector.clone(),
            fields: opts.field_selector.clone(),
            pos: 0,
            rx,
            pending: VecDeque::new(),
            initial_left: 0,
        };
        let st = self.state().read();
        sub.pos = if initial { st.rv } else { start.unwrap_or(st.rv) };
        if initial {
            for (k, obj) in st.objects[kind.0].iter() {
                if namespace.is_some_and(|ns| k.0 != ns) || !sub.matches(obj.value()) {
                    continue;
                }
                sub.pending.push_back(WatchEvent {
                    event_type: EventType::Added,
                    kind,
                    object: obj.clone(),
                    source: None,
                });
            }
            sub.initial_left = sub.pending.len();
        }
        drop(st);
        Ok(sub)
    }

    /// Watches one resource (optionally in one namespace) with selectors.
    pub fn watch(
        &self,
        resource: &str,
        namespace: Option<&str>,
        opts: &WatchOptions,
    ) -> Result<Subscription, StoreError> {
        let kind = self.resolve(resource)?;
        self.watch_in(kind, namespace, opts)
    }
}

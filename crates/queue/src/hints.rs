//! Queueing hints: does this event justify retrying this pod, and how soon?
//!
//! Built once per profile from `Framework::events_to_register`. Only the hints of the plugins that
//! rejected the pod (its unschedulable and pending plugins) run, because only they can change their
//! verdict; a Queue from a *Pending* plugin means "the thing I was waiting for happened" and skips
//! backoff, while a Queue from a rejecting plugin retries after backoff (the rejection was a
//! scheduling failure and is penalised). A hint error counts as Queue so a buggy hint can delay a pod,
//! never strand it.
//!
//! Two registration rules follow upstream `buildQueueingHintMap`/`fillEnqueueExtensions`:
//! a PreEnqueue/PreFilter/Filter/Reserve/Permit plugin that does not implement `EnqueueExtensions`
//! is interested in every event (we cannot know better), and a plugin registering `Node/Add` without
//! `Node/UpdateNodeTaint` also gets the latter (a node that becomes schedulable after creation is
//! reported as a taint update).

use std::collections::{BTreeMap, BTreeSet};

use unisched_framework::{
    ActionType, ClusterEvent, EventNarrowing, EventObject, EventResource, Framework, PodKeysFn,
    QueuedPodInfo, QueueingHint, QueueingHintFn,
};

use crate::{events::is_wildcard, pool_index::PoolIndex};

/// How a pod should be requeued after an event, in increasing urgency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Strategy {
    /// Stay in the unschedulable pool.
    Skip,
    /// Go to backoffQ, or activeQ when the backoff is already over.
    AfterBackoff,
    /// Go to activeQ now (a Pending plugin said Queue).
    Immediately,
}

struct HintFunction {
    plugin: String,
    hint: Option<QueueingHintFn>,
    narrowing: Option<EventNarrowing>,
}

/// One profile's registered events.
pub(crate) struct ProfileHints {
    by_event: Vec<(ClusterEvent, Vec<HintFunction>)>,
    plugin_events: BTreeMap<String, Vec<ClusterEvent>>,
    /// Plugins registered for everything because they lack `EnqueueExtensions`. Upstream registers
    /// them for every resource rather than for the wildcard, so the wildcard event itself (the
    /// unschedulable timeout) does not release pods they gate.
    defaulted: BTreeSet<String>,
}

impl std::fmt::Debug for ProfileHints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.plugin_events.iter()).finish()
    }
}

const EVERYTHING: ClusterEvent = ClusterEvent::new(EventResource::Wildcard, ActionType::ALL, "*");

impl ProfileHints {
    pub(crate) fn from_framework(fwk: &Framework) -> Self {
        let mut hints = ProfileHints {
            by_event: Vec::new(),
            plugin_events: BTreeMap::new(),
            defaulted: BTreeSet::new(),
        };
        let registered = fwk.events_to_register();
        let with_extensions: BTreeSet<&str> = registered.iter().map(|(n, _)| n.as_str()).collect();
        // A plugin that registered an empty list is interested in nothing: pods it rejected wait for
        // the unschedulable timeout (or their own updates, through other plugins' hints).
        // A plugin gets exactly the events it registered: Node/Add does not imply Node/UpdateNodeTaint
        // (older upstream releases added it; 1.37 does not).
        for (plugin, events) in registered {
            for e in events {
                hints.register(plugin, e.event, e.hint.clone(), e.narrowing.clone());
            }
        }
        let names = fwk.plugin_names();
        let rejecting_points = ["preEnqueue", "preFilter", "filter", "reserve", "permit"];
        for point in rejecting_points {
            for name in names.get(point).into_iter().flatten() {
                if !with_extensions.contains(name.as_str()) && hints.defaulted.insert(name.clone()) {
                    hints.register(name, EVERYTHING, None, None);
                }
            }
        }
        hints
    }

    fn register(
        &mut self,
        plugin: &str,
        event: ClusterEvent,
        hint: Option<QueueingHintFn>,
        narrowing: Option<EventNarrowing>,
    ) {
        // Narrowing describes a hint's answers; without a hint the answer is always Queue.
        let narrowing = narrowing.filter(|_| hint.is_some());
        let f = HintFunction {
            plugin: plugin.to_string(),
            hint,
            narrowing,
        };
        match self.by_event.iter_mut().find(|(e, _)| *e == event) {
            Some((_, fns)) => fns.push(f),
            None => self.by_event.push((event, vec![f])),
        }
        self.plugin_events
            .entry(plugin.to_string())
            .or_default()
            .push(event);
    }

    /// True when some plugin registered an event matching `event`.
    pub(crate) fn interested(&self, event: &ClusterEvent) -> bool {
        self.by_event.iter().any(|(e, _)| e.matches(event))
    }

    /// True when `plugin` (a gating PreEnqueue plugin) registered an event matching `event`.
    pub(crate) fn plugin_interested(&self, plugin: &str, event: &ClusterEvent) -> bool {
        if self.defaulted.contains(plugin) {
            return !is_wildcard(event);
        }
        self.plugin_events
            .get(plugin)
            .is_some_and(|evs| evs.iter().any(|e| e.matches(event)))
    }

    /// The pod-key functions of this profile's narrowed events (see [`PoolIndex`]).
    pub(crate) fn pod_key_fns(&self) -> impl Iterator<Item = &PodKeysFn> {
        self.by_event
            .iter()
            .flat_map(|(_, fns)| fns)
            .filter_map(|f| f.narrowing.as_ref().map(|n| &n.pod_keys))
    }

    /// Adds to `out` every pooled pod *rejected by a plugin* for which [`Self::evaluate`] can answer
    /// other than Skip for `event`: the pods whose keys meet the event's keys for a narrowed hint,
    /// and every pod the plugin rejected for any other hint. (Pods no plugin rejected are the
    /// caller's: `precheck` decides them.)
    pub(crate) fn candidates<'a>(
        &self,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
        index: &'a PoolIndex,
        out: &mut BTreeSet<&'a str>,
    ) {
        for (registered, fns) in &self.by_event {
            if !registered.matches(event) {
                continue;
            }
            for f in fns {
                match f.narrowing.as_ref().and_then(|n| (n.event_keys)(old, new)) {
                    Some(keys) => {
                        for k in &keys {
                            out.extend(index.with_key(k));
                        }
                    }
                    None => out.extend(index.rejected_by(&f.plugin)),
                }
            }
        }
    }

    /// Upstream `isPodWorthRequeuing`.
    pub(crate) fn evaluate(
        &self,
        qpi: &QueuedPodInfo,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Strategy {
        let pending = &qpi.pending_plugins;
        let rejected_by = |p: &str| qpi.unschedulable_plugins.contains(p) || pending.contains(p);
        let mut strategy = Strategy::Skip;
        for (registered, fns) in &self.by_event {
            if !registered.matches(event) {
                continue;
            }
            for f in fns.iter().filter(|f| rejected_by(&f.plugin)) {
                let hint = match &f.hint {
                    None => QueueingHint::Queue,
                    Some(h) => h(&qpi.pod_info.pod, old, new).unwrap_or_else(|err| {
                        tracing::warn!(
                            plugin = %f.plugin, event = %event, pod = %qpi.pod_info.key(), %err,
                            "queueing hint failed; treating it as Queue"
                        );
                        QueueingHint::Queue
                    }),
                };
                if hint == QueueingHint::Skip {
                    continue;
                }
                if pending.contains(&f.plugin) {
                    return Strategy::Immediately;
                }
                if pending.is_empty() {
                    return Strategy::AfterBackoff;
                }
                strategy = Strategy::AfterBackoff;
            }
        }
        strategy
    }
}

/// The strategy for `qpi` and `event`, before consulting any hint: `None` means "ask the hints".
pub(crate) fn precheck(
    qpi: &QueuedPodInfo,
    event: &ClusterEvent,
    new: Option<&EventObject>,
) -> Option<Strategy> {
    if qpi.unschedulable_plugins.is_empty() && qpi.pending_plugins.is_empty() {
        // Failed with an error (or never attempted): retry after the error backoff.
        return Some(Strategy::AfterBackoff);
    }
    if is_wildcard(event) {
        // A wildcard may target one pod (ForceActivate carries it as the new object).
        return Some(match new {
            None => Strategy::AfterBackoff,
            Some(EventObject::Pod(p)) if p.uid == qpi.pod_info.uid => Strategy::AfterBackoff,
            Some(_) => Strategy::Skip,
        });
    }
    None
}

//! Scheduler extenders: outside services that take part in Filter, Score, Bind and preemption
//! over HTTP, configured under `extenders` in `KubeSchedulerConfiguration`.
//!
//! This crate knows nothing of HTTP, so an extender is the [`Extender`] trait: the HTTP client
//! lives in `unisched-extender`, and tests use in-memory fakes. What the scheduler does with the
//! answers (when each verb is called, how failures and ignorable extenders are handled, how scores
//! are scaled) is here, in `run`, and follows upstream kube-scheduler.

pub mod config;
mod run;

use std::{collections::BTreeMap, error::Error, sync::Arc};

use crate::{NodeInfo, PodInfo};

pub use run::{
    PRIORITIZING_EXTENDER, extender_binding, find_nodes_that_pass_extenders, has_interested_binder,
    prioritize_with_extenders,
};

/// The pseudo-plugin name that marks a pod rejected by an extender (upstream's `ExtenderName`):
/// no cluster event is registered for it, so any event moves the pod back to the queue.
pub const EXTENDER_NAME: &str = "Extender";

/// The highest score an extender gives (upstream's `MaxExtenderPriority`); scores are scaled from
/// `0..=MAX_EXTENDER_PRIORITY` to the plugins' `0..=MAX_NODE_SCORE`.
pub const MAX_EXTENDER_PRIORITY: i64 = 10;

/// Why a call to an extender failed: the extender's own error type lives in a crate above.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ExtenderError(Box<dyn Error + Send + Sync>);

impl ExtenderError {
    /// The extender's error.
    pub fn new(source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        ExtenderError(source.into())
    }
}

/// What an extender's filter verb answered, with its nodes resolved to the nodes it was given.
#[derive(Clone, Debug, Default)]
pub struct ExtenderFilterOutcome {
    /// The nodes that passed, in the extender's order.
    pub feasible: Vec<Arc<NodeInfo>>,
    /// Rejected nodes and why; preemption may still help on them.
    pub failed: BTreeMap<String, String>,
    /// Rejected nodes and why; preemption cannot help on them.
    pub failed_and_unresolvable: BTreeMap<String, String>,
}

/// An extender's score for one node, in `0..=MAX_EXTENDER_PRIORITY`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPriority {
    /// The node.
    pub host: String,
    /// Its score.
    pub score: i64,
}

/// The pods preemption would evict on one node, and how many PodDisruptionBudgets that violates.
#[derive(Clone, Debug, Default)]
pub struct Victims {
    /// The pods.
    pub pods: Vec<Arc<PodInfo>>,
    /// Budgets violated.
    pub num_pdb_violations: i64,
}

/// One configured extender. Verbs the extender does not configure answer without a call: Filter
/// passes every node, Prioritize gives every node 0 with weight 0.
pub trait Extender: Send + Sync {
    /// The name in logs, metrics and scores: the URL prefix.
    fn name(&self) -> &str;
    /// Whether scheduling goes on without this extender when it fails.
    fn is_ignorable(&self) -> bool;
    /// Whether the pod requests one of the extender's managed resources (or it manages none).
    fn is_interested(&self, pod: &PodInfo) -> bool;
    /// Whether a filter verb is configured.
    fn is_filter(&self) -> bool;
    /// Whether a prioritize verb is configured.
    fn is_prioritizer(&self) -> bool;
    /// Whether a bind verb is configured.
    fn is_binder(&self) -> bool;
    /// Whether a preempt verb is configured.
    fn supports_preemption(&self) -> bool;
    /// The nodes among `nodes` that pass the extender, and why the others fail.
    fn filter(&self, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Result<ExtenderFilterOutcome, ExtenderError>;
    /// The extender's scores for `nodes` and the weight they carry.
    fn prioritize(
        &self,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<(Vec<HostPriority>, i64), ExtenderError>;
    /// Binds the pod to `node` instead of the Bind plugins.
    fn bind(&self, pod: &PodInfo, node: &str) -> Result<(), ExtenderError>;
    /// The candidates for preemption the extender keeps, with the victims it chose on each;
    /// `nodes` resolves the pods the extender names.
    fn process_preemption(
        &self,
        pod: &PodInfo,
        victims: BTreeMap<String, Victims>,
        nodes: &dyn Fn(&str) -> Option<Arc<NodeInfo>>,
    ) -> Result<BTreeMap<String, Victims>, ExtenderError>;
}

impl std::fmt::Debug for dyn Extender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extender").field("name", &self.name()).finish()
    }
}

/// The configured extenders in call order: as upstream, ignorable ones after the others, so that
/// an extender that must answer has filtered the nodes before one that may not.
#[derive(Clone, Debug, Default)]
pub struct Extenders(Arc<[Arc<dyn Extender>]>);

impl Extenders {
    /// `extenders` in configuration order; ignorable ones are moved to the end.
    pub fn new(extenders: Vec<Arc<dyn Extender>>) -> Self {
        let (mut ordered, ignorable): (Vec<_>, Vec<_>) =
            extenders.into_iter().partition(|e| !e.is_ignorable());
        ordered.extend(ignorable);
        Extenders(ordered.into())
    }

    /// True when none is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// In call order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Extender>> {
        self.0.iter()
    }

    /// True when some extender filters nodes.
    pub fn any_filter(&self) -> bool {
        self.0.iter().any(|e| e.is_filter())
    }

    /// True when some extender scores nodes.
    pub fn any_prioritizer(&self) -> bool {
        self.0.iter().any(|e| e.is_prioritizer())
    }
}

#[cfg(test)]
mod tests;

//! Why a pod did not fit: per-node statuses and the upstream-format message.
//!
//! The message format is a compatibility surface: `0/5 nodes are available: 1 node(s) had
//! untolerated taint {…}, 4 Insufficient cpu.` Users grep for it, and so does the cluster autoscaler.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt,
    sync::Arc,
};

use crate::{Code, Snapshot, Status};

/// Statuses of the nodes that were rejected, plus one status for every node not listed.
#[derive(Clone, Debug)]
pub struct NodeToStatus {
    statuses: HashMap<String, Status>,
    absent: Status,
}

impl Default for NodeToStatus {
    fn default() -> Self {
        NodeToStatus {
            statuses: HashMap::new(),
            absent: Status::new(Code::UnschedulableAndUnresolvable, Vec::<String>::new()),
        }
    }
}

impl NodeToStatus {
    /// Records a node's status.
    pub fn set(&mut self, node: impl Into<String>, status: Status) {
        self.statuses.insert(node.into(), status);
    }

    /// Makes room for `additional` more statuses (the algorithm knows how many nodes it rejected;
    /// growing the map one rehash at a time was a visible cost with thousands).
    pub fn reserve(&mut self, additional: usize) {
        self.statuses.reserve(additional);
    }

    /// The status of a node (the absent-nodes status when it was not rejected explicitly).
    pub fn get(&self, node: &str) -> &Status {
        self.statuses.get(node).unwrap_or(&self.absent)
    }

    /// The status of a node that was explicitly rejected.
    pub fn get_explicit(&self, node: &str) -> Option<&Status> {
        self.statuses.get(node)
    }

    /// Sets the status of every node not listed.
    pub fn set_absent(&mut self, status: Status) {
        self.absent = status;
    }

    /// The status of nodes not listed.
    pub fn absent(&self) -> &Status {
        &self.absent
    }

    /// Explicit entries.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Status)> {
        self.statuses.iter()
    }

    /// Number of explicit entries.
    pub fn len(&self) -> usize {
        self.statuses.len()
    }

    /// True when no node was rejected explicitly.
    pub fn is_empty(&self) -> bool {
        self.statuses.is_empty()
    }

    /// Names of nodes whose status has `code` (explicit ones only).
    pub fn nodes_with_code(&self, code: Code) -> Vec<String> {
        let mut v: Vec<String> = self
            .statuses
            .iter()
            .filter(|(_, s)| s.code() == code)
            .map(|(n, _)| n.clone())
            .collect();
        v.sort();
        v
    }
}

/// Everything the scheduler learned while failing to place a pod.
#[derive(Clone, Debug, Default)]
pub struct Diagnosis {
    /// Per-node rejections.
    pub node_to_status: NodeToStatus,
    /// Plugins that rejected the pod on some node (drive queueing hints).
    pub unschedulable_plugins: BTreeSet<String>,
    /// Plugins that returned Pending.
    pub pending_plugins: BTreeSet<String>,
    /// Set when PreFilter rejected the pod: the whole explanation.
    pub pre_filter_msg: Option<String>,
    /// What PostFilter (preemption) said.
    pub post_filter_msg: Option<String>,
    /// Extra detail appended after the upstream text (unisched's DRA explanations).
    pub detail: Vec<String>,
}

impl Diagnosis {
    /// Records which plugin produced a rejection.
    pub fn add_plugin_status(&mut self, status: &Status) {
        let Some(plugin) = status.plugin() else { return };
        let set = match status.code() {
            Code::Unschedulable | Code::UnschedulableAndUnresolvable => &mut self.unschedulable_plugins,
            Code::Pending => &mut self.pending_plugins,
            _ => return,
        };
        // Called for every rejected node, nearly always with a plugin already listed.
        if !set.contains(plugin) {
            set.insert(plugin.to_string());
        }
    }
}

/// Cycle-state key of a [`DiagnosisDetail`]: a plugin that can explain its rejections better than
/// per-node reasons (DynamicResources aggregates the allocator's typed reasons over all nodes) writes
/// one in PreFilter; when no node fits, the algorithm asks it for sentences to append to the
/// `FailedScheduling` message ([`Diagnosis::detail`]), before PostFilter runs.
pub const DIAGNOSIS_DETAIL_KEY: &str = "unisched.io/DiagnosisDetail";

/// Produces extra explanation for a failed attempt. See [`DIAGNOSIS_DETAIL_KEY`].
pub trait DiagnosisDetailSource: Send + Sync {
    /// Sentences to append, given the per-node statuses and the attempt's node snapshot (empty:
    /// nothing to add). The snapshot lets a plugin that rejected nodes cheaply in Filter work out
    /// the finer reason now, for the nodes that need it, instead of on every Filter call.
    fn detail(&self, statuses: &NodeToStatus, snapshot: &Snapshot) -> Vec<String>;
}

/// The value stored under [`DIAGNOSIS_DETAIL_KEY`].
#[derive(Clone)]
pub struct DiagnosisDetail(pub Arc<dyn DiagnosisDetailSource>);

/// No node could run the pod.
#[derive(Clone, Debug)]
pub struct FitError {
    /// Nodes considered.
    pub num_all_nodes: usize,
    /// Why.
    pub diagnosis: Diagnosis,
}

impl FitError {
    /// The reason histogram: reason → number of nodes, over explicit statuses plus the absent ones.
    pub fn reason_histogram(&self) -> BTreeMap<String, usize> {
        let mut hist = BTreeMap::new();
        let nts = &self.diagnosis.node_to_status;
        for (_, status) in nts.iter() {
            for r in status.reasons() {
                *hist.entry(r).or_insert(0) += 1;
            }
        }
        let absent = self.num_all_nodes.saturating_sub(nts.len());
        if absent > 0 {
            for r in nts.absent().reasons() {
                *hist.entry(r).or_insert(0) += absent;
            }
        }
        hist
    }
}

impl fmt::Display for FitError {
    /// `0/N nodes are available: <reasons>.` then the PostFilter message, then unisched's detail.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0/{} nodes are available:", self.num_all_nodes)?;
        match &self.diagnosis.pre_filter_msg {
            Some(msg) => write!(f, " {msg}.")?,
            None => {
                let mut parts: Vec<String> = self
                    .reason_histogram()
                    .into_iter()
                    .map(|(r, n)| format!("{n} {r}"))
                    .collect();
                parts.sort();
                write!(f, " {}.", parts.join(", "))?;
            }
        }
        if let Some(msg) = self
            .diagnosis
            .post_filter_msg
            .as_deref()
            .filter(|m| !m.is_empty())
        {
            write!(f, " {msg}")?;
        }
        for d in &self.diagnosis.detail {
            write!(f, " {d}")?;
        }
        Ok(())
    }
}

/// Kubernetes truncates event and condition messages; keep to its limit (1024 bytes, on a char
/// boundary, with a marker).
pub(crate) fn truncate_message(msg: &str) -> String {
    const LIMIT: usize = 1024;
    const SUFFIX: &str = " ...";
    if msg.len() <= LIMIT {
        return msg.to_string();
    }
    let mut end = LIMIT - SUFFIX.len();
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{SUFFIX}", &msg[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit_error(n: usize, statuses: &[(&str, Status)]) -> FitError {
        let mut d = Diagnosis::default();
        for (node, s) in statuses {
            d.node_to_status.set(*node, s.clone());
        }
        FitError {
            num_all_nodes: n,
            diagnosis: d,
        }
    }

    #[test]
    fn message_format_table() {
        let taint = "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }";
        let cases: Vec<(FitError, &str)> = vec![
            (
                fit_error(
                    5,
                    &[
                        ("a", Status::unschedulable(taint)),
                        ("b", Status::unschedulable("Insufficient cpu")),
                        ("c", Status::unschedulable("Insufficient cpu")),
                        ("d", Status::unschedulable("Insufficient cpu")),
                        ("e", Status::unschedulable("Insufficient cpu")),
                    ],
                ),
                "0/5 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 4 Insufficient cpu.",
            ),
            (
                fit_error(
                    2,
                    &[
                        (
                            "a",
                            Status::new(Code::Unschedulable, ["Insufficient cpu", "Insufficient memory"]),
                        ),
                        ("b", Status::unschedulable("Insufficient memory")),
                    ],
                ),
                "0/2 nodes are available: 1 Insufficient cpu, 2 Insufficient memory.",
            ),
            (fit_error(0, &[]), "0/0 nodes are available: ."),
        ];
        for (err, want) in cases {
            assert_eq!(err.to_string(), want);
        }
    }

    #[test]
    fn absent_nodes_prefilter_and_postfilter() {
        let mut e = fit_error(3, &[("a", Status::unschedulable("Insufficient cpu"))]);
        e.diagnosis
            .node_to_status
            .set_absent(Status::unresolvable("node(s) didn't satisfy plugin(s) [X]"));
        assert_eq!(
            e.to_string(),
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [X]."
        );
        e.diagnosis.post_filter_msg = Some("preemption: not helpful.".into());
        assert!(e.to_string().ends_with("[X]. preemption: not helpful."));
        let mut p = fit_error(4, &[]);
        p.diagnosis.pre_filter_msg = Some("pod has unbound immediate PersistentVolumeClaims".into());
        assert_eq!(
            p.to_string(),
            "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims."
        );
    }

    #[test]
    fn truncation_keeps_char_boundaries() {
        let long = "é".repeat(2000);
        let t = truncate_message(&long);
        assert!(t.len() <= 1024 && t.ends_with(" ..."));
        assert_eq!(truncate_message("short"), "short");
    }
}

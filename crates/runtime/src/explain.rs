//! Why a pod went where it went: the best-scored nodes of its successful scheduling cycle with each
//! score plugin's weighted contribution.
//!
//! The scheduling core already keeps the top three nodes of every attempt (`ScheduleResult::
//! top_scores`), so explaining costs nothing unless someone listens: at log level `debug` each
//! placement is logged with its table, and when recording is switched on ([`Explanations::
//! set_recording`], used by `unisched sim --explain`) the last placement of every pod is kept for
//! the report. Recording is off by default because a long-running scheduler must not grow a map
//! per pod it ever placed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use unisched_framework::{NodePluginScores, ScheduleResult};

/// The explanation of one placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// `namespace/name`.
    pub pod: String,
    /// The profile (scheduler name) that placed it.
    pub profile: String,
    /// The chosen node.
    pub node: String,
    /// Nodes Filter looked at.
    pub evaluated_nodes: usize,
    /// Nodes that passed Filter.
    pub feasible_nodes: usize,
    /// Up to three best nodes, highest total first, each with `(plugin, weighted score)` in the
    /// profile's Score order.
    pub top: Vec<NodePluginScores>,
}

impl Explanation {
    /// From a scheduling cycle's result.
    pub fn new(pod: String, profile: String, result: &ScheduleResult) -> Self {
        Explanation {
            pod,
            profile,
            node: result.suggested_host.clone(),
            evaluated_nodes: result.evaluated_nodes,
            feasible_nodes: result.feasible_nodes,
            top: result.top_scores.clone(),
        }
    }

    /// A multi-line table: a header line, then one row per node with the total and every plugin.
    pub fn to_table(&self) -> String {
        let mut plugins: Vec<&str> = Vec::new();
        for n in &self.top {
            for (p, _) in &n.scores {
                if !plugins.contains(&p.as_str()) {
                    plugins.push(p);
                }
            }
        }
        let mut rows: Vec<Vec<String>> = vec![
            ["NODE", "TOTAL"]
                .into_iter()
                .map(String::from)
                .chain(plugins.iter().map(|p| p.to_string()))
                .collect(),
        ];
        for n in &self.top {
            let mut row = vec![n.name.clone(), n.total.to_string()];
            for p in &plugins {
                let s = n.scores.iter().find(|(name, _)| name == p).map(|(_, s)| *s);
                row.push(s.map_or_else(|| "-".to_string(), |s| s.to_string()));
            }
            rows.push(row);
        }
        let columns = rows.first().map_or(0, Vec::len);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                rows.iter()
                    .map(|r| r.get(c).map_or(0, String::len))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = format!(
            "{} -> {} ({} of {} evaluated nodes feasible; profile {})\n",
            self.pod, self.node, self.feasible_nodes, self.evaluated_nodes, self.profile
        );
        if self.top.is_empty() {
            // Upstream skips Score when one node is feasible; there is nothing to compare.
            out.push_str("  (one feasible node: not scored)\n");
            return out;
        }
        for r in rows {
            let line: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            let _ = writeln!(out, "  {}", line.join("  ").trim_end());
        }
        out
    }

    /// One line for logs: `node=total(plugin=score,…)` per node.
    pub fn summary(&self) -> String {
        self.top
            .iter()
            .map(|n| {
                let parts: Vec<String> = n.scores.iter().map(|(p, s)| format!("{p}={s}")).collect();
                format!("{}={}({})", n.name, n.total, parts.join(","))
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The recorder shared by the scheduling loop and whoever reports.
#[derive(Debug, Default)]
pub struct Explanations {
    recording: AtomicBool,
    by_pod: Mutex<BTreeMap<String, Explanation>>,
}

impl Explanations {
    /// Starts or stops keeping explanations (stopping drops what was kept).
    pub fn set_recording(&self, on: bool) {
        self.recording.store(on, Ordering::SeqCst);
        if !on {
            self.by_pod.lock().clear();
        }
    }

    /// Logs the placement at debug level and keeps it when recording. Cheap when neither is on.
    pub fn observe(&self, pod: &str, profile: &str, result: &ScheduleResult) {
        let recording = self.recording.load(Ordering::Relaxed);
        if !recording && !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        let e = Explanation::new(pod.to_string(), profile.to_string(), result);
        tracing::debug!(
            pod,
            node = %e.node,
            feasible = e.feasible_nodes,
            evaluated = e.evaluated_nodes,
            scores = %e.summary(),
            "placement explained"
        );
        if recording {
            self.by_pod.lock().insert(e.pod.clone(), e);
        }
    }

    /// The kept explanations, by pod name (the last placement of each pod).
    pub fn snapshot(&self) -> Vec<Explanation> {
        self.by_pod.lock().values().cloned().collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn result() -> ScheduleResult {
        ScheduleResult {
            suggested_host: "b".into(),
            evaluated_nodes: 3,
            feasible_nodes: 2,
            top_scores: vec![
                NodePluginScores {
                    name: "b".into(),
                    scores: vec![("NodeResourcesFit".into(), 90), ("ImageLocality".into(), 0)],
                    total: 90,
                },
                NodePluginScores {
                    name: "a".into(),
                    scores: vec![("NodeResourcesFit".into(), 40), ("ImageLocality".into(), 10)],
                    total: 50,
                },
            ],
        }
    }

    #[test]
    fn table_lists_nodes_totals_and_plugins() {
        let e = Explanation::new("default/p".into(), "unisched".into(), &result());
        let t = e.to_table();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "default/p -> b (2 of 3 evaluated nodes feasible; profile unisched)"
        );
        assert_eq!(lines[1], "  NODE  TOTAL  NodeResourcesFit  ImageLocality");
        assert_eq!(lines[2], "  b     90     90                0");
        assert_eq!(lines[3], "  a     50     40                10");
        assert_eq!(
            e.summary(),
            "b=90(NodeResourcesFit=90,ImageLocality=0) a=50(NodeResourcesFit=40,ImageLocality=10)"
        );
    }

    #[test]
    fn only_kept_while_recording_and_last_wins() {
        let x = Explanations::default();
        x.observe("default/p", "unisched", &result());
        assert!(x.snapshot().is_empty(), "not recording");
        x.set_recording(true);
        x.observe("default/p", "unisched", &result());
        let mut again = result();
        again.suggested_host = "a".into();
        x.observe("default/p", "unisched", &again);
        let kept = x.snapshot();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].node, "a");
        let single = ScheduleResult {
            top_scores: Vec::new(),
            feasible_nodes: 1,
            ..result()
        };
        assert_eq!(
            Explanation::new("default/q".into(), "unisched".into(), &single)
                .to_table()
                .lines()
                .nth(1),
            Some("  (one feasible node: not scored)")
        );
        x.set_recording(false);
        assert!(x.snapshot().is_empty());
    }
}

//! What a run measured, and how it is printed: a table for people, JSON for tools.

use std::{collections::BTreeMap, fmt::Write as _};

use serde::{Deserialize, Serialize};

use crate::{promtext::Histogram, sampler::Throughput, workload::Upstream};

/// How a workload is run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The real runtime through the embedded API server over HTTP (what `unisched run` does).
    #[default]
    Full,
    /// The bind-only scheduler through the same API server and writer: the harness limit.
    Limit,
    /// The scheduling core on in-memory inputs: no HTTP, no API server.
    Engine,
}

impl Mode {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Limit => "limit",
            Mode::Engine => "engine",
        }
    }
}

/// A mode name other than `full`, `limit` or `engine`.
#[derive(Debug, thiserror::Error)]
#[error("unknown mode {0:?} (full, limit, engine)")]
pub struct UnknownModeError(String);

impl std::str::FromStr for Mode {
    type Err = UnknownModeError;
    fn from_str(s: &str) -> Result<Self, UnknownModeError> {
        match s {
            "full" => Ok(Mode::Full),
            "limit" => Ok(Mode::Limit),
            "engine" => Ok(Mode::Engine),
            other => Err(UnknownModeError(other.to_string())),
        }
    }
}

/// Latency summary in milliseconds (from a histogram; quantiles interpolated inside buckets).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Quantiles {
    /// Observations.
    pub count: u64,
    /// Mean.
    pub average: f64,
    /// 50th percentile.
    pub perc50: f64,
    /// 90th.
    pub perc90: f64,
    /// 95th.
    pub perc95: f64,
    /// 99th.
    pub perc99: f64,
}

impl Quantiles {
    /// From a histogram in seconds; None without observations.
    pub fn from_seconds(h: &Histogram) -> Option<Self> {
        if h.count <= 0.0 {
            return None;
        }
        let ms = |q: f64| h.quantile(q).unwrap_or(0.0) * 1000.0;
        Some(Quantiles {
            count: h.count as u64,
            average: h.mean().unwrap_or(0.0) * 1000.0,
            perc50: ms(0.5),
            perc90: ms(0.9),
            perc95: ms(0.95),
            perc99: ms(0.99),
        })
    }
}

/// API writes made by the scheduler during the measured phase.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApiWrites {
    /// All writes (retries counted).
    pub total: f64,
    /// `total` / measured pods scheduled.
    pub per_scheduled_pod: f64,
    /// By `verb resource` (e.g. `create pods/binding`).
    pub by_resource: BTreeMap<String, f64>,
    /// Writes that did not return 2xx.
    pub failed: f64,
}

/// CPU time during the measured phase.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    /// The whole process (threads that exited included).
    pub total_seconds: f64,
    /// Per component, from live threads' names: `scheduling-cycle` (the scheduling thread, which
    /// also takes its share of Filter and Score as the pool's first worker), `filter-workers` (the
    /// pool's other workers), `scheduler-io` (the scheduler's tokio
    /// runtime: watches, decoding, binding cycles, writes; engine mode: its binding thread),
    /// `apiserver` (the embedded API server and its controllers), `harness` (object creation,
    /// tracking, sampling), `other`.
    pub by_component: BTreeMap<String, f64>,
}

/// One workload run in one mode.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunReport {
    /// `TestCase/workload`.
    pub workload: String,
    /// How it ran.
    pub mode: Mode,
    /// Built with the smoke parameters.
    pub smoke: bool,
    /// Set when the mode cannot run this workload (why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Nodes created.
    pub nodes: usize,
    /// Pods created in the measured phase.
    pub measured_pods: u64,
    /// Of those, scheduled.
    pub scheduled: u64,
    /// Measured pods still pending when the phase ended (rejected, or never decided).
    pub unschedulable: u64,
    /// Of those, pods the scheduler never rejected either (0 when every pod was decided; in
    /// steady state, the pods still in flight).
    pub undecided: u64,
    /// The run hit its timeout.
    pub timed_out: bool,
    /// SchedulingThroughput, as upstream.
    pub throughput: Throughput,
    /// (seconds since the measured phase began, pods/s) per sampling interval.
    pub timeline: Vec<(f64, f64)>,
    /// Wall time of the measured phase.
    pub measured_seconds: f64,
    /// Wall time before it (starting the control plane and scheduler, init objects and pods).
    pub setup_seconds: f64,
    /// `scheduler_scheduling_attempt_duration_seconds` by result (ms).
    pub attempt_ms: BTreeMap<String, Quantiles>,
    /// `scheduler_scheduling_algorithm_duration_seconds` (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm_ms: Option<Quantiles>,
    /// `scheduler_framework_extension_point_duration_seconds` by extension point, all statuses (ms).
    pub extension_points_ms: BTreeMap<String, Quantiles>,
    /// `scheduler_plugin_execution_duration_seconds` by `Plugin/ExtensionPoint` (sampled, ms).
    pub plugins_ms: BTreeMap<String, Quantiles>,
    /// API writes.
    pub api_writes: ApiWrites,
    /// CPU.
    pub cpu: Cpu,
    /// Peak resident set of the process (VmHWM) at the end of the run.
    pub peak_rss_bytes: u64,
    /// Whether `DynamicResources` was registered in the in-tree registry.
    pub dynamic_resources_registered: bool,
    /// Upstream figures for this workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<Upstream>,
    /// Anything the reader should know.
    pub notes: Vec<String>,
}

/// The machine a report was made on.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// Online CPUs.
    pub cpus: usize,
    /// CPU model.
    pub cpu_model: String,
    /// Total memory.
    pub memory_bytes: u64,
    /// Kernel.
    pub kernel: String,
}

impl Machine {
    /// Reads `/proc` (Linux).
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default();
        let memory_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|n| n.parse::<u64>().ok())
            })
            .unwrap_or(0)
            * 1024;
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            memory_bytes,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
        }
    }
}

/// One row of the summary: a workload's modes side by side.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SummaryRow {
    /// Workload.
    pub workload: String,
    /// Average pods/s of the real scheduler.
    pub full: Option<f64>,
    /// Average pods/s of the bind-only limit.
    pub limit: Option<f64>,
    /// `full / limit`.
    pub ratio: Option<f64>,
    /// Average pods/s of the engine alone.
    pub engine: Option<f64>,
    /// Upstream CI threshold.
    pub upstream_threshold: Option<f64>,
}

/// Everything `unisched-bench` ran.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BenchReport {
    /// Where.
    pub machine: Machine,
    /// When (UTC, RFC 3339).
    pub date: String,
    /// The command line.
    pub command: String,
    /// Every run.
    pub runs: Vec<RunReport>,
    /// Per workload.
    pub summary: Vec<SummaryRow>,
}

/// The figure a run is compared by: upstream's Average, or the overall rate when the phase was
/// too short for two samples.
pub fn headline(r: &RunReport) -> Option<f64> {
    if r.skipped.is_some() {
        return None;
    }
    Some(if r.throughput.samples > 0 {
        r.throughput.average
    } else {
        r.throughput.overall
    })
}

impl BenchReport {
    /// Builds the summary rows from the runs.
    pub fn new(machine: Machine, date: String, command: String, runs: Vec<RunReport>) -> Self {
        let mut order: Vec<String> = Vec::new();
        for r in &runs {
            if !order.contains(&r.workload) {
                order.push(r.workload.clone());
            }
        }
        let summary = order
            .into_iter()
            .map(|w| {
                let get = |m: Mode| {
                    runs.iter()
                        .find(|r| r.workload == w && r.mode == m)
                        .and_then(headline)
                };
                let (full, limit) = (get(Mode::Full), get(Mode::Limit));
                SummaryRow {
                    upstream_threshold: runs
                        .iter()
                        .find(|r| r.workload == w)
                        .and_then(|r| r.upstream.as_ref())
                        .and_then(|u| u.threshold),
                    ratio: match (full, limit) {
                        (Some(f), Some(l)) if l > 0.0 => Some(f / l),
                        _ => None,
                    },
                    engine: get(Mode::Engine),
                    workload: w,
                    full,
                    limit,
                }
            })
            .collect();
        BenchReport {
            machine,
            date,
            command,
            runs,
            summary,
        }
    }

    /// The readable tables.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let gib = self.machine.memory_bytes as f64 / (1u64 << 30) as f64;
        let _ = writeln!(
            out,
            "machine: {} CPUs ({}), {gib:.0} GiB, Linux {}   date: {}",
            self.machine.cpus, self.machine.cpu_model, self.machine.kernel, self.date
        );
        let _ = writeln!(out, "command: {}\n", self.command);
        let wn = self
            .runs
            .iter()
            .map(|r| r.workload.len())
            .max()
            .unwrap_or(8)
            .max("workload (avg pods/s)".len());
        let _ = writeln!(
            out,
            "{:<wn$} {:>9} {:>9} {:>7} {:>9} {:>9}",
            "workload (avg pods/s)", "unisched", "limit", "ratio", "engine", "upstream"
        );
        let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.0}"));
        for s in &self.summary {
            let _ = writeln!(
                out,
                "{:<wn$} {:>9} {:>9} {:>7} {:>9} {:>9}",
                s.workload,
                f(s.full),
                f(s.limit),
                s.ratio.map_or("-".to_string(), |r| format!("{r:.2}")),
                f(s.engine),
                s.upstream_threshold
                    .map_or("-".to_string(), |t| format!(">{t:.0}")),
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<wn$} {:<6} {:>11} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7} {:>6} {:>7} {:>7}",
            "workload",
            "mode",
            "sched/pods",
            "avg",
            "p50",
            "p90",
            "p99",
            "ovrl",
            "att p50",
            "att p99",
            "wr/pod",
            "cpu s",
            "rss MB"
        );
        for r in &self.runs {
            if let Some(why) = &r.skipped {
                let _ = writeln!(out, "{:<wn$} {:<6} skipped: {why}", r.workload, r.mode.as_str());
                continue;
            }
            let att = r.attempt_ms.get("scheduled");
            let _ = writeln!(
                out,
                "{:<wn$} {:<6} {:>11} {:>6.0} {:>6.0} {:>6.0} {:>6.0} {:>6.0} {:>7} {:>7} {:>6.2} {:>7.1} {:>7.0}{}",
                r.workload,
                r.mode.as_str(),
                format!("{}/{}", r.scheduled, r.measured_pods),
                r.throughput.average,
                r.throughput.perc50,
                r.throughput.perc90,
                r.throughput.perc99,
                r.throughput.overall,
                att.map_or("-".into(), |q| format!("{:.2}", q.perc50)),
                att.map_or("-".into(), |q| format!("{:.2}", q.perc99)),
                r.api_writes.per_scheduled_pod,
                r.cpu.total_seconds,
                r.peak_rss_bytes as f64 / 1e6,
                if r.timed_out { "  TIMED OUT" } else { "" },
            );
        }
        let eps: Vec<&RunReport> = self
            .runs
            .iter()
            .filter(|r| !r.extension_points_ms.is_empty())
            .collect();
        if !eps.is_empty() {
            let _ = writeln!(out, "\nextension points, ms (p50 / p99, count):");
            for r in eps {
                let parts: Vec<String> = r
                    .extension_points_ms
                    .iter()
                    .map(|(k, q)| format!("{k} {:.3}/{:.3} ({})", q.perc50, q.perc99, q.count))
                    .collect();
                let _ = writeln!(
                    out,
                    "  {} [{}]: {}",
                    r.workload,
                    r.mode.as_str(),
                    parts.join(", ")
                );
            }
        }
        let notes: Vec<(&RunReport, &String)> = self
            .runs
            .iter()
            .flat_map(|r| r.notes.iter().map(move |n| (r, n)))
            .collect();
        if !notes.is_empty() {
            let _ = writeln!(out, "\nnotes:");
            for (r, n) in notes {
                let _ = writeln!(out, "  {} [{}]: {n}", r.workload, r.mode.as_str());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_ratio_and_table() {
        let mk = |mode, avg| RunReport {
            workload: "W/a".into(),
            mode,
            throughput: Throughput {
                average: avg,
                samples: 3,
                ..Default::default()
            },
            ..Default::default()
        };
        let r = BenchReport::new(
            Machine::default(),
            "d".into(),
            "c".into(),
            vec![mk(Mode::Full, 50.0), mk(Mode::Limit, 100.0)],
        );
        assert_eq!(r.summary[0].ratio, Some(0.5));
        let t = r.to_table();
        assert!(t.contains("W/a"), "{t}");
        assert!(t.contains("0.50"), "{t}");
        let json = serde_json::to_value(&r).unwrap();
        let back: BenchReport = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
        assert_eq!("engine".parse::<Mode>().unwrap(), Mode::Engine);
    }
}

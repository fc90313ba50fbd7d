//! Explaining a DRA rejection across nodes in one sentence.
//!
//! Per node the plugin returns upstream's short reasons (`cannot allocate all claims`, `timed out
//! trying to allocate devices`, `Insufficient cpu`), which the framework counts into `0/N nodes are
//! available: …`. That says *that* allocation failed, not *why*. Filter therefore also records the
//! allocator's typed reason per node; when no node fits, they are grouped by (claim, request, kind of
//! reason) and summarised, most frequent first:
//!
//! `claim default/train request gpu: on 480 nodes fewer than 2 devices matched selector
//! 'device.attributes["gpu.example.com"].model == "h200"'; claim default/train: on 20 nodes not
//! enough cpu left (short by at least 2)`
//!
//! The sentence is appended to the FailedScheduling message through the framework's
//! [`DiagnosisDetailSource`] hook.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use unisched_dra::{Unschedulable, UnschedulableReason};
use unisched_framework::{Code, DiagnosisDetailSource, NodeToStatus, Snapshot, Status};

use super::node_allocatable::Shortfall;
use super::state::PodState;

/// Groups shown before "and N more".
const MAX_GROUPS: usize = 4;

/// Why DRA rejected one node.
#[derive(Clone, Debug)]
pub(crate) enum NodeFailure {
    /// The allocator's typed reason; `needed` is the device count of the failing request, if known.
    Allocation {
        reason: Box<Unschedulable>,
        needed: Option<usize>,
    },
    /// The allocator ran out of time.
    Timeout,
    /// A claim or the claims' setup is invalid on this node (fatal allocator error).
    Invalid { message: String },
    /// Allocated claims cannot be used on this node.
    ClaimUnavailable { claim: String },
    /// The node's allocatable cannot hold the pod with its claims (KEP-5517).
    Allocatable { shortfalls: Vec<Shortfall> },
    /// A claim with a mapped device is reserved by another pod.
    MappedShared { claim: String },
}

/// Per-node failures of one attempt (Filter writes, the detail hook reads).
#[derive(Debug, Default)]
pub(crate) struct FailureLog {
    by_node: Mutex<HashMap<String, NodeFailure>>,
}

impl FailureLog {
    pub fn record(&self, node: &str, failure: NodeFailure) {
        self.by_node.lock().insert(node.to_string(), failure);
    }
}

fn nodes(n: usize) -> String {
    if n == 1 {
        "on 1 node".to_string()
    } else {
        format!("on {n} nodes")
    }
}

fn fmt_amount(resource: &str, v: i64) -> String {
    match resource {
        "cpu" => {
            if v % 1000 == 0 {
                format!("{}", v / 1000)
            } else {
                format!("{v}m")
            }
        }
        _ => {
            const GI: i64 = 1 << 30;
            const MI: i64 = 1 << 20;
            if v >= GI && v % GI == 0 {
                format!("{}Gi", v / GI)
            } else if v >= MI && v % MI == 0 {
                format!("{}Mi", v / MI)
            } else {
                v.to_string()
            }
        }
    }
}

/// What a group of failures says, without the node count.
fn phrase(reason: &UnschedulableReason, needed: Option<usize>) -> String {
    let fewer = |what: &str| match needed {
        Some(n) if n > 1 => format!("fewer than {n} devices matched {what}"),
        _ => format!("no device matched {what}"),
    };
    match reason {
        UnschedulableReason::RequestSelectorsUnmatched { expression: Some(e) } => {
            fewer(&format!("selector '{e}'"))
        }
        UnschedulableReason::RequestSelectorsUnmatched { expression: None } => fewer("the request selectors"),
        UnschedulableReason::ClassSelectorsUnmatched {
            class,
            expression: Some(e),
        } => fewer(&format!("selector '{e}' of device class {class}")),
        UnschedulableReason::ClassSelectorsUnmatched {
            class,
            expression: None,
        } => fewer(&format!("the selectors of device class {class}")),
        UnschedulableReason::NoDevices => "no devices".to_string(),
        UnschedulableReason::DevicesInUse => "the matching devices are already allocated".to_string(),
        UnschedulableReason::DevicesTainted { taint } => {
            format!("the matching devices have a taint that is not tolerated ({taint})")
        }
        UnschedulableReason::CapacityExhausted { device: Some(d) } => {
            format!("not enough free consumable capacity (e.g. device {d})")
        }
        UnschedulableReason::CapacityExhausted { device: None } => {
            "not enough free consumable capacity".to_string()
        }
        UnschedulableReason::CountersExhausted { pool } => {
            format!("shared counters exhausted in pool {pool}")
        }
        UnschedulableReason::NotEnoughDevices { needed, usable } => {
            format!("fewer than {needed} usable devices (at most {usable})")
        }
        UnschedulableReason::ConstraintUnsatisfied {
            attribute,
            distinct: false,
        } => {
            format!("constraint matchAttribute {attribute} could not be met")
        }
        UnschedulableReason::ConstraintUnsatisfied {
            attribute,
            distinct: true,
        } => {
            format!("constraint distinctAttribute {attribute} could not be met")
        }
        other => other.to_string(),
    }
}

/// Grouping key: who failed and which kind of reason (details of one representative are shown).
fn group_key(f: &NodeFailure) -> (String, String) {
    match f {
        NodeFailure::Allocation { reason, .. } => {
            let who = match &reason.request {
                Some(r) => format!("claim {} request {r}", reason.claim),
                None => format!("claim {}", reason.claim),
            };
            let detail = match &reason.reason {
                UnschedulableReason::RequestSelectorsUnmatched { expression } => {
                    format!("sel:{expression:?}")
                }
                UnschedulableReason::ClassSelectorsUnmatched { class, expression } => {
                    format!("class:{class}:{expression:?}")
                }
                UnschedulableReason::ConstraintUnsatisfied { attribute, distinct } => {
                    format!("constraint:{attribute}:{distinct}")
                }
                UnschedulableReason::CountersExhausted { pool } => format!("counters:{pool}"),
                other => other.kind().to_string(),
            };
            (who, detail)
        }
        NodeFailure::Timeout => ("claims".to_string(), "timeout".to_string()),
        NodeFailure::Invalid { message } => ("claims".to_string(), format!("invalid:{message}")),
        NodeFailure::ClaimUnavailable { claim } => (format!("claim {claim}"), "unavailable".to_string()),
        NodeFailure::Allocatable { shortfalls } => {
            let names: Vec<&str> = shortfalls.iter().map(|s| s.resource.as_str()).collect();
            ("node allocatable".to_string(), names.join(","))
        }
        NodeFailure::MappedShared { claim } => (format!("claim {claim}"), "mapped-shared".to_string()),
    }
}

struct Group<'a> {
    count: usize,
    first: &'a NodeFailure,
    /// For allocatable failures: the smallest shortfall per resource across nodes.
    min_short: BTreeMap<String, i64>,
    /// For NotEnoughDevices: the most usable devices seen.
    max_usable: usize,
}

pub(crate) fn summarize<'a>(failures: impl Iterator<Item = &'a NodeFailure>) -> Option<String> {
    let mut groups: BTreeMap<(String, String), Group<'a>> = BTreeMap::new();
    for f in failures {
        let g = groups.entry(group_key(f)).or_insert_with(|| Group {
            count: 0,
            first: f,
            min_short: BTreeMap::new(),
            max_usable: 0,
        });
        g.count += 1;
        if let NodeFailure::Allocatable { shortfalls } = f {
            for s in shortfalls {
                let short = s.demand.saturating_sub(s.free);
                let slot = g.min_short.entry(s.resource.clone()).or_insert(short);
                *slot = (*slot).min(short);
            }
        }
        if let NodeFailure::Allocation { reason, .. } = f
            && let UnschedulableReason::NotEnoughDevices { usable, .. } = reason.reason
        {
            g.max_usable = g.max_usable.max(usable);
        }
    }
    if groups.is_empty() {
        return None;
    }
    let mut list: Vec<(&(String, String), &Group<'_>)> = groups.iter().collect();
    list.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.0.cmp(b.0)));
    let mut parts = Vec::new();
    for ((who, _), g) in list.iter().take(MAX_GROUPS) {
        let what = match g.first {
            NodeFailure::Allocation { reason, needed } => match &reason.reason {
                UnschedulableReason::NotEnoughDevices { needed: n, .. } => {
                    format!("fewer than {n} usable devices (at most {})", g.max_usable)
                }
                r => phrase(r, *needed),
            },
            NodeFailure::Timeout => "allocation timed out".to_string(),
            NodeFailure::Invalid { message } => message.clone(),
            NodeFailure::ClaimUnavailable { .. } => "the allocated devices are not available".to_string(),
            NodeFailure::Allocatable { .. } => {
                let shorts: Vec<String> = g
                    .min_short
                    .iter()
                    .map(|(r, v)| format!("{r} short by at least {}", fmt_amount(r, *v)))
                    .collect();
                format!("the pod with its claims does not fit ({})", shorts.join(", "))
            }
            NodeFailure::MappedShared { .. } => {
                "its mapped device is already used by another pod".to_string()
            }
        };
        parts.push(format!("{who}: {} {what}", nodes(g.count)));
    }
    if list.len() > MAX_GROUPS {
        parts.push(format!("and {} more", list.len() - MAX_GROUPS));
    }
    Some(format!("{}.", parts.join("; ")))
}

/// The framework hook: the attempt's recorded failures, plus the reason for every node Filter
/// rejected from the device summary alone ([`unisched_dra::NodeSummary::Short`]), which Filter
/// does not record: the allocator is asked for those now, once, instead of on every Filter call
/// of every attempt that succeeds anyway.
pub(crate) struct DetailSource(pub Arc<PodState>);

impl DiagnosisDetailSource for DetailSource {
    fn detail(&self, statuses: &NodeToStatus, snapshot: &Snapshot) -> Vec<String> {
        let data = &self.0;
        let recorded = data.failures.by_node.lock();
        let mut explained = Vec::new();
        for (name, status) in statuses.iter() {
            if recorded.contains_key(name) || !rejected_by_summary(status) {
                continue;
            }
            if let Some(failure) = snapshot.get(name).and_then(|node| data.explain_short(node)) {
                explained.push(failure);
            }
        }
        summarize(recorded.values().chain(&explained))
            .into_iter()
            .collect()
    }
}

/// A DynamicResources rejection with the allocator's status and nothing recorded: the device
/// summary's `Short`.
fn rejected_by_summary(status: &Status) -> bool {
    status.plugin() == Some(super::NAME)
        && status.code() == Code::UnschedulableAndUnresolvable
        && status.reasons() == [super::reason::CANNOT_ALLOCATE]
}

//! `NodeAffinity`: `spec.nodeSelector` and node affinity, required and preferred, plus the
//! scheduler-enforced `addedAffinity` from the plugin args (upstream `nodeaffinity`).
//!
//! - PreFilter parses the pod's requirements once and, when every required term names nodes through
//!   `matchFields: metadata.name In`, narrows the candidates to those names (terms are ORed, the
//!   requirements of a term ANDed). Conflicting names reject the pod outright.
//! - Filter: `node(s) didn't match scheduler-enforced node affinity` for `addedAffinity`, then
//!   `node(s) didn't match Pod's node affinity/selector`, both UnschedulableAndUnresolvable.
//! - Score: sum of the weights of the matching preferred terms (pod's and added), normalised to
//!   0..100 across nodes.

use std::{collections::BTreeSet, sync::Arc};

use k8s_openapi::api::core::v1::{Node, NodeAffinity as ApiNodeAffinity, Pod};
use serde::{Deserialize, Serialize};
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EnqueueExtensions, EventResource,
    FilterPlugin, MAX_NODE_SCORE, NodeInfo, NodeScore, Plugin, PodInfo, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, QueueingHint, ScorePlugin, Status,
};

use crate::{
    helper::{PluginArgs, PluginArgsError, aggregate, aggregate_text, default_normalize_score, event_nodes},
    names::NODE_AFFINITY,
    selector::{NodeSelectorMatcher, OBJECT_NAME_FIELD, PreferredTerms, RequiredNodeAffinity},
};

/// Rejection reason when the pod's own selector or affinity does not match.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
/// Rejection reason when `addedAffinity` does not match.
pub const ERR_REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
/// PreFilter rejection when the required terms name no common node.
pub const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";

const PRE_FILTER_KEY: &str = "PreFilterNodeAffinity";
const PRE_SCORE_KEY: &str = "PreScoreNodeAffinity";

/// `NodeAffinityArgs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeAffinityArgs {
    /// `NodeAffinityArgs` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `kubescheduler.config.k8s.io/v1` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Node affinity every pod of the profile must also satisfy (required) or prefers (preferred).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_affinity: Option<ApiNodeAffinity>,
}

impl PluginArgs for NodeAffinityArgs {
    const KIND: &'static str = "NodeAffinityArgs";
    fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }
    fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }
}

/// Node selector and node affinity.
#[derive(Clone, Debug, Default)]
pub struct NodeAffinity {
    added_selector: Option<NodeSelectorMatcher>,
    added_preferred: Option<PreferredTerms>,
}

impl NodeAffinity {
    /// Builds the plugin, validating `addedAffinity` (every error names its field).
    pub fn new(args: &NodeAffinityArgs) -> Result<Self, PluginArgsError> {
        let mut errs = Vec::new();
        let mut pl = NodeAffinity::default();
        if let Some(added) = &args.added_affinity {
            if let Some(ns) = &added.required_during_scheduling_ignored_during_execution {
                match NodeSelectorMatcher::strict(
                    ns,
                    "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution",
                ) {
                    Ok(m) => pl.added_selector = Some(m),
                    Err(e) => errs.extend(e),
                }
            }
            if let Some(terms) = added
                .preferred_during_scheduling_ignored_during_execution
                .as_ref()
                .filter(|t| !t.is_empty())
            {
                match PreferredTerms::parse(
                    terms,
                    "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution",
                ) {
                    Ok(p) => pl.added_preferred = Some(p),
                    Err(e) => errs.extend(e),
                }
            }
        }
        aggregate(errs).map(|()| pl)
    }
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &str {
        NODE_AFFINITY
    }
    unisched_framework::serves!(
        as_pre_filter,
        as_filter,
        as_pre_score,
        as_score,
        as_enqueue_extensions
    );
}

/// Node names the required terms allow, when every term names nodes: `Some(empty)` is a conflict,
/// `None` means no restriction.
fn required_node_names(pod: &Pod) -> Option<BTreeSet<String>> {
    let terms = pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms
        .as_slice();
    if terms.is_empty() {
        return None;
    }
    let mut union = BTreeSet::new();
    for t in terms {
        let mut term_names: Option<BTreeSet<String>> = None;
        for r in t.match_fields.iter().flatten() {
            if r.key == OBJECT_NAME_FIELD && r.operator == "In" {
                let set: BTreeSet<String> = r.values.iter().flatten().cloned().collect();
                term_names = Some(match term_names {
                    None => set,
                    Some(prev) => prev.intersection(&set).cloned().collect(),
                });
            }
        }
        // A term without a name restriction allows every node.
        union.extend(term_names?);
    }
    Some(union)
}

fn has_required(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .is_some_and(|na| na.required_during_scheduling_ignored_during_execution.is_some())
}

impl PreFilterPlugin for NodeAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        let has_selector = pod.pod.spec.as_ref().is_some_and(|s| s.node_selector.is_some());
        if !has_required(&pod.pod) && self.added_selector.is_none() && !has_selector {
            return (None, Status::skip());
        }
        state.write(PRE_FILTER_KEY, RequiredNodeAffinity::of(&pod.pod));
        match required_node_names(&pod.pod) {
            Some(names) if names.is_empty() => (None, Status::unresolvable(ERR_REASON_CONFLICT)),
            Some(names) => (
                Some(PreFilterResult {
                    node_names: Some(names),
                }),
                Status::success(),
            ),
            None => (None, Status::success()),
        }
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(n) = node.node() else {
            return Status::error("node not found");
        };
        if self.added_selector.as_ref().is_some_and(|s| !s.matches(n)) {
            return Status::unresolvable(ERR_REASON_ENFORCED);
        }
        let matched = match state.read::<RequiredNodeAffinity>(PRE_FILTER_KEY) {
            Ok(required) => required.matches(n),
            // PreFilter disabled: parse here.
            Err(_) => RequiredNodeAffinity::of(&pod.pod).matches(n),
        };
        if matched {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_POD)
        }
    }
}

/// The pod's parsed preferred terms (`None` when it has none).
#[derive(Clone, Debug, Default)]
struct PreScoreState(Option<PreferredTerms>);

/// A pod's own node affinity that cannot be used.
#[derive(Debug, thiserror::Error)]
enum NodeAffinityError {
    /// The pod's preferred terms do not parse: upstream's field errors, printed as its aggregate
    /// error (one alone, several in brackets).
    #[error("{}", aggregate_text(.0))]
    PreferredTerms(Vec<String>),
}

fn pod_preferred(pod: &Pod) -> Result<Option<PreferredTerms>, NodeAffinityError> {
    let terms = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| na.preferred_during_scheduling_ignored_during_execution.as_ref());
    match terms {
        None => Ok(None),
        Some(t) => PreferredTerms::parse(t, "")
            .map(Some)
            .map_err(NodeAffinityError::PreferredTerms),
    }
}

impl PreScorePlugin for NodeAffinity {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, _nodes: &[Arc<NodeInfo>]) -> Status {
        let preferred = match pod_preferred(&pod.pod) {
            Ok(p) => p,
            Err(e) => return Status::error(e),
        };
        if preferred.is_none() && self.added_preferred.is_none() {
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, PreScoreState(preferred));
        Status::success()
    }
}

impl ScorePlugin for NodeAffinity {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(n) = node.node() else {
            return Err(Status::error("node not found"));
        };
        let mut total = self.added_preferred.as_ref().map_or(0, |p| p.score(n));
        match state.read::<PreScoreState>(PRE_SCORE_KEY) {
            Ok(s) => total += s.0.as_ref().map_or(0, |p| p.score(n)),
            Err(_) => {
                total += pod_preferred(&pod.pod)
                    .map_err(Status::error)?
                    .map_or(0, |p| p.score(n))
            }
        }
        Ok(total)
    }

    fn has_normalize(&self) -> bool {
        true
    }

    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [NodeScore<'_>]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, false, scores);
        Status::success()
    }
}

impl NodeAffinity {
    /// Queue when a node that matches the pod appears, or a node starts to match.
    fn node_hint(&self, pod: &Pod, old: Option<&Node>, new: &Node) -> QueueingHint {
        if self.added_selector.as_ref().is_some_and(|s| !s.matches(new)) {
            return QueueingHint::Skip;
        }
        let required = RequiredNodeAffinity::of(pod);
        if !required.matches(new) {
            return QueueingHint::Skip;
        }
        match old {
            None => QueueingHint::Queue,
            Some(o) if required.matches(o) => QueueingHint::Skip,
            Some(_) => QueueingHint::Queue,
        }
    }
}

impl EnqueueExtensions for NodeAffinity {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let me = self.clone();
        vec![ClusterEventWithHint::with_hint(
            ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD.or(ActionType::UPDATE_NODE_LABEL),
                "NodeAdd|UpdateNodeLabel",
            ),
            move |pod, old, new| {
                let (old, new) = event_nodes(old, new)?;
                Ok(me.node_hint(pod, old, new))
            },
        )]
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeSelector;
    use unisched_framework::{Code, EventObject};

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, field_term, requirement, term, term_in};

    fn added(required: Option<Vec<k8s_openapi::api::core::v1::NodeSelectorTerm>>) -> NodeAffinity {
        let args = NodeAffinityArgs {
            added_affinity: Some(ApiNodeAffinity {
                required_during_scheduling_ignored_during_execution: required.map(|t| NodeSelector {
                    node_selector_terms: t,
                }),
                preferred_during_scheduling_ignored_during_execution: None,
            }),
            ..NodeAffinityArgs::default()
        };
        NodeAffinity::new(&args).unwrap()
    }

    #[test]
    fn filter_table() {
        struct Case {
            name: &'static str,
            plugin: NodeAffinity,
            pod: PodBuilder,
            node: NodeBuilder,
            code: Code,
            reason: &'static str,
        }
        let zone_a = || NodeBuilder::new("n1").label("zone", "a").label("gen", "5");
        let cases = [
            Case {
                name: "nothing required",
                plugin: NodeAffinity::default(),
                pod: PodBuilder::new("p"),
                node: zone_a(),
                code: Code::Success,
                reason: "",
            },
            Case {
                name: "node selector matches",
                plugin: NodeAffinity::default(),
                pod: PodBuilder::new("p").node_selector("zone", "a"),
                node: zone_a(),
                code: Code::Success,
                reason: "",
            },
            Case {
                name: "node selector mismatch",
                plugin: NodeAffinity::default(),
                pod: PodBuilder::new("p").node_selector("zone", "b"),
                node: zone_a(),
                code: Code::UnschedulableAndUnresolvable,
                reason: ERR_REASON_POD,
            },
            Case {
                name: "selector ok but affinity not",
                plugin: NodeAffinity::default(),
                pod: PodBuilder::new("p")
                    .node_selector("zone", "a")
                    .required_term(term_in("gen", &["4"])),
                node: zone_a(),
                code: Code::UnschedulableAndUnresolvable,
                reason: ERR_REASON_POD,
            },
            Case {
                name: "affinity Gt",
                plugin: NodeAffinity::default(),
                pod: PodBuilder::new("p").required_term(term(vec![requirement("gen", "Gt", &["4"])])),
                node: zone_a(),
                code: Code::Success,
                reason: "",
            },
            Case {
                name: "affinity with no terms matches nothing",
                plugin: NodeAffinity::default(),
                pod: PodBuilder::new("p").required_term(term(vec![])),
                node: zone_a(),
                code: Code::UnschedulableAndUnresolvable,
                reason: ERR_REASON_POD,
            },
            Case {
                name: "added affinity enforced",
                plugin: added(Some(vec![term_in("zone", &["b"])])),
                pod: PodBuilder::new("p"),
                node: zone_a(),
                code: Code::UnschedulableAndUnresolvable,
                reason: ERR_REASON_ENFORCED,
            },
            Case {
                name: "added affinity satisfied",
                plugin: added(Some(vec![term_in("zone", &["a"])])),
                pod: PodBuilder::new("p"),
                node: zone_a(),
                code: Code::Success,
                reason: "",
            },
        ];
        for c in cases {
            let pod = c.pod.info();
            let node = c.node.info();
            let mut state = CycleState::new();
            let (_, pre) = c.plugin.pre_filter(&mut state, &pod, &[]);
            let s = if pre.is_skip() {
                Status::success()
            } else {
                c.plugin.filter(&state, &pod, &node)
            };
            assert_eq!(s.code(), c.code, "{}", c.name);
            assert_eq!(s.message(), c.reason, "{}", c.name);
            // Without PreFilter the result is the same.
            assert_eq!(
                c.plugin.filter(&CycleState::new(), &pod, &node).code(),
                c.code,
                "{} (no PreFilter)",
                c.name
            );
        }
    }

    #[test]
    fn pre_filter_table() {
        struct Case {
            name: &'static str,
            pod: PodBuilder,
            want_names: Option<Vec<&'static str>>,
            code: Code,
        }
        let name_in = |names: &[&str]| requirement("metadata.name", "In", names);
        let cases = [
            Case {
                name: "nothing to do",
                pod: PodBuilder::new("p"),
                want_names: None,
                code: Code::Skip,
            },
            Case {
                name: "selector only",
                pod: PodBuilder::new("p").node_selector("a", "b"),
                want_names: None,
                code: Code::Success,
            },
            Case {
                name: "single node by name",
                pod: PodBuilder::new("p").required_term(field_term(vec![name_in(&["n1"])])),
                want_names: Some(vec!["n1"]),
                code: Code::Success,
            },
            Case {
                name: "union across terms",
                pod: PodBuilder::new("p")
                    .required_term(field_term(vec![name_in(&["n1"])]))
                    .required_term(field_term(vec![name_in(&["n2"])])),
                want_names: Some(vec!["n1", "n2"]),
                code: Code::Success,
            },
            Case {
                name: "intersection within a term",
                pod: PodBuilder::new("p")
                    .required_term(field_term(vec![name_in(&["n1", "n2"]), name_in(&["n2", "n3"])])),
                want_names: Some(vec!["n2"]),
                code: Code::Success,
            },
            Case {
                name: "a term without names lifts the restriction",
                pod: PodBuilder::new("p")
                    .required_term(field_term(vec![name_in(&["n1"])]))
                    .required_term(term_in("zone", &["a"])),
                want_names: None,
                code: Code::Success,
            },
            Case {
                name: "conflict",
                pod: PodBuilder::new("p").required_term(field_term(vec![name_in(&["n1"]), name_in(&["n2"])])),
                want_names: None,
                code: Code::UnschedulableAndUnresolvable,
            },
        ];
        for c in cases {
            let (r, s) = NodeAffinity::default().pre_filter(&mut CycleState::new(), &c.pod.info(), &[]);
            assert_eq!(s.code(), c.code, "{}", c.name);
            if c.code == Code::UnschedulableAndUnresolvable {
                assert_eq!(s.message(), ERR_REASON_CONFLICT, "{}", c.name);
            }
            let got = r
                .and_then(|r| r.node_names)
                .map(|n| n.into_iter().collect::<Vec<_>>());
            let want = c
                .want_names
                .map(|v| v.into_iter().map(String::from).collect::<Vec<_>>());
            assert_eq!(got, want, "{}", c.name);
        }
    }

    #[test]
    fn score_table() {
        struct Case {
            name: &'static str,
            plugin: NodeAffinity,
            pod: PodBuilder,
            want: Option<Vec<i64>>,
        }
        let preferred_added = NodeAffinity::new(&NodeAffinityArgs {
            added_affinity: Some(ApiNodeAffinity {
                required_during_scheduling_ignored_during_execution: None,
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    k8s_openapi::api::core::v1::PreferredSchedulingTerm {
                        weight: 10,
                        preference: term_in("zone", &["b"]),
                    },
                ]),
            }),
            ..NodeAffinityArgs::default()
        })
        .unwrap();
        let cases = [
            Case {
                name: "no preferences skips",
                plugin: NodeAffinity::default(),
                pod: PodBuilder::new("p"),
                want: None,
            },
            Case {
                name: "weights normalised",
                plugin: NodeAffinity::default(),
                pod: PodBuilder::new("p")
                    .preferred_term(2, term_in("zone", &["a"]))
                    .preferred_term(6, term_in("zone", &["b"])),
                want: Some(vec![33, 100, 0]),
            },
            Case {
                name: "added preferences add up",
                plugin: preferred_added,
                pod: PodBuilder::new("p").preferred_term(10, term_in("zone", &["a"])),
                want: Some(vec![100, 100, 0]),
            },
        ];
        for c in cases {
            let nodes: Vec<Arc<NodeInfo>> = vec![
                Arc::new(NodeBuilder::new("n0").label("zone", "a").label("gen", "5").info()),
                Arc::new(NodeBuilder::new("n1").label("zone", "b").info()),
                Arc::new(NodeBuilder::new("n2").label("zone", "c").info()),
            ];
            let pod = c.pod.info();
            let mut state = CycleState::new();
            let s = c.plugin.pre_score(&mut state, &pod, &nodes);
            match c.want {
                None => assert!(s.is_skip(), "{}", c.name),
                Some(want) => {
                    assert!(s.is_success(), "{}: {s}", c.name);
                    let mut scores: Vec<NodeScore<'_>> = nodes
                        .iter()
                        .map(|n| NodeScore {
                            name: n.name(),
                            score: c.plugin.score(&state, &pod, n).unwrap(),
                        })
                        .collect();
                    c.plugin.normalize_score(&state, &pod, &mut scores);
                    assert_eq!(
                        scores.iter().map(|s| s.score).collect::<Vec<_>>(),
                        want,
                        "{}",
                        c.name
                    );
                }
            }
        }
    }

    #[test]
    fn args_validation_names_fields() {
        let args: NodeAffinityArgs = serde_json::from_value(serde_json::json!({
            "kind": "NodeAffinityArgs",
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "addedAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Bogus", "values": ["a"]}]}]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["x"]}]}}
                ]
            }
        }))
        .unwrap();
        let err = NodeAffinity::new(&args).unwrap_err().to_string();
        assert!(
            err.contains("addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator: Unsupported value: \"Bogus\""),
            "{err}"
        );
        assert!(
            err.contains("addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].matchExpressions[0].values[0]: Invalid value: \"x\""),
            "{err}"
        );
        assert!(err.starts_with('['), "two errors are bracketed: {err}");
    }

    #[test]
    fn node_hint_table() {
        struct Case {
            name: &'static str,
            plugin: NodeAffinity,
            old: Option<Node>,
            new: Node,
            want: QueueingHint,
        }
        let cases = [
            Case {
                name: "matching node added",
                plugin: NodeAffinity::default(),
                old: None,
                new: NodeBuilder::new("n").label("zone", "a").build(),
                want: QueueingHint::Queue,
            },
            Case {
                name: "non-matching node added",
                plugin: NodeAffinity::default(),
                old: None,
                new: NodeBuilder::new("n").label("zone", "b").build(),
                want: QueueingHint::Skip,
            },
            Case {
                name: "label now matches",
                plugin: NodeAffinity::default(),
                old: Some(NodeBuilder::new("n").build()),
                new: NodeBuilder::new("n").label("zone", "a").build(),
                want: QueueingHint::Queue,
            },
            Case {
                name: "matched before",
                plugin: NodeAffinity::default(),
                old: Some(NodeBuilder::new("n").label("zone", "a").build()),
                new: NodeBuilder::new("n").label("zone", "a").label("x", "y").build(),
                want: QueueingHint::Skip,
            },
            Case {
                name: "added affinity excludes",
                plugin: added(Some(vec![term_in("pool", &["batch"])])),
                old: None,
                new: NodeBuilder::new("n").label("zone", "a").build(),
                want: QueueingHint::Skip,
            },
        ];
        let pod = PodBuilder::new("p").node_selector("zone", "a").build();
        for c in cases {
            let events = c.plugin.events_to_register();
            let hint = events[0].hint.clone().unwrap();
            let old = c.old.map(|n| EventObject::Node(Arc::new(n)));
            let new = EventObject::Node(Arc::new(c.new));
            assert_eq!(
                hint(&pod, old.as_ref(), Some(&new)).unwrap(),
                c.want,
                "{}",
                c.name
            );
        }
    }

    /// Upstream `Test_isSchedulableAfterNodeChange`, case by case (a pod requiring `foo In [bar]`).
    #[test]
    fn is_schedulable_after_node_change() {
        let enforced = || added(Some(vec![term_in("foo", &["bar"])]));
        let node = |labels: &[(&str, &str)]| {
            EventObject::Node(Arc::new(
                labels
                    .iter()
                    .fold(NodeBuilder::new("n"), |n, (k, v)| n.label(k, v))
                    .build(),
            ))
        };
        let with_capacity = |labels: &[(&str, &str)]| {
            EventObject::Node(Arc::new(
                labels
                    .iter()
                    .fold(NodeBuilder::new("n").alloc("cpu", "1"), |n, (k, v)| n.label(k, v))
                    .build(),
            ))
        };
        let not_a_node = || EventObject::pod(PodBuilder::new("x").build());
        let pod = PodBuilder::new("p")
            .required_term(term_in("foo", &["bar"]))
            .build();
        // `None` as the expected hint: the hint must fail.
        let cases: Vec<(
            &str,
            NodeAffinity,
            Option<EventObject>,
            Option<EventObject>,
            Option<QueueingHint>,
        )> = vec![
            (
                "backoff-wrong-new-object",
                NodeAffinity::default(),
                None,
                Some(not_a_node()),
                None,
            ),
            (
                "backoff-wrong-old-object",
                NodeAffinity::default(),
                Some(not_a_node()),
                Some(node(&[])),
                None,
            ),
            (
                "skip-queue-on-add",
                NodeAffinity::default(),
                None,
                Some(node(&[])),
                Some(QueueingHint::Skip),
            ),
            (
                "queue-on-add",
                NodeAffinity::default(),
                None,
                Some(node(&[("foo", "bar")])),
                Some(QueueingHint::Queue),
            ),
            (
                "skip-unrelated-changes",
                NodeAffinity::default(),
                Some(node(&[])),
                Some(with_capacity(&[])),
                Some(QueueingHint::Skip),
            ),
            (
                "skip-unrelated-changes-on-labels",
                NodeAffinity::default(),
                Some(node(&[])),
                Some(node(&[("k", "v")])),
                Some(QueueingHint::Skip),
            ),
            (
                "skip-labels-changes-on-node-from-suitable-to-unsuitable",
                NodeAffinity::default(),
                Some(node(&[("foo", "bar")])),
                Some(node(&[("k", "v")])),
                Some(QueueingHint::Skip),
            ),
            (
                "queue-on-labels-change-makes-pod-schedulable",
                NodeAffinity::default(),
                Some(node(&[])),
                Some(node(&[("foo", "bar")])),
                Some(QueueingHint::Queue),
            ),
            (
                "skip-unrelated-change-that-keeps-pod-schedulable",
                NodeAffinity::default(),
                Some(node(&[("foo", "bar")])),
                Some(with_capacity(&[("foo", "bar")])),
                Some(QueueingHint::Skip),
            ),
            (
                "skip-queue-on-add-scheduler-enforced-node-affinity",
                enforced(),
                None,
                Some(node(&[])),
                Some(QueueingHint::Skip),
            ),
            (
                "queue-on-add-scheduler-enforced-node-affinity",
                enforced(),
                None,
                Some(node(&[("foo", "bar")])),
                Some(QueueingHint::Queue),
            ),
        ];
        for (name, plugin, old, new, want) in cases {
            let events = plugin.events_to_register();
            let hint = events[0].hint.clone().unwrap();
            let got = hint(&pod, old.as_ref(), new.as_ref());
            match want {
                Some(want) => assert_eq!(got.unwrap(), want, "{name}"),
                None => assert!(got.is_err(), "{name}: want an error, got {got:?}"),
            }
        }
    }
}

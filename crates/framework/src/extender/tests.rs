//! Upstream's extender cases (`extender_test.go`, and the extender cases of
//! `schedule_one_test.go`) as table tests against in-memory extenders.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use k8s_openapi::api::core::v1::{Node, Pod};

use super::*;
use crate::{
    BindPlugin, Code, CycleState, Diagnosis, FilterPlugin, Framework, NoNominations, Plugin,
    PluginBuildError, PluginRegistry, QueueSortPlugin, QueuedPodInfo, ScheduleError, ScheduleResult,
    SchedulingAlgorithm, ScorePlugin, Snapshot, Status, config::KubeSchedulerProfile,
};

/// What an extender's predicate says of a node.
#[derive(Clone, Copy, Debug)]
enum Verdict {
    Pass,
    Fail,
    Unresolvable,
    Error,
}

type Predicate = fn(&str) -> Verdict;
type Prioritizer = fn(&[&str]) -> Result<Vec<(String, i64)>, ()>;

fn true_predicate(_: &str) -> Verdict {
    Verdict::Pass
}
fn false_predicate(_: &str) -> Verdict {
    Verdict::Fail
}
fn error_predicate(_: &str) -> Verdict {
    Verdict::Error
}
fn node1_predicate(n: &str) -> Verdict {
    if n == "node1" {
        Verdict::Pass
    } else {
        Verdict::Fail
    }
}
fn node2_predicate(n: &str) -> Verdict {
    if n == "node2" {
        Verdict::Pass
    } else {
        Verdict::Fail
    }
}
fn error_prioritizer(_: &[&str]) -> Result<Vec<(String, i64)>, ()> {
    Err(())
}
fn favour(node: &'static str) -> impl Fn(&[&str]) -> Result<Vec<(String, i64)>, ()> {
    move |nodes| {
        Ok(nodes
            .iter()
            .map(|n| (n.to_string(), if *n == node { 10 } else { 1 }))
            .collect())
    }
}
fn node1_prioritizer(nodes: &[&str]) -> Result<Vec<(String, i64)>, ()> {
    favour("node1")(nodes)
}
fn node2_prioritizer(nodes: &[&str]) -> Result<Vec<(String, i64)>, ()> {
    favour("node2")(nodes)
}

/// upstream's `FakeExtender`: predicates run in order per node, prioritizers' scores summed
/// with their weights, the extender's weight returned with them.
#[derive(Default)]
struct FakeExtender {
    name: &'static str,
    predicates: Vec<Predicate>,
    prioritizers: Vec<(Prioritizer, i64)>,
    weight: i64,
    ignorable: bool,
    uninterested: bool,
    /// `Some`: a binder, binding with this result.
    binder: Option<Result<(), &'static str>>,
    binds: AtomicUsize,
}

impl Extender for FakeExtender {
    fn name(&self) -> &str {
        self.name
    }
    fn is_ignorable(&self) -> bool {
        self.ignorable
    }
    fn is_interested(&self, _: &PodInfo) -> bool {
        !self.uninterested
    }
    fn is_filter(&self) -> bool {
        !self.predicates.is_empty()
    }
    fn is_prioritizer(&self) -> bool {
        !self.prioritizers.is_empty()
    }
    fn is_binder(&self) -> bool {
        self.binder.is_some()
    }
    fn supports_preemption(&self) -> bool {
        false
    }
    fn filter(&self, _: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Result<ExtenderFilterOutcome, ExtenderError> {
        let mut out = ExtenderFilterOutcome::default();
        for node in nodes {
            let name = node.name();
            let verdict = self
                .predicates
                .iter()
                .map(|p| p(name))
                .find(|v| !matches!(v, Verdict::Pass))
                .unwrap_or(Verdict::Pass);
            match verdict {
                Verdict::Pass => out.feasible.push(node.clone()),
                Verdict::Fail => {
                    out.failed
                        .insert(name.into(), format!("FakeExtender: node {name:?} failed"));
                }
                Verdict::Unresolvable => {
                    out.failed_and_unresolvable.insert(
                        name.into(),
                        format!("FakeExtender: node {name:?} failed and unresolvable"),
                    );
                }
                Verdict::Error => return Err(ExtenderError::new("some error")),
            }
        }
        Ok(out)
    }
    fn prioritize(
        &self,
        _: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<(Vec<HostPriority>, i64), ExtenderError> {
        let names: Vec<&str> = nodes.iter().map(|n| n.name()).collect();
        let mut combined: BTreeMap<String, i64> = BTreeMap::new();
        for (prioritizer, weight) in &self.prioritizers {
            if *weight == 0 {
                continue;
            }
            let scores = prioritizer(&names).map_err(|()| ExtenderError::new("some error"))?;
            for (host, score) in scores {
                *combined.entry(host).or_default() += score * weight;
            }
        }
        let list = combined
            .into_iter()
            .map(|(host, score)| HostPriority { host, score })
            .collect();
        Ok((list, self.weight))
    }
    fn bind(&self, _: &PodInfo, _: &str) -> Result<(), ExtenderError> {
        self.binds.fetch_add(1, Ordering::SeqCst);
        match self.binder {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(ExtenderError::new(e)),
            None => Err(ExtenderError::new("not a binder")),
        }
    }
    fn process_preemption(
        &self,
        _: &PodInfo,
        victims: BTreeMap<String, Victims>,
        _: &dyn Fn(&str) -> Option<Arc<NodeInfo>>,
    ) -> Result<BTreeMap<String, Victims>, ExtenderError> {
        Ok(victims)
    }
}

/// QueueSort and the default Bind stand-in, counting its binds.
#[derive(Default)]
struct DefaultBinder(AtomicUsize);
impl Plugin for DefaultBinder {
    fn name(&self) -> &str {
        "DefaultBinder"
    }
    crate::serves!(as_queue_sort, as_bind);
}
impl QueueSortPlugin for DefaultBinder {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        a.timestamp < b.timestamp
    }
}
impl BindPlugin for DefaultBinder {
    fn bind(&self, _: &CycleState, _: &PodInfo, _: &str) -> Status {
        self.0.fetch_add(1, Ordering::SeqCst);
        Status::success()
    }
}

/// Passes every node.
struct TrueFilter;
impl Plugin for TrueFilter {
    fn name(&self) -> &str {
        "TrueFilter"
    }
    crate::serves!(as_filter);
}
impl FilterPlugin for TrueFilter {
    fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
        Status::success()
    }
}

/// Rejects the named nodes (upstream's `FakeFilter` with `Unschedulable` for them).
struct FakeFilter(&'static [&'static str]);
impl Plugin for FakeFilter {
    fn name(&self) -> &str {
        "FakeFilter"
    }
    crate::serves!(as_filter);
}
impl FilterPlugin for FakeFilter {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if self.0.contains(&node.name()) {
            Status::unschedulable(format!("injecting failure for pod {}", pod.name))
        } else {
            Status::success()
        }
    }
}

/// A Score plugin giving `node2` one score and every other node another.
struct NodeScorer {
    name: &'static str,
    node2: i64,
    others: i64,
}
impl Plugin for NodeScorer {
    fn name(&self) -> &str {
        self.name
    }
    crate::serves!(as_score);
}
impl ScorePlugin for NodeScorer {
    fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(if node.name() == "node2" {
            self.node2
        } else {
            self.others
        })
    }
}

fn equal_prioritizer() -> Arc<dyn Plugin> {
    Arc::new(NodeScorer {
        name: "EqualPrioritizerPlugin",
        node2: 1,
        others: 1,
    })
}

fn node2_prioritizer_plugin() -> Arc<dyn Plugin> {
    Arc::new(NodeScorer {
        name: "Node2Prioritizer",
        node2: 100,
        others: 10,
    })
}

struct Registry(BTreeMap<String, Arc<dyn Plugin>>);
impl PluginRegistry for Registry {
    fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }
    fn build(&self, name: &str, _: &serde_json::Value) -> Result<Arc<dyn Plugin>, PluginBuildError> {
        self.0
            .get(name)
            .cloned()
            .ok_or_else(|| format!("no plugin {name}").into())
    }
}

/// A framework running `plugins` (with their score weights) and the default binder stand-in.
fn framework(
    plugins: Vec<(Arc<dyn Plugin>, i32)>,
    binder: Arc<DefaultBinder>,
    extenders: Vec<Arc<dyn Extender>>,
) -> Framework {
    let mut all: Vec<(Arc<dyn Plugin>, i32)> = vec![(binder, 0)];
    all.extend(plugins);
    let mut profile = KubeSchedulerProfile::with_only_plugins(all.iter().map(|(p, _)| p.name().to_string()));
    let weights: BTreeMap<String, i32> = all
        .iter()
        .filter(|(_, w)| *w > 0)
        .map(|(p, w)| (p.name().to_string(), *w))
        .collect();
    set_score_weights(&mut profile, &weights);
    let registry = Registry(all.into_iter().map(|(p, _)| (p.name().to_string(), p)).collect());
    match Framework::new(&profile, &registry) {
        Ok(f) => f.with_extenders(Extenders::new(extenders)),
        Err(e) => panic!("framework: {e}"),
    }
}

/// Gives the multi-point entries their score weights.
fn set_score_weights(profile: &mut KubeSchedulerProfile, weights: &BTreeMap<String, i32>) {
    let mut v = serde_json::to_value(&*profile).unwrap();
    if let Some(enabled) = v["plugins"]["multiPoint"]["enabled"].as_array_mut() {
        for entry in enabled {
            let name = entry["name"].as_str().unwrap_or_default().to_string();
            if let Some(w) = weights.get(&name) {
                entry["weight"] = serde_json::json!(w);
            }
        }
    }
    *profile = serde_json::from_value(v).unwrap();
}

fn node(name: &str) -> Arc<NodeInfo> {
    let mut node = Node::default();
    node.metadata.name = Some(name.to_string());
    Arc::new(NodeInfo::new(Arc::new(node)))
}

fn pod(name: &str) -> PodInfo {
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.to_string());
    pod.metadata.namespace = Some("default".into());
    pod.metadata.uid = Some(name.to_string());
    PodInfo::new(pod)
}

fn schedule(fwk: &Framework, nodes: &[&str], pod: &PodInfo) -> Result<ScheduleResult, ScheduleError> {
    let snapshot = Arc::new(Snapshot::new(nodes.iter().map(|n| node(n)).collect()));
    let mut state = CycleState::with_snapshot(snapshot);
    SchedulingAlgorithm::new(1, None, 7).schedule_pod(fwk, &mut state, pod, &NoNominations)
}

fn fake(name: &'static str) -> FakeExtender {
    FakeExtender {
        name,
        ..FakeExtender::default()
    }
}

fn arcs(extenders: Vec<FakeExtender>) -> Vec<Arc<dyn Extender>> {
    extenders
        .into_iter()
        .map(|e| Arc::new(e) as Arc<dyn Extender>)
        .collect()
}

/// `TestSchedulerWithExtenders`.
#[test]
fn scheduler_with_extenders() {
    struct Case {
        name: &'static str,
        plugins: Vec<(Arc<dyn Plugin>, i32)>,
        extenders: Vec<FakeExtender>,
        nodes: &'static [&'static str],
        /// (host, evaluated, feasible), or `None` when the attempt must fail.
        want: Option<(&'static str, usize, usize)>,
    }
    let true_filter = || (Arc::new(TrueFilter) as Arc<dyn Plugin>, 0);
    let cases = vec![
        Case {
            name: "test 1",
            plugins: vec![true_filter()],
            extenders: vec![
                FakeExtender {
                    predicates: vec![true_predicate],
                    ..fake("FakeExtender1")
                },
                FakeExtender {
                    predicates: vec![error_predicate],
                    ..fake("FakeExtender2")
                },
            ],
            nodes: &["node1", "node2"],
            want: None,
        },
        Case {
            name: "test 2",
            plugins: vec![true_filter()],
            extenders: vec![
                FakeExtender {
                    predicates: vec![true_predicate],
                    ..fake("FakeExtender1")
                },
                FakeExtender {
                    predicates: vec![false_predicate],
                    ..fake("FakeExtender2")
                },
            ],
            nodes: &["node1", "node2"],
            want: None,
        },
        Case {
            name: "test 3",
            plugins: vec![true_filter(), (equal_prioritizer(), 1)],
            extenders: vec![
                FakeExtender {
                    predicates: vec![true_predicate],
                    ..fake("FakeExtender1")
                },
                FakeExtender {
                    predicates: vec![node1_predicate],
                    ..fake("FakeExtender2")
                },
            ],
            nodes: &["node1", "node2"],
            want: Some(("node1", 2, 1)),
        },
        Case {
            name: "test 4",
            plugins: vec![true_filter()],
            extenders: vec![
                FakeExtender {
                    predicates: vec![node2_predicate],
                    ..fake("FakeExtender1")
                },
                FakeExtender {
                    predicates: vec![node1_predicate],
                    ..fake("FakeExtender2")
                },
            ],
            nodes: &["node1", "node2"],
            want: None,
        },
        Case {
            name: "test 5",
            plugins: vec![true_filter()],
            extenders: vec![FakeExtender {
                predicates: vec![true_predicate],
                prioritizers: vec![(error_prioritizer, 10)],
                weight: 1,
                ..fake("FakeExtender1")
            }],
            nodes: &["node1"],
            want: Some(("node1", 1, 1)),
        },
        Case {
            name: "test 6",
            plugins: vec![true_filter()],
            extenders: vec![
                FakeExtender {
                    predicates: vec![true_predicate],
                    prioritizers: vec![(node1_prioritizer, 10)],
                    weight: 1,
                    ..fake("FakeExtender1")
                },
                FakeExtender {
                    predicates: vec![true_predicate],
                    prioritizers: vec![(node2_prioritizer, 10)],
                    weight: 5,
                    ..fake("FakeExtender2")
                },
            ],
            nodes: &["node1", "node2"],
            want: Some(("node2", 2, 2)),
        },
        Case {
            name: "test 7: node2 has the higher score",
            plugins: vec![true_filter(), (node2_prioritizer_plugin(), 20)],
            extenders: vec![FakeExtender {
                predicates: vec![true_predicate],
                prioritizers: vec![(node1_prioritizer, 10)],
                weight: 1,
                ..fake("FakeExtender1")
            }],
            nodes: &["node1", "node2"],
            want: Some(("node2", 2, 2)),
        },
        Case {
            name: "test 8: an uninterested extender is not called",
            plugins: vec![true_filter(), (node2_prioritizer_plugin(), 1)],
            extenders: vec![FakeExtender {
                predicates: vec![error_predicate],
                prioritizers: vec![(error_prioritizer, 10)],
                uninterested: true,
                ..fake("FakeExtender1")
            }],
            nodes: &["node1", "node2"],
            want: Some(("node2", 2, 2)),
        },
        Case {
            name: "test 9: an ignorable extender's error is skipped",
            plugins: vec![true_filter(), (equal_prioritizer(), 1)],
            extenders: vec![
                FakeExtender {
                    predicates: vec![error_predicate],
                    ignorable: true,
                    ..fake("FakeExtender1")
                },
                FakeExtender {
                    predicates: vec![node1_predicate],
                    ..fake("FakeExtender2")
                },
            ],
            nodes: &["node1", "node2"],
            want: Some(("node1", 2, 1)),
        },
        Case {
            name: "test 10: no scoring, extender filters configured, multiple feasible nodes are evaluated",
            plugins: vec![true_filter()],
            extenders: vec![
                FakeExtender {
                    predicates: vec![true_predicate],
                    ..fake("FakeExtender1")
                },
                FakeExtender {
                    predicates: vec![node1_predicate],
                    ..fake("FakeExtender2")
                },
            ],
            nodes: &["node1", "node2"],
            want: Some(("node1", 2, 1)),
        },
        Case {
            name: "test 11: no scoring, no filters, a binder only: a single feasible node is evaluated",
            plugins: vec![],
            extenders: vec![FakeExtender {
                binder: Some(Ok(())),
                ..fake("FakeExtender1")
            }],
            nodes: &["node1", "node2"],
            want: Some(("node1", 1, 1)),
        },
    ];
    for case in cases {
        let fwk = framework(case.plugins, Arc::default(), arcs(case.extenders));
        let got = schedule(&fwk, case.nodes, &pod("pod"));
        match (case.want, got) {
            (None, Err(_)) => {}
            (None, Ok(r)) => panic!(
                "{}: scheduled on {} but want an error",
                case.name, r.suggested_host
            ),
            (Some(_), Err(e)) => panic!("{}: {e:?}", case.name),
            (Some((host, evaluated, feasible)), Ok(r)) => {
                assert_eq!(
                    (r.suggested_host.as_str(), r.evaluated_nodes, r.feasible_nodes),
                    (host, evaluated, feasible),
                    "{}",
                    case.name
                );
            }
        }
    }
}

/// A filter extender that rejects every node: the FitError carries its reasons with the
/// plugins', and names the extender among the rejectors (`schedule_one_test.go`, "test with
/// extender which filters out some Nodes").
#[test]
fn extender_rejections_join_the_fit_error() {
    let fwk = framework(
        vec![(Arc::new(FakeFilter(&["3"])), 0)],
        Arc::default(),
        arcs(vec![FakeExtender {
            predicates: vec![false_predicate],
            ..fake("FakeExtender1")
        }]),
    );
    let Err(ScheduleError::Fit(fit, _)) = schedule(&fwk, &["1", "2", "3"], &pod("test-filter")) else {
        panic!("want a FitError");
    };
    assert_eq!(fit.num_all_nodes, 3);
    let statuses: BTreeMap<String, (Code, String)> = fit
        .diagnosis
        .node_to_status
        .iter()
        .map(|(n, s)| (n.clone(), (s.code(), s.message())))
        .collect();
    let want: BTreeMap<String, (Code, String)> = [
        ("1", Code::Unschedulable, "FakeExtender: node \"1\" failed"),
        ("2", Code::Unschedulable, "FakeExtender: node \"2\" failed"),
        ("3", Code::Unschedulable, "injecting failure for pod test-filter"),
    ]
    .into_iter()
    .map(|(n, c, m)| (n.to_string(), (c, m.to_string())))
    .collect();
    assert_eq!(statuses, want);
    assert_eq!(
        fit.diagnosis.unschedulable_plugins,
        BTreeSet::from(["FakeFilter".to_string(), EXTENDER_NAME.to_string()])
    );
    assert_eq!(
        fit.to_string(),
        "0/3 nodes are available: 1 FakeExtender: node \"1\" failed, 1 FakeExtender: node \"2\" failed, \
         1 injecting failure for pod test-filter."
    );
}

/// `TestFindNodesThatPassExtenders`.
#[test]
fn find_nodes_that_pass_extenders_table() {
    fn a_passes(n: &str) -> Verdict {
        match n {
            "a" => Verdict::Pass,
            _ => Verdict::Fail,
        }
    }
    fn a_passes_c_unresolvable(n: &str) -> Verdict {
        match n {
            "a" => Verdict::Pass,
            "b" => Verdict::Fail,
            _ => Verdict::Unresolvable,
        }
    }
    let failed = |n: &str| {
        (
            n.to_string(),
            (Code::Unschedulable, format!("FakeExtender: node {n:?} failed")),
        )
    };
    let unresolvable = |n: &str| {
        (
            n.to_string(),
            (
                Code::UnschedulableAndUnresolvable,
                format!("FakeExtender: node {n:?} failed and unresolvable"),
            ),
        )
    };
    struct Case {
        name: &'static str,
        predicates: Vec<Vec<Predicate>>,
        nodes: &'static [&'static str],
        before: Vec<(String, (Code, String))>,
        /// The passing nodes and the statuses after, or `None` for an error.
        want: Option<(Vec<&'static str>, Vec<(String, (Code, String))>)>,
    }
    let plugin_failed = (
        "c".to_string(),
        (
            Code::Unschedulable,
            "FakeFilterPlugin: node \"c\" failed".to_string(),
        ),
    );
    let cases = vec![
        Case {
            name: "error",
            predicates: vec![vec![error_predicate]],
            nodes: &["a"],
            before: vec![],
            want: None,
        },
        Case {
            name: "success",
            predicates: vec![vec![true_predicate]],
            nodes: &["a"],
            before: vec![],
            want: Some((vec!["a"], vec![])),
        },
        Case {
            name: "unschedulable",
            predicates: vec![vec![a_passes]],
            nodes: &["a", "b"],
            before: vec![],
            want: Some((vec!["a"], vec![failed("b")])),
        },
        Case {
            name: "unschedulable and unresolvable",
            predicates: vec![vec![a_passes_c_unresolvable]],
            nodes: &["a", "b", "c"],
            before: vec![],
            want: Some((vec!["a"], vec![failed("b"), unresolvable("c")])),
        },
        Case {
            name: "extender does not overwrite the previous statuses",
            predicates: vec![vec![a_passes_c_unresolvable]],
            nodes: &["a", "b"],
            before: vec![plugin_failed.clone()],
            want: Some((vec!["a"], vec![failed("b"), plugin_failed])),
        },
        Case {
            name: "multiple extenders",
            predicates: vec![vec![a_passes_c_unresolvable], vec![a_passes]],
            nodes: &["a", "b", "c"],
            before: vec![],
            want: Some((vec!["a"], vec![failed("b"), unresolvable("c")])),
        },
    ];
    for case in cases {
        let extenders = Extenders::new(arcs(
            case.predicates
                .into_iter()
                .map(|predicates| FakeExtender {
                    predicates,
                    ..fake("FakeExtender1")
                })
                .collect(),
        ));
        let mut diagnosis = Diagnosis::default();
        for (n, (code, msg)) in &case.before {
            diagnosis
                .node_to_status
                .set(n.clone(), Status::new(*code, [msg.clone()]));
        }
        let nodes: Vec<Arc<NodeInfo>> = case.nodes.iter().map(|n| node(n)).collect();
        let got = find_nodes_that_pass_extenders(&extenders, &pod("p"), nodes, &mut diagnosis);
        match (case.want, got) {
            (None, Err(s)) => assert_eq!(s.code(), Code::Error, "{}", case.name),
            (None, Ok(_)) => panic!("{}: want an error", case.name),
            (Some(_), Err(s)) => panic!("{}: {}", case.name, s.message()),
            (Some((want_nodes, want_statuses)), Ok(passed)) => {
                let names: Vec<&str> = passed.iter().map(|n| n.name()).collect();
                assert_eq!(names, want_nodes, "{}", case.name);
                let statuses: BTreeMap<String, (Code, String)> = diagnosis
                    .node_to_status
                    .iter()
                    .map(|(n, s)| (n.clone(), (s.code(), s.message())))
                    .collect();
                assert_eq!(statuses, want_statuses.into_iter().collect(), "{}", case.name);
            }
        }
    }
}

/// The extenders' scores are scaled (`score × weight × MaxNodeScore / MaxExtenderPriority`)
/// and recorded beside the plugins' (`schedule_one_test.go`, "the score from extender should
/// also be recorded in PluginToNodeScores with plugin scores").
#[test]
fn extender_scores_are_scaled_and_recorded() {
    let fwk = framework(
        vec![(equal_prioritizer(), 1)],
        Arc::default(),
        arcs(vec![
            FakeExtender {
                prioritizers: vec![(node1_prioritizer, 3)],
                weight: 1,
                ..fake("FakeExtender1")
            },
            FakeExtender {
                prioritizers: vec![(node2_prioritizer, 2)],
                weight: 1,
                ..fake("FakeExtender2")
            },
        ]),
    );
    let nodes: Vec<Arc<NodeInfo>> = ["node1", "node2"].iter().map(|n| node(n)).collect();
    let mut state = CycleState::with_snapshot(Arc::new(Snapshot::new(nodes.clone())));
    let table = SchedulingAlgorithm::new(1, None, 1)
        .prioritize_nodes(&fwk, &mut state, &pod("p"), &nodes)
        .unwrap();
    assert_eq!(
        table.plugins,
        ["EqualPrioritizerPlugin", "FakeExtender1", "FakeExtender2"]
    );
    assert_eq!(table.weighted[1], [300, 30]);
    assert_eq!(table.weighted[2], [20, 200]);
    assert_eq!(table.totals, [1 + 300 + 20, 1 + 30 + 200]);
    let record = table.node(0, "node1");
    assert_eq!(
        record.scores,
        [
            ("EqualPrioritizerPlugin".to_string(), 1),
            ("FakeExtender1".to_string(), 300),
            ("FakeExtender2".to_string(), 20)
        ]
    );

    // Without Score plugins the extenders' scores start from 0, not from the uniform 1.
    let fwk = framework(
        vec![],
        Arc::default(),
        arcs(vec![FakeExtender {
            prioritizers: vec![(node2_prioritizer, 1)],
            weight: 2,
            ..fake("FakeExtender1")
        }]),
    );
    let table = SchedulingAlgorithm::new(1, None, 1)
        .prioritize_nodes(&fwk, &mut state, &pod("p"), &nodes)
        .unwrap();
    assert_eq!(table.totals, [20, 200]);
}

/// `TestSchedulerBinding`: the first interested binder binds instead of the Bind plugins; an
/// ignorable binder's failure leaves the pod to them.
#[test]
fn scheduler_binding() {
    struct Case {
        name: &'static str,
        /// (binder result, interested, ignorable) per extender.
        extenders: Vec<(Option<Result<(), &'static str>>, bool, bool)>,
        /// Which extender binds, or `None` for the default binder.
        want_binder: Option<usize>,
    }
    let cases = [
        Case {
            name: "the extender is not a binder",
            extenders: vec![(None, true, false)],
            want_binder: None,
        },
        Case {
            name: "one of the extenders is a binder and interested in pod",
            extenders: vec![(None, true, false), (Some(Ok(())), true, false)],
            want_binder: Some(1),
        },
        Case {
            name: "one of the extenders is a binder, but not interested in pod",
            extenders: vec![(None, true, false), (Some(Ok(())), false, false)],
            want_binder: None,
        },
        Case {
            name: "ignore when extender bind failed",
            extenders: vec![(Some(Err("bind failed")), true, true)],
            want_binder: None,
        },
    ];
    for case in cases {
        let fakes: Vec<Arc<FakeExtender>> = case
            .extenders
            .iter()
            .map(|(binder, interested, ignorable)| {
                Arc::new(FakeExtender {
                    binder: *binder,
                    uninterested: !interested,
                    ignorable: *ignorable,
                    ..fake("FakeExtender")
                })
            })
            .collect();
        let binder = Arc::new(DefaultBinder::default());
        let fwk = framework(
            vec![],
            binder.clone(),
            fakes.iter().map(|f| f.clone() as Arc<dyn Extender>).collect(),
        );
        let p = pod("pod0");
        let s = extender_binding(fwk.extenders(), &p, "node1")
            .unwrap_or_else(|| fwk.run_bind(&CycleState::new(), &p, "node1"));
        assert!(s.is_success(), "{}: {}", case.name, s.message());
        let bound_by: Vec<usize> = fakes
            .iter()
            .enumerate()
            .filter(|(_, f)| f.binder == Some(Ok(())) && f.binds.load(Ordering::SeqCst) > 0)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(bound_by.first().copied(), case.want_binder, "{}", case.name);
        let default_bound = binder.0.load(Ordering::SeqCst) > 0;
        assert_eq!(default_bound, case.want_binder.is_none(), "{}", case.name);
    }
}

/// A binder that is not ignorable fails the binding with its error; the pod is not given to
/// the Bind plugins.
#[test]
fn a_failing_binder_fails_the_binding() {
    let extenders = Extenders::new(arcs(vec![FakeExtender {
        binder: Some(Err("no room")),
        ..fake("FakeExtender")
    }]));
    let s = extender_binding(&extenders, &pod("p"), "node1").expect("the extender binds");
    assert_eq!(s.code(), Code::Error);
    assert!(s.message().contains("no room"), "{}", s.message());
    assert!(has_interested_binder(&extenders, &pod("p")));
}

/// Ignorable extenders are called after the others, whatever the configuration's order.
#[test]
fn ignorable_extenders_come_last() {
    let extenders = Extenders::new(arcs(vec![
        FakeExtender {
            ignorable: true,
            ..fake("a")
        },
        fake("b"),
        FakeExtender {
            ignorable: true,
            ..fake("c")
        },
        fake("d"),
    ]));
    let names: Vec<&str> = extenders.iter().map(|e| e.name()).collect();
    assert_eq!(names, ["b", "d", "a", "c"]);
}

/// A pod an extender rejected may be helped by any cluster event: the pseudo-plugin
/// `Extender` is registered for every event, only when extenders are configured.
#[test]
fn the_extender_pseudo_plugin_registers_every_event() {
    let registered = |fwk: &Framework| {
        fwk.events_to_register()
            .iter()
            .find(|(p, _)| p == EXTENDER_NAME)
            .map(|(_, events)| {
                events
                    .iter()
                    .map(|e| (e.event.resource, e.event.action))
                    .collect::<Vec<_>>()
            })
    };
    let without = framework(vec![], Arc::default(), vec![]);
    assert_eq!(registered(&without), None);
    let with = framework(vec![], Arc::default(), arcs(vec![fake("FakeExtender1")]));
    assert_eq!(
        registered(&with),
        Some(vec![(crate::EventResource::Wildcard, crate::ActionType::ALL)])
    );
    // Setting the extenders again does not register twice.
    let again = with.with_extenders(Extenders::new(arcs(vec![fake("FakeExtender1")])));
    assert_eq!(registered(&again).map(|e| e.len()), Some(1));
}

/// `scheduler_goroutines{operation}` as a test sees it: the tasks in flight and every change.
#[derive(Default)]
struct TaskGauge {
    in_flight: std::sync::atomic::AtomicI64,
    operations: parking_lot::Mutex<Vec<(&'static str, i64)>>,
}

impl crate::FrameworkObserver for TaskGauge {
    fn task_started(&self, operation: &'static str) {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.operations.lock().push((operation, now));
    }
    fn task_finished(&self, operation: &'static str) {
        let now = self.in_flight.fetch_sub(1, Ordering::SeqCst) - 1;
        self.operations.lock().push((operation, now));
    }
}

/// A prioritizer that notes how many prioritize tasks were in flight during its call; with a
/// barrier, the calls wait for each other, so that they overlap for certain.
struct GaugeReadingExtender {
    gauge: Arc<TaskGauge>,
    barrier: Option<Arc<std::sync::Barrier>>,
    seen: parking_lot::Mutex<Vec<i64>>,
    fail: bool,
}

impl Extender for GaugeReadingExtender {
    fn name(&self) -> &str {
        "gauge-reader"
    }
    fn is_ignorable(&self) -> bool {
        false
    }
    fn is_interested(&self, _: &PodInfo) -> bool {
        true
    }
    fn is_filter(&self) -> bool {
        false
    }
    fn is_prioritizer(&self) -> bool {
        true
    }
    fn is_binder(&self) -> bool {
        false
    }
    fn supports_preemption(&self) -> bool {
        false
    }
    fn filter(&self, _: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Result<ExtenderFilterOutcome, ExtenderError> {
        Ok(ExtenderFilterOutcome {
            feasible: nodes.to_vec(),
            ..ExtenderFilterOutcome::default()
        })
    }
    fn prioritize(
        &self,
        _: &PodInfo,
        _: &[Arc<NodeInfo>],
    ) -> Result<(Vec<HostPriority>, i64), ExtenderError> {
        if let Some(barrier) = &self.barrier {
            barrier.wait();
        }
        self.seen.lock().push(self.gauge.in_flight.load(Ordering::SeqCst));
        if let Some(barrier) = &self.barrier {
            barrier.wait();
        }
        if self.fail {
            return Err(ExtenderError::new("some error"));
        }
        Ok((Vec::new(), 1))
    }
    fn bind(&self, _: &PodInfo, _: &str) -> Result<(), ExtenderError> {
        Err(ExtenderError::new("not a binder"))
    }
    fn process_preemption(
        &self,
        _: &PodInfo,
        victims: BTreeMap<String, Victims>,
        _: &dyn Fn(&str) -> Option<Arc<NodeInfo>>,
    ) -> Result<BTreeMap<String, Victims>, ExtenderError> {
        Ok(victims)
    }
}

/// Each prioritize call counts as a `prioritizing_extender` task while it runs, as upstream raises
/// `scheduler_goroutines{operation="prioritizing_extender"}` around each extender's goroutine; a
/// failed call is counted down too.
#[test]
fn prioritize_calls_count_as_tasks_while_they_run() {
    let gauge = Arc::new(TaskGauge::default());
    let nodes = [node("node1"), node("node2")];
    let reader = |barrier: Option<Arc<std::sync::Barrier>>, fail: bool| {
        Arc::new(GaugeReadingExtender {
            gauge: gauge.clone(),
            barrier,
            seen: parking_lot::Mutex::new(Vec::new()),
            fail,
        })
    };

    // Two extenders are called at the same time: each sees both calls in flight.
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let (first, second) = (reader(Some(barrier.clone()), false), reader(Some(barrier), true));
    let extenders = Extenders::new(vec![first.clone(), second.clone()]);
    let mut table = crate::ScoreTable::uniform(nodes.len(), 0);
    prioritize_with_extenders(&extenders, &pod("p"), &nodes, &mut table, gauge.as_ref());
    assert_eq!(*first.seen.lock(), [2]);
    assert_eq!(*second.seen.lock(), [2]);
    assert_eq!(
        gauge.in_flight.load(Ordering::SeqCst),
        0,
        "both counted down, the failed one too"
    );
    let operations = gauge.operations.lock().clone();
    assert_eq!(operations.len(), 4);
    assert!(operations.iter().all(|(op, _)| *op == PRIORITIZING_EXTENDER));
    assert_eq!(PRIORITIZING_EXTENDER, "prioritizing_extender");

    // One extender is called on the scheduling thread, and counted the same.
    let alone = reader(None, false);
    let extenders = Extenders::new(vec![alone.clone()]);
    prioritize_with_extenders(&extenders, &pod("p"), &nodes, &mut table, gauge.as_ref());
    assert_eq!(*alone.seen.lock(), [1]);
    assert_eq!(gauge.in_flight.load(Ordering::SeqCst), 0);
}

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::api::core::v1::PodAffinityTerm;
use unisched_framework::{
    Code, CycleState, FilterPlugin, NodeInfo, NodeScore, PodInfo, PreFilterPlugin, PreScorePlugin,
    ScorePlugin, Snapshot,
};

use super::*;
use crate::{
    helper::decode_args,
    testing::{NodeBuilder, PodBuilder, affinity_term, label_selector, selector_exists, selector_in},
};

const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "zone";

/// Namespace labels from a table.
struct Namespaces(BTreeMap<String, BTreeMap<String, String>>);

impl NamespaceLister for Namespaces {
    fn labels(&self, ns: &str) -> Option<BTreeMap<String, String>> {
        self.0.get(ns).cloned()
    }
}

/// `team-a` (team=a), `team-b` (team=b) and `default` (no labels).
fn namespaces() -> Arc<dyn NamespaceLister> {
    let l = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    Arc::new(Namespaces(
        [
            ("team-a".to_string(), l(&[("team", "a")])),
            ("team-b".to_string(), l(&[("team", "b")])),
            ("default".to_string(), l(&[])),
        ]
        .into_iter()
        .collect(),
    ))
}

fn with_namespaces() -> InterPodAffinity {
    InterPodAffinity::new(&InterPodAffinityArgs::default(), Some(namespaces())).unwrap()
}

/// `n1`,`n2` in zone a, `n3` in zone b, `n4` in zone c; each with its hostname label.
fn nodes() -> Vec<NodeBuilder> {
    [("n1", "a"), ("n2", "a"), ("n3", "b"), ("n4", "c")]
        .into_iter()
        .map(|(n, z)| NodeBuilder::new(n).label(ZONE, z).label(HOST, n))
        .collect()
}

fn bound(name: &str, node: &str, labels: &[(&str, &str)]) -> PodBuilder {
    labels
        .iter()
        .fold(PodBuilder::new(name).node_name(node), |b, (k, v)| b.label(k, v))
}

fn place(nodes: Vec<NodeBuilder>, pods: Vec<PodBuilder>) -> Vec<NodeInfo> {
    let pods: Vec<PodInfo> = pods.into_iter().map(PodBuilder::info).collect();
    nodes
        .into_iter()
        .map(|b| {
            let name = b.clone().build().metadata.name.unwrap_or_default();
            b.info_with(
                pods.iter()
                    .filter(|p| p.node_name() == Some(name.as_str()))
                    .cloned(),
            )
        })
        .collect()
}

fn state_for(nodes: Vec<NodeInfo>) -> (CycleState, Arc<Snapshot>) {
    let snapshot = Arc::new(Snapshot::from_node_infos(nodes));
    (CycleState::with_snapshot(snapshot.clone()), snapshot)
}

const OK: Code = Code::Success;
const NO: Code = Code::Unschedulable;
const NEVER: Code = Code::UnschedulableAndUnresolvable;
const SKIP: Code = Code::Skip;

/// PreFilter then Filter on every node: `Err(PreFilter code, message)` or each node's code and
/// message.
fn filter_all(
    pl: &InterPodAffinity,
    pod: &PodInfo,
    nodes: Vec<NodeInfo>,
) -> Result<Vec<(Code, String)>, (Code, String)> {
    let (mut state, snapshot) = state_for(nodes);
    let (r, s) = pl.pre_filter(&mut state, pod, snapshot.nodes());
    assert!(r.is_none());
    if !s.is_success() {
        return Err((s.code(), s.message()));
    }
    Ok(snapshot
        .nodes()
        .iter()
        .map(|n| {
            let s = pl.filter(&state, pod, n);
            (s.code(), s.message())
        })
        .collect())
}

fn reason(code: Code, anti_kind: &str) -> String {
    match code {
        OK => String::new(),
        NEVER => ERR_REASON_AFFINITY_RULES_NOT_MATCH.to_string(),
        _ if anti_kind == "existing" => ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH.to_string(),
        _ => ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH.to_string(),
    }
}

#[test]
fn filter_table() {
    struct Case {
        name: &'static str,
        pl: InterPodAffinity,
        pod: PodBuilder,
        nodes: Vec<NodeBuilder>,
        pods: Vec<PodBuilder>,
        /// Per node, or the PreFilter code.
        want: Result<[Code; 4], Code>,
        /// `own` or `existing`: which anti-affinity reason an Unschedulable carries.
        anti_kind: &'static str,
    }
    let db_affinity = |key: &str| {
        PodBuilder::new("p")
            .label("app", "web")
            .pod_affinity(affinity_term(selector_in("app", &["db"]), key))
    };
    let web_anti = |key: &str| {
        PodBuilder::new("p")
            .label("app", "web")
            .pod_anti_affinity(affinity_term(selector_in("app", &["web"]), key))
    };
    let hates_web = |name: &str, node: &str, key: &str| {
        bound(name, node, &[("app", "cache")])
            .pod_anti_affinity(affinity_term(selector_in("app", &["web"]), key))
    };
    let cases = vec![
        Case {
            name: "no terms and no anti-affinity around: skipped",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p").label("app", "web"),
            nodes: nodes(),
            pods: vec![bound("db", "n1", &[("app", "db")])],
            want: Err(SKIP),
            anti_kind: "own",
        },
        Case {
            name: "affinity by hostname: only the node with the db pod",
            pl: InterPodAffinity::default(),
            pod: db_affinity(HOST),
            nodes: nodes(),
            pods: vec![bound("db", "n1", &[("app", "db")])],
            want: Ok([OK, NEVER, NEVER, NEVER]),
            anti_kind: "own",
        },
        Case {
            name: "affinity by zone: every node of the db pod's zone",
            pl: InterPodAffinity::default(),
            pod: db_affinity(ZONE),
            nodes: nodes(),
            pods: vec![bound("db", "n2", &[("app", "db")])],
            want: Ok([OK, OK, NEVER, NEVER]),
            anti_kind: "own",
        },
        Case {
            name: "affinity: a node without the topology key never fits",
            pl: InterPodAffinity::default(),
            pod: db_affinity(ZONE),
            nodes: vec![
                NodeBuilder::new("n1").label(ZONE, "a"),
                NodeBuilder::new("n2"),
                NodeBuilder::new("n3").label(ZONE, "b"),
                NodeBuilder::new("n4").label(ZONE, "a"),
            ],
            pods: vec![
                bound("db", "n2", &[("app", "db")]),
                bound("db2", "n4", &[("app", "db")]),
            ],
            want: Ok([OK, NEVER, NEVER, OK]),
            anti_kind: "own",
        },
        Case {
            name: "affinity: one pod must meet every term",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p")
                .pod_affinity(affinity_term(selector_in("app", &["db"]), ZONE))
                .pod_affinity(affinity_term(selector_in("tier", &["back"]), ZONE)),
            nodes: nodes(),
            pods: vec![
                bound("db", "n1", &[("app", "db")]),
                bound("back", "n2", &[("tier", "back")]),
            ],
            want: Ok([NEVER; 4]),
            anti_kind: "own",
        },
        Case {
            name: "affinity: a pod meeting every term",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p")
                .pod_affinity(affinity_term(selector_in("app", &["db"]), ZONE))
                .pod_affinity(affinity_term(selector_in("tier", &["back"]), HOST)),
            nodes: nodes(),
            pods: vec![bound("db", "n2", &[("app", "db"), ("tier", "back")])],
            want: Ok([NEVER, OK, NEVER, NEVER]),
            anti_kind: "own",
        },
        Case {
            name: "first pod of a group may go anywhere with the key",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p")
                .label("app", "db")
                .pod_affinity(affinity_term(selector_in("app", &["db"]), ZONE)),
            nodes: vec![
                NodeBuilder::new("n1").label(ZONE, "a"),
                NodeBuilder::new("n2"),
                NodeBuilder::new("n3").label(ZONE, "b"),
                NodeBuilder::new("n4").label(ZONE, "c"),
            ],
            pods: vec![bound("other", "n1", &[("app", "web")])],
            want: Ok([OK, NEVER, OK, OK]),
            anti_kind: "own",
        },
        Case {
            name: "not the first pod: the group's node only",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p")
                .label("app", "db")
                .pod_affinity(affinity_term(selector_in("app", &["db"]), HOST)),
            nodes: nodes(),
            pods: vec![bound("db", "n3", &[("app", "db")])],
            want: Ok([NEVER, NEVER, OK, NEVER]),
            anti_kind: "own",
        },
        Case {
            name: "first pod rule needs the pod to match its own terms",
            pl: InterPodAffinity::default(),
            pod: db_affinity(ZONE),
            nodes: nodes(),
            pods: vec![],
            want: Ok([NEVER; 4]),
            anti_kind: "own",
        },
        Case {
            name: "first pod rule: a pod meeting only some terms blocks nothing",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p")
                .label("app", "db")
                .label("tier", "back")
                .pod_affinity(affinity_term(selector_in("app", &["db"]), ZONE))
                .pod_affinity(affinity_term(selector_in("tier", &["back"]), ZONE)),
            nodes: nodes(),
            pods: vec![bound("db", "n1", &[("app", "db")])],
            want: Ok([OK; 4]),
            anti_kind: "own",
        },
        Case {
            name: "affinity to pods of a listed namespace",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p").pod_affinity(PodAffinityTerm {
                namespaces: Some(vec!["team-a".into()]),
                ..affinity_term(selector_in("app", &["db"]), HOST)
            }),
            nodes: nodes(),
            pods: vec![
                bound("db-a", "n1", &[("app", "db")]).namespace("team-a"),
                bound("db-default", "n2", &[("app", "db")]),
            ],
            want: Ok([OK, NEVER, NEVER, NEVER]),
            anti_kind: "own",
        },
        Case {
            name: "namespaceSelector with a lister",
            pl: with_namespaces(),
            pod: PodBuilder::new("p").pod_affinity(PodAffinityTerm {
                namespace_selector: Some(label_selector(&[("team", "b")], &[])),
                ..affinity_term(selector_in("app", &["db"]), HOST)
            }),
            nodes: nodes(),
            pods: vec![
                bound("db-a", "n1", &[("app", "db")]).namespace("team-a"),
                bound("db-b", "n2", &[("app", "db")]).namespace("team-b"),
            ],
            want: Ok([NEVER, OK, NEVER, NEVER]),
            anti_kind: "own",
        },
        Case {
            name: "namespaceSelector without a lister selects no namespace",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p").pod_affinity(PodAffinityTerm {
                namespace_selector: Some(label_selector(&[("team", "b")], &[])),
                ..affinity_term(selector_in("app", &["db"]), HOST)
            }),
            nodes: nodes(),
            pods: vec![bound("db-b", "n2", &[("app", "db")]).namespace("team-b")],
            want: Ok([NEVER; 4]),
            anti_kind: "own",
        },
        Case {
            name: "an empty namespaceSelector selects every namespace",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p").pod_affinity(PodAffinityTerm {
                namespace_selector: Some(label_selector(&[], &[])),
                ..affinity_term(selector_in("app", &["db"]), HOST)
            }),
            nodes: nodes(),
            pods: vec![bound("db-b", "n4", &[("app", "db")]).namespace("team-b")],
            want: Ok([NEVER, NEVER, NEVER, OK]),
            anti_kind: "own",
        },
        Case {
            name: "anti-affinity by hostname",
            pl: InterPodAffinity::default(),
            pod: web_anti(HOST),
            nodes: nodes(),
            pods: vec![bound("web", "n1", &[("app", "web")])],
            want: Ok([NO, OK, OK, OK]),
            anti_kind: "own",
        },
        Case {
            name: "anti-affinity by zone; a node without the key is fine",
            pl: InterPodAffinity::default(),
            pod: web_anti(ZONE),
            nodes: {
                let mut n = nodes();
                n[3] = NodeBuilder::new("n4");
                n
            },
            pods: vec![
                bound("web", "n2", &[("app", "web")]),
                bound("web2", "n4", &[("app", "web")]),
            ],
            want: Ok([NO, NO, OK, OK]),
            anti_kind: "own",
        },
        Case {
            name: "anti-affinity ignores other namespaces",
            pl: InterPodAffinity::default(),
            pod: web_anti(HOST),
            nodes: nodes(),
            pods: vec![bound("web", "n1", &[("app", "web")]).namespace("team-a")],
            want: Ok([OK; 4]),
            anti_kind: "own",
        },
        Case {
            name: "existing pod's anti-affinity by zone",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p").label("app", "web"),
            nodes: nodes(),
            pods: vec![hates_web("cache", "n1", ZONE)],
            want: Ok([NO, NO, OK, OK]),
            anti_kind: "existing",
        },
        Case {
            name: "existing pod's anti-affinity by hostname",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p").label("app", "web"),
            nodes: nodes(),
            pods: vec![hates_web("cache", "n3", HOST)],
            want: Ok([OK, OK, NO, OK]),
            anti_kind: "existing",
        },
        Case {
            name: "existing anti-affinity in another namespace applies there only",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p").label("app", "web"),
            nodes: nodes(),
            pods: vec![hates_web("cache", "n1", ZONE).namespace("team-a")],
            want: Err(SKIP),
            anti_kind: "existing",
        },
        Case {
            name: "existing anti-affinity selecting the pod's namespace by labels",
            pl: with_namespaces(),
            pod: PodBuilder::new("p").namespace("team-b").label("app", "web"),
            nodes: nodes(),
            pods: vec![
                bound("cache", "n4", &[("app", "cache")])
                    .namespace("team-a")
                    .pod_anti_affinity(PodAffinityTerm {
                        namespace_selector: Some(label_selector(&[("team", "b")], &[])),
                        ..affinity_term(selector_in("app", &["web"]), ZONE)
                    }),
            ],
            want: Ok([OK, OK, OK, NO]),
            anti_kind: "existing",
        },
        Case {
            name: "existing anti-affinity that does not select the pod",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p")
                .label("app", "web")
                .pod_anti_affinity(affinity_term(selector_in("app", &["x"]), HOST)),
            nodes: nodes(),
            pods: vec![
                bound("cache", "n1", &[("app", "cache")])
                    .pod_anti_affinity(affinity_term(selector_in("app", &["db"]), ZONE)),
            ],
            want: Ok([OK; 4]),
            anti_kind: "existing",
        },
        Case {
            name: "matchLabelKeys: only the pod's own revision repels",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p")
                .label("app", "web")
                .label("rev", "2")
                .pod_anti_affinity(PodAffinityTerm {
                    match_label_keys: Some(vec!["rev".into()]),
                    ..affinity_term(selector_in("app", &["web"]), HOST)
                }),
            nodes: nodes(),
            pods: vec![
                bound("old", "n1", &[("app", "web"), ("rev", "1")]),
                bound("new", "n2", &[("app", "web"), ("rev", "2")]),
            ],
            want: Ok([OK, NO, OK, OK]),
            anti_kind: "own",
        },
        Case {
            name: "mismatchLabelKeys: affinity to other tenants only",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p")
                .label("tenant", "a")
                .pod_affinity(PodAffinityTerm {
                    mismatch_label_keys: Some(vec!["tenant".into()]),
                    ..affinity_term(selector_exists("tenant"), HOST)
                }),
            nodes: nodes(),
            pods: vec![
                bound("same", "n1", &[("tenant", "a")]),
                bound("other", "n2", &[("tenant", "b")]),
            ],
            want: Ok([NEVER, OK, NEVER, NEVER]),
            anti_kind: "own",
        },
        Case {
            name: "affinity is checked before anti-affinity",
            pl: InterPodAffinity::default(),
            pod: PodBuilder::new("p")
                .label("app", "web")
                .pod_affinity(affinity_term(selector_in("app", &["db"]), HOST))
                .pod_anti_affinity(affinity_term(selector_in("app", &["web"]), ZONE)),
            nodes: nodes(),
            pods: vec![
                bound("db", "n1", &[("app", "db")]),
                bound("web", "n2", &[("app", "web")]),
            ],
            want: Ok([NO, NEVER, NEVER, NEVER]),
            anti_kind: "own",
        },
    ];
    for c in cases {
        let pod = c.pod.info();
        let got = filter_all(&c.pl, &pod, place(c.nodes, c.pods));
        match (got, c.want) {
            (Ok(got), Ok(want)) => {
                let codes: Vec<Code> = got.iter().map(|(c, _)| *c).collect();
                assert_eq!(codes, want, "{}", c.name);
                for (i, (code, msg)) in got.iter().enumerate() {
                    assert_eq!(*msg, reason(*code, c.anti_kind), "{}: node {i}", c.name);
                }
            }
            (Err((code, _)), Err(want)) => assert_eq!(code, want, "{}", c.name),
            (got, want) => panic!("{}: got {got:?}, want {want:?}", c.name),
        }
    }
}

#[test]
fn invalid_terms_are_rejected_naming_the_group() {
    let pl = InterPodAffinity::default();
    struct Case {
        name: &'static str,
        pod: PodBuilder,
        want: &'static str,
    }
    let bad = || label_selector(&[], &[("app", "Near", &["x"])]);
    let cases = [
        Case {
            name: "required affinity",
            pod: PodBuilder::new("p").pod_affinity(affinity_term(bad(), HOST)),
            want: "parsing pod: requiredAffinityTerms: \"Near\" is not a valid label selector operator",
        },
        Case {
            name: "two groups",
            pod: PodBuilder::new("p")
                .pod_anti_affinity(affinity_term(bad(), HOST))
                .preferred_pod_affinity(1, affinity_term(label_selector(&[], &[("app", "In", &[])]), HOST)),
            want: "parsing pod: [requiredAntiAffinityTerms: \"Near\" is not a valid label selector operator, \
                   preferredAffinityTerms: values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty]",
        },
        Case {
            name: "namespace selector",
            pod: PodBuilder::new("p").pod_affinity(PodAffinityTerm {
                namespace_selector: Some(bad()),
                ..affinity_term(selector_exists("app"), HOST)
            }),
            want: "parsing pod: requiredAffinityTerms: \"Near\" is not a valid label selector operator",
        },
    ];
    for c in cases {
        let got = filter_all(&pl, &c.pod.info(), place(nodes(), vec![]));
        assert_eq!(got, Err((NEVER, c.want.to_string())), "{}", c.name);
    }
    // PreScore reports the same problem as an error.
    let pod = PodBuilder::new("p")
        .preferred_pod_affinity(1, affinity_term(bad(), HOST))
        .info();
    let (mut state, snapshot) = state_for(place(nodes(), vec![]));
    let s = pl.pre_score(&mut state, &pod, snapshot.nodes());
    assert_eq!(s.code(), Code::Error);
    assert_eq!(
        s.message(),
        "failed to parse pod: preferredAffinityTerms: \"Near\" is not a valid label selector operator"
    );
}

#[test]
fn add_and_remove_pod_update_a_copy() {
    let pl = InterPodAffinity::default();
    let pod = PodBuilder::new("p")
        .label("app", "web")
        .pod_affinity(affinity_term(selector_in("app", &["db"]), ZONE))
        .pod_anti_affinity(affinity_term(selector_in("app", &["web"]), HOST))
        .info();
    let existing = vec![
        bound("db", "n1", &[("app", "db")]),
        bound("web", "n2", &[("app", "web")]),
    ];
    let (mut state, snapshot) = state_for(place(nodes(), existing));
    assert!(pl.pre_filter(&mut state, &pod, snapshot.nodes()).1.is_success());
    let verdicts = |state: &CycleState| -> Vec<Code> {
        snapshot
            .nodes()
            .iter()
            .map(|n| pl.filter(state, &pod, n).code())
            .collect()
    };
    let node = |i: usize| snapshot.nodes()[i].clone();
    assert_eq!(verdicts(&state), [OK, NO, NEVER, NEVER]);

    // A nominated db pod in zone b opens n3.
    let mut with = state.deep_clone();
    let db = Arc::new(bound("db-b", "n3", &[("app", "db")]).info());
    assert!(pl.add_pod(&mut with, &pod, &db, &node(2)).is_success());
    assert_eq!(verdicts(&with), [OK, NO, OK, NEVER]);
    assert_eq!(
        verdicts(&state),
        [OK, NO, NEVER, NEVER],
        "the original is untouched"
    );

    // A nominated pod hating web pods in zone a closes n1 and n2.
    let hater = Arc::new(
        bound("h", "n1", &[("app", "cache")])
            .pod_anti_affinity(affinity_term(selector_in("app", &["web"]), ZONE))
            .info(),
    );
    let mut hated = state.deep_clone();
    assert!(pl.add_pod(&mut hated, &pod, &hater, &node(0)).is_success());
    let codes: Vec<(Code, String)> = snapshot
        .nodes()
        .iter()
        .map(|n| {
            let s = pl.filter(&hated, &pod, n);
            (s.code(), s.message())
        })
        .collect();
    assert_eq!(
        codes[0],
        (NO, ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH.to_string())
    );

    // Removing the web pod (a preemption victim) frees n2; removing the db pod closes zone a,
    // and with no db pod left the pod cannot start the group (it is no db pod itself).
    let mut without = state.deep_clone();
    let web = snapshot.nodes()[1].pods[0].clone();
    assert!(pl.remove_pod(&mut without, &pod, &web, &node(1)).is_success());
    assert_eq!(verdicts(&without), [OK, OK, NEVER, NEVER]);
    let db0 = snapshot.nodes()[0].pods[0].clone();
    assert!(pl.remove_pod(&mut without, &pod, &db0, &node(0)).is_success());
    assert_eq!(verdicts(&without), [NEVER; 4]);

    let mut empty = CycleState::new();
    assert_eq!(pl.add_pod(&mut empty, &pod, &db, &node(2)).code(), Code::Error);
    assert_eq!(pl.filter(&empty, &pod, &node(0)).code(), Code::Error);
}

/// PreScore, Score and NormalizeScore on every node.
fn scores(pl: &InterPodAffinity, pod: &PodInfo, nodes: Vec<NodeInfo>) -> Result<Vec<i64>, Code> {
    let (mut state, snapshot) = state_for(nodes);
    let s = pl.pre_score(&mut state, pod, snapshot.nodes());
    if !s.is_success() {
        return Err(s.code());
    }
    let mut list: Vec<NodeScore<'_>> = snapshot
        .nodes()
        .iter()
        .map(|n| NodeScore {
            name: n.name(),
            score: pl.score(&state, pod, n).unwrap(),
        })
        .collect();
    assert!(pl.normalize_score(&state, pod, &mut list).is_success());
    Ok(list.into_iter().map(|s| s.score).collect())
}

#[test]
fn score_table() {
    struct Case {
        name: &'static str,
        pl: InterPodAffinity,
        pod: PodBuilder,
        nodes: Vec<NodeBuilder>,
        pods: Vec<PodBuilder>,
        want: Result<Vec<i64>, Code>,
    }
    let args = |hard: i32, ignore: bool| {
        InterPodAffinity::new(
            &InterPodAffinityArgs {
                hard_pod_affinity_weight: Some(hard),
                ignore_preferred_terms_of_existing_pods: ignore,
                ..Default::default()
            },
            None,
        )
        .unwrap()
    };
    let web = || PodBuilder::new("p").label("app", "web");
    let cases = vec![
        Case {
            name: "preferred affinity to the db zone",
            pl: InterPodAffinity::default(),
            pod: web().preferred_pod_affinity(5, affinity_term(selector_in("app", &["db"]), ZONE)),
            nodes: nodes(),
            pods: vec![bound("db", "n1", &[("app", "db")])],
            want: Ok(vec![100, 100, 0, 0]),
        },
        Case {
            name: "preferred anti-affinity away from the web node",
            pl: InterPodAffinity::default(),
            pod: web().preferred_pod_anti_affinity(5, affinity_term(selector_in("app", &["web"]), HOST)),
            nodes: nodes(),
            pods: vec![bound("web", "n1", &[("app", "web")])],
            want: Ok(vec![0, 100, 100, 100]),
        },
        Case {
            name: "affinity and anti-affinity combined",
            pl: InterPodAffinity::default(),
            pod: web()
                .preferred_pod_affinity(8, affinity_term(selector_in("app", &["db"]), ZONE))
                .preferred_pod_anti_affinity(3, affinity_term(selector_in("app", &["db"]), HOST)),
            nodes: nodes(),
            pods: vec![bound("db", "n1", &[("app", "db")])],
            // raw 5, 8, 0, 0.
            want: Ok(vec![62, 100, 0, 0]),
        },
        Case {
            name: "an existing pod's required affinity counts with the hard weight",
            pl: InterPodAffinity::default(),
            pod: web(),
            nodes: nodes(),
            pods: vec![
                bound("x", "n3", &[("app", "x")])
                    .pod_affinity(affinity_term(selector_in("app", &["web"]), ZONE)),
            ],
            want: Ok(vec![0, 0, 100, 0]),
        },
        Case {
            name: "hard weight 0 ignores it",
            pl: args(0, false),
            pod: web(),
            nodes: nodes(),
            pods: vec![
                bound("x", "n3", &[("app", "x")])
                    .pod_affinity(affinity_term(selector_in("app", &["web"]), ZONE)),
            ],
            want: Err(SKIP),
        },
        Case {
            name: "an existing pod's preferred anti-affinity",
            pl: InterPodAffinity::default(),
            pod: web(),
            nodes: nodes(),
            pods: vec![
                bound("x", "n4", &[("app", "x")])
                    .preferred_pod_anti_affinity(10, affinity_term(selector_in("app", &["web"]), HOST)),
            ],
            want: Ok(vec![100, 100, 100, 0]),
        },
        Case {
            name: "an existing pod's preferred affinity, and the pod's own preference",
            pl: InterPodAffinity::default(),
            pod: web().preferred_pod_affinity(2, affinity_term(selector_in("app", &["x"]), HOST)),
            nodes: nodes(),
            pods: vec![
                bound("x", "n2", &[("app", "x")])
                    .preferred_pod_affinity(6, affinity_term(selector_in("app", &["web"]), ZONE)),
            ],
            // raw n1 = 6, n2 = 6 + 2 = 8.
            want: Ok(vec![75, 100, 0, 0]),
        },
        Case {
            name: "existing pods' preferences ignored for a pod without its own",
            pl: args(1, true),
            pod: web(),
            nodes: nodes(),
            pods: vec![
                bound("x", "n4", &[("app", "x")])
                    .preferred_pod_anti_affinity(10, affinity_term(selector_in("app", &["web"]), HOST)),
            ],
            want: Err(SKIP),
        },
        Case {
            name: "existing pods' preferences kept for a pod with its own",
            pl: args(1, true),
            pod: web().preferred_pod_affinity(1, affinity_term(selector_in("app", &["none"]), HOST)),
            nodes: nodes(),
            pods: vec![
                bound("x", "n4", &[("app", "x")])
                    .preferred_pod_anti_affinity(10, affinity_term(selector_in("app", &["web"]), HOST)),
            ],
            want: Ok(vec![100, 100, 100, 0]),
        },
        Case {
            name: "nothing to score",
            pl: InterPodAffinity::default(),
            pod: web(),
            nodes: nodes(),
            pods: vec![bound("db", "n1", &[("app", "db")])],
            want: Err(SKIP),
        },
        Case {
            name: "an existing pod's term for its own namespace only",
            pl: InterPodAffinity::default(),
            pod: web(),
            nodes: nodes(),
            pods: vec![
                bound("x", "n1", &[("app", "x")])
                    .namespace("team-a")
                    .preferred_pod_affinity(4, affinity_term(selector_in("app", &["web"]), ZONE)),
            ],
            want: Err(SKIP),
        },
        Case {
            name: "pods on nodes without labels do not count",
            pl: InterPodAffinity::default(),
            pod: web().preferred_pod_affinity(5, affinity_term(selector_in("app", &["db"]), ZONE)),
            nodes: vec![NodeBuilder::new("n1"), NodeBuilder::new("n2").label(ZONE, "a")],
            pods: vec![bound("db", "n1", &[("app", "db")])],
            want: Err(SKIP),
        },
        Case {
            name: "equal scores normalise to 0",
            pl: InterPodAffinity::default(),
            pod: web().preferred_pod_affinity(5, affinity_term(selector_in("app", &["db"]), ZONE)),
            nodes: vec![
                NodeBuilder::new("n1").label(ZONE, "a"),
                NodeBuilder::new("n2").label(ZONE, "a"),
            ],
            pods: vec![bound("db", "n1", &[("app", "db")])],
            want: Ok(vec![0, 0]),
        },
    ];
    for c in cases {
        let pod = c.pod.info();
        assert_eq!(scores(&c.pl, &pod, place(c.nodes, c.pods)), c.want, "{}", c.name);
    }
    assert_eq!(
        InterPodAffinity::default()
            .pre_score(&mut CycleState::new(), &web().info(), &[])
            .code(),
        SKIP,
        "no nodes"
    );
}

#[test]
fn args_validation() {
    let cases: [(serde_json::Value, Result<(), &str>); 5] = [
        (serde_json::Value::Null, Ok(())),
        (
            serde_json::json!({"hardPodAffinityWeight": 100, "ignorePreferredTermsOfExistingPods": true}),
            Ok(()),
        ),
        (serde_json::json!({"hardPodAffinityWeight": 0}), Ok(())),
        (
            serde_json::json!({"hardPodAffinityWeight": 101}),
            Err("hardPodAffinityWeight: Invalid value: 101: not in valid range [0, 100]"),
        ),
        (
            serde_json::json!({"hardPodAffinityWeight": -1}),
            Err("hardPodAffinityWeight: Invalid value: -1: not in valid range [0, 100]"),
        ),
    ];
    for (args, want) in cases {
        let got = decode_args::<InterPodAffinityArgs>(&args)
            .and_then(|a| InterPodAffinity::new(&a, None).map(|_| ()))
            .map_err(|e| e.to_string());
        assert_eq!(got, want.map_err(str::to_string), "{args}");
    }
}

fn pod_obj(p: PodBuilder) -> Option<EventObject> {
    Some(EventObject::pod(p.build()))
}

fn node_obj(n: NodeBuilder) -> Option<EventObject> {
    Some(EventObject::Node(Arc::new(n.build())))
}

fn hint(
    pl: &InterPodAffinity,
    resource: EventResource,
    pod: &PodBuilder,
    old: Option<EventObject>,
    new: Option<EventObject>,
) -> QueueingHint {
    let registered = pl.events_to_register();
    let e = registered.iter().find(|e| e.event.resource == resource).unwrap();
    (e.hint.as_ref().unwrap())(&pod.clone().build(), old.as_ref(), new.as_ref()).unwrap()
}

#[test]
fn pod_event_hints() {
    use QueueingHint::{Queue, Skip};
    let pl = InterPodAffinity::default();
    let wants_db = PodBuilder::new("w")
        .label("app", "web")
        .pod_affinity(affinity_term(selector_in("app", &["db"]), HOST));
    let hates_web = PodBuilder::new("w")
        .label("app", "web")
        .pod_anti_affinity(affinity_term(selector_in("app", &["web"]), HOST));
    let self_group = PodBuilder::new("w")
        .label("app", "db")
        .pod_affinity(affinity_term(selector_in("app", &["db"]), HOST));
    let plain = PodBuilder::new("w").label("app", "web");
    struct Case {
        name: &'static str,
        waiting: PodBuilder,
        old: Option<EventObject>,
        new: Option<EventObject>,
        want: QueueingHint,
    }
    let cases = vec![
        Case {
            name: "db pod bound",
            waiting: wants_db.clone(),
            old: None,
            new: pod_obj(bound("d", "n1", &[("app", "db")])),
            want: Queue,
        },
        Case {
            name: "other pod bound",
            waiting: wants_db.clone(),
            old: None,
            new: pod_obj(bound("x", "n1", &[("app", "x")])),
            want: Skip,
        },
        Case {
            name: "unbound db pod",
            waiting: wants_db.clone(),
            old: None,
            new: pod_obj(PodBuilder::new("d").label("app", "db")),
            want: Skip,
        },
        Case {
            name: "pod relabelled into the group",
            waiting: wants_db.clone(),
            old: pod_obj(bound("d", "n1", &[("app", "x")])),
            new: pod_obj(bound("d", "n1", &[("app", "db")])),
            want: Queue,
        },
        Case {
            name: "hated pod relabelled",
            waiting: hates_web.clone(),
            old: pod_obj(bound("v", "n1", &[("app", "web")])),
            new: pod_obj(bound("v", "n1", &[("app", "api")])),
            want: Queue,
        },
        Case {
            name: "unrelated relabel",
            waiting: hates_web.clone(),
            old: pod_obj(bound("v", "n1", &[("app", "x")])),
            new: pod_obj(bound("v", "n1", &[("app", "y")])),
            want: Skip,
        },
        Case {
            name: "hated pod deleted",
            waiting: hates_web.clone(),
            old: pod_obj(bound("v", "n1", &[("app", "web")])),
            new: None,
            want: Queue,
        },
        Case {
            name: "other pod deleted",
            waiting: hates_web.clone(),
            old: pod_obj(bound("v", "n1", &[("app", "x")])),
            new: None,
            want: Skip,
        },
        Case {
            name: "deleted pod hated the waiting pod",
            waiting: plain.clone(),
            old: pod_obj(
                bound("h", "n1", &[("app", "x")])
                    .pod_anti_affinity(affinity_term(selector_in("app", &["web"]), ZONE)),
            ),
            new: None,
            want: Queue,
        },
        Case {
            name: "deleted pod's anti-affinity did not select the waiting pod",
            waiting: plain.clone(),
            old: pod_obj(
                bound("h", "n1", &[("app", "x")])
                    .pod_anti_affinity(affinity_term(selector_in("app", &["db"]), ZONE)),
            ),
            new: None,
            want: Skip,
        },
        Case {
            // Beyond upstream (its table has no such case): with the group's last member gone,
            // the pod may start the group on its own; upstream waits for the timeout.
            name: "last group member deleted: the pod may start the group",
            waiting: self_group.clone(),
            old: pod_obj(bound("d", "n1", &[("app", "db")])),
            new: None,
            want: Queue,
        },
        Case {
            name: "the waiting pod's own relabel",
            waiting: plain.clone(),
            old: pod_obj(PodBuilder::new("w").label("app", "web")),
            new: pod_obj(PodBuilder::new("w").label("app", "api")),
            want: Queue,
        },
        Case {
            name: "another unscheduled pod's relabel",
            waiting: hates_web.clone(),
            old: pod_obj(PodBuilder::new("v").label("app", "web")),
            new: pod_obj(PodBuilder::new("v").label("app", "api")),
            want: Skip,
        },
        Case {
            name: "group member deleted, the pod cannot start the group",
            waiting: wants_db.clone(),
            old: pod_obj(bound("d", "n1", &[("app", "db")])),
            new: None,
            want: Skip,
        },
    ];
    for c in cases {
        assert_eq!(
            hint(&pl, EventResource::Pod, &c.waiting, c.old, c.new),
            c.want,
            "{}",
            c.name
        );
    }
}

#[test]
fn node_event_hints() {
    use QueueingHint::{Queue, Skip};
    let pl = InterPodAffinity::default();
    let wants_zone = PodBuilder::new("w").pod_affinity(affinity_term(selector_in("app", &["db"]), ZONE));
    let hates_zone = PodBuilder::new("w").pod_anti_affinity(affinity_term(selector_in("app", &["db"]), ZONE));
    let plain = PodBuilder::new("w");
    let z = |v: &str| NodeBuilder::new("n").label(ZONE, v);
    struct Case {
        name: &'static str,
        waiting: PodBuilder,
        old: Option<EventObject>,
        new: Option<EventObject>,
        want: QueueingHint,
    }
    let cases = vec![
        Case {
            name: "added with the affinity key",
            waiting: wants_zone.clone(),
            old: None,
            new: node_obj(z("a")),
            want: Queue,
        },
        Case {
            name: "added without it",
            waiting: wants_zone.clone(),
            old: None,
            new: node_obj(NodeBuilder::new("n")),
            want: Skip,
        },
        Case {
            name: "added, anti-affinity only",
            waiting: hates_zone.clone(),
            old: None,
            new: node_obj(NodeBuilder::new("n")),
            want: Queue,
        },
        Case {
            // Beyond upstream (its table has no such case): a pod without terms was rejected by
            // existing pods' anti-affinity, and a new node holds none of them.
            name: "added, no terms (existing pods' anti-affinity)",
            waiting: plain.clone(),
            old: None,
            new: node_obj(NodeBuilder::new("n")),
            want: Queue,
        },
        Case {
            name: "gained the affinity key",
            waiting: wants_zone.clone(),
            old: node_obj(NodeBuilder::new("n")),
            new: node_obj(z("a")),
            want: Queue,
        },
        Case {
            name: "affinity key moved",
            waiting: wants_zone.clone(),
            old: node_obj(z("a")),
            new: node_obj(z("b")),
            want: Queue,
        },
        Case {
            name: "gained an unrelated label",
            waiting: wants_zone.clone(),
            old: node_obj(z("a")),
            new: node_obj(z("a").label("x", "1")),
            want: Skip,
        },
        Case {
            name: "lost the anti-affinity key",
            waiting: hates_zone.clone(),
            old: node_obj(z("a")),
            new: node_obj(NodeBuilder::new("n")),
            want: Queue,
        },
        Case {
            name: "gained the anti-affinity key",
            waiting: hates_zone.clone(),
            old: node_obj(NodeBuilder::new("n")),
            new: node_obj(z("a")),
            want: Skip,
        },
        Case {
            name: "left a domain of no term of the pod: not a reason, as upstream",
            waiting: plain.clone(),
            old: node_obj(z("a").label("rack", "1")),
            new: node_obj(z("a")),
            want: Skip,
        },
        Case {
            name: "taints only",
            waiting: plain.clone(),
            old: node_obj(z("a")),
            new: node_obj(z("a").taint("k", "", "NoSchedule")),
            want: Skip,
        },
    ];
    for c in cases {
        assert_eq!(
            hint(&pl, EventResource::Node, &c.waiting, c.old, c.new),
            c.want,
            "{}",
            c.name
        );
    }
}

/// A waiting pod `p` with required affinity or anti-affinity terms, and other pods, as upstream's
/// queueing-hint tables build them.
mod upstream_tables {
    use super::*;

    const REGION: &str = "region";

    fn affine_in(key: &str, values: &[&str]) -> PodBuilder {
        PodBuilder::new("p").pod_affinity(affinity_term(selector_in(key, values), REGION))
    }

    fn hating_in(pod: PodBuilder, key: &str, values: &[&str]) -> PodBuilder {
        pod.pod_anti_affinity(affinity_term(selector_in(key, values), REGION))
    }

    fn other_on(node: &str, labels: &[(&str, &str)]) -> PodBuilder {
        bound("other", node, labels)
    }

    fn other_pending(labels: &[(&str, &str)]) -> PodBuilder {
        labels
            .iter()
            .fold(PodBuilder::new("other"), |p, (k, v)| p.label(k, v))
    }

    /// Upstream `Test_isSchedulableAfterAssignedPodChange`.
    #[test]
    fn is_schedulable_after_assigned_pod_change() {
        use QueueingHint::{Queue, Skip};
        let pl = InterPodAffinity::default();
        let scan = &["securityscan", "value2"][..];
        let wants_scan = affine_in("service", scan);
        let hates_scan = hating_in(PodBuilder::new("p"), "service", scan);
        let wants_aaa_and_bbb = PodBuilder::new("p")
            .pod_affinity(affinity_term(selector_exists("aaa"), "hostname"))
            .pod_affinity(affinity_term(selector_exists("bbb"), "hostname"));
        let hates_scan_or_web = hating_in(
            hating_in(PodBuilder::new("p"), "service", &["securityscan"]),
            "app",
            &["web"],
        );
        let cases: Vec<(
            &str,
            PodBuilder,
            Option<PodBuilder>,
            Option<PodBuilder>,
            QueueingHint,
        )> = vec![
            (
                "add a pod which matches the pod affinity",
                wants_scan.clone(),
                None,
                Some(other_on("fake-node", &[("service", "securityscan")])),
                Queue,
            ),
            (
                "add an un-scheduled pod",
                wants_scan.clone(),
                None,
                Some(other_pending(&[("service", "securityscan")])),
                Skip,
            ),
            (
                "add a pod which doesn't match the pod affinity",
                wants_scan.clone(),
                None,
                Some(other_on("fake-node", &[("aaa", "a")])),
                Skip,
            ),
            (
                "update a pod from non-match to match pod affinity",
                wants_scan.clone(),
                Some(other_on("fake-node", &[("aaa", "a")])),
                Some(other_on("fake-node", &[("service", "securityscan")])),
                Queue,
            ),
            (
                "the updating pod matches target pod's affinity both before and after label changes",
                wants_scan.clone(),
                Some(other_on("fake-node", &[("service", "value2")])),
                Some(other_on("fake-node", &[("service", "securityscan")])),
                Skip,
            ),
            (
                "update an un-scheduled pod",
                wants_scan.clone(),
                Some(other_pending(&[("aaa", "a")])),
                Some(other_pending(&[("service", "securityscan")])),
                Skip,
            ),
            (
                "update a pod from match to non-match the pod affinity",
                wants_scan.clone(),
                Some(other_on("fake-node", &[("service", "securityscan")])),
                Some(other_on("fake-node", &[("aaa", "a")])),
                Skip,
            ),
            (
                "update a pod from match to non-match pod's affinity - multiple terms case",
                wants_aaa_and_bbb.clone(),
                Some(other_on("fake-node", &[("aaa", "a")])),
                Some(other_on("fake-node", &[("service", "securityscan")])),
                Skip,
            ),
            (
                "update a pod from non-match to match pod's affinity - multiple terms case",
                wants_aaa_and_bbb.clone(),
                Some(other_on("fake-node", &[("aaa", "a")])),
                Some(other_on("fake-node", &[("aaa", ""), ("bbb", "")])),
                Queue,
            ),
            (
                "modify pod label to change it from satisfying pod anti-affinity to not satisfying anti-affinity",
                hates_scan.clone(),
                Some(other_on("fake-node", &[("service", "securityscan")])),
                Some(other_on("fake-node", &[("service", "aaaa")])),
                Queue,
            ),
            (
                "modify pod label to change it from not satisfying pod anti-affinity to satisfying anti-affinity",
                hates_scan.clone(),
                Some(other_on("fake-node", &[("service", "bbb")])),
                Some(other_on("fake-node", &[("service", "securityscan")])),
                Skip,
            ),
            (
                "delete a pod which doesn't match pod's anti-affinity",
                hates_scan.clone(),
                Some(other_on("fake-node", &[("aaa", "a")])),
                None,
                Skip,
            ),
            (
                "delete a pod which matches pod's anti-affinity",
                hates_scan.clone(),
                Some(other_on("fake-node", &[("service", "securityscan")])),
                None,
                Queue,
            ),
            (
                "delete a pod with anti-affinity that matches pending pod",
                PodBuilder::new("p").label("service", "securityscan"),
                Some(hating_in(other_on("fake-node", &[]), "service", scan)),
                None,
                Queue,
            ),
            (
                "delete a pod with anti-affinity that doesn't match pending pod",
                PodBuilder::new("p").label("service", "foo"),
                Some(hating_in(other_on("fake-node", &[]), "service", scan)),
                None,
                Skip,
            ),
            (
                "delete a pod which doesn't match pending pod's anti-affinity and has anti-affinity that doesn't match pending pod",
                hating_in(PodBuilder::new("p"), "service", scan).label("service", "foo"),
                Some(hating_in(
                    other_on("fake-node", &[("service", "foo")]),
                    "service",
                    scan,
                )),
                None,
                Skip,
            ),
            (
                "delete a nominated pod which doesn't match pod's anti-affinity",
                hates_scan.clone(),
                Some(other_pending(&[("aaa", "a")]).nominated_node("fake-node")),
                None,
                Skip,
            ),
            (
                "delete a nominated pod which matches pod's anti-affinity",
                hates_scan.clone(),
                Some(other_pending(&[("service", "securityscan")]).nominated_node("fake-node")),
                None,
                Queue,
            ),
            (
                "modify pod label to change it from matching only one of target pod's anti-affinity terms to matching none",
                hates_scan_or_web.clone(),
                Some(other_on(
                    "fake-node",
                    &[("service", "securityscan"), ("app", "bar")],
                )),
                Some(other_on("fake-node", &[("service", "foo"), ("app", "bar")])),
                Queue,
            ),
            (
                "modify pod label but it still matches one of target pod's anti-affinity terms",
                hates_scan_or_web.clone(),
                Some(other_on(
                    "fake-node",
                    &[("service", "securityscan"), ("app", "bar")],
                )),
                Some(other_on("fake-node", &[("service", "foo"), ("app", "web")])),
                Skip,
            ),
            (
                "delete a pod which matches only one of target pod's anti-affinity terms",
                hates_scan_or_web.clone(),
                Some(other_on("fake-node", &[("service", "securityscan")])),
                None,
                Queue,
            ),
            (
                "delete a pod with anti-affinity that matches pending pod on only one term",
                PodBuilder::new("p").label("service", "securityscan"),
                Some(hating_in(
                    hating_in(other_on("fake-node", &[]), "service", &["securityscan"]),
                    "app",
                    &["web"],
                )),
                None,
                Queue,
            ),
        ];
        for (name, waiting, old, new, want) in cases {
            assert_eq!(
                hint(
                    &pl,
                    EventResource::Pod,
                    &waiting,
                    old.and_then(pod_obj),
                    new.and_then(pod_obj)
                ),
                want,
                "{name}"
            );
        }
    }

    /// Upstream `Test_isSchedulableAfterTargetPodUpdateLabel`: the waiting pod's own label update
    /// always requeues it (upstream's `TargetPod` event; ours reaches the same hint as an
    /// unscheduled-pod label update).
    #[test]
    fn is_schedulable_after_target_pod_update_label() {
        let pl = InterPodAffinity::default();
        let pod = PodBuilder::new("p").label("foo", "baz");
        let registered = pl.events_to_register();
        let own_relabel = ClusterEvent::new(
            EventResource::UnscheduledPod,
            ActionType::UPDATE_POD_LABEL,
            "UnscheduledPodUpdatePodLabel",
        );
        assert!(
            registered.iter().any(|e| e.event.matches(&own_relabel)),
            "the plugin must hear the waiting pod's own relabel"
        );
        assert_eq!(
            hint(
                &pl,
                EventResource::Pod,
                &pod,
                pod_obj(pod.clone()),
                pod_obj(pod.clone())
            ),
            QueueingHint::Queue
        );
    }

    /// Upstream `Test_isSchedulableAfterNodeChange`.
    #[test]
    fn is_schedulable_after_node_change() {
        use QueueingHint::{Queue, Skip};
        let pl = InterPodAffinity::default();
        let scan = &["securityscan", "value2"][..];
        let wants_zone = PodBuilder::new("p").pod_affinity(affinity_term(selector_in("service", scan), ZONE));
        let wants_region = affine_in("service", scan);
        let hates_zone = PodBuilder::new("p")
            .pod_anti_affinity(affinity_term(label_selector(&[("another", "label")], &[]), ZONE));
        let node = |labels: &[(&str, &str)]| {
            labels
                .iter()
                .fold(NodeBuilder::new("node-a"), |n, (k, v)| n.label(k, v))
        };
        let cases: Vec<(&str, PodBuilder, Option<NodeBuilder>, NodeBuilder, QueueingHint)> = vec![
            (
                "add a new node with matched pod affinity topologyKey",
                wants_zone.clone(),
                None,
                node(&[(ZONE, "zone1")]),
                Queue,
            ),
            (
                "add a new node without matched topologyKey",
                wants_region.clone(),
                None,
                node(&[(ZONE, "zone1")]),
                Skip,
            ),
            (
                "update node label but not topologyKey",
                wants_zone.clone(),
                Some(node(&[("aaa", "a")])),
                node(&[("aaa", "b")]),
                Skip,
            ),
            (
                "update node label that isn't related to the pod affinity",
                wants_zone.clone(),
                Some(node(&[(ZONE, "zone1")])),
                node(&[(ZONE, "zone1"), ("unrelated-label", "unrelated")]),
                Skip,
            ),
            (
                "update node with different affinity topologyKey value",
                wants_zone.clone(),
                Some(node(&[(ZONE, "zone1")])),
                node(&[(ZONE, "zone2")]),
                Queue,
            ),
            (
                "update node to have the affinity topology label",
                wants_zone.clone(),
                Some(node(&[("aaa", "a")])),
                node(&[(ZONE, "zone1")]),
                Queue,
            ),
            (
                "add a new node with matched pod anti-affinity topologyKey",
                hates_zone.clone(),
                None,
                node(&[(ZONE, "zone1")]),
                Queue,
            ),
            (
                "add a new node without matched pod anti-affinity topologyKey",
                hates_zone.clone(),
                None,
                node(&[]),
                Queue,
            ),
            (
                "update node label that isn't related to the pod anti-affinity",
                hates_zone.clone(),
                Some(node(&[(ZONE, "zone1")])),
                node(&[(ZONE, "zone1"), ("unrelated-label", "unrelated")]),
                Skip,
            ),
            (
                "update node with different anti-affinity topologyKey value",
                hates_zone.clone(),
                Some(node(&[(ZONE, "zone1")])),
                node(&[(ZONE, "zone2")]),
                Queue,
            ),
            (
                "update node to have the anti-affinity topology label",
                hates_zone.clone(),
                Some(node(&[("aaa", "a")])),
                node(&[(ZONE, "zone1")]),
                Skip,
            ),
            (
                "update node label not to have anti-affinity topology label",
                hates_zone.clone(),
                Some(node(&[(ZONE, "zone1")])),
                node(&[("aaa", "a")]),
                Queue,
            ),
        ];
        for (name, waiting, old, new, want) in cases {
            assert_eq!(
                hint(
                    &pl,
                    EventResource::Node,
                    &waiting,
                    old.and_then(node_obj),
                    node_obj(new)
                ),
                want,
                "{name}"
            );
        }
    }
}

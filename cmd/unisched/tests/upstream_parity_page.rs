//! `docs/upstream-parity.md` says what unisched does with each upstream plugin, configuration
//! field and scheduler gate. These tests keep its rows well-formed and, where the code can say,
//! true: the plugins unisched registers, the gates `crates/features` implements, and that unisched
//! loads a configuration setting every field the page lists. That the page lists everything
//! upstream has is the real-control-plane tier's check (it needs upstream's Go
//! sources): `upstream_tier.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod parity;

use std::collections::{BTreeMap, BTreeSet};

use parity::{
    CONFIGURATION, GATES, PLUGIN_ARGS, PLUGINS, REASON_COLUMN, STATE_COLUMN, STATES, Table, code_spans,
    read_page, table,
};
use serde_json::Value;
use unisched_features::{FeatureGates, Implemented, SCHEDULER_GATES, Stage, UNISCHED_DEFAULTS};
use unisched_framework::config::KubeSchedulerConfiguration;

/// The first column of each table: what the row is about.
fn subject(table: &Table) -> &str {
    table.columns[0].as_str()
}

#[test]
fn every_row_is_done_different_or_missing_and_every_difference_says_why() {
    let tables = read_page();
    let mut problems = Vec::new();
    let mut counts = Vec::new();
    for heading in [PLUGINS, CONFIGURATION, PLUGIN_ARGS, GATES] {
        let t = table(&tables, heading);
        assert!(!t.rows.is_empty(), "table {heading:?} is empty");
        let state = t.column(STATE_COLUMN);
        let reason = t.column(REASON_COLUMN);
        let first = t.column(subject(t));
        let mut tally: BTreeMap<&str, usize> = STATES.iter().map(|s| (*s, 0)).collect();
        for row in &t.rows {
            let word = row.cells[state].as_str();
            match tally.get_mut(word) {
                Some(n) => *n += 1,
                None => problems.push(format!(
                    "line {}: state {word:?} is not one of {STATES:?}",
                    row.line
                )),
            }
            if word == "different" && row.cells[reason].is_empty() {
                problems.push(format!("line {}: `different` without a reason", row.line));
            }
            if code_spans(&row.cells[first]).is_empty() {
                problems.push(format!(
                    "line {}: the first cell names nothing in `code`",
                    row.line
                ));
            }
        }
        counts.push(format!(
            "{heading}: {} rows, {}",
            t.rows.len(),
            tally
                .iter()
                .map(|(s, n)| format!("{n} {s}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    assert!(
        problems.is_empty(),
        "docs/upstream-parity.md:\n{}",
        problems.join("\n")
    );
    eprintln!("{}", counts.join("\n"));
}

/// A plugin's own row (its cell is just its name) says `missing` exactly when unisched does not
/// register it, and every plugin unisched registers has a row.
#[test]
fn plugin_rows_agree_with_the_in_tree_registry() {
    let tables = read_page();
    let t = table(&tables, PLUGINS);
    let (registry, _) = unisched_plugins::testing::in_tree_registry();
    let registered: BTreeSet<&str> = registry.names().collect();
    let state = t.column(STATE_COLUMN);
    let mut own_rows = BTreeSet::new();
    let mut problems = Vec::new();
    for (row, cell) in t.cells(subject(t)) {
        let spans = code_spans(cell);
        // A behaviour row (`VolumeBinding`: storage capacity) is about part of a plugin.
        let [name] = spans.as_slice() else { continue };
        if cell != format!("`{name}`") {
            continue;
        }
        own_rows.insert(*name);
        let missing = row.cells[state] == "missing";
        if missing == registered.contains(name) {
            problems.push(format!(
                "line {}: {name} is {}registered but its row says {}",
                row.line,
                if missing { "" } else { "not " },
                row.cells[state]
            ));
        }
    }
    for name in registered.difference(&own_rows) {
        problems.push(format!("{name} is registered but has no row of its own"));
    }
    assert!(
        problems.is_empty(),
        "docs/upstream-parity.md:\n{}",
        problems.join("\n")
    );
}

/// The page's word for a stage, as its upstream column writes it.
fn stage_word(stage: Stage) -> &'static str {
    match stage {
        Stage::PreAlpha => "pre-alpha",
        Stage::Alpha => "alpha",
        Stage::Beta => "beta",
        Stage::Ga => "GA",
        Stage::Deprecated => "deprecated",
    }
}

/// Every gate `crates/features` lists as the scheduler's has a row; each row's upstream stage and
/// default are the gate table's; a gate whose default unisched changes on purpose is `different`;
/// one unisched runs at another value than upstream's default, not on purpose, is `missing`; one
/// it reads both ways, at upstream's default, is `done`.
#[test]
fn gate_rows_agree_with_crates_features() {
    let tables = read_page();
    let t = table(&tables, GATES);
    let state = t.column(STATE_COLUMN);
    let upstream = t.column(t.columns[1].as_str());
    let defaults = FeatureGates::default();
    let known: BTreeMap<&str, (Stage, bool)> = defaults.all().map(|(n, s, on)| (n, (s, on))).collect();
    let deliberate: BTreeMap<&str, bool> = UNISCHED_DEFAULTS.iter().map(|(n, v, _)| (*n, *v)).collect();
    let upstream_default = |name: &str| match deliberate.get(name) {
        Some(ours) => !ours,
        None => known[name].1,
    };
    let mut rows = BTreeMap::new();
    let mut problems = Vec::new();
    for (row, cell) in t.cells(subject(t)) {
        let name = code_spans(cell)[0];
        rows.insert(name, row);
        let Some((stage, _)) = known.get(name) else {
            problems.push(format!(
                "line {}: {name} is not a Kubernetes 1.37.2 gate",
                row.line
            ));
            continue;
        };
        let expected = format!(
            "{}, {}",
            stage_word(*stage),
            if upstream_default(name) { "on" } else { "off" }
        );
        if !row.cells[upstream].starts_with(&expected) {
            problems.push(format!(
                "line {}: {name} is {expected} upstream, the row says {:?}",
                row.line, row.cells[upstream]
            ));
        }
    }
    for (name, implemented) in SCHEDULER_GATES {
        let Some(row) = rows.get(name) else {
            problems.push(format!("{name} (in SCHEDULER_GATES) has no row"));
            continue;
        };
        let word = row.cells[state].as_str();
        let expected = if deliberate.contains_key(name) {
            Some("different")
        } else {
            match implemented {
                Implemented::Only(runs) if *runs != upstream_default(name) => Some("missing"),
                Implemented::Both => Some("done"),
                // Runs upstream's default only: done, or missing when that default is only partly
                // there; the row says which.
                Implemented::Only(_) => None,
            }
        };
        if let Some(expected) = expected
            && word != expected
        {
            problems.push(format!(
                "line {}: {name} should be {expected}, the row says {word}",
                row.line
            ));
        }
    }
    for (name, _) in defaults.gaps() {
        if rows.get(name).is_some_and(|r| r.cells[state] != "missing") {
            problems.push(format!(
                "{name} is logged as not implemented but its row is not missing"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/upstream-parity.md:\n{}",
        problems.join("\n")
    );
}

/// A configuration an operator might copy from kube-scheduler, setting every field the
/// configuration and args tables list (a `missing` field included: it must still load).
const EVERY_FIELD: &str = r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
parallelism: 8
leaderElection:
  leaderElect: true
  leaseDuration: 15s
  renewDeadline: 10s
  retryPeriod: 2s
  resourceLock: leases
  resourceName: unisched
  resourceNamespace: kube-system
clientConnection:
  kubeconfig: /etc/unisched/kubeconfig
  qps: 50
  burst: 100
  contentType: application/vnd.kubernetes.protobuf
  acceptContentTypes: application/json
enableProfiling: false
enableContentionProfiling: false
percentageOfNodesToScore: 0
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 10
delayCacheUntilActive: true
profiles:
- schedulerName: unisched
  percentageOfNodesToScore: 50
  plugins:
    multiPoint:
      enabled: [{name: NodeResourcesFit, weight: 2}]
      disabled: [{name: ImageLocality, weight: 1}]
    preEnqueue: {enabled: [], disabled: []}
    queueSort: {enabled: [], disabled: []}
    preFilter: {enabled: [], disabled: []}
    filter: {enabled: [], disabled: []}
    postFilter: {enabled: [], disabled: []}
    preScore: {enabled: [], disabled: []}
    score: {enabled: [], disabled: []}
    reserve: {enabled: [], disabled: []}
    permit: {enabled: [], disabled: []}
    preBind: {enabled: [], disabled: []}
    bind: {enabled: [], disabled: []}
    postBind: {enabled: [], disabled: []}
    placementGenerate: {enabled: [], disabled: []}
    placementScore: {enabled: [], disabled: []}
    podGroupPostFilter: {enabled: [], disabled: []}
  pluginConfig:
  - name: DefaultPreemption
    args: {minCandidateNodesPercentage: 10, minCandidateNodesAbsolute: 100}
  - name: InterPodAffinity
    args: {hardPodAffinityWeight: 1, ignorePreferredTermsOfExistingPods: false}
  - name: NodeResourcesFit
    args:
      ignoredResources: [example.com/ignored]
      ignoredResourceGroups: [example.org]
      scoringStrategy:
        type: RequestedToCapacityRatio
        resources: [{name: cpu, weight: 1}]
        requestedToCapacityRatio:
          shape: [{utilization: 0, score: 0}, {utilization: 100, score: 10}]
      includeDRAFootprint: true
  - name: PodTopologySpread
    args:
      defaultConstraints:
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
      defaultingType: List
  - name: NodeResourcesBalancedAllocation
    args: {resources: [{name: cpu, weight: 1}], includeDRAFootprint: true}
  - name: VolumeBinding
    args:
      bindTimeoutSeconds: 600
      shape: [{utilization: 0, score: 10}, {utilization: 100, score: 0}]
  - name: NodeAffinity
    args:
      addedAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms: [{matchExpressions: [{key: example.com/pool, operator: Exists}]}]
  - name: DynamicResources
    args: {filterTimeout: 10s, bindingTimeout: 600s}
extenders:
- urlPrefix: https://extender.example.com/scheduler
  filterVerb: filter
  preemptVerb: preempt
  prioritizeVerb: prioritize
  weight: 1
  bindVerb: bind
  enableHTTPS: true
  tlsConfig:
    insecure: false
    serverName: extender.example.com
    certFile: /etc/unisched/extender.crt
    keyFile: /etc/unisched/extender.key
    caFile: /etc/unisched/ca.crt
    certData: Y2VydA==
    keyData: a2V5
    caData: Y2E=
  httpTimeout: 5s
  nodeCacheCapable: false
  managedResources: [{name: example.com/gpu, ignoredByScheduler: true}]
  ignorable: false
"#;

/// Every dotted path set in a document (`profiles[].plugins.filter.enabled[].name`).
fn set_paths(value: &Value, path: &str, out: &mut Vec<String>) {
    if !path.is_empty() {
        out.push(path.to_string());
    }
    match value {
        Value::Object(fields) => {
            for (key, child) in fields {
                let child_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                set_paths(child, &child_path, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                set_paths(item, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

/// unisched loads [`EVERY_FIELD`] (plugin args included), and it sets every field of the
/// configuration and args tables, so each row's field is one unisched accepts.
#[test]
fn unisched_loads_a_configuration_with_every_field_the_page_lists() {
    let config = KubeSchedulerConfiguration::from_yaml(EVERY_FIELD).expect("unisched loads every field");
    unisched_plugins::validate_plugin_args(&config).expect("unisched accepts every args field");

    let document: Value = serde_yaml::from_str(EVERY_FIELD).unwrap();
    let mut paths = Vec::new();
    set_paths(&document, "", &mut paths);
    let tables = read_page();
    let mut unset = Vec::new();
    let fields = table(&tables, CONFIGURATION);
    for field in fields.names(subject(fields)) {
        if !paths.iter().any(|p| parity::path_matches(field, p)) {
            unset.push(field.to_string());
        }
    }

    let args = table(&tables, PLUGIN_ARGS);
    let (kind_column, field_column) = (args.column(subject(args)), args.column(&args.columns[1]));
    for row in &args.rows {
        let (Some(kind), Some(field)) = (
            code_spans(&row.cells[kind_column]).first().copied(),
            code_spans(&row.cells[field_column]).first().copied(),
        ) else {
            continue;
        };
        let plugin = kind.strip_suffix("Args").unwrap_or(kind);
        let entry = document["profiles"][0]["pluginConfig"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == plugin);
        let mut args_paths = Vec::new();
        if let Some(entry) = entry {
            set_paths(&entry["args"], "", &mut args_paths);
        }
        if !args_paths.iter().any(|p| parity::path_matches(field, p)) {
            unset.push(format!("{kind} {field}"));
        }
    }
    assert!(
        unset.is_empty(),
        "EVERY_FIELD does not set these rows' fields:\n{}",
        unset.join("\n")
    );
}

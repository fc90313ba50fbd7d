//! The PodGroup workloads (`e2e/perf/podgroup.yaml`, upstream's podgroup scheduler_perf cases) at
//! smoke sizes in engine mode: every measured pod bound, so every group whole. And two small
//! workloads that only the pod-group cycle passes: a gang one pod too big for the cluster binds
//! none of its pods (one by one, all but one would bind), and a gang that fits the cluster but no
//! single rack binds none under its topology constraint (the first also in full mode).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use unisched_bench::{Catalog, Mode, RunOptions, RunReport};

fn run(catalog: &Catalog, name: &str, mode: Mode) -> RunReport {
    let w = catalog.workload(name, true).unwrap();
    unisched_bench::run(&w, mode, &RunOptions::default()).unwrap()
}

fn engine(catalog: &Catalog, name: &str) -> RunReport {
    run(catalog, name, Mode::Engine)
}

#[test]
fn every_podgroup_workload_binds_every_pod_in_engine_mode() {
    let catalog = Catalog::embedded().unwrap();
    let names: Vec<String> = ["GangScheduling", "BasicScheduling", "TopologyAwareScheduling"]
        .iter()
        .flat_map(|case| catalog.select(case))
        .collect();
    assert_eq!(names.len(), 18, "{names:?}");
    for name in &names {
        let r = engine(&catalog, name);
        let ctx = serde_json::to_string_pretty(&r).unwrap();
        assert!(!r.timed_out, "{name} timed out: {ctx}");
        assert!(r.measured_pods > 0, "{name}: {ctx}");
        assert_eq!(r.undecided, 0, "{name}: {ctx}");
        assert_eq!(r.unschedulable, 0, "{name}: {ctx}");
        assert_eq!(r.scheduled, r.measured_pods, "{name}: not every pod bound: {ctx}");
    }
}

const NODE: &str = "apiVersion: v1
kind: Node
metadata:
  name: node-{{.Index}}
  labels: {topology.kubernetes.io/rack: rack-{{.Index}}}
status:
  allocatable: {pods: \"110\", cpu: \"1\", memory: 32Gi}
  conditions: [{type: Ready, status: \"True\"}]
";

const POD: &str = "apiVersion: v1
kind: Pod
metadata: {generateName: p-}
spec:
  schedulingGroup: {podGroupName: g-0}
  containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]
";

/// One gang `g-0` of `pods` pods (minCount = pods) on `nodes` one-CPU nodes (10 pods each), each
/// node its own rack; `topology` adds the one-rack constraint.
fn gang_catalog(nodes: usize, pods: usize, topology: bool) -> Catalog {
    let constraint = if topology {
        "\n  schedulingConstraints:\n    topology: [{key: topology.kubernetes.io/rack}]"
    } else {
        ""
    };
    let group = format!(
        "apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {{name: g-{{{{.Index}}}}}}\n\
         spec:\n  schedulingPolicy:\n    gang: {{minCount: {{{{.minCount}}}}}}{constraint}\n"
    );
    let workload = format!(
        "name: Gang
featureGates: {{GenericWorkload: true, TopologyAwareWorkloadScheduling: true}}
workloadTemplate:
- opcode: createNodes
  count: {nodes}
  nodeTemplatePath: templates/node.yaml
- opcode: createPodGroups
  count: 1
  namespace: ns
  templatePath: templates/group.yaml
  templateParams: {{minCount: {pods}}}
- opcode: createPods
  count: 1
  countMultiplier: {pods}
  namespace: ns
  podTemplatePath: templates/pod.yaml
  collectMetrics: true
workloads:
- name: one
"
    );
    Catalog::from_files(vec![
        ("templates/node.yaml".into(), NODE.into()),
        ("templates/pod.yaml".into(), POD.into()),
        ("templates/group.yaml".into(), group),
        ("gang.yaml".into(), workload),
    ])
    .unwrap()
}

#[test]
fn a_gang_that_does_not_fit_binds_none_of_its_pods() {
    let fits = engine(&gang_catalog(2, 20, false), "Gang/one");
    assert_eq!((fits.measured_pods, fits.scheduled), (20, 20), "{fits:?}");
    let too_big = engine(&gang_catalog(2, 21, false), "Gang/one");
    assert_eq!(too_big.measured_pods, 21);
    assert_eq!(too_big.scheduled, 0, "a gang is all or nothing: {too_big:?}");
    // The same through the runtime on the embedded control plane: its group path, not the
    // engine's copy of it.
    let full = run(&gang_catalog(2, 21, false), "Gang/one", Mode::Full);
    assert_eq!(full.measured_pods, 21);
    assert_eq!(full.scheduled, 0, "a gang is all or nothing: {full:?}");
}

#[test]
fn a_gang_that_fits_no_single_rack_binds_none_of_its_pods() {
    let one_rack = engine(&gang_catalog(2, 10, true), "Gang/one");
    assert_eq!(one_rack.scheduled, 10, "{one_rack:?}");
    let two_racks = engine(&gang_catalog(2, 20, true), "Gang/one");
    assert_eq!(two_racks.measured_pods, 20);
    assert_eq!(
        two_racks.scheduled, 0,
        "20 pods fit two racks, not one: {two_racks:?}"
    );
}

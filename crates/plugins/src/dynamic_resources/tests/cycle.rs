//! Whole scheduling and binding cycles through the framework, with the node cache, the DRA cache,
//! the plugin and the fake API: devices are never double-allocated and the CPU ledger holds.

use std::collections::BTreeSet;

use unisched_cache::Cache;
use unisched_framework::config::KubeSchedulerProfile;
use unisched_framework::{
    CycleOutcome, Framework, NoNominations, SchedulingAlgorithm, run_binding_cycle, run_scheduling_cycle,
};

use super::*;
use crate::testing::RecordingBinder;
use crate::{PluginContext, Registry};

fn framework(e: &Env) -> (Framework, Arc<RecordingBinder>) {
    let binder = RecordingBinder::new();
    let ctx = PluginContext::new(binder.clone()).with_dra(e.dra.clone(), e.api.clone() as Arc<dyn DraApi>);
    (
        Framework::new(&KubeSchedulerProfile::default(), &Registry::in_tree(ctx)).unwrap(),
        binder,
    )
}

/// A node with `cpu` CPUs, 16Gi memory and 110 pods in the node cache.
fn add_node(cache: &Cache, name: &str, cpu: &str) {
    cache.add_node(Arc::new(
        NodeBuilder::new(name)
            .alloc("cpu", cpu)
            .alloc("memory", "16Gi")
            .alloc("pods", "110")
            .build(),
    ));
}

/// Runs one pod through both cycles; `Ok(node)` or `Err(message)`.
fn schedule(
    fwk: &Framework,
    algo: &mut SchedulingAlgorithm,
    cache: &Cache,
    pod: Pod,
) -> Result<String, String> {
    match run_scheduling_cycle(
        fwk,
        algo,
        cache,
        &NoNominations,
        Arc::new(PodInfo::new(pod)),
        false,
    ) {
        CycleOutcome::Assumed(task) => run_binding_cycle(fwk, cache, *task)
            .map(|b| b.node)
            .map_err(|f| f.message),
        CycleOutcome::Failed(f) => Err(f.message),
        CycleOutcome::Skipped(why) => Err(why.to_string()),
    }
}

#[test]
fn gpu_pods_never_share_devices() {
    let e = env();
    let cache = Cache::new();
    for n in ["n1", "n2", "n3"] {
        add_node(&cache, n, "8");
        e.slice(gpus(n, 2, "a100"));
    }
    let (fwk, binder) = framework(&e);
    let mut algo = SchedulingAlgorithm::new(2, None, 7);
    for i in 0..6 {
        let name = format!("p{i}");
        let mut c = gpu_claim(&name, 1);
        c.metadata.finalizers = Some(vec![FINALIZER.into()]);
        e.claim(c);
        schedule(&fwk, &mut algo, &cache, pod_with(&name, &[&name])).unwrap();
    }
    // Every device is allocated exactly once.
    let mut devices = BTreeSet::new();
    for c in e.api.claims() {
        let a = c.status.and_then(|s| s.allocation).unwrap();
        for r in a.devices.unwrap().results.unwrap() {
            assert!(
                devices.insert(format!("{}/{}", r.pool, r.device)),
                "double allocation of {}",
                r.device
            );
        }
    }
    assert_eq!(devices.len(), 6);
    assert_eq!(binder.bindings().len(), 6);
    // One claim status write per pod (the finalizer was there), plus the binding.
    assert_eq!(e.api.writes().len(), 6);
    // The seventh pod finds nothing, and says why.
    e.claim(gpu_claim("p6", 1));
    let err = schedule(&fwk, &mut algo, &cache, pod_with("p6", &["p6"])).unwrap_err();
    assert!(
        err.starts_with("0/3 nodes are available: 3 cannot allocate all claims. "),
        "{err}"
    );
    assert!(err.contains("claim default/p6 request gpu: on 3 nodes"), "{err}");
}

/// Once the devices are taken, later pods get a node veto for the nodes found short and for the
/// node without devices, so the algorithm passes over all of them. A pod that then fits nowhere
/// still gets the message the whole filter chain gives: the node without devices is rejected by
/// NodeResourcesFit (it runs first), not by DynamicResources, and the allocator explains the rest.
#[test]
fn vetoed_nodes_get_the_statuses_of_the_whole_filter_chain() {
    let e = env();
    let cache = Cache::new();
    for n in ["n1", "n2"] {
        add_node(&cache, n, "8");
        e.slice(gpus(n, 1, "a100"));
    }
    add_node(&cache, "n3", "500m");
    let (fwk, _) = framework(&e);
    let mut algo = SchedulingAlgorithm::new(2, None, 7);
    let mut placed = BTreeSet::new();
    for i in 0..4 {
        let name = format!("p{i}");
        let mut c = gpu_claim(&name, 1);
        c.metadata.finalizers = Some(vec![FINALIZER.into()]);
        e.claim(c);
        match schedule(&fwk, &mut algo, &cache, pod_with(&name, &[&name])) {
            Ok(node) => assert!(placed.insert(node), "{name}: a node used twice"),
            Err(message) => {
                assert_eq!(i, 2, "{name}: {message}");
                assert!(
                    message.starts_with(
                        "0/3 nodes are available: 1 Insufficient cpu, 2 cannot allocate all claims. "
                    ),
                    "{message}"
                );
                assert!(
                    message.contains("on 2 nodes the matching devices are already allocated"),
                    "{message}"
                );
                break;
            }
        }
    }
    assert_eq!(placed, BTreeSet::from(["n1".to_string(), "n2".to_string()]));
}

#[test]
fn cpu_ledger_counts_claims() {
    let e = env();
    cpu_class(&e);
    let cache = Cache::new();
    for n in ["n1", "n2"] {
        add_node(&cache, n, "4");
        // The device could serve 16 CPUs; the node's allocatable is what limits.
        e.slice(grouped_cpu_slice(n, "16"));
    }
    let (fwk, _) = framework(&e);
    let mut algo = SchedulingAlgorithm::new(2, None, 7);
    let mut placed = Vec::new();
    for i in 0..3 {
        let name = format!("p{i}");
        e.claim(cpu_claim(&name, "2"));
        placed.push(schedule(&fwk, &mut algo, &cache, pod_with(&name, &[&name])));
    }
    let ok: BTreeSet<String> = placed.iter().filter_map(|r| r.clone().ok()).collect();
    assert_eq!(ok.len(), 2, "{placed:?}");
    let err = placed[2].clone().unwrap_err();
    assert!(
        err.starts_with("0/2 nodes are available: 2 Insufficient cpu."),
        "{err}"
    );
    assert!(err.contains("(cpu short by at least 2)"), "{err}");
    let snap = cache.update_snapshot();
    for n in snap.nodes() {
        assert!(
            n.requested.milli_cpu <= n.allocatable.milli_cpu,
            "{}: {:?}",
            n.name(),
            n.requested
        );
        assert_eq!(n.requested.milli_cpu, 3000, "1 cpu spec + 2 through the claim");
    }
    // The pod status of a bound pod carries the statuses.
    let status = e.api.pod_status("default", "p0");
    assert_eq!(
        status["nodeAllocatableResourceClaimStatuses"][0]["mapping"][0]["quantity"],
        "2"
    );
}

/// A CEL runtime error on one node's devices keeps the pod pending with that error, although
/// the other node could serve the claim (upstream: the problem must not be hidden).
#[test]
fn cel_runtime_error_on_one_node_keeps_the_pod_pending() {
    let e = env();
    let cache = Cache::new();
    add_node(&cache, "n1", "8");
    add_node(&cache, "n2", "8");
    e.slice(gpus("n1", 1, "a100"));
    e.slice(
        slice("n2-gpu", GPU, "n2", "n2")
            .device(dev("gpu-0").boolean("healthy", true))
            .build(),
    );
    e.claim(
        claim("default", "c")
            .request(req("gpu", GPU).selector(&format!(r#"device.attributes["{GPU}"].healthy"#)))
            .build(),
    );
    let (fwk, binder) = framework(&e);
    let mut algo = SchedulingAlgorithm::new(2, None, 7);
    let err = schedule(&fwk, &mut algo, &cache, pod_with("p", &["c"])).unwrap_err();
    assert!(err.contains("CEL runtime error"), "{err}");
    assert!(binder.bindings().is_empty());
    let c = e
        .api
        .claims()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some("c"));
    assert!(c.and_then(|c| c.status).and_then(|s| s.allocation).is_none());
}

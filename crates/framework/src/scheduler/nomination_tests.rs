//! When a binding cycle writes the pod's nomination first ([`nomination_before_binding`]), and
//! which failures clear it: upstream's `TestSchedulerScheduleOne` cases about
//! NominatedNodeNameForExpectation, as a table over one node, a fake cache and fake plugins.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::{Node, Pod, PodStatus};
use parking_lot::Mutex;

use super::*;
use crate::{
    NoNominations, NodeInfo, PermitPlugin, Plugin, PreBindPlugin, ReservePlugin,
    test_support::{Fifo, Unobserved, framework_of},
};

const NODE: &str = "node1";

/// A Permit plugin that answers `status` (Wait makes the pod a waiting pod).
struct FakePermit(Status);
impl Plugin for FakePermit {
    fn name(&self) -> &str {
        "FakePermit"
    }
    crate::serves!(as_permit);
}
impl PermitPlugin for FakePermit {
    fn permit(&self, _: &mut CycleState, _: &PodInfo, _: &str) -> (Status, Duration) {
        (self.0.clone(), Duration::from_secs(60))
    }
}

/// A Reserve plugin that answers `status`.
struct FakeReserve(Status);
impl Plugin for FakeReserve {
    fn name(&self) -> &str {
        "FakeReserve"
    }
    crate::serves!(as_reserve);
}
impl ReservePlugin for FakeReserve {
    fn reserve(&self, _: &mut CycleState, _: &PodInfo, _: &str) -> Status {
        self.0.clone()
    }
    fn unreserve(&self, _: &mut CycleState, _: &PodInfo, _: &str) {}
}

/// A PreBind plugin whose pre-flight check answers `pre_flight` and whose PreBind answers
/// `pre_bind`; it counts its PreBind calls.
struct FakePreBind {
    name: &'static str,
    pre_flight: Status,
    pre_bind: Status,
    calls: Mutex<u32>,
}
impl FakePreBind {
    fn new(name: &'static str, pre_flight: Status, pre_bind: Status) -> Arc<Self> {
        Arc::new(FakePreBind {
            name,
            pre_flight,
            pre_bind,
            calls: Mutex::new(0),
        })
    }
}
impl Plugin for FakePreBind {
    fn name(&self) -> &str {
        self.name
    }
    crate::serves!(as_pre_bind);
}
impl PreBindPlugin for FakePreBind {
    fn pre_bind_pre_flight(&self, _: &CycleState, _: &PodInfo, _: &str) -> Status {
        self.pre_flight.clone()
    }
    fn pre_bind(&self, _: &mut CycleState, _: &PodInfo, _: &str) -> Status {
        *self.calls.lock() += 1;
        self.pre_bind.clone()
    }
}

fn framework(plugins: Vec<Arc<dyn Plugin>>) -> Framework {
    let mut all: Vec<Arc<dyn Plugin>> = vec![Arc::new(Fifo)];
    all.extend(plugins);
    framework_of(all, Arc::new(Unobserved))
}

/// One node; assumes and forgets without complaint.
struct OneNode;
impl SchedulerCache for OneNode {
    fn update_snapshot(&self) -> Arc<Snapshot> {
        let mut node = Node::default();
        node.metadata.name = Some(NODE.to_string());
        Arc::new(Snapshot::new(vec![Arc::new(NodeInfo::new(Arc::new(node)))]))
    }
    fn assume_pod(&self, _: Arc<PodInfo>) -> Result<(), CacheWriteError> {
        Ok(())
    }
    fn forget_pod(&self, _: &PodInfo) -> Result<(), CacheWriteError> {
        Ok(())
    }
}

fn pod(nominated: Option<&str>) -> Arc<PodInfo> {
    let mut pod = Pod::default();
    pod.metadata.name = Some("foo".into());
    pod.metadata.namespace = Some("default".into());
    pod.metadata.uid = Some("foo".into());
    pod.status = nominated.map(|n| PodStatus {
        nominated_node_name: Some(n.to_string()),
        ..Default::default()
    });
    Arc::new(PodInfo::new(pod))
}

fn schedule(fwk: &Framework, pod: Arc<PodInfo>) -> CycleOutcome {
    let mut algo = SchedulingAlgorithm::new(1, None, 7);
    run_scheduling_cycle(fwk, &mut algo, &OneNode, &NoNominations, pod, false)
}

fn assumed(outcome: CycleOutcome) -> Box<BindingTask> {
    match outcome {
        CycleOutcome::Assumed(task) => task,
        CycleOutcome::Failed(f) => panic!("not assumed: {}", f.message),
        CycleOutcome::Skipped(why) => panic!("skipped: {why}"),
    }
}

/// What the binding cycle writes first, per upstream case.
#[test]
fn nomination_is_written_when_binding_waits() {
    struct Case {
        name: &'static str,
        plugins: Vec<Arc<dyn Plugin>>,
        nominated: Option<&'static str>,
        /// The nomination written, or the pre-flight's failure message.
        want: Result<Option<&'static str>, &'static str>,
    }
    let wait = || Status::new(Code::Wait, ["waiting on permit"]);
    let cases = vec![
        Case {
            name: "nominated node name is set, permit plugin is working in wait on permit phase",
            plugins: vec![Arc::new(FakePermit(wait()))],
            nominated: None,
            want: Ok(Some(NODE)),
        },
        Case {
            name: "prebind is called and nominated node name is set, if preflight returns success",
            plugins: vec![FakePreBind::new(
                "FakePreBind",
                Status::success(),
                Status::success(),
            )],
            nominated: None,
            want: Ok(Some(NODE)),
        },
        Case {
            name: "prebind isn't called and nominated node name isn't set, if preflight returns skip",
            plugins: vec![FakePreBind::new(
                "FakePreBind",
                Status::skip(),
                Status::error("rejected on prebind"),
            )],
            nominated: None,
            want: Ok(None),
        },
        Case {
            name: "neither a waiting permit nor prebind work: bound at once, nothing written",
            plugins: vec![],
            nominated: None,
            want: Ok(None),
        },
        Case {
            name: "one plugin with work among skipping ones is enough",
            plugins: vec![
                FakePreBind::new("SkippingPreBind", Status::skip(), Status::success()),
                FakePreBind::new("WorkingPreBind", Status::success(), Status::success()),
            ],
            nominated: None,
            want: Ok(Some(NODE)),
        },
        Case {
            name: "already nominated to the chosen node: nothing to write",
            plugins: vec![FakePreBind::new(
                "FakePreBind",
                Status::success(),
                Status::success(),
            )],
            nominated: Some(NODE),
            want: Ok(None),
        },
        Case {
            name: "nominated elsewhere (an earlier preemption): overwritten with the chosen node",
            plugins: vec![Arc::new(FakePermit(wait()))],
            nominated: Some("node2"),
            want: Ok(Some(NODE)),
        },
        Case {
            name: "prebindpreflight failed with status code error",
            plugins: vec![FakePreBind::new(
                "FakePreBind",
                Status::error("injected PreBindPreFlight error"),
                Status::success(),
            )],
            nominated: None,
            want: Err("running PreBindPreFlight \"FakePreBind\": injected PreBindPreFlight error"),
        },
        Case {
            name: "prebindpreflight failed with status code unschedulable",
            plugins: vec![FakePreBind::new(
                "FakePreBind",
                Status::unschedulable("rejected on prebindpreflight"),
                Status::success(),
            )],
            nominated: None,
            want: Err(
                "PreBindPreFlight FakePreBind returned \"Unschedulable\", which is unsupported. It is supposed to return Success, Skip, or Error status",
            ),
        },
        Case {
            name: "a failed pre-flight check after one with work still fails",
            plugins: vec![
                FakePreBind::new("WorkingPreBind", Status::success(), Status::success()),
                FakePreBind::new("FailingPreBind", Status::error("boom"), Status::success()),
            ],
            nominated: None,
            want: Err("running PreBindPreFlight \"FailingPreBind\": boom"),
        },
    ];
    for c in cases {
        let fwk = framework(c.plugins);
        let task = assumed(schedule(&fwk, pod(c.nominated)));
        let got = nomination_before_binding(&fwk, &task);
        match (c.want, got) {
            (Ok(want), Ok(got)) => assert_eq!(got.as_deref(), want, "{}", c.name),
            (Err(want), Err(status)) => {
                assert_eq!(status.code(), Code::Error, "{}", c.name);
                assert_eq!(status.message(), want, "{}", c.name);
                // The cycle fails before anything is written: requeued as an error, and the
                // nomination (if any) cleared.
                let failure = abandon_binding_cycle(&fwk, &OneNode, *task, status);
                assert_eq!(failure.reason, reasons::SCHEDULER_ERROR, "{}", c.name);
                assert_eq!(failure.message, want, "{}", c.name);
                assert_eq!(failure.nominated_node.as_deref(), Some(""), "{}", c.name);
                assert!(failure.released_assumed, "{}", c.name);
            }
            (want, got) => panic!("{}: want {want:?}, got {got:?}", c.name),
        }
    }
}

/// Skip at pre-flight means PreBind is not run; Success means it is.
#[test]
fn pre_flight_decides_whether_pre_bind_runs() {
    for (pre_flight, runs) in [(Status::skip(), 0), (Status::success(), 1)] {
        let plugin = FakePreBind::new("FakePreBind", pre_flight.clone(), Status::success());
        let fwk = framework(vec![plugin.clone()]);
        let task = assumed(schedule(&fwk, pod(None)));
        assert!(run_binding_cycle(&fwk, &OneNode, *task).is_ok());
        assert_eq!(*plugin.calls.lock(), runs, "pre-flight {:?}", pre_flight.code());
    }
}

/// Every failure after the nomination could have been written clears it; so do errors of the
/// scheduling cycle (upstream's "pod with existing nominated node name on scheduling error
/// clears nomination"). A fit error without a PostFilter nomination leaves it alone.
#[test]
fn failures_clear_the_nomination() {
    // PreBind fails after the nomination was written.
    let fwk = framework(vec![FakePreBind::new(
        "FakePreBind",
        Status::success(),
        Status::error("injected PreBind error"),
    )]);
    let task = assumed(schedule(&fwk, pod(Some("existing-node"))));
    assert_eq!(
        nomination_before_binding(&fwk, &task).unwrap().as_deref(),
        Some(NODE)
    );
    let failure = run_binding_cycle(&fwk, &OneNode, *task).unwrap_err();
    assert_eq!(failure.nominated_node.as_deref(), Some(""));
    assert_eq!(failure.reason, reasons::SCHEDULER_ERROR);

    // Reserve fails: the scheduling cycle's failure clears an existing nomination.
    let fwk = framework(vec![Arc::new(FakeReserve(Status::error(
        "injected Reserve error",
    )))]);
    match schedule(&fwk, pod(Some("existing-node"))) {
        CycleOutcome::Failed(f) => {
            assert_eq!(f.nominated_node.as_deref(), Some(""));
            assert!(f.released_assumed);
        }
        other => panic!("want a failure, got {other:?}"),
    }

    // Permit rejects.
    let fwk = framework(vec![Arc::new(FakePermit(Status::unschedulable(
        "rejected on permit",
    )))]);
    match schedule(&fwk, pod(Some("existing-node"))) {
        CycleOutcome::Failed(f) => {
            assert_eq!(f.nominated_node.as_deref(), Some(""));
            assert_eq!(f.reason, reasons::UNSCHEDULABLE);
        }
        other => panic!("want a failure, got {other:?}"),
    }
}

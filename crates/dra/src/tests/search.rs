//! The search itself: deadline, work counters, sharing across threads, exponential cases,
//! cost budgets.

use super::*;

#[test]
fn search_deadline_and_stats() {
    // 24 devices in 12 NUMA groups of 2, ask 3 devices with a matchAttribute: no solution, so the
    // search backtracks a lot; a deadline in the past aborts it.
    let n = "n";
    let s = slice("s", GPU, n, n).devices((0..24).map(|i| dev(&format!("d{i}")).int("numa", i / 2)));
    let f = fx(
        vec![s],
        vec![
            claim("ns", "c")
                .request(req("r", "gpu").count(3))
                .match_attribute("gpu.example.com/numa", &[]),
        ],
    );
    let alloc = f.allocator().unwrap();
    let err = alloc
        .allocate(&node(n), Deadline::at(std::time::Instant::now()))
        .unwrap_err();
    assert!(matches!(err, AllocationError::Aborted(_)), "{err:?}");
    let cancel = || true;
    let err = alloc
        .allocate(&node(n), Deadline::none().with_cancel(&cancel))
        .unwrap_err();
    assert!(matches!(err, AllocationError::Aborted(_)), "{err:?}");
    let err = alloc.allocate(&node(n), Deadline::none()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "claim ns/c, request r: cannot satisfy constraint matchAttribute gpu.example.com/numa"
    );
    let evals = alloc.stats().selector_evaluations;
    let _ = alloc.allocate(&node(n), Deadline::none());
    assert_eq!(
        alloc.stats().selector_evaluations,
        evals,
        "selector results are cached per device"
    );
}

#[test]
fn index_shared_across_allocators_and_threads() {
    let f = fx(
        (0..8).map(|i| gpus(&format!("n{i}"), 4)).collect(),
        vec![one(req("r", "gpu").count(2))],
    );
    let index = f.index();
    let alloc = Arc::new(f.allocator_with_index(Arc::clone(&index)).unwrap());
    std::thread::scope(|s| {
        for i in 0..8 {
            let alloc = Arc::clone(&alloc);
            s.spawn(move || {
                let res = alloc.allocate(&node(&format!("n{i}")), Deadline::none()).unwrap();
                assert_eq!(device_names(&res[0]), vec!["gpu-0", "gpu-1"]);
            });
        }
    });
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<crate::Allocator>();
    assert_send_sync::<crate::DraSnapshotIndex>();
    assert_send_sync::<crate::CelSelectorEngine>();
}

#[test]
fn match_attribute_over_many_devices_is_not_exponential() {
    // 64 devices on two NUMA nodes, one device of NUMA 0 taken: 32 devices with one NUMA value
    // only fit on NUMA 1. Without constraint-aware pruning this explores ~2^31 subsets.
    let n = "n";
    let s = slice("s", GPU, n, n).devices((0..64).map(|i| dev(&format!("d{i}")).int("numa", i / 32)));
    let mut f = fx(
        vec![s],
        vec![
            claim("ns", "c")
                .request(req("r", "gpu").count(32))
                .match_attribute("gpu.example.com/numa", &[]),
        ],
    );
    f.allocated = vec![allocated(
        claim("ns", "o").build(),
        alloc_of(&[("r", GPU, n, "d5")]),
    )];
    let alloc = f.allocator().unwrap();
    let res = alloc
        .allocate(&node(n), Deadline::after(std::time::Duration::from_secs(10)))
        .unwrap();
    let names = device_names(&res[0]);
    assert_eq!(names.first().map(String::as_str), Some("d32"));
    assert_eq!(names.len(), 32);
    assert!(alloc.stats().search_steps < 10_000, "{:?}", alloc.stats());
    // Same with distinctAttribute: 33 distinct values needed out of 32 is refused quickly.
    let s = slice("s", GPU, n, n).devices((0..40).map(|i| dev(&format!("d{i}")).int("v", i % 31)));
    let f = fx(
        vec![s],
        vec![
            claim("ns", "c")
                .request(req("r", "gpu").count(32))
                .distinct_attribute("gpu.example.com/v", &[]),
        ],
    );
    let alloc = f.allocator().unwrap();
    let err = alloc
        .allocate(&node(n), Deadline::after(std::time::Duration::from_secs(10)))
        .unwrap_err();
    assert!(err.is_unschedulable(), "{err:?}");
    assert!(alloc.stats().search_steps < 100_000, "{:?}", alloc.stats());
}

#[test]
fn over_budget_selector_fails_fast_and_other_claims_still_allocate() {
    use crate::cost::CostLimits;
    let n = "n";
    let list = format!(
        "[{}]",
        (0..100).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
    );
    let heavy = format!("{list}.all(a, {list}.all(b, {list}.all(c, a + b + c >= 0)))");
    let mut f = fx(vec![gpus(n, 3)], vec![one(req("r", "heavy"))]);
    f.classes.push(class_with("heavy", &[&heavy]));
    let node = crate::testing::node(n);

    // Default limits: the estimate rejects the class selector before any evaluation.
    let err = f.allocate(&node).unwrap_err();
    let msg = err.to_string();
    assert!(err.is_fatal(), "{msg}");
    assert!(
        msg.contains("class heavy: selector #0") && msg.contains("cost budget exceeded"),
        "{msg}"
    );

    // Without the estimate, the runtime budget stops the first evaluation; the allocator
    // remembers it, so the next node fails at once without evaluating again.
    f.engine = Arc::new(crate::CelSelectorEngine::with_limits(CostLimits {
        estimated: None,
        runtime: crate::CEL_SELECTOR_EXPRESSION_MAX_COST,
    }));
    let allocator = f.allocator().unwrap();
    let err = allocator.allocate(&node, Deadline::none()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("class heavy: selector #0") && msg.contains("CEL runtime error: cost budget exceeded"),
        "{msg}"
    );
    assert_eq!(allocator.stats().selector_evaluations, 1);
    assert_eq!(allocator.allocate(&node, Deadline::none()).unwrap_err(), err);
    assert_eq!(allocator.stats().selector_evaluations, 1);

    // An unrelated claim on the same slices and engine still allocates.
    f.claims = vec![one(req("r", "gpu")).build()];
    let got = f.allocate(&node).unwrap();
    assert_eq!(device_names(&got[0]), vec!["gpu-0"]);
}

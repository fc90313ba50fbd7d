//! The eviction subresource honours PodDisruptionBudgets as kube-apiserver's does.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a failure is a panic.

mod common;

use kube::api::{Api, EvictParams};
use serde_json::{Value, json};
use unisched_sim::{ApiServer, DeleteOptions, Patch, Store, StoreError};

fn store() -> Store {
    ApiServer::builder().controllers(false).build().store().clone()
}

/// The pod states the eviction rules tell apart.
#[derive(Clone, Copy, Debug)]
enum PodState {
    Pending,
    RunningReady,
    RunningUnready,
    Succeeded,
    /// Running and ready, with a finalizer and a deletionTimestamp.
    Terminating,
}

fn put_pod(s: &Store, ns: &str, name: &str, state: PodState) {
    let mut pod = json!({"metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]}});
    if matches!(state, PodState::Terminating) {
        pod["metadata"]["finalizers"] = json!(["example.com/hold"]);
    }
    s.create("pods", Some(ns), pod).unwrap();
    let ready = |status: &str| json!([{"type": "Ready", "status": status}]);
    let status = match state {
        PodState::Pending => json!({"phase": "Pending"}),
        PodState::RunningReady | PodState::Terminating => {
            json!({"phase": "Running", "conditions": ready("True")})
        }
        PodState::RunningUnready => json!({"phase": "Running", "conditions": ready("False")}),
        PodState::Succeeded => json!({"phase": "Succeeded"}),
    };
    s.patch_status("pods", Some(ns), name, &Patch::Merge(json!({"status": status})))
        .unwrap();
    if matches!(state, PodState::Terminating) {
        s.delete("pods", Some(ns), name, &DeleteOptions::default())
            .unwrap();
    }
}

/// A budget selecting `app=web` with the given status (`observedGeneration` 1 unless the status
/// names one), and extra spec fields.
fn put_budget(s: &Store, ns: &str, name: &str, spec: Value, status: Value) {
    let mut full_spec = json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}});
    for (k, v) in spec.as_object().unwrap() {
        full_spec[k] = v.clone();
    }
    s.create(
        "poddisruptionbudgets",
        Some(ns),
        json!({"metadata": {"name": name}, "spec": full_spec}),
    )
    .unwrap();
    let mut st = json!({"observedGeneration": 1, "expectedPods": 3});
    for (k, v) in status.as_object().unwrap() {
        st[k] = v.clone();
    }
    s.patch_status(
        "poddisruptionbudgets",
        Some(ns),
        name,
        &Patch::Merge(json!({"status": st})),
    )
    .unwrap();
}

/// What an eviction should come to.
#[derive(Debug)]
enum Outcome {
    /// The pod is deleted (or marked for deletion) and the budget keeps its allowance.
    DeletedBudgetUntouched,
    /// The pod is deleted and the budget gave up one disruption.
    DeletedBudgetDecremented,
    /// Refused with this code and (for 429/403) the `DisruptionBudget` cause; the pod stays.
    Refused(u16, &'static str),
    /// Accepted (dry run) but nothing changed.
    Unchanged,
}

#[test]
fn eviction_follows_the_budget() {
    struct Case {
        what: &'static str,
        pod: PodState,
        /// (name, extra spec, status) of budgets in `default`.
        budgets: Vec<(&'static str, Value, Value)>,
        dry_run: bool,
        outcome: Outcome,
    }
    let allows = |n: i64| json!({"disruptionsAllowed": n, "currentHealthy": 3, "desiredHealthy": 2});
    let none_left = json!({"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2});
    let cases = vec![
        Case {
            what: "no budget",
            pod: PodState::RunningReady,
            budgets: vec![],
            dry_run: false,
            outcome: Outcome::DeletedBudgetUntouched,
        },
        Case {
            what: "pending pods need no budget",
            pod: PodState::Pending,
            budgets: vec![("b", json!({}), none_left.clone())],
            dry_run: false,
            outcome: Outcome::DeletedBudgetUntouched,
        },
        Case {
            what: "terminal pods need no budget",
            pod: PodState::Succeeded,
            budgets: vec![("b", json!({}), none_left.clone())],
            dry_run: false,
            outcome: Outcome::DeletedBudgetUntouched,
        },
        Case {
            what: "pods being deleted need no budget",
            pod: PodState::Terminating,
            budgets: vec![("b", json!({}), none_left.clone())],
            dry_run: false,
            outcome: Outcome::DeletedBudgetUntouched,
        },
        Case {
            what: "a budget that allows one",
            pod: PodState::RunningReady,
            budgets: vec![("b", json!({}), allows(1))],
            dry_run: false,
            outcome: Outcome::DeletedBudgetDecremented,
        },
        Case {
            what: "a budget that allows none",
            pod: PodState::RunningReady,
            budgets: vec![("b", json!({}), none_left.clone())],
            dry_run: false,
            outcome: Outcome::Refused(
                429,
                "The disruption budget b needs 2 healthy pods and has 2 currently",
            ),
        },
        Case {
            what: "a budget that allows none and failed sync",
            pod: PodState::RunningReady,
            budgets: vec![(
                "b",
                json!({}),
                json!({"disruptionsAllowed": 0, "currentHealthy": 5, "desiredHealthy": 2,
                "conditions": [{"type": "DisruptionAllowed", "status": "False", "reason": "SyncFailed",
                    "message": "found no controllers", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
            )],
            dry_run: false,
            outcome: Outcome::Refused(
                429,
                "The disruption budget b does not allow evicting pods currently because it failed sync: found no controllers",
            ),
        },
        Case {
            what: "a budget not processed since its spec changed",
            pod: PodState::RunningReady,
            budgets: vec![(
                "b",
                json!({}),
                json!({"observedGeneration": 0, "disruptionsAllowed": 5}),
            )],
            dry_run: false,
            outcome: Outcome::Refused(
                429,
                "The disruption budget b is still being processed by the server.",
            ),
        },
        Case {
            what: "a negative allowance",
            pod: PodState::RunningReady,
            budgets: vec![("b", json!({}), allows(-1))],
            dry_run: false,
            outcome: Outcome::Refused(
                403,
                "The disruption budget b does not allow evicting pods currently: pdb disruptions allowed is negative",
            ),
        },
        Case {
            what: "two budgets",
            pod: PodState::RunningReady,
            budgets: vec![("b", json!({}), allows(1)), ("c", json!({}), allows(1))],
            dry_run: false,
            outcome: Outcome::Refused(500, ""),
        },
        Case {
            what: "a budget selecting other pods",
            pod: PodState::RunningReady,
            budgets: vec![(
                "b",
                json!({"selector": {"matchLabels": {"app": "db"}}}),
                none_left.clone(),
            )],
            dry_run: false,
            outcome: Outcome::DeletedBudgetUntouched,
        },
        Case {
            what: "an unready pod of a healthy application",
            pod: PodState::RunningUnready,
            budgets: vec![(
                "b",
                json!({}),
                json!({"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2}),
            )],
            dry_run: false,
            outcome: Outcome::DeletedBudgetUntouched,
        },
        Case {
            what: "an unready pod of an unhealthy application",
            pod: PodState::RunningUnready,
            budgets: vec![(
                "b",
                json!({}),
                json!({"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 2}),
            )],
            dry_run: false,
            outcome: Outcome::Refused(
                429,
                "The disruption budget b needs 2 healthy pods and has 1 currently",
            ),
        },
        Case {
            what: "an unready pod with AlwaysAllow",
            pod: PodState::RunningUnready,
            budgets: vec![(
                "b",
                json!({"unhealthyPodEvictionPolicy": "AlwaysAllow"}),
                json!({"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 2}),
            )],
            dry_run: false,
            outcome: Outcome::DeletedBudgetUntouched,
        },
        Case {
            what: "a dry run that would be allowed",
            pod: PodState::RunningReady,
            budgets: vec![("b", json!({}), allows(1))],
            dry_run: true,
            outcome: Outcome::Unchanged,
        },
        Case {
            what: "a dry run that would be refused",
            pod: PodState::RunningReady,
            budgets: vec![("b", json!({}), none_left.clone())],
            dry_run: true,
            outcome: Outcome::Refused(
                429,
                "The disruption budget b needs 2 healthy pods and has 2 currently",
            ),
        },
    ];
    for c in cases {
        let s = store();
        s.create("nodes", None, json!({"metadata": {"name": "n1"}}))
            .unwrap();
        put_pod(&s, "default", "p", c.pod);
        for (name, spec, status) in &c.budgets {
            put_budget(&s, "default", name, spec.clone(), status.clone());
        }
        let budget_before = s.try_get("poddisruptionbudgets", Some("default"), "b");
        let pod_before = s.get("pods", Some("default"), "p").unwrap();
        let rv_before = s.resource_version();
        let opts = DeleteOptions {
            dry_run: c.dry_run,
            ..DeleteOptions::default()
        };
        let result = s.evict("default", "p", &opts);
        let pod_after = s.try_get("pods", Some("default"), "p");
        let budget_after = s.try_get("poddisruptionbudgets", Some("default"), "b");
        let gone = pod_after
            .as_ref()
            .is_none_or(|p| p["metadata"].get("deletionTimestamp").is_some());
        match c.outcome {
            Outcome::DeletedBudgetUntouched => {
                result.unwrap_or_else(|e| panic!("{}: {e}", c.what));
                assert!(gone, "{}: the pod is deleted", c.what);
                assert_eq!(
                    budget_after.map(|b| b.resource_version()),
                    budget_before.map(|b| b.resource_version()),
                    "{}: the budget is not written",
                    c.what
                );
            }
            Outcome::DeletedBudgetDecremented => {
                result.unwrap_or_else(|e| panic!("{}: {e}", c.what));
                assert!(pod_after.is_none(), "{}: the pod is deleted", c.what);
                let b = budget_after.unwrap();
                assert_eq!(b["status"]["disruptionsAllowed"], 0, "{}", c.what);
                assert!(b["status"]["disruptedPods"]["p"].is_string(), "{}: {b:?}", c.what);
                let cond = &b["status"]["conditions"][0];
                assert_eq!(
                    (&cond["type"], &cond["status"], &cond["reason"]),
                    (
                        &json!("DisruptionAllowed"),
                        &json!("False"),
                        &json!("InsufficientPods")
                    ),
                    "{}",
                    c.what
                );
            }
            Outcome::Refused(code, cause) => {
                let e = result.expect_err(c.what);
                assert_eq!(e.code(), code, "{}: {e}", c.what);
                let status = e.to_status();
                match code {
                    500 => {
                        assert_eq!(
                            status["message"],
                            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
                        );
                        assert!(status.get("reason").is_none(), "{status}");
                    }
                    _ => {
                        assert_eq!(
                            status["details"]["causes"][0]["reason"], "DisruptionBudget",
                            "{}",
                            c.what
                        );
                        assert_eq!(status["details"]["causes"][0]["message"], cause, "{}", c.what);
                    }
                }
                if code == 429 {
                    assert_eq!(status["reason"], "TooManyRequests");
                    assert_eq!(
                        status["message"],
                        "Cannot evict pod as it would violate the pod's disruption budget."
                    );
                }
                assert!(matches!(
                    e,
                    StoreError::DisruptionBudget { .. } | StoreError::MultipleDisruptionBudgets
                ));
                assert_eq!(s.resource_version(), rv_before, "{}: nothing is written", c.what);
                assert_eq!(
                    pod_after.unwrap().resource_version(),
                    pod_before.resource_version()
                );
            }
            Outcome::Unchanged => {
                result.unwrap_or_else(|e| panic!("{}: {e}", c.what));
                assert_eq!(s.resource_version(), rv_before, "{}: nothing is written", c.what);
                assert!(pod_after.is_some(), "{}", c.what);
            }
        }
    }
}

/// Budgets of other namespaces do not count, and the evicted pod is marked as a disruption target
/// before it goes (watchers see why).
#[test]
fn eviction_marks_the_pod_and_stays_in_its_namespace() {
    let s = store();
    s.create("nodes", None, json!({"metadata": {"name": "n1"}}))
        .unwrap();
    s.create("namespaces", None, json!({"metadata": {"name": "other"}}))
        .unwrap();
    put_pod(&s, "default", "p", PodState::RunningReady);
    put_budget(
        &s,
        "other",
        "b",
        json!({}),
        json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 2}),
    );
    let mut watch = s.subscribe();
    s.evict("default", "p", &DeleteOptions::default()).unwrap();
    let mut events = Vec::new();
    while let Ok(Some(ev)) = watch.try_next() {
        events.push(ev);
    }
    let modified = events
        .iter()
        .find(|e| e.event_type == unisched_sim::EventType::Modified)
        .expect("the pod is marked before it is deleted");
    let conds = modified.object["status"]["conditions"].as_array().unwrap();
    let target = conds.iter().find(|c| c["type"] == "DisruptionTarget").unwrap();
    assert_eq!(target["reason"], "EvictionByEvictionAPI");
    assert_eq!(target["message"], "Eviction API: evicting");
    assert_eq!(
        events.last().unwrap().event_type,
        unisched_sim::EventType::Deleted
    );
}

/// Through HTTP: the refusal is upstream's 429 Status with the cause, the `Retry-After` of an
/// unprocessed budget, and a successful eviction answers 201 Success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_over_http() {
    let (server, _) = common::start().await;
    let client = common::client_without_retries(&server);
    let s = server.store().clone();
    s.create("nodes", None, json!({"metadata": {"name": "n1"}}))
        .unwrap();
    put_pod(&s, "default", "guarded", PodState::RunningReady);
    put_budget(
        &s,
        "default",
        "b",
        json!({}),
        json!({"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2}),
    );
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    let err = pods.evict("guarded", &EvictParams::default()).await.unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("{err:?}")
    };
    assert_eq!(status.code, 429);
    assert_eq!(status.reason, "TooManyRequests");
    let causes = status.details.unwrap().causes;
    assert_eq!(causes[0].reason, "DisruptionBudget");
    assert_eq!(
        causes[0].message,
        "The disruption budget b needs 2 healthy pods and has 2 currently"
    );

    s.patch(
        "poddisruptionbudgets",
        Some("default"),
        "b",
        &Patch::Merge(json!({"spec": {"minAvailable": 1}})),
    )
    .unwrap();
    let req = axum::http::Request::post("/api/v1/namespaces/default/pods/guarded/eviction")
        .header("Content-Type", "application/json")
        .body(
            serde_json::to_vec(
                &json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "guarded"}}),
            )
            .unwrap(),
        )
        .unwrap();
    let resp = client.send(req.map(kube::client::Body::from)).await.unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(
        resp.headers().get("retry-after").unwrap(),
        "10",
        "an unprocessed budget says when to come back"
    );

    s.patch_status(
        "poddisruptionbudgets",
        Some("default"),
        "b",
        &Patch::Merge(
            json!({"status": {"observedGeneration": 2, "disruptionsAllowed": 1, "desiredHealthy": 1}}),
        ),
    )
    .unwrap();
    let ok = pods.evict("guarded", &EvictParams::default()).await.unwrap();
    assert_eq!(ok.status, Some(kube::core::response::StatusSummary::Success));
    assert!(s.try_get("pods", Some("default"), "guarded").is_none());
    server.shutdown().await;
}

//! The Job controller on a store, with the garbage collector: what it creates for a Job and how it
//! follows the Job's pods.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::ApiServer;

struct Cluster {
    store: Store,
    _stop: tokio::sync::watch::Sender<bool>,
}

/// A store with the Job controller (gate as given) and the garbage collector running; `start`
/// false leaves the Job controller for [`Cluster::start_jobs`].
fn cluster(workload_with_job: bool, start: bool) -> (Cluster, Option<JobControllerConfig>) {
    let store = ApiServer::builder().controllers(false).build().store().clone();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(crate::controllers::gc::run(store.clone(), stopped.clone()));
    let config = JobControllerConfig { workload_with_job };
    let pending = if start {
        tokio::spawn(run(store.clone(), config, stopped));
        None
    } else {
        Some(config)
    };
    (Cluster { store, _stop: stop }, pending)
}

impl Cluster {
    fn start_jobs(&self, config: JobControllerConfig) {
        tokio::spawn(run(self.store.clone(), config, self._stop.subscribe()));
    }

    fn pods(&self, job: &str) -> Vec<Value> {
        self.store
            .list_all("pods", Some("default"))
            .unwrap()
            .iter()
            .map(|p| p.to_value())
            .filter(|p| p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == job)
            .collect()
    }

    fn all(&self, resource: &str) -> Vec<Value> {
        self.store
            .list_all(resource, Some("default"))
            .unwrap()
            .iter()
            .map(|o| o.to_value())
            .collect()
    }

    fn job(&self, name: &str) -> Value {
        self.store.get("jobs", Some("default"), name).unwrap().to_value()
    }

    fn create(&self, job: Value) -> Value {
        self.store
            .create("jobs", Some("default"), job)
            .unwrap()
            .to_value()
    }

    fn set_phase(&self, pod: &Value, phase: &str) {
        let name = pod["metadata"]["name"].as_str().unwrap();
        self.store
            .patch_status(
                "pods",
                Some("default"),
                name,
                &Patch::Merge(json!({"status": {"phase": phase}})),
            )
            .unwrap();
    }
}

async fn eventually(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Lets the controller catch up when nothing is expected to happen.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(200)).await;
}

fn job(name: &str, parallelism: i64, completions: Option<i64>, scheduling: Option<Value>) -> Value {
    let mut j = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"parallelism": parallelism,
                 "template": {"spec": {"schedulerName": "unisched", "restartPolicy": "Never",
                                       "containers": [{"name": "c", "image": "registry.example/train:1"}]}}}});
    if let Some(c) = completions {
        j["spec"]["completions"] = json!(c);
    }
    if let Some(s) = scheduling {
        j["spec"]["scheduling"] = s;
    }
    j
}

fn gang(min: i64) -> Option<Value> {
    Some(json!({"schedulingPolicy": {"gang": {"minCount": min}}}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_job_becomes_a_workload_a_pod_group_and_grouped_pods() {
    let (c, _) = cluster(true, true);
    let created = c.create(job("fits", 3, Some(3), gang(3)));
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    eventually("three pods", || c.pods("fits").len() == 3).await;

    let workloads = c.all("workloads");
    assert_eq!(workloads.len(), 1);
    let wl = &workloads[0];
    let wl_name = scheduling::workload_name("fits", &uid);
    assert_eq!(wl["metadata"]["name"], wl_name);
    assert_eq!(
        wl["spec"]["controllerRef"],
        json!({"apiGroup": "batch", "kind": "Job", "name": "fits"})
    );
    assert_eq!(
        wl["spec"]["podGroupTemplates"],
        json!([{"name": "fits-pgt-0", "schedulingPolicy": {"gang": {"minCount": 3}}}])
    );
    assert_eq!(wl["metadata"]["ownerReferences"][0]["uid"], uid.as_str());

    let groups = c.all("podgroups");
    assert_eq!(groups.len(), 1);
    let group = &groups[0];
    let group_name = scheduling::pod_group_name(&wl_name, "fits-pgt-0");
    assert_eq!(group["metadata"]["name"], group_name);
    assert_eq!(
        group["spec"]["schedulingPolicy"],
        json!({"gang": {"minCount": 3}})
    );
    assert_eq!(
        group["spec"]["workloadRef"],
        json!({"workloadName": wl_name, "templateName": "fits-pgt-0"})
    );
    let owners: Vec<&str> = group["metadata"]["ownerReferences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(owners, vec!["Job", "Workload"]);

    for pod in c.pods("fits") {
        let name = pod["metadata"]["name"].as_str().unwrap();
        assert!(
            name.starts_with("fits-") && name.len() == "fits-".len() + 5,
            "{name}"
        );
        assert_eq!(
            pod["spec"]["schedulingGroup"]["podGroupName"],
            group_name.as_str()
        );
        assert_eq!(pod["metadata"]["labels"]["job-name"], "fits");
        assert_eq!(
            pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"],
            uid.as_str()
        );
        assert_eq!(pod["metadata"]["finalizers"], json!([TRACKING_FINALIZER]));
        let owners = pod["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(
            owners.len(),
            1,
            "only the Job, as upstream's pod control writes it"
        );
        assert_eq!(owners[0]["uid"], uid.as_str());
    }
    eventually("the status counts them", || {
        c.job("fits")["status"]["active"] == 3
    })
    .await;
    let status = c.job("fits")["status"].clone();
    assert!(status["startTime"].is_string(), "{status}");
    assert_eq!(status["succeeded"], 0);
    // Later syncs find the same objects and make no more.
    settle().await;
    assert_eq!(
        (
            c.all("workloads").len(),
            c.all("podgroups").len(),
            c.pods("fits").len()
        ),
        (1, 1, 3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_gate_pods_are_scheduled_one_by_one() {
    let (c, _) = cluster(false, true);
    c.create(job("plain", 2, None, gang(2)));
    eventually("two pods", || c.pods("plain").len() == 2).await;
    settle().await;
    assert!(c.all("workloads").is_empty() && c.all("podgroups").is_empty());
    assert!(
        c.pods("plain")
            .iter()
            .all(|p| p["spec"].get("schedulingGroup").is_none())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_basic_job_gets_a_basic_group_and_its_own_group_is_kept() {
    let (c, _) = cluster(true, true);
    c.create(job("web", 2, None, None));
    eventually("two pods", || c.pods("web").len() == 2).await;
    let groups = c.all("podgroups");
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0]["spec"]["schedulingPolicy"], json!({"basic": {}}));

    let mut own = job("own", 2, None, None);
    own["spec"]["template"]["spec"]["schedulingGroup"] = json!({"podGroupName": "mine"});
    c.create(own);
    eventually("two pods", || c.pods("own").len() == 2).await;
    settle().await;
    assert_eq!(
        c.all("podgroups").len(),
        1,
        "no group made for a Job that names its own"
    );
    assert!(
        c.pods("own")
            .iter()
            .all(|p| p["spec"]["schedulingGroup"]["podGroupName"] == "mine")
    );
}

/// A Job that started before the controller could make its group keeps scheduling pod by pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_already_started_gets_no_group() {
    let (c, pending) = cluster(true, false);
    c.create(job("old", 2, None, gang(2)));
    c.store
        .patch_status(
            "jobs",
            Some("default"),
            "old",
            &Patch::Merge(json!({"status": {"startTime": "2026-01-01T00:00:00Z"}})),
        )
        .unwrap();
    c.start_jobs(pending.unwrap());
    eventually("two pods", || c.pods("old").len() == 2).await;
    settle().await;
    assert!(c.all("workloads").is_empty());
    assert!(
        c.pods("old")
            .iter()
            .all(|p| p["spec"].get("schedulingGroup").is_none())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn succeeded_pods_complete_the_job_and_are_let_go() {
    let (c, _) = cluster(true, true);
    c.create(job("batch", 2, Some(3), None));
    eventually("two pods", || c.pods("batch").len() == 2).await;
    for p in c.pods("batch") {
        c.set_phase(&p, "Succeeded");
    }
    // Two done, one to go: a third pod.
    eventually("the third pod", || c.pods("batch").len() == 3).await;
    eventually("two counted", || c.job("batch")["status"]["succeeded"] == 2).await;
    let third = c
        .pods("batch")
        .into_iter()
        .find(|p| p["status"]["phase"] != "Succeeded")
        .unwrap();
    c.set_phase(&third, "Succeeded");
    eventually("complete", || {
        c.job("batch")["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Complete" && c["status"] == "True")
            })
    })
    .await;
    let status = c.job("batch")["status"].clone();
    assert_eq!(status["succeeded"], 3);
    assert_eq!(status["active"], 0);
    assert!(status["completionTime"].is_string());
    let types: Vec<&str> = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, vec!["SuccessCriteriaMet", "Complete"]);
    eventually("finalizers off", || {
        c.pods("batch")
            .iter()
            .all(|p| p["metadata"].get("finalizers").is_none_or(|f| f == &json!([])))
    })
    .await;
    assert_eq!(c.pods("batch").len(), 3, "no pod after completion");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_past_the_backoff_limit_fail_the_job() {
    let (c, _) = cluster(true, true);
    let mut j = job("flaky", 1, Some(1), None);
    j["spec"]["backoffLimit"] = json!(1);
    c.create(j);
    for failures in 1..=2 {
        eventually("a running pod", || {
            c.pods("flaky").iter().any(|p| p["status"]["phase"] != "Failed")
        })
        .await;
        let running = c
            .pods("flaky")
            .into_iter()
            .find(|p| p["status"]["phase"] != "Failed")
            .unwrap();
        c.set_phase(&running, "Failed");
        eventually("counted", || c.job("flaky")["status"]["failed"] == failures).await;
    }
    eventually("failed", || {
        c.job("flaky")["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Failed" && c["reason"] == "BackoffLimitExceeded")
            })
    })
    .await;
    settle().await;
    assert_eq!(c.pods("flaky").len(), 2, "no replacement after the Job failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_indexed_job_gives_each_pod_its_index() {
    let (c, _) = cluster(true, true);
    let mut j = job("ix", 3, Some(5), None);
    j["spec"]["completionMode"] = json!("Indexed");
    c.create(j);
    eventually("three pods", || c.pods("ix").len() == 3).await;
    let mut indexes: Vec<String> = c
        .pods("ix")
        .iter()
        .map(|p| {
            p["metadata"]["annotations"][COMPLETION_INDEX_ANNOTATION]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    indexes.sort();
    assert_eq!(indexes, vec!["0", "1", "2"]);
    let zero = c
        .pods("ix")
        .into_iter()
        .find(|p| p["metadata"]["annotations"][COMPLETION_INDEX_ANNOTATION] == "0")
        .unwrap();
    assert!(zero["metadata"]["name"].as_str().unwrap().starts_with("ix-0-"));
    assert_eq!(zero["spec"]["hostname"], "ix-0");
    c.set_phase(&zero, "Succeeded");
    eventually("index 3 next", || {
        c.pods("ix")
            .iter()
            .any(|p| p["metadata"]["annotations"][COMPLETION_INDEX_ANNOTATION] == "3")
    })
    .await;
    eventually("index 0 recorded", || {
        c.job("ix")["status"]["completedIndexes"] == "0"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_min_count_resizes_the_gang() {
    let (c, _) = cluster(true, true);
    c.create(job("elastic", 4, None, gang(2)));
    eventually("four pods", || c.pods("elastic").len() == 4).await;
    c.store
        .patch(
            "jobs",
            Some("default"),
            "elastic",
            &Patch::Merge(json!({"spec": {"scheduling": {"schedulingPolicy": {"gang": {"minCount": 4}}}}})),
        )
        .unwrap();
    eventually("the group follows", || {
        c.all("podgroups")[0]["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
            && c.all("workloads")[0]["spec"]["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"]
                == 4
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_job_takes_its_pods_and_groups_along() {
    let (c, _) = cluster(true, true);
    c.create(job("gone", 2, None, gang(2)));
    eventually("two pods", || c.pods("gone").len() == 2).await;
    c.store
        .delete("jobs", Some("default"), "gone", &DeleteOptions::default())
        .unwrap();
    eventually("pods deleted", || c.pods("gone").is_empty()).await;
    eventually("groups deleted", || {
        c.all("workloads").is_empty() && c.all("podgroups").is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_job_waits_and_resumes() {
    let (c, _) = cluster(true, true);
    let mut j = job("later", 2, None, None);
    j["spec"]["suspend"] = json!(true);
    c.create(j);
    eventually("suspended", || {
        c.job("later")["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Suspended" && c["status"] == "True")
            })
    })
    .await;
    assert!(c.pods("later").is_empty());
    // As upstream: the first sync, before the Job is marked suspended, makes its group.
    assert_eq!(c.all("workloads").len(), 1);
    c.store
        .patch(
            "jobs",
            Some("default"),
            "later",
            &Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .unwrap();
    eventually("two pods", || c.pods("later").len() == 2).await;
    assert!(
        c.pods("later")
            .iter()
            .all(|p| p["spec"]["schedulingGroup"]["podGroupName"].is_string())
    );
    let job = c.job("later");
    let suspended = job["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Suspended")
        .unwrap()
        .clone();
    assert_eq!(
        (suspended["status"].as_str(), suspended["reason"].as_str()),
        (Some("False"), Some("JobResumed"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lower_parallelism_deletes_pending_pods_without_failing_them() {
    let (c, _) = cluster(true, true);
    let mut j = job("shrink", 3, None, None);
    j["spec"]["suspend"] = json!(false);
    c.create(j);
    eventually("three pods", || c.pods("shrink").len() == 3).await;
    c.store
        .patch(
            "jobs",
            Some("default"),
            "shrink",
            &Patch::Merge(json!({"spec": {"parallelism": 1}})),
        )
        .unwrap();
    eventually("one pod", || c.pods("shrink").len() == 1).await;
    eventually("status", || c.job("shrink")["status"]["active"] == 1).await;
}

//! The Workload and PodGroup a Job's pods are scheduled as, after kube-controller-manager 1.37's
//! job scheduling manager (gate `WorkloadWithJob`).
//!
//! A Job the controller manages (the gate on, no `schedulingGroup` of its own in the template, no
//! controlling owner) is compiled into one Workload with one PodGroupTemplate named
//! `<job>-pgt-0`: the policy, topology, disruption mode and claims of `spec.scheduling` (basic
//! when unset; a gang without `minCount` takes `parallelism`, at least 1) and the template's
//! priority class. The Workload is named `<job>-<hash of the Job's UID>`, is controlled by the Job
//! and points back at it in `spec.controllerRef`. Its one PodGroup, `<workload>-<template>-<hash>`,
//! copies the template, is controlled by the Job and also owned (not controlled) by the Workload.
//! The hashes are upstream's (FNV-32a, in the API server's suffix alphabet), so the names are the
//! ones kube-controller-manager would give.
//!
//! The objects are only created for a Job that has not started (no pods, no start time, nothing
//! finished, never suspended): a Job from before the gate keeps scheduling pod by pod. Later syncs
//! find them again by their controller reference to the Job; objects a user made for the Job
//! (not controlled by it) are ignored, and two of them make the Job fall back to pod-by-pod
//! scheduling. A changed gang `minCount` is carried to both objects.
//!
//! Not done here: Jobs whose parent (a JobSet) owns the Workload and delegates the PodGroup to the
//! Job controller; such a Job, like any Job with a controlling owner, is left alone.

use serde_json::{Map, Value, json};

use crate::util::{get_path, get_str, name_of, namespace_of, uid_of};

/// Which scheduling objects the controller makes for a Job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Management {
    /// None: the gate is off, the pods name their own group, or a parent controls the Job.
    None,
    /// The Workload and its PodGroup.
    Both,
}

/// What the controller manages for `job` with the gate at `workload_with_job`.
pub(crate) fn management(job: &Value, workload_with_job: bool) -> Management {
    if !workload_with_job
        || get_path(job, &["spec", "template", "spec", "schedulingGroup"]).is_some_and(|g| !g.is_null())
        || controller_of(job).is_some()
    {
        return Management::None;
    }
    Management::Both
}

/// The owner reference with `controller: true`, if any.
pub(crate) fn controller_of(obj: &Value) -> Option<&Value> {
    get_path(obj, &["metadata", "ownerReferences"])
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

/// Whether `obj`'s controller is the object with `uid`.
pub(crate) fn is_controlled_by(obj: &Value, uid: &str) -> bool {
    controller_of(obj).is_some_and(|r| get_str(r, &["uid"]) == Some(uid))
}

/// Whether the Job has never started: no pods, no start time, nothing finished, never suspended.
pub(crate) fn is_new_job(job: &Value, pod_count: usize) -> bool {
    let count = |f: &str| get_path(job, &["status", f]).and_then(Value::as_i64).unwrap_or(0);
    let suspended_once = get_path(job, &["status", "conditions"])
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| get_str(c, &["type"]) == Some("Suspended")));
    pod_count == 0
        && get_path(job, &["status", "startTime"]).is_none_or(Value::is_null)
        && count("succeeded") == 0
        && count("failed") == 0
        && !suspended_once
}

/// The controller reference a Job gives what it creates.
pub(crate) fn job_reference(job: &Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "name": name_of(job), "uid": uid_of(job),
           "controller": true, "blockOwnerDeletion": true})
}

/// kube-apiserver's `generateName` alphabet, which upstream also spells hashes in.
const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Upstream's `rand.SafeEncodeString` of a number's decimal digits.
fn safe_encode(n: u32) -> String {
    n.to_string()
        .bytes()
        .map(|b| SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()] as char)
        .collect()
}

fn fnv32a(parts: &[&[u8]]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for part in parts {
        for b in *part {
            hash ^= u32::from(*b);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    }
    hash
}

/// The longest name of a namespaced object (a DNS subdomain).
const MAX_NAME: usize = 253;

/// `<job name>-<hash of the UID>`, the name cut to fit. Upstream hashes the UID as its Go debug
/// printer writes it, `(types.UID)<uid>`.
pub(crate) fn workload_name(job_name: &str, job_uid: &str) -> String {
    let printed = format!("(types.UID){job_uid}");
    let hash = safe_encode(fnv32a(&[printed.as_bytes()]));
    let prefix = cut(job_name, MAX_NAME - hash.len() - 1);
    format!("{prefix}-{hash}")
}

/// `<workload>-<template>-<hash of both>`: when too long, a part within half of the room keeps
/// its length and the other is cut; when both are longer, each gets half (the workload the odd
/// character).
pub(crate) fn pod_group_name(workload: &str, template: &str) -> String {
    let hash = safe_encode(fnv32a(&[workload.as_bytes(), template.as_bytes()]));
    let room = MAX_NAME - hash.len() - 2;
    let (mut w, mut t) = (workload, template);
    if w.len() + t.len() > room {
        let half = room / 2;
        if w.len() <= half {
            t = cut(t, room - w.len());
        } else if t.len() <= half {
            w = cut(w, room - t.len());
        } else {
            w = cut(w, room - half);
            t = cut(t, half);
        }
    }
    format!("{w}-{t}-{hash}")
}

fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The name of the Job's one PodGroupTemplate.
pub(crate) fn template_name(job_name: &str) -> String {
    format!("{job_name}-pgt-0")
}

/// The gang `minCount` the Job asks for: given, or `parallelism` (at least 1); None for basic.
pub(crate) fn desired_min_count(job: &Value) -> Option<i64> {
    let gang = get_path(job, &["spec", "scheduling", "schedulingPolicy", "gang"]).filter(|g| !g.is_null())?;
    Some(match gang.get("minCount").and_then(Value::as_i64) {
        Some(n) => n,
        None => get_path(job, &["spec", "parallelism"])
            .and_then(Value::as_i64)
            .unwrap_or(1)
            .max(1),
    })
}

/// The PodGroupTemplate compiled from the Job's `spec.scheduling` and template.
fn pod_group_template(job: &Value) -> Map<String, Value> {
    let mut t = Map::new();
    t.insert("name".into(), json!(template_name(name_of(job))));
    let policy = match desired_min_count(job) {
        Some(min) => json!({"gang": {"minCount": min}}),
        None => json!({"basic": {}}),
    };
    t.insert("schedulingPolicy".into(), policy);
    let scheduling = get_path(job, &["spec", "scheduling"]);
    let field = |f: &str| scheduling.and_then(|s| s.get(f)).filter(|v| !v.is_null());
    let topology: Vec<Value> = field("schedulingConstraints")
        .and_then(|c| c.get("topology"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|k| json!({"key": get_str(k, &["key"]).unwrap_or_default()}))
        .collect();
    if !topology.is_empty() {
        t.insert("schedulingConstraints".into(), json!({"topology": topology}));
    }
    if let Some(mode) = field("disruptionMode") {
        if mode.get("all").is_some_and(|v| !v.is_null()) {
            t.insert("disruptionMode".into(), json!({"all": {}}));
        } else if mode.get("single").is_some_and(|v| !v.is_null()) {
            t.insert("disruptionMode".into(), json!({"single": {}}));
        }
    }
    let claims: Vec<Value> = field("resourceClaims")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let mut claim = Map::new();
            for key in ["name", "resourceClaimName", "resourceClaimTemplateName"] {
                if let Some(v) = c.get(key).filter(|v| !v.is_null()) {
                    claim.insert(key.into(), v.clone());
                }
            }
            Value::Object(claim)
        })
        .collect();
    if !claims.is_empty() {
        t.insert("resourceClaims".into(), json!(claims));
    }
    if let Some(class) =
        get_str(job, &["spec", "template", "spec", "priorityClassName"]).filter(|c| !c.is_empty())
    {
        t.insert("priorityClassName".into(), json!(class));
    }
    t
}

/// The Workload the controller creates for the Job.
pub(crate) fn workload_for(job: &Value) -> Value {
    json!({
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(name_of(job), uid_of(job)),
            "namespace": namespace_of(job),
            "ownerReferences": [job_reference(job)],
        },
        "spec": {
            "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": name_of(job)},
            "podGroupTemplates": [pod_group_template(job)],
        },
    })
}

/// The PodGroup made from the Workload's first template (None when it has none): controlled by
/// the Job, and owned by the Workload without blocking its deletion.
pub(crate) fn pod_group_for(job: &Value, workload: &Value) -> Option<Value> {
    let template = get_path(workload, &["spec", "podGroupTemplates"])
        .and_then(Value::as_array)?
        .first()?;
    let template_name = get_str(template, &["name"]).unwrap_or_default();
    let workload_name = name_of(workload);
    let mut spec = Map::new();
    spec.insert(
        "workloadRef".into(),
        json!({"workloadName": workload_name, "templateName": template_name}),
    );
    for key in [
        "schedulingPolicy",
        "schedulingConstraints",
        "disruptionMode",
        "priorityClassName",
        "priority",
        "resourceClaims",
    ] {
        if let Some(v) = template.get(key).filter(|v| !v.is_null()) {
            spec.insert(key.into(), v.clone());
        }
    }
    Some(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": pod_group_name(workload_name, template_name),
            "namespace": namespace_of(job),
            "ownerReferences": [
                job_reference(job),
                {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload", "name": workload_name,
                 "uid": uid_of(workload)},
            ],
        },
        "spec": spec,
    }))
}

/// Whether the Workload this controller owns for a Job has the one template it compiles.
pub(crate) fn check_workload_structure(workload: &Value) -> Result<(), usize> {
    let templates = get_path(workload, &["spec", "podGroupTemplates"])
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if templates == 1 { Ok(()) } else { Err(templates) }
}

/// The current gang `minCount` at `path` of an object, if it is a gang.
pub(crate) fn gang_min_count(obj: &Value, path: &[&str]) -> Option<i64> {
    get_path(obj, path)
        .and_then(|p| p.get("gang"))
        .and_then(|g| g.get("minCount"))
        .and_then(Value::as_i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, parallelism: i64, scheduling: Option<Value>) -> Value {
        let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid")},
            "spec": {"parallelism": parallelism, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}});
        if let Some(s) = scheduling {
            j["spec"]["scheduling"] = s;
        }
        j
    }

    /// Upstream's TestShouldManageWorkloadForJob, for the cases this controller distinguishes.
    #[test]
    fn which_jobs_are_managed() {
        let owned_by = |api_version: &str, kind: &str| {
            let mut j = job("j", 4, None);
            j["metadata"]["ownerReferences"] = json!([{"apiVersion": api_version, "kind": kind, "name": "p", "uid": "p", "controller": true}]);
            j
        };
        let mut own_group = job("j", 4, None);
        own_group["spec"]["template"]["spec"]["schedulingGroup"] = json!({"podGroupName": "existing-pg"});
        let mut delegated = owned_by("jobset.x-k8s.io/v1alpha2", "JobSet");
        delegated["metadata"]["annotations"] = json!({"scheduling.k8s.io/group-template-name": "workers"});
        let cases: Vec<(&str, bool, Value, Management)> = vec![
            (
                "gate on, a Job of its own",
                true,
                job("j", 4, None),
                Management::Both,
            ),
            (
                "gate on, a one-pod basic Job",
                true,
                job("j", 1, None),
                Management::Both,
            ),
            ("gate off", false, job("j", 4, None), Management::None),
            ("the pods name their own group", true, own_group, Management::None),
            (
                "a parent owns the Workload",
                true,
                owned_by("jobset.x-k8s.io/v1alpha2", "JobSet"),
                Management::None,
            ),
            (
                "a CronJob's Job",
                true,
                owned_by("batch/v1", "CronJob"),
                Management::None,
            ),
            // Upstream manages the PodGroup alone here; delegation is not simulated.
            (
                "a parent delegates the PodGroup",
                true,
                delegated,
                Management::None,
            ),
        ];
        for (name, gate, j, want) in cases {
            assert_eq!(management(&j, gate), want, "{name}");
        }
    }

    /// Upstream's TestGenerateWorkload.
    #[test]
    fn the_workload_compiled_from_a_job() {
        let gang = |min: Option<i64>| match min {
            Some(m) => json!({"schedulingPolicy": {"gang": {"minCount": m}}}),
            None => json!({"schedulingPolicy": {"gang": {}}}),
        };
        let mut prio = job("prio", 4, None);
        prio["spec"]["template"]["spec"]["priorityClassName"] = json!("high-priority");
        // (case, job, the template's expected policy, priority class)
        let cases: Vec<(&str, Value, Value, Option<&str>)> = vec![
            (
                "no scheduling is basic",
                job("basic-default", 4, None),
                json!({"basic": {}}),
                None,
            ),
            (
                "scheduling without a policy is basic",
                job("basic-nil-policy", 4, Some(json!({}))),
                json!({"basic": {}}),
                None,
            ),
            (
                "an explicit basic policy",
                job(
                    "basic-explicit",
                    4,
                    Some(json!({"schedulingPolicy": {"basic": {}}})),
                ),
                json!({"basic": {}}),
                None,
            ),
            (
                "a gang with minCount",
                job("gang", 4, Some(gang(Some(3)))),
                json!({"gang": {"minCount": 3}}),
                None,
            ),
            (
                "a gang without minCount takes parallelism",
                job("gang-zero", 4, Some(gang(None))),
                json!({"gang": {"minCount": 4}}),
                None,
            ),
            (
                "and at least 1",
                job("gang-zero-parallelism", 0, Some(gang(None))),
                json!({"gang": {"minCount": 1}}),
                None,
            ),
            (
                "the priority class of the template",
                prio,
                json!({"basic": {}}),
                Some("high-priority"),
            ),
        ];
        for (name, j, policy, class) in cases {
            let wl = workload_for(&j);
            let templates = wl["spec"]["podGroupTemplates"].as_array().unwrap();
            assert_eq!(templates.len(), 1, "{name}");
            assert_eq!(templates[0]["name"], template_name(name_of(&j)), "{name}");
            assert_eq!(templates[0]["schedulingPolicy"], policy, "{name}");
            assert_eq!(templates[0]["priorityClassName"].as_str(), class, "{name}");
            assert_eq!(
                wl["spec"]["controllerRef"],
                json!({"apiGroup": "batch", "kind": "Job", "name": name_of(&j)}),
                "{name}"
            );
            assert_eq!(wl["metadata"]["ownerReferences"][0]["controller"], true, "{name}");
        }
        let full = job(
            "full",
            4,
            Some(json!({
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]},
                "disruptionMode": {"all": {}},
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "my-claim"}],
            })),
        );
        let t = &workload_for(&full)["spec"]["podGroupTemplates"][0];
        assert_eq!(
            t["schedulingConstraints"],
            json!({"topology": [{"key": "topology.kubernetes.io/zone"}]})
        );
        assert_eq!(t["disruptionMode"], json!({"all": {}}));
        assert_eq!(
            t["resourceClaims"],
            json!([{"name": "gpu", "resourceClaimName": "my-claim"}])
        );
    }

    /// Upstream's TestComputeWorkloadName and TestComputePodGroupName, with the names
    /// kube-controller-manager 1.37.2 computes for the same inputs.
    #[test]
    fn names_are_upstreams() {
        assert_eq!(workload_name("my-job", "uid-123"), "my-job-795ddf89fd");
        assert_eq!(workload_name("fits", "fits-uid"), "fits-7bcfb56544");
        assert_ne!(
            workload_name("my-job", "uid-123"),
            workload_name("my-job", "different-uid")
        );
        let long = workload_name(&"a".repeat(300), "uid-long");
        assert!(long.len() <= MAX_NAME && long.starts_with("aaa"), "{long}");
        assert_eq!(
            pod_group_name("my-workload", "my-template"),
            "my-workload-my-template-67bd6bbcc4"
        );
        for (w, t) in [
            ("my-workload".to_string(), "my-template".to_string()),
            ("w".repeat(250), "tpl".to_string()),
            ("wl".to_string(), "t".repeat(250)),
            ("w".repeat(200), "t".repeat(200)),
        ] {
            let name = pod_group_name(&w, &t);
            assert!(name.len() <= MAX_NAME, "{name}");
            assert!(name.split('-').count() >= 3, "{name}");
            assert_ne!(name, pod_group_name(&w, "other-template"));
        }
        let both = pod_group_name(&"w".repeat(200), &"t".repeat(200));
        assert!(both.contains("www") && both.contains("ttt"), "{both}");
        assert!(pod_group_name("wl", &"t".repeat(250)).starts_with("wl-"));
    }

    /// Upstream's TestCreatePodGroup (a root Job: two owners) and the PodGroup's spec.
    #[test]
    fn the_pod_group_copies_the_template() {
        let j = job("my-job", 4, None);
        let workload = json!({"metadata": {"name": "root-workload", "uid": "wl-uid"},
            "spec": {"podGroupTemplates": [{"name": "my-job-pgt-0",
                "schedulingPolicy": {"gang": {"minCount": 4}}, "priorityClassName": "high-priority", "priority": 1000}]}});
        let pg = pod_group_for(&j, &workload).unwrap();
        assert_eq!(
            pg["metadata"]["name"],
            pod_group_name("root-workload", "my-job-pgt-0")
        );
        let owners = pg["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(owners.len(), 2);
        assert_eq!(owners[0]["controller"], true);
        assert_eq!(owners[1]["kind"], "Workload");
        assert!(owners[1].get("controller").is_none() && owners[1].get("blockOwnerDeletion").is_none());
        assert_eq!(
            pg["spec"],
            json!({"workloadRef": {"workloadName": "root-workload", "templateName": "my-job-pgt-0"},
                   "schedulingPolicy": {"gang": {"minCount": 4}}, "priorityClassName": "high-priority", "priority": 1000})
        );
        assert!(pod_group_for(&j, &json!({"metadata": {"name": "w"}, "spec": {}})).is_none());
    }

    /// Upstream's TestEnsureWorkloadAndPodGroup: which Jobs count as never started.
    #[test]
    fn only_a_job_that_never_started_gets_new_objects() {
        let j = job("test-job", 4, None);
        assert!(is_new_job(&j, 0));
        assert!(!is_new_job(&j, 1), "it has pods");
        for status in [
            json!({"startTime": "2026-01-01T00:00:00Z"}),
            json!({"succeeded": 1}),
            json!({"failed": 1}),
            json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
        ] {
            let mut started = j.clone();
            started["status"] = status.clone();
            assert!(!is_new_job(&started, 0), "{status}");
        }
    }

    #[test]
    fn a_workload_with_other_than_one_template_is_refused() {
        let wl = |n: usize| json!({"spec": {"podGroupTemplates": vec![json!({"name": "t"}); n]}});
        assert_eq!(check_workload_structure(&wl(1)), Ok(()));
        assert_eq!(check_workload_structure(&wl(2)), Err(2));
        assert_eq!(check_workload_structure(&wl(0)), Err(0));
    }
}

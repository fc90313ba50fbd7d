//! The pods of a Job: how one is made from the template, which of them count as active,
//! finished or going, and which completion indexes an Indexed Job still needs.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::scheduling::job_reference;
use crate::util::{get_path, get_str, name_of, namespace_of};

/// The finalizer that keeps a Job's pod until the Job has counted it.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The annotation (and label) with an Indexed Job pod's completion index.
pub const COMPLETION_INDEX_ANNOTATION: &str = "batch.kubernetes.io/job-completion-index";
/// The environment variable an Indexed Job's containers read their index from.
const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// The longest `generateName` prefix: a name is 63 characters at most, 5 of them the suffix.
const MAX_GENERATED_PREFIX: usize = 58;

/// A pod as kube-controller-manager's Job controller creates it: the template's labels,
/// annotations, finalizers and spec, the tracking finalizer, the Job as its controller, named
/// `<job>-` (`<job>-<index>-` for an Indexed Job, whose pod also gets its index as a label, an
/// annotation, an environment variable and its hostname), and in `group` when the controller made
/// the Job a PodGroup.
pub(crate) fn pod_for(job: &Value, index: Option<u32>, group: Option<&str>) -> Value {
    let job_name = name_of(job);
    let template = get_path(job, &["spec", "template"]).cloned().unwrap_or(json!({}));
    let meta = |f: &str| {
        get_path(&template, &["metadata", f])
            .cloned()
            .unwrap_or(json!({}))
    };
    let mut labels = meta("labels");
    let mut annotations = meta("annotations");
    let mut finalizers: Vec<Value> = get_path(&template, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(json!(TRACKING_FINALIZER));
    }
    let mut spec = template.get("spec").cloned().unwrap_or(json!({}));
    let generate_name = match index {
        Some(i) => {
            labels[COMPLETION_INDEX_ANNOTATION] = json!(i.to_string());
            annotations[COMPLETION_INDEX_ANNOTATION] = json!(i.to_string());
            spec["hostname"] = json!(format!("{job_name}-{i}"));
            for list in ["initContainers", "containers"] {
                if let Some(Value::Array(containers)) = spec.get_mut(list) {
                    containers.iter_mut().for_each(add_index_env);
                }
            }
            indexed_prefix(job_name, i)
        }
        None => format!("{job_name}-"),
    };
    if let Some(g) = group {
        spec["schedulingGroup"] = json!({"podGroupName": g});
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": generate_name,
            "namespace": namespace_of(job),
            "labels": labels,
            "annotations": annotations,
            "finalizers": finalizers,
            "ownerReferences": [job_reference(job)],
        },
        "spec": spec,
    })
}

/// `<job>-<index>-`, the Job's name cut so that the whole fits a generated name.
fn indexed_prefix(job_name: &str, index: u32) -> String {
    let suffix = format!("-{index}-");
    let mut prefix = format!("{job_name}{suffix}");
    if prefix.len() > MAX_GENERATED_PREFIX {
        let mut end = MAX_GENERATED_PREFIX - suffix.len();
        while !job_name.is_char_boundary(end) {
            end -= 1;
        }
        prefix = format!("{}{suffix}", &job_name[..end]);
    }
    prefix
}

fn add_index_env(container: &mut Value) {
    let env = container
        .as_object_mut()
        .map(|c| c.entry("env").or_insert_with(|| json!([])));
    if let Some(Value::Array(env)) = env
        && !env
            .iter()
            .any(|e| get_str(e, &["name"]) == Some(COMPLETION_INDEX_ENV))
    {
        env.push(json!({
            "name": COMPLETION_INDEX_ENV,
            "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.labels['{COMPLETION_INDEX_ANNOTATION}']")}},
        }));
    }
}

/// Where a pod of the Job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PodState {
    /// Not finished and not being deleted.
    Active,
    /// Finished successfully.
    Succeeded,
    /// Finished unsuccessfully, or deleted before it finished.
    Failed,
}

/// The pod's state, as the Job counts it.
pub(crate) fn state_of(pod: &Value) -> PodState {
    match get_str(pod, &["status", "phase"]) {
        Some("Succeeded") => PodState::Succeeded,
        Some("Failed") => PodState::Failed,
        _ if get_path(pod, &["metadata", "deletionTimestamp"]).is_some() => PodState::Failed,
        _ => PodState::Active,
    }
}

/// Whether the pod still carries the tracking finalizer (the Job has not counted it yet).
pub(crate) fn is_tracked(pod: &Value) -> bool {
    get_path(pod, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|f| f == TRACKING_FINALIZER))
}

/// Whether the pod's `Ready` condition is true.
pub(crate) fn is_ready(pod: &Value) -> bool {
    get_path(pod, &["status", "conditions"])
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// The completion index of an Indexed Job's pod.
pub(crate) fn index_of(pod: &Value) -> Option<u32> {
    get_str(pod, &["metadata", "annotations", COMPLETION_INDEX_ANNOTATION])?
        .parse()
        .ok()
}

/// The indexes in a `completedIndexes` text (`1,3-5,7`).
pub(crate) fn parse_indexes(text: &str) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend(a..=b);
                }
            }
            None => {
                if let Ok(i) = part.parse() {
                    out.insert(i);
                }
            }
        }
    }
    out
}

/// Indexes as `completedIndexes` writes them: ascending, a run of three or more as `a-b`, a run of
/// two as `a,b`.
pub(crate) fn format_indexes(indexes: &BTreeSet<u32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut iter = indexes.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        match end - start {
            0 => parts.push(start.to_string()),
            1 => {
                parts.push(start.to_string());
                parts.push(end.to_string());
            }
            _ => parts.push(format!("{start}-{end}")),
        }
    }
    parts.join(",")
}

/// The lowest `count` indexes below `completions` that neither succeeded nor have an active pod.
pub(crate) fn pending_indexes(
    completions: u32,
    succeeded: &BTreeSet<u32>,
    active: &BTreeSet<u32>,
    count: usize,
) -> Vec<u32> {
    (0..completions)
        .filter(|i| !succeeded.contains(i) && !active.contains(i))
        .take(count)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "uid": "u-1"},
            "spec": {"template": {
                "metadata": {"labels": {"job-name": "train", "batch.kubernetes.io/job-name": "train",
                                        "controller-uid": "u-1", "batch.kubernetes.io/controller-uid": "u-1"},
                             "annotations": {"note": "x"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}})
    }

    #[test]
    fn a_pod_from_the_template() {
        let pod = pod_for(&job(), None, Some("train-group"));
        let meta = &pod["metadata"];
        assert_eq!(meta["generateName"], "train-");
        assert_eq!(meta["namespace"], "ml");
        assert_eq!(meta["labels"]["batch.kubernetes.io/job-name"], "train");
        assert_eq!(meta["labels"]["controller-uid"], "u-1");
        assert_eq!(meta["annotations"], json!({"note": "x"}));
        assert_eq!(meta["finalizers"], json!([TRACKING_FINALIZER]));
        assert_eq!(
            meta["ownerReferences"],
            json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u-1",
                    "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(
            pod["spec"]["schedulingGroup"],
            json!({"podGroupName": "train-group"})
        );
        assert_eq!(pod["spec"]["restartPolicy"], "Never");
        assert!(
            pod_for(&job(), None, None)["spec"]
                .get("schedulingGroup")
                .is_none()
        );
    }

    #[test]
    fn an_indexed_pod_knows_its_index() {
        let pod = pod_for(&job(), Some(2), None);
        assert_eq!(pod["metadata"]["generateName"], "train-2-");
        assert_eq!(pod["metadata"]["labels"][COMPLETION_INDEX_ANNOTATION], "2");
        assert_eq!(pod["metadata"]["annotations"][COMPLETION_INDEX_ANNOTATION], "2");
        assert_eq!(pod["spec"]["hostname"], "train-2");
        assert_eq!(
            pod["spec"]["containers"][0]["env"],
            json!([{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef":
                {"fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}}])
        );
        assert_eq!(index_of(&pod), Some(2));
        let long = indexed_prefix(&"a".repeat(70), 12);
        assert_eq!(long.len(), MAX_GENERATED_PREFIX);
        assert!(long.ends_with("a-12-"), "{long}");
    }

    #[test]
    fn pod_states() {
        assert_eq!(
            state_of(&json!({"status": {"phase": "Running"}})),
            PodState::Active
        );
        assert_eq!(
            state_of(&json!({"status": {"phase": "Succeeded"}})),
            PodState::Succeeded
        );
        assert_eq!(
            state_of(&json!({"status": {"phase": "Failed"}})),
            PodState::Failed
        );
        assert_eq!(
            state_of(
                &json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Running"}})
            ),
            PodState::Failed
        );
    }

    #[test]
    fn completed_indexes_round_trip() {
        let set = parse_indexes("0-2,4,6,7,9-11");
        assert_eq!(
            set.iter().copied().collect::<Vec<_>>(),
            vec![0, 1, 2, 4, 6, 7, 9, 10, 11]
        );
        assert_eq!(format_indexes(&set), "0-2,4,6,7,9-11");
        assert_eq!(format_indexes(&BTreeSet::new()), "");
        let active: BTreeSet<u32> = [1].into();
        assert_eq!(pending_indexes(6, &parse_indexes("0,2"), &active, 2), vec![3, 4]);
    }
}

//! batch/v1 Jobs as kube-apiserver 1.37 admits them: the defaults a Job gets, the selector and
//! template labels it is given on create, and the checks of its spec that matter before the Job
//! controller makes pods from it.
//!
//! - Defaults: `parallelism` (and `completions`, when both are unset) 1, `backoffLimit` 6,
//!   `completionMode: NonIndexed`, `suspend: false`, `manualSelector: false`,
//!   `podReplacementPolicy` (`Failed` with a pod failure policy, else `TerminatingOrFailed`), the
//!   Job's labels from its template's when it has none, and the template's pod-spec defaults
//!   (`schedulerName`, `dnsPolicy`, `terminationGracePeriodSeconds`).
//! - Selector generation (unless `manualSelector`): the template is labelled with the Job's name
//!   (`job-name`, `batch.kubernetes.io/job-name`) and UID (`controller-uid`,
//!   `batch.kubernetes.io/controller-uid`), and the selector matches the UID label. Labels the
//!   writer already set are kept, and a conflict is then rejected by validation.
//! - Validation: non-negative counts, `restartPolicy` `OnFailure` or `Never`, a selector that
//!   matches the template's labels (and, when generated, the generated ones), a gang `minCount`
//!   no larger than `parallelism`; the template's pod spec is checked as a pod's is.
//! - Update: the selector, the completion mode and (outside of suspension) the template are
//!   immutable, and so is `completions` of a NonIndexed Job; the scheduling policy cannot change
//!   between basic and gang.
//!
//! Messages are kube-apiserver's. A difference: where upstream prints a structured bad value in Go
//! syntax (a whole template), this prints it as JSON.

use serde_json::{Map, Value, json};

use super::push;
use crate::error::Cause;
use crate::selector::LabelSelector;
use crate::util::{get_path, get_str, name_of, object_at, uid_of};

/// The label with the Job's name (and its older unprefixed twin).
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// Older unprefixed form of [`JOB_NAME_LABEL`], still set and checked.
pub const LEGACY_JOB_NAME_LABEL: &str = "job-name";
/// The label with the Job's UID: what a generated selector matches.
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// Older unprefixed form of [`CONTROLLER_UID_LABEL`], still set and checked.
pub const LEGACY_CONTROLLER_UID_LABEL: &str = "controller-uid";

/// Defaults a Job's spec as kube-apiserver's batch/v1 defaulting does (on create and update).
pub fn default_job(job: &mut Value) {
    let template_labels = get_path(job, &["spec", "template", "metadata", "labels"])
        .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
        .cloned();
    let has_labels = get_path(job, &["metadata", "labels"])
        .and_then(Value::as_object)
        .is_some_and(|m| !m.is_empty());
    if let Some(labels) = template_labels
        && !has_labels
    {
        object_at(job, &["metadata"]).insert("labels".into(), labels);
    }
    let spec = object_at(job, &["spec"]);
    if is_unset(spec, "completions") && is_unset(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
    }
    let replacement = if is_unset(spec, "podFailurePolicy") {
        "TerminatingOrFailed"
    } else {
        "Failed"
    };
    let backoff = if is_unset(spec, "backoffLimitPerIndex") {
        json!(6)
    } else {
        json!(i32::MAX)
    };
    for (field, value) in [
        ("parallelism", json!(1)),
        ("backoffLimit", backoff),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
        ("podReplacementPolicy", json!(replacement)),
        ("manualSelector", json!(false)),
    ] {
        if is_unset(spec, field) {
            spec.insert(field.into(), value);
        }
    }
    let pod_spec = object_at(job, &["spec", "template", "spec"]);
    for (field, value) in [
        ("schedulerName", json!("default-scheduler")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("terminationGracePeriodSeconds", json!(30)),
    ] {
        if is_unset(pod_spec, field) {
            pod_spec.insert(field.into(), value);
        }
    }
}

fn is_unset(m: &Map<String, Value>, field: &str) -> bool {
    m.get(field).is_none_or(Value::is_null)
}

fn manual_selector(job: &Value) -> bool {
    get_path(job, &["spec", "manualSelector"]).and_then(Value::as_bool) == Some(true)
}

/// Labels the template with the Job's name and UID and selects the UID, unless the Job asks for a
/// manual selector (on create; the UID is already set).
pub fn generate_selector(job: &mut Value) {
    if manual_selector(job) {
        return;
    }
    let name = name_of(job).to_string();
    let uid = uid_of(job).to_string();
    let labels = object_at(job, &["spec", "template", "metadata", "labels"]);
    for (key, value) in [
        (LEGACY_JOB_NAME_LABEL, &name),
        (JOB_NAME_LABEL, &name),
        (LEGACY_CONTROLLER_UID_LABEL, &uid),
        (CONTROLLER_UID_LABEL, &uid),
    ] {
        labels.entry(key).or_insert_with(|| json!(value));
    }
    let selector = object_at(job, &["spec", "selector", "matchLabels"]);
    selector.entry(CONTROLLER_UID_LABEL).or_insert_with(|| json!(uid));
}

/// A field path and a count that must not be negative.
fn check_non_negative(causes: &mut Vec<Cause>, spec: &Value, field: &str) {
    if let Some(n) = spec.get(field).and_then(Value::as_i64)
        && n < 0
    {
        push(
            causes,
            format!("spec.{field}"),
            format!("Invalid value: {n}: must be greater than or equal to 0"),
        );
    }
}

fn json_text(v: Option<&Value>) -> String {
    v.map_or_else(|| "null".into(), Value::to_string)
}

/// A label map as Go's JSON encoder writes it: keys in order.
fn labels_json(labels: Option<&Value>) -> String {
    match labels.and_then(Value::as_object) {
        Some(m) => {
            let sorted: std::collections::BTreeMap<&String, &Value> = m.iter().collect();
            serde_json::to_string(&sorted).unwrap_or_default()
        }
        None => "null".into(),
    }
}

/// The problems of a Job as kube-apiserver reports them on create and update (the template's pod
/// spec aside, which the caller checks as a pod's).
pub fn check_job(job: &Value, causes: &mut Vec<Cause>) {
    check_generated_selector(job, causes);
    let empty = json!({});
    let spec = job.get("spec").unwrap_or(&empty);
    for field in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    ] {
        check_non_negative(causes, spec, field);
    }
    let mode = get_str(spec, &["completionMode"]).unwrap_or("NonIndexed");
    match mode {
        "NonIndexed" => {}
        "Indexed" => {
            if spec.get("completions").is_none_or(Value::is_null) {
                push(
                    causes,
                    "spec.completions",
                    "Required value: when completion mode is Indexed",
                );
            }
        }
        other => push(
            causes,
            "spec.completionMode",
            format!("Unsupported value: {other:?}: supported values: \"NonIndexed\", \"Indexed\""),
        ),
    }
    check_gang_min_count(spec, causes);
    match get_str(spec, &["template", "spec", "restartPolicy"]).unwrap_or_default() {
        "" | "Always" => push(
            causes,
            "spec.template.spec.restartPolicy",
            "Required value: valid values: \"OnFailure\", \"Never\"",
        ),
        "OnFailure" if spec.get("podFailurePolicy").is_some_and(|p| !p.is_null()) => push(
            causes,
            "spec.template.spec.restartPolicy",
            "Invalid value: \"OnFailure\": only \"Never\" is supported when podFailurePolicy is specified",
        ),
        "OnFailure" | "Never" => {}
        other => push(
            causes,
            "spec.template.spec.restartPolicy",
            format!("Unsupported value: {other:?}: supported values: \"OnFailure\", \"Never\""),
        ),
    }
    let selector = spec.get("selector").filter(|s| !s.is_null());
    match selector.map(LabelSelector::from_label_selector) {
        None => push(causes, "spec.selector", "Required value"),
        Some(Err(e)) => push(causes, "spec.selector", e.to_string()),
        Some(Ok(sel)) => {
            let labels = get_path(spec, &["template", "metadata", "labels"]);
            if !sel.matches_labels(labels.and_then(Value::as_object)) {
                push(
                    causes,
                    "spec.template.metadata.labels",
                    format!(
                        "Invalid value: {}: `selector` does not match template `labels`",
                        labels_json(labels)
                    ),
                );
            }
        }
    }
}

/// A generated selector: the template carries the Job's own name and UID labels, and the
/// selector matches them.
fn check_generated_selector(job: &Value, causes: &mut Vec<Cause>) {
    let Some(selector) = get_path(job, &["spec", "selector"]).filter(|s| !s.is_null()) else {
        return;
    };
    if manual_selector(job) {
        return;
    }
    let name = name_of(job);
    let uid = uid_of(job);
    if uid.is_empty() {
        push(causes, "metadata.uid", "Required value");
    }
    let labels = get_path(job, &["spec", "template", "metadata", "labels"]);
    let mut expected = Map::new();
    for (key, value) in [
        (LEGACY_CONTROLLER_UID_LABEL, uid),
        (LEGACY_JOB_NAME_LABEL, name),
        (CONTROLLER_UID_LABEL, uid),
        (JOB_NAME_LABEL, name),
    ] {
        match labels.and_then(|l| l.get(key)).and_then(Value::as_str) {
            None => push(
                causes,
                format!("spec.template.metadata.labels[{key}]"),
                format!("Required value: must be '{value}'"),
            ),
            // Upstream shows the whole label map as the bad value.
            Some(v) if v != value => push(
                causes,
                format!("spec.template.metadata.labels[{key}]"),
                format!("Invalid value: {}: must be '{value}'", labels_json(labels)),
            ),
            Some(_) => {}
        }
        expected.insert(key.into(), json!(value));
    }
    if let Ok(sel) = LabelSelector::from_label_selector(selector)
        && !sel.matches_labels(Some(&expected))
    {
        push(
            causes,
            "spec.selector",
            format!("Invalid value: {selector}: `selector` not auto-generated"),
        );
    }
}

/// A gang's explicit `minCount` is at least 1 and no larger than `parallelism`.
fn check_gang_min_count(spec: &Value, causes: &mut Vec<Cause>) {
    let Some(min) =
        get_path(spec, &["scheduling", "schedulingPolicy", "gang", "minCount"]).and_then(Value::as_i64)
    else {
        return;
    };
    let field = "spec.scheduling.schedulingPolicy.gang.minCount";
    if min < 1 {
        push(
            causes,
            field,
            format!("Invalid value: {min}: must be greater than or equal to 1"),
        );
    }
    let parallelism = spec.get("parallelism").and_then(Value::as_i64).unwrap_or(1);
    if min > parallelism {
        push(
            causes,
            field,
            format!("Invalid value: {min}: must not be greater than parallelism ({parallelism})"),
        );
    }
}

/// The problems of a spec update: what may not change once the Job exists.
pub fn check_job_update(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let old_spec = |f: &str| get_path(old, &["spec", f]);
    let new_spec = |f: &str| get_path(new, &["spec", f]);
    let immutable = |causes: &mut Vec<Cause>, f: &str| {
        if old_spec(f) != new_spec(f) {
            push(
                causes,
                format!("spec.{f}"),
                format!("Invalid value: {}: field is immutable", json_text(new_spec(f))),
            );
        }
    };
    immutable(&mut causes, "selector");
    immutable(&mut causes, "completionMode");
    if get_str(new, &["spec", "completionMode"]) != Some("Indexed") {
        immutable(&mut causes, "completions");
    }
    // A suspended Job that never started may have its template changed (its pods do not exist).
    let suspended_unstarted = new_spec("suspend").and_then(Value::as_bool) == Some(true)
        && get_path(old, &["status", "startTime"]).is_none_or(Value::is_null);
    if !suspended_unstarted {
        immutable(&mut causes, "template");
    }
    let variant = |v: &Value| {
        get_path(v, &["spec", "scheduling", "schedulingPolicy"])
            .filter(|p| !p.is_null())
            .map(|p| p.get("basic").is_some_and(|b| !b.is_null()))
    };
    if let (Some(was_basic), Some(is_basic)) = (variant(old), variant(new))
        && was_basic != is_basic
    {
        push(
            &mut causes,
            "spec.scheduling.schedulingPolicy",
            "Invalid value: null: the basic/gang policy variant is immutable after creation; only schedulingPolicy.gang.minCount may be updated",
        );
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "train", "namespace": "ml", "uid": "u-1"},
               "spec": {"template": {"metadata": {"labels": {"app": "train"}},
                                      "spec": {"restartPolicy": "Never",
                                               "containers": [{"name": "c", "image": "x"}]}}}})
    }

    fn admitted(mut j: Value) -> Value {
        default_job(&mut j);
        generate_selector(&mut j);
        j
    }

    fn problems(j: &Value) -> Vec<String> {
        let mut causes = Vec::new();
        check_job(j, &mut causes);
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn defaults_and_the_generated_selector() {
        let j = admitted(job());
        let spec = &j["spec"];
        assert_eq!(spec["parallelism"], 1);
        assert_eq!(spec["completions"], 1);
        assert_eq!(spec["backoffLimit"], 6);
        assert_eq!(spec["completionMode"], "NonIndexed");
        assert_eq!(spec["suspend"], false);
        assert_eq!(spec["manualSelector"], false);
        assert_eq!(spec["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(spec["template"]["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(
            spec["template"]["metadata"]["labels"],
            json!({"app": "train", "job-name": "train", "batch.kubernetes.io/job-name": "train",
                   "controller-uid": "u-1", "batch.kubernetes.io/controller-uid": "u-1"})
        );
        assert_eq!(
            spec["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
        );
        // The Job's own labels come from the template's as the writer gave them.
        assert_eq!(j["metadata"]["labels"], json!({"app": "train"}));
        assert!(problems(&j).is_empty(), "{:?}", problems(&j));
    }

    #[test]
    fn parallelism_alone_leaves_completions_unset() {
        let mut j = job();
        j["spec"]["parallelism"] = json!(3);
        let j = admitted(j);
        assert!(j["spec"].get("completions").is_none());
        let mut j = job();
        j["spec"]["completions"] = json!(5);
        let j = admitted(j);
        assert_eq!(j["spec"]["parallelism"], 1);
    }

    #[test]
    fn kube_apiserver_wording_for_bad_jobs() {
        // (what is changed, the message expected)
        let cases: Vec<(&str, fn(&mut Value), &str)> = vec![
            (
                "negative parallelism",
                |j| j["spec"]["parallelism"] = json!(-1),
                "spec.parallelism: Invalid value: -1: must be greater than or equal to 0",
            ),
            (
                "negative completions",
                |j| j["spec"]["completions"] = json!(-2),
                "spec.completions: Invalid value: -2: must be greater than or equal to 0",
            ),
            (
                "no restart policy",
                |j| {
                    j["spec"]["template"]["spec"]
                        .as_object_mut()
                        .unwrap()
                        .remove("restartPolicy");
                },
                "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"",
            ),
            (
                "restart always",
                |j| j["spec"]["template"]["spec"]["restartPolicy"] = json!("Always"),
                "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"",
            ),
            (
                "unknown restart policy",
                |j| j["spec"]["template"]["spec"]["restartPolicy"] = json!("Sometimes"),
                "spec.template.spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"OnFailure\", \"Never\"",
            ),
            (
                "gang larger than parallelism",
                |j| {
                    j["spec"]["parallelism"] = json!(3);
                    j["spec"]["scheduling"] = json!({"schedulingPolicy": {"gang": {"minCount": 4}}});
                },
                "spec.scheduling.schedulingPolicy.gang.minCount: Invalid value: 4: must not be greater than parallelism (3)",
            ),
            (
                "indexed without completions",
                |j| {
                    j["spec"]["completionMode"] = json!("Indexed");
                    j["spec"]["parallelism"] = json!(2);
                },
                "spec.completions: Required value: when completion mode is Indexed",
            ),
            (
                "a wrong job-name label",
                |j| j["spec"]["template"]["metadata"]["labels"]["job-name"] = json!("other"),
                "spec.template.metadata.labels[job-name]: Invalid value: {\"app\":\"train\",\"batch.kubernetes.io/controller-uid\":\"u-1\",\"batch.kubernetes.io/job-name\":\"train\",\"controller-uid\":\"u-1\",\"job-name\":\"other\"}: must be 'train'",
            ),
        ];
        for (name, change, want) in cases {
            let mut j = job();
            change(&mut j);
            let j = admitted(j);
            let got = problems(&j);
            assert!(got.iter().any(|g| g == want), "{name}: {got:?}");
        }
    }

    #[test]
    fn a_manual_selector_must_match_the_template() {
        let mut j = job();
        j["spec"]["manualSelector"] = json!(true);
        j["spec"]["selector"] = json!({"matchLabels": {"app": "other"}});
        let j = admitted(j);
        assert_eq!(
            problems(&j),
            vec![
                "spec.template.metadata.labels: Invalid value: {\"app\":\"train\"}: `selector` does not match template `labels`"
                    .to_string()
            ]
        );
        let mut j = job();
        j["spec"]["manualSelector"] = json!(true);
        let j = admitted(j);
        assert_eq!(problems(&j), vec!["spec.selector: Required value".to_string()]);
    }

    #[test]
    fn what_an_update_may_not_change() {
        let old = admitted(job());
        let mut new = old.clone();
        new["spec"]["parallelism"] = json!(4);
        assert!(check_job_update(&old, &new).is_empty(), "parallelism scales");
        new["spec"]["completions"] = json!(4);
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("y");
        new["spec"]["selector"] = json!({"matchLabels": {"a": "b"}});
        let fields: Vec<String> = check_job_update(&old, &new)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(fields, vec!["spec.selector", "spec.completions", "spec.template"]);
        let mut gang = old.clone();
        gang["spec"]["scheduling"] = json!({"schedulingPolicy": {"gang": {"minCount": 2}}});
        let mut resized = gang.clone();
        resized["spec"]["scheduling"]["schedulingPolicy"]["gang"]["minCount"] = json!(3);
        assert!(
            check_job_update(&gang, &resized).is_empty(),
            "minCount may change"
        );
        let mut basic = gang.clone();
        basic["spec"]["scheduling"] = json!({"schedulingPolicy": {"basic": {}}});
        let causes = check_job_update(&gang, &basic);
        assert_eq!(causes[0].field, "spec.scheduling.schedulingPolicy");
    }
}

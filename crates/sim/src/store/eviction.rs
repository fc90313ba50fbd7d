//! The eviction subresource (`pods/{name}/eviction`): a delete that honours PodDisruptionBudgets.
//!
//! `kubectl drain` and the cluster autoscaler evict instead of deleting so that a budget can say
//! no. kube-apiserver's rules, followed here:
//!
//! - a pod that is terminal, still `Pending` or already being deleted disrupts nothing new and is
//!   deleted without looking at budgets (guarded by its resourceVersion while it could still become
//!   ready);
//! - otherwise the budgets of the pod's namespace whose selector matches the pod are found: none
//!   means a plain delete, more than one is refused (500);
//! - an unready pod is deleted without using up the budget when the budget says unhealthy pods
//!   may always go (`AlwaysAllow`) or the application is healthy anyway (`currentHealthy >=
//!   desiredHealthy > 0`);
//! - otherwise the budget must have been processed since its last spec change
//!   (`observedGeneration`) and allow a disruption; the eviction takes one from
//!   `disruptionsAllowed` and records the pod in `disruptedPods` in one status write that is
//!   conditional on the budget not having changed since it was read, then deletes the pod.
//!
//! Nothing computes budget status here (there is no disruption controller): it is whatever the
//! scenario or a client wrote, so a budget created without a status refuses every eviction as
//! "still being processed", as it would on a cluster whose controller manager is not running.

use serde_json::{Value, json};

use crate::error::StoreError;
use crate::selector::LabelSelector;
use crate::strategy::UpdateMode;
use crate::util::{self, get_path, get_str};

use super::{DeleteOptions, ObjectRef, Store};

/// Upstream's bound on evictions the disruption controller has not confirmed yet.
const MAX_DISRUPTED_PODS: usize = 2000;

/// How often an eviction of a not yet started pod is retried when the pod changes under it
/// (upstream retries conflicts for about ten seconds; here a re-read settles it at once).
const ATTEMPTS: usize = 20;

fn phase(pod: &Value) -> &str {
    // Pods are created `Pending`; a pod without a phase has not been started either.
    get_str(pod, &["status", "phase"])
        .filter(|p| !p.is_empty())
        .unwrap_or("Pending")
}

fn being_deleted(pod: &Value) -> bool {
    get_path(pod, &["metadata", "deletionTimestamp"]).is_some_and(|t| !t.is_null())
}

fn terminal(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

fn ready(pod: &Value) -> bool {
    get_path(pod, &["status", "conditions"])
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| get_str(c, &["type"]) == Some("Ready") && get_str(c, &["status"]) == Some("True"))
        })
}

fn int(v: &Value, path: &[&str]) -> i64 {
    get_path(v, path).and_then(Value::as_i64).unwrap_or(0)
}

/// Whether the budget's selector selects the pod. A budget without a selector selects nothing and
/// one whose selector does not parse is skipped, as upstream.
fn selects(pdb: &Value, pod: &Value) -> bool {
    match get_path(pdb, &["spec", "selector"]).filter(|s| !s.is_null()) {
        None => false,
        Some(sel) => LabelSelector::from_label_selector(sel).is_ok_and(|s| s.matches(pod)),
    }
}

fn too_many_requests(budget: &str, cause: String, retry_after_seconds: u32) -> StoreError {
    StoreError::DisruptionBudget {
        code: 429,
        message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        budget: budget.to_string(),
        cause,
        retry_after_seconds,
    }
}

fn not_processed(budget: &str) -> StoreError {
    too_many_requests(
        budget,
        format!("The disruption budget {budget} is still being processed by the server."),
        10,
    )
}

fn forbidden(budget: &str, why: &str, cause: &str) -> StoreError {
    StoreError::DisruptionBudget {
        code: 403,
        message: format!("poddisruptionbudget.policy \"{budget}\" is forbidden: {why}"),
        budget: budget.to_string(),
        cause: format!("The disruption budget {budget} does not allow evicting pods currently: {cause}"),
        retry_after_seconds: 0,
    }
}

fn condition<'a>(pdb: &'a Value, kind: &str) -> Option<&'a Value> {
    get_path(pdb, &["status", "conditions"])
        .and_then(Value::as_array)?
        .iter()
        .find(|c| get_str(c, &["type"]) == Some(kind))
}

/// The refusal for a budget that allows no disruption, explained as upstream does: a failed
/// controller sync first, then the health numbers, then the condition.
fn no_disruption_allowed(name: &str, pdb: &Value) -> StoreError {
    let cond = condition(pdb, "DisruptionAllowed")
        .filter(|c| get_str(c, &["status"]) == Some("False"))
        .map(|c| {
            (
                get_str(c, &["reason"]).unwrap_or_default(),
                get_str(c, &["message"]).unwrap_or_default(),
            )
        })
        .filter(|(_, m)| !m.is_empty());
    let current = int(pdb, &["status", "currentHealthy"]);
    let desired = int(pdb, &["status", "desiredHealthy"]);
    let msg = match cond {
        Some(("SyncFailed", m)) => {
            format!(
                "The disruption budget {name} does not allow evicting pods currently because it failed sync: {m}"
            )
        }
        _ if current <= desired => {
            format!("The disruption budget {name} needs {desired} healthy pods and has {current} currently")
        }
        Some((reason, m)) => {
            format!("The disruption budget {name} does not allow evicting pods currently ({reason}): {m}")
        }
        None => format!("The disruption budget {name} does not allow evicting pods currently"),
    };
    too_many_requests(name, msg, 0)
}

/// Takes one disruption from `pdb` for `pod`: the new budget object, or the refusal.
fn take_disruption(pdb: &ObjectRef, pod: &str) -> Result<Value, StoreError> {
    let name = pdb.name();
    let v = pdb.value();
    if int(v, &["status", "observedGeneration"]) < int(v, &["metadata", "generation"]) {
        return Err(not_processed(name));
    }
    let allowed = int(v, &["status", "disruptionsAllowed"]);
    if allowed < 0 {
        return Err(forbidden(
            name,
            "pdb disruptions allowed is negative",
            "pdb disruptions allowed is negative",
        ));
    }
    let disrupted = get_path(v, &["status", "disruptedPods"])
        .and_then(Value::as_object)
        .map_or(0, serde_json::Map::len);
    if disrupted > MAX_DISRUPTED_PODS {
        return Err(forbidden(
            name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            "too many pending evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(no_disruption_allowed(name, v));
    }
    let mut next = v.clone();
    let observed = int(v, &["status", "observedGeneration"]);
    let status = util::object_at(&mut next, &["status"]);
    status.insert("disruptionsAllowed".into(), json!(allowed - 1));
    if allowed == 1 {
        set_condition(status, observed);
    }
    util::ensure_object(status.entry("disruptedPods").or_insert_with(|| json!({})))
        .insert(pod.to_string(), json!(util::now_rfc3339()));
    // Without a resourceVersion the store re-runs this decision on the latest budget when another
    // write lands between read and commit, so the decrement is never based on a stale count.
    util::meta_mut(&mut next).remove("resourceVersion");
    Ok(next)
}

/// `DisruptionAllowed=False` (`InsufficientPods`) once the last disruption is taken; the
/// transition time moves only when the status changes.
fn set_condition(status: &mut serde_json::Map<String, Value>, observed_generation: i64) {
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let Some(list) = conditions.as_array_mut() else {
        return;
    };
    let wanted = json!({"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods",
        "message": "", "observedGeneration": observed_generation});
    match list
        .iter_mut()
        .find(|c| get_str(c, &["type"]) == Some("DisruptionAllowed"))
    {
        Some(c) => {
            let since = match get_str(c, &["status"]) {
                Some("False") => c.get("lastTransitionTime").cloned(),
                _ => None,
            }
            .unwrap_or_else(|| json!(util::now_rfc3339()));
            *c = wanted;
            c["lastTransitionTime"] = since;
        }
        None => {
            let mut c = wanted;
            c["lastTransitionTime"] = json!(util::now_rfc3339());
            list.push(c);
        }
    }
}

impl Store {
    /// Evicts a pod as `POST pods/{name}/eviction` does (see the module docs). `opts` are the
    /// eviction's delete options; with `dry_run` every check runs and nothing is written.
    pub fn evict(&self, namespace: &str, name: &str, opts: &DeleteOptions) -> Result<(), StoreError> {
        let pods = self
            .inner
            .pods
            .ok_or_else(|| StoreError::UnknownResource("pods".into()))?;
        for _ in 0..ATTEMPTS {
            let pod = self.get_in(pods, namespace, name)?;
            let v = pod.value();
            if terminal(v) || being_deleted(v) {
                return self.delete_evicted(namespace, name, opts);
            }
            if phase(v) != "Pending" {
                return self.evict_guarded_by_budget(namespace, &pod, opts);
            }
            // Not running yet, but it could start and become ready before the delete lands: the
            // delete is guarded by the version read, and a pod that changed is looked at again
            // (unless the client's own precondition failed).
            match self.delete_evicted(namespace, name, &guarded(&pod, opts)) {
                Err(e) if e.is_conflict() && opts.precondition_resource_version.is_none() => {}
                other => return other,
            }
        }
        Err(StoreError::stale("pods", name))
    }

    /// The eviction of a started pod: at most one budget may select it and that one must allow it.
    fn evict_guarded_by_budget(
        &self,
        namespace: &str,
        pod: &ObjectRef,
        opts: &DeleteOptions,
    ) -> Result<(), StoreError> {
        let name = pod.name();
        let v = pod.value();
        let Some(pdbs_kind) = self.inner.registry.by_gvr("policy", "v1", "poddisruptionbudgets") else {
            return self.delete_evicted(namespace, name, opts);
        };
        let budgets: Vec<ObjectRef> = self
            .snapshot(pdbs_kind, Some(namespace))
            .into_iter()
            .filter(|b| selects(b.value(), v))
            .collect();
        let budget = match budgets.as_slice() {
            [] => return self.delete_evicted(namespace, name, opts),
            [one] => one.clone(),
            _ => return Err(StoreError::MultipleDisruptionBudgets),
        };
        let b = budget.value();
        if !ready(v) {
            let always = get_str(b, &["spec", "unhealthyPodEvictionPolicy"]) == Some("AlwaysAllow");
            let desired = int(b, &["status", "desiredHealthy"]);
            let healthy_anyway = desired > 0 && int(b, &["status", "currentHealthy"]) >= desired;
            if always || healthy_anyway {
                // The unready pod does not count towards the budget; the guard makes sure it has
                // not become ready meanwhile (if it has, the client is asked to come back).
                return match self.delete_evicted(namespace, name, &guarded(pod, opts)) {
                    Err(e) if e.is_conflict() && opts.precondition_resource_version.is_none() => {
                        Err(not_processed(budget.name()))
                    }
                    other => other,
                };
            }
        }
        self.guaranteed_update(
            pdbs_kind,
            namespace,
            budget.name(),
            UpdateMode::Status,
            opts.dry_run,
            &mut |cur| take_disruption(cur, name),
        )?;
        self.delete_evicted(namespace, name, opts)
    }

    /// Marks the pod `DisruptionTarget=True` (`EvictionByEvictionAPI`) and deletes it, both under
    /// the options' preconditions, so watchers see why the pod went, as from kube-apiserver.
    fn delete_evicted(&self, namespace: &str, name: &str, opts: &DeleteOptions) -> Result<(), StoreError> {
        let pods = self
            .inner
            .pods
            .ok_or_else(|| StoreError::UnknownResource("pods".into()))?;
        let mut opts = opts.clone();
        if !opts.dry_run {
            let conflict = |message: String| StoreError::Conflict {
                resource: "Pod".into(),
                name: name.to_string(),
                message,
            };
            let marked = self.guaranteed_update(pods, namespace, name, UpdateMode::Status, false, &mut |cur| {
                if let Some(uid) = &opts.precondition_uid
                    && uid != cur.uid()
                {
                    return Err(conflict(format!(
                        "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                        cur.uid()
                    )));
                }
                if let Some(rv) = &opts.precondition_resource_version
                    && *rv != cur.resource_version().to_string()
                {
                    return Err(conflict(format!(
                        "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                        cur.resource_version()
                    )));
                }
                let mut v = cur.to_value();
                mark_disruption_target(&mut v);
                // Re-run on the latest pod if it changes meanwhile (the preconditions are checked
                // above, on whatever pod the write is based on).
                util::meta_mut(&mut v).remove("resourceVersion");
                Ok(v)
            })?;
            if opts.precondition_resource_version.is_some() {
                // This eviction wrote the pod last: the guard moves to that write.
                opts.precondition_resource_version = Some(marked.resource_version().to_string());
            }
        }
        self.delete_in(pods, namespace, name, &opts).map(|_| ())
    }
}

/// `opts` with the pod's current resourceVersion as precondition, unless the client gave one.
fn guarded(pod: &ObjectRef, opts: &DeleteOptions) -> DeleteOptions {
    let mut o = opts.clone();
    if o.precondition_resource_version.is_none() {
        o.precondition_resource_version = Some(pod.resource_version().to_string());
    }
    o
}

fn mark_disruption_target(pod: &mut Value) {
    let now = util::now_rfc3339();
    let status = util::object_at(pod, &["status"]);
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let Some(list) = conditions.as_array_mut() else {
        return;
    };
    let wanted = json!({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting", "lastProbeTime": null});
    match list
        .iter_mut()
        .find(|c| get_str(c, &["type"]) == Some("DisruptionTarget"))
    {
        Some(c) => {
            let since = match get_str(c, &["status"]) {
                Some("True") => c.get("lastTransitionTime").cloned(),
                _ => None,
            }
            .unwrap_or_else(|| json!(now));
            *c = wanted;
            c["lastTransitionTime"] = since;
        }
        None => {
            let mut c = wanted;
            c["lastTransitionTime"] = json!(now);
            list.push(c);
        }
    }
}

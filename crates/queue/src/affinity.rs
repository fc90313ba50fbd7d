//! The pre-filter upstream applies before running hints for assigned-pod add/update events.
//!
//! A pod being added to or changed on a node can only help a waiting pod whose *required* pod
//! affinity selects it, or one PodTopologySpread rejected (spreading counts pods). Everything else
//! is skipped without calling hints, which matters when thousands of pods wait and every bind
//! produces an event. The queue has no namespace lister, so a term with a non-empty
//! `namespaceSelector` is assumed to match: the pre-filter may let too many pods through (their hints
//! still decide), never too few.

use k8s_openapi::{
    api::core::v1::{Pod, PodAffinityTerm},
    apimachinery::pkg::apis::meta::v1::LabelSelector,
};

/// Upstream's plugin name for topology spreading.
pub(crate) const POD_TOPOLOGY_SPREAD: &str = "PodTopologySpread";

fn selector_matches(
    selector: Option<&LabelSelector>,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    // A missing selector selects nothing; an empty one selects everything.
    let Some(sel) = selector else { return false };
    if let Some(ml) = &sel.match_labels
        && ml.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    for req in sel.match_expressions.iter().flatten() {
        let value = labels.get(&req.key);
        let values = req.values.as_deref().unwrap_or_default();
        let ok = match req.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            // An invalid operator: let the hint decide.
            _ => true,
        };
        if !ok {
            return false;
        }
    }
    true
}

fn term_matches(owner_namespace: &str, term: &PodAffinityTerm, pod: &Pod) -> bool {
    let pod_ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let namespaces = term.namespaces.as_deref().unwrap_or_default();
    let ns_ok = match &term.namespace_selector {
        // Without a lister we cannot evaluate a real selector; assume it matches.
        Some(_) => true,
        None if namespaces.is_empty() => pod_ns == owner_namespace,
        None => namespaces.iter().any(|n| n == pod_ns),
    };
    if !ns_ok {
        return false;
    }
    let empty = Default::default();
    selector_matches(
        term.label_selector.as_ref(),
        pod.metadata.labels.as_ref().unwrap_or(&empty),
    )
}

fn required_terms(pod: &Pod) -> Option<&Vec<PodAffinityTerm>> {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
}

/// True when one of `waiting`'s required pod-affinity terms selects `pod`.
pub(crate) fn required_affinity_selects(waiting: &Pod, pod: &Pod) -> bool {
    let owner_ns = waiting.metadata.namespace.as_deref().unwrap_or("default");
    required_terms(waiting).is_some_and(|terms| terms.iter().any(|t| term_matches(owner_ns, t, pod)))
}

/// True when `pod` has a required pod-affinity term (only such pods can be selected above).
pub(crate) fn has_required_affinity(pod: &Pod) -> bool {
    required_terms(pod).is_some_and(|terms| !terms.is_empty())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::core::v1::{Affinity, PodAffinity, PodSpec},
        apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement,
    };

    use super::*;

    fn waiting(term: PodAffinityTerm) -> Pod {
        let mut p = Pod::default();
        p.metadata.namespace = Some("ns".into());
        p.spec = Some(PodSpec {
            affinity: Some(Affinity {
                pod_affinity: Some(PodAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![term]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        p
    }

    fn labeled(ns: &str, labels: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.labels = Some(labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect());
        p
    }

    fn term(sel: Option<LabelSelector>, namespaces: Option<Vec<&str>>) -> PodAffinityTerm {
        PodAffinityTerm {
            label_selector: sel,
            namespaces: namespaces.map(|v| v.into_iter().map(String::from).collect()),
            topology_key: "zone".into(),
            ..Default::default()
        }
    }

    #[test]
    fn affinity_terms() {
        let app_web = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            ..Default::default()
        };
        let not_db = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: "NotIn".into(),
                values: Some(vec!["db".into()]),
            }]),
            ..Default::default()
        };
        let cases = [
            (
                "same ns match",
                term(Some(app_web.clone()), None),
                labeled("ns", &[("app", "web")]),
                true,
            ),
            (
                "other ns",
                term(Some(app_web.clone()), None),
                labeled("x", &[("app", "web")]),
                false,
            ),
            (
                "listed ns",
                term(Some(app_web.clone()), Some(vec!["x"])),
                labeled("x", &[("app", "web")]),
                true,
            ),
            (
                "label mismatch",
                term(Some(app_web), None),
                labeled("ns", &[("app", "db")]),
                false,
            ),
            (
                "nil selector selects nothing",
                term(None, None),
                labeled("ns", &[]),
                false,
            ),
            (
                "empty selector selects all",
                term(Some(LabelSelector::default()), None),
                labeled("ns", &[]),
                true,
            ),
            (
                "NotIn absent key",
                term(Some(not_db.clone()), None),
                labeled("ns", &[]),
                true,
            ),
            (
                "NotIn excluded",
                term(Some(not_db), None),
                labeled("ns", &[("app", "db")]),
                false,
            ),
        ];
        for (name, t, pod, want) in cases {
            assert_eq!(required_affinity_selects(&waiting(t), &pod), want, "{name}");
        }
    }
}

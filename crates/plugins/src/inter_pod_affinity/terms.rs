//! Pod (anti-)affinity terms: the incoming pod's, parsed and validated once per attempt, and
//! existing pods', evaluated straight from the API objects.
//!
//! A term selects pods by labels (`labelSelector`, with `matchLabelKeys`/`mismatchLabelKeys` adding
//! `key in (owner's value)` / `key notin (owner's value)`, as the API server does when it admits the
//! pod; doing it again here is idempotent and covers API servers that did not) in a set of
//! namespaces: the listed ones, plus those whose labels `namespaceSelector` selects (`{}` selects
//! every namespace); with neither, the owner's own namespace.

use std::{collections::HashMap, sync::Arc};

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm, WeightedPodAffinityTerm};
use unisched_framework::PodInfo;

use super::NamespaceLister;
use crate::{
    helper::aggregate_text,
    label_selector::{
        LabelSelector, LabelSelectorError, Labels, Requirement, api_selector_is_empty, api_selector_matches,
        labels_of,
    },
};

/// Looks up namespace labels once per namespace for the duration of one computation.
pub(crate) struct NsResolver<'a> {
    lister: Option<&'a dyn NamespaceLister>,
    memo: HashMap<String, Option<Labels>>,
}

impl<'a> NsResolver<'a> {
    pub(crate) fn new(lister: Option<&'a dyn NamespaceLister>) -> Self {
        NsResolver {
            lister,
            memo: HashMap::new(),
        }
    }

    /// The labels of `ns`; `None` when there is no lister or the namespace is unknown.
    fn labels(&mut self, ns: &str) -> Option<&Labels> {
        let lister = self.lister?;
        if !self.memo.contains_key(ns) {
            self.memo.insert(ns.to_string(), lister.labels(ns));
        }
        self.memo.get(ns).and_then(Option::as_ref)
    }
}

/// One parsed term of the pod being scheduled.
#[derive(Clone, Debug)]
pub(crate) struct Term {
    namespaces: Vec<String>,
    namespace_selector: LabelSelector,
    selector: LabelSelector,
    pub(crate) topology_key: String,
}

impl Term {
    fn parse(owner_ns: &str, owner_labels: &Labels, t: &PodAffinityTerm) -> Result<Term, LabelSelectorError> {
        let mut selector = LabelSelector::parse(t.label_selector.as_ref())?;
        if t.label_selector.is_some() {
            let matching = t
                .match_label_keys
                .iter()
                .flatten()
                .filter_map(|k| owner_labels.get(k).map(|v| Requirement::equals(k, v)));
            let mismatching = t
                .mismatch_label_keys
                .iter()
                .flatten()
                .filter_map(|k| owner_labels.get(k).map(|v| Requirement::not_equals(k, v)));
            selector.add(matching.chain(mismatching));
        }
        let namespace_selector = LabelSelector::parse(t.namespace_selector.as_ref())?;
        let listed = t.namespaces.clone().unwrap_or_default();
        let namespaces = if listed.is_empty() && t.namespace_selector.is_none() {
            vec![owner_ns.to_string()]
        } else {
            listed
        };
        Ok(Term {
            namespaces,
            namespace_selector,
            selector,
            topology_key: t.topology_key.clone(),
        })
    }

    /// True when the term selects a pod with these labels in namespace `ns`.
    pub(crate) fn matches(&self, ns: &str, labels: &Labels, resolver: &mut NsResolver<'_>) -> bool {
        if !self.selector.matches(labels) {
            return false;
        }
        if self.namespaces.iter().any(|n| n == ns) {
            return true;
        }
        match &self.namespace_selector {
            LabelSelector::Nothing => false,
            s if s.is_everything() => true,
            s => resolver.labels(ns).is_some_and(|l| s.matches(l)),
        }
    }
}

/// True when `terms` is not empty and every term selects the pod (affinity needs one pod meeting
/// all terms).
pub(crate) fn all_match(terms: &[Term], ns: &str, labels: &Labels, resolver: &mut NsResolver<'_>) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(ns, labels, resolver))
}

/// True when some term selects the pod (anti-affinity is violated by any term).
pub(crate) fn any_match(terms: &[Term], ns: &str, labels: &Labels, resolver: &mut NsResolver<'_>) -> bool {
    terms.iter().any(|t| t.matches(ns, labels, resolver))
}

/// The four term lists of the pod being scheduled.
#[derive(Clone, Debug, Default)]
pub(crate) struct PodTerms {
    pub(crate) required_affinity: Vec<Term>,
    pub(crate) required_anti_affinity: Vec<Term>,
    pub(crate) preferred_affinity: Vec<(Term, i64)>,
    pub(crate) preferred_anti_affinity: Vec<(Term, i64)>,
}

fn parse_list(
    ns: &str,
    labels: &Labels,
    terms: Option<&Vec<PodAffinityTerm>>,
) -> Result<Vec<Term>, LabelSelectorError> {
    terms
        .into_iter()
        .flatten()
        .map(|t| Term::parse(ns, labels, t))
        .collect()
}

fn parse_weighted(
    ns: &str,
    labels: &Labels,
    terms: Option<&Vec<WeightedPodAffinityTerm>>,
) -> Result<Vec<(Term, i64)>, LabelSelectorError> {
    terms
        .into_iter()
        .flatten()
        .map(|t| Term::parse(ns, labels, &t.pod_affinity_term).map(|p| (p, i64::from(t.weight))))
        .collect()
}

/// A pod's affinity terms that cannot be parsed: every failing group, printed as upstream's
/// aggregate error.
#[derive(Debug, thiserror::Error)]
#[error("{}", aggregate_text(&.0.iter().map(ToString::to_string).collect::<Vec<_>>()))]
pub(crate) struct PodTermsError(Vec<TermGroupError>);

/// The first bad selector of one group of terms (`requiredAffinityTerms`, …).
#[derive(Debug, thiserror::Error)]
#[error("{group}: {source}")]
pub(crate) struct TermGroupError {
    /// The group, as upstream names it.
    group: &'static str,
    /// The selector's error.
    #[source]
    source: LabelSelectorError,
}

impl PodTerms {
    /// Parses every term of `pod`; the error lists each failing group as upstream's `PodInfo` does
    /// (`requiredAffinityTerms: …`).
    pub(crate) fn parse(pod: &Pod) -> Result<PodTerms, PodTermsError> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let labels = labels_of(&pod.metadata);
        let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        let aff = affinity.and_then(|a| a.pod_affinity.as_ref());
        let anti = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        let mut errs = Vec::new();
        let mut keep = |group: &'static str, r: Result<Vec<Term>, LabelSelectorError>| {
            r.unwrap_or_else(|source| {
                errs.push(TermGroupError { group, source });
                Vec::new()
            })
        };
        let required_affinity = keep(
            "requiredAffinityTerms",
            parse_list(
                ns,
                labels,
                aff.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()),
            ),
        );
        let required_anti_affinity = keep(
            "requiredAntiAffinityTerms",
            parse_list(
                ns,
                labels,
                anti.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()),
            ),
        );
        let mut weighted_errs = Vec::new();
        let mut keep_weighted = |group: &'static str, r: Result<Vec<(Term, i64)>, LabelSelectorError>| {
            r.unwrap_or_else(|source| {
                weighted_errs.push(TermGroupError { group, source });
                Vec::new()
            })
        };
        let preferred_affinity = keep_weighted(
            "preferredAffinityTerms",
            parse_weighted(
                ns,
                labels,
                aff.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()),
            ),
        );
        let preferred_anti_affinity = keep_weighted(
            "preferredAntiAffinityTerms",
            parse_weighted(
                ns,
                labels,
                anti.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()),
            ),
        );
        errs.extend(weighted_errs);
        if !errs.is_empty() {
            return Err(PodTermsError(errs));
        }
        Ok(PodTerms {
            required_affinity,
            required_anti_affinity,
            preferred_affinity,
            preferred_anti_affinity,
        })
    }
}

/// How the pod being matched by an *existing* pod's term sees its own namespace: its name, and its
/// labels when a namespace lister is configured (an unknown namespace has no labels, as upstream
/// assumes). Without a lister, a non-empty `namespaceSelector` selects no namespace.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TargetNs<'a> {
    pub(crate) name: &'a str,
    pub(crate) labels: Option<&'a Labels>,
}

/// True when `term`, belonging to the existing pod `owner`, selects a pod with `labels` whose
/// namespace is `target`. Evaluated on the API object: a selector that does not parse matches
/// nothing.
pub(crate) fn existing_term_matches(
    owner: &Pod,
    term: &PodAffinityTerm,
    labels: &Labels,
    target: TargetNs<'_>,
) -> bool {
    if !api_selector_matches(term.label_selector.as_ref(), labels) {
        return false;
    }
    let owner_labels = labels_of(&owner.metadata);
    for k in term.match_label_keys.iter().flatten() {
        if let Some(v) = owner_labels.get(k)
            && labels.get(k) != Some(v)
        {
            return false;
        }
    }
    for k in term.mismatch_label_keys.iter().flatten() {
        if let Some(v) = owner_labels.get(k)
            && labels.get(k) == Some(v)
        {
            return false;
        }
    }
    let listed = term.namespaces.as_deref().unwrap_or_default();
    if listed.is_empty() && term.namespace_selector.is_none() {
        return owner.metadata.namespace.as_deref().unwrap_or("default") == target.name;
    }
    if listed.iter().any(|n| n == target.name) {
        return true;
    }
    match &term.namespace_selector {
        None => false,
        Some(s) if api_selector_is_empty(s) => true,
        Some(s) => target.labels.is_some_and(|l| api_selector_matches(Some(s), l)),
    }
}

/// The required anti-affinity terms of an existing pod.
pub(crate) fn required_anti_terms(pod: &Pod) -> &[PodAffinityTerm] {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or(&[])
}

/// The required affinity terms of an existing pod.
pub(crate) fn required_affinity_terms(pod: &Pod) -> &[PodAffinityTerm] {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or(&[])
}

/// The preferred affinity and anti-affinity terms of an existing pod.
pub(crate) fn preferred_terms(pod: &Pod) -> (&[WeightedPodAffinityTerm], &[WeightedPodAffinityTerm]) {
    let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let aff = affinity
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or(&[]);
    let anti = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or(&[]);
    (aff, anti)
}

/// Counts (or weights) per topology domain: topology key → value → number.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TopologyCounts(HashMap<String, HashMap<String, i64>>);

impl TopologyCounts {
    /// Adds `delta` to the node's domain for `key`; nothing when the node lacks the key. Entries
    /// that drop to 0 are removed when `prune` (counts, where "no entry" means "no pod").
    pub(crate) fn add(&mut self, node_labels: &Labels, key: &str, delta: i64, prune: bool) {
        let Some(value) = node_labels.get(key) else { return };
        let values = self.0.entry(key.to_string()).or_default();
        let n = values.entry(value.clone()).or_insert(0);
        *n += delta;
        if prune && *n == 0 {
            values.remove(value);
            if values.is_empty() {
                self.0.remove(key);
            }
        }
    }

    /// The number for `key=value`.
    pub(crate) fn get(&self, key: &str, value: &str) -> i64 {
        self.0.get(key).and_then(|v| v.get(value)).copied().unwrap_or(0)
    }

    /// True when there are no entries.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when some domain the node belongs to has a positive number.
    pub(crate) fn any_positive_on(&self, node_labels: &Labels) -> bool {
        self.0.iter().any(|(k, values)| {
            node_labels
                .get(k)
                .is_some_and(|v| values.get(v).is_some_and(|n| *n > 0))
        })
    }

    /// Sum over the node's domains.
    pub(crate) fn sum_on(&self, node_labels: &Labels) -> i64 {
        self.0
            .iter()
            .filter_map(|(k, values)| node_labels.get(k).and_then(|v| values.get(v)))
            .sum()
    }
}

/// The incoming pod's terms with what the extensions and Filter need, shared between clones.
#[derive(Debug)]
pub(crate) struct Incoming {
    pub(crate) terms: PodTerms,
    /// The pod's namespace labels (`None` without a namespace lister).
    pub(crate) namespace_labels: Option<Labels>,
    /// The pod meets all of its own required affinity terms ("first pod of a group").
    pub(crate) matches_own_affinity: bool,
}

impl Incoming {
    pub(crate) fn new(pod: &PodInfo, terms: PodTerms, lister: Option<&dyn NamespaceLister>) -> Arc<Self> {
        let namespace_labels = lister.map(|l| l.labels(&pod.namespace).unwrap_or_default());
        let mut resolver = NsResolver::new(lister);
        let matches_own_affinity = all_match(
            &terms.required_affinity,
            &pod.namespace,
            labels_of(&pod.pod.metadata),
            &mut resolver,
        );
        Arc::new(Incoming {
            terms,
            namespace_labels,
            matches_own_affinity,
        })
    }

    /// How existing pods' terms see the incoming pod's namespace.
    pub(crate) fn target<'a>(&'a self, pod: &'a PodInfo) -> TargetNs<'a> {
        TargetNs {
            name: &pod.namespace,
            labels: self.namespace_labels.as_ref(),
        }
    }
}

//! PodDisruptionBudgets as preemption sees them.
//!
//! The scheduler does not go through the eviction API (victims are deleted, as upstream), so PDBs
//! are not enforced; they only steer the choice: a victim "violates" a budget when it matches the
//! budget's selector in its namespace and the budget's `status.disruptionsAllowed` is already used
//! up by the victims counted before it in this attempt. Pods listed in `status.disruptedPods` are
//! already being disrupted and are not counted again.

use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use unisched_framework::PodInfo;

use super::victim::Victim;
use crate::label_selector::{LabelSelector, labels_of};

/// Lists the cluster's PodDisruptionBudgets (the runtime's watch; a fixed list in tests).
pub trait PdbLister: Send + Sync {
    /// Every budget currently known.
    fn list(&self) -> Vec<Arc<PodDisruptionBudget>>;
}

/// A fixed list of budgets (tests, or a scheduler without a PDB watch).
#[derive(Clone, Debug, Default)]
pub struct StaticPdbs(pub Vec<Arc<PodDisruptionBudget>>);

impl PdbLister for StaticPdbs {
    fn list(&self) -> Vec<Arc<PodDisruptionBudget>> {
        self.0.clone()
    }
}

/// One budget, parsed once per attempt.
#[derive(Clone, Debug)]
pub(crate) struct Budget {
    namespace: String,
    selector: LabelSelector,
    disrupted: Vec<String>,
    allowed: i32,
}

impl Budget {
    /// Parses the budgets; an invalid or empty selector selects nothing, as upstream.
    pub(crate) fn parse_all(pdbs: &[Arc<PodDisruptionBudget>]) -> Vec<Budget> {
        pdbs.iter()
            .filter_map(|p| {
                let selector =
                    LabelSelector::parse(p.spec.as_ref().and_then(|s| s.selector.as_ref())).ok()?;
                if selector.is_everything() {
                    return None;
                }
                let status = p.status.as_ref();
                Some(Budget {
                    namespace: p.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
                    selector,
                    disrupted: status
                        .and_then(|s| s.disrupted_pods.as_ref())
                        .map(|m| m.keys().cloned().collect())
                        .unwrap_or_default(),
                    allowed: status.and_then(|s| s.disruptions_allowed).unwrap_or(0),
                })
            })
            .collect()
    }
}

/// What is left of each budget while victims are counted against them, in eviction order.
struct Allowance<'a> {
    budgets: &'a [Budget],
    allowed: Vec<i32>,
}

impl<'a> Allowance<'a> {
    fn new(budgets: &'a [Budget]) -> Self {
        Allowance {
            budgets,
            allowed: budgets.iter().map(|b| b.allowed).collect(),
        }
    }

    /// Counts `p` against every budget that selects it; true when one of them is exceeded.
    fn take(&mut self, p: &PodInfo) -> bool {
        let labels = labels_of(&p.pod.metadata);
        let mut violates = false;
        for (i, b) in self.budgets.iter().enumerate() {
            if b.namespace != p.namespace || !b.selector.matches(labels) || b.disrupted.contains(&p.name) {
                continue;
            }
            self.allowed[i] -= 1;
            if self.allowed[i] < 0 {
                violates = true;
            }
        }
        violates
    }
}

/// Splits `pods` (in the order they would be evicted) into those whose eviction would exceed a
/// budget and those that would not, keeping the order within each part: the counting of
/// [`split_victims_by_violation`] pod by pod, which the tests read.
#[cfg(test)]
pub(crate) fn split_by_violation(
    pods: &[Arc<PodInfo>],
    budgets: &[Budget],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowance = Allowance::new(budgets);
    let mut violating = Vec::new();
    let mut fine = Vec::new();
    for p in pods {
        if allowance.take(p) {
            violating.push(p.clone());
        } else {
            fine.push(p.clone());
        }
    }
    (violating, fine)
}

/// The same split for victims (in eviction order), which are atomic: a victim violates when one
/// of its pods does, and carries how many of its pods do (upstream's
/// `FilterVictimsWithPDBViolation`). A group cannot be half reprieved for the pods that violate.
pub(crate) fn split_victims_by_violation(
    victims: Vec<Victim>,
    budgets: &[Budget],
) -> (Vec<(Victim, usize)>, Vec<Victim>) {
    let mut allowance = Allowance::new(budgets);
    let mut violating = Vec::new();
    let mut fine = Vec::new();
    for v in victims {
        let count = v.pods.iter().filter(|p| allowance.take(p)).count();
        if count > 0 {
            violating.push((v, count));
        } else {
            fine.push(v);
        }
    }
    (violating, fine)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector as ApiSelector, ObjectMeta, Time};

    use super::*;
    use crate::testing::PodBuilder;

    /// A budget over `app=<app>` in `default` with `allowed` disruptions left.
    pub(crate) fn pdb(name: &str, app: &str, allowed: i32, disrupted: &[&str]) -> Arc<PodDisruptionBudget> {
        Arc::new(PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(ApiSelector {
                    match_labels: Some(BTreeMap::from([("app".to_string(), app.to_string())])),
                    ..ApiSelector::default()
                }),
                ..PodDisruptionBudgetSpec::default()
            }),
            status: Some(PodDisruptionBudgetStatus {
                disruptions_allowed: Some(allowed),
                disrupted_pods: Some(
                    disrupted
                        .iter()
                        .map(|d| (d.to_string(), Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)))
                        .collect(),
                ),
                ..PodDisruptionBudgetStatus::default()
            }),
        })
    }

    #[test]
    fn split() {
        let pod = |n: &str, app: &str| PodBuilder::new(n).label("app", app).arc();
        let names = |v: Vec<Arc<PodInfo>>| v.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        let pods = vec![pod("a1", "a"), pod("a2", "a"), pod("b1", "b"), pod("a3", "a")];
        struct Case {
            pdbs: Vec<Arc<PodDisruptionBudget>>,
            violating: Vec<&'static str>,
        }
        let empty_selector = {
            let mut p = (*pdb("e", "x", 0, &[])).clone();
            if let Some(s) = p.spec.as_mut() {
                s.selector = Some(ApiSelector::default());
            }
            Arc::new(p)
        };
        let other_ns = {
            let mut p = (*pdb("o", "a", 0, &[])).clone();
            p.metadata.namespace = Some("other".into());
            Arc::new(p)
        };
        let cases = vec![
            Case {
                pdbs: vec![],
                violating: vec![],
            },
            Case {
                pdbs: vec![pdb("p", "a", 1, &[])],
                violating: vec!["a2", "a3"],
            },
            Case {
                pdbs: vec![pdb("p", "a", 0, &[])],
                violating: vec!["a1", "a2", "a3"],
            },
            Case {
                pdbs: vec![pdb("p", "a", 1, &["a1"])],
                violating: vec!["a3"],
            },
            Case {
                pdbs: vec![pdb("p", "a", 5, &[]), pdb("q", "b", 0, &[])],
                violating: vec!["b1"],
            },
            Case {
                pdbs: vec![empty_selector, other_ns],
                violating: vec![],
            },
        ];
        for c in cases {
            let budgets = Budget::parse_all(&c.pdbs);
            let (v, f) = split_by_violation(&pods, &budgets);
            assert_eq!(names(v.clone()), c.violating);
            assert_eq!(v.len() + f.len(), pods.len());
        }
    }
}

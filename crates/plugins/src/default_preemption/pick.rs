//! Choosing one node among the candidates, as upstream's `pickOneNodeForPreemption`.
//!
//! Criteria, each only breaking the ties of the previous one: fewest PDB violations; lowest
//! priority of the most important victim; smallest sum of victim priorities; fewest victims; the
//! latest start among the most important victims (prefer disrupting pods that started recently);
//! then the first candidate in dry-run order, which is deterministic.

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use unisched_framework::PodInfo;

/// The victims chosen on one node.
#[derive(Clone, Debug, Default)]
pub struct Victims {
    /// Pods to evict, most important first.
    pub pods: Vec<Arc<PodInfo>>,
    /// How many of them violate a PodDisruptionBudget.
    pub num_pdb_violations: usize,
}

/// A node where preemption would make the pod fit.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The node.
    pub node: String,
    /// What must go.
    pub victims: Victims,
}

/// A pod's start time; a pod that has not started counts as starting now, i.e. after every pod
/// that has (`None` orders last).
pub(crate) fn start_key(p: &PodInfo) -> (bool, Option<Timestamp>) {
    let t = p
        .pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0);
    (t.is_none(), t)
}

/// Earliest start among the victims of the highest priority.
fn earliest_start_of_most_important(v: &Victims) -> Option<(bool, Option<Timestamp>)> {
    let top = v.pods.iter().map(|p| p.priority).max()?;
    v.pods
        .iter()
        .filter(|p| p.priority == top)
        .map(|p| start_key(p))
        .min()
}

/// Keeps the candidates with the best (lowest) key.
fn keep_min<K: Ord>(c: Vec<&Candidate>, key: impl Fn(&Candidate) -> K) -> Vec<&Candidate> {
    let Some(best) = c.iter().map(|x| key(x)).min() else {
        return c;
    };
    c.into_iter().filter(|x| key(x) == best).collect()
}

/// The chosen candidate's index, `None` when there are none.
pub(crate) fn pick_one(candidates: &[Candidate]) -> Option<usize> {
    // A node needing no eviction at all would win outright (cannot happen with our dry run, which
    // only yields candidates with victims, but keep the rule).
    if let Some(i) = candidates.iter().position(|c| c.victims.pods.is_empty()) {
        return Some(i);
    }
    let mut left: Vec<&Candidate> = candidates.iter().collect();
    left = keep_min(left, |c| c.victims.num_pdb_violations);
    left = keep_min(left, |c| c.victims.pods.iter().map(|p| p.priority).max());
    // Priorities may be negative; shifting each by 2^31 keeps the sum's order and avoids overflow.
    left = keep_min(left, |c| {
        c.victims
            .pods
            .iter()
            .map(|p| i64::from(p.priority) + (1_i64 << 31))
            .sum::<i64>()
    });
    left = keep_min(left, |c| c.victims.pods.len());
    left = keep_min(left, |c| {
        std::cmp::Reverse(earliest_start_of_most_important(&c.victims))
    });
    let chosen = left.first()?;
    candidates.iter().position(|c| std::ptr::eq(c, *chosen))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::testing::PodBuilder;

    fn victim(name: &str, prio: i32, start: Option<i64>) -> Arc<PodInfo> {
        let mut pod = PodBuilder::new(name).priority(prio).build();
        if let Some(s) = start {
            pod.status.get_or_insert_default().start_time =
                Some(Time(Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)));
        }
        Arc::new(PodInfo::new(pod))
    }

    fn cand(node: &str, pods: Vec<Arc<PodInfo>>, pdb: usize) -> Candidate {
        Candidate {
            node: node.into(),
            victims: Victims {
                pods,
                num_pdb_violations: pdb,
            },
        }
    }

    #[test]
    fn criteria_in_order() {
        let cases: Vec<(&str, Vec<Candidate>, &str)> = vec![
            (
                "fewest pdb violations",
                vec![
                    cand("a", vec![victim("1", 1, None)], 1),
                    cand("b", vec![victim("2", 5, None), victim("3", 5, None)], 0),
                ],
                "b",
            ),
            (
                "lowest highest priority",
                vec![
                    cand("a", vec![victim("1", 5, None)], 0),
                    cand("b", vec![victim("2", 1, None), victim("3", 3, None)], 0),
                ],
                "b",
            ),
            (
                "smallest priority sum",
                vec![
                    cand("a", vec![victim("1", 3, None), victim("2", 3, None)], 0),
                    cand("b", vec![victim("3", 3, None), victim("4", -5, None)], 0),
                ],
                "b",
            ),
            (
                "fewest victims",
                vec![
                    // Same shifted sum: the extra victim has the lowest possible priority.
                    cand("a", vec![victim("1", 3, None), victim("2", i32::MIN, None)], 0),
                    cand("b", vec![victim("3", 3, None)], 0),
                ],
                "b",
            ),
            (
                "latest start of most important victims",
                vec![
                    cand("a", vec![victim("1", 3, Some(100))], 0),
                    cand("b", vec![victim("2", 3, Some(200))], 0),
                    cand("c", vec![victim("3", 3, Some(150))], 0),
                ],
                "b",
            ),
            (
                "not started counts as latest",
                vec![
                    cand("a", vec![victim("1", 3, Some(100))], 0),
                    cand("b", vec![victim("2", 3, None)], 0),
                ],
                "b",
            ),
            (
                "first on a full tie",
                vec![
                    cand("a", vec![victim("1", 3, Some(100))], 0),
                    cand("b", vec![victim("2", 3, Some(100))], 0),
                ],
                "a",
            ),
        ];
        for (name, c, want) in cases {
            let i = pick_one(&c).map(|i| c[i].node.clone());
            assert_eq!(i.as_deref(), Some(want), "{name}");
        }
        assert_eq!(pick_one(&[]), None);
    }
}

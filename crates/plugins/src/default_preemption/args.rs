//! `DefaultPreemptionArgs`: how many candidate nodes a dry run must find before it may stop.
//!
//! Preemption simulates evictions node by node; in a large cluster that is the expensive part, so
//! upstream stops once it has "enough" candidates: a percentage of the nodes, but never fewer than
//! an absolute floor (and never more than the nodes there are).

use serde::{Deserialize, Serialize};

use crate::helper::{PluginArgs, PluginArgsError, aggregate, invalid};

/// Default `minCandidateNodesPercentage`.
pub const DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE: i32 = 10;
/// Default `minCandidateNodesAbsolute`.
pub const DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE: i32 = 100;

/// `DefaultPreemptionArgs` (`kubescheduler.config.k8s.io/v1`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefaultPreemptionArgs {
    /// `DefaultPreemptionArgs` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `kubescheduler.config.k8s.io/v1` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Percentage of the potential nodes to dry-run at least, 0..=100 (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_candidate_nodes_percentage: Option<i32>,
    /// Absolute number of potential nodes to dry-run at least, ≥ 0 (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_candidate_nodes_absolute: Option<i32>,
}

impl PluginArgs for DefaultPreemptionArgs {
    const KIND: &'static str = "DefaultPreemptionArgs";
    fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }
    fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }
}

/// Validated settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CandidateLimits {
    pub percentage: usize,
    pub absolute: usize,
}

impl DefaultPreemptionArgs {
    /// Applies defaults and validates as upstream (`ValidateDefaultPreemptionArgs`).
    pub(crate) fn limits(&self) -> Result<CandidateLimits, PluginArgsError> {
        let pct = self
            .min_candidate_nodes_percentage
            .unwrap_or(DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE);
        let abs = self
            .min_candidate_nodes_absolute
            .unwrap_or(DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE);
        let mut errs = Vec::new();
        if !(0..=100).contains(&pct) {
            errs.push(invalid(
                "minCandidateNodesPercentage",
                pct,
                "not in valid range [0, 100]",
            ));
        }
        if abs < 0 {
            errs.push(invalid(
                "minCandidateNodesAbsolute",
                abs,
                "not in valid range [0, inf)",
            ));
        }
        if pct == 0 && abs == 0 {
            errs.push(invalid(
                "minCandidateNodesPercentage",
                pct,
                "cannot be zero at the same time as minCandidateNodesAbsolute",
            ));
            errs.push(invalid(
                "minCandidateNodesAbsolute",
                abs,
                "cannot be zero at the same time as minCandidateNodesPercentage",
            ));
        }
        aggregate(errs)?;
        Ok(CandidateLimits {
            percentage: usize::try_from(pct).unwrap_or(0),
            absolute: usize::try_from(abs).unwrap_or(0),
        })
    }
}

impl CandidateLimits {
    /// How many candidates a dry run over `num_nodes` potential nodes should find before stopping:
    /// the percentage, raised to the absolute floor, capped at the node count.
    pub(crate) fn num_candidates(&self, num_nodes: usize) -> usize {
        let n = num_nodes * self.percentage / 100;
        n.max(self.absolute).min(num_nodes)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::helper::decode_args;
    use serde_json::json;

    #[test]
    fn decode_and_validate() {
        let cases: Vec<(serde_json::Value, Result<(usize, usize), &str>)> = vec![
            (serde_json::Value::Null, Ok((10, 100))),
            (json!({}), Ok((10, 100))),
            (
                json!({"kind": "DefaultPreemptionArgs", "apiVersion": "kubescheduler.config.k8s.io/v1",
                       "minCandidateNodesPercentage": 50, "minCandidateNodesAbsolute": 0}),
                Ok((50, 0)),
            ),
            (
                json!({"minCandidateNodesPercentage": 101}),
                Err("minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]"),
            ),
            (
                json!({"minCandidateNodesAbsolute": -1}),
                Err("minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)"),
            ),
            (
                json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}),
                Err(
                    "[minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as \
                     minCandidateNodesAbsolute, minCandidateNodesAbsolute: Invalid value: 0: cannot be zero \
                     at the same time as minCandidateNodesPercentage]",
                ),
            ),
            (json!({"minCandidates": 3}), Err("unknown field `minCandidates`")),
            (json!({"kind": "Other"}), Err("kind: Unsupported value")),
        ];
        for (input, want) in cases {
            let got = decode_args::<DefaultPreemptionArgs>(&input)
                .and_then(|a| a.limits())
                .map_err(|e| e.to_string());
            match (got, want) {
                (Ok(l), Ok((p, a))) => assert_eq!((l.percentage, l.absolute), (p, a), "{input}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{input}: {e}"),
                (got, want) => panic!("{input}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn num_candidates() {
        let l = CandidateLimits {
            percentage: 10,
            absolute: 100,
        };
        for (nodes, want) in [(0, 0), (10, 10), (100, 100), (1000, 100), (5000, 500)] {
            assert_eq!(l.num_candidates(nodes), want, "{nodes}");
        }
        let l = CandidateLimits {
            percentage: 40,
            absolute: 1,
        };
        assert_eq!(l.num_candidates(10), 4);
        assert_eq!(l.num_candidates(2), 1);
    }
}

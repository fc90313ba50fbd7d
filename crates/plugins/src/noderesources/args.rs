//! `NodeResourcesFitArgs` and `NodeResourcesBalancedAllocationArgs`: upstream field names, defaults
//! and validation messages, plus unisched's `includeDRAFootprint`.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use unisched_resource::{CPU, MEMORY};

use crate::helper::{PluginArgs, PluginArgsError, aggregate, invalid, qualified_name_errors, quote};

pub use crate::resource_scoring::MAX_CUSTOM_PRIORITY_SCORE;

fn yes() -> bool {
    true
}

/// A resource and its weight in scoring.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceSpec {
    /// Resource name (`cpu`, `memory`, `example.com/gpu`, …).
    pub name: String,
    /// Weight; 0 or unset means 1.
    #[serde(default)]
    pub weight: i64,
}

impl ResourceSpec {
    /// A resource with a weight.
    pub fn new(name: &str, weight: i64) -> Self {
        ResourceSpec {
            name: name.to_string(),
            weight,
        }
    }
}

fn default_resources() -> Vec<ResourceSpec> {
    vec![ResourceSpec::new(CPU, 1), ResourceSpec::new(MEMORY, 1)]
}

/// One point of a `requestedToCapacityRatio` shape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UtilizationShapePoint {
    /// Utilization in percent, 0..=100.
    #[serde(default)]
    pub utilization: i32,
    /// Score at that utilization, 0..=10.
    #[serde(default)]
    pub score: i32,
}

/// Parameters of the `RequestedToCapacityRatio` strategy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestedToCapacityRatioParam {
    /// The scoring function, as points joined by straight lines.
    #[serde(default)]
    pub shape: Vec<UtilizationShapePoint>,
}

/// The scoring strategies of NodeResourcesFit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoringStrategyType {
    /// Prefer the least requested nodes (spreading); the default.
    LeastAllocated,
    /// Prefer the most requested nodes (bin packing).
    MostAllocated,
    /// Score utilization through a user-defined piecewise-linear function.
    RequestedToCapacityRatio,
}

impl ScoringStrategyType {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ScoringStrategyType::LeastAllocated => "LeastAllocated",
            ScoringStrategyType::MostAllocated => "MostAllocated",
            ScoringStrategyType::RequestedToCapacityRatio => "RequestedToCapacityRatio",
        }
    }

    /// Parses the configuration spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::LeastAllocated,
            Self::MostAllocated,
            Self::RequestedToCapacityRatio,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }
}

/// `scoringStrategy`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScoringStrategy {
    /// `LeastAllocated`, `MostAllocated` or `RequestedToCapacityRatio`.
    #[serde(rename = "type", default)]
    pub type_: String,
    /// Resources and weights; empty means cpu and memory with weight 1.
    #[serde(default)]
    pub resources: Vec<ResourceSpec>,
    /// Shape for `RequestedToCapacityRatio`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

impl Default for ScoringStrategy {
    fn default() -> Self {
        ScoringStrategy {
            type_: ScoringStrategyType::LeastAllocated.as_str().to_string(),
            resources: default_resources(),
            requested_to_capacity_ratio: None,
        }
    }
}

/// `NodeResourcesFitArgs`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeResourcesFitArgs {
    /// `NodeResourcesFitArgs` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `kubescheduler.config.k8s.io/v1` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Extended resources Filter does not check.
    #[serde(default)]
    pub ignored_resources: Vec<String>,
    /// Extended-resource prefixes (`example.com` for `example.com/gpu`) Filter does not check.
    #[serde(default)]
    pub ignored_resource_groups: Vec<String>,
    /// How nodes are scored; unset means `LeastAllocated` over cpu and memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scoring_strategy: Option<ScoringStrategy>,
    /// unisched: add the pod's per-node DRA footprint (`NodeFootprints`) to its requests when
    /// scoring. Default true.
    #[serde(default = "yes", rename = "includeDRAFootprint")]
    pub include_dra_footprint: bool,
}

impl Default for NodeResourcesFitArgs {
    fn default() -> Self {
        NodeResourcesFitArgs {
            kind: None,
            api_version: None,
            ignored_resources: Vec::new(),
            ignored_resource_groups: Vec::new(),
            scoring_strategy: None,
            include_dra_footprint: true,
        }
    }
}

impl PluginArgs for NodeResourcesFitArgs {
    const KIND: &'static str = "NodeResourcesFitArgs";
    fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }
    fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }
}

fn default_weights(resources: &mut Vec<ResourceSpec>) {
    if resources.is_empty() {
        *resources = default_resources();
    }
    for r in resources.iter_mut() {
        if r.weight == 0 {
            r.weight = 1;
        }
    }
}

pub(crate) fn validate_shape(shape: &[UtilizationShapePoint], path: &str, errs: &mut Vec<String>) {
    if shape.is_empty() {
        errs.push(format!(
            "{path}: Required value: at least one point must be specified"
        ));
        return;
    }
    if let Some(i) = (1..shape.len()).find(|i| shape[i - 1].utilization >= shape[*i].utilization) {
        errs.push(invalid(
            &format!("{path}[{i}].utilization"),
            shape[i].utilization,
            "values must be sorted in increasing order",
        ));
    }
    for (i, p) in shape.iter().enumerate() {
        if !(0..=100).contains(&p.utilization) {
            errs.push(invalid(
                &format!("{path}[{i}].utilization"),
                p.utilization,
                "not in valid range [0, 100]",
            ));
        }
        if !(0..=MAX_CUSTOM_PRIORITY_SCORE).contains(&i64::from(p.score)) {
            errs.push(invalid(
                &format!("{path}[{i}].score"),
                p.score,
                format!("not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]"),
            ));
        }
    }
}

impl NodeResourcesFitArgs {
    /// Applies the v1 defaults: `LeastAllocated` over cpu and memory when no strategy is given,
    /// cpu and memory when no resources are listed, weight 1 where it is 0.
    pub fn complete(&mut self) {
        let strategy = self.scoring_strategy.get_or_insert_with(ScoringStrategy::default);
        default_weights(&mut strategy.resources);
    }

    /// Upstream validation; every problem is reported with its field path.
    pub fn validate(&self) -> Result<(), PluginArgsError> {
        let mut errs = Vec::new();
        for (i, r) in self.ignored_resources.iter().enumerate() {
            for e in qualified_name_errors(r) {
                errs.push(invalid(&format!("ignoredResources[{i}]"), quote(r), e));
            }
        }
        for (i, g) in self.ignored_resource_groups.iter().enumerate() {
            let path = format!("ignoredResourceGroups[{i}]");
            if g.contains('/') {
                errs.push(invalid(&path, quote(g), "resource group name can't contain '/'"));
            }
            for e in qualified_name_errors(g) {
                errs.push(invalid(&path, quote(g), e));
            }
        }
        if let Some(s) = &self.scoring_strategy {
            let strategy = ScoringStrategyType::parse(&s.type_);
            if strategy.is_none() {
                errs.push(format!(
                    "scoringStrategy.type: Unsupported value: {}: supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\"",
                    quote(&s.type_)
                ));
            }
            for (i, r) in s.resources.iter().enumerate() {
                if r.weight <= 0 || r.weight > 100 {
                    errs.push(invalid(
                        &format!("scoringStrategy.resources[{i}].weight"),
                        r.weight,
                        format!("resource weight of {} not in valid range (0, 100]", r.name),
                    ));
                }
            }
            // Upstream reports shape errors under `scoringStrategy.shape`.
            match (&s.requested_to_capacity_ratio, strategy) {
                (Some(r), _) => validate_shape(&r.shape, "scoringStrategy.shape", &mut errs),
                (None, Some(ScoringStrategyType::RequestedToCapacityRatio)) => {
                    validate_shape(&[], "scoringStrategy.shape", &mut errs);
                }
                _ => {}
            }
        }
        aggregate(errs)
    }
}

/// `NodeResourcesBalancedAllocationArgs`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeResourcesBalancedAllocationArgs {
    /// `NodeResourcesBalancedAllocationArgs` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `kubescheduler.config.k8s.io/v1` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Resources whose utilisation is balanced; empty means cpu and memory. Weights must be 1.
    #[serde(default)]
    pub resources: Vec<ResourceSpec>,
    /// unisched: add the pod's per-node DRA footprint when scoring. Default true.
    #[serde(default = "yes", rename = "includeDRAFootprint")]
    pub include_dra_footprint: bool,
}

impl Default for NodeResourcesBalancedAllocationArgs {
    fn default() -> Self {
        NodeResourcesBalancedAllocationArgs {
            kind: None,
            api_version: None,
            resources: Vec::new(),
            include_dra_footprint: true,
        }
    }
}

impl PluginArgs for NodeResourcesBalancedAllocationArgs {
    const KIND: &'static str = "NodeResourcesBalancedAllocationArgs";
    fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }
    fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }
}

impl NodeResourcesBalancedAllocationArgs {
    /// Applies the v1 defaults (cpu and memory; weight 1 where 0).
    pub fn complete(&mut self) {
        default_weights(&mut self.resources);
    }

    /// Upstream validation: no duplicate resources, every weight 1.
    pub fn validate(&self) -> Result<(), PluginArgsError> {
        let mut errs = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, r) in self.resources.iter().enumerate() {
            if !seen.insert(r.name.as_str()) {
                errs.push(format!(
                    "resources[{i}].name: Duplicate value: {}",
                    quote(&r.name)
                ));
            }
            if r.weight != 1 {
                errs.push(invalid(&format!("resources[{i}].weight"), r.weight, "must be 1"));
            }
        }
        aggregate(errs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::helper::decode_args;

    #[test]
    fn fit_defaults() {
        let mut a: NodeResourcesFitArgs = decode_args(&serde_json::Value::Null).unwrap();
        a.complete();
        let s = a.scoring_strategy.clone().unwrap();
        assert_eq!(s.type_, "LeastAllocated");
        assert_eq!(
            s.resources,
            vec![ResourceSpec::new("cpu", 1), ResourceSpec::new("memory", 1)]
        );
        assert!(a.include_dra_footprint);
        assert!(a.validate().is_ok());

        let mut b: NodeResourcesFitArgs = decode_args(&serde_json::json!({
            "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "example.com/gpu"}]},
            "includeDRAFootprint": false
        }))
        .unwrap();
        b.complete();
        assert_eq!(
            b.scoring_strategy.unwrap().resources,
            vec![ResourceSpec::new("example.com/gpu", 1)]
        );
        assert!(!b.include_dra_footprint);
    }

    #[test]
    fn fit_validation_table() {
        struct Case {
            name: &'static str,
            args: serde_json::Value,
            want: &'static str,
        }
        let cases = [
            Case {
                name: "unknown strategy",
                args: serde_json::json!({"scoringStrategy": {"type": "Fancy"}}),
                want: "scoringStrategy.type: Unsupported value: \"Fancy\": supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\"",
            },
            Case {
                name: "missing strategy type",
                args: serde_json::json!({"scoringStrategy": {"resources": [{"name": "cpu", "weight": 1}]}}),
                want: "scoringStrategy.type: Unsupported value: \"\"",
            },
            Case {
                name: "weight too high",
                args: serde_json::json!({"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 101}]}}),
                want: "scoringStrategy.resources[0].weight: Invalid value: 101: resource weight of cpu not in valid range (0, 100]",
            },
            Case {
                name: "negative weight",
                args: serde_json::json!({"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "memory", "weight": -1}]}}),
                want: "scoringStrategy.resources[0].weight: Invalid value: -1: resource weight of memory not in valid range (0, 100]",
            },
            Case {
                name: "group with slash",
                args: serde_json::json!({"ignoredResourceGroups": ["example.com/gpu"]}),
                want: "ignoredResourceGroups[0]: Invalid value: \"example.com/gpu\": resource group name can't contain '/'",
            },
            Case {
                name: "bad ignored resource",
                args: serde_json::json!({"ignoredResources": ["-bad"]}),
                want: "ignoredResources[0]: Invalid value: \"-bad\": name part must consist of alphanumeric characters",
            },
            Case {
                name: "shape not increasing",
                args: serde_json::json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {"shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 2}]}}}),
                want: "scoringStrategy.shape[1].utilization: Invalid value: 50: values must be sorted in increasing order",
            },
            Case {
                name: "shape utilization out of range",
                args: serde_json::json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}, {"utilization": 101, "score": 2}]}}}),
                want: "scoringStrategy.shape[1].utilization: Invalid value: 101: not in valid range [0, 100]",
            },
            Case {
                name: "shape score out of range",
                args: serde_json::json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 11}]}}}),
                want: "scoringStrategy.shape[0].score: Invalid value: 11: not in valid range [0, 10]",
            },
            Case {
                name: "shape required",
                args: serde_json::json!({"scoringStrategy": {"type": "RequestedToCapacityRatio"}}),
                want: "scoringStrategy.shape: Required value: at least one point must be specified",
            },
        ];
        for c in cases {
            let mut a: NodeResourcesFitArgs = decode_args(&c.args).unwrap();
            a.complete();
            let err = a.validate().unwrap_err().to_string();
            assert!(err.contains(c.want), "{}: {err}", c.name);
        }
    }

    #[test]
    fn decoding_errors_name_the_field() {
        struct Case {
            name: &'static str,
            args: serde_json::Value,
            want: &'static str,
        }
        let cases = [
            Case {
                name: "unknown field",
                args: serde_json::json!({"ignoredResource": []}),
                want: "unknown field `ignoredResource`",
            },
            Case {
                name: "unknown nested field",
                args: serde_json::json!({"scoringStrategy": {"type": "LeastAllocated", "weights": 1}}),
                want: "unknown field `weights`",
            },
            Case {
                name: "wrong kind",
                args: serde_json::json!({"kind": "NodeAffinityArgs"}),
                want: "kind: Unsupported value: \"NodeAffinityArgs\"",
            },
            Case {
                name: "wrong apiVersion",
                args: serde_json::json!({"apiVersion": "kubescheduler.config.k8s.io/v1beta3"}),
                want: "apiVersion: Unsupported value",
            },
        ];
        for c in cases {
            let err = decode_args::<NodeResourcesFitArgs>(&c.args)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(c.want) && err.starts_with("decoding NodeResourcesFitArgs"),
                "{}: {err}",
                c.name
            );
        }
        let ok: NodeResourcesFitArgs = decode_args(&serde_json::json!({
            "kind": "NodeResourcesFitArgs", "apiVersion": "kubescheduler.config.k8s.io/v1"
        }))
        .unwrap();
        assert_eq!(ok.kind.as_deref(), Some("NodeResourcesFitArgs"));
    }

    #[test]
    fn balanced_validation_table() {
        struct Case {
            name: &'static str,
            args: serde_json::Value,
            want: Result<Vec<ResourceSpec>, &'static str>,
        }
        let cases = [
            Case {
                name: "defaults",
                args: serde_json::Value::Null,
                want: Ok(vec![ResourceSpec::new("cpu", 1), ResourceSpec::new("memory", 1)]),
            },
            Case {
                name: "zero weight defaults to one",
                args: serde_json::json!({"resources": [{"name": "cpu"}, {"name": "example.com/gpu", "weight": 0}]}),
                want: Ok(vec![
                    ResourceSpec::new("cpu", 1),
                    ResourceSpec::new("example.com/gpu", 1),
                ]),
            },
            Case {
                name: "duplicate",
                args: serde_json::json!({"resources": [{"name": "cpu"}, {"name": "cpu"}]}),
                want: Err("resources[1].name: Duplicate value: \"cpu\""),
            },
            Case {
                name: "weight not one",
                args: serde_json::json!({"resources": [{"name": "cpu", "weight": 2}]}),
                want: Err("resources[0].weight: Invalid value: 2: must be 1"),
            },
        ];
        for c in cases {
            let mut a: NodeResourcesBalancedAllocationArgs = decode_args(&c.args).unwrap();
            a.complete();
            match c.want {
                Ok(res) => {
                    assert!(a.validate().is_ok(), "{}", c.name);
                    assert_eq!(a.resources, res, "{}", c.name);
                }
                Err(msg) => assert!(a.validate().unwrap_err().to_string().contains(msg), "{}", c.name),
            }
        }
    }
}

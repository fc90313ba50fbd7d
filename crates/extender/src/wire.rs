//! The JSON an extender receives and answers, as `k8s.io/kube-scheduler/extender/v1` defines it.
//!
//! Those Go types carry no JSON tags, so their fields travel under their Go names (`Pod`,
//! `NodeNames`, `FailedNodes`, …). Go decodes field names case-insensitively, so answers are also
//! accepted in camel and lower case (what extenders written against other clients send).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde::{Deserialize, Serialize};

/// A `v1.NodeList` as Go writes one: empty list metadata and the items.
#[derive(Debug, Serialize)]
pub struct NodeListOut<'a> {
    /// Always empty.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// The nodes.
    pub items: Vec<&'a Node>,
}

/// A `v1.NodeList` in an answer: only the nodes matter.
#[derive(Debug, Default, Deserialize)]
pub struct NodeListIn {
    /// The nodes.
    #[serde(default)]
    pub items: Vec<Node>,
}

/// The arguments of the filter and prioritize verbs: whole nodes, or only their names for an
/// extender with its own node cache.
#[derive(Debug, Serialize)]
pub struct ExtenderArgs<'a> {
    /// The pod being scheduled.
    #[serde(rename = "Pod")]
    pub pod: &'a Pod,
    /// The nodes (not node-cache capable), else `null`.
    #[serde(rename = "Nodes")]
    pub nodes: Option<NodeListOut<'a>>,
    /// The node names (node-cache capable), else `null`.
    #[serde(rename = "NodeNames")]
    pub node_names: Option<Vec<&'a str>>,
}

/// The answer of the filter verb.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ExtenderFilterResult {
    /// The nodes that passed (not node-cache capable).
    #[serde(rename = "Nodes", alias = "nodes")]
    pub nodes: Option<NodeListIn>,
    /// The names of the nodes that passed (node-cache capable).
    #[serde(rename = "NodeNames", alias = "nodeNames", alias = "nodenames")]
    pub node_names: Option<Vec<String>>,
    /// Rejected nodes and why.
    #[serde(rename = "FailedNodes", alias = "failedNodes", alias = "failednodes")]
    pub failed_nodes: Option<BTreeMap<String, String>>,
    /// Rejected nodes preemption cannot help, and why.
    #[serde(
        rename = "FailedAndUnresolvableNodes",
        alias = "failedAndUnresolvableNodes",
        alias = "failedandunresolvablenodes"
    )]
    pub failed_and_unresolvable_nodes: Option<BTreeMap<String, String>>,
    /// An error the extender reports: the call failed.
    #[serde(rename = "Error", alias = "error")]
    pub error: Option<String>,
}

/// One node's score in the answer of the prioritize verb.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPriority {
    /// The node.
    #[serde(rename = "Host", alias = "host")]
    pub host: String,
    /// Its score, `0..=10`.
    #[serde(rename = "Score", alias = "score", default)]
    pub score: i64,
}

/// The arguments of the bind verb.
#[derive(Debug, Serialize, Deserialize)]
pub struct ExtenderBindingArgs {
    /// The pod's name.
    #[serde(rename = "PodName", alias = "podName")]
    pub pod_name: String,
    /// The pod's namespace.
    #[serde(rename = "PodNamespace", alias = "podNamespace")]
    pub pod_namespace: String,
    /// The pod's UID.
    #[serde(rename = "PodUID", alias = "podUID")]
    pub pod_uid: String,
    /// The node.
    #[serde(rename = "Node", alias = "node")]
    pub node: String,
}

/// The answer of the bind verb.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ExtenderBindingResult {
    /// An error the extender reports: the binding failed.
    #[serde(rename = "Error", alias = "error")]
    pub error: Option<String>,
}

/// The pods preemption would evict on one node, as whole pods.
#[derive(Debug, Serialize)]
pub struct VictimsOut<'a> {
    /// The pods.
    #[serde(rename = "Pods")]
    pub pods: Vec<&'a Pod>,
    /// PodDisruptionBudgets their eviction violates.
    #[serde(rename = "NumPDBViolations")]
    pub num_pdb_violations: i64,
}

/// A pod named by its UID.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MetaPod {
    /// The pod's UID.
    #[serde(rename = "UID", alias = "uid")]
    pub uid: String,
}

/// The pods preemption would evict on one node, as UIDs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MetaVictims {
    /// The pods.
    #[serde(rename = "Pods", alias = "pods")]
    pub pods: Vec<MetaPod>,
    /// PodDisruptionBudgets their eviction violates.
    #[serde(rename = "NumPDBViolations", alias = "numPDBViolations")]
    pub num_pdb_violations: i64,
}

/// The arguments of the preempt verb: whole victims, or their UIDs for an extender with its
/// own node cache.
#[derive(Debug, Serialize)]
pub struct ExtenderPreemptionArgs<'a> {
    /// The preemptor.
    #[serde(rename = "Pod")]
    pub pod: &'a Pod,
    /// Victims by node (not node-cache capable), else `null`.
    #[serde(rename = "NodeNameToVictims")]
    pub node_name_to_victims: Option<BTreeMap<&'a str, VictimsOut<'a>>>,
    /// Victims by node (node-cache capable), else `null`.
    #[serde(rename = "NodeNameToMetaVictims")]
    pub node_name_to_meta_victims: Option<BTreeMap<&'a str, MetaVictims>>,
}

/// The answer of the preempt verb: always victims as UIDs.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ExtenderPreemptionResult {
    /// The candidates the extender keeps, with their victims.
    #[serde(rename = "NodeNameToMetaVictims", alias = "nodeNameToMetaVictims")]
    pub node_name_to_meta_victims: Option<BTreeMap<String, MetaVictims>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_decode_under_go_and_camel_case_names() {
        let go: ExtenderFilterResult = serde_json::from_str(
            r#"{"NodeNames": ["a"], "FailedNodes": {"b": "full"}, "FailedAndUnresolvableNodes": {"c": "never"}, "Error": ""}"#,
        )
        .unwrap();
        let camel: ExtenderFilterResult = serde_json::from_str(
            r#"{"nodeNames": ["a"], "failedNodes": {"b": "full"}, "failedAndUnresolvableNodes": {"c": "never"}, "error": ""}"#,
        )
        .unwrap();
        for r in [go, camel] {
            assert_eq!(r.node_names.as_deref(), Some(&["a".to_string()][..]));
            assert_eq!(r.failed_nodes.unwrap()["b"], "full");
            assert_eq!(r.failed_and_unresolvable_nodes.unwrap()["c"], "never");
            assert_eq!(r.error.as_deref(), Some(""));
        }
        let scores: Vec<HostPriority> =
            serde_json::from_str(r#"[{"Host": "a", "Score": 3}, {"host": "b", "score": 4}]"#).unwrap();
        assert_eq!(
            scores[1],
            HostPriority {
                host: "b".into(),
                score: 4
            }
        );
        // Go's `null` maps and lists.
        let empty: ExtenderFilterResult =
            serde_json::from_str(r#"{"Nodes": null, "NodeNames": null, "FailedNodes": null}"#).unwrap();
        assert!(empty.nodes.is_none() && empty.node_names.is_none() && empty.failed_nodes.is_none());
    }

    #[test]
    fn arguments_encode_under_go_names() {
        let pod = Pod::default();
        let mut node = Node::default();
        node.metadata.name = Some("a".into());
        let args = ExtenderArgs {
            pod: &pod,
            nodes: Some(NodeListOut {
                metadata: serde_json::Map::new(),
                items: vec![&node],
            }),
            node_names: None,
        };
        let v = serde_json::to_value(&args).unwrap();
        assert_eq!(v["Nodes"]["items"][0]["metadata"]["name"], "a");
        assert_eq!(v["Nodes"]["metadata"], serde_json::json!({}));
        assert_eq!(v["NodeNames"], serde_json::Value::Null);
        assert!(v.get("Pod").is_some());
        let bind = ExtenderBindingArgs {
            pod_name: "p".into(),
            pod_namespace: "ns".into(),
            pod_uid: "u".into(),
            node: "a".into(),
        };
        assert_eq!(
            serde_json::to_value(&bind).unwrap(),
            serde_json::json!({"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "a"})
        );
        let meta = MetaVictims {
            pods: vec![MetaPod { uid: "u".into() }],
            num_pdb_violations: 2,
        };
        assert_eq!(
            serde_json::to_value(&meta).unwrap(),
            serde_json::json!({"Pods": [{"UID": "u"}], "NumPDBViolations": 2})
        );
    }
}

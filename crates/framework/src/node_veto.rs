//! Node vetoes: letting the algorithm pass over nodes a Filter plugin already knows it rejects.
//!
//! # Why
//! With most of a cluster's devices taken, the pod that wants one is feasible on few nodes, and
//! finding them means running every Filter plugin on thousands of nodes that cannot take it. A
//! plugin that keeps a cheap, exact memory of such nodes across attempts (DynamicResources
//! remembers nodes found short of free devices until a device may have been freed) can answer
//! "I reject this node" with one lookup. PreFilter then stores a [`NodeVeto`] under
//! [`NODE_VETO_KEY`], and the algorithm asks it before filtering each node.
//!
//! # What stays exactly as without it
//! A vetoed node is counted as processed at its position, so the nodes examined, the feasible
//! nodes found, their order and the next start index are the ones the full filter chain gives.
//! Only the rejected node's status is not computed, and the attempt needs that only when no node
//! fits (the `FailedScheduling` message, PostFilter). Then the algorithm runs the whole chain on
//! the vetoed nodes after all, so the message, the per-node statuses (the first rejecting
//! plugin in order, which need not be the one that vetoed) and preemption see what they would
//! have seen.
//!
//! # The contract
//! [`NodeVeto::vetoes`] may return `true` only for a node on which the plugin's own Filter, in this
//! attempt, returns a rejection. A veto is ignored when its plugin's Filter is skipped.

use std::sync::Arc;

use crate::NodeInfo;

/// Cycle-state key of a [`NodeVetoHandle`] (written by a plugin's PreFilter).
pub const NODE_VETO_KEY: &str = "unisched.io/NodeVeto";

/// See the module documentation.
pub trait NodeVeto: Send + Sync {
    /// True only when the plugin's Filter certainly rejects `node` in this attempt.
    fn vetoes(&self, node: &NodeInfo) -> bool;
}

/// The value stored under [`NODE_VETO_KEY`]: the veto and the Filter plugin it speaks for.
#[derive(Clone)]
pub struct NodeVetoHandle {
    /// The Filter plugin whose rejections the veto predicts.
    pub plugin: String,
    /// The veto.
    pub veto: Arc<dyn NodeVeto>,
}

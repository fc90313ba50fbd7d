//! The nomination a binding cycle writes before it waits (gate NominatedNodeNameForExpectation,
//! beta and on by default, as upstream).
//!
//! A pod that waits at Permit (a gang member) or whose PreBind has work (a delayed-binding volume,
//! a DRA claim) stays unbound for a while after the scheduler chose its node. Cluster autoscalers
//! and Karpenter watch pending pods; without a hint they would provision for a pod that already
//! has a place. So the binding cycle first patches `status.nominatedNodeName` to the chosen node.
//! Which pods get the write is the framework's decision (`nomination_before_binding`); this
//! module sends it.
//!
//! The write is a patch of `pods/status` sent on the binding cycle's side, never on the
//! scheduling thread, and it is awaited before Permit-wait and PreBind: the API server forbids
//! setting a nomination on a bound pod, so it must land before the binding. A failed write is
//! logged and binding goes on (the nomination is a hint, as upstream treats it). The binding
//! clears it on the API server; a failed binding cycle clears it with its PodScheduled condition.

use serde_json::{Value, json};
use unisched_framework::{BindingTask, Framework, PodInfo, Status, nomination_before_binding};

use crate::{binding_threads::SyncWriter, writer::ApiWriter};

/// One pod's nomination, ready to be written.
#[derive(Debug)]
pub(super) struct Nomination {
    namespace: String,
    name: String,
    node: String,
}

impl Nomination {
    /// The nomination `task`'s binding cycle writes first, if any (`enabled`: the gate is on).
    /// `Err` is a failed PreBind pre-flight check, which fails the cycle.
    pub(super) fn before_binding(
        enabled: bool,
        fwk: &Framework,
        task: &BindingTask,
    ) -> Result<Option<Nomination>, Status> {
        if !enabled {
            return Ok(None);
        }
        let node = nomination_before_binding(fwk, task)?;
        Ok(node.map(|node| Nomination::new(&task.assumed, node)))
    }

    /// `pod` nominated to `node`.
    pub(super) fn new(pod: &PodInfo, node: String) -> Self {
        Nomination {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            node,
        }
    }

    /// The patch of the pod's status.
    fn patch(&self) -> Value {
        json!({ "status": { "nominatedNodeName": self.node } })
    }

    /// Writes the nomination from the I/O runtime (a binding cycle run as futures).
    pub(super) async fn write(&self, writer: &ApiWriter) {
        let result = writer
            .patch_pod_status(&self.namespace, &self.name, self.patch())
            .await;
        self.log_failure(result);
    }

    /// Writes the nomination from a binding thread, on its own connection when it has one.
    pub(super) fn write_blocking(&self, api: &SyncWriter) {
        let result = api.run(async |writer| {
            writer
                .patch_pod_status(&self.namespace, &self.name, self.patch())
                .await
        });
        self.log_failure(result);
    }

    fn log_failure(&self, result: Result<(), crate::writer::WriteError>) {
        if let Err(e) = result {
            tracing::warn!(
                pod = %format!("{}/{}", self.namespace, self.name),
                node = %self.node,
                error = %e,
                "failed to write the nominated node name in the binding cycle; binding goes on"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_sets_only_the_nominated_node_name() {
        let mut pod = k8s_openapi::api::core::v1::Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.namespace = Some("ns".into());
        let n = Nomination::new(&PodInfo::new(pod), "node-1".into());
        assert_eq!(n.patch(), json!({"status": {"nominatedNodeName": "node-1"}}));
        assert_eq!((n.namespace.as_str(), n.name.as_str()), ("ns", "p"));
    }
}

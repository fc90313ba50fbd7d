//! The DynamicResources plugin's API writer: [`RuntimeDraApi`] makes the plugin's claim and pod
//! status writes from the binding cycle's thread (see [`SyncWriter`]), and hands PreBind the same
//! calls as futures on the I/O runtime ([`DraApi::later`]). Both run [`ClaimCalls`].

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{DeleteParams, PostParams, Preconditions};
use serde_json::Value;
use tokio::runtime::Handle;
use unisched_plugins::{
    DraApi, DraApiError,
    dynamic_resources::{ClaimFuture, DraApiLater},
};

use super::{
    claim_calls::{ClaimCalls, claims, pod_consumers, to_dra},
    lost_create::find_created,
};
use crate::{
    binding_threads::SyncWriter,
    metrics::Metrics,
    writer::{ApiWriter, WriteError, delete_for_metadata},
};

/// The DynamicResources plugin's API writes, made from the binding cycle's thread (see
/// `SyncWriter`), and PreBind's claim calls as futures on the I/O runtime ([`DraApi::later`]).
/// Both run the same calls (`ClaimCalls`).
pub struct RuntimeDraApi {
    api: SyncWriter,
    metrics: Metrics,
    /// The futures' side, built once (every DRA pod's binding cycle asks for it).
    later: Arc<RuntimeDraLater>,
}

impl RuntimeDraApi {
    /// Writes through `writer` (a binding thread's own connection where it has one), off the
    /// binding threads blocking on `handle`.
    pub fn new(writer: ApiWriter, handle: Handle, metrics: Metrics) -> Self {
        RuntimeDraApi {
            api: SyncWriter::new(writer.clone(), handle),
            later: Arc::new(RuntimeDraLater {
                writer,
                metrics: metrics.clone(),
            }),
            metrics,
        }
    }

    /// The calls through `writer` (the one [`SyncWriter::run`] hands out).
    fn calls<'a>(&'a self, writer: &'a ApiWriter) -> ClaimCalls<'a> {
        ClaimCalls {
            writer,
            metrics: &self.metrics,
        }
    }
}

/// PreBind's claim calls as futures on the I/O runtime, through the shared client.
struct RuntimeDraLater {
    writer: ApiWriter,
    metrics: Metrics,
}

impl DraApiLater for RuntimeDraLater {
    fn get_claim(&self, namespace: &str, name: &str) -> ClaimFuture<Option<ResourceClaim>> {
        let (writer, metrics) = (self.writer.clone(), self.metrics.clone());
        let (ns, name) = (namespace.to_string(), name.to_string());
        Box::pin(async move {
            let calls = ClaimCalls {
                writer: &writer,
                metrics: &metrics,
            };
            calls.get_claim(&ns, &name).await
        })
    }

    fn patch_claim_status(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
        status: Value,
    ) -> ClaimFuture<ResourceClaim> {
        let (writer, metrics) = (self.writer.clone(), self.metrics.clone());
        let (ns, name, current) = (namespace.to_string(), name.to_string(), current.clone());
        Box::pin(async move {
            let calls = ClaimCalls {
                writer: &writer,
                metrics: &metrics,
            };
            calls.patch_claim_status(&ns, &name, &current, status).await
        })
    }

    fn add_claim_finalizer(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> ClaimFuture<ResourceClaim> {
        let (writer, metrics) = (self.writer.clone(), self.metrics.clone());
        let (ns, name, current) = (namespace.to_string(), name.to_string(), current.clone());
        Box::pin(async move {
            let calls = ClaimCalls {
                writer: &writer,
                metrics: &metrics,
            };
            calls.finalizers(&ns, &name, &current, true).await
        })
    }
}

impl DraApi for RuntimeDraApi {
    fn later(&self) -> Option<Arc<dyn DraApiLater>> {
        Some(self.later.clone())
    }

    fn get_claim(&self, namespace: &str, name: &str) -> Result<Option<ResourceClaim>, DraApiError> {
        self.api
            .run(async |writer| self.calls(writer).get_claim(namespace, name).await)
    }

    fn patch_claim_status(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
        status: Value,
    ) -> Result<ResourceClaim, DraApiError> {
        self.api.run(async |writer| {
            self.calls(writer)
                .patch_claim_status(namespace, name, current, status)
                .await
        })
    }

    fn add_claim_finalizer(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> Result<ResourceClaim, DraApiError> {
        self.api.run(async |writer| {
            self.calls(writer)
                .finalizers(namespace, name, current, true)
                .await
        })
    }

    fn remove_claim_finalizer(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> Result<ResourceClaim, DraApiError> {
        self.api.run(async |writer| {
            self.calls(writer)
                .finalizers(namespace, name, current, false)
                .await
        })
    }

    fn create_claim(&self, namespace: &str, claim: &ResourceClaim) -> Result<ResourceClaim, DraApiError> {
        // A retry after an attempt whose answer was lost first looks for the claim that attempt
        // may have created: with `generateName` a second POST would create a second claim.
        let sent = Arc::new(AtomicBool::new(false));
        let result = self.api.run(async |writer| {
            let api = claims(writer, namespace);
            writer
                .write("create", "resourceclaims", || {
                    let (api, sent) = (api.clone(), sent.clone());
                    async move {
                        if sent.swap(true, Ordering::SeqCst)
                            && let Some(found) = find_created(&api, claim).await?
                        {
                            return Ok(found);
                        }
                        api.create(&PostParams::default(), claim).await
                    }
                })
                .await
        });
        let created = match result {
            Ok(c) => c,
            Err(e) if e.outcome_unknown() => {
                match self
                    .api
                    .run(async |writer| find_created(&claims(writer, namespace), claim).await)
                {
                    Ok(Some(c)) => c,
                    Ok(None) => return Err(DraApiError::Other(format!("{e}; no such claim was created"))),
                    Err(read) => return Err(DraApiError::Other(format!("{e}; listing claims: {read}"))),
                }
            }
            Err(e) => return Err(to_dra(e)),
        };
        self.metrics.special_claims.with_label_values(&["create"]).inc();
        Ok(created)
    }

    fn delete_claim(&self, namespace: &str, name: &str, uid: &str) -> Result<(), DraApiError> {
        self.api.run(async |writer| {
            let calls = self.calls(writer);
            if let Some(current) = calls.get_claim(namespace, name).await?
                && current.metadata.uid.as_deref() == Some(uid)
            {
                calls
                    .refuse_undo_for_bound(namespace, name, &pod_consumers(&current))
                    .await?;
            }
            Ok::<(), DraApiError>(())
        })?;
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let result = self.api.run(async |writer| {
            writer
                .write("delete", "resourceclaims", || {
                    delete_for_metadata::<ResourceClaim>(writer.client(), Some(namespace), name, &dp)
                })
                .await
        });
        match result {
            Ok(_) => {
                self.metrics.special_claims.with_label_values(&["delete"]).inc();
                Ok(())
            }
            Err(WriteError::NotFound(_)) => Ok(()),
            Err(e) => Err(to_dra(e)),
        }
    }

    fn patch_pod_status(&self, namespace: &str, name: &str, patch: Value) -> Result<(), DraApiError> {
        // Clearing a pod's DRA status is an undo: refused while the pod is bound.
        let clears = [
            "nodeAllocatableResourceClaimStatuses",
            "extendedResourceClaimStatus",
        ]
        .iter()
        .any(|k| patch["status"].get(*k).is_some_and(Value::is_null));
        if clears
            && let Some(node) = self
                .api
                .run(async |writer| self.calls(writer).bound_node(namespace, name, "").await)?
        {
            return Err(DraApiError::Other(format!(
                "pod {namespace}/{name} is bound to node {node:?}: its DRA status is kept"
            )));
        }
        self.api
            .run(async |writer| writer.patch_pod_status(namespace, name, patch).await)
            .map_err(to_dra)
    }
}

//! The binding cycle's API writes, and undoing them.
//!
//! **PreBind**, per claim not yet reserved for the pod:
//!
//! 1. when we allocated the claim, the `resource.kubernetes.io/delete-protection` finalizer, only
//!    when it is missing (a metadata write: the finalizer cannot go into the `/status` patch). A
//!    claim someone else allocated is only reserved, as upstream does: its finalizer is whoever
//!    allocated it's business;
//! 2. one JSON merge patch of `/status` with the allocation (if we allocated) and `reservedFor`
//!    extended with the pod, carrying the `resourceVersion` it was based on.
//!
//! With binding conditions on (`DRADeviceBindingConditions`, on by default in Kubernetes 1.37),
//! an allocation we write always carries `allocationTimestamp`, and reserving a claim that is no
//! longer allocated fails ("got deallocated elsewhere in the meantime") instead of writing a
//! reservation the API server would refuse. Upstream 1.37 also stamps an *existing* allocation
//! that has no timestamp when it only reserves the claim; kube-apiserver refuses that write (an
//! allocation is immutable once set), so an existing allocation is left as it is here.
//!
//! The first attempt uses the claim PreFilter saw (no GET); on a conflict the claim is re-read and
//! the checks repeat ("got deleted / allocated elsewhere in the meantime"). So a pod with one claim
//! whose finalizer is already present costs two API writes in total (claim status, binding); a
//! claim without the finalizer costs one more. After each successful write the claim is *assumed* in
//! the DRA cache (visible to the next cycles at once) and only then its in-flight allocation dropped,
//! so there is no moment at which its devices look free.
//!
//! The KEP-5004 claim is created (with the finalizer already in its metadata) and then written like
//! the others. One strategic merge patch of the pod status carries both
//! `nodeAllocatableResourceClaimStatuses` (merged on `resourceClaimName`) and
//! `extendedResourceClaimStatus`, when there is anything to write. Binding conditions are waited for
//! last, polling the cache until all are true, one fails, or `bindingTimeout` passes.
//!
//! The claim writes are one async retry loop ([`bind_claim`]) over [`DraApiLater`]. On a binding
//! thread it runs over the synchronous [`DraApi`] and completes in one poll; when the runtime
//! offers futures ([`DraApi::later`]) and the pod needs nothing but claim writes, PreBind is that
//! loop as a future on the I/O runtime ([`pre_bind_later`]), and no thread waits for the API
//! server.
//!
//! **Unreserve** undoes what was done, best effort and idempotently: drops in-flight allocations,
//! removes the pod from `reservedFor` (clearing the allocation too when we made it and nobody else
//! uses the claim, so its devices are not held by nobody), deletes the extended claim we created,
//! and clears the pod status fields we patched. Errors are logged, never returned.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaim, ResourceClaimConsumerReference};
use unisched_cache::DraCache;
use unisched_framework::{PodInfo, Status, StatusFuture};

use super::api::{ClaimFuture, DraApi, DraApiError, DraApiLater};
use super::claims::Consumer;
use super::extended::{PLACEHOLDER_NAME, for_create};
use super::state::{BindingProgress, NodeResult, PodClaim, PodState, Written};
use super::{DynamicResources, FINALIZER};

/// Attempts per claim write before giving up on conflicts.
const MAX_CONFLICT_RETRIES: usize = 5;

/// Why PreBind could not write or keep a claim; each becomes the message of an Error status.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClaimWriteError {
    /// The claim is gone, or was replaced by another of the same name.
    #[error("claim {key} got deleted in the meantime")]
    Deleted {
        /// `namespace/name`.
        key: String,
    },
    /// Re-reading the claim after a conflict failed.
    #[error("claim {key}: {source}")]
    Read {
        /// `namespace/name`.
        key: String,
        /// The API error.
        #[source]
        source: DraApiError,
    },
    /// Someone else allocated the claim to other devices since Filter.
    #[error("claim {key} got allocated elsewhere in the meantime")]
    AllocatedElsewhere {
        /// `namespace/name`.
        key: String,
    },
    /// Someone else deallocated the claim while its binding conditions were awaited.
    #[error("claim {key} got deallocated elsewhere in the meantime")]
    DeallocatedElsewhere {
        /// `namespace/name`.
        key: String,
    },
    /// Adding the delete-protection finalizer failed.
    #[error("adding finalizer to claim {key}: {source}")]
    AddFinalizer {
        /// `namespace/name`.
        key: String,
        /// The API error.
        #[source]
        source: DraApiError,
    },
    /// The status patch could not be encoded.
    #[error("claim {key}: {source}")]
    Encode {
        /// `namespace/name`.
        key: String,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// Patching the claim's status failed.
    #[error("updating claim {key}: {source}")]
    Update {
        /// `namespace/name`.
        key: String,
        /// The API error.
        #[source]
        source: DraApiError,
    },
    /// Every attempt conflicted with another writer.
    #[error("claim {key}: giving up after {MAX_CONFLICT_RETRIES} conflicting updates")]
    Conflicts {
        /// `namespace/name`.
        key: String,
    },
    /// A write through the synchronous API did not complete at once (a bug).
    #[error("internal error: a synchronous claim write waited")]
    WaitedSynchronously,
    /// A binding failure condition of one of the claim's devices is true.
    #[error("claim {key} binding failed: reason={reason}, message={message:?}")]
    BindingFailed {
        /// `namespace/name`.
        key: String,
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
}

fn has_finalizer(c: &ResourceClaim) -> bool {
    c.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER)
}

/// The (request, driver, pool, device) tuples of an allocation: what "the same allocation" means
/// across an API round trip.
fn devices_of(a: &AllocationResult) -> Vec<(&str, &str, &str, &str)> {
    let mut v: Vec<_> = a
        .devices
        .iter()
        .flat_map(|d| d.results.iter().flatten())
        .map(|r| {
            (
                r.request.as_str(),
                r.driver.as_str(),
                r.pool.as_str(),
                r.device.as_str(),
            )
        })
        .collect();
    v.sort_unstable();
    v
}

fn has_binding_conditions(a: &AllocationResult) -> bool {
    a.devices
        .iter()
        .flat_map(|d| d.results.iter().flatten())
        .any(|r| r.binding_conditions.as_ref().is_some_and(|c| !c.is_empty()))
}

/// Seconds since the epoch, now.
fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn now() -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    k8s_openapi::jiff::Timestamp::from_second(now_seconds())
        .ok()
        .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time)
}

/// Writes allocation (if any) and `reservedFor` for one claim, retrying on conflicts with a fresh
/// read. `start` is the copy to base the first attempt on; `binding_conditions` is the feature
/// (see the module documentation).
///
/// One loop for both ways of calling the API: a synchronous [`DraApi`] goes through [`Now`] and
/// the loop completes in one poll ([`bind_now`]); [`DraApiLater`]'s futures are awaited on the I/O
/// runtime ([`pre_bind_later`]).
async fn bind_claim(
    api: &dyn DraApiLater,
    start: &ResourceClaim,
    allocation: Option<&AllocationResult>,
    consumer: &Consumer,
    binding_conditions: bool,
) -> Result<ResourceClaim, ClaimWriteError> {
    let ns = start.metadata.namespace.clone().unwrap_or_default();
    let name = start.metadata.name.clone().unwrap_or_default();
    let uid = start.metadata.uid.clone().unwrap_or_default();
    let key = format!("{ns}/{name}");
    let mut claim = start.clone();
    for attempt in 0..MAX_CONFLICT_RETRIES {
        if attempt > 0 {
            claim = match api.get_claim(&ns, &name).await {
                Ok(Some(c)) => c,
                Ok(None) => return Err(ClaimWriteError::Deleted { key }),
                Err(source) => return Err(ClaimWriteError::Read { key, source }),
            };
        }
        if claim.metadata.uid.as_deref() != Some(uid.as_str()) || claim.metadata.deletion_timestamp.is_some()
        {
            return Err(ClaimWriteError::Deleted { key });
        }
        let current = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
        let mut write_allocation = allocation;
        if let (Some(want), Some(have)) = (allocation, current) {
            if devices_of(want) != devices_of(have) {
                return Err(ClaimWriteError::AllocatedElsewhere { key });
            }
            write_allocation = None;
        }
        if write_allocation.is_none()
            && super::claims::is_reserved_for(&claim, &consumer.uid)
            && current.is_some()
        {
            return Ok(claim);
        }
        if binding_conditions && allocation.is_none() && current.is_none() {
            return Err(ClaimWriteError::DeallocatedElsewhere { key });
        }
        if write_allocation.is_some() && !has_finalizer(&claim) {
            match api.add_claim_finalizer(&ns, &name, &claim).await {
                Ok(c) => claim = c,
                Err(DraApiError::Conflict(_)) => continue,
                Err(DraApiError::NotFound(_)) => {
                    return Err(ClaimWriteError::Deleted { key });
                }
                Err(source) => return Err(ClaimWriteError::AddFinalizer { key, source }),
            }
        }
        let mut reserved: Vec<ResourceClaimConsumerReference> = claim
            .status
            .as_ref()
            .and_then(|s| s.reserved_for.clone())
            .unwrap_or_default();
        if !reserved.iter().any(|r| r.uid == consumer.uid) {
            reserved.push(consumer.reference());
        }
        let mut status = serde_json::Map::new();
        status.insert(
            "reservedFor".into(),
            serde_json::to_value(&reserved).map_err(|source| ClaimWriteError::Encode {
                key: key.clone(),
                source,
            })?,
        );
        if let Some(a) = write_allocation {
            let mut a = a.clone();
            if binding_conditions || has_binding_conditions(&a) {
                a.allocation_timestamp = now();
            }
            status.insert(
                "allocation".into(),
                serde_json::to_value(&a).map_err(|source| ClaimWriteError::Encode {
                    key: key.clone(),
                    source,
                })?,
            );
        }
        match api
            .patch_claim_status(&ns, &name, &claim, serde_json::Value::Object(status))
            .await
        {
            Ok(c) => return Ok(c),
            Err(DraApiError::Conflict(_)) => continue,
            Err(DraApiError::NotFound(_)) => return Err(ClaimWriteError::Deleted { key }),
            Err(source) => return Err(ClaimWriteError::Update { key, source }),
        }
    }
    Err(ClaimWriteError::Conflicts { key })
}

/// A synchronous [`DraApi`] seen as [`DraApiLater`]: each call is made when its future is
/// created, and the future is already complete.
struct Now<'a>(&'a dyn DraApi);

impl DraApiLater for Now<'_> {
    fn get_claim(&self, namespace: &str, name: &str) -> ClaimFuture<Option<ResourceClaim>> {
        Box::pin(std::future::ready(self.0.get_claim(namespace, name)))
    }

    fn patch_claim_status(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
        status: serde_json::Value,
    ) -> ClaimFuture<ResourceClaim> {
        Box::pin(std::future::ready(
            self.0.patch_claim_status(namespace, name, current, status),
        ))
    }

    fn add_claim_finalizer(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> ClaimFuture<ResourceClaim> {
        Box::pin(std::future::ready(
            self.0.add_claim_finalizer(namespace, name, current),
        ))
    }
}

/// Runs a claim loop over [`Now`] to its end: it never waits, so one poll completes it.
fn bind_now(
    future: impl std::future::Future<Output = Result<ResourceClaim, ClaimWriteError>>,
) -> Result<ResourceClaim, ClaimWriteError> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => Err(ClaimWriteError::WaitedSynchronously),
    }
}

/// The allocation Reserve made for the pod's `i`th claim on this node, if it needed one, or the
/// one it shares with other members of its PodGroup try (written by whichever member's PreBind
/// comes first; the others find it written and only add nothing or their reservation).
fn allocation_for<'r>(
    data: &'r PodState,
    result: Option<&'r NodeResult>,
    i: usize,
) -> Result<Option<&'r AllocationResult>, Status> {
    if let Some(shared) = data.claims.get(i).and_then(|c| c.shared_pending.as_deref()) {
        return Ok(Some(shared));
    }
    match data.to_allocate.iter().position(|&x| x == i) {
        Some(k) => match result.and_then(|r| r.allocations.get(k)) {
            Some(a) => Ok(Some(a)),
            None => Err(Status::error("claim allocation not found for node")),
        },
        None => Ok(None),
    }
}

/// After a claim's write: the claim as written goes into the cache before its in-flight
/// allocation goes away, and Unreserve learns what it has to undo.
fn record_written(
    dra: &DraCache,
    progress: &mut BindingProgress,
    c: &PodClaim,
    updated: ResourceClaim,
    allocated_by_us: bool,
) {
    commit(dra, updated, &c.uid);
    progress.in_flight.retain(|u| u != &c.uid);
    progress.written.push(Written {
        namespace: c.namespace().to_string(),
        name: c.name().to_string(),
        uid: c.uid.clone(),
        allocated_by_us,
    });
}

fn allocation_has_binding_conditions(claim: &ResourceClaim) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .is_some_and(has_binding_conditions)
}

/// PreBind as a future on the I/O runtime, for the common pod: claims to reserve (and allocate),
/// and nothing else: no extended-resource claim to create, no pod status to patch, no binding
/// conditions to wait for. `None` for any other pod (the binding thread runs [`pre_bind`]). The
/// writes, their order, retries and bookkeeping are [`pre_bind`]'s.
pub(crate) fn pre_bind_later(
    plugin: &DynamicResources,
    api: Arc<dyn DraApiLater>,
    dra: Arc<DraCache>,
    data: Arc<PodState>,
    node: &str,
) -> Option<StatusFuture> {
    if data.extended.is_some() {
        return None;
    }
    // An error here is reported by the synchronous path.
    let result = data.node_result(node, || None).ok()?;
    if result.as_ref().is_some_and(|r| {
        r.extended.is_some() || !r.statuses.is_empty() || r.allocations.iter().any(has_binding_conditions)
    }) {
        return None;
    }
    if data
        .claims
        .iter()
        .any(|c| !(c.allocated && c.reserved_for_pod) && allocation_has_binding_conditions(&c.claim))
    {
        return None;
    }
    let stamp = plugin.features.binding_conditions;
    Some(Box::pin(async move {
        for (i, c) in data.claims.iter().enumerate() {
            if c.allocated && c.reserved_for_pod {
                continue;
            }
            let allocation = match allocation_for(&data, result.as_deref(), i) {
                Ok(a) => a,
                Err(s) => return s,
            };
            let updated = match bind_claim(api.as_ref(), &c.claim, allocation, &c.consumer, stamp).await {
                Ok(updated) => updated,
                Err(e) => return Status::error(e),
            };
            let waits = allocation_has_binding_conditions(&updated);
            record_written(&dra, &mut data.binding.lock(), c, updated, allocation.is_some());
            if waits {
                // Someone else's allocation with binding conditions, seen only on a re-read:
                // the pod is retried, and its next binding cycle waits for them on a thread.
                return Status::error(format!("claim {} got binding conditions in the meantime", c.key));
            }
        }
        Status::success()
    }))
}

/// Makes our write visible in the cache, then drops the in-flight allocation (in that order).
fn commit(dra: &DraCache, updated: ResourceClaim, in_flight_key: &str) {
    if let Err(e) = dra.assume_claim(Arc::new(updated)) {
        tracing::debug!(error = %e, "not assuming claim (the watch is ahead)");
    }
    dra.release_in_flight(in_flight_key);
}

pub(crate) fn pre_bind(
    plugin: &DynamicResources,
    api: &dyn DraApi,
    dra: &DraCache,
    data: &PodState,
    pod: &PodInfo,
    node: &str,
) -> Status {
    // Reserve made the chosen node's allocation: the node object is not needed again.
    let result = match data.node_result(node, || None) {
        Ok(r) => r,
        Err(e) => return Status::error(e),
    };
    let mut progress = data.binding.lock();
    let mut to_wait: Vec<(String, String)> = Vec::new();
    let stamp = plugin.features.binding_conditions;
    let consumer = Consumer::pod(&pod.name, &pod.uid);

    for (i, c) in data.claims.iter().enumerate() {
        if c.allocated && c.reserved_for_pod {
            continue;
        }
        let allocation = match allocation_for(data, result.as_deref(), i) {
            Ok(a) => a,
            Err(s) => return s,
        };
        match bind_now(bind_claim(&Now(api), &c.claim, allocation, &c.consumer, stamp)) {
            Ok(updated) => {
                if allocation_has_binding_conditions(&updated) {
                    to_wait.push((c.namespace().to_string(), c.name().to_string()));
                }
                record_written(dra, &mut progress, c, updated, allocation.is_some());
            }
            Err(e) => return Status::error(e),
        }
    }

    let mut ext_status = None;
    if let (Some(plan), Some((variant, allocation))) =
        (&data.extended, result.as_ref().and_then(|r| r.extended.as_ref()))
    {
        let created = match &progress.created_extended {
            Some((ns, name, _, _)) => match api.get_claim(ns, name) {
                Ok(Some(c)) => c,
                Ok(None) => return Status::error(format!("claim {ns}/{name} got deleted in the meantime")),
                Err(e) => return Status::error(e),
            },
            None => {
                let ns = pod.namespace.clone();
                match api.create_claim(&ns, &for_create(variant)) {
                    Ok(c) => {
                        progress.created_extended = Some((
                            ns,
                            c.metadata.name.clone().unwrap_or_default(),
                            c.metadata.uid.clone().unwrap_or_default(),
                            variant.mappings.clone(),
                        ));
                        c
                    }
                    Err(e) => return Status::error(format!("creating extended resource claim: {e}")),
                }
            }
        };
        let name = created.metadata.name.clone().unwrap_or_default();
        let uid = created.metadata.uid.clone().unwrap_or_default();
        match bind_now(bind_claim(
            &Now(api),
            &created,
            Some(allocation),
            &consumer,
            stamp,
        )) {
            Ok(updated) => {
                if has_binding_conditions(allocation) {
                    to_wait.push((pod.namespace.clone(), name.clone()));
                }
                commit(dra, updated, &plan.placeholder_uid);
                progress.in_flight.retain(|u| u != &plan.placeholder_uid);
                progress.written.push(Written {
                    namespace: pod.namespace.clone(),
                    name: name.clone(),
                    uid,
                    allocated_by_us: true,
                });
            }
            Err(e) => return Status::error(e),
        }
        ext_status = Some(serde_json::json!({
            "resourceClaimName": name,
            "requestMappings": variant.mappings,
        }));
    }

    // Pod status: node-allocatable statuses (placeholder replaced) and the extended claim status.
    let mut statuses = result.as_ref().map(|r| r.statuses.clone()).unwrap_or_default();
    if let Some(name) = progress.created_extended.as_ref().map(|c| c.1.clone()) {
        for s in &mut statuses {
            if s.resource_claim_name == PLACEHOLDER_NAME {
                s.resource_claim_name = name.clone();
            }
        }
        statuses.sort_by(|a, b| a.resource_claim_name.cmp(&b.resource_claim_name));
    }
    if !statuses.is_empty() || ext_status.is_some() {
        let mut body = serde_json::Map::new();
        if !statuses.is_empty() {
            body.insert(
                "nodeAllocatableResourceClaimStatuses".into(),
                serde_json::to_value(&statuses).unwrap_or_default(),
            );
        }
        if let Some(e) = ext_status {
            body.insert("extendedResourceClaimStatus".into(), e);
        }
        let patch = serde_json::json!({ "status": body });
        if let Err(e) = api.patch_pod_status(&pod.namespace, &pod.name, patch) {
            return Status::error(format!("patching pod status: {e}"));
        }
        progress.pod_status_patched = true;
    }
    drop(progress);

    if !to_wait.is_empty() {
        return wait_for_binding_conditions(
            dra,
            &to_wait,
            plugin.args.binding_timeout.0,
            plugin.poll_interval,
        );
    }
    Status::success()
}

fn condition_true(
    conds: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
    t: &str,
) -> Option<bool> {
    conds?.iter().find(|c| c.type_ == t).map(|c| c.status == "True")
}

/// `Ok(true)` ready, `Ok(false)` not yet, `Err` a binding failure condition is true.
fn ready(claim: &ResourceClaim) -> Result<bool, ClaimWriteError> {
    let Some(alloc) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
        return Ok(false);
    };
    let devices = claim.status.as_ref().and_then(|s| s.devices.as_ref());
    let key = format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    );
    let mut all = true;
    for r in alloc.devices.iter().flat_map(|d| d.results.iter().flatten()) {
        let conds = r.binding_conditions.as_deref().unwrap_or_default();
        if conds.is_empty() {
            continue;
        }
        let Some(status) = devices
            .into_iter()
            .flatten()
            .find(|d| d.driver == r.driver && d.pool == r.pool && d.device == r.device)
        else {
            all = false;
            continue;
        };
        for f in r.binding_failure_conditions.as_deref().unwrap_or_default() {
            if let Some(c) = status
                .conditions
                .iter()
                .flatten()
                .find(|c| &c.type_ == f && c.status == "True")
            {
                return Err(ClaimWriteError::BindingFailed {
                    key,
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                });
            }
        }
        if !conds
            .iter()
            .all(|t| condition_true(status.conditions.as_ref(), t) == Some(true))
        {
            all = false;
        }
    }
    Ok(all)
}

fn wait_for_binding_conditions(
    dra: &DraCache,
    claims: &[(String, String)],
    timeout: Duration,
    poll: Duration,
) -> Status {
    let deadline = Instant::now() + timeout;
    loop {
        let mut pending = None;
        for (ns, name) in claims {
            let Some(c) = dra.claim(ns, name) else {
                return Status::error(format!("claim {ns}/{name} got deleted in the meantime"));
            };
            match ready(&c) {
                Ok(true) => {}
                Ok(false) => pending = Some(format!("{ns}/{name}")),
                Err(e) => return Status::error(e),
            }
        }
        let Some(p) = pending else {
            return Status::success();
        };
        if Instant::now() >= deadline {
            return Status::error(format!("claim {p} binding timeout"));
        }
        std::thread::sleep(
            poll.min(deadline.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1)),
        );
    }
}

/// Filter: an allocated claim whose binding failed, or did not complete within `timeout` since
/// `allocationTimestamp`, cannot be used.
pub(crate) fn binding_failed_or_timed_out(claim: &ResourceClaim, timeout: Duration) -> bool {
    let Some(alloc) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
        return false;
    };
    if !has_binding_conditions(alloc) {
        return false;
    }
    match ready(claim) {
        Err(_) => true,
        Ok(true) => false,
        Ok(false) => alloc.allocation_timestamp.as_ref().is_some_and(|t| {
            let elapsed = now_seconds().saturating_sub(t.0.as_second());
            u64::try_from(elapsed).is_ok_and(|e| e > timeout.as_secs())
        }),
    }
}

/// PostFilter: clears allocation and `reservedFor` of a claim (re-read first).
pub(crate) fn deallocate(
    api: &dyn DraApi,
    dra: Option<&DraCache>,
    ns: &str,
    name: &str,
    uid: &str,
) -> Result<(), DraApiError> {
    for _ in 0..MAX_CONFLICT_RETRIES {
        let Some(c) = api.get_claim(ns, name)? else {
            return Ok(());
        };
        if c.metadata.uid.as_deref() != Some(uid) {
            return Ok(());
        }
        let status = serde_json::json!({"allocation": null, "reservedFor": null, "devices": null});
        match api.patch_claim_status(ns, name, &c, status) {
            Ok(updated) => {
                if let Some(dra) = dra {
                    let _ = dra.assume_claim(Arc::new(updated));
                }
                return Ok(());
            }
            Err(DraApiError::Conflict(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(DraApiError::Conflict(format!(
        "claim {ns}/{name}: too many conflicts"
    )))
}

/// Removes our finalizer and deletes a claim (re-read first).
pub(crate) fn delete_claim(
    api: &dyn DraApi,
    dra: Option<&DraCache>,
    ns: &str,
    name: &str,
    uid: &str,
) -> Result<(), DraApiError> {
    for _ in 0..MAX_CONFLICT_RETRIES {
        let Some(c) = api.get_claim(ns, name)? else {
            return Ok(());
        };
        if c.metadata.uid.as_deref() != Some(uid) {
            return Ok(());
        }
        if has_finalizer(&c) {
            match api.remove_claim_finalizer(ns, name, &c) {
                Ok(_) => {}
                Err(DraApiError::Conflict(_)) => continue,
                Err(DraApiError::NotFound(_)) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        api.delete_claim(ns, name, uid)?;
        if let Some(dra) = dra {
            dra.forget_claim(uid);
            dra.remove_claim(ns, name);
        }
        return Ok(());
    }
    Err(DraApiError::Conflict(format!(
        "claim {ns}/{name}: too many conflicts"
    )))
}

/// Removes the pod from `reservedFor` (and the allocation, when we made it and nobody else uses the
/// claim), re-reading on conflict.
fn unreserve_claim(
    api: &dyn DraApi,
    dra: Option<&DraCache>,
    w: &Written,
    pod: &PodInfo,
) -> Result<(), DraApiError> {
    for _ in 0..MAX_CONFLICT_RETRIES {
        let Some(c) = api.get_claim(&w.namespace, &w.name)? else {
            return Ok(());
        };
        if c.metadata.uid.as_deref() != Some(w.uid.as_str()) {
            return Ok(());
        }
        let reserved: Vec<ResourceClaimConsumerReference> = c
            .status
            .as_ref()
            .and_then(|s| s.reserved_for.clone())
            .unwrap_or_default();
        if !reserved.iter().any(|r| r.uid == pod.uid) {
            return Ok(());
        }
        let remaining: Vec<_> = reserved.into_iter().filter(|r| r.uid != pod.uid).collect();
        let status = if remaining.is_empty() && w.allocated_by_us {
            serde_json::json!({"reservedFor": null, "allocation": null, "devices": null})
        } else if remaining.is_empty() {
            serde_json::json!({"reservedFor": null})
        } else {
            serde_json::json!({"reservedFor": remaining})
        };
        match api.patch_claim_status(&w.namespace, &w.name, &c, status) {
            Ok(updated) => {
                if let Some(dra) = dra {
                    let _ = dra.assume_claim(Arc::new(updated));
                }
                return Ok(());
            }
            Err(DraApiError::Conflict(_)) => continue,
            Err(DraApiError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Err(DraApiError::Conflict(format!(
        "claim {}/{}: too many conflicts",
        w.namespace, w.name
    )))
}

/// Unreserve's API part (in-flight allocations are already released). Best effort; idempotent
/// because `progress` was taken out of the state.
pub(crate) fn undo(
    api: Option<&dyn DraApi>,
    dra: Option<&DraCache>,
    pod: &PodInfo,
    progress: BindingProgress,
) {
    let created_uid = progress.created_extended.as_ref().map(|c| c.2.clone());
    for w in &progress.written {
        if let Some(dra) = dra {
            dra.forget_claim(&w.uid);
        }
        if Some(&w.uid) == created_uid.as_ref() {
            continue;
        }
        if let Some(api) = api
            && let Err(e) = unreserve_claim(api, dra, w, pod)
        {
            tracing::warn!(pod = %pod.key(), claim = %format!("{}/{}", w.namespace, w.name), error = %e, "unreserving claim");
        }
    }
    let Some(api) = api else {
        return;
    };
    if let Some((ns, name, uid, _)) = &progress.created_extended
        && let Err(e) = delete_claim(api, dra, ns, name, uid)
    {
        tracing::warn!(pod = %pod.key(), claim = %format!("{ns}/{name}"), error = %e, "deleting extended resource claim");
    }
    if progress.pod_status_patched {
        let patch = serde_json::json!({"status": {"nodeAllocatableResourceClaimStatuses": null, "extendedResourceClaimStatus": null}});
        if let Err(e) = api.patch_pod_status(&pod.namespace, &pod.name, patch) {
            tracing::warn!(pod = %pod.key(), error = %e, "clearing DRA pod status");
        }
    }
}

//! [`FakeDraApi`]: an in-memory [`DraApi`] for tests (here and in other crates, with the `testing`
//! feature).
//!
//! It keeps claims with a global `resourceVersion` counter, enforces the version precondition
//! (409 on mismatch), can inject conflicts and failures, records every write in order, and can echo
//! its claim writes into a [`DraCache`] as the watch would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;
use parking_lot::Mutex;
use unisched_cache::DraCache;

use super::FINALIZER;
use super::api::{ClaimFuture, DraApi, DraApiError, DraApiLater};

/// One write the fake received.
#[derive(Clone, Debug, PartialEq)]
pub enum ApiWrite {
    /// `patch_claim_status`.
    PatchClaimStatus {
        /// `namespace/name`.
        claim: String,
        /// The status body.
        status: serde_json::Value,
    },
    /// `add_claim_finalizer`.
    AddFinalizer {
        /// `namespace/name`.
        claim: String,
    },
    /// `remove_claim_finalizer`.
    RemoveFinalizer {
        /// `namespace/name`.
        claim: String,
    },
    /// `create_claim`.
    CreateClaim {
        /// `namespace/name` as created.
        claim: String,
    },
    /// `delete_claim`.
    DeleteClaim {
        /// `namespace/name`.
        claim: String,
    },
    /// `patch_pod_status`.
    PatchPodStatus {
        /// `namespace/name`.
        pod: String,
        /// The body.
        patch: serde_json::Value,
    },
}

#[derive(Default)]
struct Inner {
    claims: BTreeMap<String, ResourceClaim>,
    rv: u64,
    writes: Vec<ApiWrite>,
    conflicts: u32,
    fail_next: Option<DraApiError>,
    pod_status: HashMap<String, serde_json::Value>,
    generated: u64,
}

/// See the module documentation.
#[derive(Default)]
pub struct FakeDraApi {
    inner: Mutex<Inner>,
    echo: Mutex<Option<Arc<DraCache>>>,
    /// This fake, for the futures [`DraApi::later`] hands out.
    me: std::sync::Weak<FakeDraApi>,
    /// Whether [`DraApi::later`] offers futures.
    futures: std::sync::atomic::AtomicBool,
}

/// The fake's PreBind calls as futures: each makes its call when first polled.
struct FakeLater(Arc<FakeDraApi>);

impl DraApiLater for FakeLater {
    fn get_claim(&self, namespace: &str, name: &str) -> ClaimFuture<Option<ResourceClaim>> {
        let (api, ns, name) = (self.0.clone(), namespace.to_string(), name.to_string());
        Box::pin(async move { api.get_claim(&ns, &name) })
    }

    fn patch_claim_status(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
        status: serde_json::Value,
    ) -> ClaimFuture<ResourceClaim> {
        let (api, ns, name, current) = (
            self.0.clone(),
            namespace.to_string(),
            name.to_string(),
            current.clone(),
        );
        Box::pin(async move { api.patch_claim_status(&ns, &name, &current, status) })
    }

    fn add_claim_finalizer(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> ClaimFuture<ResourceClaim> {
        let (api, ns, name, current) = (
            self.0.clone(),
            namespace.to_string(),
            name.to_string(),
            current.clone(),
        );
        Box::pin(async move { api.add_claim_finalizer(&ns, &name, &current) })
    }
}

impl std::fmt::Debug for FakeDraApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeDraApi").finish_non_exhaustive()
    }
}

fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

pub use super::merge_patch;

impl FakeDraApi {
    /// An empty fake.
    pub fn new() -> Arc<Self> {
        Arc::new_cyclic(|me| FakeDraApi {
            me: me.clone(),
            ..Self::default()
        })
    }

    /// Offer PreBind's claim calls as futures too ([`DraApi::later`]), as the runtime does.
    pub fn offer_futures(&self, on: bool) {
        self.futures.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// Echo every claim write (and seeded claim) into `cache` as a watch event.
    pub fn echo_to(&self, cache: Arc<DraCache>) {
        *self.echo.lock() = Some(cache);
    }

    fn echo(&self, claim: &ResourceClaim) {
        if let Some(c) = self.echo.lock().as_ref() {
            let _ = c.apply_claim(Arc::new(claim.clone()));
        }
    }

    fn echo_delete(&self, ns: &str, name: &str) {
        if let Some(c) = self.echo.lock().as_ref() {
            c.remove_claim(ns, name);
        }
    }

    /// Stores a claim (as if created by someone else), assigning a new resourceVersion; returns it.
    pub fn seed_claim(&self, mut claim: ResourceClaim) -> ResourceClaim {
        {
            let mut inner = self.inner.lock();
            inner.rv += 1;
            claim.metadata.resource_version = Some(inner.rv.to_string());
            let k = key(
                claim.metadata.namespace.as_deref().unwrap_or_default(),
                claim.metadata.name.as_deref().unwrap_or_default(),
            );
            inner.claims.insert(k, claim.clone());
        }
        self.echo(&claim);
        claim
    }

    /// The stored claim.
    pub fn claim(&self, ns: &str, name: &str) -> Option<ResourceClaim> {
        self.inner.lock().claims.get(&key(ns, name)).cloned()
    }

    /// All stored claims.
    pub fn claims(&self) -> Vec<ResourceClaim> {
        self.inner.lock().claims.values().cloned().collect()
    }

    /// Every write so far, in order.
    pub fn writes(&self) -> Vec<ApiWrite> {
        self.inner.lock().writes.clone()
    }

    /// Forgets the recorded writes.
    pub fn clear_writes(&self) {
        self.inner.lock().writes.clear();
    }

    /// The next `n` claim writes fail with a conflict, as if another writer bumped the object.
    pub fn inject_conflicts(&self, n: u32) {
        self.inner.lock().conflicts = n;
    }

    /// The next call fails with `err`.
    pub fn fail_next(&self, err: DraApiError) {
        self.inner.lock().fail_next = Some(err);
    }

    /// The pod status built from the patches received (strategic merge on
    /// `nodeAllocatableResourceClaimStatuses` by `resourceClaimName`).
    pub fn pod_status(&self, ns: &str, name: &str) -> serde_json::Value {
        self.inner
            .lock()
            .pod_status
            .get(&key(ns, name))
            .cloned()
            .unwrap_or(serde_json::Value::Null)
    }

    fn precheck(inner: &mut Inner) -> Result<(), DraApiError> {
        if let Some(e) = inner.fail_next.take() {
            return Err(e);
        }
        Ok(())
    }

    fn claim_write(
        &self,
        ns: &str,
        name: &str,
        rv: &str,
        record: ApiWrite,
        f: impl FnOnce(&mut ResourceClaim),
    ) -> Result<ResourceClaim, DraApiError> {
        let out = {
            let mut inner = self.inner.lock();
            Self::precheck(&mut inner)?;
            let k = key(ns, name);
            if inner.conflicts > 0 {
                inner.conflicts -= 1;
                inner.rv += 1;
                let next = inner.rv.to_string();
                if let Some(c) = inner.claims.get_mut(&k) {
                    c.metadata.resource_version = Some(next);
                }
                return Err(DraApiError::Conflict(format!("claim {k} was modified")));
            }
            inner.rv += 1;
            let next = inner.rv.to_string();
            let Some(c) = inner.claims.get_mut(&k) else {
                return Err(DraApiError::NotFound(k));
            };
            if c.metadata.resource_version.as_deref() != Some(rv) {
                return Err(DraApiError::Conflict(format!(
                    "claim {k}: resourceVersion {rv} is stale"
                )));
            }
            f(c);
            c.metadata.resource_version = Some(next);
            let out = c.clone();
            inner.writes.push(record);
            out
        };
        self.echo(&out);
        Ok(out)
    }
}

impl DraApi for FakeDraApi {
    fn later(&self) -> Option<Arc<dyn DraApiLater>> {
        if !self.futures.load(std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        Some(Arc::new(FakeLater(self.me.upgrade()?)))
    }

    fn get_claim(&self, namespace: &str, name: &str) -> Result<Option<ResourceClaim>, DraApiError> {
        let mut inner = self.inner.lock();
        Self::precheck(&mut inner)?;
        Ok(inner.claims.get(&key(namespace, name)).cloned())
    }

    fn patch_claim_status(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
        status: serde_json::Value,
    ) -> Result<ResourceClaim, DraApiError> {
        let resource_version = current.metadata.resource_version.as_deref().unwrap_or_default();
        let record = ApiWrite::PatchClaimStatus {
            claim: key(namespace, name),
            status: status.clone(),
        };
        self.claim_write(namespace, name, resource_version, record, |c| {
            let mut current = serde_json::to_value(&c.status).unwrap_or_default();
            merge_patch(&mut current, &status);
            c.status = serde_json::from_value(current).unwrap_or_default();
        })
    }

    fn add_claim_finalizer(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> Result<ResourceClaim, DraApiError> {
        let resource_version = current.metadata.resource_version.as_deref().unwrap_or_default();
        let record = ApiWrite::AddFinalizer {
            claim: key(namespace, name),
        };
        self.claim_write(namespace, name, resource_version, record, |c| {
            let f = c.metadata.finalizers.get_or_insert_with(Vec::new);
            if !f.iter().any(|x| x == FINALIZER) {
                f.push(FINALIZER.to_string());
            }
        })
    }

    fn remove_claim_finalizer(
        &self,
        namespace: &str,
        name: &str,
        current: &ResourceClaim,
    ) -> Result<ResourceClaim, DraApiError> {
        let resource_version = current.metadata.resource_version.as_deref().unwrap_or_default();
        let record = ApiWrite::RemoveFinalizer {
            claim: key(namespace, name),
        };
        self.claim_write(namespace, name, resource_version, record, |c| {
            if let Some(f) = c.metadata.finalizers.as_mut() {
                f.retain(|x| x != FINALIZER);
            }
        })
    }

    fn create_claim(&self, namespace: &str, claim: &ResourceClaim) -> Result<ResourceClaim, DraApiError> {
        let out = {
            let mut inner = self.inner.lock();
            Self::precheck(&mut inner)?;
            let mut c = claim.clone();
            c.metadata.namespace = Some(namespace.to_string());
            if c.metadata.name.as_deref().is_none_or(str::is_empty) {
                inner.generated += 1;
                let prefix = c.metadata.generate_name.clone().unwrap_or_default();
                c.metadata.name = Some(format!("{prefix}{:05}", inner.generated));
            }
            inner.rv += 1;
            c.metadata.resource_version = Some(inner.rv.to_string());
            c.metadata.uid = Some(format!("created-{}", inner.rv));
            let k = key(namespace, c.metadata.name.as_deref().unwrap_or_default());
            if inner.claims.contains_key(&k) {
                return Err(DraApiError::Other(format!("{k} already exists")));
            }
            inner.claims.insert(k.clone(), c.clone());
            inner.writes.push(ApiWrite::CreateClaim { claim: k });
            c
        };
        self.echo(&out);
        Ok(out)
    }

    fn delete_claim(&self, namespace: &str, name: &str, uid: &str) -> Result<(), DraApiError> {
        let gone = {
            let mut inner = self.inner.lock();
            Self::precheck(&mut inner)?;
            let k = key(namespace, name);
            inner.writes.push(ApiWrite::DeleteClaim { claim: k.clone() });
            match inner.claims.get(&k) {
                Some(c) if c.metadata.uid.as_deref() == Some(uid) => {
                    inner.claims.remove(&k);
                    true
                }
                Some(_) => return Err(DraApiError::Conflict(format!("{k}: UID precondition failed"))),
                None => false,
            }
        };
        if gone {
            self.echo_delete(namespace, name);
        }
        Ok(())
    }

    fn patch_pod_status(
        &self,
        namespace: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> Result<(), DraApiError> {
        let mut inner = self.inner.lock();
        Self::precheck(&mut inner)?;
        let k = key(namespace, name);
        inner.writes.push(ApiWrite::PatchPodStatus {
            pod: k.clone(),
            patch: patch.clone(),
        });
        let status = inner.pod_status.entry(k).or_insert(serde_json::json!({}));
        let Some(p) = patch.get("status").and_then(|s| s.as_object()) else {
            return Ok(());
        };
        for (field, value) in p {
            let merge_by_name = field == "nodeAllocatableResourceClaimStatuses" && value.is_array();
            if !merge_by_name {
                merge_patch(
                    status,
                    &serde_json::Value::Object([(field.clone(), value.clone())].into_iter().collect()),
                );
                continue;
            }
            let mut list: Vec<serde_json::Value> = status
                .get(field)
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default();
            for item in value.as_array().into_iter().flatten() {
                let name = item.get("resourceClaimName");
                match list.iter_mut().find(|x| x.get("resourceClaimName") == name) {
                    Some(existing) => *existing = item.clone(),
                    None => list.push(item.clone()),
                }
            }
            if let Some(obj) = status.as_object_mut() {
                obj.insert(field.clone(), serde_json::Value::Array(list));
            }
        }
        Ok(())
    }
}

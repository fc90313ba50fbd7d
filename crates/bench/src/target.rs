//! Where the harness creates its objects: the embedded store (in process, the default) or an
//! external API server over HTTP (`unisched-bench --external`). The [`Driver`](crate::driver)
//! runs the same ops against either.

use serde_json::{Value, json};
use unisched_sim::{DeleteOptions, Patch, Store};

use crate::BenchError;

/// The object operations a workload needs.
pub(crate) trait Target: Send + Sync {
    /// The object's resource (plural, as the target names it) and whether it is namespaced.
    fn resource_of(&self, v: &Value) -> Result<(String, bool), BenchError>;
    /// Creates the namespace (and whatever a pod needs in it); one that exists is fine.
    fn ensure_namespace(&self, ns: &str) -> Result<(), BenchError>;
    /// Creates an object; returns its name.
    fn create(&self, plural: &str, ns: Option<&str>, v: Value) -> Result<String, BenchError>;
    /// Creates a pod without waiting for the answer where the target allows it (errors surface
    /// at the next [`flush`](Target::flush)).
    fn submit_pod(&self, ns: &str, v: Value) -> Result<(), BenchError> {
        self.create("pods", Some(ns), v).map(|_| ())
    }
    /// Waits for every submitted pod; the first error, if any.
    fn flush(&self) -> Result<(), BenchError> {
        Ok(())
    }
    /// Deletes an object at once (pods: no grace period, there is no kubelet).
    fn delete(&self, plural: &str, ns: Option<&str>, name: &str) -> Result<(), BenchError>;
    /// The names of the pods of `ns`.
    fn pod_names(&self, ns: &str) -> Result<Vec<String>, BenchError>;
    /// Allocates every unallocated claim of `ns` outside the scheduler; returns how many.
    fn alloc_claims(&self, ns: &str, seed: u64) -> Result<usize, BenchError>;
}

fn store_err(e: unisched_sim::StoreError) -> BenchError {
    BenchError::Api(e.to_string())
}

impl Target for Store {
    fn resource_of(&self, v: &Value) -> Result<(String, bool), BenchError> {
        let av = v["apiVersion"].as_str().unwrap_or("v1");
        let kind = v["kind"].as_str().unwrap_or_default();
        let id = self
            .registry()
            .by_api_version_kind(av, kind)
            .ok_or_else(|| BenchError::Workload(format!("the API server does not serve {av} {kind}")))?;
        let rt = self.registry().get(id);
        Ok((rt.qualified_plural(), rt.namespaced))
    }

    fn ensure_namespace(&self, ns: &str) -> Result<(), BenchError> {
        match self.create("namespaces", None, json!({"metadata": {"name": ns}})) {
            Ok(_) => Ok(()),
            Err(e) if e.code() == 409 => Ok(()),
            Err(e) => Err(store_err(e)),
        }
    }

    fn create(&self, plural: &str, ns: Option<&str>, v: Value) -> Result<String, BenchError> {
        Store::create(self, plural, ns, v)
            .map(|o| o.name().to_string())
            .map_err(store_err)
    }

    fn delete(&self, plural: &str, ns: Option<&str>, name: &str) -> Result<(), BenchError> {
        Store::delete(self, plural, ns, name, &DeleteOptions::default())
            .map(|_| ())
            .map_err(store_err)
    }

    fn pod_names(&self, ns: &str) -> Result<Vec<String>, BenchError> {
        Ok(self
            .list_all("pods", Some(ns))
            .map_err(store_err)?
            .iter()
            .map(|p| p.name().to_string())
            .collect())
    }

    fn alloc_claims(&self, ns: &str, seed: u64) -> Result<usize, BenchError> {
        let slices = self.list_all("resourceslices", None).map_err(store_err)?;
        let claims = self.list_all("resourceclaims", None).map_err(store_err)?;
        let slices: Vec<&Value> = slices.iter().map(|s| s.value()).collect();
        let claims: Vec<&Value> = claims.iter().map(|c| c.value()).collect();
        let planned = crate::alloc::plan(&slices, &claims, ns, seed)?;
        for (name, allocation) in &planned {
            let patch = Patch::Merge(json!({"status": {"allocation": allocation}}));
            self.patch_status("resourceclaims", Some(ns), name, &patch)
                .map_err(store_err)?;
        }
        Ok(planned.len())
    }
}

//! [`VolumeCache`]: PersistentVolumes, PersistentVolumeClaims, StorageClasses, CSINodes, CSIDrivers,
//! CSIStorageCapacities and VolumeAttachments as the volume plugins see them, with an assume layer
//! for PVs and PVCs.
//!
//! Why an assume layer: VolumeBinding decides in Reserve that a claim gets a particular PV (or is to
//! be provisioned on a node), but the API server learns about it only in the binding cycle, and the
//! watch reports it later still. Without the layer, the next pod's scheduling cycle would see the PV
//! as free and hand it out a second time. So Reserve writes an *assumed* copy that every read
//! returns in place of the API object, until either the watch delivers a newer version of that
//! object (the API caught up, or someone else changed it; either way the API wins) or the plugin
//! restores it (Unreserve, after a failed binding cycle).
//!
//! Reads return the assumed view; [`VolumeCache::api_pvc`] / [`VolumeCache::api_pv`] return what
//! the API server last said, which is what PreBind waits on. Waiting is event driven: every write
//! bumps a generation under a condition variable, so a waiting binding cycle wakes when the watch
//! delivers, not on a polling tick.
//!
//! One `parking_lot` lock guards everything; the state is small compared to nodes and pods, and
//! every operation is a map lookup or a scan over the PVs of one storage class.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    core::v1::{PersistentVolume, PersistentVolumeClaim},
    storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment},
};
use parking_lot::{Condvar, Mutex, RwLock};

/// Why an assume was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VolumeCacheError {
    /// The object to assume has no name (or, for a claim, no namespace).
    #[error("{kind} has no name")]
    Unnamed {
        /// `PersistentVolume` or `PersistentVolumeClaim`.
        kind: &'static str,
    },
    /// The object to assume is not known from the API (it must exist before it can be assumed).
    #[error("{kind} {key:?} not found")]
    NotFound {
        /// `PersistentVolume` or `PersistentVolumeClaim`.
        kind: &'static str,
        /// Name or `namespace/name`.
        key: String,
    },
}

/// An assumed object and the API resourceVersion it was derived from.
#[derive(Clone, Debug)]
struct Assumed<T> {
    object: Arc<T>,
    base_version: Option<String>,
}

/// API objects with an optional assumed replacement per key.
#[derive(Debug)]
struct Layer<T> {
    api: HashMap<String, Arc<T>>,
    assumed: HashMap<String, Assumed<T>>,
}

impl<T> Default for Layer<T> {
    fn default() -> Self {
        Layer {
            api: HashMap::new(),
            assumed: HashMap::new(),
        }
    }
}

impl<T> Layer<T> {
    fn get(&self, key: &str) -> Option<Arc<T>> {
        self.assumed
            .get(key)
            .map(|a| a.object.clone())
            .or_else(|| self.api.get(key).cloned())
    }

    /// Stores the API version; an assumed copy based on an older version is dropped (the API wins).
    fn apply(&mut self, key: String, obj: Arc<T>, version: Option<String>) -> Option<Arc<T>> {
        if self
            .assumed
            .get(&key)
            .is_some_and(|a| a.base_version.is_none() || a.base_version != version)
        {
            self.assumed.remove(&key);
        }
        self.api.insert(key, obj)
    }

    fn remove(&mut self, key: &str) -> Option<Arc<T>> {
        self.assumed.remove(key);
        self.api.remove(key)
    }
}

#[derive(Debug, Default)]
struct Inner {
    pvs: Layer<PersistentVolume>,
    pvcs: Layer<PersistentVolumeClaim>,
    classes: HashMap<String, Arc<StorageClass>>,
    csi_nodes: HashMap<String, Arc<CSINode>>,
    csi_drivers: HashMap<String, Arc<CSIDriver>>,
    /// By `namespace/name`, so that the capacity check finds them in a stable order.
    capacities: BTreeMap<String, Arc<CSIStorageCapacity>>,
    /// By node, then by name: NodeVolumeLimits counts a node's attachments.
    attachments: HashMap<String, BTreeMap<String, Arc<VolumeAttachment>>>,
}

/// The volume state. See the module documentation.
#[derive(Debug, Default)]
pub struct VolumeCache {
    inner: RwLock<Inner>,
    generation: Mutex<u64>,
    changed: Condvar,
}

fn pvc_key(pvc: &PersistentVolumeClaim) -> Option<String> {
    let ns = pvc.metadata.namespace.as_deref().filter(|s| !s.is_empty())?;
    let name = pvc.metadata.name.as_deref().filter(|s| !s.is_empty())?;
    Some(format!("{ns}/{name}"))
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<String> {
    meta.name.clone().filter(|s| !s.is_empty())
}

fn remove_attachment(
    by_node: &mut HashMap<String, BTreeMap<String, Arc<VolumeAttachment>>>,
    name: &str,
) -> Option<Arc<VolumeAttachment>> {
    let node = by_node.iter().find(|(_, a)| a.contains_key(name))?.0.clone();
    let on_node = by_node.get_mut(&node)?;
    let old = on_node.remove(name);
    if on_node.is_empty() {
        by_node.remove(&node);
    }
    old
}

impl VolumeCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    fn bump(&self) {
        let mut g = self.generation.lock();
        *g = g.wrapping_add(1);
        self.changed.notify_all();
    }

    // ----- watch side -----

    /// A PersistentVolume was added or updated. Returns the previous API version.
    pub fn apply_pv(&self, pv: Arc<PersistentVolume>) -> Option<Arc<PersistentVolume>> {
        let name = name_of(&pv.metadata)?;
        let version = pv.metadata.resource_version.clone();
        let old = self.inner.write().pvs.apply(name, pv, version);
        self.bump();
        old
    }

    /// A PersistentVolume was deleted (its assumed copy goes too).
    pub fn remove_pv(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        let old = self.inner.write().pvs.remove(name);
        self.bump();
        old
    }

    /// A PersistentVolumeClaim was added or updated. Returns the previous API version.
    pub fn apply_pvc(&self, pvc: Arc<PersistentVolumeClaim>) -> Option<Arc<PersistentVolumeClaim>> {
        let key = pvc_key(&pvc)?;
        let version = pvc.metadata.resource_version.clone();
        let old = self.inner.write().pvcs.apply(key, pvc, version);
        self.bump();
        old
    }

    /// A PersistentVolumeClaim was deleted (its assumed copy goes too).
    pub fn remove_pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        let old = self.inner.write().pvcs.remove(&format!("{namespace}/{name}"));
        self.bump();
        old
    }

    /// A StorageClass was added or updated. Returns the previous version.
    pub fn apply_class(&self, class: Arc<StorageClass>) -> Option<Arc<StorageClass>> {
        let name = name_of(&class.metadata)?;
        let old = self.inner.write().classes.insert(name, class);
        self.bump();
        old
    }

    /// A StorageClass was deleted.
    pub fn remove_class(&self, name: &str) -> Option<Arc<StorageClass>> {
        let old = self.inner.write().classes.remove(name);
        self.bump();
        old
    }

    /// A CSINode was added or updated. Returns the previous version.
    pub fn apply_csi_node(&self, node: Arc<CSINode>) -> Option<Arc<CSINode>> {
        let name = name_of(&node.metadata)?;
        let old = self.inner.write().csi_nodes.insert(name, node);
        self.bump();
        old
    }

    /// A CSINode was deleted.
    pub fn remove_csi_node(&self, name: &str) -> Option<Arc<CSINode>> {
        let old = self.inner.write().csi_nodes.remove(name);
        self.bump();
        old
    }

    /// A CSIDriver was added or updated. Returns the previous version.
    pub fn apply_csi_driver(&self, driver: Arc<CSIDriver>) -> Option<Arc<CSIDriver>> {
        let name = name_of(&driver.metadata)?;
        let old = self.inner.write().csi_drivers.insert(name, driver);
        self.bump();
        old
    }

    /// A CSIDriver was deleted.
    pub fn remove_csi_driver(&self, name: &str) -> Option<Arc<CSIDriver>> {
        let old = self.inner.write().csi_drivers.remove(name);
        self.bump();
        old
    }

    /// A CSIStorageCapacity was added or updated. Returns the previous version.
    pub fn apply_capacity(&self, capacity: Arc<CSIStorageCapacity>) -> Option<Arc<CSIStorageCapacity>> {
        let ns = capacity.metadata.namespace.as_deref().filter(|s| !s.is_empty())?;
        let key = format!("{ns}/{}", name_of(&capacity.metadata)?);
        let old = self.inner.write().capacities.insert(key, capacity);
        self.bump();
        old
    }

    /// A CSIStorageCapacity was deleted.
    pub fn remove_capacity(&self, namespace: &str, name: &str) -> Option<Arc<CSIStorageCapacity>> {
        let old = self
            .inner
            .write()
            .capacities
            .remove(&format!("{namespace}/{name}"));
        self.bump();
        old
    }

    /// A VolumeAttachment was added or updated. Returns the previous version.
    pub fn apply_attachment(&self, attachment: Arc<VolumeAttachment>) -> Option<Arc<VolumeAttachment>> {
        let name = name_of(&attachment.metadata)?;
        let node = attachment.spec.node_name.clone();
        let mut inner = self.inner.write();
        // The node is immutable in the API; a change of it (a recreated object) moves the entry.
        let old = remove_attachment(&mut inner.attachments, &name);
        inner
            .attachments
            .entry(node)
            .or_default()
            .insert(name, attachment);
        drop(inner);
        self.bump();
        old
    }

    /// A VolumeAttachment was deleted.
    pub fn remove_attachment(&self, name: &str) -> Option<Arc<VolumeAttachment>> {
        let old = remove_attachment(&mut self.inner.write().attachments, name);
        self.bump();
        old
    }

    // ----- reads (assumed view) -----

    /// The VolumeAttachments of a node, by name.
    pub fn attachments_on(&self, node: &str) -> Vec<Arc<VolumeAttachment>> {
        self.inner
            .read()
            .attachments
            .get(node)
            .map(|a| a.values().cloned().collect())
            .unwrap_or_default()
    }

    /// A PV by name, assumed copy first.
    pub fn pv(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.inner.read().pvs.get(name)
    }

    /// A PVC by namespace and name, assumed copy first.
    pub fn pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.inner.read().pvcs.get(&format!("{namespace}/{name}"))
    }

    /// Every PV (assumed copies in place of their API versions), sorted by name.
    pub fn pvs(&self) -> Vec<Arc<PersistentVolume>> {
        let inner = self.inner.read();
        let sorted: BTreeMap<&String, ()> = inner.pvs.api.keys().map(|k| (k, ())).collect();
        sorted.keys().filter_map(|k| inner.pvs.get(k)).collect()
    }

    /// The PVs whose `spec.storageClassName` is `class` (`""`: PVs without a class), sorted by name.
    pub fn pvs_of_class(&self, class: &str) -> Vec<Arc<PersistentVolume>> {
        self.pvs()
            .into_iter()
            .filter(|pv| {
                pv.spec
                    .as_ref()
                    .and_then(|s| s.storage_class_name.as_deref())
                    .unwrap_or_default()
                    == class
            })
            .collect()
    }

    /// A StorageClass by name.
    pub fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.inner.read().classes.get(name).cloned()
    }

    /// A CSINode by (node) name.
    pub fn csi_node(&self, name: &str) -> Option<Arc<CSINode>> {
        self.inner.read().csi_nodes.get(name).cloned()
    }

    /// A CSIDriver by (driver) name.
    pub fn csi_driver(&self, name: &str) -> Option<Arc<CSIDriver>> {
        self.inner.read().csi_drivers.get(name).cloned()
    }

    /// The CSIStorageCapacities of a storage class, in `namespace/name` order.
    pub fn capacities_of_class(&self, class: &str) -> Vec<Arc<CSIStorageCapacity>> {
        self.inner
            .read()
            .capacities
            .values()
            .filter(|c| c.storage_class_name == class)
            .cloned()
            .collect()
    }

    /// The PV as the API server last reported it (no assumed copy).
    pub fn api_pv(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.inner.read().pvs.api.get(name).cloned()
    }

    /// The PVC as the API server last reported it (no assumed copy).
    pub fn api_pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.inner
            .read()
            .pvcs
            .api
            .get(&format!("{namespace}/{name}"))
            .cloned()
    }

    /// Numbers of PVs, PVCs, StorageClasses and CSINodes known from the API.
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let inner = self.inner.read();
        (
            inner.pvs.api.len(),
            inner.pvcs.api.len(),
            inner.classes.len(),
            inner.csi_nodes.len(),
        )
    }

    // ----- assume layer -----

    /// Makes `pv` the version every read returns until the watch delivers a newer API version or
    /// [`VolumeCache::restore_pv`] is called. The PV must be known from the API.
    pub fn assume_pv(&self, pv: PersistentVolume) -> Result<(), VolumeCacheError> {
        let name = name_of(&pv.metadata).ok_or(VolumeCacheError::Unnamed {
            kind: "PersistentVolume",
        })?;
        {
            let mut inner = self.inner.write();
            let base_version = inner
                .pvs
                .api
                .get(&name)
                .ok_or_else(|| VolumeCacheError::NotFound {
                    kind: "PersistentVolume",
                    key: name.clone(),
                })?
                .metadata
                .resource_version
                .clone();
            inner.pvs.assumed.insert(
                name,
                Assumed {
                    object: Arc::new(pv),
                    base_version,
                },
            );
        }
        self.bump();
        Ok(())
    }

    /// Drops the assumed copy of a PV, if any (idempotent).
    pub fn restore_pv(&self, name: &str) {
        let removed = self.inner.write().pvs.assumed.remove(name).is_some();
        if removed {
            self.bump();
        }
    }

    /// Like [`VolumeCache::assume_pv`] for a PVC.
    pub fn assume_pvc(&self, pvc: PersistentVolumeClaim) -> Result<(), VolumeCacheError> {
        let key = pvc_key(&pvc).ok_or(VolumeCacheError::Unnamed {
            kind: "PersistentVolumeClaim",
        })?;
        {
            let mut inner = self.inner.write();
            let base_version = inner
                .pvcs
                .api
                .get(&key)
                .ok_or_else(|| VolumeCacheError::NotFound {
                    kind: "PersistentVolumeClaim",
                    key: key.clone(),
                })?
                .metadata
                .resource_version
                .clone();
            inner.pvcs.assumed.insert(
                key,
                Assumed {
                    object: Arc::new(pvc),
                    base_version,
                },
            );
        }
        self.bump();
        Ok(())
    }

    /// Drops the assumed copy of a PVC, if any (idempotent).
    pub fn restore_pvc(&self, namespace: &str, name: &str) {
        let removed = self
            .inner
            .write()
            .pvcs
            .assumed
            .remove(&format!("{namespace}/{name}"))
            .is_some();
        if removed {
            self.bump();
        }
    }

    /// Whether a PV has an assumed copy.
    pub fn is_pv_assumed(&self, name: &str) -> bool {
        self.inner.read().pvs.assumed.contains_key(name)
    }

    /// Whether a PVC has an assumed copy.
    pub fn is_pvc_assumed(&self, namespace: &str, name: &str) -> bool {
        self.inner
            .read()
            .pvcs
            .assumed
            .contains_key(&format!("{namespace}/{name}"))
    }

    // ----- waiting -----

    /// Blocks until `done(self)` is true (checked now and after every change) or `timeout` passes.
    /// Returns whether `done` became true.
    pub fn wait_until(&self, timeout: Duration, done: impl Fn(&VolumeCache) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut generation = self.generation.lock();
        loop {
            // The state lock is separate from the generation lock, so `done` can read freely;
            // holding the generation lock means no change notification is lost in between.
            if done(self) {
                return true;
            }
            if self.changed.wait_until(&mut generation, deadline).timed_out() {
                return done(self);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn pv(name: &str, rv: &str, claim: Option<&str>) -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                storage_class_name: Some("local".into()),
                claim_ref: claim.map(|c| ObjectReference {
                    namespace: Some("default".into()),
                    name: Some(c.into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn pvc(name: &str, rv: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn claim_of(pv: &PersistentVolume) -> Option<String> {
        pv.spec.as_ref()?.claim_ref.as_ref()?.name.clone()
    }

    #[test]
    fn attachments_by_node_in_name_order() {
        use k8s_openapi::api::storage::v1::{VolumeAttachmentSource, VolumeAttachmentSpec};

        let c = VolumeCache::new();
        let attachment = |name: &str, node: &str| {
            Arc::new(VolumeAttachment {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                spec: VolumeAttachmentSpec {
                    attacher: "csi.example.com".into(),
                    node_name: node.into(),
                    source: VolumeAttachmentSource {
                        persistent_volume_name: Some(format!("pv-{name}")),
                        ..Default::default()
                    },
                },
                status: None,
            })
        };
        let names = |node: &str| -> Vec<String> {
            c.attachments_on(node)
                .iter()
                .map(|a| a.metadata.name.clone().unwrap_or_default())
                .collect()
        };
        assert!(c.apply_attachment(attachment("b", "n1")).is_none());
        assert!(c.apply_attachment(attachment("a", "n1")).is_none());
        assert!(c.apply_attachment(attachment("c", "n2")).is_none());
        assert_eq!(names("n1"), ["a", "b"]);
        assert_eq!(names("n2"), ["c"]);
        assert!(names("n3").is_empty());
        // An update replaces the entry; a recreated object on another node moves it.
        assert!(c.apply_attachment(attachment("a", "n1")).is_some());
        assert!(c.apply_attachment(attachment("b", "n2")).is_some());
        assert_eq!(names("n1"), ["a"]);
        assert_eq!(names("n2"), ["b", "c"]);
        assert!(c.remove_attachment("a").is_some());
        assert!(names("n1").is_empty());
        assert!(c.remove_attachment("a").is_none());
    }

    #[test]
    fn csi_drivers_and_capacities_by_name_and_class() {
        use k8s_openapi::api::storage::v1::CSIDriverSpec;

        let c = VolumeCache::new();
        let driver = CSIDriver {
            metadata: ObjectMeta {
                name: Some("csi.example.com".into()),
                ..Default::default()
            },
            spec: CSIDriverSpec::default(),
        };
        assert!(c.apply_csi_driver(Arc::new(driver)).is_none());
        assert!(c.csi_driver("csi.example.com").is_some());
        let capacity = |ns: &str, name: &str, class: &str| CSIStorageCapacity {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            storage_class_name: class.into(),
            ..Default::default()
        };
        for (ns, name, class) in [("b", "x", "fast"), ("a", "y", "fast"), ("a", "z", "slow")] {
            c.apply_capacity(Arc::new(capacity(ns, name, class)));
        }
        let names = |class: &str| -> Vec<String> {
            c.capacities_of_class(class)
                .iter()
                .map(|c| c.metadata.name.clone().unwrap_or_default())
                .collect()
        };
        assert_eq!(names("fast"), ["y", "x"], "in namespace/name order");
        assert!(c.remove_capacity("a", "y").is_some());
        assert_eq!(names("fast"), ["x"]);
        assert!(c.remove_csi_driver("csi.example.com").is_some());
        assert!(c.csi_driver("csi.example.com").is_none());
    }

    #[test]
    fn assumed_pv_is_visible_until_restored() {
        let c = VolumeCache::new();
        c.apply_pv(Arc::new(pv("pv1", "1", None)));
        c.assume_pv(pv("pv1", "1", Some("data"))).unwrap();
        assert_eq!(claim_of(&c.pv("pv1").unwrap()).as_deref(), Some("data"));
        assert_eq!(claim_of(&c.api_pv("pv1").unwrap()), None);
        assert_eq!(claim_of(&c.pvs_of_class("local")[0]).as_deref(), Some("data"));
        c.restore_pv("pv1");
        c.restore_pv("pv1");
        assert_eq!(claim_of(&c.pv("pv1").unwrap()), None);
    }

    #[test]
    fn newer_api_version_replaces_assumed() {
        struct Case {
            name: &'static str,
            new_rv: &'static str,
            still_assumed: bool,
        }
        let cases = [
            Case {
                name: "same version (resync) keeps the assumption",
                new_rv: "1",
                still_assumed: true,
            },
            Case {
                name: "newer version wins",
                new_rv: "2",
                still_assumed: false,
            },
        ];
        for case in cases {
            let c = VolumeCache::new();
            c.apply_pv(Arc::new(pv("pv1", "1", None)));
            c.assume_pv(pv("pv1", "1", Some("data"))).unwrap();
            c.apply_pv(Arc::new(pv("pv1", case.new_rv, None)));
            assert_eq!(c.is_pv_assumed("pv1"), case.still_assumed, "{}", case.name);
        }
    }

    #[test]
    fn assume_requires_a_known_object() {
        let c = VolumeCache::new();
        assert_eq!(
            c.assume_pvc(pvc("data", "1")),
            Err(VolumeCacheError::NotFound {
                kind: "PersistentVolumeClaim",
                key: "default/data".into()
            })
        );
        c.apply_pvc(Arc::new(pvc("data", "1")));
        c.assume_pvc(pvc("data", "1")).unwrap();
        assert!(c.is_pvc_assumed("default", "data"));
        c.remove_pvc("default", "data");
        assert!(!c.is_pvc_assumed("default", "data"));
        assert!(c.pvc("default", "data").is_none());
    }

    #[test]
    fn wait_until_wakes_on_change() {
        let c = Arc::new(VolumeCache::new());
        let writer = c.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            writer.apply_pvc(Arc::new(pvc("data", "2")));
        });
        let ok = c.wait_until(Duration::from_secs(5), |v| v.api_pvc("default", "data").is_some());
        t.join().unwrap();
        assert!(ok);
        assert!(!c.wait_until(Duration::from_millis(20), |v| v.pv("nope").is_some()));
    }
}

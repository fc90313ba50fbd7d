//! ResourceSlices prepared once, DeviceTaintRules applied, and the pool index.
//!
//! A slice is prepared when it arrives (and again only when a taint rule selecting it changes), so
//! its per-device CEL values and selector-match caches live as long as the object does. The index
//! is rebuilt lazily, at the next snapshot after a change: building it is linear in the number of
//! slices and needs no CEL work, and slices change rarely compared with pods.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{DeviceTaintRule, ResourceSlice};
use unisched_dra::{
    DeviceMaps, DraSnapshotIndex, PreparedSlice, apply_device_taint_rules, restore_device_maps,
    split_shared_slice,
};

use super::DraCacheError;

/// A slice as received from the watch, its devices' maps taken out (see
/// [`unisched_dra::device_maps`]), and the maps in device order.
type RawSlice = (Arc<ResourceSlice>, Arc<[DeviceMaps]>);

#[derive(Debug, Default)]
pub(crate) struct SliceStore {
    /// As received from the watch, without the devices' maps.
    raw: HashMap<String, RawSlice>,
    /// With taint rules applied, prepared.
    prepared: HashMap<String, Arc<PreparedSlice>>,
    rules: BTreeMap<String, Arc<DeviceTaintRule>>,
    /// `None`: must be rebuilt.
    index: Option<Arc<DraSnapshotIndex>>,
}

/// Whether a rule can select devices of the slice (driver and pool; the device name is checked
/// per device when the rule is applied).
fn rule_selects(rule: &DeviceTaintRule, slice: &ResourceSlice) -> bool {
    let Some(sel) = &rule.spec.device_selector else {
        return false;
    };
    sel.driver.as_ref().is_none_or(|d| *d == slice.spec.driver)
        && sel.pool.as_ref().is_none_or(|p| *p == slice.spec.pool.name)
}

impl SliceStore {
    pub(crate) fn len(&self) -> usize {
        self.raw.len()
    }

    /// The whole slice (maps put back) as the allocator sees it, taint rules applied.
    pub(crate) fn prepared_slice(&self, name: &str) -> Option<Arc<ResourceSlice>> {
        self.prepared
            .get(name)
            .map(|p| Arc::new(restore_device_maps(p.slice(), p.all_device_maps())))
    }

    /// The devices' maps of the slice as last applied.
    pub(crate) fn device_maps(&self, name: &str) -> Option<Arc<[DeviceMaps]>> {
        self.raw.get(name).map(|(_, maps)| maps.clone())
    }

    fn prepare(&self, (raw, maps): &RawSlice) -> Arc<PreparedSlice> {
        let rules: Vec<DeviceTaintRule> = self
            .rules
            .values()
            .filter(|r| rule_selects(r, raw))
            .map(|r| (**r).clone())
            .collect();
        if rules.is_empty() {
            return Arc::new(PreparedSlice::with_maps(raw.clone(), maps.clone()));
        }
        let mut tainted = (**raw).clone();
        apply_device_taint_rules(&mut tainted, &rules);
        Arc::new(PreparedSlice::with_maps(Arc::new(tainted), maps.clone()))
    }

    /// Applies a slice as received; its devices' maps are split off on a copy when present.
    pub(crate) fn apply(&mut self, slice: Arc<ResourceSlice>) -> Result<(), DraCacheError> {
        let (slice, maps) = split_shared_slice(slice);
        self.apply_split(slice, maps)
    }

    /// Applies a slice whose devices' maps were split off by [`split_device_maps`].
    pub(crate) fn apply_split(
        &mut self,
        slice: Arc<ResourceSlice>,
        maps: Arc<[DeviceMaps]>,
    ) -> Result<(), DraCacheError> {
        let name =
            slice
                .metadata
                .name
                .clone()
                .filter(|n| !n.is_empty())
                .ok_or(DraCacheError::MissingName {
                    kind: "ResourceSlice",
                })?;
        let raw = (slice, maps);
        let prepared = self.prepare(&raw);
        self.raw.insert(name.clone(), raw);
        self.prepared.insert(name, prepared);
        self.index = None;
        Ok(())
    }

    pub(crate) fn remove(&mut self, name: &str) -> bool {
        let known = self.raw.remove(name).is_some();
        self.prepared.remove(name);
        if known {
            self.index = None;
        }
        known
    }

    /// Re-prepares every slice selected by `a` or `b`.
    fn reprepare(&mut self, a: Option<&DeviceTaintRule>, b: Option<&DeviceTaintRule>) {
        let affected: Vec<RawSlice> = self
            .raw
            .values()
            .filter(|(s, _)| a.is_some_and(|r| rule_selects(r, s)) || b.is_some_and(|r| rule_selects(r, s)))
            .cloned()
            .collect();
        if affected.is_empty() {
            return;
        }
        for raw in affected {
            let prepared = self.prepare(&raw);
            if let Some(name) = raw.0.metadata.name.clone() {
                self.prepared.insert(name, prepared);
            }
        }
        self.index = None;
    }

    pub(crate) fn apply_rule(&mut self, rule: Arc<DeviceTaintRule>) -> Result<(), DraCacheError> {
        let name =
            rule.metadata
                .name
                .clone()
                .filter(|n| !n.is_empty())
                .ok_or(DraCacheError::MissingName {
                    kind: "DeviceTaintRule",
                })?;
        let old = self.rules.insert(name, rule.clone());
        self.reprepare(old.as_deref(), Some(&rule));
        Ok(())
    }

    pub(crate) fn remove_rule(&mut self, name: &str) -> bool {
        let Some(old) = self.rules.remove(name) else {
            return false;
        };
        self.reprepare(Some(&old), None);
        true
    }

    /// The index, rebuilt if a slice or rule changed since the last call.
    pub(crate) fn index(&mut self) -> Arc<DraSnapshotIndex> {
        if let Some(i) = &self.index {
            return i.clone();
        }
        let index = Arc::new(DraSnapshotIndex::new(self.prepared.values().cloned()));
        self.index = Some(index.clone());
        index
    }
}

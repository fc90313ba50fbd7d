//! DeviceClasses and the KEP-5004 extended-resource map.
//!
//! Every class serves its implicit name `deviceclass.resource.kubernetes.io/<class>`; a class with
//! `spec.extendedResourceName` also serves that name. Two classes may claim the same explicit name
//! (validation cannot prevent it across objects): the class created most recently wins, and on equal
//! timestamps the lexicographically smallest class name, so the answer does not depend on event order.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::DeviceClass;

use super::{ClassMap, DraCacheError, IMPLICIT_EXTENDED_RESOURCE_PREFIX};

#[derive(Debug, Default)]
pub(crate) struct ClassStore {
    classes: HashMap<String, Arc<DeviceClass>>,
    /// Shared copy for snapshots; `None` after a change.
    map: Option<Arc<ClassMap>>,
    /// Extended resource name → class name, recomputed eagerly on every class change (classes
    /// change rarely, and NodeResourcesFit asks per node).
    extended: Arc<HashMap<String, String>>,
}

/// The extended-resource map of a set of classes (see the module documentation).
pub(crate) fn extended_map(classes: &HashMap<String, Arc<DeviceClass>>) -> HashMap<String, String> {
    let mut explicit: HashMap<&str, &DeviceClass> = HashMap::new();
    for class in classes.values() {
        let Some(resource) = class
            .spec
            .as_ref()
            .and_then(|s| s.extended_resource_name.as_deref())
            .filter(|r| !r.is_empty())
        else {
            continue;
        };
        let better = match explicit.get(resource) {
            None => true,
            Some(current) => {
                let (a, b) = (
                    &class.metadata.creation_timestamp,
                    &current.metadata.creation_timestamp,
                );
                a > b || (a == b && class.metadata.name < current.metadata.name)
            }
        };
        if better {
            explicit.insert(resource, class);
        }
    }
    let mut out: HashMap<String, String> = explicit
        .into_iter()
        .map(|(r, c)| (r.to_string(), c.metadata.name.clone().unwrap_or_default()))
        .collect();
    for name in classes.keys() {
        out.insert(format!("{IMPLICIT_EXTENDED_RESOURCE_PREFIX}{name}"), name.clone());
    }
    out
}

impl ClassStore {
    pub(crate) fn apply(&mut self, class: Arc<DeviceClass>) -> Result<(), DraCacheError> {
        let name = class
            .metadata
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or(DraCacheError::MissingName { kind: "DeviceClass" })?;
        self.classes.insert(name, class);
        self.map = None;
        self.extended = Arc::new(extended_map(&self.classes));
        Ok(())
    }

    pub(crate) fn remove(&mut self, name: &str) -> bool {
        let known = self.classes.remove(name).is_some();
        if known {
            self.map = None;
            self.extended = Arc::new(extended_map(&self.classes));
        }
        known
    }

    pub(crate) fn get(&self, name: &str) -> Option<Arc<DeviceClass>> {
        self.classes.get(name).cloned()
    }

    pub(crate) fn map(&mut self) -> Arc<ClassMap> {
        if let Some(m) = &self.map {
            return m.clone();
        }
        let m = Arc::new(self.classes.clone());
        self.map = Some(m.clone());
        m
    }

    pub(crate) fn extended_map(&self) -> Arc<HashMap<String, String>> {
        self.extended.clone()
    }

    /// Live lookup (the snapshot has the same answer until the next class event).
    pub(crate) fn class_for_extended_resource(&self, resource: &str) -> Option<String> {
        self.extended.get(resource).cloned()
    }
}

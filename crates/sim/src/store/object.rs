//! Stored objects and store events.

use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use axum::body::Bytes;
use serde_json::Value;

use crate::registry::KindId;

/// One version of an object as stored: its JSON (with `metadata.resourceVersion` set) and the
/// lazily serialised bytes, shared by every reader and watcher.
#[derive(Debug)]
pub struct StoredObject {
    value: Value,
    rv: u64,
    bytes: OnceLock<Bytes>,
}

/// A shared, immutable object version.
pub type ObjectRef = Arc<StoredObject>;

impl StoredObject {
    pub(crate) fn new(value: Value, rv: u64) -> Self {
        Self {
            value,
            rv,
            bytes: OnceLock::new(),
        }
    }

    /// The object.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// A copy of the object.
    pub fn to_value(&self) -> Value {
        self.value.clone()
    }

    /// Its resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        crate::util::name_of(&self.value)
    }

    /// `metadata.namespace` ("" for cluster-scoped objects).
    pub fn namespace(&self) -> &str {
        crate::util::namespace_of(&self.value)
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &str {
        crate::util::uid_of(&self.value)
    }

    /// The JSON serialisation, computed once.
    pub fn json_bytes(&self) -> &Bytes {
        self.bytes
            .get_or_init(|| Bytes::from(serde_json::to_vec(&self.value).unwrap_or_default()))
    }

    /// Decodes into a typed object (e.g. a k8s-openapi `Pod`).
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.value)
    }
}

impl Deref for StoredObject {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.value
    }
}

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Created (or, for a filtered watch, started matching).
    Added,
    /// Changed.
    Modified,
    /// Removed (or, for a filtered watch, stopped matching).
    Deleted,
}

impl EventType {
    /// The watch-protocol name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One committed change. Every change takes exactly one resourceVersion.
#[derive(Debug)]
pub struct StoreEvent {
    /// What happened.
    pub event_type: EventType,
    /// Which resource.
    pub kind: KindId,
    /// The object after the change; for deletions, the last state with the deletion's resourceVersion.
    pub object: ObjectRef,
    /// The object before the change (None for creations).
    pub previous: Option<ObjectRef>,
    prev_at_rv: OnceLock<ObjectRef>,
}

impl StoreEvent {
    pub(crate) fn new(
        event_type: EventType,
        kind: KindId,
        object: ObjectRef,
        previous: Option<ObjectRef>,
    ) -> Self {
        Self {
            event_type,
            kind,
            object,
            previous,
            prev_at_rv: OnceLock::new(),
        }
    }

    /// The event's resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.object.resource_version()
    }

    /// The previous object stamped with this event's resourceVersion: what a filtered watch receives as
    /// DELETED when an object stops matching its selector.
    pub fn previous_at_rv(&self) -> ObjectRef {
        self.prev_at_rv
            .get_or_init(|| match &self.previous {
                Some(p) => {
                    let mut v = p.to_value();
                    crate::util::meta_mut(&mut v).insert(
                        "resourceVersion".into(),
                        Value::String(self.resource_version().to_string()),
                    );
                    Arc::new(StoredObject::new(v, self.resource_version()))
                }
                None => self.object.clone(),
            })
            .clone()
    }
}

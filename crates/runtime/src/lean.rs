//! Watched objects decoded without `metadata.managedFields`.
//!
//! kube-apiserver records, on every object, which writer owns which field (`managedFields`). A
//! pod that the creator, the claim controller and the scheduler have each written carries three or
//! four entries, and each entry's `fieldsV1` is a free-form JSON tree: decoded into
//! `serde_json::Value` it is a heap of small maps, often a third of the object's memory, and
//! decoding it is a good part of each watch event's CPU. The scheduler never reads it (it patches,
//! and server-side field ownership is the API server's business), so [`Lean`] skips the field's
//! bytes during decoding instead of building the tree and dropping it. Everything else decodes
//! exactly as the plain type would: the filter drops one key of the top-level `metadata` map and
//! passes every other key and value through unchanged.
//!
//! kube-scheduler strips the same field from its informers' objects for the same reason.

use std::{borrow::Cow, fmt};

use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{
    Deserialize, Deserializer,
    de::{self, DeserializeSeed, IgnoredAny, IntoDeserializer, MapAccess, Visitor},
};
use unisched_framework::shrink_vec;

/// An API object of kind `K` whose `metadata.managedFields` was skipped while decoding.
///
/// It is what the watches list and watch (`Api<Lean<K>>`); the handlers get the plain `K`.
#[derive(Clone, Debug)]
pub struct Lean<K>(pub K);

impl<'de, K: Deserialize<'de>> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::deserialize(Filter {
            inner: deserializer,
            level: Level::Object,
        })
        .map(Lean)
    }
}

impl<K: kube::Resource<DynamicType = ()>> kube::Resource for Lean<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn api_version(dt: &()) -> Cow<'_, str> {
        K::api_version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

/// Which map the filter is looking at.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The object itself: its `metadata` value is filtered one level down.
    Object,
    /// The object's `metadata`: its `managedFields` entry is skipped.
    Metadata,
}

/// The name of the one key dropped from `metadata`.
const MANAGED_FIELDS: &str = "managedFields";

/// A deserializer that hands the wrapped one's maps to the visitor through [`FilteredMap`].
struct Filter<D> {
    inner: D,
    level: Level,
}

/// Forwards each `deserialize_*` call to the same call of the wrapped deserializer, with the
/// visitor wrapped so that a map it is given is filtered.
macro_rules! forward_filtered {
    ($($method:ident $(($($arg:ident: $ty:ty),*))?),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, $($($arg: $ty,)*)? visitor: V) -> Result<V::Value, D::Error> {
            self.inner.$method($($($arg,)*)? FilterVisitor { inner: visitor, level: self.level })
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Filter<D> {
    type Error = D::Error;

    forward_filtered! {
        deserialize_any, deserialize_bool, deserialize_i8, deserialize_i16, deserialize_i32,
        deserialize_i64, deserialize_u8, deserialize_u16, deserialize_u32, deserialize_u64,
        deserialize_f32, deserialize_f64, deserialize_char, deserialize_str, deserialize_string,
        deserialize_bytes, deserialize_byte_buf, deserialize_option, deserialize_unit,
        deserialize_seq, deserialize_map, deserialize_identifier, deserialize_ignored_any,
        deserialize_unit_struct(name: &'static str),
        deserialize_newtype_struct(name: &'static str),
        deserialize_tuple(len: usize),
        deserialize_tuple_struct(name: &'static str, len: usize),
        deserialize_struct(name: &'static str, fields: &'static [&'static str]),
        deserialize_enum(name: &'static str, variants: &'static [&'static str]),
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// The caller's visitor, given a filtered map (or a filtered `Some`) where the input has one.
/// Any other shape falls to the visitor trait's defaults, which report an invalid type in the
/// caller's own words ([`Visitor::expecting`] is forwarded): an object that is not a map is an
/// error either way.
struct FilterVisitor<V> {
    inner: V,
    level: Level,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for FilterVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(FilteredMap {
            inner: map,
            level: self.level,
            value_is_metadata: false,
        })
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Filter {
            inner: deserializer,
            level: self.level,
        })
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }
}

/// A map key as the input holds it: borrowed from the input when it has no escapes.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// A map with `managedFields` left out (at the metadata level) and `metadata`'s value filtered
/// (at the object level).
struct FilteredMap<A> {
    inner: A,
    level: Level,
    /// The key just returned was the object's `metadata`.
    value_is_metadata: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FilteredMap<A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, A::Error> {
        loop {
            let Some(key) = self.inner.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            match self.level {
                Level::Metadata if key.as_str() == MANAGED_FIELDS => {
                    self.inner.next_value::<IgnoredAny>()?;
                    continue;
                }
                Level::Object => self.value_is_metadata = key.as_str() == "metadata",
                Level::Metadata => {}
            }
            return match key {
                Key::Borrowed(s) => seed.deserialize(de::value::BorrowedStrDeserializer::new(s)),
                Key::Owned(s) => seed.deserialize(s.into_deserializer()),
            }
            .map(Some);
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        if std::mem::take(&mut self.value_is_metadata) {
            self.inner.next_value_seed(MetadataSeed(seed))
        } else {
            self.inner.next_value_seed(seed)
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// The caller's seed for the object's `metadata`, given a deserializer that filters it.
struct MetadataSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for MetadataSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Filter {
            inner: deserializer,
            level: Level::Metadata,
        })
    }
}

/// Gives back the spare room of a claim's decoded vectors, which the scheduler keeps for as long
/// as the claim exists. Decoding grows each vector by `push`, which leaves room for four: one
/// request and one allocation result per claim wasted ~45 MB over 30,000 claims.
pub(crate) fn shrink_claim(claim: &mut ResourceClaim) {
    if let Some(devices) = claim.spec.as_mut().and_then(|s| s.devices.as_mut()) {
        shrink_vec(&mut devices.requests);
        shrink_vec(&mut devices.constraints);
        shrink_vec(&mut devices.config);
    }
    let Some(status) = claim.status.as_mut() else {
        return;
    };
    shrink_vec(&mut status.reserved_for);
    shrink_vec(&mut status.devices);
    if let Some(allocation) = status.allocation.as_mut() {
        if let Some(devices) = allocation.devices.as_mut() {
            shrink_vec(&mut devices.results);
            shrink_vec(&mut devices.config);
        }
        if let Some(selector) = allocation.node_selector.as_mut() {
            selector.node_selector_terms.shrink_to_fit();
            for term in &mut selector.node_selector_terms {
                shrink_vec(&mut term.match_expressions);
                shrink_vec(&mut term.match_fields);
                for r in term
                    .match_expressions
                    .iter_mut()
                    .chain(term.match_fields.iter_mut())
                    .flatten()
                {
                    shrink_vec(&mut r.values);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::{core::v1::Pod, resource::v1::ResourceClaim};
    use kube::core::{ObjectList, WatchEvent};
    use serde_json::{Value, json};

    use super::*;

    /// A pod as kube-apiserver serves it after the creator, the claim controller and a scheduler
    /// wrote it: three managedFields entries, and other fields named like the skipped one where
    /// they must survive (a label, an annotation, a field of the spec).
    fn served_pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p-1",
                "namespace": "test",
                "uid": "6f0c",
                "resourceVersion": "42",
                "labels": {"managedFields": "label-kept", "app": "x"},
                "annotations": {"managedFields": "annotation-kept"},
                "finalizers": ["example.com/f"],
                "managedFields": [
                    {"manager": "creator", "operation": "Update", "apiVersion": "v1",
                     "time": "2026-12-03T00:00:00Z", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}}}}}},
                    {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                     "subresource": "status", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:status": {"f:resourceClaimStatuses": {}}}},
                    {"manager": "unisched", "operation": "Apply", "apiVersion": "v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}}}}
                ]
            },
            "spec": {
                "nodeName": "n-1",
                "containers": [{"name": "c", "image": "pause",
                                "resources": {"requests": {"cpu": "100m"}}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]
            },
            "status": {"phase": "Pending",
                       "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-1-gpu-x"}]}
        })
    }

    fn plain_without_managed_fields<K: serde::de::DeserializeOwned + kube::Resource>(v: &Value) -> K {
        let mut k: K = serde_json::from_value(v.clone()).expect("the plain type decodes");
        k.meta_mut().managed_fields = None;
        k
    }

    #[test]
    fn a_pod_decodes_as_the_plain_type_without_managed_fields() {
        let text = served_pod().to_string();
        let plain: Pod = serde_json::from_str(&text).unwrap();
        assert_eq!(plain.metadata.managed_fields.as_ref().map(Vec::len), Some(3));
        let lean: Lean<Pod> = serde_json::from_str(&text).unwrap();
        assert_eq!(lean.0.metadata.managed_fields, None);
        assert_eq!(lean.0, plain_without_managed_fields::<Pod>(&served_pod()));
        // The like-named label and annotation are not metadata's own key: they stay.
        let labels = lean.0.metadata.labels.as_ref().unwrap();
        assert_eq!(
            labels.get("managedFields").map(String::as_str),
            Some("label-kept")
        );
        // From bytes (kube-rs decodes watch lines with from_slice: borrowed keys).
        let from_slice: Lean<Pod> = serde_json::from_slice(text.as_bytes()).unwrap();
        assert_eq!(from_slice.0, lean.0);
    }

    #[test]
    fn escaped_keys_are_read_like_plain_ones() {
        // `met\u0061data` and `m\u0061nagedFields` are `metadata` and `managedFields` with an
        // escape: serde_json cannot borrow them, which takes the owned-key path.
        let text = served_pod()
            .to_string()
            .replacen("\"metadata\"", "\"met\\u0061data\"", 1)
            .replacen("\"managedFields\":[", "\"m\\u0061nagedFields\":[", 1);
        assert!(text.contains("met\\u0061data") && text.contains("m\\u0061nagedFields\":["));
        let lean: Lean<Pod> = serde_json::from_str(&text).unwrap();
        assert_eq!(lean.0, plain_without_managed_fields::<Pod>(&served_pod()));
    }

    #[test]
    fn watch_events_and_lists_of_lean_objects_decode() {
        let event = json!({"type": "MODIFIED", "object": served_pod()}).to_string();
        match serde_json::from_str::<WatchEvent<Lean<Pod>>>(&event).unwrap() {
            WatchEvent::Modified(p) => {
                assert_eq!(p.0, plain_without_managed_fields::<Pod>(&served_pod()));
            }
            other => panic!("expected MODIFIED, got {other:?}"),
        }
        let list = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "43"},
                          "items": [served_pod(), served_pod()]})
        .to_string();
        let list: ObjectList<Lean<Pod>> = serde_json::from_str(&list).unwrap();
        assert_eq!(list.items.len(), 2);
        assert!(list.items.iter().all(|p| p.0.metadata.managed_fields.is_none()));
    }

    #[test]
    fn nested_metadata_keeps_its_managed_fields_key_untouched() {
        // Only the object's own metadata is filtered: a field called `metadata` deeper down (a
        // template's, for instance) is decoded as the plain type decodes it.
        let claim = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "test",
                         "managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
                                            "fieldsV1": {"f:spec": {}}}]},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}
        });
        let lean: Lean<ResourceClaim> = serde_json::from_value(claim.clone()).unwrap();
        assert_eq!(lean.0, plain_without_managed_fields::<ResourceClaim>(&claim));
    }

    #[test]
    fn malformed_objects_are_errors_as_with_the_plain_type() {
        for bad in [
            json!({"metadata": "not a map"}),
            json!({"metadata": {"managedFields": [1], "name": 7}}),
            json!([1, 2]),
            json!("pod"),
        ] {
            let plain = serde_json::from_value::<Pod>(bad.clone());
            let lean = serde_json::from_value::<Lean<Pod>>(bad.clone());
            assert!(plain.is_err(), "{bad}: the plain type refuses it");
            assert!(lean.is_err(), "{bad}: so does the lean one");
        }
        // A broken managedFields value is skipped, not judged: the plain type would refuse it,
        // the scheduler has no use for it either way.
        let odd = json!({"metadata": {"name": "p", "managedFields": {"not": "a list"}}});
        assert!(serde_json::from_value::<Pod>(odd.clone()).is_err());
        let lean: Lean<Pod> = serde_json::from_value(odd).unwrap();
        assert_eq!(lean.0.metadata.name.as_deref(), Some("p"));
    }

    #[test]
    fn the_lean_type_names_the_same_api_resource() {
        use kube::Resource;
        assert_eq!(
            Lean::<Pod>::url_path(&(), Some("ns")),
            Pod::url_path(&(), Some("ns"))
        );
        assert_eq!(
            Lean::<ResourceClaim>::url_path(&(), None),
            ResourceClaim::url_path(&(), None)
        );
        assert_eq!(Lean::<Pod>::api_version(&()), "v1");
    }

    #[test]
    fn a_kept_claim_has_no_spare_room_and_the_same_content() {
        let text = json!({
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
            "status": {
                "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
                "allocation": {
                    "devices": {"results": [{"request": "r", "driver": "d", "pool": "p", "device": "x"}]},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["n-1"]}]}]}
                }
            }
        })
        .to_string();
        // From text, as a watch decodes it: vectors grow by push and keep room.
        let decoded: ResourceClaim = serde_json::from_str(&text).unwrap();
        // Decoded anew, not cloned (a clone's vectors have no spare room).
        let mut kept: ResourceClaim = serde_json::from_str(&text).unwrap();
        shrink_claim(&mut kept);
        assert_eq!(kept, decoded);
        let requests = kept
            .spec
            .as_ref()
            .and_then(|s| s.devices.as_ref())
            .and_then(|d| d.requests.as_ref());
        let status = kept.status.as_ref().unwrap();
        let allocation = status.allocation.as_ref().unwrap();
        let results = allocation.devices.as_ref().and_then(|d| d.results.as_ref());
        let term = &allocation.node_selector.as_ref().unwrap().node_selector_terms[0];
        let fields = term.match_fields.as_ref().unwrap();
        for (what, len, capacity) in [
            ("requests", requests.map(Vec::len), requests.map(Vec::capacity)),
            ("results", results.map(Vec::len), results.map(Vec::capacity)),
            (
                "reservedFor",
                status.reserved_for.as_ref().map(Vec::len),
                status.reserved_for.as_ref().map(Vec::capacity),
            ),
            ("matchFields", Some(fields.len()), Some(fields.capacity())),
            (
                "values",
                fields[0].values.as_ref().map(Vec::len),
                fields[0].values.as_ref().map(Vec::capacity),
            ),
        ] {
            assert_eq!(len, Some(1), "{what}");
            assert_eq!(capacity, len, "{what}");
        }
        // Decoding alone leaves room: what the shrinking is for.
        let decoded_results = decoded
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_ref());
        assert!(decoded_results.map(Vec::capacity) > Some(1));
    }
}

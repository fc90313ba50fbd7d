//! Recovering from a claim create whose answer was lost: with `generateName` a second POST would
//! create a second claim, so the claim the first attempt may have created is looked for, and
//! adopted only when it is certainly that attempt's (same owner, shape and annotations, untouched).

use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::{Api, api::ListParams};

/// The claim an earlier attempt to create `wanted` left behind, if any: same name (or a name
/// generated from the same `generateName`), the same controlling owner, the annotations and requests
/// of `wanted`, not being deleted, and neither allocated nor reserved (so nobody else took it over).
/// Without a controlling owner a generated claim cannot be told apart from someone else's, and
/// nothing is adopted.
pub(super) async fn find_created(
    api: &Api<ResourceClaim>,
    wanted: &ResourceClaim,
) -> Result<Option<ResourceClaim>, kube::Error> {
    let Some(owner) = controller_uid(wanted) else {
        return Ok(None);
    };
    let mut candidates = match (&wanted.metadata.name, &wanted.metadata.generate_name) {
        (Some(name), _) => api.get_opt(name).await?.into_iter().collect(),
        (None, Some(_)) => api.list(&ListParams::default()).await?.items,
        (None, None) => Vec::new(),
    };
    candidates.retain(|c| is_created_from(c, wanted, owner));
    // Two leftovers would mean the guard failed before; adopt the oldest, deterministically.
    candidates.sort_by(|a, b| {
        let key = |c: &ResourceClaim| {
            (
                c.metadata.creation_timestamp.as_ref().map(|t| t.0),
                c.metadata.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    let found = candidates.into_iter().next();
    if let Some(c) = &found {
        tracing::info!(
            claim = %format!("{}/{}", c.metadata.namespace.as_deref().unwrap_or_default(),
                             c.metadata.name.as_deref().unwrap_or_default()),
            "claim create outcome resolved by reading: adopting the claim it created"
        );
    }
    Ok(found)
}

/// The UID of the object's controlling owner.
fn controller_uid(claim: &ResourceClaim) -> Option<&str> {
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
        .filter(|u| !u.is_empty())
}

/// (request name, device class, count) of each exact request and the names of the others: what
/// identifies the claim's requests whatever defaults the server filled in.
fn request_shape(claim: &ResourceClaim) -> Vec<(String, Option<String>, Option<i64>)> {
    let mut shape: Vec<_> = claim
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.requests.as_ref())
        .into_iter()
        .flatten()
        .map(|r| {
            let exact = r.exactly.as_ref();
            (
                r.name.clone(),
                exact.map(|e| e.device_class_name.clone()),
                exact.and_then(|e| e.count),
            )
        })
        .collect();
    shape.sort();
    shape
}

/// Whether `candidate` is what a create of `wanted` (owned by `owner`) produced.
fn is_created_from(candidate: &ResourceClaim, wanted: &ResourceClaim, owner: &str) -> bool {
    let meta = &candidate.metadata;
    let name = meta.name.as_deref().unwrap_or_default();
    let named = match (&wanted.metadata.name, &wanted.metadata.generate_name) {
        (Some(want), _) => name == want,
        (None, Some(prefix)) => name.starts_with(prefix.as_str()),
        (None, None) => false,
    };
    let annotations_match = wanted
        .metadata
        .annotations
        .iter()
        .flatten()
        .all(|(k, v)| meta.annotations.as_ref().and_then(|a| a.get(k)) == Some(v));
    let untouched = candidate
        .status
        .as_ref()
        .is_none_or(|s| s.allocation.is_none() && s.reserved_for.as_ref().is_none_or(Vec::is_empty));
    named
        && controller_uid(candidate) == Some(owner)
        && annotations_match
        && meta.deletion_timestamp.is_none()
        && request_shape(candidate) == request_shape(wanted)
        && untouched
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_an_untouched_claim_of_the_same_owner_and_shape_is_adopted_after_a_lost_create() {
        let wanted: ResourceClaim = obj(json!({
            "metadata": {"generateName": "p-extended-resources-", "namespace": "default",
                         "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                              "uid": "uid-p", "controller": true}]},
            "spec": {"devices": {"requests": [{"name": "container-0-request-0",
                "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}}]}}}));
        let created = || -> Value {
            let mut c = serde_json::to_value(&wanted).unwrap();
            c["metadata"]["name"] = json!("p-extended-resources-x7k2q");
            c["metadata"].as_object_mut().unwrap().remove("generateName");
            c["metadata"]["uid"] = json!("claim-uid");
            c
        };
        let cases: Vec<(&str, Box<dyn Fn(&mut Value)>, bool)> = vec![
            ("what the lost POST created", Box::new(|_| {}), true),
            (
                "another pod's claim",
                Box::new(|c| c["metadata"]["ownerReferences"][0]["uid"] = json!("uid-q")),
                false,
            ),
            (
                "a name from another prefix",
                Box::new(|c| c["metadata"]["name"] = json!("q-extended-resources-abcde")),
                false,
            ),
            (
                "without the annotation",
                Box::new(|c| c["metadata"]["annotations"] = json!({})),
                false,
            ),
            (
                "other requests",
                Box::new(|c| c["spec"]["devices"]["requests"][0]["exactly"]["count"] = json!(2)),
                false,
            ),
            (
                "being deleted",
                Box::new(|c| c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")),
                false,
            ),
            (
                "already allocated",
                Box::new(|c| c["status"] = json!({"allocation": {"devices": {"results": []}}})),
                false,
            ),
            (
                "reserved for a pod",
                Box::new(|c| {
                    c["status"] = json!({"reservedFor": [{"resource": "pods", "name": "p", "uid": "uid-p"}]})
                }),
                false,
            ),
        ];
        for (case, change, adopt) in cases {
            let mut c = created();
            change(&mut c);
            let candidate: ResourceClaim = obj(c);
            assert_eq!(is_created_from(&candidate, &wanted, "uid-p"), adopt, "{case}");
        }
        // Without a controlling owner nothing can be attributed to this create.
        let mut orphan = wanted.clone();
        orphan.metadata.owner_references = None;
        assert_eq!(controller_uid(&orphan), None);
    }
}

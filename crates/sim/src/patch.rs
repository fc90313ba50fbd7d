//! Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and Kubernetes strategic merge patch.
//!
//! Strategic merge patch needs to know, per list field, whether the list is merged by a key, merged as a
//! set of primitives, or replaced. The API server learns this from Go struct tags; here the fields the
//! scheduler, the controllers and kubectl touch are listed in [`list_strategy`]. Every other list is
//! replaced, as for an atomic list. Directives: `$patch: replace|delete|merge` (maps and list items),
//! `$retainKeys`, `$deleteFromPrimitiveList/<field>`, `$setElementOrder/<field>`.

use serde_json::{Map, Value};

use crate::error::StoreError;

/// A patch body and its type (the request's `Content-Type`).
#[derive(Clone, Debug, PartialEq)]
pub enum Patch {
    /// `application/merge-patch+json`.
    Merge(Value),
    /// `application/json-patch+json`: an array of operations.
    Json(Value),
    /// `application/strategic-merge-patch+json`.
    Strategic(Value),
    /// `application/apply-patch+yaml` (server-side apply, approximated: create if absent, otherwise a
    /// strategic merge of the applied configuration; no managed fields, no field removal, no conflicts).
    Apply(Value),
}

impl Patch {
    /// Parses a request body given its content type.
    pub fn from_body(content_type: &str, body: &[u8]) -> Result<Self, StoreError> {
        let ct = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        let parse_json = |b: &[u8]| -> Result<Value, StoreError> {
            serde_json::from_slice(b)
                .map_err(|e| StoreError::BadRequest(format!("error decoding patch: {e}")))
        };
        match ct.as_str() {
            "application/merge-patch+json" => Ok(Self::Merge(parse_json(body)?)),
            "application/json-patch+json" => Ok(Self::Json(parse_json(body)?)),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic(parse_json(body)?)),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                let v = match serde_json::from_slice::<Value>(body) {
                    Ok(v) => v,
                    Err(_) => serde_yaml::from_slice::<Value>(body)
                        .map_err(|e| StoreError::BadRequest(format!("error decoding YAML: {e}")))?,
                };
                Ok(Self::Apply(v))
            }
            other => Err(StoreError::UnsupportedMediaType(format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, \
                 application/strategic-merge-patch+json (got {other:?})"
            ))),
        }
    }

    /// Applies the patch to `target` in place.
    pub fn apply_to(&self, target: &mut Value) -> Result<(), StoreError> {
        match self {
            Self::Merge(p) => {
                if !p.is_object() {
                    return Err(StoreError::BadRequest(
                        "a merge patch must be a JSON object".into(),
                    ));
                }
                merge_patch(target, p);
                Ok(())
            }
            Self::Json(p) => json_patch(target, p),
            Self::Strategic(p) | Self::Apply(p) => {
                if !p.is_object() {
                    return Err(StoreError::BadRequest(
                        "a strategic merge patch must be a JSON object".into(),
                    ));
                }
                strategic_merge(target, p, &mut Vec::new())
            }
        }
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            let t = crate::util::ensure_object(target);
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn unprocessable(msg: String) -> StoreError {
    StoreError::Unprocessable(msg)
}

fn parse_pointer(p: &str) -> Result<Vec<String>, StoreError> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let rest = p
        .strip_prefix('/')
        .ok_or_else(|| StoreError::BadRequest(format!("JSON pointer {p:?} must start with '/'")))?;
    Ok(rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn pointer_get<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for p in path {
        cur = match cur {
            Value::Object(m) => m.get(p)?,
            Value::Array(a) => a.get(p.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn pointer_parent<'a>(v: &'a mut Value, path: &[String], full: &str) -> Result<&'a mut Value, StoreError> {
    let mut cur = v;
    for p in path {
        cur = match cur {
            Value::Object(m) => m.get_mut(p),
            Value::Array(a) => p.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| unprocessable(format!("doc is missing path: {full:?}")))?;
    }
    Ok(cur)
}

fn pointer_add(doc: &mut Value, path: &[String], value: Value, full: &str) -> Result<(), StoreError> {
    let Some((last, parent_path)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    match pointer_parent(doc, parent_path, full)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(value);
                return Ok(());
            }
            let i = last
                .parse::<usize>()
                .map_err(|_| unprocessable(format!("invalid array index in {full:?}")))?;
            if i > a.len() {
                return Err(unprocessable(format!("array index out of bounds in {full:?}")));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err(unprocessable(format!("doc is missing path: {full:?}"))),
    }
}

fn pointer_remove(doc: &mut Value, path: &[String], full: &str) -> Result<Value, StoreError> {
    let Some((last, parent_path)) = path.split_last() else {
        return Err(unprocessable("cannot remove the whole document".into()));
    };
    match pointer_parent(doc, parent_path, full)? {
        Value::Object(m) => m
            .remove(last)
            .ok_or_else(|| unprocessable(format!("doc is missing key: {full:?}"))),
        Value::Array(a) => {
            let i = last
                .parse::<usize>()
                .map_err(|_| unprocessable(format!("invalid array index in {full:?}")))?;
            if i >= a.len() {
                return Err(unprocessable(format!("array index out of bounds in {full:?}")));
            }
            Ok(a.remove(i))
        }
        _ => Err(unprocessable(format!("doc is missing path: {full:?}"))),
    }
}

/// RFC 6902 JSON patch. The patch is applied to a copy and only stored when every operation succeeds.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), StoreError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| StoreError::BadRequest("a JSON patch must be an array of operations".into()))?;
    let mut doc = target.clone();
    for op in ops {
        let kind = op.get("op").and_then(Value::as_str).unwrap_or_default();
        let path_s = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| StoreError::BadRequest(format!("JSON patch operation {op} has no path")))?;
        let path = parse_pointer(path_s)?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| StoreError::BadRequest(format!("JSON patch operation {op} has no value")))
        };
        let from = || -> Result<(String, Vec<String>), StoreError> {
            let f = op
                .get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| StoreError::BadRequest(format!("JSON patch operation {op} has no from")))?;
            Ok((f.to_string(), parse_pointer(f)?))
        };
        match kind {
            "add" => pointer_add(&mut doc, &path, value()?, path_s)?,
            "remove" => {
                pointer_remove(&mut doc, &path, path_s)?;
            }
            "replace" => {
                if pointer_get(&doc, &path).is_none() {
                    return Err(unprocessable(format!(
                        "replace operation does not apply: doc is missing key: {path_s}"
                    )));
                }
                if path.is_empty() {
                    doc = value()?;
                } else {
                    pointer_remove(&mut doc, &path, path_s)?;
                    pointer_add(&mut doc, &path, value()?, path_s)?;
                }
            }
            "move" => {
                let (fs, fp) = from()?;
                let v = pointer_remove(&mut doc, &fp, &fs)?;
                pointer_add(&mut doc, &path, v, path_s)?;
            }
            "copy" => {
                let (fs, fp) = from()?;
                let v = pointer_get(&doc, &fp)
                    .cloned()
                    .ok_or_else(|| unprocessable(format!("doc is missing from path: {fs:?}")))?;
                pointer_add(&mut doc, &path, v, path_s)?;
            }
            "test" => {
                let want = value()?;
                if pointer_get(&doc, &path) != Some(&want) {
                    return Err(unprocessable(format!(
                        "testing value {path_s} failed: test failed"
                    )));
                }
            }
            other => {
                return Err(StoreError::BadRequest(format!(
                    "unexpected JSON patch operation {other:?}"
                )));
            }
        }
    }
    *target = doc;
    Ok(())
}

/// How a list field is merged by a strategic merge patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListStrategy {
    /// Replace the whole list (atomic lists and lists without a patch strategy).
    Replace,
    /// Merge items that have the same value of this key.
    MergeKey(&'static str),
    /// Merge as a set of primitives (e.g. `finalizers`).
    Set,
}

/// The strategy of the list at `path` (field names from the object root, list indexes omitted).
pub fn list_strategy(path: &[String]) -> ListStrategy {
    use ListStrategy::{MergeKey, Replace, Set};
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    let containers = |s: &str| matches!(s, "containers" | "initContainers" | "ephemeralContainers");
    match p.as_slice() {
        ["metadata", "ownerReferences"] => MergeKey("uid"),
        ["metadata", "finalizers"] => Set,
        [.., "status", "conditions"] => MergeKey("type"),
        ["spec", c] if containers(c) => MergeKey("name"),
        ["spec", c, "ports"] if containers(c) => MergeKey("containerPort"),
        ["spec", c, "env"] if containers(c) => MergeKey("name"),
        ["spec", c, "volumeMounts"] if containers(c) => MergeKey("mountPath"),
        ["spec", c, "volumeDevices"] if containers(c) => MergeKey("devicePath"),
        ["spec", "volumes"] | ["spec", "imagePullSecrets"] => MergeKey("name"),
        ["spec", "hostAliases"] => MergeKey("ip"),
        ["spec", "resourceClaims"] | ["spec", "schedulingGates"] => MergeKey("name"),
        ["spec", "topologySpreadConstraints"] => MergeKey("topologyKey"),
        ["spec", "podCIDRs"] => Set,
        ["status", "podIPs"] | ["status", "hostIPs"] => MergeKey("ip"),
        ["status", "resourceClaimStatuses"] => MergeKey("name"),
        ["status", "nodeAllocatableResourceClaimStatuses"] => MergeKey("resourceClaimName"),
        ["status", "addresses"] => MergeKey("type"),
        ["status", "reservedFor"] => MergeKey("uid"),
        _ => Replace,
    }
}

fn directive(v: &Value) -> Option<&str> {
    v.get("$patch").and_then(Value::as_str)
}

fn strip_directives(v: &Value) -> Result<Value, StoreError> {
    match v {
        Value::Object(_) => {
            let mut out = Value::Object(Map::new());
            strategic_merge(&mut out, v, &mut Vec::new())?;
            Ok(out)
        }
        other => Ok(other.clone()),
    }
}

/// Applies a strategic merge patch to `target`. `path` is the field path of `target` from the root.
pub fn strategic_merge(target: &mut Value, patch: &Value, path: &mut Vec<String>) -> Result<(), StoreError> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match directive(patch) {
        Some("replace") => {
            let mut clean = p.clone();
            clean.remove("$patch");
            *target = Value::Object(Map::new());
            return strategic_merge(target, &Value::Object(clean), path);
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => return Err(StoreError::BadRequest(format!("unknown patch type: {other}"))),
    }
    let t = crate::util::ensure_object(target);
    let mut orders: Vec<(String, Vec<Value>)> = Vec::new();
    for (k, v) in p {
        if k == "$patch" {
            continue;
        }
        if k == "$retainKeys" {
            if let Some(keep) = v.as_array() {
                let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
                let patch_keys: Vec<&String> = p.keys().collect();
                t.retain(|key, _| keep.contains(&key.as_str()) || patch_keys.contains(&key));
            }
            continue;
        }
        if let Some(field) = k.strip_prefix("$setElementOrder/") {
            if let Some(order) = v.as_array() {
                orders.push((field.to_string(), order.clone()));
            }
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(remove)) = (t.get_mut(field), v.as_array()) {
                list.retain(|x| !remove.contains(x));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        path.push(k.clone());
        let res = match v {
            Value::Object(_) => {
                if directive(v) == Some("delete") {
                    t.remove(k);
                    Ok(())
                } else {
                    let slot = t.entry(k.clone()).or_insert_with(|| Value::Object(Map::new()));
                    strategic_merge(slot, v, path)
                }
            }
            Value::Array(items) => {
                let strategy = list_strategy(path);
                let slot = t.entry(k.clone()).or_insert_with(|| Value::Array(Vec::new()));
                merge_list(slot, items, strategy, path)
            }
            other => {
                t.insert(k.clone(), other.clone());
                Ok(())
            }
        };
        path.pop();
        res?;
    }
    for (field, order) in orders {
        path.push(field.clone());
        let strategy = list_strategy(path);
        path.pop();
        if let Some(Value::Array(list)) = t.get_mut(&field) {
            apply_order(list, &order, strategy);
        }
    }
    Ok(())
}

fn key_of<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key)
}

fn merge_list(
    target: &mut Value,
    items: &[Value],
    strategy: ListStrategy,
    path: &mut Vec<String>,
) -> Result<(), StoreError> {
    let replace_all = items.iter().any(|i| {
        i.is_object() && directive(i) == Some("replace") && i.as_object().is_some_and(|m| m.len() == 1)
    });
    if strategy == ListStrategy::Replace || replace_all || !target.is_array() {
        let kept: Result<Vec<Value>, StoreError> = items
            .iter()
            .filter(|i| !(i.is_object() && directive(i) == Some("replace")))
            .map(strip_directives)
            .collect();
        *target = Value::Array(kept?);
        return Ok(());
    }
    let Value::Array(list) = target else { return Ok(()) };
    match strategy {
        ListStrategy::Set => {
            for i in items {
                if !list.contains(i) {
                    list.push(i.clone());
                }
            }
        }
        ListStrategy::MergeKey(key) => {
            for item in items {
                let Some(k) = key_of(item, key) else {
                    // Items without the merge key: primitives or malformed entries are appended.
                    if directive(item) != Some("delete") {
                        list.push(strip_directives(item)?);
                    }
                    continue;
                };
                let pos = list.iter().position(|x| key_of(x, key) == Some(k));
                if directive(item) == Some("delete") {
                    list.retain(|x| key_of(x, key) != Some(k));
                    continue;
                }
                match pos {
                    Some(i) => strategic_merge(&mut list[i], item, path)?,
                    None => list.push(strip_directives(item)?),
                }
            }
        }
        ListStrategy::Replace => {}
    }
    Ok(())
}

fn apply_order(list: &mut [Value], order: &[Value], strategy: ListStrategy) {
    let rank = |v: &Value| -> usize {
        let found = match strategy {
            ListStrategy::MergeKey(key) => order
                .iter()
                .position(|o| o.get(key).is_some() && o.get(key) == v.get(key)),
            _ => order.iter().position(|o| o == v),
        };
        found.unwrap_or(usize::MAX)
    };
    list.sort_by_key(rank);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(mut target: Value, patch: Value) -> Value {
        strategic_merge(&mut target, &patch, &mut Vec::new()).unwrap();
        target
    }

    #[test]
    fn merge_patch_rfc7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
        let mut t = json!({"a": [1, 2]});
        merge_patch(&mut t, &json!({"a": [3]}));
        assert_eq!(t, json!({"a": [3]}));
    }

    #[test]
    fn json_patch_ops() {
        let mut t = json!({"metadata": {"labels": {"a": "1"}}, "list": [1, 2, 3]});
        json_patch(
            &mut t,
            &json!([
                {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
                {"op": "remove", "path": "/metadata/labels/a"},
                {"op": "replace", "path": "/list/0", "value": 9},
                {"op": "add", "path": "/list/-", "value": 4},
                {"op": "test", "path": "/list/1", "value": 2},
                {"op": "copy", "from": "/list/0", "path": "/copied"},
                {"op": "move", "from": "/copied", "path": "/moved"},
            ]),
        )
        .unwrap();
        assert_eq!(
            t,
            json!({"metadata": {"labels": {"b/c": "2"}}, "list": [9, 2, 3, 4], "moved": 9})
        );
        let before = t.clone();
        let err = json_patch(
            &mut t,
            &json!([{"op": "remove", "path": "/list/0"}, {"op": "test", "path": "/moved", "value": 1}]),
        )
        .unwrap_err();
        assert_eq!(err.code(), 422);
        assert_eq!(t, before, "a failed patch leaves the target untouched");
    }

    #[test]
    fn strategic_conditions_merge_by_type() {
        let t = json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "False"}, {"type": "Ready", "status": "False"}]}});
        let out = smp(
            t,
            json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "X", "status": "True"}]}}),
        );
        assert_eq!(
            out["status"]["conditions"],
            json!([
            {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}, {"type": "X", "status": "True"}])
        );
    }

    #[test]
    fn strategic_containers_and_delete_directive() {
        let t = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}], "tolerations": [{"key": "x"}]}});
        let out = smp(
            t,
            json!({"spec": {
            "containers": [{"name": "a", "image": "9"}, {"name": "b", "$patch": "delete"}],
            "tolerations": [{"key": "y"}]}}),
        );
        assert_eq!(out["spec"]["containers"], json!([{"name": "a", "image": "9"}]));
        assert_eq!(
            out["spec"]["tolerations"],
            json!([{"key": "y"}]),
            "lists without strategy are replaced"
        );
    }

    #[test]
    fn strategic_sets_and_primitive_deletes() {
        let t = json!({"metadata": {"finalizers": ["a", "b"]}});
        let out = smp(t, json!({"metadata": {"finalizers": ["c", "a"]}}));
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "c"]));
        let out = smp(
            out,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "c"]));
    }

    #[test]
    fn strategic_replace_directives_and_order() {
        let t = json!({"spec": {"selector": {"a": "1", "b": "2"}}, "status": {"reservedFor": [{"uid": "1"}, {"uid": "2"}]}});
        let out = smp(
            t.clone(),
            json!({"spec": {"selector": {"$patch": "replace", "c": "3"}}}),
        );
        assert_eq!(out["spec"]["selector"], json!({"c": "3"}));
        let out = smp(
            t.clone(),
            json!({"status": {"reservedFor": [{"$patch": "replace"}, {"uid": "3"}]}}),
        );
        assert_eq!(out["status"]["reservedFor"], json!([{"uid": "3"}]));
        let out = smp(
            t.clone(),
            json!({"status": {"reservedFor": [{"uid": "0"}], "$setElementOrder/reservedFor": [{"uid": "0"}, {"uid": "1"}, {"uid": "2"}]}}),
        );
        assert_eq!(
            out["status"]["reservedFor"],
            json!([{"uid": "0"}, {"uid": "1"}, {"uid": "2"}])
        );
        let out = smp(t, json!({"spec": {"selector": {"$patch": "delete"}}}));
        assert!(out["spec"].get("selector").is_none());
    }

    #[test]
    fn strategic_claim_statuses_and_null() {
        let t = json!({"status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-abc"}],
                                  "nodeAllocatableResourceClaimStatuses": [{"resourceClaimName": "c1", "containers": ["a"]}]},
                       "metadata": {"labels": {"x": "1"}}});
        let out = smp(
            t,
            json!({"status": {
            "resourceClaimStatuses": [{"name": "nic", "resourceClaimName": "p-nic-xyz"}],
            "nodeAllocatableResourceClaimStatuses": [{"resourceClaimName": "c1", "containers": ["b"]}]},
            "metadata": {"labels": {"x": null}}}),
        );
        assert_eq!(
            out["status"]["resourceClaimStatuses"].as_array().unwrap().len(),
            2
        );
        assert_eq!(
            out["status"]["nodeAllocatableResourceClaimStatuses"],
            json!([{"resourceClaimName": "c1", "containers": ["b"]}])
        );
        assert_eq!(out["metadata"]["labels"], json!({}));
    }

    #[test]
    fn patch_from_body() {
        assert!(matches!(
            Patch::from_body("application/merge-patch+json", b"{}").unwrap(),
            Patch::Merge(_)
        ));
        assert!(matches!(
            Patch::from_body("application/apply-patch+yaml", b"a: 1\n").unwrap(),
            Patch::Apply(_)
        ));
        assert_eq!(Patch::from_body("text/plain", b"{}").unwrap_err().code(), 415);
        assert_eq!(
            Patch::from_body("application/json-patch+json", b"{")
                .unwrap_err()
                .code(),
            400
        );
    }
}

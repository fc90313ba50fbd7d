//! Request bodies in `application/vnd.kubernetes.protobuf`, turned into the JSON the store keeps.
//!
//! kubectl's generators (`create namespace`, `create configmap`, `create secret`,
//! `create serviceaccount`) and `drain` (an `Eviction`, and `DeleteOptions` on DELETE) send their
//! bodies as protobuf: the 4-byte magic `k8s\0` followed by a `runtime.Unknown` message whose
//! `typeMeta` names the kind and whose `raw` field holds the object's own protobuf encoding.
//!
//! Rather than link generated types for the whole API, this module reads the wire format directly
//! and translates the fields of the kinds above (by their field numbers in `generated.proto`) into
//! JSON. Fields it does not know are skipped; a kind it does not know is a 415 naming the kind, so
//! the client can fall back to `-f` with JSON or YAML. Answers are always JSON (every client that
//! sends protobuf also accepts JSON).

use serde_json::{Map, Value, json};

use crate::error::StoreError;

/// The prefix of every protobuf-encoded Kubernetes object.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// One decoded field: number and value.
#[derive(Debug)]
enum Field<'a> {
    Varint(u32, u64),
    Bytes(u32, &'a [u8]),
}

fn bad(message: impl Into<String>) -> StoreError {
    StoreError::BadRequest(format!("error decoding protobuf body: {}", message.into()))
}

fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, StoreError> {
    let mut out = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos).ok_or_else(|| bad("truncated varint"))?;
        *pos += 1;
        out |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(out);
        }
    }
    Err(bad("varint too long"))
}

/// Splits a message into its fields (fixed 32/64-bit fields, unused by these kinds, are skipped).
fn fields(buf: &[u8]) -> Result<Vec<Field<'_>>, StoreError> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let number = u32::try_from(key >> 3).map_err(|_| bad("field number out of range"))?;
        match key & 7 {
            0 => out.push(Field::Varint(number, varint(buf, &mut pos)?)),
            1 => pos += 8,
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).map_err(|_| bad("length out of range"))?;
                let end = pos
                    .checked_add(len)
                    .filter(|e| *e <= buf.len())
                    .ok_or_else(|| bad("truncated field"))?;
                out.push(Field::Bytes(number, &buf[pos..end]));
                pos = end;
            }
            5 => pos += 4,
            w => return Err(bad(format!("unsupported wire type {w}"))),
        }
        if pos > buf.len() {
            return Err(bad("truncated field"));
        }
    }
    Ok(out)
}

fn text(b: &[u8]) -> Result<String, StoreError> {
    String::from_utf8(b.to_vec()).map_err(|_| bad("string field is not UTF-8"))
}

/// A `map<string, string>` entry (key 1, value 2), or with `bytes` values base64-encoded as JSON does.
fn map_entry(b: &[u8], base64_value: bool) -> Result<(String, Value), StoreError> {
    let mut key = String::new();
    let mut value = Value::String(String::new());
    for f in fields(b)? {
        match f {
            Field::Bytes(1, k) => key = text(k)?,
            Field::Bytes(2, v) if base64_value => value = Value::String(base64(v)),
            Field::Bytes(2, v) => value = Value::String(text(v)?),
            _ => {}
        }
    }
    Ok((key, value))
}

fn insert_entry(
    out: &mut Map<String, Value>,
    field: &str,
    b: &[u8],
    base64_value: bool,
) -> Result<(), StoreError> {
    let (k, v) = map_entry(b, base64_value)?;
    if let Value::Object(m) = out.entry(field).or_insert_with(|| json!({})) {
        m.insert(k, v);
    }
    Ok(())
}

fn push_string(out: &mut Map<String, Value>, field: &str, b: &[u8]) -> Result<(), StoreError> {
    let s = text(b)?;
    if let Value::Array(a) = out.entry(field).or_insert_with(|| json!([])) {
        a.push(Value::String(s));
    }
    Ok(())
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `ObjectMeta`: the fields a client may set on create.
fn object_meta(b: &[u8]) -> Result<Value, StoreError> {
    let mut m = Map::new();
    for f in fields(b)? {
        match f {
            Field::Bytes(1, v) => {
                m.insert("name".into(), Value::String(text(v)?));
            }
            Field::Bytes(2, v) => {
                m.insert("generateName".into(), Value::String(text(v)?));
            }
            Field::Bytes(3, v) => {
                m.insert("namespace".into(), Value::String(text(v)?));
            }
            Field::Bytes(5, v) => {
                m.insert("uid".into(), Value::String(text(v)?));
            }
            Field::Bytes(6, v) => {
                m.insert("resourceVersion".into(), Value::String(text(v)?));
            }
            Field::Bytes(11, v) => insert_entry(&mut m, "labels", v, false)?,
            Field::Bytes(12, v) => insert_entry(&mut m, "annotations", v, false)?,
            Field::Bytes(14, v) => push_string(&mut m, "finalizers", v)?,
            _ => {}
        }
    }
    Ok(Value::Object(m))
}

fn as_bool(v: u64) -> Value {
    Value::Bool(v != 0)
}

/// `DeleteOptions` (also embedded in `Eviction`).
fn delete_options(b: &[u8]) -> Result<Value, StoreError> {
    let mut m = Map::new();
    for f in fields(b)? {
        match f {
            Field::Varint(1, v) => {
                m.insert("gracePeriodSeconds".into(), json!(v as i64));
            }
            Field::Bytes(2, p) => {
                let mut pre = Map::new();
                for f in fields(p)? {
                    match f {
                        Field::Bytes(1, v) => {
                            pre.insert("uid".into(), Value::String(text(v)?));
                        }
                        Field::Bytes(2, v) => {
                            pre.insert("resourceVersion".into(), Value::String(text(v)?));
                        }
                        _ => {}
                    }
                }
                m.insert("preconditions".into(), Value::Object(pre));
            }
            Field::Varint(3, v) => {
                m.insert("orphanDependents".into(), as_bool(v));
            }
            Field::Bytes(4, v) => {
                m.insert("propagationPolicy".into(), Value::String(text(v)?));
            }
            Field::Bytes(5, v) => push_string(&mut m, "dryRun", v)?,
            _ => {}
        }
    }
    Ok(Value::Object(m))
}

/// Translates one object's protobuf encoding (the `raw` of the envelope) to JSON.
fn object(api_version: &str, kind: &str, raw: &[u8]) -> Result<Value, StoreError> {
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    out.insert("kind".into(), Value::String(kind.into()));
    if kind == "DeleteOptions" {
        if let Value::Object(d) = delete_options(raw)? {
            out.extend(d);
        }
        return Ok(Value::Object(out));
    }
    for f in fields(raw)? {
        match (kind, f) {
            (_, Field::Bytes(1, b)) => {
                out.insert("metadata".into(), object_meta(b)?);
            }
            ("ConfigMap", Field::Bytes(2, b)) => insert_entry(&mut out, "data", b, false)?,
            ("ConfigMap", Field::Bytes(3, b)) => insert_entry(&mut out, "binaryData", b, true)?,
            ("ConfigMap", Field::Varint(4, v)) | ("Secret", Field::Varint(5, v)) => {
                out.insert("immutable".into(), as_bool(v));
            }
            ("Secret", Field::Bytes(2, b)) => insert_entry(&mut out, "data", b, true)?,
            ("Secret", Field::Bytes(3, b)) => {
                out.insert("type".into(), Value::String(text(b)?));
            }
            ("Secret", Field::Bytes(4, b)) => insert_entry(&mut out, "stringData", b, false)?,
            ("ServiceAccount", Field::Varint(4, v)) => {
                out.insert("automountServiceAccountToken".into(), as_bool(v));
            }
            ("Eviction", Field::Bytes(2, b)) => {
                out.insert("deleteOptions".into(), delete_options(b)?);
            }
            _ => {}
        }
    }
    Ok(Value::Object(out))
}

/// The kinds whose protobuf bodies this server reads.
pub const SUPPORTED_KINDS: &[&str] = &[
    "Namespace",
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "Eviction",
    "DeleteOptions",
];

/// Decodes a `k8s\0` + `runtime.Unknown` body into the JSON object it carries.
pub fn decode(body: &[u8]) -> Result<Value, StoreError> {
    let rest = body
        .strip_prefix(MAGIC.as_slice())
        .ok_or_else(|| bad("missing the k8s protobuf prefix"))?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for f in fields(rest)? {
        match f {
            Field::Bytes(1, tm) => {
                for f in fields(tm)? {
                    match f {
                        Field::Bytes(1, v) => api_version = text(v)?,
                        Field::Bytes(2, v) => kind = text(v)?,
                        _ => {}
                    }
                }
            }
            Field::Bytes(2, r) => raw = r,
            Field::Bytes(3, enc) if !enc.is_empty() => {
                return Err(StoreError::UnsupportedMediaType(format!(
                    "protobuf content encoding {:?} is not supported",
                    String::from_utf8_lossy(enc)
                )));
            }
            _ => {}
        }
    }
    if !SUPPORTED_KINDS.contains(&kind.as_str()) {
        return Err(StoreError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json, application/yaml, and application/vnd.kubernetes.protobuf for {} \
             (got a protobuf {kind:?})",
            SUPPORTED_KINDS.join(", ")
        )));
    }
    object(&api_version, &kind, raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32, wire: u8) -> Vec<u8> {
        enc_varint(u64::from(n) << 3 | u64::from(wire))
    }

    fn enc_varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes(n: u32, b: &[u8]) -> Vec<u8> {
        let mut out = key(n, 2);
        out.extend(enc_varint(b.len() as u64));
        out.extend_from_slice(b);
        out
    }

    fn int(n: u32, v: u64) -> Vec<u8> {
        let mut out = key(n, 0);
        out.extend(enc_varint(v));
        out
    }

    fn entry(k: &str, v: &[u8]) -> Vec<u8> {
        [bytes(1, k.as_bytes()), bytes(2, v)].concat()
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let tm = [bytes(1, api_version.as_bytes()), bytes(2, kind.as_bytes())].concat();
        [MAGIC.to_vec(), bytes(1, &tm), bytes(2, raw)].concat()
    }

    #[test]
    fn configmap_with_labels_data_and_binary_data() {
        let meta = [
            bytes(1, b"cm"),
            bytes(3, b"team"),
            bytes(11, &entry("app", b"web")),
            bytes(11, &entry("tier", b"db")),
        ]
        .concat();
        let raw = [
            bytes(1, &meta),
            bytes(2, &entry("k", b"v")),
            bytes(3, &entry("bin", b"\x00\x01\x02\x03")),
            int(4, 1),
        ]
        .concat();
        let v = decode(&envelope("v1", "ConfigMap", &raw)).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "cm", "namespace": "team", "labels": {"app": "web", "tier": "db"}},
                   "data": {"k": "v"}, "binaryData": {"bin": "AAECAw=="}, "immutable": true})
        );
    }

    #[test]
    fn eviction_and_delete_options() {
        let opts = [
            int(1, 0),
            bytes(2, &[bytes(1, b"u-1"), bytes(2, b"42")].concat()),
            bytes(4, b"Foreground"),
            bytes(5, b"All"),
        ]
        .concat();
        let d = decode(&envelope("v1", "DeleteOptions", &opts)).unwrap();
        assert_eq!(
            d,
            json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                   "preconditions": {"uid": "u-1", "resourceVersion": "42"},
                   "propagationPolicy": "Foreground", "dryRun": ["All"]})
        );
        let raw = [
            bytes(1, &[bytes(1, b"p"), bytes(3, b"default")].concat()),
            bytes(2, &int(1, 30)),
        ]
        .concat();
        let e = decode(&envelope("policy/v1", "Eviction", &raw)).unwrap();
        assert_eq!(e["metadata"], json!({"name": "p", "namespace": "default"}));
        assert_eq!(e["deleteOptions"]["gracePeriodSeconds"], 30);
    }

    #[test]
    fn secret_and_namespace() {
        let raw = [
            bytes(1, &bytes(1, b"s")),
            bytes(2, &entry("pw", b"hi")),
            bytes(3, b"Opaque"),
        ]
        .concat();
        let s = decode(&envelope("v1", "Secret", &raw)).unwrap();
        assert_eq!(s["data"], json!({"pw": "aGk="}));
        assert_eq!(s["type"], "Opaque");
        let ns = decode(&envelope("v1", "Namespace", &bytes(1, &bytes(1, b"x")))).unwrap();
        assert_eq!(
            ns,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}})
        );
    }

    #[test]
    fn bad_bodies_are_errors_not_panics() {
        assert_eq!(decode(b"{}").unwrap_err().code(), 400);
        assert_eq!(decode(&envelope("v1", "Pod", &[])).unwrap_err().code(), 415);
        let mut truncated = envelope("v1", "Namespace", &bytes(1, &bytes(1, b"xyz")));
        truncated.truncate(truncated.len() - 2);
        assert_eq!(decode(&truncated).unwrap_err().code(), 400);
        assert_eq!(decode(&[b'k', b'8', b's', 0, 0x80]).unwrap_err().code(), 400);
        assert_eq!(
            decode(&[b'k', b'8', b's', 0, 0x0a, 0x7f]).unwrap_err().code(),
            400
        );
    }
}

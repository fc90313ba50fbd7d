//! Request bodies in `application/vnd.kubernetes.protobuf`, turned into the JSON the store keeps.
//!
//! kubectl's generators (`create namespace`, `create configmap`, `create secret`,
//! `create serviceaccount`) and `drain` (an `Eviction`, and `DeleteOptions` on DELETE) send their
//! bodies as protobuf, and so do client-go programs that ask for it (controllers creating Pods).
//! A body is the 4-byte magic `k8s\0` followed by a `runtime.Unknown` message whose `typeMeta`
//! names the kind and whose `raw` field holds the object's own protobuf encoding.
//!
//! Rather than link generated types for the whole API, the decoder walks the wire format with a
//! table of the messages involved, `protobuf.fields` (field number, JSON name, type, and two facts
//! the wire does not carry: whether the field is inlined into its parent in JSON, and whether JSON
//! omits its zero value — protobuf always encodes non-pointer scalars, JSON drops them when they are
//! `omitempty`). The table is generated from upstream's `generated.proto` and Go struct tags by
//! `crates/sim/tools/protobuf_fields.py`, for Pod, Namespace, ConfigMap, Secret, ServiceAccount,
//! Eviction and DeleteOptions and every message they contain. Fields the table does not know are
//! skipped, as upstream's decoder skips them; a kind it does not know is a 415 naming the kinds
//! read, so the client can fall back to JSON. Answers are always JSON (every client that sends
//! protobuf also accepts JSON).

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{Map, Value, json};

use crate::error::StoreError;

/// The prefix of every protobuf-encoded Kubernetes object.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// One decoded field: number and value.
#[derive(Debug)]
enum Field<'a> {
    Varint(u32, u64),
    Fixed64(u32, u64),
    Fixed32(u32, u32),
    Bytes(u32, &'a [u8]),
}

impl Field<'_> {
    fn number(&self) -> u32 {
        match self {
            Self::Varint(n, _) | Self::Fixed64(n, _) | Self::Fixed32(n, _) | Self::Bytes(n, _) => *n,
        }
    }
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

fn take<'a>(buf: &'a [u8], pos: &mut usize, len: usize) -> Result<&'a [u8], StoreError> {
    let end = pos
        .checked_add(len)
        .filter(|e| *e <= buf.len())
        .ok_or_else(|| bad("truncated field"))?;
    let out = &buf[*pos..end];
    *pos = end;
    Ok(out)
}

/// Splits a message into its fields.
fn fields(buf: &[u8]) -> Result<Vec<Field<'_>>, StoreError> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let number = u32::try_from(key >> 3).map_err(|_| bad("field number out of range"))?;
        match key & 7 {
            0 => out.push(Field::Varint(number, varint(buf, &mut pos)?)),
            1 => {
                let b = take(buf, &mut pos, 8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                out.push(Field::Fixed64(number, u64::from_le_bytes(a)));
            }
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).map_err(|_| bad("length out of range"))?;
                out.push(Field::Bytes(number, take(buf, &mut pos, len)?));
            }
            5 => {
                let b = take(buf, &mut pos, 4)?;
                let mut a = [0u8; 4];
                a.copy_from_slice(b);
                out.push(Field::Fixed32(number, u32::from_le_bytes(a)));
            }
            w => return Err(bad(format!("unsupported wire type {w}"))),
        }
    }
    Ok(out)
}

fn text(b: &[u8]) -> Result<String, StoreError> {
    String::from_utf8(b.to_vec()).map_err(|_| bad("string field is not UTF-8"))
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

// ----- the message table -----

/// The type of a field (of a repeated field: of one item).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Type {
    String,
    Bytes,
    Bool,
    Int32,
    Int64,
    Double,
    Float,
    /// A message of the table, or one of the messages with a JSON form of their own (`Time`,
    /// `Quantity`, `IntOrString`, ...).
    Message(&'static str),
    /// `map<string, T>`.
    Map(Box<Type>),
}

/// One field of a message.
#[derive(Debug)]
struct FieldDef {
    number: u32,
    json: &'static str,
    ty: Type,
    repeated: bool,
    /// JSON keeps the zero value (a pointer, or a field without `omitempty`).
    keep_zero: bool,
    /// JSON has the message's fields in the parent object (an embedded Go struct).
    inline: bool,
}

const TABLE: &str = include_str!("protobuf.fields");

fn parse_type(t: &'static str) -> Type {
    match t {
        "string" => Type::String,
        "bytes" => Type::Bytes,
        "bool" => Type::Bool,
        "int32" => Type::Int32,
        "int64" => Type::Int64,
        "double" => Type::Double,
        "float" => Type::Float,
        _ => match t.strip_prefix("map:") {
            Some(v) => Type::Map(Box::new(parse_type(v))),
            None => Type::Message(t),
        },
    }
}

/// The messages of `protobuf.fields`, by name (`core.v1.PodSpec`).
fn table() -> &'static HashMap<&'static str, Vec<FieldDef>> {
    static TABLE_MAP: OnceLock<HashMap<&'static str, Vec<FieldDef>>> = OnceLock::new();
    TABLE_MAP.get_or_init(|| {
        let mut out: HashMap<&'static str, Vec<FieldDef>> = HashMap::new();
        for line in TABLE.lines().filter(|l| !l.starts_with('#')) {
            let [message, number, json, ty, flags] = line.split(' ').collect::<Vec<_>>()[..] else {
                continue;
            };
            let Ok(number) = number.parse() else { continue };
            out.entry(message).or_default().push(FieldDef {
                number,
                json: if json == "-" { "" } else { json },
                ty: parse_type(ty),
                repeated: flags.contains('r'),
                keep_zero: flags.contains('z'),
                inline: flags.contains('i'),
            });
        }
        out
    })
}

// ----- decoding -----

/// Seconds and nanoseconds since the epoch as RFC 3339 (`micro`: with microseconds, as `MicroTime`).
fn time(b: &[u8], micro: bool) -> Result<Value, StoreError> {
    let (mut secs, mut nanos) = (0i64, 0i32);
    for f in fields(b)? {
        match f {
            Field::Varint(1, v) => secs = v as i64,
            Field::Varint(2, v) => nanos = v as i64 as i32,
            _ => {}
        }
    }
    if secs == 0 && nanos == 0 {
        return Ok(Value::Null);
    }
    let ts =
        k8s_openapi::jiff::Timestamp::new(secs, nanos).map_err(|e| bad(format!("time out of range: {e}")))?;
    Ok(Value::String(if micro {
        ts.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
    } else {
        crate::util::format_time(ts)
    }))
}

/// A Go duration (nanoseconds) in Go's notation (`1h2m3.5s`).
fn duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let (h, m) = (n / 3_600_000_000_000, n / 60_000_000_000 % 60);
    let (s, frac) = (n / 1_000_000_000 % 60, n % 1_000_000_000);
    let mut out = sign.to_string();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    let frac = format!("{frac:09}");
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        out.push_str(&format!("{s}s"));
    } else {
        out.push_str(&format!("{s}.{frac}s"));
    }
    out
}

/// The first bytes field `n` of a message.
fn bytes_field(b: &[u8], n: u32) -> Result<&[u8], StoreError> {
    Ok(fields(b)?
        .into_iter()
        .find_map(|f| match f {
            Field::Bytes(m, v) if m == n => Some(v),
            _ => None,
        })
        .unwrap_or_default())
}

/// A message field's JSON; the messages with a JSON form of their own are handled here.
fn message_value(name: &'static str, b: &[u8], depth: usize) -> Result<Value, StoreError> {
    match name {
        "resource.Quantity" => Ok(Value::String(text(bytes_field(b, 1)?)?)),
        "meta.v1.Time" => time(b, false),
        "meta.v1.MicroTime" => time(b, true),
        "meta.v1.Duration" => {
            let n = fields(b)?.into_iter().find_map(|f| match f {
                Field::Varint(1, v) => Some(v as i64),
                _ => None,
            });
            Ok(Value::String(duration(n.unwrap_or(0))))
        }
        "intstr.IntOrString" => {
            let (mut kind, mut int, mut string) = (0, 0i64, String::new());
            for f in fields(b)? {
                match f {
                    Field::Varint(1, v) => kind = v,
                    Field::Varint(2, v) => int = i64::from(v as i64 as i32),
                    Field::Bytes(3, v) => string = text(v)?,
                    _ => {}
                }
            }
            Ok(if kind == 1 {
                Value::String(string)
            } else {
                json!(int)
            })
        }
        "meta.v1.FieldsV1" | "runtime.RawExtension" => {
            let raw = bytes_field(b, 1)?;
            if raw.is_empty() {
                return Ok(Value::Null);
            }
            serde_json::from_slice(raw).map_err(|e| bad(format!("embedded JSON in {name}: {e}")))
        }
        _ => message(name, b, depth + 1).map(Value::Object),
    }
}

/// The JSON of one value of type `ty`; `Ok(None)` for a zero value the JSON form omits.
fn value(ty: &Type, f: &Field<'_>, depth: usize) -> Result<Value, StoreError> {
    let wrong = || bad(format!("field {} has the wrong wire type for {ty:?}", f.number()));
    Ok(match (ty, f) {
        (Type::String, Field::Bytes(_, b)) => Value::String(text(b)?),
        (Type::Bytes, Field::Bytes(_, b)) => Value::String(base64(b)),
        (Type::Bool, Field::Varint(_, v)) => Value::Bool(*v != 0),
        (Type::Int32, Field::Varint(_, v)) => json!(i64::from(*v as i64 as i32)),
        (Type::Int64, Field::Varint(_, v)) => json!(*v as i64),
        (Type::Double, Field::Fixed64(_, v)) => json!(f64::from_bits(*v)),
        (Type::Float, Field::Fixed32(_, v)) => json!(f32::from_bits(*v)),
        (Type::Message(name), Field::Bytes(_, b)) => message_value(name, b, depth)?,
        _ => return Err(wrong()),
    })
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

/// Nesting deeper than any Kubernetes object: a body built to exhaust the stack.
const MAX_DEPTH: usize = 64;

/// Decodes a message of the table into its JSON object.
fn message(name: &'static str, b: &[u8], depth: usize) -> Result<Map<String, Value>, StoreError> {
    if depth > MAX_DEPTH {
        return Err(bad("message nested too deeply"));
    }
    let defs = table()
        .get(name)
        .ok_or_else(|| bad(format!("no field table for message {name}")))?;
    let mut out = Map::new();
    for f in fields(b)? {
        let Some(def) = defs.iter().find(|d| d.number == f.number()) else {
            continue;
        };
        if let Type::Map(item) = &def.ty {
            let Field::Bytes(_, entry) = f else {
                return Err(bad(format!("map field {} is not length-delimited", def.json)));
            };
            let (mut k, mut v) = (String::new(), None);
            for e in fields(entry)? {
                match e {
                    Field::Bytes(1, key) => k = text(key)?,
                    ref other if other.number() == 2 => v = Some(value(item, other, depth)?),
                    _ => {}
                }
            }
            let v = match (v, item.as_ref()) {
                (Some(v), _) => v,
                (None, Type::String | Type::Bytes) => Value::String(String::new()),
                (None, Type::Message(n)) => message_value(n, &[], depth)?,
                (None, _) => json!(0),
            };
            if let Value::Object(m) = out.entry(def.json).or_insert_with(|| json!({})) {
                m.insert(k, v);
            }
            continue;
        }
        // Repeated scalars may come packed (one length-delimited run of values).
        if def.repeated
            && let (Type::Bool | Type::Int32 | Type::Int64, Field::Bytes(_, run)) = (&def.ty, &f)
        {
            let mut pos = 0;
            while pos < run.len() {
                let v = value(&def.ty, &Field::Varint(def.number, varint(run, &mut pos)?), depth)?;
                push(&mut out, def.json, v);
            }
            continue;
        }
        let v = value(&def.ty, &f, depth)?;
        if def.inline {
            if let Value::Object(m) = v {
                out.extend(m);
            }
        } else if def.repeated {
            push(&mut out, def.json, v);
        } else if (def.keep_zero && !v.is_null()) || !is_zero(&v) {
            out.insert(def.json.to_string(), v);
        }
    }
    Ok(out)
}

fn push(out: &mut Map<String, Value>, field: &str, v: Value) {
    if let Value::Array(a) = out.entry(field).or_insert_with(|| json!([])) {
        a.push(v);
    }
}

/// The kinds whose protobuf bodies this server reads, and their messages in the table.
const KINDS: &[(&str, &str)] = &[
    ("Pod", "core.v1.Pod"),
    ("Namespace", "core.v1.Namespace"),
    ("ConfigMap", "core.v1.ConfigMap"),
    ("Secret", "core.v1.Secret"),
    ("ServiceAccount", "core.v1.ServiceAccount"),
    ("Eviction", "policy.v1.Eviction"),
    ("DeleteOptions", "meta.v1.DeleteOptions"),
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
    let Some((_, name)) = KINDS.iter().find(|(k, _)| *k == kind) else {
        let names: Vec<&str> = KINDS.iter().map(|(k, _)| *k).collect();
        return Err(StoreError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json, application/yaml, and application/vnd.kubernetes.protobuf for {} \
             (got a protobuf {kind:?})",
            names.join(", ")
        )));
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version));
    out.insert("kind".into(), Value::String(kind));
    out.extend(message(name, raw, 0)?);
    Ok(Value::Object(out))
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

    /// A Pod as client-go encodes it: every non-pointer scalar is on the wire, also when empty.
    #[test]
    fn pod_with_containers_resources_claims_tolerations_and_affinity() {
        let meta = [
            bytes(1, b"web"),
            bytes(3, b"team"),
            bytes(11, &entry("app", b"web")),
            bytes(8, &[]), // creationTimestamp, zero
            bytes(
                13,
                &[
                    bytes(5, b"apps/v1"),
                    bytes(1, b"ReplicaSet"),
                    bytes(3, b"rs"),
                    bytes(4, b"u1"),
                    int(6, 1),
                ]
                .concat(),
            ),
        ]
        .concat();
        let quantity = |q: &str| bytes(1, q.as_bytes());
        let resources = [
            bytes(2, &[bytes(1, b"cpu"), bytes(2, &quantity("500m"))].concat()),
            bytes(2, &[bytes(1, b"memory"), bytes(2, &quantity("1Gi"))].concat()),
            bytes(3, &bytes(1, b"gpu")),
        ]
        .concat();
        let port = [
            bytes(1, b"http"),
            int(2, 0),
            int(3, 8080),
            bytes(4, b"TCP"),
            bytes(5, b""),
        ]
        .concat();
        let probe = [
            bytes(
                1,
                &bytes(
                    2,
                    &[
                        bytes(1, b""),
                        bytes(2, &[int(1, 1), int(2, 0), bytes(3, b"http")].concat()),
                    ]
                    .concat(),
                ),
            ),
            int(2, 5),
        ]
        .concat();
        let container = [
            bytes(1, b"c"),
            bytes(2, b"nginx:1"),
            bytes(3, b"sleep"),
            bytes(6, &port),
            bytes(8, &resources),
            bytes(10, &probe),
            bytes(14, b""),
        ]
        .concat();
        let toleration = [
            bytes(1, b"gpu"),
            bytes(2, b"Exists"),
            bytes(4, b"NoSchedule"),
            int(5, 300),
        ]
        .concat();
        let term = bytes(
            1,
            &bytes(
                1,
                &[bytes(1, b"zone"), bytes(2, b"In"), bytes(3, b"a"), bytes(3, b"b")].concat(),
            ),
        );
        let affinity = bytes(1, &bytes(1, &term));
        let claim = [bytes(1, b"gpu"), bytes(4, b"tpl")].concat();
        let spec = [
            bytes(2, &container),
            bytes(3, b"Always"),
            int(4, 0),
            bytes(7, &entry("disk", b"ssd")),
            bytes(10, b""),
            int(11, 0),
            bytes(18, &affinity),
            bytes(19, b"unisched"),
            bytes(22, &toleration),
            int(25, 0),
            bytes(39, &claim),
            bytes(1, &[bytes(1, b"data"), bytes(2, &bytes(2, &[]))].concat()),
        ]
        .concat();
        let raw = [bytes(1, &meta), bytes(2, &spec), bytes(3, &[])].concat();
        let pod = decode(&envelope("v1", "Pod", &raw)).unwrap();
        assert_eq!(
            pod,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": "team", "labels": {"app": "web"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1", "controller": true}]},
                "spec": {
                    "volumes": [{"name": "data", "emptyDir": {}}],
                    "containers": [{
                        "name": "c", "image": "nginx:1", "command": ["sleep"],
                        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "claims": [{"name": "gpu"}]},
                        "livenessProbe": {"httpGet": {"port": "http"}, "initialDelaySeconds": 5},
                    }],
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 0,
                    "nodeSelector": {"disk": "ssd"},
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}},
                    "schedulerName": "unisched",
                    "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 300}],
                    "priority": 0,
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "tpl"}],
                },
                "status": {},
            })
        );
    }

    #[test]
    fn times_int_or_string_and_durations() {
        let t = [int(1, 1_700_000_000), int(2, 123_456_000)].concat();
        assert_eq!(time(&t, false).unwrap(), json!("2023-11-14T22:13:20Z"));
        assert_eq!(time(&t, true).unwrap(), json!("2023-11-14T22:13:20.123456Z"));
        assert_eq!(time(&[], false).unwrap(), Value::Null);
        let ios = [int(1, 0), int(2, 80)].concat();
        assert_eq!(message_value("intstr.IntOrString", &ios, 0).unwrap(), json!(80));
        assert_eq!(duration(3_723_500_000_000), "1h2m3.5s");
        assert_eq!(duration(-2_000_000_000), "-2s");
        assert_eq!(duration(0), "0s");
    }

    #[test]
    fn bad_bodies_are_errors_not_panics() {
        assert_eq!(decode(b"{}").unwrap_err().code(), 400);
        assert_eq!(
            decode(&envelope("apps/v1", "Deployment", &[]))
                .unwrap_err()
                .code(),
            415
        );
        // A string field sent as a number, and a message nested past any real object.
        let wrong = envelope("v1", "Namespace", &bytes(1, &int(1, 5)));
        assert_eq!(decode(&wrong).unwrap_err().code(), 400);
        let mut deep = Vec::new();
        for _ in 0..200 {
            deep = bytes(2, &[bytes(1, &deep)].concat());
        }
        assert!(decode(&envelope("v1", "Pod", &deep)).is_err());
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

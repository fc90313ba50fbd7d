//! Small helpers: timestamps, UIDs, generated-name suffixes, name validation and JSON path access.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value};

/// The current time.
pub fn now() -> Timestamp {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp::new(d.as_secs() as i64, d.subsec_nanos() as i32).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// Now as a Kubernetes `Time` (RFC 3339, second precision, UTC).
pub fn now_rfc3339() -> String {
    format_time(now())
}

/// Formats a timestamp as a Kubernetes `Time`.
pub fn format_time(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Now as a Kubernetes `MicroTime` (RFC 3339, microsecond precision, UTC).
pub fn now_micro() -> String {
    now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// Parses a Kubernetes `Time`/`MicroTime`.
pub fn parse_time(s: &str) -> Option<Timestamp> {
    s.parse::<Timestamp>().ok()
}

static RNG_COUNTER: AtomicU64 = AtomicU64::new(0);
static RNG_SEED: OnceLock<u64> = OnceLock::new();

/// A fast, thread-safe pseudo-random number (splitmix64 over a time-seeded counter). Not
/// cryptographic: UIDs and name suffixes only need to be unique within one simulator.
pub fn random_u64() -> u64 {
    let seed = *RNG_SEED.get_or_init(|| now().as_nanosecond() as u64 ^ (u64::from(std::process::id()) << 32));
    let n = RNG_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut z = seed.wrapping_add(n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A random RFC 4122 version-4 style UID.
pub fn new_uid() -> String {
    let a = random_u64();
    let b = random_u64();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        (a >> 32) as u32,
        (a >> 16) as u16,
        (a & 0x0fff) as u16,
        ((b >> 48) as u16 & 0x3fff) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

/// The alphabet kube-apiserver uses for `generateName` suffixes (no vowels, no confusable digits).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A 5-character `generateName` suffix.
pub fn name_suffix() -> String {
    let mut r = random_u64();
    let mut s = String::with_capacity(5);
    for _ in 0..5 {
        s.push(SUFFIX_ALPHABET[(r % SUFFIX_ALPHABET.len() as u64) as usize] as char);
        r /= SUFFIX_ALPHABET.len() as u64;
    }
    s
}

/// Builds a name from `generateName`: the base is cut so that the result fits 63 characters.
pub fn generate_name(base: &str) -> String {
    let max_base = 63 - 5;
    let base = if base.len() > max_base {
        let mut cut = max_base;
        while !base.is_char_boundary(cut) {
            cut -= 1;
        }
        &base[..cut]
    } else {
        base
    };
    format!("{base}{}", name_suffix())
}

/// A name (or namespace, or name segment) kube-apiserver rejects, in its words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty.
    #[error("must be non-empty")]
    Empty,
    /// The name is longer than its kind allows.
    #[error("must be no more than {max} characters")]
    TooLong {
        /// The limit.
        max: usize,
    },
    /// Not an RFC 1123 DNS label.
    #[error(
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must \
         start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for \
         validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    )]
    NotLabel,
    /// Not an RFC 1123 DNS subdomain.
    #[error(
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', \
         and must start and end with an alphanumeric character (e.g. 'example.com', regex used for \
         validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    )]
    NotSubdomain,
    /// A URL path segment that is `.` or `..`.
    #[error("may not be '{0}'")]
    DotSegment(&'static str),
    /// A URL path segment with a character it may not hold (`/` or `%`).
    #[error("may not contain '{0}'")]
    ForbiddenCharacter(char),
}

/// Checks an RFC 1123 DNS label (lowercase alphanumerics and '-', at most 63 characters).
pub fn check_dns_label(s: &str) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError::Empty);
    }
    if s.len() > 63 {
        return Err(NameError::TooLong { max: 63 });
    }
    if has_dns_label_pattern(s) {
        Ok(())
    } else {
        Err(NameError::NotLabel)
    }
}

/// Whether `s` has the RFC 1123 label pattern (lowercase alphanumerics and '-', alphanumeric at
/// both ends), whatever its length.
pub(crate) fn has_dns_label_pattern(s: &str) -> bool {
    let bytes = s.as_bytes();
    bytes
        .iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// Checks an RFC 1123 DNS subdomain (dot-separated labels, at most 253 characters).
pub fn check_dns_subdomain(s: &str) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError::Empty);
    }
    if s.len() > 253 {
        return Err(NameError::TooLong { max: 253 });
    }
    // Every dot-separated part is a label, so `a..b` and `a.-b` are not subdomains.
    if s.split('.').all(has_dns_label_pattern) {
        Ok(())
    } else {
        Err(NameError::NotSubdomain)
    }
}

/// Reads a nested field by path.
pub fn get_path<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for p in path {
        cur = cur.as_object()?.get(*p)?;
    }
    Some(cur)
}

/// Reads a nested string field by path.
pub fn get_str<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    get_path(v, path).and_then(Value::as_str)
}

/// Returns the object at `path`, creating empty objects (and replacing non-objects) on the way.
pub fn object_at<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut Map<String, Value> {
    let mut cur = ensure_object(v);
    for p in path {
        cur = ensure_object(
            cur.entry((*p).to_string())
                .or_insert_with(|| Value::Object(Map::new())),
        );
    }
    cur
}

/// Makes `v` an object if it is not one, and returns its map.
pub fn ensure_object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(map) => map,
        _ => unreachable!("value was just made an object"),
    }
}

/// `metadata` of an object as a map, created if absent.
pub fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    object_at(v, &["metadata"])
}

/// `metadata.name`.
pub fn name_of(v: &Value) -> &str {
    get_str(v, &["metadata", "name"]).unwrap_or("")
}

/// `metadata.namespace`.
pub fn namespace_of(v: &Value) -> &str {
    get_str(v, &["metadata", "namespace"]).unwrap_or("")
}

/// `metadata.uid`.
pub fn uid_of(v: &Value) -> &str {
    get_str(v, &["metadata", "uid"]).unwrap_or("")
}

/// Decodes a percent-encoded query component (`+` is a space).
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses a raw query string into decoded key/value pairs.
pub fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_unique_and_well_formed() {
        let a = new_uid();
        let b = new_uid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }

    #[test]
    fn names() {
        assert!(check_dns_label("abc-1").is_ok());
        assert!(check_dns_label("Abc").is_err());
        assert!(check_dns_label("a.b").is_err());
        assert!(check_dns_subdomain("a.b-c").is_ok());
        assert!(check_dns_subdomain("-a").is_err());
        assert!(check_dns_subdomain("a..b").is_err(), "an empty label");
        assert!(check_dns_subdomain("a.-b").is_err(), "a label starting with '-'");
        assert!(check_dns_subdomain("a-.b").is_err(), "a label ending with '-'");
        assert!(check_dns_subdomain("a.").is_err());
        assert!(check_dns_subdomain("example.com").is_ok());
        assert_eq!(generate_name("pod-").len(), 9);
        assert_eq!(generate_name(&"x".repeat(100)).len(), 63);
    }

    #[test]
    fn query_decoding() {
        let q = parse_query("labelSelector=app%3Dweb%2Cx+in+%28a%29&watch=true&x");
        assert_eq!(q[0], ("labelSelector".into(), "app=web,x in (a)".into()));
        assert_eq!(q[1], ("watch".into(), "true".into()));
        assert_eq!(q[2], ("x".into(), String::new()));
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }

    #[test]
    fn time_format() {
        let t = now_rfc3339();
        assert!(t.ends_with('Z') && t.len() == 20, "{t}");
        assert!(parse_time(&t).is_some());
    }
}

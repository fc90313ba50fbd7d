//! The string formats kube-apiserver's declarative validation checks in a Workload (short names,
//! long names, path segments, label keys), each returning every problem it finds, in the words and
//! order of apimachinery's `content` package.
//!
//! These differ from the hand-written name checks of `crate::util` in two ways that show in an
//! answer: a too-long name gets its own message (in bytes) and is still checked against the
//! pattern, and a label is told "must not contain dots" when it would be a valid subdomain.

use crate::util::{NameError, has_dns_label_pattern};

/// Longest DNS label.
const LABEL_MAX_LEN: usize = 63;
/// Longest DNS subdomain.
const SUBDOMAIN_MAX_LEN: usize = 253;
/// Longest name part of a label key.
const LABEL_KEY_NAME_MAX_LEN: usize = 63;

fn max_len(limit: usize) -> String {
    format!("must be no more than {limit} bytes")
}

/// Whether `s` has the DNS subdomain pattern, whatever its length.
fn subdomain_pattern(s: &str) -> bool {
    s.split('.').all(has_dns_label_pattern)
}

/// A "short name" (DNS label): names of templates and of claims.
pub(super) fn short_name(s: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if s.len() > LABEL_MAX_LEN {
        problems.push(max_len(LABEL_MAX_LEN));
    }
    if !has_dns_label_pattern(s) {
        if subdomain_pattern(s) {
            problems.push("must not contain dots".to_string());
        } else {
            problems.push(NameError::NotLabel.to_string());
        }
    }
    problems
}

/// A "long name" (DNS subdomain): priority class and claim names, a controller's API group.
pub(super) fn long_name(s: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if s.len() > SUBDOMAIN_MAX_LEN {
        problems.push(max_len(SUBDOMAIN_MAX_LEN));
    }
    if !subdomain_pattern(s) {
        problems.push(NameError::NotSubdomain.to_string());
    }
    problems
}

/// A name that must fit in one segment of a URL path (a controller's kind and name).
pub(super) fn path_segment_name(s: &str) -> Vec<String> {
    if s == "." || s == ".." {
        return vec![format!("may not be '{s}'")];
    }
    ['/', '%']
        .into_iter()
        .filter(|c| s.contains(*c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

const LABEL_KEY_PATTERN: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
     with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is \
     '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// Whether `s` has the pattern of a label key's name part.
fn label_key_name_pattern(s: &str) -> bool {
    let bytes = s.as_bytes();
    bytes
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// A label key, `[prefix/]name`: a topology constraint's key.
pub(super) fn label_key(s: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".to_string());
            } else {
                problems.extend(long_name(prefix).into_iter().map(|p| format!("prefix part {p}")));
            }
            *name
        }
        _ => {
            problems.push(format!(
                "a valid label key {LABEL_KEY_PATTERN} with an optional DNS subdomain prefix and '/' \
                 (e.g. 'example.com/MyName')"
            ));
            return problems;
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".to_string());
    } else if name.len() > LABEL_KEY_NAME_MAX_LEN {
        problems.push(format!("name part {}", max_len(LABEL_KEY_NAME_MAX_LEN)));
    }
    if !label_key_name_pattern(name) {
        problems.push(format!("name part {LABEL_KEY_PATTERN}"));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_report_length_and_pattern_separately() {
        assert!(short_name("leaf-1").is_empty());
        assert_eq!(short_name(&"a".repeat(64)), ["must be no more than 63 bytes"]);
        assert_eq!(short_name("a.b"), ["must not contain dots"]);
        assert_eq!(
            short_name("Bad"),
            [
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must \
                 start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for \
                 validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
        assert_eq!(short_name(&format!("-{}", "a".repeat(63))).len(), 2);
    }

    #[test]
    fn label_keys_check_prefix_and_name() {
        assert!(label_key("example.com/rack").is_empty());
        assert!(label_key("kubernetes.io/hostname").is_empty());
        assert_eq!(label_key("/rack"), ["prefix part must be non-empty"]);
        assert_eq!(label_key("a/b/c").len(), 1);
        assert!(label_key("-rack")[0].starts_with("name part must consist of"));
    }

    #[test]
    fn path_segments() {
        assert!(path_segment_name("Job").is_empty());
        assert_eq!(path_segment_name(".."), ["may not be '..'"]);
        assert_eq!(
            path_segment_name("a/%"),
            ["may not contain '/'", "may not contain '%'"]
        );
    }
}

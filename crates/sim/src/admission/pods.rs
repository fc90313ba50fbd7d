//! The pod fields checked here: container ports.

use serde_json::Value;

use super::*;

/// Container ports of a pod: `containerPort` and `hostPort` in range, a known protocol, names that
/// are IANA service names and unique within the pod.
pub fn check_pod_ports(pod: &Value, causes: &mut Vec<Cause>) {
    let Some(spec) = pod.get("spec") else { return };
    let mut port_names = HashSet::new();
    for list in ["containers", "initContainers"] {
        for (i, c) in arr(spec, list).iter().enumerate() {
            for (j, p) in arr(c, "ports").iter().enumerate() {
                let base = format!("spec.{list}[{i}].ports[{j}]");
                match p.get("containerPort").and_then(Value::as_i64) {
                    None | Some(0) => push(causes, format!("{base}.containerPort"), "Required value"),
                    Some(n) if !(1..=65535).contains(&n) => push(
                        causes,
                        format!("{base}.containerPort"),
                        format!("Invalid value: {n}: must be between 1 and 65535, inclusive"),
                    ),
                    Some(_) => {}
                }
                if let Some(n) = p.get("hostPort").and_then(Value::as_i64)
                    && n != 0
                    && !(1..=65535).contains(&n)
                {
                    push(
                        causes,
                        format!("{base}.hostPort"),
                        format!("Invalid value: {n}: must be between 1 and 65535, inclusive"),
                    );
                }
                if let Some(proto) = p.get("protocol").and_then(Value::as_str)
                    && !matches!(proto, "TCP" | "UDP" | "SCTP")
                {
                    push(
                        causes,
                        format!("{base}.protocol"),
                        format!("Unsupported value: {proto:?}: supported values: \"SCTP\", \"TCP\", \"UDP\""),
                    );
                }
                let name = str_of(p, "name");
                if !name.is_empty() {
                    if let Err(msg) = check_port_name(name) {
                        push(
                            causes,
                            format!("{base}.name"),
                            format!("Invalid value: {name:?}: {msg}"),
                        );
                    }
                    unique(causes, &mut port_names, &format!("{base}.name"), name);
                }
            }
        }
    }
}

/// An IANA service name: at most 15 lowercase alphanumerics or '-', at least one letter, no '--',
/// not starting or ending with '-'.
pub(super) fn check_port_name(name: &str) -> Result<(), &'static str> {
    if name.len() > 15 {
        return Err("must be no more than 15 characters");
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        return Err("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if name.contains("--") {
        return Err("must not contain consecutive hyphens");
    }
    if !name.bytes().any(|c| c.is_ascii_lowercase()) {
        return Err("must contain at least one letter (a-z)");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err("must not begin or end with a hyphen");
    }
    Ok(())
}

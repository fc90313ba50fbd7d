//! Field-level validation of the DRA kinds, of the pod fields and of a PV's attributes class that
//! kube-apiserver checks beyond the shape of the object: the rules of `resource.k8s.io/v1` (names,
//! list limits, allocation modes, selectors that compile, counters, and what a claim status write
//! may contain), container ports, and `volumeAttributesClassName` on a PV.
//!
//! Each check appends [`Cause`]s with upstream's field paths and message wording
//! (`Required value`, `Duplicate value: "x"`, `Too many: 33: must have at most 32 items`, …), so a
//! bad object is answered with one 422 `Invalid` listing every problem, as kube-apiserver does.
//!
//! kube-apiserver 1.37 reports its problems in two groups, and so do these checks: first the ones
//! its validation code still makes by hand, in the order it walks the object; then the ones it has
//! moved to declarative validation (most list sizes and duplicates, some names and enums), with
//! their own wording, lists before their entries. The expected answers in the tests are
//! kube-apiserver 1.37.2's own, taken with kubectl.
//!
//! One module per kind: `claims` (claim, template and class specs), `slices`,
//! `claim_status` (status writes), `pods`, `volumes` (a PV's attributes class), `pod_groups`, `composite_pod_groups`, `workloads` (the
//! template trees of a Workload, on create and update), `jobs` (batch/v1 defaults and checks);
//! the name and list helpers they share are here.
//!
//! Known differences: device names are checked for uniqueness within one slice (as the API server
//! does); duplicates across the slices of a pool are the allocator's concern. CEL expressions are
//! compiled with the scheduler's own CEL environment (`unisched-dra`), so what it accepts is what
//! the scheduler can evaluate; it has no compile-time type check, and its error messages are its
//! own.

mod claim_status;
mod claims;
mod composite_pod_groups;
mod jobs;
mod pod_groups;
mod pods;
mod slices;
#[cfg(test)]
mod tests;
mod volumes;
mod workloads;

use std::collections::HashSet;

use serde_json::{Map, Value};

pub use claim_status::check_claim_status_update;
pub use claims::{check_device_class, check_resource_claim, check_resource_claim_template};
pub use composite_pod_groups::check_composite_pod_group;
pub use jobs::{
    CONTROLLER_UID_LABEL, JOB_NAME_LABEL, LEGACY_CONTROLLER_UID_LABEL, LEGACY_JOB_NAME_LABEL, check_job,
    check_job_update, default_job, generate_selector,
};
pub use pod_groups::check_pod_group;
pub use pods::check_pod_ports;
pub use slices::check_resource_slice;
pub use volumes::check_persistent_volume;
pub use workloads::{TEMPLATE_DEPTH_MAX, TEMPLATES_MAX, check_workload};

use crate::error::Cause;
use crate::util::{NameError, check_dns_label, check_dns_subdomain};

/// At most this many requests per claim (and constraints, and config entries).
pub const DEVICE_REQUESTS_MAX: usize = 32;
/// At most this many subrequests in `firstAvailable`.
pub const FIRST_AVAILABLE_MAX: usize = 8;
/// At most this many selectors per request, subrequest or class.
pub const SELECTORS_MAX: usize = 32;
/// At most this many devices allocated for one claim (results in a status write).
pub const ALLOCATION_RESULTS_MAX: usize = 32;
/// At most this many devices per slice.
pub const SLICE_DEVICES_MAX: usize = 128;
/// At most this many devices per slice when devices use taints or counters.
pub const SLICE_DEVICES_MAX_ADVANCED: usize = 64;
/// At most this many attributes and capacities together per device.
pub const ATTRIBUTES_AND_CAPACITIES_MAX: usize = 32;
/// At most this many counter sets per slice.
pub const COUNTER_SETS_MAX: usize = 8;
/// At most this many counters per counter set.
pub const COUNTERS_PER_SET_MAX: usize = 32;
/// At most this many counter consumptions per device.
pub const COUNTER_CONSUMPTIONS_MAX: usize = 2;
/// At most this many taints per device.
pub const DEVICE_TAINTS_MAX: usize = 16;
/// Longest string or version attribute value, in bytes.
pub const ATTRIBUTE_VALUE_MAX_LEN: usize = 64;
/// Longest attribute or capacity id (the part after the domain).
pub const ATTRIBUTE_ID_MAX_LEN: usize = 32;
/// Longest driver name.
pub const DRIVER_NAME_MAX_LEN: usize = 63;

/// kube-apiserver's `AllocatedDeviceStatusMaxConditions`.
pub const DEVICE_STATUS_CONDITIONS_MAX: usize = 8;
/// kube-apiserver's `AllocatedDeviceStatusDataMaxLength` and `OpaqueParametersMaxLength`.
pub const RAW_EXTENSION_MAX_LEN: usize = 10 * 1024;
/// kube-apiserver's `PoolNameMaxLength`.
pub const POOL_NAME_MAX_LEN: usize = 253;

fn push(causes: &mut Vec<Cause>, field: impl Into<String>, message: impl Into<String>) {
    causes.push(Cause {
        field: field.into(),
        message: message.into(),
    });
}

/// A union's (one-of's) message when not exactly one of its `members` is set (`is_set` says
/// which), in apimachinery's words (`validate.Union`): none is `Invalid value: "": must specify
/// one of: …`, several name the set ones as the value, `Invalid value: "{a, b}": must specify
/// exactly one of: …`.
fn one_of_message(members: &[&str], is_set: impl Fn(&str) -> bool) -> Option<String> {
    let chosen: Vec<&str> = members.iter().copied().filter(|m| is_set(m)).collect();
    let all = members
        .iter()
        .map(|m| format!("`{m}`"))
        .collect::<Vec<_>>()
        .join(", ");
    match chosen.len() {
        0 => Some(format!("Invalid value: \"\": must specify one of: {all}")),
        1 => None,
        _ => Some(format!(
            "Invalid value: \"{{{}}}\": must specify exactly one of: {all}",
            chosen.join(", ")
        )),
    }
}

fn arr<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn obj<'a>(v: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    v.get(key).and_then(Value::as_object)
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn too_many(causes: &mut Vec<Cause>, field: &str, len: usize, max: usize) {
    if len > max {
        push(
            causes,
            field,
            format!("Too many: {len}: must have at most {max} items"),
        );
    }
}

fn required_label(causes: &mut Vec<Cause>, field: &str, value: &str) {
    if value.is_empty() {
        push(causes, field, "Required value");
    } else if let Err(msg) = check_dns_label(value) {
        push(causes, field, format!("Invalid value: {value:?}: {msg}"));
    }
}

fn required_subdomain(causes: &mut Vec<Cause>, field: &str, value: &str) {
    if value.is_empty() {
        push(causes, field, "Required value");
    } else if let Err(msg) = check_dns_subdomain(value) {
        push(causes, field, format!("Invalid value: {value:?}: {msg}"));
    }
}

/// Adds a `Duplicate value` cause when `name` was seen before in the same list.
fn unique<'a>(causes: &mut Vec<Cause>, seen: &mut HashSet<&'a str>, field: &str, name: &'a str) {
    if !name.is_empty() && !seen.insert(name) {
        push(causes, field, format!("Duplicate value: {name:?}"));
    }
}

/// `items` when there are at most `max` of them; otherwise the "Too many" cause, which
/// kube-apiserver reports alone for such a list (its entries are not looked at).
fn within<'a>(later: &mut Vec<Cause>, field: &str, items: &'a [Value], max: usize) -> Option<&'a [Value]> {
    if items.len() > max {
        too_many(later, field, items.len(), max);
        return None;
    }
    Some(items)
}

/// Duplicates in a list kube-apiserver checks for them declaratively: `key` names an entry,
/// `text` shows it.
fn declarative_duplicates(
    later: &mut Vec<Cause>,
    field: &str,
    items: &[Value],
    key: impl Fn(&Value) -> String,
    text: impl Fn(&Value) -> String,
) {
    let mut seen = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        if !seen.insert(key(item)) {
            push(
                later,
                format!("{field}[{i}]"),
                format!("Duplicate value: {}", text(item)),
            );
        }
    }
}

/// The message our name checks give a name with a bad last character: upstream's pattern
/// message, which it also gives an empty name where no "required" check comes first (ours say
/// "must be non-empty" there).
fn pattern_message(check: fn(&str) -> Result<(), NameError>, value: &str, error: NameError) -> NameError {
    if value.is_empty() {
        check("-").err().unwrap_or(error)
    } else {
        error
    }
}

/// A DNS label checked for its format only (device names, request reference segments).
fn check_label_format(causes: &mut Vec<Cause>, field: &str, value: &str) {
    if let Err(msg) = check_dns_label(value) {
        let msg = pattern_message(check_dns_label, value, msg);
        push(causes, field, format!("Invalid value: {value:?}: {msg}"));
    }
}

/// A driver name as upstream checks CSI driver names: required, at most 63 long, a DNS
/// subdomain once lower-cased. `unit` is "bytes" for the hand-written check and "characters"
/// for the declarative one.
fn check_driver_name(causes: &mut Vec<Cause>, field: &str, driver: &str, unit: &str) {
    if driver.is_empty() {
        push(causes, field, "Required value");
        return;
    }
    if driver.len() > DRIVER_NAME_MAX_LEN {
        push(
            causes,
            field,
            format!("Too long: may not be more than {DRIVER_NAME_MAX_LEN} {unit}"),
        );
    }
    if let Err(msg) = check_dns_subdomain(&driver.to_ascii_lowercase()) {
        push(causes, field, format!("Invalid value: {driver:?}: {msg}"));
    }
}

/// A pool name: required, at most 253 long, each `/`-separated part a DNS subdomain. The
/// declarative check (`declarative`) names the part's index and counts characters.
fn check_pool_name(causes: &mut Vec<Cause>, field: &str, pool: &str, declarative: bool) {
    if pool.is_empty() {
        push(causes, field, "Required value");
        return;
    }
    if pool.len() > POOL_NAME_MAX_LEN {
        let unit = if declarative { "characters" } else { "bytes" };
        push(
            causes,
            field,
            format!("Too long: may not be more than {POOL_NAME_MAX_LEN} {unit}"),
        );
    }
    for (i, part) in pool.split('/').enumerate() {
        if let Err(msg) = check_dns_subdomain(part) {
            let msg = pattern_message(check_dns_subdomain, part, msg);
            let msg = if declarative {
                format!("segment {i}: {msg}")
            } else {
                msg.to_string()
            };
            push(causes, field, format!("Invalid value: {part:?}: {msg}"));
        }
    }
}

/// A share ID: a UUID in its normalized form (36 characters, lower-case hex).
fn check_share_id(causes: &mut Vec<Cause>, field: &str, id: &str) {
    let normalized = id.len() == 36
        && id.bytes().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        });
    if !normalized {
        push(
            causes,
            field,
            format!("Invalid value: {id:?}: must be a lowercase UUID in 8-4-4-4-12 format"),
        );
    }
}

/// Opaque parameters or a device status's `data`: present, within the size limit, and a JSON
/// object.
fn check_raw_object(causes: &mut Vec<Cause>, field: &str, raw: Option<&Value>) {
    match raw {
        None | Some(Value::Null) => push(causes, field, "Required value"),
        Some(v) if v.to_string().len() > RAW_EXTENSION_MAX_LEN => push(
            causes,
            field,
            format!("Too long: may not be more than {RAW_EXTENSION_MAX_LEN} bytes"),
        ),
        Some(Value::Object(_)) => {}
        Some(_) => push(
            causes,
            field,
            "Invalid value: \"<value omitted>\": must be a valid JSON object",
        ),
    }
}

/// An attribute or capacity name, `[domain/]id`, reported at the map's `field` with the part
/// at fault: the domain checked as a driver name, the id a C identifier of at most 32. A name
/// with more than one `/` is not checked (kube-apiserver 1.37 does not either).
fn check_qualified_name(causes: &mut Vec<Cause>, field: &str, qualified: &str) {
    let parts: Vec<&str> = qualified.split('/').collect();
    let id = match parts.as_slice() {
        [id] => *id,
        [domain, id] => {
            if domain.is_empty() {
                push(causes, field, "Invalid value: \"\": the domain must not be empty");
            } else {
                check_driver_name(causes, field, domain, "bytes");
            }
            if id.is_empty() {
                push(causes, field, "Invalid value: \"\": the name must not be empty");
                return;
            }
            *id
        }
        _ => return,
    };
    if id.len() > ATTRIBUTE_ID_MAX_LEN {
        push(
            causes,
            field,
            format!("Too long: may not be more than {ATTRIBUTE_ID_MAX_LEN} bytes"),
        );
    }
    let c_ident = id
        .bytes()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && id.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
    if !c_ident {
        push(
            causes,
            field,
            format!(
                "Invalid value: {id:?}: a valid C identifier must start with alphabetic character or '_', \
                 followed by a string of alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or \
                 'MyName', regex used for validation is '[A-Za-z_][A-Za-z0-9_]*')"
            ),
        );
    }
}

/// Whether `reference` names a request of the claim whose `spec.devices` is `claim_devices`, or
/// `request/subrequest` a subrequest of one of its `firstAvailable` requests.
fn names_a_request(claim_devices: &Value, reference: &str) -> bool {
    let mut segments = reference.split('/');
    let (Some(request), sub, None) = (segments.next(), segments.next(), segments.next()) else {
        return false;
    };
    let requests = arr(claim_devices, "requests");
    requests
        .iter()
        .filter(|r| str_of(r, "name") == request)
        .any(|r| match sub {
            None => true,
            Some(sub) => arr(r, "firstAvailable").iter().any(|s| str_of(s, "name") == sub),
        })
}

/// A request reference in an allocation result or its config: at most two `/`-separated DNS
/// labels naming a request (or a request's subrequest) of the claim.
fn check_request_ref(causes: &mut Vec<Cause>, claim_devices: &Value, field: &str, reference: &str) {
    const NOT_A_REQUEST: &str = "must be the name of a request in the claim or the name of a \
                                 request and a subrequest separated by '/'";
    if reference.split('/').count() > 2 {
        push(
            causes,
            field,
            format!("Invalid value: {reference:?}: {NOT_A_REQUEST}"),
        );
        return;
    }
    for segment in reference.split('/') {
        check_label_format(causes, field, segment);
    }
    if !names_a_request(claim_devices, reference) {
        push(
            causes,
            field,
            format!("Invalid value: {reference:?}: {NOT_A_REQUEST}"),
        );
    }
}

/// A list of request references (constraints, config): each names a request of the claim;
/// the count and duplicates are declarative upstream.
fn check_request_refs(
    causes: &mut Vec<Cause>,
    later: &mut Vec<Cause>,
    claim_devices: &Value,
    field: &str,
    refs: &[Value],
) {
    let Some(refs) = within(later, field, refs, DEVICE_REQUESTS_MAX) else {
        return;
    };
    for (k, r) in refs.iter().enumerate() {
        check_request_ref(
            causes,
            claim_devices,
            &format!("{field}[{k}]"),
            r.as_str().unwrap_or_default(),
        );
    }
    declarative_duplicates(later, field, refs, |r| r.to_string(), |r| r.to_string());
}

/// An opaque configuration entry of a claim, a class or an allocation result: `opaque` required, its driver
/// (declarative upstream) and parameters that are a JSON object.
fn check_opaque_config(causes: &mut Vec<Cause>, later: &mut Vec<Cause>, base: &str, config: &Value) {
    match config.get("opaque").filter(|o| !o.is_null()) {
        None => push(causes, format!("{base}.opaque"), "Required value"),
        Some(opaque) => {
            check_raw_object(
                causes,
                &format!("{base}.opaque.parameters"),
                opaque.get("parameters"),
            );
            check_driver_name(
                later,
                &format!("{base}.opaque.driver"),
                str_of(opaque, "driver"),
                "characters",
            );
        }
    }
}

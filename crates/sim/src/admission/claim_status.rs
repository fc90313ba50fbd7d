//! ResourceClaim status writes: the consumers (`reservedFor`), the device statuses, and an
//! allocation that is either new (its contents checked) or unchanged.

use std::collections::HashSet;

use serde_json::Value;

use super::*;
use crate::util::{get_path, get_str};

/// kube-apiserver's `ResourceClaimReservedForMaxSize`.
const RESERVED_FOR_MAX: usize = 256;

/// `v.status[field]`, absent when null.
fn status_field<'a>(v: &'a Value, field: &str) -> Option<&'a Value> {
    v.get("status")
        .and_then(|s| s.get(field))
        .filter(|x| !x.is_null())
}

/// What upstream's claim status validation refuses in a status write from `old` to `new`
/// (empty when nothing): the invariants that keep a device from being handed out twice (a claim
/// is reserved only while it is allocated; an allocation is never replaced by another, only
/// removed; a claim being deleted takes no new consumers; consumers are complete and unique by
/// UID), a new allocation result's contents, and device statuses that name allocated devices.
/// In kube-apiserver 1.37.2's order and wording: its hand-written checks first, then its
/// declarative ones (`StatusCauses`).
pub fn check_claim_status_update(old: &Value, new: &Value) -> Vec<Cause> {
    let mut reserved_causes = StatusCauses::default();
    let mut device_causes = StatusCauses::default();
    let mut allocation_causes = StatusCauses::default();
    let reserved = status_field(new, "reservedFor")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    check_reserved_for(reserved, &mut reserved_causes);
    let allocation = status_field(new, "allocation");
    check_device_statuses(new, allocation, &mut device_causes);
    // The consumers' invariants, which upstream checks after the device statuses.
    if !reserved.is_empty() {
        if allocation.is_none() {
            push(
                &mut device_causes.plain,
                "status.reservedFor",
                "Forbidden: may not be specified when `allocated` is not set",
            );
        } else if get_path(new, &["metadata", "deletionTimestamp"]).is_some() {
            let before = status_field(old, "reservedFor")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            if reserved.iter().any(|r| !before.contains(r)) {
                push(
                    &mut device_causes.plain,
                    "status.reservedFor",
                    "Forbidden: new entries may not be added while `deallocationRequested` or `deletionTimestamp` are set",
                );
            }
        }
    }
    match (status_field(old, "allocation"), allocation) {
        (Some(was), Some(now)) if was != now => push(
            &mut allocation_causes.declarative,
            "status.allocation",
            // kube-apiserver 1.37's wording, its `null` included.
            "Invalid value: null: field cannot be modified once set",
        ),
        // Only a result being written now is checked: a stored one was checked when written.
        (None, Some(now)) => check_allocation_result(new, now, &mut allocation_causes),
        _ => {}
    }
    let mut causes = reserved_causes.plain;
    causes.extend(device_causes.plain);
    causes.extend(allocation_causes.plain);
    causes.extend(allocation_causes.declarative);
    causes.extend(reserved_causes.declarative);
    causes.extend(device_causes.declarative);
    causes
}

/// `status.reservedFor`: at most 256 consumers (a longer list is reported alone), each with a
/// resource, a name and a UID, UIDs unique (a duplicate shown as the whole entry, in the API's
/// field order).
fn check_reserved_for(reserved: &[Value], causes: &mut StatusCauses) {
    let Some(reserved) = within(
        &mut causes.declarative,
        "status.reservedFor",
        reserved,
        RESERVED_FOR_MAX,
    ) else {
        return;
    };
    let mut uids = HashSet::new();
    for (i, consumer) in reserved.iter().enumerate() {
        for f in ["resource", "name", "uid"] {
            if get_str(consumer, &[f]).is_none_or(str::is_empty) {
                push(
                    &mut causes.plain,
                    format!("status.reservedFor[{i}].{f}"),
                    "Required value",
                );
            }
        }
        if let Some(uid) = get_str(consumer, &["uid"]).filter(|u| !u.is_empty())
            && !uids.insert(uid)
        {
            let text = |key: &str| Value::from(str_of(consumer, key)).to_string();
            push(
                &mut causes.declarative,
                format!("status.reservedFor[{i}]"),
                format!(
                    "Duplicate value: {{\"resource\":{},\"name\":{},\"uid\":{}}}",
                    text("resource"),
                    text("name"),
                    text("uid")
                ),
            );
        }
    }
}

/// The problems of a claim status write in the two groups kube-apiserver 1.37 reports them in:
/// the checks still written by hand in its validation code come first, in the order it walks
/// the status; the checks it has moved to declarative validation (driver and pool names of
/// allocation results, share IDs, config sources, list sizes and duplicates, the immutable
/// allocation) follow, with their own wording ("segment 1: …", "may not be more than 63
/// characters", duplicates shown as the whole entry). Observed with kubectl against
/// kube-apiserver 1.37.2.
#[derive(Debug, Default)]
pub(super) struct StatusCauses {
    /// Hand-written checks, in walk order.
    plain: Vec<Cause>,
    /// Declarative checks, in the order of the status's fields (allocation, reservedFor,
    /// devices).
    declarative: Vec<Cause>,
}

/// A new allocation result in a claim status write (`status.allocation`): at most 32 results,
/// each naming a request of the claim and a well-formed driver, pool and device; config entries
/// with a source, unique request references and opaque parameters. kube-apiserver checks a
/// result only when it is first written (a stored one can only be removed); so does the caller.
fn check_allocation_result(claim: &Value, allocation: &Value, causes: &mut StatusCauses) {
    let claim_devices = claim
        .get("spec")
        .and_then(|s| s.get("devices"))
        .unwrap_or(&Value::Null);
    let devices = allocation.get("devices").unwrap_or(&Value::Null);
    if let Some(results) = within(
        &mut causes.declarative,
        "status.allocation.devices.results",
        arr(devices, "results"),
        ALLOCATION_RESULTS_MAX,
    ) {
        for (i, result) in results.iter().enumerate() {
            let base = format!("status.allocation.devices.results[{i}]");
            check_request_ref(
                &mut causes.plain,
                claim_devices,
                &format!("{base}.request"),
                str_of(result, "request"),
            );
            check_label_format(
                &mut causes.plain,
                &format!("{base}.device"),
                str_of(result, "device"),
            );
            let later = &mut causes.declarative;
            check_driver_name(
                later,
                &format!("{base}.driver"),
                str_of(result, "driver"),
                "characters",
            );
            check_pool_name(later, &format!("{base}.pool"), str_of(result, "pool"), true);
            if let Some(id) = result.get("shareID").and_then(Value::as_str) {
                check_share_id(later, &format!("{base}.shareID"), id);
            }
        }
    }
    let Some(configs) = within(
        &mut causes.declarative,
        "status.allocation.devices.config",
        arr(devices, "config"),
        2 * DEVICE_REQUESTS_MAX,
    ) else {
        return;
    };
    for (i, config) in configs.iter().enumerate() {
        let base = format!("status.allocation.devices.config[{i}]");
        match str_of(config, "source") {
            "" => push(
                &mut causes.declarative,
                format!("{base}.source"),
                "Required value",
            ),
            "FromClaim" | "FromClass" => {}
            other => push(
                &mut causes.declarative,
                format!("{base}.source"),
                format!("Unsupported value: {other:?}: supported values: \"FromClaim\", \"FromClass\""),
            ),
        }
        let (plain, later) = (&mut causes.plain, &mut causes.declarative);
        check_request_refs(
            plain,
            later,
            claim_devices,
            &format!("{base}.requests"),
            arr(config, "requests"),
        );
        check_opaque_config(plain, later, &base, config);
    }
}

/// A device status entry as kube-apiserver shows a duplicate: its fields in the API's order,
/// `conditions` always, the optional ones when set.
pub(super) fn device_status_text(status: &Value) -> String {
    let mut text = String::from("{");
    for key in [
        "driver",
        "pool",
        "device",
        "shareID",
        "conditions",
        "data",
        "networkData",
    ] {
        let value = status.get(key).filter(|v| !v.is_null());
        if value.is_none() && key != "conditions" {
            continue;
        }
        if text.len() > 1 {
            text.push(',');
        }
        let value = value.map_or_else(|| "null".to_string(), Value::to_string);
        text.push_str(&format!("{}:{value}", Value::from(key)));
    }
    text.push('}');
    text
}

/// `status.devices` of a claim status write: each entry names a device of the claim's
/// allocation (`allocation`, the one the write leaves in place) with well-formed names, once;
/// at most 8 conditions; `data`, when present, a JSON object within the size limit.
fn check_device_statuses(claim: &Value, allocation: Option<&Value>, causes: &mut StatusCauses) {
    let statuses = claim
        .get("status")
        .and_then(|s| s.get("devices"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    // The device's identity as kube-apiserver prints it in these messages: its internal
    // shared-device ID as JSON, in that type's field order.
    let id = |v: &Value| {
        let quoted = |key: &str| Value::from(str_of(v, key)).to_string();
        format!(
            "{{\"Driver\":{},\"Pool\":{},\"Device\":{},\"ShareID\":{}}}",
            quoted("driver"),
            quoted("pool"),
            quoted("device"),
            quoted("shareID")
        )
    };
    let allocated: HashSet<String> = allocation
        .and_then(|a| a.get("devices"))
        .map(|d| arr(d, "results").iter().map(id).collect())
        .unwrap_or_default();
    let mut seen = HashSet::new();
    for (i, status) in statuses.iter().enumerate() {
        let base = format!("status.devices[{i}]");
        let plain = &mut causes.plain;
        check_driver_name(
            plain,
            &format!("{base}.driver"),
            str_of(status, "driver"),
            "bytes",
        );
        check_pool_name(plain, &format!("{base}.pool"), str_of(status, "pool"), false);
        check_label_format(plain, &format!("{base}.device"), str_of(status, "device"));
        if let Some(share) = status.get("shareID").and_then(Value::as_str) {
            check_share_id(&mut causes.declarative, &format!("{base}.shareID"), share);
        }
        let device = id(status);
        if !allocated.contains(&device) {
            push(
                &mut causes.plain,
                base.as_str(),
                format!("Invalid value: {device}: must be an allocated device in the claim"),
            );
        }
        too_many(
            &mut causes.plain,
            &format!("{base}.conditions"),
            arr(status, "conditions").len(),
            DEVICE_STATUS_CONDITIONS_MAX,
        );
        if let Some(data) = status.get("data").filter(|d| !d.is_null()) {
            check_raw_object(&mut causes.plain, &format!("{base}.data"), Some(data));
        }
        if !seen.insert(device) {
            push(
                &mut causes.declarative,
                base,
                format!("Duplicate value: {}", device_status_text(status)),
            );
        }
    }
}

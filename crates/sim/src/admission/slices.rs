//! ResourceSlices: driver, pool, node selection, devices with their attributes, capacities,
//! counter consumptions and taints, and shared counter sets.

use std::collections::HashSet;

use serde_json::{Map, Value};
use unisched_resource::Quantity;

use super::*;

/// An attribute's value: its length limits here (hand-written upstream); how many kinds of value
/// it sets goes to `later` (declarative upstream, reported after everything else).
pub(super) fn check_attribute(causes: &mut Vec<Cause>, later: &mut Vec<Cause>, field: &str, attr: &Value) {
    // In the order kube-apiserver names them.
    let kinds = [
        "int", "bool", "string", "version", "ints", "bools", "strings", "versions",
    ];
    if let Some(message) = one_of_message(&kinds, |k| attr.get(k).is_some_and(|v| !v.is_null())) {
        push(later, field, message);
    }
    for k in ["string", "version"] {
        if let Some(s) = attr.get(k).and_then(Value::as_str)
            && s.len() > ATTRIBUTE_VALUE_MAX_LEN
        {
            push(
                causes,
                format!("{field}.{k}"),
                format!("Too long: may not be more than {ATTRIBUTE_VALUE_MAX_LEN} bytes"),
            );
        }
    }
}

pub(super) fn quantity_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A map of counter name → `{value: quantity}` at `field`: DNS-label names (reported at the map
/// with the name), a value that is a quantity. kube-apiserver 1.37.2 accepts negative counters
/// (and capacities), so they are accepted here too.
pub(super) fn check_counters(causes: &mut Vec<Cause>, field: &str, counters: Option<&Map<String, Value>>) {
    for (name, c) in counters.into_iter().flatten() {
        if let Err(msg) = check_dns_label(name) {
            let msg = pattern_message(check_dns_label, name, msg);
            push(causes, field, format!("Invalid value: {name:?}: {msg}"));
        }
        let vfield = format!("{field}[{name}].value");
        let Some(text) = c.get("value").and_then(quantity_text) else {
            push(causes, vfield, "Required value");
            continue;
        };
        if Quantity::parse(&text).is_err() {
            push(
                causes,
                vfield,
                format!("Invalid value: {text:?}: must be a quantity"),
            );
        }
    }
}

/// A ResourceSlice, in kube-apiserver 1.37.2's order and wording (checked with kubectl against
/// it): driver and pool, the node selection (exactly one of `nodeName`, `nodeSelector`,
/// `allNodes`, `perDeviceNodeSelection`), devices or shared counters but not both, each device
/// and then duplicate device names; then what upstream checks declaratively (how many values an
/// attribute sets, the shared counter sets), which it reports last.
pub fn check_resource_slice(slice: &Value, causes: &mut Vec<Cause>) {
    let Some(spec) = slice.get("spec") else {
        push(causes, "spec", "Required value");
        return;
    };
    let mut later = Vec::new();
    check_driver_name(causes, "spec.driver", str_of(spec, "driver"), "bytes");
    let pool = spec.get("pool").unwrap_or(&Value::Null);
    check_pool_name(causes, "spec.pool.name", str_of(pool, "name"), false);
    let count = pool
        .get("resourceSliceCount")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if count <= 0 {
        push(
            causes,
            "spec.pool.resourceSliceCount",
            format!("Invalid value: {count}: must be greater than zero"),
        );
    }
    if let Some(g) = pool.get("generation").and_then(Value::as_i64)
        && g < 0
    {
        push(
            causes,
            "spec.pool.generation",
            format!("Invalid value: {g}: must be greater than or equal to zero"),
        );
    }
    check_node_selection(causes, spec);
    let present = |key: &str| spec.get(key).is_some_and(|v| !v.is_null());
    if present("sharedCounters") && present("devices") {
        push(
            causes,
            "spec",
            "Invalid value: \"\": only one of `sharedCounters` or `devices` is allowed",
        );
    }
    check_slice_devices(causes, &mut later, spec);
    check_shared_counters(&mut later, spec);
    causes.extend(later);
}

/// Where a slice's devices are: exactly one of the four ways, each well-formed.
pub(super) fn check_node_selection(causes: &mut Vec<Cause>, spec: &Value) {
    let mut set = Vec::new();
    if let Some(name) = spec.get("nodeName").and_then(Value::as_str) {
        if name.is_empty() {
            push(
                causes,
                "spec.nodeName",
                "Invalid value: \"\": must be either unset or set to a non-empty string",
            );
        } else {
            set.push("`nodeName`");
            if let Err(msg) = check_dns_subdomain(name) {
                push(causes, "spec.nodeName", format!("Invalid value: {name:?}: {msg}"));
            }
        }
    }
    if spec.get("nodeSelector").is_some_and(|v| !v.is_null()) {
        set.push("`nodeSelector`");
    }
    for (key, name) in [
        ("allNodes", "`allNodes`"),
        ("perDeviceNodeSelection", "`perDeviceNodeSelection`"),
    ] {
        match spec.get(key).and_then(Value::as_bool) {
            Some(true) => set.push(name),
            Some(false) => push(
                causes,
                format!("spec.{key}"),
                "Invalid value: false: must be either unset or set to true",
            ),
            None => {}
        }
    }
    const ONE_OF: &str =
        "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required";
    match set.len() {
        0 => push(causes, "spec", format!("Required value: {ONE_OF}")),
        1 => {}
        _ => push(
            causes,
            "spec",
            format!(
                "Invalid value: \"{{{}}}\": {ONE_OF}, but multiple fields are set",
                set.join(", ")
            ),
        ),
    }
}

/// A slice's devices: the count (alone when exceeded), each device, then duplicate names.
pub(super) fn check_slice_devices(causes: &mut Vec<Cause>, later: &mut Vec<Cause>, spec: &Value) {
    let devices = arr(spec, "devices");
    let advanced = devices
        .iter()
        .any(|d| !arr(d, "taints").is_empty() || !arr(d, "consumesCounters").is_empty());
    let max = if advanced {
        SLICE_DEVICES_MAX_ADVANCED
    } else {
        SLICE_DEVICES_MAX
    };
    if devices.len() > max {
        too_many(causes, "spec.devices", devices.len(), max);
        return;
    }
    for (i, d) in devices.iter().enumerate() {
        let base = format!("spec.devices[{i}]");
        check_label_format(causes, &format!("{base}.name"), str_of(d, "name"));
        let attrs = obj(d, "attributes");
        let caps = obj(d, "capacity");
        let n = attrs.map_or(0, Map::len) + caps.map_or(0, Map::len);
        if n > ATTRIBUTES_AND_CAPACITIES_MAX {
            push(
                causes,
                base.clone(),
                format!(
                    "Invalid value: {n}: the total number of attributes and capacities must not exceed {ATTRIBUTES_AND_CAPACITIES_MAX}"
                ),
            );
        }
        for (k, a) in attrs.into_iter().flatten() {
            check_qualified_name(causes, &format!("{base}.attributes"), k);
            check_attribute(causes, later, &format!("{base}.attributes[{k}]"), a);
        }
        for (k, c) in caps.into_iter().flatten() {
            check_qualified_name(causes, &format!("{base}.capacity"), k);
            if let Some(text) = c.get("value").and_then(quantity_text)
                && Quantity::parse(&text).is_err()
            {
                push(
                    causes,
                    format!("{base}.capacity[{k}].value"),
                    format!("Invalid value: {text:?}: must be a quantity"),
                );
            }
        }
        let consumes = arr(d, "consumesCounters");
        too_many(
            causes,
            &format!("{base}.consumesCounters"),
            consumes.len(),
            COUNTER_CONSUMPTIONS_MAX,
        );
        for (j, c) in consumes.iter().enumerate() {
            let cbase = format!("{base}.consumesCounters[{j}]");
            required_label(causes, &format!("{cbase}.counterSet"), str_of(c, "counterSet"));
            check_counters(causes, &format!("{cbase}.counters"), obj(c, "counters"));
        }
        too_many(
            causes,
            &format!("{base}.taints"),
            arr(d, "taints").len(),
            DEVICE_TAINTS_MAX,
        );
    }
    let mut names = HashSet::new();
    for (i, d) in devices.iter().enumerate() {
        let name = str_of(d, "name");
        if !names.insert(name) {
            push(
                causes,
                format!("spec.devices[{i}]"),
                format!("Duplicate value: {name:?}"),
            );
        }
    }
}

/// A slice's shared counter sets, which kube-apiserver checks declaratively: the count (alone
/// when exceeded), duplicate names (shown as the whole set), then each set's name and counters.
pub(super) fn check_shared_counters(later: &mut Vec<Cause>, spec: &Value) {
    let sets = arr(spec, "sharedCounters");
    if sets.len() > COUNTER_SETS_MAX {
        too_many(later, "spec.sharedCounters", sets.len(), COUNTER_SETS_MAX);
        return;
    }
    let mut names = HashSet::new();
    for (i, set) in sets.iter().enumerate() {
        let name = str_of(set, "name");
        if !names.insert(name) {
            let counters = set.get("counters").cloned().unwrap_or(Value::Null);
            push(
                later,
                format!("spec.sharedCounters[{i}]"),
                format!(
                    "Duplicate value: {{\"name\":{},\"counters\":{counters}}}",
                    Value::from(name)
                ),
            );
        }
    }
    for (i, set) in sets.iter().enumerate() {
        let base = format!("spec.sharedCounters[{i}]");
        required_label(later, &format!("{base}.name"), str_of(set, "name"));
        let counters = obj(set, "counters");
        let n = counters.map_or(0, Map::len);
        if n == 0 {
            push(later, format!("{base}.counters"), "Required value");
        } else if n > COUNTERS_PER_SET_MAX {
            push(
                later,
                format!("{base}.counters"),
                format!("Too many: {n}: must have at most {COUNTERS_PER_SET_MAX} items"),
            );
        } else {
            check_counters(later, &format!("{base}.counters"), counters);
        }
    }
}

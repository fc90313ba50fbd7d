//! Field-level validation of the DRA kinds and of the pod fields kube-apiserver checks beyond the
//! shape of the object: the rules of `resource.k8s.io/v1` (names, list limits, allocation modes,
//! selectors that compile, counters, and what a claim status write may contain) and container
//! ports.
//!
//! Each check appends [`Cause`]s with upstream's field paths and message wording
//! (`Required value`, `Duplicate value: "x"`, `Too many: 33: must have at most 32 items`, …), so a
//! bad object is answered with one 422 `Invalid` listing every problem, as kube-apiserver does.
//!
//! Known differences: device names are checked for uniqueness within one slice (as the API server
//! does); duplicates across the slices of a pool are the allocator's concern. CEL expressions are
//! compiled with the scheduler's own CEL environment (`unisched-dra`), so what it accepts is what
//! the scheduler can evaluate; it has no compile-time type check.

use std::collections::HashSet;
use std::sync::OnceLock;

use serde_json::{Map, Value, json};
use unisched_dra::cel::{CelSelectorEngine, MAX_EXPRESSION_LEN};
use unisched_resource::Quantity;

use crate::error::Cause;
use crate::util::{check_dns_label, check_dns_subdomain};

/// At most this many requests per claim (and constraints, and config entries).
pub const DEVICE_REQUESTS_MAX: usize = 32;
/// At most this many subrequests in `firstAvailable`.
pub const FIRST_AVAILABLE_MAX: usize = 8;
/// At most this many selectors per request, subrequest or class.
pub const SELECTORS_MAX: usize = 32;
/// At most this many devices allocated for one claim, so `count` is bounded by it.
pub const ALLOCATION_RESULTS_MAX: i64 = 32;
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

/// One engine for the process: compiled expressions are cached by text.
fn cel_engine() -> &'static CelSelectorEngine {
    static ENGINE: OnceLock<CelSelectorEngine> = OnceLock::new();
    ENGINE.get_or_init(CelSelectorEngine::new)
}

fn push(causes: &mut Vec<Cause>, field: impl Into<String>, message: impl Into<String>) {
    causes.push(Cause {
        field: field.into(),
        message: message.into(),
    });
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

/// Checks the selectors of a request, subrequest or class: at most 32, and each CEL expression
/// within the length limit and compilable.
fn check_selectors(causes: &mut Vec<Cause>, base: &str, holder: &Value) {
    let selectors = arr(holder, "selectors");
    too_many(
        causes,
        &format!("{base}.selectors"),
        selectors.len(),
        SELECTORS_MAX,
    );
    for (i, s) in selectors.iter().enumerate() {
        let field = format!("{base}.selectors[{i}].cel.expression");
        let Some(cel) = s.get("cel") else {
            push(causes, format!("{base}.selectors[{i}].cel"), "Required value");
            continue;
        };
        let expression = str_of(cel, "expression");
        if expression.trim().is_empty() {
            push(causes, field, "Required value");
        } else if expression.len() > MAX_EXPRESSION_LEN {
            push(
                causes,
                field,
                format!("Too long: may not be more than {MAX_EXPRESSION_LEN} bytes"),
            );
        } else if let Err(e) = cel_engine().compile_cel(expression) {
            // kube-apiserver indents the source snippet under each error by one space.
            let message = e.message.replace("\n| ", "\n | ");
            push(
                causes,
                field,
                format!("Invalid value: {expression:?}: compilation failed: {message}"),
            );
        }
    }
}

/// `allocationMode` and `count` of an exact request or a subrequest. A count of 0 means "not
/// set" (kube-apiserver defaults it to 1 for `ExactCount`), and there is no upper bound here:
/// an allocation of more than 32 devices is refused when written, and the allocator never
/// produces one. An unknown mode is reported among the declarative causes (`later`).
fn check_allocation_mode(causes: &mut Vec<Cause>, later: &mut Vec<Cause>, base: &str, request: &Value) {
    let mode = request.get("allocationMode").and_then(Value::as_str);
    let count = request.get("count").and_then(Value::as_i64).unwrap_or(0);
    match mode {
        None | Some("") | Some("ExactCount") => {
            if count < 0 {
                push(
                    causes,
                    format!("{base}.count"),
                    format!("Invalid value: {count}: must be greater than zero"),
                );
            }
        }
        Some("All") => {
            if count != 0 {
                push(
                    causes,
                    format!("{base}.count"),
                    format!("Invalid value: {count}: must not be specified when allocationMode is 'All'"),
                );
            }
        }
        Some(other) => push(
            later,
            format!("{base}.allocationMode"),
            format!("Unsupported value: {other:?}: supported values: \"All\", \"ExactCount\""),
        ),
    }
}

/// `v` as JSON with the keys in `order` first (absent ones left out), then any others; values
/// rendered by `nested` where it has something to say for the key.
fn ordered_json(v: &Value, order: &[&str], nested: &dyn Fn(&str, &Value) -> Option<String>) -> String {
    let Some(map) = v.as_object() else {
        return v.to_string();
    };
    let keys = order
        .iter()
        .copied()
        .filter(|k| map.contains_key(*k))
        .chain(map.keys().map(String::as_str).filter(|k| !order.contains(k)));
    let fields: Vec<String> = keys
        .map(|k| {
            let value = nested(k, &map[k]).unwrap_or_else(|| map[k].to_string());
            format!("{}:{value}", Value::from(k))
        })
        .collect();
    format!("{{{}}}", fields.join(","))
}

const EXACT_ORDER: &[&str] = &[
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
];
const SUBREQUEST_ORDER: &[&str] = &[
    "name",
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "tolerations",
    "capacity",
];

/// A subrequest as kube-apiserver shows a duplicate: its fields in the API's order.
fn subrequest_text(sub: &Value) -> String {
    ordered_json(sub, SUBREQUEST_ORDER, &|_, _| None)
}

/// A request as kube-apiserver shows a duplicate: its fields in the API's order.
fn request_text(request: &Value) -> String {
    ordered_json(request, &["name", "exactly", "firstAvailable"], &|k, v| match k {
        "exactly" => Some(ordered_json(v, EXACT_ORDER, &|_, _| None)),
        "firstAvailable" => v.as_array().map(|subs| {
            let items: Vec<String> = subs.iter().map(subrequest_text).collect();
            format!("[{}]", items.join(","))
        }),
        _ => None,
    })
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
    let claim = json!({"spec": {"devices": claim_devices}});
    for (k, r) in refs.iter().enumerate() {
        check_request_ref(
            causes,
            &claim,
            &format!("{field}[{k}]"),
            r.as_str().unwrap_or_default(),
        );
    }
    declarative_duplicates(later, field, refs, |r| r.to_string(), |r| r.to_string());
}

/// A fully qualified attribute name (`domain/id`) of a constraint, declarative upstream.
fn check_fully_qualified_name(later: &mut Vec<Cause>, field: &str, name: &str) {
    check_qualified_name(later, field, name);
    if !name.contains('/') {
        push(
            later,
            field,
            format!(
                "Invalid value: {name:?}: a fully qualified name must be a domain and a name separated by a slash"
            ),
        );
    }
}

/// An opaque configuration entry of a claim or class: `opaque` required, its driver
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

/// The `devices` of a claim spec at `base` (e.g. `spec.devices`), in kube-apiserver 1.37.2's
/// order and wording (checked with kubectl against it): its hand-written checks in walk order,
/// then the ones it makes declaratively (list sizes and duplicates, subrequest classes,
/// allocation modes, constraint attribute names, config drivers), lists before their entries.
fn check_device_claim(causes: &mut Vec<Cause>, base: &str, devices: &Value) {
    let mut later = Vec::new();
    if let Some(requests) = within(
        &mut later,
        &format!("{base}.requests"),
        arr(devices, "requests"),
        DEVICE_REQUESTS_MAX,
    ) {
        declarative_duplicates(
            &mut later,
            &format!("{base}.requests"),
            requests,
            |r| str_of(r, "name").to_string(),
            request_text,
        );
        for (i, r) in requests.iter().enumerate() {
            check_device_request(causes, &mut later, &format!("{base}.requests[{i}]"), r);
        }
    }
    if let Some(constraints) = within(
        &mut later,
        &format!("{base}.constraints"),
        arr(devices, "constraints"),
        DEVICE_REQUESTS_MAX,
    ) {
        for (i, c) in constraints.iter().enumerate() {
            let cbase = format!("{base}.constraints[{i}]");
            check_request_refs(
                causes,
                &mut later,
                devices,
                &format!("{cbase}.requests"),
                arr(c, "requests"),
            );
            let (matched, distinct) = (c.get("matchAttribute"), c.get("distinctAttribute"));
            match (matched.and_then(Value::as_str), distinct.and_then(Value::as_str)) {
                (Some(name), _) => {
                    check_fully_qualified_name(&mut later, &format!("{cbase}.matchAttribute"), name)
                }
                (None, Some(name)) => {
                    check_fully_qualified_name(&mut later, &format!("{cbase}.distinctAttribute"), name)
                }
                // kube-apiserver 1.37's wording (with consumable capacity enabled), as it is.
                (None, None) => push(
                    causes,
                    cbase,
                    "Required value: exactly one of \"matchAttribute\" or \"distinctAttribute\" is required, but multiple fields are set",
                ),
            }
        }
    }
    if let Some(configs) = within(
        &mut later,
        &format!("{base}.config"),
        arr(devices, "config"),
        DEVICE_REQUESTS_MAX,
    ) {
        for (i, c) in configs.iter().enumerate() {
            let cbase = format!("{base}.config[{i}]");
            check_request_refs(
                causes,
                &mut later,
                devices,
                &format!("{cbase}.requests"),
                arr(c, "requests"),
            );
            check_opaque_config(causes, &mut later, &cbase, c);
        }
    }
    causes.extend(later);
}

/// One request of a claim: its name, then exactly one of `exactly` and `firstAvailable`.
fn check_device_request(causes: &mut Vec<Cause>, later: &mut Vec<Cause>, rbase: &str, r: &Value) {
    check_label_format(causes, &format!("{rbase}.name"), str_of(r, "name"));
    let exactly = r.get("exactly").filter(|v| !v.is_null());
    let subs = arr(r, "firstAvailable");
    match (exactly, subs.is_empty()) {
        (Some(_), false) => push(
            causes,
            rbase,
            "Invalid value: null: exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
        ),
        (None, true) => push(
            causes,
            rbase,
            "Required value: exactly one of `exactly` or `firstAvailable` is required",
        ),
        (Some(e), true) => {
            let ebase = format!("{rbase}.exactly");
            required_subdomain(
                causes,
                &format!("{ebase}.deviceClassName"),
                str_of(e, "deviceClassName"),
            );
            check_selectors(causes, &ebase, e);
            check_allocation_mode(causes, later, &ebase, e);
        }
        (None, false) => {
            let fbase = format!("{rbase}.firstAvailable");
            let Some(subs) = within(later, &fbase, subs, FIRST_AVAILABLE_MAX) else {
                return;
            };
            declarative_duplicates(
                later,
                &fbase,
                subs,
                |s| str_of(s, "name").to_string(),
                subrequest_text,
            );
            for (j, sub) in subs.iter().enumerate() {
                let sbase = format!("{fbase}[{j}]");
                check_label_format(causes, &format!("{sbase}.name"), str_of(sub, "name"));
                required_subdomain(
                    later,
                    &format!("{sbase}.deviceClassName"),
                    str_of(sub, "deviceClassName"),
                );
                check_selectors(causes, &sbase, sub);
                check_allocation_mode(causes, later, &sbase, sub);
            }
        }
    }
}

/// A ResourceClaim.
pub fn check_resource_claim(claim: &Value, causes: &mut Vec<Cause>) {
    if let Some(devices) = claim.get("spec").and_then(|s| s.get("devices")) {
        check_device_claim(causes, "spec.devices", devices);
    }
}

/// A ResourceClaimTemplate (the claim spec is at `spec.spec`).
pub fn check_resource_claim_template(template: &Value, causes: &mut Vec<Cause>) {
    if let Some(devices) = template
        .get("spec")
        .and_then(|s| s.get("spec"))
        .and_then(|s| s.get("devices"))
    {
        check_device_claim(causes, "spec.spec.devices", devices);
    }
}

/// A DeviceClass.
pub fn check_device_class(class: &Value, causes: &mut Vec<Cause>) {
    if let Some(spec) = class.get("spec") {
        let mut later = Vec::new();
        check_selectors(causes, "spec", spec);
        let configs = within(
            &mut later,
            "spec.config",
            arr(spec, "config"),
            DEVICE_REQUESTS_MAX,
        );
        for (i, c) in configs.unwrap_or_default().iter().enumerate() {
            check_opaque_config(causes, &mut later, &format!("spec.config[{i}]"), c);
        }
        causes.extend(later);
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

/// An attribute's value: its length limits here (hand-written upstream); how many kinds of value
/// it sets goes to `later` (declarative upstream, reported after everything else).
fn check_attribute(causes: &mut Vec<Cause>, later: &mut Vec<Cause>, field: &str, attr: &Value) {
    // In the order kube-apiserver names them.
    let kinds = [
        "int", "bool", "string", "version", "ints", "bools", "strings", "versions",
    ];
    let set: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| attr.get(*k).is_some_and(|v| !v.is_null()))
        .collect();
    let all = "`int`, `bool`, `string`, `version`, `ints`, `bools`, `strings`, `versions`";
    if set.is_empty() {
        push(
            later,
            field,
            format!("Invalid value: \"\": must specify one of: {all}"),
        );
    } else if set.len() > 1 {
        push(
            later,
            field,
            format!(
                "Invalid value: \"{{{}}}\": must specify exactly one of: {all}",
                set.join(", ")
            ),
        );
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

fn quantity_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A map of counter name → `{value: quantity}` at `field`: DNS-label names (reported at the map
/// with the name), a value that is a quantity. kube-apiserver 1.37.2 accepts negative counters
/// (and capacities), so they are accepted here too.
fn check_counters(causes: &mut Vec<Cause>, field: &str, counters: Option<&Map<String, Value>>) {
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
fn check_node_selection(causes: &mut Vec<Cause>, spec: &Value) {
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
fn check_slice_devices(causes: &mut Vec<Cause>, later: &mut Vec<Cause>, spec: &Value) {
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
fn check_shared_counters(later: &mut Vec<Cause>, spec: &Value) {
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
fn check_port_name(name: &str) -> Result<(), &'static str> {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn causes(f: fn(&Value, &mut Vec<Cause>), v: Value) -> Vec<String> {
        let mut out = Vec::new();
        f(&v, &mut out);
        out.into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn claim(requests: Value) -> Value {
        json!({"spec": {"devices": {"requests": requests}}})
    }

    #[test]
    fn claim_rules() {
        let exact = |extra: Value| {
            let mut e = json!({"deviceClassName": "gpu"});
            if let (Value::Object(m), Value::Object(x)) = (&mut e, extra) {
                m.extend(x);
            }
            e
        };
        let table: Vec<(Value, Option<&str>)> = vec![
            (claim(json!([{"name": "a", "exactly": exact(json!({}))}])), None),
            (
                claim(json!([{"name": "a", "exactly": exact(json!({"allocationMode": "All", "count": 2}))}])),
                Some(
                    "spec.devices.requests[0].exactly.count: Invalid value: 2: must not be specified when allocationMode is 'All'",
                ),
            ),
            // A count of 0 is "not set" (kube-apiserver defaults it to 1), and 33 is accepted
            // there too: an allocation of more than 32 devices is refused only when written.
            (
                claim(json!([{"name": "a", "exactly": exact(json!({"count": 0}))}])),
                None,
            ),
            (
                claim(json!([{"name": "a", "exactly": exact(json!({"count": 33}))}])),
                None,
            ),
            (
                claim(json!([{"name": "a", "exactly": exact(json!({"allocationMode": "All", "count": 0}))}])),
                None,
            ),
            (
                claim(json!([{"name": "a", "exactly": exact(json!({"count": -1}))}])),
                Some("spec.devices.requests[0].exactly.count: Invalid value: -1: must be greater than zero"),
            ),
            (
                claim(
                    json!([{"name": "a", "exactly": exact(json!({}))}, {"name": "a", "exactly": exact(json!({"count": 2}))}]),
                ),
                Some(
                    r#"spec.devices.requests[1]: Duplicate value: {"name":"a","exactly":{"deviceClassName":"gpu","count":2}}"#,
                ),
            ),
            (
                claim(
                    json!([{"name": "a", "exactly": exact(json!({})), "firstAvailable": [{"name": "x", "deviceClassName": "gpu"}]}]),
                ),
                Some(
                    "spec.devices.requests[0]: Invalid value: null: exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
                ),
            ),
            (
                claim(json!([{"name": "A_b", "exactly": exact(json!({}))}])),
                Some("spec.devices.requests[0].name: Invalid value: \"A_b\""),
            ),
            (
                claim(json!([{"name": "a", "firstAvailable": [
                    {"name": "x", "deviceClassName": "gpu"}, {"name": "x", "deviceClassName": "gpu"}]}])),
                Some(
                    r#"spec.devices.requests[0].firstAvailable[1]: Duplicate value: {"name":"x","deviceClassName":"gpu"}"#,
                ),
            ),
            (
                claim(json!([{"name": "a"}])),
                Some("spec.devices.requests[0]: Required value: exactly one of"),
            ),
            (
                claim(
                    json!([{"name": "a", "exactly": exact(json!({"selectors": [{"cel": {"expression": "device.driver == "}}]}))}]),
                ),
                Some(
                    "spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value: \"device.driver == \": compilation failed",
                ),
            ),
            (
                claim(
                    json!([{"name": "a", "exactly": exact(json!({"selectors": [{"cel": {"expression": "device.driver == \"x\""}}]}))}]),
                ),
                None,
            ),
            (
                claim(Value::Array(
                    (0..33)
                        .map(|i| json!({"name": format!("r{i}"), "exactly": exact(json!({}))}))
                        .collect(),
                )),
                Some("spec.devices.requests: Too many: 33: must have at most 32 items"),
            ),
        ];
        for (v, want) in table {
            let got = causes(check_resource_claim, v.clone());
            match want {
                None => assert!(got.is_empty(), "{v}: {got:?}"),
                Some(w) => assert!(got.iter().any(|g| g.starts_with(w)), "{v}: want {w}, got {got:?}"),
            }
        }
    }

    /// Whole answers, order included, as kube-apiserver 1.37.2 gave them for the same objects
    /// (`kubectl create --dry-run=server`).
    #[test]
    fn claim_and_class_causes_come_in_kube_apiservers_order() {
        let label = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
                     and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', \
                     regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
        let subdomain = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
                         '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', \
                         regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
        let not_a_request = "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'";
        let c_ident = "a valid C identifier must start with alphabetic character or '_', followed by a string \
                       of alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex \
                       used for validation is '[A-Za-z_][A-Za-z0-9_]*')";
        let r = "spec.devices.requests";
        let cases: Vec<(Value, Vec<String>)> = vec![
            (
                claim(json!([{"name": "R", "exactly": {"deviceClassName": "gpu", "count": 0}},
                             {"name": "R", "exactly": {"deviceClassName": "", "allocationMode": "All", "count": 2}}])),
                vec![
                    format!("{r}[0].name: Invalid value: \"R\": {label}"),
                    format!("{r}[1].name: Invalid value: \"R\": {label}"),
                    format!("{r}[1].exactly.deviceClassName: Required value"),
                    format!("{r}[1].exactly.count: Invalid value: 2: must not be specified when allocationMode is 'All'"),
                    format!(
                        r#"{r}[1]: Duplicate value: {{"name":"R","exactly":{{"deviceClassName":"","allocationMode":"All","count":2}}}}"#
                    ),
                ],
            ),
            (
                claim(json!([{"name": "a", "firstAvailable": [
                    {"name": "x", "deviceClassName": "gpu"},
                    {"name": "x", "deviceClassName": "Bad_Class", "allocationMode": "Foo"}]}])),
                vec![
                    format!(
                        r#"{r}[0].firstAvailable[1]: Duplicate value: {{"name":"x","deviceClassName":"Bad_Class","allocationMode":"Foo"}}"#
                    ),
                    format!("{r}[0].firstAvailable[1].deviceClassName: Invalid value: \"Bad_Class\": {subdomain}"),
                    format!(
                        "{r}[0].firstAvailable[1].allocationMode: Unsupported value: \"Foo\": supported values: \"All\", \"ExactCount\""
                    ),
                ],
            ),
            (
                json!({"spec": {"devices": {
                    "requests": [{"name": "a", "exactly": {"deviceClassName": "gpu"}}],
                    "constraints": [{"requests": ["zz"], "matchAttribute": "bad attr"}],
                    "config": [{"requests": ["q"], "opaque": {"driver": "d.io", "parameters": "x"}}]}}}),
                vec![
                    format!("spec.devices.constraints[0].requests[0]: Invalid value: \"zz\": {not_a_request}"),
                    format!("spec.devices.config[0].requests[0]: Invalid value: \"q\": {not_a_request}"),
                    "spec.devices.config[0].opaque.parameters: Invalid value: \"<value omitted>\": must be a valid JSON object"
                        .to_string(),
                    format!("spec.devices.constraints[0].matchAttribute: Invalid value: \"bad attr\": {c_ident}"),
                    "spec.devices.constraints[0].matchAttribute: Invalid value: \"bad attr\": a fully qualified name must be a domain and a name separated by a slash".to_string(),
                ],
            ),
        ];
        for (v, want) in cases {
            assert_eq!(causes(check_resource_claim, v.clone()), want, "{v}");
        }
        let class =
            json!({"spec": {"selectors": [{}], "config": [{"opaque": {"driver": "", "parameters": {}}}]}});
        assert_eq!(
            causes(check_device_class, class),
            [
                "spec.selectors[0].cel: Required value",
                "spec.config[0].opaque.driver: Required value"
            ]
        );
    }

    #[test]
    fn template_and_class_paths() {
        let t = json!({"spec": {"spec": {"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "", "allocationMode": "Some"}}]}}}});
        let got = causes(check_resource_claim_template, t);
        assert!(
            got.contains(
                &"spec.spec.devices.requests[0].exactly.deviceClassName: Required value".to_string()
            ),
            "{got:?}"
        );
        assert!(
            got.iter().any(|g| g.starts_with(
                "spec.spec.devices.requests[0].exactly.allocationMode: Unsupported value: \"Some\""
            )),
            "{got:?}"
        );
        let c = json!({"spec": {"selectors": [{"cel": {"expression": "device.attributes["}}]}});
        let got = causes(check_device_class, c);
        assert_eq!(got.len(), 1);
        assert!(
            got[0].starts_with("spec.selectors[0].cel.expression: Invalid value"),
            "{got:?}"
        );
    }

    fn slice_of(key: &str, list: Value) -> Value {
        json!({"spec": {"driver": "gpu.example.com", "pool": {"name": "n1", "generation": 0, "resourceSliceCount": 1},
                        "nodeName": "n1", key: list}})
    }

    fn slice(devices: Value) -> Value {
        slice_of("devices", devices)
    }

    fn counter_slice(sets: Value) -> Value {
        slice_of("sharedCounters", sets)
    }

    /// Every expected message below is kube-apiserver 1.37.2's answer to the same slice
    /// (`kubectl create --dry-run=server`).
    #[test]
    fn slice_rules() {
        let ok = slice(json!([{"name": "d0",
            "attributes": {"model": {"string": "x"}, "gpu.example.com/index": {"int": 0}},
            "capacity": {"memory": {"value": "8Gi"}},
            "consumesCounters": [{"counterSet": "s", "counters": {"mem": {"value": "1Gi"}}}]}]));
        assert_eq!(causes(check_resource_slice, ok), Vec::<String>::new());
        let ok = counter_slice(json!([{"name": "s", "counters": {"mem": {"value": "8Gi"}}}]));
        assert_eq!(causes(check_resource_slice, ok), Vec::<String>::new());
        // Accepted by kube-apiserver too: negative counters and capacities, a driver name in
        // capitals, and a name with two slashes (which it leaves unchecked).
        for ok in [
            counter_slice(json!([{"name": "s", "counters": {"mem": {"value": "-1"}}}])),
            slice(
                json!([{"name": "d", "consumesCounters": [{"counterSet": "s", "counters": {"mem": {"value": "-2"}}}],
                          "capacity": {"mem": {"value": "-1"}}, "attributes": {"a/b/c": {"int": 1}}}]),
            ),
            json!({"spec": {"driver": "GPU.Example.com", "pool": {"name": "n1", "resourceSliceCount": 1},
                            "allNodes": true, "devices": []}}),
        ] {
            assert_eq!(
                causes(check_resource_slice, ok.clone()),
                Vec::<String>::new(),
                "{ok}"
            );
        }
        let table: Vec<(Value, &str)> = vec![
            (slice(json!([{"name": "d0"}, {"name": "d0"}])), "spec.devices[1]: Duplicate value: \"d0\""),
            (slice(json!([{"name": "D0"}])), "spec.devices[0].name: Invalid value: \"D0\""),
            (
                slice(json!([{"name": "d", "attributes": {"a": {"string": "x", "int": 1}}}])),
                "spec.devices[0].attributes[a]: Invalid value: \"{int, string}\": must specify exactly one of: `int`, `bool`, `string`, `version`, `ints`, `bools`, `strings`, `versions`",
            ),
            (
                slice(json!([{"name": "d", "attributes": {"a": {}}}])),
                "spec.devices[0].attributes[a]: Invalid value: \"\": must specify one of: `int`",
            ),
            (
                slice(json!([{"name": "d", "attributes": {"a": {"string": "x".repeat(65)}}}])),
                "spec.devices[0].attributes[a].string: Too long: may not be more than 64 bytes",
            ),
            (
                slice(json!([{"name": "d", "attributes": {"9bad": {"int": 1}}}])),
                "spec.devices[0].attributes: Invalid value: \"9bad\": a valid C identifier",
            ),
            (
                slice(json!([{"name": "d", "capacity": {"Bad_Domain/x": {"value": "1"}}}])),
                "spec.devices[0].capacity: Invalid value: \"Bad_Domain\": a lowercase RFC 1123 subdomain",
            ),
            (
                counter_slice(json!([{"name": "s", "counters": {"Bad": {"value": "1"}}}])),
                "spec.sharedCounters[0].counters: Invalid value: \"Bad\": a lowercase RFC 1123 label",
            ),
            (counter_slice(json!([{"name": "s", "counters": {}}])), "spec.sharedCounters[0].counters: Required value"),
            (
                counter_slice(json!([{"name": "s", "counters": {"c": {"value": "1"}}}, {"name": "s", "counters": {"c": {"value": "1"}}}])),
                r#"spec.sharedCounters[1]: Duplicate value: {"name":"s","counters":{"c":{"value":"1"}}}"#,
            ),
            (
                slice(Value::Array((0..129).map(|i| json!({"name": format!("d{i}")})).collect())),
                "spec.devices: Too many: 129: must have at most 128 items",
            ),
            (
                slice(Value::Array(
                    (0..65).map(|i| json!({"name": format!("d{i}"), "taints": [{"key": "k", "effect": "NoSchedule"}]})).collect(),
                )),
                "spec.devices: Too many: 65: must have at most 64 items",
            ),
            (
                slice(json!([{"name": "d", "attributes": (0..33).map(|i| (format!("a{i}"), json!({"int": i}))).collect::<Map<String, Value>>()}])),
                "spec.devices[0]: Invalid value: 33: the total number of attributes and capacities must not exceed 32",
            ),
            (
                json!({"spec": {"driver": "gpu.example.com", "pool": {"name": "n1", "resourceSliceCount": 1},
                                "nodeName": "n1", "devices": [], "sharedCounters": []}}),
                "spec: Invalid value: \"\": only one of `sharedCounters` or `devices` is allowed",
            ),
            (
                json!({"spec": {"driver": "gpu.example.com", "pool": {"name": "n1", "resourceSliceCount": 1}, "devices": []}}),
                "spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
            ),
            (
                json!({"spec": {"driver": "gpu.example.com", "pool": {"name": "n1", "resourceSliceCount": 1},
                                "nodeName": "n1", "allNodes": true, "devices": []}}),
                "spec: Invalid value: \"{`nodeName`, `allNodes`}\": exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set",
            ),
        ];
        for (v, want) in table {
            let got = causes(check_resource_slice, v.clone());
            assert!(
                got.iter().any(|g| g.starts_with(want)),
                "want {want}, got {got:?}"
            );
        }
        let bad_pool = json!({"spec": {"driver": "Bad_Driver", "nodeName": "n1",
                                       "pool": {"name": "n1/Bad_Part", "generation": -1, "resourceSliceCount": 0}}});
        let got = causes(check_resource_slice, bad_pool);
        let fields: Vec<&str> = got
            .iter()
            .map(|g| g.split(": ").next().unwrap_or_default())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.driver",
                "spec.pool.name",
                "spec.pool.resourceSliceCount",
                "spec.pool.generation"
            ],
            "{got:?}"
        );
        assert!(
            got[1].starts_with("spec.pool.name: Invalid value: \"Bad_Part\": a lowercase"),
            "{got:?}"
        );
        assert_eq!(
            got[3],
            "spec.pool.generation: Invalid value: -1: must be greater than or equal to zero"
        );
    }

    #[test]
    fn pod_ports() {
        let pod = json!({"spec": {"containers": [{"name": "c", "ports": [
            {"containerPort": 80, "name": "http"},
            {"containerPort": 70000},
            {"containerPort": 81, "protocol": "ICMP"},
            {"containerPort": 82, "name": "http"},
            {"name": "x"},
        ]}]}});
        let got = causes(check_pod_ports, pod);
        assert_eq!(
            got,
            [
                "spec.containers[0].ports[1].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.containers[0].ports[2].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "spec.containers[0].ports[3].name: Duplicate value: \"http\"",
                "spec.containers[0].ports[4].containerPort: Required value",
            ]
        );
        assert!(check_port_name("a-very-long-port-name").is_err());
        assert!(check_port_name("123").is_err());
        assert!(check_port_name("metrics").is_ok());
    }
}

/// kube-apiserver's `AllocatedDeviceStatusMaxConditions`.
pub const DEVICE_STATUS_CONDITIONS_MAX: usize = 8;
/// kube-apiserver's `AllocatedDeviceStatusDataMaxLength` and `OpaqueParametersMaxLength`.
pub const RAW_EXTENSION_MAX_LEN: usize = 10 * 1024;
/// kube-apiserver's `PoolNameMaxLength`.
pub const POOL_NAME_MAX_LEN: usize = 253;

/// The problems of a claim status write in the two groups kube-apiserver 1.37 reports them in:
/// the checks still written by hand in its validation code come first, in the order it walks
/// the status; the checks it has moved to declarative validation (driver and pool names of
/// allocation results, share IDs, config sources, list sizes and duplicates, the immutable
/// allocation) follow, with their own wording ("segment 1: …", "may not be more than 63
/// characters", duplicates shown as the whole entry). Observed with kubectl against
/// kube-apiserver 1.37.2.
#[derive(Debug, Default)]
pub struct StatusCauses {
    /// Hand-written checks, in walk order.
    pub plain: Vec<Cause>,
    /// Declarative checks, in the order of the status's fields (allocation, reservedFor,
    /// devices).
    pub declarative: Vec<Cause>,
}

/// The message our name checks give a name with a bad last character: upstream's pattern
/// message, which it also gives an empty name where no "required" check comes first (ours say
/// "must be non-empty" there).
fn pattern_message(check: fn(&str) -> Result<(), String>, value: &str, message: String) -> String {
    if value.is_empty() {
        check("-").err().unwrap_or(message)
    } else {
        message
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
                msg
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

/// Whether `reference` names a request of the claim, or `request/subrequest` a subrequest of
/// one of its `firstAvailable` requests.
fn names_a_request(claim: &Value, reference: &str) -> bool {
    let mut segments = reference.split('/');
    let (Some(request), sub, None) = (segments.next(), segments.next(), segments.next()) else {
        return false;
    };
    let requests = claim
        .get("spec")
        .and_then(|s| s.get("devices"))
        .map(|d| arr(d, "requests"))
        .unwrap_or_default();
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
fn check_request_ref(causes: &mut Vec<Cause>, claim: &Value, field: &str, reference: &str) {
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
    if !names_a_request(claim, reference) {
        push(
            causes,
            field,
            format!("Invalid value: {reference:?}: {NOT_A_REQUEST}"),
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

/// A new allocation result in a claim status write (`status.allocation`): at most 32 results,
/// each naming a request of the claim and a well-formed driver, pool and device; config entries
/// with a source, unique request references and opaque parameters. kube-apiserver checks a
/// result only when it is first written (a stored one can only be removed); so does the caller.
pub fn check_allocation_result(claim: &Value, allocation: &Value, causes: &mut StatusCauses) {
    let devices = allocation.get("devices").unwrap_or(&Value::Null);
    let results = arr(devices, "results");
    if results.len() > ALLOCATION_RESULTS_MAX as usize {
        // The size check stands alone: the entries are not looked at.
        too_many(
            &mut causes.declarative,
            "status.allocation.devices.results",
            results.len(),
            ALLOCATION_RESULTS_MAX as usize,
        );
    } else {
        for (i, result) in results.iter().enumerate() {
            let base = format!("status.allocation.devices.results[{i}]");
            check_request_ref(
                &mut causes.plain,
                claim,
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
    let configs = arr(devices, "config");
    if configs.len() > 2 * DEVICE_REQUESTS_MAX {
        too_many(
            &mut causes.declarative,
            "status.allocation.devices.config",
            configs.len(),
            2 * DEVICE_REQUESTS_MAX,
        );
        return;
    }
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
        let requests = arr(config, "requests");
        if requests.len() > DEVICE_REQUESTS_MAX {
            too_many(
                &mut causes.declarative,
                &format!("{base}.requests"),
                requests.len(),
                DEVICE_REQUESTS_MAX,
            );
        } else {
            let mut seen = HashSet::new();
            for (k, r) in requests.iter().enumerate() {
                let r = r.as_str().unwrap_or_default();
                let field = format!("{base}.requests[{k}]");
                check_request_ref(&mut causes.plain, claim, &field, r);
                unique(&mut causes.declarative, &mut seen, &field, r);
            }
        }
        match config.get("opaque").filter(|o| !o.is_null()) {
            None => push(&mut causes.plain, format!("{base}.opaque"), "Required value"),
            Some(opaque) => {
                check_driver_name(
                    &mut causes.declarative,
                    &format!("{base}.opaque.driver"),
                    str_of(opaque, "driver"),
                    "characters",
                );
                check_raw_object(
                    &mut causes.plain,
                    &format!("{base}.opaque.parameters"),
                    opaque.get("parameters"),
                );
            }
        }
    }
}

/// A device status entry as kube-apiserver shows a duplicate: its fields in the API's order,
/// `conditions` always, the optional ones when set.
fn device_status_text(status: &Value) -> String {
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
pub fn check_device_statuses(claim: &Value, allocation: Option<&Value>, causes: &mut StatusCauses) {
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

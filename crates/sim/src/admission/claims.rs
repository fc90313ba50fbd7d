//! ResourceClaim, ResourceClaimTemplate and DeviceClass specs: requests and subrequests,
//! selectors, allocation modes, constraints and config.

use std::sync::OnceLock;

use serde_json::Value;
use unisched_dra::cel::{CelSelectorEngine, MAX_EXPRESSION_LEN};

use super::*;

/// One engine for the process: compiled expressions are cached by text.
pub(super) fn cel_engine() -> &'static CelSelectorEngine {
    static ENGINE: OnceLock<CelSelectorEngine> = OnceLock::new();
    ENGINE.get_or_init(CelSelectorEngine::new)
}

/// Checks the selectors of a request, subrequest or class: at most 32, and each CEL expression
/// within the length limit and compilable.
pub(super) fn check_selectors(causes: &mut Vec<Cause>, base: &str, holder: &Value) {
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
pub(super) fn check_allocation_mode(
    causes: &mut Vec<Cause>,
    later: &mut Vec<Cause>,
    base: &str,
    request: &Value,
) {
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
pub(super) fn ordered_json(
    v: &Value,
    order: &[&str],
    nested: &dyn Fn(&str, &Value) -> Option<String>,
) -> String {
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
pub(super) fn subrequest_text(sub: &Value) -> String {
    ordered_json(sub, SUBREQUEST_ORDER, &|_, _| None)
}

/// A request as kube-apiserver shows a duplicate: its fields in the API's order.
pub(super) fn request_text(request: &Value) -> String {
    ordered_json(request, &["name", "exactly", "firstAvailable"], &|k, v| match k {
        "exactly" => Some(ordered_json(v, EXACT_ORDER, &|_, _| None)),
        "firstAvailable" => v.as_array().map(|subs| {
            let items: Vec<String> = subs.iter().map(subrequest_text).collect();
            format!("[{}]", items.join(","))
        }),
        _ => None,
    })
}

/// A fully qualified attribute name (`domain/id`) of a constraint, declarative upstream.
pub(super) fn check_fully_qualified_name(later: &mut Vec<Cause>, field: &str, name: &str) {
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

/// The `devices` of a claim spec at `base` (e.g. `spec.devices`), in kube-apiserver 1.37.2's
/// order and wording (checked with kubectl against it): its hand-written checks in walk order,
/// then the ones it makes declaratively (list sizes and duplicates, subrequest classes,
/// allocation modes, constraint attribute names, config drivers), lists before their entries.
pub(super) fn check_device_claim(causes: &mut Vec<Cause>, base: &str, devices: &Value) {
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
pub(super) fn check_device_request(causes: &mut Vec<Cause>, later: &mut Vec<Cause>, rbase: &str, r: &Value) {
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

//! Device taints and tolerations (KEP-5055), and applying `DeviceTaintRule`s to slices.

use k8s_openapi::api::resource::v1::{DeviceTaint, DeviceTaintRule, DeviceToleration, ResourceSlice};

/// Effects that block allocation. `None` and unknown effects are ignored.
pub fn effect_blocks_allocation(effect: &str) -> bool {
    effect == "NoSchedule" || effect == "NoExecute"
}

/// Whether one toleration tolerates one taint.
///
/// An empty effect matches every effect; an empty key (with `Exists`) matches every key; the
/// operator `Equal` (the default) compares values, `Exists` matches any value, and an unknown
/// operator matches nothing.
pub fn tolerates(toleration: &DeviceToleration, taint: &DeviceTaint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    if let Some(key) = toleration.key.as_deref().filter(|k| !k.is_empty())
        && key != taint.key
    {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "" | "Equal" => toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

/// The first taint of `taints` that blocks allocation and is not tolerated, if any.
pub fn untolerated_taint<'a>(
    taints: &'a [DeviceTaint],
    tolerations: &[DeviceToleration],
) -> Option<&'a DeviceTaint> {
    taints.iter().find(|taint| {
        effect_blocks_allocation(&taint.effect) && !tolerations.iter().any(|t| tolerates(t, taint))
    })
}

/// Adds the taints of the matching `DeviceTaintRule`s to the devices of a slice, as if the driver
/// had published them. A rule without a device selector matches nothing; an empty selector
/// matches every device. Rules are applied in the order given; a taint already present with the
/// same key, value and effect is not duplicated.
pub fn apply_device_taint_rules(slice: &mut ResourceSlice, rules: &[DeviceTaintRule]) {
    let driver = slice.spec.driver.clone();
    let pool = slice.spec.pool.name.clone();
    for device in slice.spec.devices.iter_mut().flatten() {
        for rule in rules {
            let Some(sel) = &rule.spec.device_selector else {
                continue;
            };
            let matches = sel.driver.as_ref().is_none_or(|d| *d == driver)
                && sel.pool.as_ref().is_none_or(|p| *p == pool)
                && sel.device.as_ref().is_none_or(|d| *d == device.name);
            if !matches {
                continue;
            }
            let taint = &rule.spec.taint;
            let taints = device.taints.get_or_insert_with(Vec::new);
            if !taints
                .iter()
                .any(|t| t.key == taint.key && t.value == taint.value && t.effect == taint.effect)
            {
                taints.push(taint.clone());
            }
        }
    }
}

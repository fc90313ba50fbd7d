//! The PersistentVolume fields checked here: `volumeAttributesClassName`, which kube-apiserver
//! accepts only as a valid class name and only on a CSI volume (only a CSI driver can apply or
//! change a volume's attributes).

use serde_json::Value;

use super::*;

/// A PV's `spec.volumeAttributesClassName`: when present, not empty, a DNS subdomain, and the PV
/// a CSI volume.
pub fn check_persistent_volume(pv: &Value, causes: &mut Vec<Cause>) {
    let Some(spec) = pv.get("spec") else { return };
    let Some(class) = spec.get("volumeAttributesClassName").and_then(Value::as_str) else {
        return;
    };
    let field = "spec.volumeAttributesClassName";
    if class.is_empty() {
        push(causes, field, "Required value: an empty string is disallowed");
    } else if let Err(msg) = check_dns_subdomain(class) {
        push(causes, field, format!("Invalid value: {class:?}: {msg}"));
    }
    if spec.get("csi").is_none_or(Value::is_null) {
        push(
            causes,
            "spec.csi",
            "Required value: has to be specified when using volumeAttributesClassName",
        );
    }
}

//! The `extenders` entries of `KubeSchedulerConfiguration` v1, with upstream's field names and
//! validation: a prioritizer needs a positive weight, at most one extender binds, and a managed
//! resource belongs to one extender. (That each managed resource is an extended resource name is
//! checked where the name syntax lives, with the plugin args.)

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::config::GoDuration;

/// How the scheduler reaches one extender and which verbs it offers; an empty verb is not called.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Extender {
    /// The URL the verbs are appended to (`http://host:port/scheduler`).
    #[serde(rename = "urlPrefix")]
    pub url_prefix: String,
    /// The filter verb.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub filter_verb: String,
    /// The preempt verb.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub preempt_verb: String,
    /// The prioritize verb.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub prioritize_verb: String,
    /// What the prioritize scores are multiplied by; positive when there is a prioritize verb.
    #[serde(skip_serializing_if = "is_zero")]
    pub weight: i64,
    /// The bind verb: the extender then binds the pods it is interested in.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub bind_verb: String,
    /// Speak HTTPS; without a CA in `tlsConfig` the server's certificate is not verified (as
    /// upstream).
    #[serde(rename = "enableHTTPS", skip_serializing_if = "is_false")]
    pub enable_https: bool,
    /// TLS settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_config: Option<ExtenderTlsConfig>,
    /// The limit on one call, connection and answer included; `0s` means 5 s.
    #[serde(rename = "httpTimeout")]
    pub http_timeout: GoDuration,
    /// Send node names only: the extender keeps its own node cache.
    #[serde(skip_serializing_if = "is_false")]
    pub node_cache_capable: bool,
    /// Extended resources the extender manages; when set, only pods requesting one of them are
    /// sent to it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub managed_resources: Vec<ExtenderManagedResource>,
    /// Scheduling goes on without the extender when it fails or cannot be reached.
    #[serde(skip_serializing_if = "is_false")]
    pub ignorable: bool,
}

/// An extended resource an extender manages.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ExtenderManagedResource {
    /// The resource name.
    pub name: String,
    /// NodeResourcesFit does not check the resource (the extender does).
    #[serde(skip_serializing_if = "is_false")]
    pub ignored_by_scheduler: bool,
}

/// TLS settings for an extender. Data fields are base64 in the file (Go's `[]byte`) and take
/// precedence over the files.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ExtenderTlsConfig {
    /// Do not verify the server's certificate (testing only).
    #[serde(skip_serializing_if = "is_false")]
    pub insecure: bool,
    /// The name the server's certificate is checked against (and sent as SNI).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub server_name: String,
    /// Client certificate file (PEM).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cert_file: String,
    /// Client key file (PEM).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub key_file: String,
    /// Trusted CA file (PEM).
    #[serde(rename = "caFile", skip_serializing_if = "String::is_empty")]
    pub ca_file: String,
    /// Client certificate (base64 of PEM).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cert_data: String,
    /// Client key (base64 of PEM).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub key_data: String,
    /// Trusted CAs (base64 of PEM).
    #[serde(rename = "caData", skip_serializing_if = "String::is_empty")]
    pub ca_data: String,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// Upstream's checks of the `extenders` list, as `field: Invalid value: …` lines.
pub(crate) fn validate_extenders(extenders: &[Extender], errs: &mut Vec<String>) {
    let mut binders = 0usize;
    let mut managed = BTreeSet::new();
    for (i, extender) in extenders.iter().enumerate() {
        if !extender.prioritize_verb.is_empty() && extender.weight <= 0 {
            errs.push(format!(
                "extenders[{i}].weight: Invalid value: {}: must have a positive weight applied to it",
                extender.weight
            ));
        }
        if !extender.bind_verb.is_empty() {
            binders += 1;
        }
        for (j, resource) in extender.managed_resources.iter().enumerate() {
            if !managed.insert(resource.name.as_str()) {
                errs.push(format!(
                    "extenders[{i}].managedResources[{j}].name: Invalid value: {:?}: duplicate extender managed resource name",
                    resource.name
                ));
            }
        }
    }
    if binders > 1 {
        errs.push(format!(
            "extenders: Invalid value: \"found {binders} extenders implementing bind\": only one extender can implement bind"
        ));
    }
}

/// The managed resources NodeResourcesFit must not check, in configuration order.
pub fn ignored_extended_resources(extenders: &[Extender]) -> Vec<String> {
    extenders
        .iter()
        .flat_map(|e| &e.managed_resources)
        .filter(|r| r.ignored_by_scheduler)
        .map(|r| r.name.clone())
        .collect()
}

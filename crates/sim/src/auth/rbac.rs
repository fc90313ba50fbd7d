//! `SubjectAccessReview` answered from the RBAC objects in the store.
//!
//! The evaluation follows RBAC's rules: a ClusterRoleBinding grants its ClusterRole's rules
//! everywhere (resource rules in every namespace and cluster-wide, non-resource URLs such as
//! `/metrics`); a RoleBinding grants its Role's or ClusterRole's resource rules in its own
//! namespace only. A subject matches by user name, by group, or as a ServiceAccount
//! (`system:serviceaccount:<namespace>:<name>`). `*` matches any verb, group, resource or URL, and a
//! URL ending in `*` matches by prefix. Members of `system:masters` are allowed everything.
//!
//! What is left out: aggregated ClusterRoles (`aggregationRule`) are not aggregated (their own
//! `rules` count), and RBAC never denies, so neither does this: the answer is allowed or "no
//! opinion" (`allowed: false`, no `denied`), which the reviewer treats as forbidden.

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};

use crate::store::Store;

/// The group kube-apiserver allows everything.
pub const MASTERS_GROUP: &str = "system:masters";

/// The answer to a review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessDecision {
    /// Whether a rule allows the request.
    pub allowed: bool,
    /// Which binding allowed it, or why nothing did.
    pub reason: String,
}

/// Decides `spec` by the RBAC objects stored in `store`.
pub fn authorize(store: &Store, spec: &SubjectAccessReviewSpec) -> AccessDecision {
    let user = spec.user.as_deref().unwrap_or_default();
    let groups = spec.groups.as_deref().unwrap_or_default();
    if groups.iter().any(|g| g == MASTERS_GROUP) {
        return allowed(format!("group {MASTERS_GROUP} is allowed everything"));
    }
    let cluster_bindings: Vec<ClusterRoleBinding> = decode_all(store, "clusterrolebindings", None);
    for binding in &cluster_bindings {
        if !binding_names(binding.subjects.as_deref(), "", user, groups) {
            continue;
        }
        let Some(rules) = cluster_role_rules(store, &binding.role_ref) else {
            continue;
        };
        if rules.iter().any(|r| rule_allows(r, spec)) {
            return allowed(format!(
                "ClusterRoleBinding {:?} of ClusterRole {:?} allows {user:?}",
                binding.metadata.name.as_deref().unwrap_or_default(),
                binding.role_ref.name
            ));
        }
    }
    // RoleBindings grant resource rules in their namespace, never non-resource URLs.
    if let Some(attributes) = &spec.resource_attributes
        && let Some(namespace) = attributes.namespace.as_deref().filter(|ns| !ns.is_empty())
    {
        let bindings: Vec<RoleBinding> = decode_all(store, "rolebindings", Some(namespace));
        for binding in &bindings {
            if !binding_names(binding.subjects.as_deref(), namespace, user, groups) {
                continue;
            }
            let rules = match binding.role_ref.kind.as_str() {
                "Role" => store
                    .try_get("roles", Some(namespace), &binding.role_ref.name)
                    .and_then(|o| o.decode::<Role>().ok())
                    .map(|r| r.rules.unwrap_or_default()),
                _ => cluster_role_rules(store, &binding.role_ref),
            };
            let resource_rules_allow = rules
                .unwrap_or_default()
                .iter()
                .any(|r| resource_rule_allows(r, attributes));
            if resource_rules_allow {
                return allowed(format!(
                    "RoleBinding {namespace}/{:?} of {} {:?} allows {user:?}",
                    binding.metadata.name.as_deref().unwrap_or_default(),
                    binding.role_ref.kind,
                    binding.role_ref.name
                ));
            }
        }
    }
    AccessDecision {
        allowed: false,
        reason: format!("no RBAC rule bound to {user:?} or its groups allows this request"),
    }
}

fn allowed(reason: String) -> AccessDecision {
    AccessDecision {
        allowed: true,
        reason,
    }
}

/// Every stored object of `resource` that decodes (the store only holds objects that do).
fn decode_all<T: serde::de::DeserializeOwned>(
    store: &Store,
    resource: &str,
    namespace: Option<&str>,
) -> Vec<T> {
    store
        .list_all(resource, namespace)
        .unwrap_or_default()
        .iter()
        .filter_map(|o| o.decode().ok())
        .collect()
}

fn cluster_role_rules(store: &Store, role_ref: &RoleRef) -> Option<Vec<PolicyRule>> {
    if role_ref.kind != "ClusterRole" {
        return None;
    }
    store
        .try_get("clusterroles", None, &role_ref.name)
        .and_then(|o| o.decode::<ClusterRole>().ok())
        .map(|r| r.rules.unwrap_or_default())
}

/// Whether one of `subjects` is the user or one of its groups. A ServiceAccount subject of a
/// RoleBinding without a namespace is in the binding's namespace.
pub fn binding_names(
    subjects: Option<&[Subject]>,
    binding_namespace: &str,
    user: &str,
    groups: &[String],
) -> bool {
    subjects
        .unwrap_or_default()
        .iter()
        .any(|s| match s.kind.as_str() {
            "User" => s.name == user,
            "Group" => groups.contains(&s.name),
            "ServiceAccount" => {
                let namespace = s
                    .namespace
                    .as_deref()
                    .filter(|ns| !ns.is_empty())
                    .unwrap_or(binding_namespace);
                user == format!("system:serviceaccount:{namespace}:{}", s.name)
            }
            _ => false,
        })
}

/// Whether `rule` allows the request of `spec` (resource or non-resource).
pub fn rule_allows(rule: &PolicyRule, spec: &SubjectAccessReviewSpec) -> bool {
    match (&spec.non_resource_attributes, &spec.resource_attributes) {
        (Some(attributes), _) => non_resource_rule_allows(rule, attributes),
        (None, Some(attributes)) => resource_rule_allows(rule, attributes),
        (None, None) => false,
    }
}

fn has(list: Option<&[String]>, wanted: &str) -> bool {
    list.unwrap_or_default().iter().any(|x| x == "*" || x == wanted)
}

fn non_resource_rule_allows(rule: &PolicyRule, attributes: &NonResourceAttributes) -> bool {
    let path = attributes.path.as_deref().unwrap_or_default();
    let verb = attributes.verb.as_deref().unwrap_or_default();
    rule.verbs.iter().any(|v| v == "*" || v == verb)
        && rule
            .non_resource_urls
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|url| match url.strip_suffix('*') {
                Some(prefix) => path.starts_with(prefix),
                None => url == path,
            })
}

fn resource_rule_allows(rule: &PolicyRule, attributes: &ResourceAttributes) -> bool {
    let resource = attributes.resource.as_deref().unwrap_or_default();
    if resource.is_empty() {
        return false;
    }
    let resource = match attributes.subresource.as_deref().filter(|s| !s.is_empty()) {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.to_string(),
    };
    let name = attributes.name.as_deref().unwrap_or_default();
    let names = rule.resource_names.as_deref().unwrap_or_default();
    rule.verbs
        .iter()
        .any(|v| v == "*" || Some(v.as_str()) == attributes.verb.as_deref())
        && has(
            rule.api_groups.as_deref(),
            attributes.group.as_deref().unwrap_or_default(),
        )
        && has(rule.resources.as_deref(), &resource)
        && (names.is_empty() || names.iter().any(|n| n == name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> SubjectAccessReviewSpec {
        serde_json::from_value(value).unwrap()
    }

    fn rule(value: serde_json::Value) -> PolicyRule {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let metrics = rule(json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]}));
        let debug = rule(json!({"nonResourceURLs": ["/debug/*"], "verbs": ["*"]}));
        let get =
            |path: &str| spec(json!({"user": "u", "nonResourceAttributes": {"path": path, "verb": "get"}}));
        assert!(rule_allows(&metrics, &get("/metrics")));
        assert!(!rule_allows(&metrics, &get("/metrics/slis")));
        assert!(!rule_allows(
            &metrics,
            &spec(json!({"nonResourceAttributes": {"path": "/metrics", "verb": "post"}}))
        ));
        assert!(rule_allows(&debug, &get("/debug/pprof/profile")));
        assert!(!rule_allows(&debug, &get("/metrics")));
    }

    #[test]
    fn resource_rules_match_group_resource_subresource_verb_and_name() {
        let bind = rule(json!({"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}));
        let lease = rule(
            json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "resourceNames": ["unisched"], "verbs": ["get", "patch"]}),
        );
        let ask =
            |attributes: serde_json::Value| spec(json!({"user": "u", "resourceAttributes": attributes}));
        assert!(rule_allows(
            &bind,
            &ask(json!({"verb": "create", "resource": "pods", "subresource": "binding"}))
        ));
        assert!(!rule_allows(
            &bind,
            &ask(json!({"verb": "create", "resource": "pods"}))
        ));
        assert!(rule_allows(
            &lease,
            &ask(json!({"verb": "patch", "group": "coordination.k8s.io",
            "resource": "leases", "name": "unisched"}))
        ));
        assert!(!rule_allows(
            &lease,
            &ask(json!({"verb": "patch", "group": "coordination.k8s.io",
            "resource": "leases", "name": "other"}))
        ));
        // A resource rule never grants a URL, and a URL rule never grants a resource.
        assert!(!rule_allows(
            &bind,
            &spec(json!({"nonResourceAttributes": {"path": "/metrics", "verb": "get"}}))
        ));
    }

    #[test]
    fn subjects_match_users_groups_and_service_accounts() {
        let subjects: Vec<Subject> = serde_json::from_value(json!([
            {"kind": "User", "name": "alice"},
            {"kind": "Group", "name": "monitors"},
            {"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"},
            {"kind": "ServiceAccount", "name": "local"},
        ]))
        .unwrap();
        let names = |user: &str, groups: &[&str], ns: &str| {
            let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
            binding_names(Some(&subjects), ns, user, &groups)
        };
        assert!(names("alice", &[], ""));
        assert!(names("bob", &["monitors"], ""));
        assert!(names("system:serviceaccount:monitoring:prometheus", &[], ""));
        assert!(names("system:serviceaccount:apps:local", &[], "apps"));
        assert!(!names("system:serviceaccount:other:prometheus", &[], ""));
        assert!(!names("bob", &["system:authenticated"], ""));
    }
}

//! May this user do this: the authorizers of delegated authorization.
//!
//! The scheduler has no RBAC of its own; it asks the API server with a `SubjectAccessReview`
//! (authorization.k8s.io/v1) for the non-resource path and verb, exactly as for a request made to
//! the API server itself, so a `ClusterRole` with `nonResourceURLs: ["/metrics"]` grants scraping.
//! Answers are cached (allowed and denied each for their own TTL). Two shortcuts come first:
//! always-allowed paths (probes) and the `system:masters` group, which upstream never reviews either.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};

use crate::{
    authn::{BoxFuture, UserInfo, post},
    cache::TtlCache,
};

/// The group whose members are allowed everything without a review.
pub const PRIVILEGED_GROUP: &str = "system:masters";

/// An authorizer's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The request may proceed.
    Allow,
    /// The request is refused; the next authorizer is not asked.
    Deny {
        /// Why, when the authorizer said (appended to the 403 message).
        reason: String,
    },
    /// This authorizer does not decide; the next one is asked.
    NoOpinion {
        /// Why, when the authorizer said.
        reason: String,
    },
}

/// Why no decision could be made (answered with 500, as upstream does).
#[derive(Debug, thiserror::Error)]
pub enum AuthzError {
    /// The `SubjectAccessReview` could not be made.
    #[error("subject access review: {0}")]
    SubjectAccessReview(#[source] kube::Error),
}

/// What is being authorized: a user, a verb and a non-resource path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    /// Who asks.
    pub user: UserInfo,
    /// The verb of a non-resource request: the HTTP method in lower case (`get`, `head`, `put`).
    pub verb: String,
    /// The request path, without the query.
    pub path: String,
}

/// The verb of a request for a non-resource path, as kube-scheduler's request-info resolver
/// names it: the HTTP method in lower case. Every path the scheduler serves is a non-resource
/// path (its resolver knows no API prefix), so `PUT /debug/flags/v` needs `put` on that URL, as
/// RBAC's non-resource rules spell it, not the `update` of a resource request.
pub fn verb_of(method: &http::Method) -> String {
    method.as_str().to_ascii_lowercase()
}

/// One source of authorization decisions.
pub trait Authorizer: Send + Sync {
    /// The decision for `attributes`.
    fn authorize<'a>(&'a self, attributes: &'a Attributes) -> BoxFuture<'a, Result<Decision, AuthzError>>;
}

/// Paths that need no authorization (`--authorization-always-allow-paths`); their requests are
/// still authenticated, so wrong credentials are refused there too, as upstream does.
/// An entry ending in `*` allows every path that starts with what precedes the `*`.
#[derive(Clone, Debug, Default)]
pub struct AlwaysAllowPaths {
    exact: Vec<String>,
    prefixes: Vec<String>,
}

impl AlwaysAllowPaths {
    /// The paths as given on the command line.
    pub fn new<S: AsRef<str>>(paths: &[S]) -> Self {
        let mut allowed = AlwaysAllowPaths::default();
        for path in paths {
            let path = path.as_ref().trim();
            if path.is_empty() {
                continue;
            }
            match path.strip_suffix('*') {
                Some(prefix) => allowed.prefixes.push(prefix.to_string()),
                None => allowed.exact.push(path.to_string()),
            }
        }
        allowed
    }

    /// True when `path` is always allowed.
    pub fn matches(&self, path: &str) -> bool {
        self.exact.iter().any(|p| p == path) || self.prefixes.iter().any(|p| path.starts_with(p.as_str()))
    }
}

/// Members of any of the groups are allowed everything.
#[derive(Clone, Debug)]
pub struct PrivilegedGroups(pub Vec<String>);

impl Authorizer for PrivilegedGroups {
    fn authorize<'a>(&'a self, attributes: &'a Attributes) -> BoxFuture<'a, Result<Decision, AuthzError>> {
        let privileged = attributes.user.groups.iter().any(|g| self.0.contains(g));
        Box::pin(async move {
            Ok(if privileged {
                Decision::Allow
            } else {
                Decision::NoOpinion {
                    reason: String::new(),
                }
            })
        })
    }
}

/// Asks the API server with a `SubjectAccessReview`.
pub struct SubjectAccessReviewAuthorizer {
    client: kube::Client,
    /// Keyed by the review's spec in JSON: user, groups, extra, uid, path and verb.
    cache: TtlCache<String, Decision>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
}

impl SubjectAccessReviewAuthorizer {
    /// Reviews with `client`; allowed answers are kept `allowed_ttl`, the others `denied_ttl`.
    pub fn new(client: kube::Client, allowed_ttl: Duration, denied_ttl: Duration) -> Self {
        SubjectAccessReviewAuthorizer {
            client,
            cache: TtlCache::default(),
            allowed_ttl,
            denied_ttl,
        }
    }

    fn spec(attributes: &Attributes) -> SubjectAccessReviewSpec {
        let user = &attributes.user;
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
        SubjectAccessReviewSpec {
            user: non_empty(&user.name),
            uid: non_empty(&user.uid),
            groups: (!user.groups.is_empty()).then(|| user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(attributes.path.clone()),
                verb: Some(attributes.verb.clone()),
            }),
            resource_attributes: None,
        }
    }

    async fn review(&self, spec: SubjectAccessReviewSpec) -> Result<Decision, AuthzError> {
        let review = SubjectAccessReview {
            spec,
            ..SubjectAccessReview::default()
        };
        let reviewed: SubjectAccessReview = post(
            &self.client,
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &review,
        )
        .await
        .map_err(AuthzError::SubjectAccessReview)?;
        let status = reviewed.status.unwrap_or_default();
        let reason = status.reason.unwrap_or_default();
        Ok(if status.allowed {
            Decision::Allow
        } else if status.denied == Some(true) {
            Decision::Deny { reason }
        } else {
            Decision::NoOpinion { reason }
        })
    }
}

impl Authorizer for SubjectAccessReviewAuthorizer {
    fn authorize<'a>(&'a self, attributes: &'a Attributes) -> BoxFuture<'a, Result<Decision, AuthzError>> {
        Box::pin(async move {
            let spec = Self::spec(attributes);
            let key = serde_json::to_string(&spec).ok();
            if let Some(decision) = key.as_ref().and_then(|k| self.cache.get(k)) {
                return Ok(decision);
            }
            let decision = self.review(spec).await?;
            if let Some(key) = key {
                let ttl = if decision == Decision::Allow {
                    self.allowed_ttl
                } else {
                    self.denied_ttl
                };
                self.cache.insert(key, decision.clone(), ttl);
            }
            Ok(decision)
        })
    }
}

/// Asks authorizers in order until one allows or denies. Errors matter only when none decides.
#[derive(Default)]
pub struct UnionAuthorizer {
    authorizers: Vec<Arc<dyn Authorizer>>,
}

impl UnionAuthorizer {
    /// Asks `authorizers` in order.
    pub fn new(authorizers: Vec<Arc<dyn Authorizer>>) -> Self {
        UnionAuthorizer { authorizers }
    }
}

impl Authorizer for UnionAuthorizer {
    fn authorize<'a>(&'a self, attributes: &'a Attributes) -> BoxFuture<'a, Result<Decision, AuthzError>> {
        Box::pin(async move {
            let mut first_error = None;
            let mut reasons = Vec::new();
            for authorizer in &self.authorizers {
                match authorizer.authorize(attributes).await {
                    Ok(Decision::NoOpinion { reason }) => {
                        if !reason.is_empty() {
                            reasons.push(reason);
                        }
                    }
                    Ok(decided) => return Ok(decided),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            match first_error {
                Some(e) => Err(e),
                None => Ok(Decision::NoOpinion {
                    reason: reasons.join("; "),
                }),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn always_allowed_paths_match_exactly_or_by_prefix() {
        let paths = AlwaysAllowPaths::new(&["/healthz", "/readyz", "/livez", "/debug/*"]);
        assert!(paths.matches("/healthz"));
        assert!(paths.matches("/debug/pprof"));
        assert!(!paths.matches("/healthz/extra"));
        assert!(!paths.matches("/metrics"));
        assert!(!AlwaysAllowPaths::new::<&str>(&[]).matches("/healthz"));
    }

    #[test]
    fn verbs_are_named_like_the_api_server_names_them() {
        assert_eq!(verb_of(&http::Method::GET), "get");
        assert_eq!(verb_of(&http::Method::HEAD), "head");
        assert_eq!(verb_of(&http::Method::POST), "post");
        assert_eq!(verb_of(&http::Method::PUT), "put");
        assert_eq!(verb_of(&http::Method::OPTIONS), "options");
    }
}

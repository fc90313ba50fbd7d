//! The authentication and authorization endpoints of a delegating component's API server:
//! `TokenRequest` (a ServiceAccount's `token` subresource), `TokenReview` and
//! `SubjectAccessReview`. The decisions are [`crate::auth`]'s; this module is their HTTP side.
//!
//! Like kube-apiserver, the reviews are create-only, stored nowhere, and answered with 201 and the
//! request's object with its `status` filled in.

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use k8s_openapi::api::authentication::v1::{
    TokenRequest, TokenRequestStatus, TokenReview, TokenReviewStatus, UserInfo,
};
use k8s_openapi::api::authorization::v1::{SubjectAccessReview, SubjectAccessReviewStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::handlers::{AppState, error_response, json_value, parse_body};
use crate::auth::tokens::{DEFAULT_EXPIRATION_SECONDS, MIN_EXPIRATION_SECONDS, granted_audiences};
use crate::auth::{TokenUser, authorize};
use crate::error::StoreError;
use crate::util::now;

fn decode<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
    kind: &str,
) -> Result<T, StoreError> {
    let value = parse_body(headers, body)?;
    serde_json::from_value(value).map_err(|e| StoreError::BadRequest(format!("decoding the {kind}: {e}")))
}

fn created<T: serde::Serialize>(object: &T) -> Response {
    match serde_json::to_value(object) {
        Ok(v) => json_value(StatusCode::CREATED, &v),
        Err(e) => error_response(&StoreError::BadRequest(format!("encoding the answer: {e}"))),
    }
}

fn answer<T: serde::Serialize>(result: Result<T, StoreError>) -> Response {
    match result {
        Ok(object) => created(&object),
        Err(e) => error_response(&e),
    }
}

/// `POST /api/v1/namespaces/<namespace>/serviceaccounts/<name>/token`.
pub(crate) fn token_request(
    app: &AppState,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    answer(issue(app, namespace, name, headers, body))
}

fn issue(
    app: &AppState,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<TokenRequest, StoreError> {
    let account = app.store.get("serviceaccounts", Some(namespace), name)?;
    let mut request: TokenRequest = if body.is_empty() {
        TokenRequest::default()
    } else {
        decode(headers, body, "TokenRequest")?
    };
    let spec = request.spec.get_or_insert_with(Default::default);
    let lifetime = spec.expiration_seconds.unwrap_or(DEFAULT_EXPIRATION_SECONDS);
    if lifetime < MIN_EXPIRATION_SECONDS {
        return Err(StoreError::BadRequest(format!(
            "spec.expirationSeconds: {lifetime} is shorter than the minimum of {MIN_EXPIRATION_SECONDS} seconds"
        )));
    }
    let user = TokenUser::service_account(namespace, name, account.uid());
    let issued = app
        .tokens
        .issue(user, spec.audiences.clone().unwrap_or_default(), lifetime, now());
    spec.audiences = Some(issued.audiences.clone());
    spec.expiration_seconds = Some(lifetime);
    request.metadata.name = Some(name.to_string());
    request.metadata.namespace = Some(namespace.to_string());
    request.status = Some(TokenRequestStatus {
        token: Some(issued.token),
        expiration_timestamp: Some(Time(issued.expires)),
    });
    Ok(request)
}

/// `POST /apis/authentication.k8s.io/v1/tokenreviews`.
pub(crate) fn token_review(app: &AppState, headers: &HeaderMap, body: &[u8]) -> Response {
    answer(
        decode::<TokenReview>(headers, body, "TokenReview").map(|mut review| {
            review.status = Some(review_status(app, &review));
            review
        }),
    )
}

fn review_status(app: &AppState, review: &TokenReview) -> TokenReviewStatus {
    let unauthenticated = |error: &str| TokenReviewStatus {
        authenticated: Some(false),
        error: Some(error.to_string()),
        ..TokenReviewStatus::default()
    };
    let Some(token) = app.tokens.lookup(&review.spec.token, now()) else {
        return unauthenticated("the token was not issued by this server or has expired");
    };
    // Deleting (or re-creating) the ServiceAccount revokes its tokens.
    let account_uid = app
        .store
        .try_get(
            "serviceaccounts",
            Some(&token.user.namespace),
            &token.user.service_account,
        )
        .map(|o| o.uid().to_string());
    if account_uid.as_deref() != Some(token.user.uid.as_str()) {
        return unauthenticated("the token's service account no longer exists");
    }
    let audiences = granted_audiences(&token, review.spec.audiences.as_deref().unwrap_or_default());
    if audiences.is_empty() {
        return unauthenticated("the token is not valid for the requested audiences");
    }
    TokenReviewStatus {
        authenticated: Some(true),
        audiences: Some(audiences),
        user: Some(UserInfo {
            username: Some(token.user.username),
            uid: Some(token.user.uid),
            groups: Some(token.user.groups),
            extra: None,
        }),
        error: None,
    }
}

/// `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`.
pub(crate) fn subject_access_review(app: &AppState, headers: &HeaderMap, body: &[u8]) -> Response {
    answer(
        decode::<SubjectAccessReview>(headers, body, "SubjectAccessReview").and_then(|mut review| {
            let spec = &review.spec;
            if spec.resource_attributes.is_some() == spec.non_resource_attributes.is_some() {
                return Err(StoreError::BadRequest(
                    "spec: exactly one of resourceAttributes and nonResourceAttributes must be set"
                        .to_string(),
                ));
            }
            if spec.user.as_deref().unwrap_or_default().is_empty()
                && spec.groups.as_deref().unwrap_or_default().is_empty()
            {
                return Err(StoreError::BadRequest(
                    "spec: user or groups must be set".to_string(),
                ));
            }
            let decision = authorize(&app.store, spec);
            review.status = Some(SubjectAccessReviewStatus {
                allowed: decision.allowed,
                reason: Some(decision.reason),
                ..SubjectAccessReviewStatus::default()
            });
            Ok(review)
        }),
    )
}

//! The refusals, as `Status` objects like the API server's own: clients and humans that know
//! kube-scheduler's answers (`curl -k https://…:10259/metrics`) read the same thing here.

use axum::response::{IntoResponse, Response};
use http::StatusCode;

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {},
        "code": code.as_u16(),
    });
    (
        code,
        [(http::header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}

/// 401: the credentials were wrong.
pub fn unauthorized() -> Response {
    status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized")
}

/// The 403 message: `forbidden: User "<name>" cannot <verb> path "<path>"`, with the authorizer's
/// reason after a colon when it gave one.
pub fn forbidden_message(user: &str, verb: &str, path: &str, reason: &str) -> String {
    let mut message = format!("forbidden: User \"{user}\" cannot {verb} path \"{path}\"");
    if !reason.is_empty() {
        message.push_str(": ");
        message.push_str(reason);
    }
    message
}

/// 403: authenticated, but not allowed.
pub fn forbidden(message: &str) -> Response {
    status(StatusCode::FORBIDDEN, "Forbidden", message)
}

/// 500: no authorization decision could be had.
pub fn internal_error() -> Response {
    status(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        "Internal Server Error: authorization failed",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_messages_read_like_upstream() {
        assert_eq!(
            forbidden_message("system:serviceaccount:ns:name", "get", "/metrics", ""),
            "forbidden: User \"system:serviceaccount:ns:name\" cannot get path \"/metrics\""
        );
        assert_eq!(
            forbidden_message("u", "get", "/configz", "no RBAC policy matched"),
            "forbidden: User \"u\" cannot get path \"/configz\": no RBAC policy matched"
        );
    }
}

//! `/debug/flags/v` when `enableProfiling` is set: `PUT` a number to change the log verbosity of
//! the running scheduler, as kube-scheduler's klog verbosity can be changed there (for example
//! `curl -X PUT --data 4 …/debug/flags/v` while chasing a problem, then back to 2).
//!
//! The answers are upstream's: `successfully set klog.logging.verbosity to N`, a 400 with the
//! parse error for anything but an unsigned number, 406 `unsupported http method` for other
//! methods. `/debug/flags/` lists the one flag. Served only on the HTTPS router, so a `PUT`
//! needs the `put` verb on the non-resource URL `/debug/flags/v`.

use axum::{
    Router,
    body::Bytes,
    http::{Method, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{any, get},
};

/// The routes.
pub(crate) fn router() -> Router {
    Router::new()
        .route("/debug/flags", get(index))
        .route("/debug/flags/", get(index))
        .route("/debug/flags/v", any(verbosity))
}

async fn index() -> Response {
    let html = "<html>\n<head>\n<title>/debug/flags/</title>\n</head>\n<body>\n/debug/flags/<br>\n<br>\n\
                flags:<br>\n<table>\n<tr>v<br>\n</table>\n<br>\nfull flags configurable<br>\n</body>\n</html>\n";
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

fn plain_text(status: StatusCode, text: &str) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        format!("{text}\n"),
    )
        .into_response()
}

/// A `PUT` body that is not a verbosity (upstream's message, which is Go's parse error).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("strconv.ParseUint: parsing {text:?}: invalid syntax")]
struct InvalidVerbosity {
    text: String,
}

/// The verbosity a `PUT` body asks for: an unsigned 32-bit number, nothing around it, as klog
/// parses it (values above 255 mean the same as 255: everything is logged from 5 on).
fn parse_verbosity(body: &str) -> Result<u8, InvalidVerbosity> {
    body.parse::<u32>()
        .map(|v| u8::try_from(v).unwrap_or(u8::MAX))
        .map_err(|_| InvalidVerbosity {
            text: body.to_string(),
        })
}

async fn verbosity(method: Method, body: Bytes) -> Response {
    if method != Method::PUT {
        return plain_text(StatusCode::NOT_ACCEPTABLE, "unsupported http method");
    }
    let text = String::from_utf8_lossy(&body);
    let level = match parse_verbosity(&text) {
        Ok(level) => level,
        Err(error) => return plain_text(StatusCode::BAD_REQUEST, &error.to_string()),
    };
    match unisched_logging::set_verbosity(level) {
        Ok(()) => {
            tracing::info!(verbosity = level, "log verbosity changed through /debug/flags/v");
            plain_text(
                StatusCode::OK,
                &format!("successfully set klog.logging.verbosity to {text}"),
            )
        }
        Err(error) => plain_text(StatusCode::BAD_REQUEST, &error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn call(method: Method, path: &str, body: &str) -> (StatusCode, String) {
        let request = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .body(axum::body::Body::from(body.to_string()))
            .unwrap();
        let response = tower::ServiceExt::oneshot(router(), request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[test]
    fn verbosity_parses_like_klog() {
        assert_eq!(parse_verbosity("4"), Ok(4));
        assert_eq!(parse_verbosity("300"), Ok(255));
        assert_eq!(
            parse_verbosity("four").unwrap_err().to_string(),
            r#"strconv.ParseUint: parsing "four": invalid syntax"#
        );
        assert!(parse_verbosity("-1").is_err());
        assert!(parse_verbosity("4\n").is_err(), "nothing around the number");
    }

    #[tokio::test]
    async fn only_put_changes_the_verbosity() {
        assert_eq!(
            call(Method::GET, "/debug/flags/v", "").await,
            (
                StatusCode::NOT_ACCEPTABLE,
                "unsupported http method\n".to_string()
            )
        );
        let (status, body) = call(Method::PUT, "/debug/flags/v", "x").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        // The test process installed no subscriber through unisched_logging: the change is
        // refused and says why (the binary's `init` installs it).
        let (status, body) = call(Method::PUT, "/debug/flags/v", "4").await;
        assert_eq!(
            (status, body.as_str()),
            (
                StatusCode::BAD_REQUEST,
                "logging was not initialised by unisched\n"
            )
        );
        let (status, index) = call(Method::GET, "/debug/flags/", "").await;
        assert_eq!(status, StatusCode::OK);
        assert!(index.contains("<tr>v<br>"), "{index}");
    }
}

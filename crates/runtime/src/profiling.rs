//! kube-scheduler's `/debug/pprof/` endpoints when `enableProfiling` is set, as far as a Rust
//! process can honestly serve them:
//!
//! - `/debug/pprof/profile?seconds=N`: a CPU profile of the whole process for N seconds (default
//!   30, as Go's handler), in pprof's protobuf format, so `go tool pprof https://…/debug/pprof/profile`
//!   works as it does against kube-scheduler.
//! - `/debug/pprof/cmdline`: the command line, arguments separated by NUL bytes, as Go's.
//! - `/debug/pprof/`: an index of those two (`/debug/pprof` redirects there, as upstream).
//! - Everything else under `/debug/pprof/` (`symbol`, `trace`, `heap`, `goroutine`, …) is a Go
//!   runtime facility without an equivalent here: 404, with a body that says so, rather than
//!   something that only looks like it.
//!
//! Off by default, unlike upstream (whose default is on): sampling signals every thread, and the
//! endpoint is an operating surface an operator should ask for. It is only added to the router
//! served over HTTPS, behind the same authorization as `/metrics`.

use std::time::Duration;

use axum::{
    Router,
    extract::{Path, Query},
    http::{StatusCode, header},
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use serde::Deserialize;

/// Go's default profile length.
const DEFAULT_SECONDS: u64 = 30;
/// Samples per second, as Go's CPU profiler.
const FREQUENCY: i32 = 100;

/// Why no profile could be taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProfileError {
    /// The profiler could not start (another profile is running) or report.
    #[error("Could not enable CPU profiling: {0}")]
    Profiler(#[source] pprof::Error),
    /// The profiling thread ended without a profile.
    #[error("the profiling thread failed")]
    Join(#[source] tokio::task::JoinError),
}

#[derive(Debug, Deserialize)]
struct ProfileQuery {
    seconds: Option<String>,
}

/// The profiling routes.
pub(crate) fn router() -> Router {
    Router::new()
        .route("/debug/pprof", get(|| async { Redirect::to("/debug/pprof/") }))
        .route("/debug/pprof/", get(index))
        .route("/debug/pprof/profile", get(profile_handler))
        .route("/debug/pprof/cmdline", get(cmdline))
        .route("/debug/pprof/{*name}", get(unknown_profile))
}

/// What the index lists: (name, what it is).
const PROFILES: [(&str, &str); 2] = [
    (
        "cmdline",
        "The command line invocation of the current program, arguments separated by NUL bytes.",
    ),
    (
        "profile",
        "CPU profile. You can specify the duration in the seconds GET parameter. After you get the \
         profile file, use the go tool pprof command to investigate the profile.",
    ),
];

async fn index() -> Response {
    let mut html = String::from(
        "<html>\n<head>\n<title>/debug/pprof/</title>\n</head>\n<body>\n/debug/pprof/\n<br>\n\
         <p>Set debug=1 as a query parameter to export in legacy text format</p>\n<br>\n\
         Types of profiles available:\n<table>\n",
    );
    for (name, _) in PROFILES {
        html.push_str(&format!(
            "<tr><td></td><td><a href='{name}'>{name}</a></td></tr>\n"
        ));
    }
    html.push_str("</table>\n<br>\nProfile Descriptions:\n<ul>\n");
    for (name, description) in PROFILES {
        html.push_str(&format!(
            "<li><div class=profile-name>{name}: </div> {description}</li>\n"
        ));
    }
    html.push_str(
        "</ul>\n<p>Go runtime profiles (symbol, trace, heap, goroutine, allocs, block, mutex, \
         threadcreate) have no equivalent in this Rust process and are not served.</p>\n</body>\n</html>\n",
    );
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

/// The process's arguments joined by NUL bytes, as Go's `cmdline` handler.
async fn cmdline() -> Response {
    let arguments: Vec<String> = std::env::args().collect();
    (
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        arguments.join("\0"),
    )
        .into_response()
}

/// The 404 of everything Go serves under `/debug/pprof/` that has no Rust equivalent.
async fn unknown_profile(Path(name): Path<String>) -> Response {
    (
        StatusCode::NOT_FOUND,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        format!(
            "Unknown profile: {name} is a Go runtime profile with no equivalent in unisched; \
             /debug/pprof/profile (CPU) and /debug/pprof/cmdline are served\n"
        ),
    )
        .into_response()
}

async fn profile_handler(Query(query): Query<ProfileQuery>) -> Response {
    let seconds = match query.seconds.as_deref().map(str::parse::<u64>) {
        None => DEFAULT_SECONDS,
        Some(Ok(0)) => DEFAULT_SECONDS,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            return (StatusCode::BAD_REQUEST, "invalid value for \"seconds\"\n").into_response();
        }
    };
    match cpu_profile(Duration::from_secs(seconds)).await {
        Ok(body) => (
            [
                (header::CONTENT_TYPE, "application/octet-stream"),
                (header::CONTENT_DISPOSITION, "attachment; filename=\"profile\""),
            ],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// Samples the process for `length` on a blocking thread and encodes the profile.
pub(crate) async fn cpu_profile(length: Duration) -> Result<Vec<u8>, ProfileError> {
    tokio::task::spawn_blocking(move || {
        let guard = pprof::ProfilerGuardBuilder::default()
            .frequency(FREQUENCY)
            .blocklist(&["libc", "libgcc", "pthread", "vdso"])
            .build()
            .map_err(ProfileError::Profiler)?;
        std::thread::sleep(length);
        let report = guard.report().build().map_err(ProfileError::Profiler)?;
        let profile = report.pprof().map_err(ProfileError::Profiler)?;
        Ok(pprof::protos::Message::encode_to_vec(&profile))
    })
    .await
    .map_err(ProfileError::Join)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_profile_is_pprof_protobuf() {
        // Some work to sample.
        let spin = std::thread::spawn(|| {
            let began = std::time::Instant::now();
            let mut x = 0u64;
            while began.elapsed() < Duration::from_millis(1200) {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
            }
            x
        });
        let body = cpu_profile(Duration::from_secs(1)).await.unwrap();
        spin.join().unwrap();
        let profile: pprof::protos::Profile = pprof::protos::Message::decode(body.as_slice()).unwrap();
        assert!(!profile.sample_type.is_empty());
        assert!(
            profile.string_table.iter().any(|s| s == "cpu" || s == "samples"),
            "{:?}",
            profile.string_table
        );
    }

    async fn get_path(path: &str) -> (StatusCode, Option<String>, String) {
        let request = axum::http::Request::get(path)
            .body(axum::body::Body::empty())
            .unwrap();
        let response = tower::ServiceExt::oneshot(router(), request).await.unwrap();
        let status = response.status();
        let location = response
            .headers()
            .get(header::LOCATION)
            .map(|v| v.to_str().unwrap().to_string());
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, location, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn the_index_lists_what_is_served_and_go_only_profiles_are_404() {
        let (status, location, _) = get_path("/debug/pprof").await;
        assert!(status.is_redirection(), "{status}");
        assert_eq!(location.as_deref(), Some("/debug/pprof/"));
        let (status, _, index) = get_path("/debug/pprof/").await;
        assert_eq!(status, StatusCode::OK);
        assert!(index.contains("<a href='profile'>profile</a>"), "{index}");
        assert!(index.contains("<a href='cmdline'>cmdline</a>"), "{index}");
        let (status, _, cmdline) = get_path("/debug/pprof/cmdline").await;
        assert_eq!(status, StatusCode::OK);
        let expected: Vec<String> = std::env::args().collect();
        assert_eq!(cmdline.split('\0').collect::<Vec<_>>(), expected);
        for name in [
            "symbol",
            "trace",
            "heap",
            "goroutine",
            "allocs",
            "block",
            "mutex",
            "threadcreate",
        ] {
            let (status, _, body) = get_path(&format!("/debug/pprof/{name}")).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{name}");
            assert!(
                body.starts_with(&format!("Unknown profile: {name} is a Go runtime profile")),
                "{body}"
            );
        }
    }

    #[tokio::test]
    async fn a_bad_length_is_refused() {
        let response = profile_handler(Query(ProfileQuery {
            seconds: Some("soon".into()),
        }))
        .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }
}

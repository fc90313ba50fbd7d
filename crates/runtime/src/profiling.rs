//! `/debug/pprof/profile?seconds=N` when `enableProfiling` is set: a CPU profile of the whole
//! process for N seconds (default 30, as Go's handler), in pprof's protobuf format, so
//! `go tool pprof https://…/debug/pprof/profile` works as it does against kube-scheduler.
//!
//! Off by default, unlike upstream (whose default is on): sampling signals every thread, and the
//! endpoint is an operating surface an operator should ask for. It is only added to the router
//! served over HTTPS, behind the same authorization as `/metrics`.

use std::time::Duration;

use axum::{
    Router,
    extract::Query,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
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
    Router::new().route("/debug/pprof/profile", get(profile_handler))
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

    #[tokio::test]
    async fn a_bad_length_is_refused() {
        let response = profile_handler(Query(ProfileQuery {
            seconds: Some("soon".into()),
        }))
        .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }
}

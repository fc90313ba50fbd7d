//! client-go's REST client metrics for the kube client: `rest_client_requests_total{code,method,host}`
//! and `rest_client_request_duration_seconds{verb,host}`.
//!
//! A tower layer on the client's HTTP service, so every request counts: watches and lists of the
//! informers, the writer's patches and binds, leases. The collectors are process-wide (as client-go's
//! legacy registry) because the client exists before the scheduler that owns a [`crate::Metrics`]; every
//! `Metrics` registry exports them. A long-lived watch is counted when its response headers arrive.

use std::{
    future::Future,
    pin::Pin,
    sync::LazyLock,
    task::{Context, Poll},
    time::Instant,
};

use kube::{Client, Config};
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

struct RestMetrics {
    requests: IntCounterVec,
    duration: HistogramVec,
}

/// client-go's buckets for request latency.
const DURATION_BUCKETS: [f64; 12] = [0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0];

static REST: LazyLock<Result<RestMetrics, prometheus::Error>> = LazyLock::new(|| {
    Ok(RestMetrics {
        requests: IntCounterVec::new(
            Opts::new(
                "rest_client_requests_total",
                "Number of HTTP requests, partitioned by status code, method, and host.",
            ),
            &["code", "method", "host"],
        )?,
        duration: HistogramVec::new(
            HistogramOpts::new(
                "rest_client_request_duration_seconds",
                "Request latency in seconds. Broken down by verb, and host.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["verb", "host"],
        )?,
    })
});

/// Registers the process-wide REST client collectors in `registry`.
pub(crate) fn register(registry: &Registry) -> Result<(), prometheus::Error> {
    match &*REST {
        Ok(m) => {
            registry.register(Box::new(m.requests.clone()))?;
            registry.register(Box::new(m.duration.clone()))
        }
        Err(e) => Err(prometheus::Error::Msg(e.to_string())),
    }
}

/// Records one finished request (`code` is the HTTP status, or `<error>` when none came back).
fn record(method: &str, host: &str, code: &str, secs: f64) {
    if let Ok(m) = &*REST {
        m.requests.with_label_values(&[code, method, host]).inc();
        m.duration.with_label_values(&[method, host]).observe(secs);
    }
}

/// The tower layer that instruments a kube client's service.
#[derive(Clone, Copy, Debug, Default)]
pub struct RestClientMetricsLayer;

impl<S> tower::Layer<S> for RestClientMetricsLayer {
    type Service = RestClientMetricsService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RestClientMetricsService { inner }
    }
}

/// See [`RestClientMetricsLayer`].
#[derive(Clone, Debug)]
pub struct RestClientMetricsService<S> {
    inner: S,
}

impl<S, B, R> tower::Service<http::Request<B>> for RestClientMetricsService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = req.method().as_str().to_string();
        let host = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        let start = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let out = fut.await;
            let code = match &out {
                Ok(resp) => resp.status().as_u16().to_string(),
                Err(_) => "<error>".to_string(),
            };
            record(&method, &host, &code, start.elapsed().as_secs_f64());
            out
        })
    }
}

/// A kube client for `config` whose requests are counted in the REST client metrics.
pub fn instrumented_client(config: Config) -> Result<Client, kube::Error> {
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(builder.with_layer(&RestClientMetricsLayer).build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer, Service};

    /// A service answering every request with the status its path names.
    #[derive(Clone)]
    struct Answer;
    impl Service<http::Request<()>> for Answer {
        type Response = http::Response<()>;
        type Error = String;
        type Future = std::future::Ready<Result<http::Response<()>, String>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), String>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: http::Request<()>) -> Self::Future {
            let path = req.uri().path().trim_start_matches('/').to_string();
            std::future::ready(match path.parse::<u16>() {
                Ok(code) => http::Response::builder()
                    .status(code)
                    .body(())
                    .map_err(|e| e.to_string()),
                Err(_) => Err("connection refused".into()),
            })
        }
    }

    #[tokio::test]
    async fn counts_requests_by_code_method_and_host() {
        let registry = Registry::new();
        register(&registry).unwrap();
        let mut svc = RestClientMetricsLayer.layer(Answer);
        let host = "layer-test.invalid:6443";
        for (method, path) in [
            ("GET", "/200"),
            ("PATCH", "/409"),
            ("GET", "/200"),
            ("POST", "/down"),
        ] {
            let req = http::Request::builder()
                .method(method)
                .uri(format!("https://{host}{path}"))
                .body(())
                .unwrap();
            let _ = svc.call(req).await;
        }
        let m = REST.as_ref().unwrap();
        assert_eq!(m.requests.with_label_values(&["200", "GET", host]).get(), 2);
        assert_eq!(m.requests.with_label_values(&["409", "PATCH", host]).get(), 1);
        assert_eq!(m.requests.with_label_values(&["<error>", "POST", host]).get(), 1);
        assert_eq!(m.duration.with_label_values(&["GET", host]).get_sample_count(), 2);
        let text = {
            use prometheus::Encoder;
            let mut buf = Vec::new();
            prometheus::TextEncoder::new()
                .encode(&registry.gather(), &mut buf)
                .unwrap();
            String::from_utf8(buf).unwrap()
        };
        assert!(
            text.contains(&format!(
                "rest_client_request_duration_seconds_bucket{{host=\"{host}\",verb=\"GET\",le=\"0.005\"}}"
            )),
            "{text}"
        );
    }
}

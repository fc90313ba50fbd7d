//! Scaffolding shared by the runtime's integration tests: an embedded API server on a free port,
//! a client for it, and polling until a condition holds.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use unisched_sim::{ApiServer, RunningServer};

/// The embedded API server with its default settings, listening on a free local port.
pub async fn serve() -> RunningServer {
    ApiServer::builder()
        .build()
        .serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

/// A client for `server`.
pub fn client(server: &RunningServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

/// Polls `f` every 20 ms until it holds; fails the test after `timeout`.
pub async fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

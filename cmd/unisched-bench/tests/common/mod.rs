//! Helpers for tests that run the real `unisched-bench` binary (and the `unisched` binary it
//! starts as `unisched run`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::PathBuf,
    process::Child,
    time::{Duration, Instant},
};

/// The binary under test: the one cargo built with the tests, or `unisched-bench` in
/// `UNISCHED_RELEASE_DIR` when that is set (the real-control-plane tier in CI runs the release
/// build, whose `unisched` is then the one next to it).
pub fn bench_bin() -> PathBuf {
    match std::env::var_os("UNISCHED_RELEASE_DIR") {
        Some(dir) => {
            let path = PathBuf::from(dir).join("unisched-bench");
            assert!(path.exists(), "UNISCHED_RELEASE_DIR has no {}", path.display());
            path
        }
        None => PathBuf::from(env!("CARGO_BIN_EXE_unisched-bench")),
    }
}

/// The `unisched` binary next to the one under test: what `unisched-bench` runs as
/// `unisched run` by default. Cargo builds it with this test when both packages are tested
/// together (`cargo nextest run -p unisched -p unisched-bench-cli`, or `--workspace`); a test
/// that needs it fails, rather than skips, when it is missing.
pub fn unisched_bin() -> PathBuf {
    let path = bench_bin().with_file_name("unisched");
    assert!(
        path.exists(),
        "{} is missing: test this package together with unisched \
         (cargo nextest run -p unisched -p unisched-bench-cli) or build it first \
         (cargo build --bin unisched)",
        path.display()
    );
    path
}

/// A fresh temporary directory for one test.
pub fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("unisched-e2e-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Kills the child when dropped, so a failing test leaves nothing running.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `f` every 100 ms until it returns `Some` or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

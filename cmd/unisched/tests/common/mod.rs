//! Helpers for tests that run the real `unisched` binary.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// A TCP port free on 127.0.0.1 at the time of the call (for the binary's metrics address).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The binary under test: the one cargo built with the tests, or `unisched` in
/// `UNISCHED_RELEASE_DIR` when that is set (the real-control-plane tier in CI runs the release
/// build that the image ships).
pub fn bin() -> PathBuf {
    match std::env::var_os("UNISCHED_RELEASE_DIR") {
        Some(dir) => {
            let path = PathBuf::from(dir).join("unisched");
            assert!(path.exists(), "UNISCHED_RELEASE_DIR has no {}", path.display());
            path
        }
        None => PathBuf::from(env!("CARGO_BIN_EXE_unisched")),
    }
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

/// Starts `unisched sim <scenario> --serve --kubeconfig-out <dir>/kubeconfig [extra]` and waits
/// for the kubeconfig to appear.
pub fn serve(dir: &Path, scenario: &Path, extra: &[&str]) -> (ChildGuard, PathBuf) {
    let kc = dir.join("kubeconfig");
    let child = Command::new(bin())
        .arg("sim")
        .arg(scenario)
        .args(["--serve", "--kubeconfig-out"])
        .arg(&kc)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let guard = ChildGuard(child);
    wait_for(Duration::from_secs(60), || kc.exists().then_some(())).expect("kubeconfig written");
    (guard, kc)
}

/// Runs kubectl with a kubeconfig; returns (success, stdout, stderr).
pub fn kubectl(kc: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kc)
        .args(args)
        .output()
        .expect("kubectl on PATH");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One node with the given allocatable cpu and memory.
pub fn node_yaml(name: &str, cpu: &str, memory: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\nstatus:\n  allocatable: {{cpu: \"{cpu}\", memory: {memory}, pods: \"110\"}}\n  capacity: {{cpu: \"{cpu}\", memory: {memory}, pods: \"110\"}}\n"
    )
}

/// A pod for unisched with a cpu request.
pub fn pod_yaml(name: &str, cpu: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  schedulerName: unisched\n  containers: [{{name: c, image: registry.example/app:1, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]\n"
    )
}

/// Runs `unisched sim <paths> -o json [extra]`; returns the parsed report and the exit code
/// (0: settled, 3: a step did not settle in time).
pub fn sim_json(paths: &[&Path], extra: &[&str]) -> (serde_json::Value, i32) {
    let out = Command::new(bin())
        .arg("sim")
        .args(paths)
        .args(["-o", "json"])
        .args(extra)
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}), exit {code}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (v, code)
}

/// Like [`serve`], but with `-o json` and stdout captured: returns the guard, the kubeconfig and
/// the report printed after the scenario settled (the kubeconfig is written after the report).
pub fn serve_with_report(
    dir: &Path,
    scenario: &Path,
    extra: &[&str],
    timeout: Duration,
) -> (ChildGuard, PathBuf, serde_json::Value) {
    serve_with_report_of(&bin(), dir, scenario, extra, timeout)
}

/// [`serve_with_report`] with another `unisched` binary (say, the release build).
pub fn serve_with_report_of(
    binary: &Path,
    dir: &Path,
    scenario: &Path,
    extra: &[&str],
    timeout: Duration,
) -> (ChildGuard, PathBuf, serde_json::Value) {
    let kc = dir.join("kubeconfig");
    let report = dir.join("report.json");
    let child = Command::new(binary)
        .arg("sim")
        .arg(scenario)
        .args(["-o", "json", "--serve", "--kubeconfig-out"])
        .arg(&kc)
        .args(extra)
        .stdout(std::fs::File::create(&report).unwrap())
        .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let mut guard = ChildGuard(child);
    wait_for(timeout, || {
        if kc.exists() {
            return Some(());
        }
        if let Ok(Some(status)) = guard.0.try_wait() {
            panic!(
                "unisched sim exited early ({status}): {}",
                std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default()
            );
        }
        None
    })
    .expect("scenario settled and kubeconfig written");
    let v = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).expect("JSON report");
    (guard, kc, v)
}

/// One HTTP request seen by a [`RecordingProxy`]: when the proxy read its request line, the
/// method and the path (without the query).
#[derive(Clone, Debug)]
pub struct SeenRequest {
    pub at: Instant,
    pub method: String,
    pub path: String,
}

/// A plain-HTTP TCP proxy in front of the embedded API server that records every request line a
/// client sends, so a test can tell which process wrote what and when (the embedded server keeps
/// no audit log). Give each process its own proxy (and kubeconfig, see
/// [`RecordingProxy::kubeconfig`]) to attribute requests to it. Bytes pass through unchanged.
pub struct RecordingProxy {
    pub port: u16,
    seen: std::sync::Arc<parking_lot::Mutex<Vec<SeenRequest>>>,
}

impl RecordingProxy {
    /// Listens on a free port and forwards every connection to `upstream` (`host:port`).
    pub fn start(upstream: &str) -> Self {
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let log = seen.clone();
        let upstream = upstream.to_string();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let (mut c_read, mut s_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (mut s_read, mut c_write) = (server, client);
                let log = log.clone();
                std::thread::spawn(move || copy_recording(&mut c_read, &mut s_write, &log));
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut s_read, &mut c_write);
                    let _ = c_write.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        RecordingProxy { port, seen }
    }

    /// Every request seen so far.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.seen.lock().clone()
    }

    /// A kubeconfig in `dir` (file `kubeconfig-<port>`) that points at this proxy.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join(format!("kubeconfig-{}", self.port));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"http://127.0.0.1:{}\"}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u, namespace: default}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n",
                self.port
            ),
        )
        .unwrap();
        path
    }
}

/// The method and path of an HTTP/1 request line at the end of `line`. A body need not end with a
/// newline, so the next request line may follow it on the same "line"; JSON bodies never end in
/// ` HTTP/1.1`, so this finds every request on a keep-alive stream.
fn request_line(line: &str) -> Option<(String, String)> {
    let line = line.trim_end_matches('\r');
    let rest = line
        .strip_suffix(" HTTP/1.1")
        .or_else(|| line.strip_suffix(" HTTP/1.0"))?;
    ["GET", "POST", "PUT", "PATCH", "DELETE"]
        .iter()
        .filter_map(|m| {
            let at = rest.rfind(&format!("{m} /"))?;
            let path = &rest[at + m.len() + 1..];
            (!path.contains(' ')).then(|| (at, m.to_string(), path.to_string()))
        })
        .max_by_key(|(at, _, _)| *at)
        .map(|(_, m, p)| (m, p.split('?').next().unwrap_or_default().to_string()))
}

/// Copies `from` to `to`, recording every request line it carries (see [`request_line`]).
fn copy_recording(
    from: &mut std::net::TcpStream,
    to: &mut std::net::TcpStream,
    log: &parking_lot::Mutex<Vec<SeenRequest>>,
) {
    use std::io::{Read, Write};
    let mut buf = [0u8; 16 * 1024];
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let at = Instant::now();
        for &b in &buf[..n] {
            if b == b'\n' {
                if let Some((method, path)) = request_line(&String::from_utf8_lossy(&line)) {
                    log.lock().push(SeenRequest { at, method, path });
                }
                line.clear();
            } else if line.len() < 8192 {
                line.push(b);
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// `host:port` of the server in a kubeconfig written by `unisched sim --serve`.
pub fn server_address(kc: &Path) -> String {
    let text = std::fs::read_to_string(kc).unwrap();
    let url = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .expect("a server in the kubeconfig")
        .trim()
        .trim_matches('"');
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}

//! What external mode starts must not outlive it.
//!
//! `unisched-bench --external` starts processes that are not its children in the kernel's sense of
//! "dies with me": `control-plane start` daemonises etcd, kube-apiserver and
//! kube-controller-manager (pid files in the run's directory), and each scheduler under test is a
//! child process. Drop guards stop them when a run ends, but a signal ends the process without
//! running destructors, and a user who presses Ctrl-C (or a CI job that times out and sends
//! SIGTERM) used to find a whole control plane still running and holding ports.
//!
//! Every such process and control plane is registered here for as long as it lives; on SIGTERM,
//! SIGINT or SIGHUP a watcher thread kills the registered processes, runs `control-plane stop` for
//! every registered directory, and exits with 128 + the signal number, as a shell reports a
//! process ended by that signal.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::atomic::{AtomicU64, Ordering},
};

use parking_lot::Mutex;

/// Registered processes and control planes, by registration number.
#[derive(Default)]
struct Registry {
    processes: BTreeMap<u64, u32>,
    control_planes: BTreeMap<u64, (PathBuf, PathBuf)>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    processes: BTreeMap::new(),
    control_planes: BTreeMap::new(),
});
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Keeps one process or control plane registered; dropping it unregisters (the owner stopped it).
#[derive(Debug)]
#[must_use = "the registration ends when the guard is dropped"]
pub struct Registered(u64);

impl Drop for Registered {
    fn drop(&mut self) {
        let mut r = REGISTRY.lock();
        r.processes.remove(&self.0);
        r.control_planes.remove(&self.0);
    }
}

/// Registers a process to kill if a signal ends this one.
pub fn process(pid: u32) -> Registered {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    REGISTRY.lock().processes.insert(id, pid);
    Registered(id)
}

/// Registers a control plane (`script stop dir`) to stop if a signal ends this process. Register
/// it before `start` runs: a signal during start must stop what start already launched.
pub fn control_plane(script: &Path, dir: &Path) -> Registered {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    REGISTRY
        .lock()
        .control_planes
        .insert(id, (script.to_path_buf(), dir.to_path_buf()));
    Registered(id)
}

/// Kills every registered process, then stops every registered control plane; returns what it
/// stopped, as (process ids, control-plane directories). The registry is left empty.
pub fn stop_all() -> (Vec<u32>, Vec<PathBuf>) {
    let Registry {
        processes,
        control_planes,
    } = std::mem::take(&mut *REGISTRY.lock());
    let pids: Vec<u32> = processes.into_values().collect();
    for pid in &pids {
        // SIGKILL: a scheduler or a `control-plane start` script being torn down has nothing to
        // flush, and its exit must not wait on the API server that is stopped next.
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let mut dirs = Vec::new();
    for (script, dir) in control_planes.into_values() {
        let _ = Command::new(&script)
            .arg("stop")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status();
        dirs.push(dir);
    }
    (pids, dirs)
}

/// Starts the watcher thread: on SIGTERM, SIGINT or SIGHUP it stops everything registered and
/// exits the process with 128 + the signal number. Call once, before anything is started.
pub fn stop_all_on_signals() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    // Install the handlers now, so a signal that arrives before the thread runs is not lost.
    let mut handlers = Vec::new();
    {
        let _guard = rt.enter();
        for (kind, number) in [
            (SignalKind::terminate(), 15),
            (SignalKind::interrupt(), 2),
            (SignalKind::hangup(), 1),
        ] {
            handlers.push((signal(kind)?, number));
        }
    }
    std::thread::Builder::new()
        .name("bench-signals".into())
        .spawn(move || {
            let number = rt.block_on(async move {
                let waits = handlers.iter_mut().map(|(s, n)| {
                    let n = *n;
                    Box::pin(async move {
                        s.recv().await;
                        n
                    })
                });
                futures::future::select_all(waits).await.0
            });
            eprintln!("[bench] signal {number}: stopping the schedulers and control planes it started");
            let (pids, dirs) = stop_all();
            eprintln!(
                "[bench] stopped {} process(es) and {} control plane(s)",
                pids.len(),
                dirs.len()
            );
            std::process::exit(128 + number);
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_all_kills_registered_processes_and_stops_control_planes_but_not_released_ones() {
        let dir = std::env::temp_dir().join(format!("leftovers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A control-plane script that records each `stop DIR` it is asked for.
        let script = dir.join("control-plane");
        std::fs::write(&script, "#!/bin/sh\necho \"$1 $2\" >> \"$2/calls\"\n").unwrap();
        let mut perms = std::fs::metadata(&script).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&script, perms).unwrap();
        let (kept, released) = (dir.join("kept"), dir.join("released"));
        std::fs::create_dir_all(&kept).unwrap();
        std::fs::create_dir_all(&released).unwrap();

        let mut victim = Command::new("sleep").arg("600").spawn().unwrap();
        let mut survivor = Command::new("sleep").arg("600").spawn().unwrap();
        let _victim_guard = process(victim.id());
        let _plane_guard = control_plane(&script, &kept);
        drop(process(survivor.id()));
        drop(control_plane(&script, &released));

        let (pids, dirs) = stop_all();
        assert_eq!(pids, vec![victim.id()]);
        assert_eq!(dirs, vec![kept.clone()]);
        let status = victim.wait().unwrap();
        assert!(!status.success(), "the registered process was killed: {status}");
        assert_eq!(
            std::fs::read_to_string(kept.join("calls")).unwrap().trim(),
            format!("stop {}", kept.display())
        );
        assert!(
            !released.join("calls").exists(),
            "a released control plane is left alone"
        );
        assert!(
            survivor.try_wait().unwrap().is_none(),
            "a released process is left alone"
        );
        // Nothing is stopped twice.
        assert_eq!(stop_all(), (vec![], vec![]));
        survivor.kill().unwrap();
        survivor.wait().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

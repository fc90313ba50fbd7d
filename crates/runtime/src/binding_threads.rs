//! The threads that run binding cycles, and how synchronous code on them reaches the API server.
//!
//! The scheduling core is synchronous: PreBind and Bind plugins call the plugins' API traits
//! (`DraApi`, `VolumeApi`, `Binder`) and wait for the answer. A binding cycle therefore runs on a
//! thread of its own (a PreBind may wait minutes for a volume), and each write it makes used to be
//! a hand-off: the binding thread queued the request for the I/O runtime, slept, and the I/O
//! worker woke up to send it, woke up again for the reply, and woke the binding thread. Three
//! writes per DRA pod made that six wake-ups of the I/O worker and three of the binding thread;
//! profiles of the real-control-plane benchmark put the thread switches alone at about a seventh
//! of the scheduler's CPU.
//!
//! A cycle whose plugins can express all their waiting as API writes does not come here: it
//! runs as futures on the I/O runtime (`async_binding` in the framework; the scheduler decides
//! per pod). What comes here are the cycles that may wait otherwise (Permit, volume binding,
//! binding conditions, the KEP-5004 claim's creation) and the undo of a failed write.
//!
//! [`BindingThreads`] is the pool those cycles run on. With a client configuration
//! each thread opens its own connection to the API server, driven by a single-threaded runtime
//! on the thread itself: a write is sent and its reply read by the thread that waits for it, and
//! the I/O runtime never hears of it. Without (the embedded simulator, where the API server
//! shares the I/O runtime), the threads wait on the I/O runtime as before.
//!
//! The pool grows with demand, like tokio's blocking pool and unlike a fixed set of workers: a
//! cycle may wait long (Permit, volume binding), and one such wait must never hold up another
//! pod's binding. A thread idle for the keep-alive period exits and closes its connection; the
//! most recently idle thread is reused first, so a steady load keeps a few warm threads. While
//! idle, a thread keeps driving its runtime, so a connection the server closes is noticed before
//! the next write is sent on it.
//!
//! [`SyncWriter`] is what the synchronous callers hold: an [`ApiWriter`] plus the I/O runtime's
//! handle. [`SyncWriter::run`] picks the thread's own connection when there is one and the shared
//! client otherwise, so the same plugin code works from the scheduling thread (Unreserve after a
//! failed Reserve), from a binding thread, and in tests. The limits are the writer's either way:
//! the token bucket, the leader fence, retries and metrics are shared by every connection.

use std::{
    cell::RefCell,
    collections::VecDeque,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::Arc,
    time::Duration,
};

use kube::Client;
use parking_lot::Mutex;
use tokio::{
    runtime::{Handle, Runtime},
    sync::oneshot,
};

use crate::writer::ApiWriter;

/// A binding cycle (or anything else the pool runs).
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

/// How long an idle binding thread waits for work before it exits (tokio's blocking pool uses
/// the same period).
pub const BINDING_THREAD_KEEP_ALIVE: Duration = Duration::from_secs(10);

/// At most this many binding threads at once (tokio's blocking pool has the same default bound);
/// past it, cycles wait in a queue for the next thread that finishes.
pub const MAX_BINDING_THREADS: usize = 512;

/// Linux keeps 15 bytes of a thread's name; this one starts like the I/O runtime's threads so
/// CPU accounting by thread name counts binding cycles as scheduler I/O, as before.
const THREAD_NAME: &str = "unisched-io-bind";

thread_local! {
    /// Set on binding threads for their lifetime.
    static THREAD_IO: RefCell<Option<ThreadIo>> = const { RefCell::new(None) };
}

/// A binding thread's own runtime, and its own client when the pool opens connections.
struct ThreadIo {
    runtime: Runtime,
    client: Option<Client>,
}

impl ThreadIo {
    fn new(connect: Option<&kube::Config>) -> std::io::Result<ThreadIo> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let client = match connect {
            Some(config) => {
                // The client's connection tasks are spawned on the runtime it is built in.
                let _in_runtime = runtime.enter();
                match crate::rest_client::instrumented_client(config.clone()) {
                    Ok(c) => Some(c),
                    Err(e) => {
                        tracing::warn!(error = %e, "binding thread: no connection of its own; using the shared one");
                        None
                    }
                }
            }
            None => None,
        };
        Ok(ThreadIo { runtime, client })
    }
}

/// An [`ApiWriter`] for synchronous callers (see the module documentation).
#[derive(Clone, Debug)]
pub struct SyncWriter {
    writer: ApiWriter,
    handle: Handle,
}

impl SyncWriter {
    /// Writes through `writer`; off the binding threads, waits on `handle`'s runtime.
    pub fn new(writer: ApiWriter, handle: Handle) -> Self {
        SyncWriter { writer, handle }
    }

    /// Runs `op` and waits for its result. On a binding thread with a connection of its own,
    /// `op` gets this writer with that thread's client and runs on that thread; anywhere else it
    /// gets this writer and runs on the I/O runtime's handle. Must not be called from inside a
    /// runtime's worker (as any `block_on`).
    pub fn run<T>(&self, op: impl AsyncFnOnce(&ApiWriter) -> T) -> T {
        THREAD_IO.with(|io| {
            let io = io.borrow();
            // `Runtime::block_on`, not its handle's: only the former drives a single-threaded
            // runtime's I/O and timers.
            match io
                .as_ref()
                .and_then(|io| Some((&io.runtime, io.client.as_ref()?)))
            {
                Some((runtime, client)) => {
                    let writer = self.writer.with_client(client.clone());
                    runtime.block_on(op(&writer))
                }
                None => self.handle.block_on(op(&self.writer)),
            }
        })
    }
}

/// The pool of binding threads. See the module documentation.
pub(crate) struct BindingThreads {
    shared: Arc<PoolShared>,
}

impl std::fmt::Debug for BindingThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BindingThreads")
            .field("own_connections", &self.shared.connect.is_some())
            .finish_non_exhaustive()
    }
}

struct PoolShared {
    /// How each thread reaches the API server on its own; `None`: through the shared client.
    connect: Option<kube::Config>,
    /// The I/O runtime: entered on every binding thread, as on the runtime's own blocking threads.
    main: Handle,
    keep_alive: Duration,
    max_threads: usize,
    idle: Mutex<IdleThreads>,
    /// Jobs ever handed to the pool.
    jobs: std::sync::atomic::AtomicU64,
}

/// The pool's threads: those waiting for work (most recently idle last; a job is handed to one
/// through its sender), how many are alive, and jobs queued while all [`MAX_BINDING_THREADS`]
/// were busy.
#[derive(Default)]
struct IdleThreads {
    next_id: u64,
    waiting: Vec<(u64, oneshot::Sender<Job>)>,
    live: usize,
    queued: VecDeque<Job>,
    closed: bool,
}

impl BindingThreads {
    /// A pool whose threads each open a connection with `config`, or with `None` wait on `main`
    /// for their writes (see the module documentation).
    pub(crate) fn new(main: Handle, config: Option<kube::Config>, keep_alive: Duration) -> Self {
        BindingThreads {
            shared: Arc::new(PoolShared {
                connect: config,
                main,
                keep_alive,
                max_threads: MAX_BINDING_THREADS,
                idle: Mutex::new(IdleThreads::default()),
                jobs: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    /// Runs `job` on an idle thread, or on a new one when none is idle.
    pub(crate) fn spawn(&self, job: Job) {
        self.shared
            .jobs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut job = job;
        let id = {
            let mut idle = self.shared.idle.lock();
            while let Some((_, tx)) = idle.waiting.pop() {
                match tx.send(job) {
                    Ok(()) => return,
                    // That thread is gone (it cannot be: a thread leaves the list before it exits).
                    Err(back) => job = back,
                }
            }
            if idle.live >= self.shared.max_threads {
                idle.queued.push_back(job);
                return;
            }
            idle.live += 1;
            idle.next_id += 1;
            idle.next_id
        };
        let shared = self.shared.clone();
        // The job goes to the new thread through a channel rather than into its closure, so that
        // it is still ours if the thread cannot be started.
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || {
                if let Ok(first) = rx.recv() {
                    thread_main(&shared, id, first);
                }
            });
        match spawned {
            Ok(_) => {
                let _ = tx.send(job);
            }
            Err(e) => {
                // Out of threads: the runtime's blocking pool still runs the cycle.
                self.shared.idle.lock().live -= 1;
                tracing::error!(error = %e, "cannot start a binding thread; using the runtime's blocking pool");
                self.shared.main.spawn_blocking(job);
            }
        }
    }

    /// Jobs handed to the pool so far.
    pub(crate) fn jobs(&self) -> u64 {
        self.shared.jobs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Lowers the bound on threads (for tests; before any job is spawned).
    #[cfg(test)]
    fn with_max_threads(mut self, max: usize) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.max_threads = max;
        }
        self
    }

    /// Threads now idle or waiting for work (for tests).
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.shared.idle.lock().waiting.len()
    }

    /// Threads counted against the bound (for tests).
    #[cfg(test)]
    fn live_count(&self) -> usize {
        self.shared.idle.lock().live
    }

    /// Lets every idle thread exit now; busy ones exit when their job ends. Jobs spawned later
    /// still run, each on a thread of its own.
    pub(crate) fn close(&self) {
        let mut idle = self.shared.idle.lock();
        idle.closed = true;
        idle.waiting.clear();
    }
}

impl Drop for BindingThreads {
    fn drop(&mut self) {
        self.close();
    }
}

fn thread_main(shared: &PoolShared, id: u64, first: Job) {
    let _main = shared.main.enter();
    match ThreadIo::new(shared.connect.as_ref()) {
        Ok(io) => THREAD_IO.with(|t| *t.borrow_mut() = Some(io)),
        Err(e) => {
            // Without a runtime of its own the thread cannot wait for more work: run this one
            // through the shared client and exit.
            tracing::warn!(error = %e, "binding thread: no runtime of its own");
            run_job(first);
            leave(shared);
            return;
        }
    }
    let mut job = first;
    loop {
        run_job(job);
        match next_job(shared, id) {
            Some(next) => job = next,
            None => break,
        }
    }
    // Dropped here, while the thread is alive, rather than by thread-local destruction.
    let io = THREAD_IO.with(|t| t.borrow_mut().take());
    drop(io);
}

fn run_job(job: Job) {
    if catch_unwind(AssertUnwindSafe(job)).is_err() {
        tracing::error!("a binding cycle panicked");
    }
}

/// A thread that takes no more work leaves the count (so a new one may start).
fn leave(shared: &PoolShared) {
    shared.idle.lock().live -= 1;
}

/// The next job: a queued one, else one handed over while idle. `None` (and the thread has left
/// the count) after the keep-alive period or once the pool is closed.
fn next_job(shared: &PoolShared, id: u64) -> Option<Job> {
    let (tx, mut rx) = oneshot::channel();
    {
        let mut idle = shared.idle.lock();
        if let Some(job) = idle.queued.pop_front() {
            return Some(job);
        }
        if idle.closed {
            idle.live -= 1;
            return None;
        }
        idle.waiting.push((id, tx));
    }
    // The timeout is built inside `block_on`, so that its timer belongs to this thread's runtime:
    // built outside, it would take the I/O runtime's (entered for the whole thread), and the I/O
    // runtime's shutdown would make an idle thread's wait panic.
    let keep_alive = shared.keep_alive;
    let got = THREAD_IO.with(|t| {
        t.borrow().as_ref().map(|io| {
            io.runtime
                .block_on(async { tokio::time::timeout(keep_alive, &mut rx).await })
        })
    });
    if let Some(Ok(Ok(job))) = got {
        return Some(job);
    }
    let mut idle = shared.idle.lock();
    if let Some(at) = idle.waiting.iter().position(|(i, _)| *i == id) {
        idle.waiting.remove(at);
        idle.live -= 1;
        return None;
    }
    // Taken off the list under the lock: either a job was handed over as the wait ended (it is
    // in the channel now), or the pool was closed.
    match rx.try_recv() {
        Ok(job) => Some(job),
        Err(_) => {
            idle.live -= 1;
            None
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::{
        Barrier,
        atomic::{AtomicUsize, Ordering},
        mpsc,
    };

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    /// Polls `done` every 5 ms until it holds or `timeout` passes (the caller asserts after).
    fn poll_until(timeout: Duration, done: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + timeout;
        while !done() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until some thread of `pool` is idle (a thread registers right after its job).
    fn wait_for_an_idle_thread(pool: &BindingThreads) {
        poll_until(Duration::from_secs(10), || pool.idle_count() > 0);
        assert!(pool.idle_count() > 0, "no binding thread went idle");
    }

    /// Waits until no thread of `pool` is left (each holds the pool's shared state).
    fn wait_for_no_threads(pool: &BindingThreads) {
        poll_until(Duration::from_secs(10), || Arc::strong_count(&pool.shared) == 1);
        assert_eq!(
            Arc::strong_count(&pool.shared),
            1,
            "a binding thread is still alive"
        );
    }

    #[test]
    fn a_waiting_job_never_holds_up_another() {
        let rt = runtime();
        let pool = BindingThreads::new(rt.handle().clone(), None, BINDING_THREAD_KEEP_ALIVE);
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<&'static str>();
        let d1 = done_tx.clone();
        pool.spawn(Box::new(move || {
            release_rx.recv().unwrap();
            d1.send("waiting").unwrap();
        }));
        pool.spawn(Box::new(move || done_tx.send("quick").unwrap()));
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(10)).unwrap(), "quick");
        release_tx.send(()).unwrap();
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(10)).unwrap(), "waiting");
    }

    #[test]
    fn an_idle_thread_is_reused_and_leaves_after_the_keep_alive() {
        let rt = runtime();
        let pool = BindingThreads::new(rt.handle().clone(), None, Duration::from_millis(300));
        let (tx, rx) = mpsc::channel();
        let t = tx.clone();
        pool.spawn(Box::new(move || t.send(std::thread::current().id()).unwrap()));
        let first = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        wait_for_an_idle_thread(&pool);
        assert_eq!(pool.idle_count(), 1);
        let t = tx.clone();
        pool.spawn(Box::new(move || t.send(std::thread::current().id()).unwrap()));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            first,
            "the idle thread ran it"
        );
        poll_until(Duration::from_secs(10), || pool.idle_count() == 0);
        assert_eq!(pool.idle_count(), 0, "the idle thread left after the keep-alive");
        wait_for_no_threads(&pool);
        pool.spawn(Box::new(move || tx.send(std::thread::current().id()).unwrap()));
        assert_ne!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            first,
            "a new thread ran it"
        );
    }

    #[test]
    fn every_job_runs_once_under_concurrent_spawns() {
        let rt = runtime();
        let pool = Arc::new(BindingThreads::new(
            rt.handle().clone(),
            None,
            Duration::from_millis(50),
        ));
        let ran = Arc::new(AtomicUsize::new(0));
        let start = Arc::new(Barrier::new(4));
        let spawners: Vec<_> = (0..4)
            .map(|_| {
                let (pool, ran, start) = (pool.clone(), ran.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    for i in 0..250 {
                        let ran = ran.clone();
                        pool.spawn(Box::new(move || {
                            if i % 7 == 0 {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            ran.fetch_add(1, Ordering::SeqCst);
                        }));
                        if i % 50 == 0 {
                            // Let some threads time out while others hand work over.
                            std::thread::sleep(Duration::from_millis(60));
                        }
                    }
                })
            })
            .collect();
        for s in spawners {
            s.join().unwrap();
        }
        poll_until(Duration::from_secs(20), || ran.load(Ordering::SeqCst) >= 1000);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(ran.load(Ordering::SeqCst), 1000);
    }

    #[test]
    fn past_the_bound_jobs_wait_for_a_thread() {
        let rt = runtime();
        let pool =
            BindingThreads::new(rt.handle().clone(), None, BINDING_THREAD_KEEP_ALIVE).with_max_threads(2);
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(parking_lot::Mutex::new(release_rx));
        let (done_tx, done_rx) = mpsc::channel::<usize>();
        for i in 0..2 {
            let (release, done) = (release_rx.clone(), done_tx.clone());
            pool.spawn(Box::new(move || {
                let got = release.lock().recv();
                got.unwrap();
                done.send(i).unwrap();
            }));
        }
        pool.spawn(Box::new(move || done_tx.send(2).unwrap()));
        // Both threads are held: the third job is queued, not run on a third thread.
        assert!(done_rx.recv_timeout(Duration::from_millis(300)).is_err());
        assert_eq!(Arc::strong_count(&pool.shared), 3, "two threads and the pool");
        release_tx.send(()).unwrap();
        let mut got = vec![
            done_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            done_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        ];
        got.sort_unstable();
        assert!(
            got.contains(&2),
            "the queued job ran once a thread was free: {got:?}"
        );
        release_tx.send(()).unwrap();
        assert!(done_rx.recv_timeout(Duration::from_secs(10)).is_ok());
    }

    #[test]
    fn a_binding_thread_writes_on_its_own_connection() {
        use k8s_openapi::api::core::v1::Pod;
        let rt = runtime();
        let server = rt.block_on(async {
            unisched_sim::ApiServer::builder()
                .build()
                .serve("127.0.0.1:0".parse().unwrap())
                .await
                .unwrap()
        });
        // The shared client points at a closed port: only a thread's own connection reaches the
        // server.
        let dead = {
            let _in = rt.enter();
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap()
        };
        let writer = ApiWriter::new(
            dead,
            -1.0,
            0,
            crate::Metrics::new().unwrap(),
            crate::writer::LeaderFlag::new(true),
        );
        let api = SyncWriter::new(writer, rt.handle().clone());
        let read = |api: &SyncWriter| {
            api.run(async |w| {
                kube::Api::<Pod>::namespaced(w.client().clone(), "default")
                    .get_opt("absent")
                    .await
                    .map_err(|e| e.to_string())
            })
        };
        let outside = read(&api);
        assert!(
            outside.is_err(),
            "off the pool the shared client is used: {outside:?}"
        );
        let config = kube::Config::new(server.url().parse().unwrap());
        let pool = BindingThreads::new(rt.handle().clone(), Some(config), BINDING_THREAD_KEEP_ALIVE);
        let (tx, rx) = mpsc::channel();
        for _ in 0..2 {
            let (api, tx) = (api.clone(), tx.clone());
            pool.spawn(Box::new(move || tx.send(read(&api)).unwrap()));
            let got = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert!(
                matches!(got, Ok(None)),
                "the thread's own connection reached the server: {got:?}"
            );
        }
        // Without a configuration the pool's threads use the shared client.
        let shared = BindingThreads::new(rt.handle().clone(), None, BINDING_THREAD_KEEP_ALIVE);
        shared.spawn(Box::new(move || tx.send(read(&api)).unwrap()));
        assert!(rx.recv_timeout(Duration::from_secs(10)).unwrap().is_err());
    }

    #[test]
    fn a_panicking_job_leaves_the_pool_working() {
        let rt = runtime();
        let pool = BindingThreads::new(rt.handle().clone(), None, BINDING_THREAD_KEEP_ALIVE);
        pool.spawn(Box::new(|| panic!("a plugin bug")));
        let (tx, rx) = mpsc::channel();
        pool.spawn(Box::new(move || tx.send(1).unwrap()));
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 1);
    }

    #[test]
    fn an_idle_thread_outlives_the_io_runtime_and_leaves_after_the_keep_alive() {
        // At shutdown the I/O runtime goes first; an idle thread must still wait out its
        // keep-alive on its own runtime and leave the count, not panic on a dead timer.
        let rt = runtime();
        let pool = BindingThreads::new(rt.handle().clone(), None, Duration::from_millis(300));
        let (tx, rx) = mpsc::channel();
        pool.spawn(Box::new(move || tx.send(()).unwrap()));
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        wait_for_an_idle_thread(&pool);
        drop(rt);
        poll_until(Duration::from_secs(10), || pool.live_count() == 0);
        assert_eq!(pool.live_count(), 0, "the idle thread did not leave the count");
        wait_for_no_threads(&pool);
    }

    #[test]
    fn closing_lets_idle_threads_go_and_later_jobs_still_run() {
        let rt = runtime();
        let pool = BindingThreads::new(rt.handle().clone(), None, Duration::from_secs(600));
        let (tx, rx) = mpsc::channel();
        let t = tx.clone();
        pool.spawn(Box::new(move || t.send(()).unwrap()));
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        wait_for_an_idle_thread(&pool);
        pool.close();
        wait_for_no_threads(&pool);
        pool.spawn(Box::new(move || tx.send(()).unwrap()));
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
    }
}

//! PreBind and Bind as futures, for binding cycles on an async runtime: a plugin that writes to
//! the API server can then wait for the answer without holding a thread.
//!
//! Split in two steps so that nothing borrowed from the scheduling thread crosses the await:
//! `*_future` starts the runs from the cycle's state, `complete_*` awaits them and reports them
//! exactly as the synchronous runs in `binding` do (same statuses, same durations).

use std::{sync::Arc, time::Instant};

use super::binding::{PRE_BIND, bind_outcome};
use crate::{BindPlugin, Code, CycleState, Framework, PodInfo, PreBindPlugin, Status, StatusFuture};

/// PreBind plugins' runs as futures ([`Framework::pre_bind_future`]), to be awaited through
/// [`Framework::complete_pre_bind`].
pub struct PreBindInFlight {
    runs: Vec<(Arc<dyn PreBindPlugin>, StatusFuture)>,
    record: bool,
}

impl std::fmt::Debug for PreBindInFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.runs.iter().map(|(p, _)| p.name()))
            .finish()
    }
}

/// A Bind plugin's run as a future ([`Framework::bind_future`]), to be awaited through
/// [`Framework::complete_bind`].
pub struct BindInFlight {
    plugin: Arc<dyn BindPlugin>,
    record: bool,
    future: StatusFuture,
}

impl std::fmt::Debug for BindInFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BindInFlight")
            .field("plugin", &self.plugin.name())
            .finish_non_exhaustive()
    }
}

impl Framework {
    /// PreBind as futures, when every PreBind plugin with work for this pod offers one
    /// ([`PreBindPlugin::pre_bind_async`]); `None` otherwise (use
    /// [`run_pre_bind`](Self::run_pre_bind)). Nothing runs until
    /// [`complete_pre_bind`](Self::complete_pre_bind) awaits them.
    pub fn pre_bind_future(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Option<PreBindInFlight> {
        let mut runs = Vec::new();
        for p in &self.pre_bind {
            if p.pre_bind_pre_flight(state, pod, node).is_skip() {
                continue;
            }
            runs.push((Arc::clone(p), p.pre_bind_async(state, pod, node)?));
        }
        Some(PreBindInFlight {
            runs,
            record: state.record_plugin_metrics,
        })
    }

    /// Awaits a [`pre_bind_future`](Self::pre_bind_future)'s plugins in order and reports them
    /// as [`run_pre_bind`](Self::run_pre_bind) does: the first failure stops, with the same
    /// status, durations and extension-point code.
    pub async fn complete_pre_bind(&self, pre_bind: PreBindInFlight) -> Status {
        let PreBindInFlight { runs, record } = pre_bind;
        let start = Instant::now();
        let mut outcome = (Status::success(), Code::Success);
        for (plugin, future) in runs {
            let began = Instant::now();
            let s = future.await;
            if record {
                self.observer
                    .plugin("PreBind", plugin.name(), s.code(), began.elapsed());
            }
            if !s.is_success() {
                outcome = PRE_BIND.report(plugin.name(), s);
                break;
            }
        }
        let (s, code) = outcome;
        self.observer
            .extension_point(&self.profile_name, "PreBind", code, start.elapsed());
        s
    }

    /// Bind as a future, when the profile has a single Bind plugin and it can bind without a
    /// thread ([`BindPlugin::bind_async`]); `None` otherwise (use [`run_bind`](Self::run_bind)).
    /// Nothing runs until [`complete_bind`](Self::complete_bind) awaits it.
    pub fn bind_future(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Option<BindInFlight> {
        let [plugin] = self.bind.as_slice() else {
            return None;
        };
        let future = plugin.bind_async(state, pod, node)?;
        Some(BindInFlight {
            plugin: Arc::clone(plugin),
            record: state.record_plugin_metrics,
            future,
        })
    }

    /// Awaits a [`bind_future`](Self::bind_future) and reports it as [`run_bind`](Self::run_bind)
    /// reports the same plugin's run: the Bind extension point's duration, the plugin's on
    /// sampled attempts, and the same status.
    pub async fn complete_bind(&self, bind: BindInFlight) -> Status {
        let BindInFlight {
            plugin,
            record,
            future,
        } = bind;
        let start = Instant::now();
        let s = future.await;
        let elapsed = start.elapsed();
        if record {
            self.observer.plugin("Bind", plugin.name(), s.code(), elapsed);
        }
        let (s, code) = bind_outcome(plugin.name(), s);
        self.observer
            .extension_point(&self.profile_name, "Bind", code, elapsed);
        s
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::Pod;
    use parking_lot::Mutex;

    use super::*;
    use crate::{FrameworkObserver, Plugin, QueueSortPlugin, QueuedPodInfo, test_support::framework_of};

    /// Orders pods first in, first out, and nothing else.
    struct SortOnly;
    impl Plugin for SortOnly {
        fn name(&self) -> &str {
            "SortOnly"
        }
        crate::serves!(as_queue_sort);
    }
    impl QueueSortPlugin for SortOnly {
        fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
            a.timestamp < b.timestamp
        }
    }

    /// PreBind and Bind that end with `outcome`, synchronously or as futures.
    struct Writes {
        outcome: Status,
    }
    impl Plugin for Writes {
        fn name(&self) -> &str {
            "Writes"
        }
        crate::serves!(as_pre_bind, as_bind);
    }
    impl PreBindPlugin for Writes {
        fn pre_bind(&self, _: &mut CycleState, _: &PodInfo, _: &str) -> Status {
            self.outcome.clone()
        }
        fn pre_bind_async(&self, _: &CycleState, _: &PodInfo, _: &str) -> Option<StatusFuture> {
            Some(Box::pin(std::future::ready(self.outcome.clone())))
        }
    }
    impl BindPlugin for Writes {
        fn bind(&self, _: &CycleState, _: &PodInfo, _: &str) -> Status {
            self.outcome.clone()
        }
        fn bind_async(&self, _: &CycleState, _: &PodInfo, _: &str) -> Option<StatusFuture> {
            Some(Box::pin(std::future::ready(self.outcome.clone())))
        }
    }

    /// Every extension point reported, with its code, and every plugin run timed.
    #[derive(Default)]
    struct Reports(Mutex<Vec<(String, Code)>>);
    impl FrameworkObserver for Arc<Reports> {
        fn extension_point(&self, _profile: &str, point: &'static str, status: Code, _elapsed: Duration) {
            self.0.lock().push((point.to_string(), status));
        }
        fn plugin(&self, point: &'static str, plugin: &str, status: Code, _elapsed: Duration) {
            self.0.lock().push((format!("{point}/{plugin}"), status));
        }
    }

    /// Runs a future that never waits.
    fn run_ready<T>(future: impl std::future::Future<Output = T>) -> T {
        let mut future = std::pin::pin!(future);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(out) => out,
            std::task::Poll::Pending => panic!("the test plugins never wait"),
        }
    }

    /// PreBind and Bind awaited as futures return and report what the synchronous runs do: the
    /// same statuses (plugin named, errors wrapped) and the same extension-point and plugin codes.
    #[test]
    fn write_futures_report_as_the_synchronous_runs_do() {
        for outcome in [
            Status::success(),
            Status::error("the API server said no"),
            Status::unschedulable("the claim is gone"),
        ] {
            let plugins: Vec<Arc<dyn Plugin>> = vec![
                Arc::new(SortOnly),
                Arc::new(Writes {
                    outcome: outcome.clone(),
                }),
            ];
            let run = |as_futures: bool| {
                let reports = Arc::new(Reports::default());
                let fwk = framework_of(plugins.clone(), Arc::new(Arc::clone(&reports)));
                let mut state = CycleState::new();
                state.record_plugin_metrics = true;
                let pod = PodInfo::new(Pod::default());
                let (pre_bind, bind) = if as_futures {
                    let pre_bind = fwk
                        .pre_bind_future(&state, &pod, "n")
                        .map(|f| run_ready(fwk.complete_pre_bind(f)));
                    let bind = fwk
                        .bind_future(&state, &pod, "n")
                        .map(|f| run_ready(fwk.complete_bind(f)));
                    (pre_bind, bind)
                } else {
                    (
                        Some(fwk.run_pre_bind(&mut state, &pod, "n")),
                        Some(fwk.run_bind(&state, &pod, "n")),
                    )
                };
                let reports = reports.0.lock().clone();
                (pre_bind, bind, reports)
            };
            let synchronous = run(false);
            assert_eq!(synchronous, run(true), "{outcome:?}");
            assert!(
                synchronous.0.is_some_and(|s| s.code() == outcome.code()),
                "{outcome:?}"
            );
        }
    }
}

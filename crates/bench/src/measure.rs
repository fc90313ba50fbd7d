//! The measured phase: what is captured when it starts and ends, and the report built from it.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use crate::{
    procstat::{self, ThreadTimes},
    promtext::{Scrape, counter_delta},
    report::{ApiWrites, Cpu, Mode, Quantiles, RunReport},
    sampler::{self, Sampler},
    workload::Workload,
};

/// Maps a thread name to the component it belongs to (names are cut at 15 bytes by Linux).
pub(crate) fn component(name: &str) -> &'static str {
    if name.starts_with("unisched-sched") {
        "scheduling-cycle"
    } else if name.starts_with("unisched-filter") {
        "filter-workers"
    } else if name.starts_with("unisched-io") {
        "scheduler-io"
    } else if name.starts_with("bench-apiserv") {
        "apiserver"
    } else if name.starts_with("bench-") {
        "harness"
    } else {
        "other"
    }
}

/// A measured phase in progress.
pub(crate) struct Measurement {
    sampler: Sampler,
    counter: Arc<AtomicU64>,
    baseline: u64,
    render: Box<dyn Fn() -> String + Send>,
    before: Scrape,
    threads: ThreadTimes,
    cpu: f64,
    started: Instant,
}

/// A finished measured phase.
#[derive(Debug)]
pub(crate) struct Measured {
    pub points: Vec<(f64, u64)>,
    pub wall_seconds: f64,
    pub scheduled: u64,
    pub before: Scrape,
    pub after: Scrape,
    pub cpu_total: f64,
    pub cpu_by: BTreeMap<&'static str, f64>,
}

impl Measurement {
    /// Starts: scrapes metrics and CPU, starts sampling `counter` (scheduled measured pods).
    pub(crate) fn start(counter: Arc<AtomicU64>, render: impl Fn() -> String + Send + 'static) -> Self {
        let before = Scrape::parse(&render());
        let threads = ThreadTimes::read();
        let cpu = procstat::process_cpu_seconds();
        let baseline = counter.load(Ordering::SeqCst);
        Measurement {
            sampler: Sampler::start(counter.clone()),
            counter,
            baseline,
            render: Box::new(render),
            before,
            threads,
            cpu,
            started: Instant::now(),
        }
    }

    /// Ends the phase.
    pub(crate) fn finish(self) -> Measured {
        let wall_seconds = self.started.elapsed().as_secs_f64();
        let end = self.counter.load(Ordering::SeqCst);
        let scheduled = end.saturating_sub(self.baseline);
        let mut points = self.sampler.finish();
        points.push((wall_seconds, end));
        // The tracker sees a binding when the API server stores it, the writer counts it when the
        // response arrives: give the last responses a moment so writes per pod are complete.
        let settle = Instant::now();
        let bindings = |s: &Scrape| {
            s.counter_by("unisched_api_writes_total", &[], &[("resource", "pods/binding")])
                .values()
                .fold(0.0, |a, b| a + b)
        };
        let before_bindings = bindings(&self.before);
        let mut after = Scrape::parse(&(self.render)());
        while bindings(&after) - before_bindings < scheduled as f64
            && settle.elapsed() < Duration::from_secs(2)
        {
            std::thread::sleep(Duration::from_millis(20));
            after = Scrape::parse(&(self.render)());
        }
        let cpu_by = ThreadTimes::read().since(&self.threads, component);
        Measured {
            points,
            wall_seconds,
            scheduled,
            before: self.before,
            after,
            cpu_total: procstat::process_cpu_seconds() - self.cpu,
            cpu_by,
        }
    }
}

/// Builds the report of a run.
pub(crate) fn report(
    w: &Workload,
    mode: Mode,
    measured: Option<Measured>,
    created: u64,
    pending: u64,
    started: Instant,
) -> RunReport {
    let mut r = RunReport {
        workload: w.name.clone(),
        mode,
        smoke: w.smoke,
        nodes: w.nodes(),
        measured_pods: created,
        unschedulable: pending,
        upstream: w.upstream.clone(),
        dynamic_resources_registered: crate::dynamic_resources_registered(),
        peak_rss_bytes: procstat::peak_rss_bytes(),
        ..RunReport::default()
    };
    let Some(m) = measured else {
        r.notes
            .push("the workload has no measured phase (no createPods with collectMetrics)".into());
        r.setup_seconds = started.elapsed().as_secs_f64();
        return r;
    };
    r.scheduled = m.scheduled;
    r.measured_seconds = m.wall_seconds;
    r.setup_seconds = (started.elapsed().as_secs_f64() - m.wall_seconds).max(0.0);
    // The last point is the end of the phase; upstream's sampler never records that partial
    // interval, so it only feeds `overall` and the plot.
    let full_intervals = &m.points[..m.points.len().saturating_sub(1)];
    r.throughput = sampler::summarize(full_intervals, m.scheduled, m.wall_seconds);
    r.timeline = sampler::timeline(&m.points);
    let q = |base: &str, by: &[&str]| -> BTreeMap<String, Quantiles> {
        let before = m.before.histograms_by(base, by, &[]);
        m.after
            .histograms_by(base, by, &[])
            .into_iter()
            .filter_map(|(k, h)| {
                let d = before.get(&k).map_or(h.clone(), |b| h.since(b));
                Quantiles::from_seconds(&d).map(|q| (k, q))
            })
            .collect()
    };
    r.attempt_ms = q("scheduler_scheduling_attempt_duration_seconds", &["result"]);
    r.algorithm_ms = q("scheduler_scheduling_algorithm_duration_seconds", &[])
        .into_values()
        .next();
    r.extension_points_ms = q(
        "scheduler_framework_extension_point_duration_seconds",
        &["extension_point"],
    );
    r.plugins_ms = q(
        "scheduler_plugin_execution_duration_seconds",
        &["plugin", "extension_point"],
    );
    let writes = |s: &Scrape, by: &[&str]| s.counter_by("unisched_api_writes_total", by, &[]);
    let by_resource = counter_delta(
        &writes(&m.after, &["verb", "resource"]),
        &writes(&m.before, &["verb", "resource"]),
    );
    let by_code = counter_delta(&writes(&m.after, &["code"]), &writes(&m.before, &["code"]));
    let total: f64 = by_resource.values().fold(0.0, |a, b| a + b);
    r.api_writes = ApiWrites {
        total,
        per_scheduled_pod: if m.scheduled > 0 {
            total / m.scheduled as f64
        } else {
            0.0
        },
        failed: by_code
            .iter()
            .filter(|(k, _)| k.as_str() != "2xx")
            .fold(0.0, |a, (_, v)| a + v),
        by_resource,
    };
    r.cpu = Cpu {
        total_seconds: m.cpu_total,
        by_component: m
            .cpu_by
            .into_iter()
            .filter(|(_, v)| *v > 0.0)
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    };
    if r.throughput.samples == 0 {
        r.notes.push(format!(
            "measured phase of {:.2}s is too short for upstream's 1s sampler; avg shows 0, see overall",
            m.wall_seconds
        ));
    }
    r
}

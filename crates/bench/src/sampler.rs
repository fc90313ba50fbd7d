//! Throughput sampling as upstream scheduler_perf does it (`throughputCollector`): the count of
//! scheduled measured pods is read every second; the first non-zero sample only sets the
//! baseline; an interval in which nothing was scheduled is merged into the next one, whose rate is
//! then recorded once per merged interval. The summary is the Average and the 50/90/95/99th
//! percentiles of the sorted samples, in pods/s.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

/// The sampling interval.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// Reads a counter every [`INTERVAL`] on its own thread.
#[derive(Debug)]
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Vec<(f64, u64)>>>,
    started: Instant,
}

impl Sampler {
    /// Starts sampling `counter` now.
    pub fn start(counter: Arc<AtomicU64>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let s = stop.clone();
        let handle = std::thread::Builder::new()
            .name("bench-sampler".into())
            .spawn(move || {
                let mut points = vec![(0.0, counter.load(Ordering::SeqCst))];
                let mut k = 1u32;
                while !s.load(Ordering::SeqCst) {
                    let due = started + INTERVAL * k;
                    let now = Instant::now();
                    if due > now {
                        // Short naps so that stop() returns promptly.
                        std::thread::sleep((due - now).min(Duration::from_millis(50)));
                        continue;
                    }
                    let t = started.elapsed().as_secs_f64();
                    points.push((t, counter.load(Ordering::SeqCst)));
                    k += 1;
                }
                points
            })
            .ok();
        Sampler {
            stop,
            handle,
            started,
        }
    }

    /// When sampling started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Stops and returns the samples: (seconds since start, counter value).
    pub fn finish(mut self) -> Vec<(f64, u64)> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Upstream's `SchedulingThroughput` data item.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Throughput {
    /// Mean of the samples.
    pub average: f64,
    /// Percentiles of the samples.
    pub perc50: f64,
    /// 90th.
    pub perc90: f64,
    /// 95th.
    pub perc95: f64,
    /// 99th.
    pub perc99: f64,
    /// Samples recorded (0: the phase was shorter than two sampling intervals).
    pub samples: usize,
    /// Measured pods scheduled divided by the phase's wall time (defined even without samples).
    pub overall: f64,
}

/// Upstream's sampling rule applied to `points` (see the module documentation).
pub fn samples(points: &[(f64, u64)]) -> Vec<f64> {
    let mut out = Vec::new();
    let mut base: Option<(f64, u64)> = None;
    let mut skipped = 0usize;
    for &(t, count) in points.iter().skip(1) {
        if count == 0 {
            continue;
        }
        let Some((t0, c0)) = base else {
            base = Some((t, count));
            continue;
        };
        let new = count.saturating_sub(c0);
        if new == 0 {
            skipped += 1;
            continue;
        }
        let rate = new as f64 / (t - t0).max(1e-9);
        out.extend(std::iter::repeat_n(rate, skipped + 1));
        skipped = 0;
        base = Some((t, count));
    }
    out
}

/// The summary of `points`; `scheduled` pods in `wall_seconds` give `overall`.
pub fn summarize(points: &[(f64, u64)], scheduled: u64, wall_seconds: f64) -> Throughput {
    let mut s = samples(points);
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let pick = |p: usize| -> f64 {
        if n == 0 {
            return 0.0;
        }
        let idx = (n * p).div_ceil(100).max(1) - 1;
        s[idx.min(n - 1)]
    };
    Throughput {
        average: if n == 0 {
            0.0
        } else {
            s.iter().sum::<f64>() / n as f64
        },
        perc50: pick(50),
        perc90: pick(90),
        perc95: pick(95),
        perc99: pick(99),
        samples: n,
        overall: if wall_seconds > 0.0 {
            scheduled as f64 / wall_seconds
        } else {
            0.0
        },
    }
}

/// Per-interval rates for plotting: (end of interval in seconds, pods/s).
pub fn timeline(points: &[(f64, u64)]) -> Vec<(f64, f64)> {
    points
        .windows(2)
        .map(|w| {
            let dt = (w[1].0 - w[0].0).max(1e-9);
            (w[1].0, w[1].1.saturating_sub(w[0].1) as f64 / dt)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_sampling_rule() {
        // t=1: first non-zero (baseline); t=2: +100; t=3: +0 (merged); t=4: +50 over 2 s.
        let pts = [(0.0, 0), (1.0, 10), (2.0, 110), (3.0, 110), (4.0, 160)];
        assert_eq!(samples(&pts), vec![100.0, 25.0, 25.0]);
        let t = summarize(&pts, 160, 4.0);
        assert_eq!(t.samples, 3);
        assert!((t.average - 50.0).abs() < 1e-9);
        assert_eq!(t.perc50, 25.0);
        assert_eq!(t.perc99, 100.0);
        assert_eq!(t.overall, 40.0);
        assert_eq!(timeline(&pts)[1], (2.0, 100.0));
        let empty = summarize(&[(0.0, 0)], 0, 0.0);
        assert_eq!(empty.samples, 0);
        assert_eq!(empty.average, 0.0);
    }

    #[test]
    fn sampler_thread_samples_and_stops() {
        let c = Arc::new(AtomicU64::new(0));
        let s = Sampler::start(c.clone());
        c.store(5, Ordering::SeqCst);
        let pts = s.finish();
        assert_eq!(pts.first().map(|p| p.0), Some(0.0));
    }
}

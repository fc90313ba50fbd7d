//! The `process_*` metrics, with `process_cpu_seconds_total` in fractional seconds.
//!
//! The prometheus crate's collector keeps CPU time in an integer counter, so a scheduler that used
//! 0.29 s reports 0 and `rate()` over it moves in whole-second steps. This collector reuses it for
//! the memory, file-descriptor, thread and start-time gauges and replaces only the CPU counter with
//! one computed from `/proc/self/stat` (user + system clock ticks over the kernel's tick rate),
//! which is what client_golang exports.

use prometheus::{
    Counter, Opts,
    core::{Collector, Desc},
    process_collector::ProcessCollector,
    proto::MetricFamily,
};

const CPU: &str = "process_cpu_seconds_total";
const CPU_HELP: &str = "Total user and system CPU time spent in seconds.";

/// The process collector of this process.
pub(crate) struct ProcessMetrics {
    inner: ProcessCollector,
}

impl ProcessMetrics {
    pub(crate) fn new() -> Self {
        ProcessMetrics {
            inner: ProcessCollector::for_self(),
        }
    }
}

/// User plus system CPU time of this process, in seconds (`None` when /proc cannot be read).
pub fn cpu_seconds() -> Option<f64> {
    let stat = procfs::process::Process::myself().ok()?.stat().ok()?;
    let ticks = procfs::ticks_per_second();
    if ticks == 0 {
        return None;
    }
    Some((stat.utime + stat.stime) as f64 / ticks as f64)
}

impl Collector for ProcessMetrics {
    fn desc(&self) -> Vec<&Desc> {
        // The inner collector's descriptors include the CPU counter under the same name and help.
        self.inner.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut families: Vec<MetricFamily> = self
            .inner
            .collect()
            .into_iter()
            .filter(|f| f.name() != CPU)
            .collect();
        if let (Some(secs), Ok(counter)) = (cpu_seconds(), Counter::with_opts(Opts::new(CPU, CPU_HELP))) {
            counter.inc_by(secs);
            families.extend(counter.collect());
        }
        families
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exported_cpu(c: &ProcessMetrics) -> Vec<f64> {
        c.collect()
            .iter()
            .filter(|f| f.name() == CPU)
            .map(|f| f.get_metric()[0].get_counter().get_value())
            .collect()
    }

    fn burn(ms: u64) {
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(ms) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
    }

    #[test]
    fn cpu_seconds_are_fractional_and_exported_once() {
        let c = ProcessMetrics::new();
        // An integer counter would only ever show whole seconds; the tick-based one shows a
        // fractional part on almost every reading. Burn CPU until a reading has one.
        let mut readings = Vec::new();
        for _ in 0..50 {
            burn(20);
            let v = exported_cpu(&c);
            assert_eq!(v.len(), 1, "exactly one CPU family: {v:?}");
            readings.push(v[0]);
            if v[0].fract() > 0.0 {
                break;
            }
        }
        let last = *readings.last().unwrap();
        assert!(last.fract() > 0.0, "never fractional: {readings:?}");
        assert!(
            readings.windows(2).all(|w| w[0] <= w[1]),
            "monotonic: {readings:?}"
        );
        let names: Vec<String> = c.collect().iter().map(|f| f.name().to_string()).collect();
        assert!(
            names.iter().any(|n| n == "process_resident_memory_bytes"),
            "{names:?}"
        );
        assert!(
            names.iter().any(|n| n == "process_start_time_seconds"),
            "{names:?}"
        );
    }
}

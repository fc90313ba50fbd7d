//! Process figures from `/proc` (Linux): peak and current RSS, CPU time of the process and of each
//! thread by name, so CPU can be split between the API server, the scheduler and the harness.
//!
//! On other systems every figure reads as zero.

use std::collections::BTreeMap;

/// Clock ticks per second of `utime`/`stime`, from the auxiliary vector (`AT_CLKTCK`), else 100.
pub fn clock_ticks() -> f64 {
    const AT_CLKTCK: u64 = 17;
    if let Ok(bytes) = std::fs::read("/proc/self/auxv") {
        for pair in bytes.chunks_exact(16) {
            let (k, v) = pair.split_at(8);
            let key = k.try_into().map(u64::from_ne_bytes).unwrap_or(0);
            let val = v.try_into().map(u64::from_ne_bytes).unwrap_or(0);
            if key == AT_CLKTCK && val > 0 {
                return val as f64;
            }
        }
    }
    100.0
}

/// `VmHWM` (peak resident set) in bytes.
pub fn peak_rss_bytes() -> u64 {
    status_kb("VmHWM:") * 1024
}

/// `VmRSS` (current resident set) in bytes.
pub fn rss_bytes() -> u64 {
    status_kb("VmRSS:") * 1024
}

/// `VmHWM` of another process (0 when it is gone).
pub fn pid_peak_rss_bytes(pid: u32) -> u64 {
    status_kb_of(&format!("/proc/{pid}/status"), "VmHWM:") * 1024
}

/// CPU seconds (utime + stime) of another process, its exited threads included and its children
/// excluded (0 when it is gone). Whole clock ticks (10 ms on most kernels): the live threads'
/// finer `schedstat` cannot be combined with the exited threads' ticks without the difference of
/// two truncations adding more error than it removes.
pub fn pid_cpu_seconds(pid: u32) -> f64 {
    ticks_seconds(&format!("/proc/{pid}/stat"))
}

fn ticks_seconds(stat_path: &str) -> f64 {
    std::fs::read_to_string(stat_path)
        .ok()
        .and_then(|t| parse_stat(&t))
        .map_or(0.0, |(_, ticks)| ticks as f64 / clock_ticks())
}

fn status_kb(key: &str) -> u64 {
    status_kb_of("/proc/self/status", key)
}

fn status_kb_of(path: &str, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// (comm, utime + stime ticks) from a `stat` file's text.
fn parse_stat(text: &str) -> Option<(String, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // Fields after the comm start at field 3 (state); utime is field 14, stime 15.
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some((comm, utime + stime))
}

/// Nanoseconds on the CPU, the first field of a `schedstat` file.
fn parse_schedstat_nanos(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// CPU seconds of the whole process (threads that exited included), in whole ticks as
/// [`pid_cpu_seconds`].
pub fn process_cpu_seconds() -> f64 {
    ticks_seconds("/proc/self/stat")
}

/// CPU time per live thread, keyed by thread id, with its name, in nanoseconds.
#[derive(Clone, Debug, Default)]
pub struct ThreadTimes {
    by_tid: BTreeMap<u64, (String, u64)>,
}

impl ThreadTimes {
    /// Reads `/proc/self/task/*/stat` for each thread's name and its CPU time from `schedstat`
    /// (nanoseconds on the CPU). `stat`'s `utime + stime` count whole clock ticks (10 ms on most
    /// kernels), too coarse for a thread that ran a few milliseconds in a short run: it would read
    /// as zero. Without `schedstat` (a kernel built without it) the ticks are used.
    pub fn read() -> Self {
        let ns_per_tick = 1e9 / clock_ticks();
        let mut by_tid = BTreeMap::new();
        if let Ok(rd) = std::fs::read_dir("/proc/self/task") {
            for e in rd.flatten() {
                let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u64>().ok()) else {
                    continue;
                };
                let Some((name, ticks)) = std::fs::read_to_string(e.path().join("stat"))
                    .ok()
                    .and_then(|t| parse_stat(&t))
                else {
                    continue;
                };
                let nanos = std::fs::read_to_string(e.path().join("schedstat"))
                    .ok()
                    .and_then(|t| parse_schedstat_nanos(&t))
                    .unwrap_or((ticks as f64 * ns_per_tick) as u64);
                by_tid.insert(tid, (name, nanos));
            }
        }
        ThreadTimes { by_tid }
    }

    /// CPU seconds spent since `earlier`, grouped by `group(thread name)`. Threads that exited in
    /// between are missing (their time still counts in [`process_cpu_seconds`]).
    pub fn since(
        &self,
        earlier: &ThreadTimes,
        group: impl Fn(&str) -> &'static str,
    ) -> BTreeMap<&'static str, f64> {
        let mut out = BTreeMap::new();
        for (tid, (name, nanos)) in &self.by_tid {
            let before = earlier
                .by_tid
                .get(tid)
                .filter(|(n, _)| n == name)
                .map_or(0, |(_, t)| *t);
            *out.entry(group(name)).or_insert(0.0) += nanos.saturating_sub(before) as f64 / 1e9;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_names() {
        let line = "1234 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0";
        assert_eq!(parse_stat(line), Some(("a (b) c".to_string(), 300)));
        assert!(parse_stat("garbage").is_none());
        assert_eq!(parse_schedstat_nanos("21386467 1683545 70\n"), Some(21_386_467));
        assert!(parse_schedstat_nanos("").is_none());
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn reads_this_process() {
        assert!(peak_rss_bytes() > 0);
        assert!(rss_bytes() > 0);
        let ticks = clock_ticks();
        assert!(ticks > 0.0);
        let before = process_cpu_seconds();
        let t0 = ThreadTimes::read();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        assert!(x != 1);
        let t1 = ThreadTimes::read();
        let total: f64 = t1.since(&t0, |_| "all").values().sum();
        // Nanosecond resolution: a few milliseconds of work never reads as zero.
        assert!(total > 0.0, "{total}");
        // Burn until this thread has run for more than two clock ticks (bounded by the loop, not
        // by a clock): the process figures, in whole ticks, must then have grown.
        let two_ticks = 2.0 / ticks;
        let mut spent = total;
        for _ in 0..10_000 {
            if spent > two_ticks {
                break;
            }
            for i in 0..200_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            spent = ThreadTimes::read().since(&t0, |_| "all").values().sum();
        }
        assert!(x != 1);
        assert!(spent > two_ticks, "{spent}");
        let me = std::process::id();
        let after = process_cpu_seconds();
        assert!(after > before, "{before} -> {after}, thread {spent}");
        assert!(pid_cpu_seconds(me) >= after);
        assert!(pid_peak_rss_bytes(me) > 0);
        assert_eq!(pid_cpu_seconds(u32::MAX), 0.0);
    }
}

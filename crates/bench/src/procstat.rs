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
/// excluded (0 when it is gone).
pub fn pid_cpu_seconds(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
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

/// CPU seconds of the whole process (threads that exited included).
pub fn process_cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|t| parse_stat(&t))
        .map_or(0.0, |(_, ticks)| ticks as f64 / clock_ticks())
}

/// CPU time per live thread, keyed by thread id, with its name.
#[derive(Clone, Debug, Default)]
pub struct ThreadTimes {
    by_tid: BTreeMap<u64, (String, u64)>,
    ticks: f64,
}

impl ThreadTimes {
    /// Reads `/proc/self/task/*/stat`.
    pub fn read() -> Self {
        let mut by_tid = BTreeMap::new();
        if let Ok(rd) = std::fs::read_dir("/proc/self/task") {
            for e in rd.flatten() {
                let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u64>().ok()) else {
                    continue;
                };
                if let Some(parsed) = std::fs::read_to_string(e.path().join("stat"))
                    .ok()
                    .and_then(|t| parse_stat(&t))
                {
                    by_tid.insert(tid, parsed);
                }
            }
        }
        ThreadTimes {
            by_tid,
            ticks: clock_ticks(),
        }
    }

    /// CPU seconds spent since `earlier`, grouped by `group(thread name)`. Threads that exited in
    /// between are missing (their time still counts in [`process_cpu_seconds`]).
    pub fn since(
        &self,
        earlier: &ThreadTimes,
        group: impl Fn(&str) -> &'static str,
    ) -> BTreeMap<&'static str, f64> {
        let mut out = BTreeMap::new();
        for (tid, (name, ticks)) in &self.by_tid {
            let before = earlier
                .by_tid
                .get(tid)
                .filter(|(n, _)| n == name)
                .map_or(0, |(_, t)| *t);
            *out.entry(group(name)).or_insert(0.0) += ticks.saturating_sub(before) as f64 / self.ticks;
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
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn reads_this_process() {
        assert!(peak_rss_bytes() > 0);
        assert!(rss_bytes() > 0);
        let ticks = clock_ticks();
        assert!(ticks > 0.0);
        let t0 = ThreadTimes::read();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        let t1 = ThreadTimes::read();
        let total: f64 = t1.since(&t0, |_| "all").values().sum();
        assert!(total >= 0.0);
        assert!(process_cpu_seconds() >= 0.0);
        let me = std::process::id();
        assert!(pid_cpu_seconds(me) > 0.0);
        assert!(pid_peak_rss_bytes(me) > 0);
        assert_eq!(pid_cpu_seconds(u32::MAX), 0.0);
    }
}

//! Reads the scheduler's own metrics from their text exposition: histograms (with quantiles
//! interpolated inside buckets, as Prometheus' `histogram_quantile` and upstream scheduler_perf
//! compute them) and counters, and differences between two scrapes so that only the measured
//! phase counts.

use std::collections::{BTreeMap, HashMap};

/// Label set of one sample (without `le`).
pub type Labels = BTreeMap<String, String>;

/// One scrape: samples by metric name.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    samples: HashMap<String, Vec<(Labels, f64)>>,
}

fn parse_labels(s: &str) -> Labels {
    let mut out = Labels::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        let Some(eq) = rest.find('=') else { break };
        let key = rest[..eq].trim().to_string();
        let after = &rest[eq + 1..];
        let Some(body) = after.strip_prefix('"') else {
            break;
        };
        let mut value = String::new();
        let mut chars = body.char_indices();
        let mut end = body.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                other => value.push(other),
            }
        }
        out.insert(key, value);
        rest = &body[end.min(body.len())..];
    }
    out
}

impl Scrape {
    /// Parses the text format; malformed lines are skipped.
    pub fn parse(text: &str) -> Self {
        let mut samples: HashMap<String, Vec<(Labels, f64)>> = HashMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, labels, rest) = match line.find('{') {
                Some(open) => {
                    let Some(close) = line.rfind('}') else { continue };
                    (
                        &line[..open],
                        parse_labels(&line[open + 1..close]),
                        &line[close + 1..],
                    )
                }
                None => match line.split_once(' ') {
                    Some((n, r)) => (n, Labels::new(), r),
                    None => continue,
                },
            };
            let Some(value) = rest.split_whitespace().next().and_then(parse_value) else {
                continue;
            };
            samples.entry(name.to_string()).or_default().push((labels, value));
        }
        Scrape { samples }
    }

    fn matches(labels: &Labels, filter: &[(&str, &str)]) -> bool {
        filter.iter().all(|(k, v)| labels.get(*k).is_some_and(|x| x == v))
    }

    /// The histogram `base`, summed over every series matching `filter`.
    pub fn histogram(&self, base: &str, filter: &[(&str, &str)]) -> Histogram {
        self.histograms_by(base, &[], filter)
            .into_values()
            .fold(Histogram::default(), |acc, h| acc.plus(&h))
    }

    /// The histogram `base` per joined value (`a/b`) of the `by` labels (all series summed when
    /// empty), over the series matching `filter`.
    pub fn histograms_by(
        &self,
        base: &str,
        by: &[&str],
        filter: &[(&str, &str)],
    ) -> BTreeMap<String, Histogram> {
        let mut out: BTreeMap<String, Histogram> = BTreeMap::new();
        let key_of = |l: &Labels| {
            by.iter()
                .map(|k| l.get(*k).cloned().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("/")
        };
        // Per series first (labels without `le`), then merged by key.
        let mut series: BTreeMap<Labels, Histogram> = BTreeMap::new();
        for (labels, v) in self.samples.get(&format!("{base}_bucket")).into_iter().flatten() {
            if !Self::matches(labels, filter) {
                continue;
            }
            let mut l = labels.clone();
            let le = l
                .remove("le")
                .and_then(|s| parse_value(&s))
                .unwrap_or(f64::INFINITY);
            series.entry(l).or_default().buckets.push((le, *v));
        }
        for (suffix, is_sum) in [("_sum", true), ("_count", false)] {
            for (labels, v) in self.samples.get(&format!("{base}{suffix}")).into_iter().flatten() {
                if !Self::matches(labels, filter) {
                    continue;
                }
                let h = series.entry(labels.clone()).or_default();
                if is_sum {
                    h.sum = *v;
                } else {
                    h.count = *v;
                }
            }
        }
        for (labels, mut h) in series {
            h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            let e = out.entry(key_of(&labels)).or_default();
            *e = e.plus(&h);
        }
        out
    }

    /// Counter values summed per joined value of `by` labels (`a/b`), over series matching `filter`.
    pub fn counter_by(&self, name: &str, by: &[&str], filter: &[(&str, &str)]) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for (labels, v) in self.samples.get(name).into_iter().flatten() {
            if !Self::matches(labels, filter) {
                continue;
            }
            let key = by
                .iter()
                .map(|k| labels.get(*k).cloned().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(" ");
            *out.entry(key).or_insert(0.0) += v;
        }
        out
    }
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        other => other.parse().ok(),
    }
}

/// Differences of counters between two scrapes (`later - earlier`), per key.
pub fn counter_delta(
    later: &BTreeMap<String, f64>,
    earlier: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    later
        .iter()
        .map(|(k, v)| (k.clone(), v - earlier.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// A cumulative histogram.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// (upper bound, cumulative count), sorted by bound; the last bound is +Inf.
    pub buckets: Vec<(f64, f64)>,
    /// Sum of observations.
    pub sum: f64,
    /// Number of observations.
    pub count: f64,
}

impl Histogram {
    /// Bucket-wise sum (series with the same bounds).
    pub fn plus(&self, other: &Histogram) -> Histogram {
        if self.buckets.is_empty() {
            return other.clone();
        }
        let buckets = self
            .buckets
            .iter()
            .map(|(le, c)| {
                let o = other
                    .buckets
                    .iter()
                    .find(|(l, _)| l == le)
                    .map_or(0.0, |(_, c)| *c);
                (*le, c + o)
            })
            .collect();
        Histogram {
            buckets,
            sum: self.sum + other.sum,
            count: self.count + other.count,
        }
    }

    /// Observations made after `earlier` was scraped.
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let buckets = self
            .buckets
            .iter()
            .map(|(le, c)| {
                let o = earlier
                    .buckets
                    .iter()
                    .find(|(l, _)| l == le)
                    .map_or(0.0, |(_, c)| *c);
                (*le, (c - o).max(0.0))
            })
            .collect();
        Histogram {
            buckets,
            sum: (self.sum - earlier.sum).max(0.0),
            count: (self.count - earlier.count).max(0.0),
        }
    }

    /// Mean, or None without observations.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    /// The `q` quantile, linearly interpolated inside its bucket (lower bound 0 for the first);
    /// a quantile in the +Inf bucket is the largest finite bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last().map_or(0.0, |b| b.1);
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let mut prev_le = 0.0;
        let mut prev_count = 0.0;
        for (le, c) in &self.buckets {
            if *c >= rank {
                if le.is_infinite() {
                    return Some(prev_le);
                }
                let width = c - prev_count;
                let frac = if width > 0.0 {
                    (rank - prev_count) / width
                } else {
                    1.0
                };
                return Some(prev_le + (le - prev_le) * frac);
            }
            prev_le = *le;
            prev_count = *c;
        }
        Some(prev_le)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP x_seconds help
# TYPE x_seconds histogram
x_seconds_bucket{point="Filter",status="Success",le="0.001"} 10
x_seconds_bucket{point="Filter",status="Success",le="0.002"} 30
x_seconds_bucket{point="Filter",status="Success",le="+Inf"} 40
x_seconds_sum{point="Filter",status="Success"} 0.05
x_seconds_count{point="Filter",status="Success"} 40
x_seconds_bucket{point="Score",status="Success",le="0.001"} 4
x_seconds_bucket{point="Score",status="Success",le="0.002"} 4
x_seconds_bucket{point="Score",status="Success",le="+Inf"} 4
x_seconds_sum{point="Score",status="Success"} 0.001
x_seconds_count{point="Score",status="Success"} 4
writes_total{verb="create",resource="pods/binding",code="2xx"} 7
writes_total{verb="create",resource="events",code="2xx"} 3
plain 5
"#;

    #[test]
    fn histograms_and_quantiles() {
        let s = Scrape::parse(TEXT);
        let f = s.histogram("x_seconds", &[("point", "Filter")]);
        assert_eq!(f.count, 40.0);
        // Median: rank 20, in (0.001, 0.002] with 20 observations: halfway.
        assert!((f.quantile(0.5).unwrap() - 0.0015).abs() < 1e-12);
        assert!((f.quantile(0.25).unwrap() - 0.001).abs() < 1e-12);
        assert!((f.quantile(0.1).unwrap() - 0.0004).abs() < 1e-12);
        assert_eq!(f.quantile(0.99), Some(0.002));
        let by = s.histograms_by("x_seconds", &["point"], &[]);
        assert!(
            s.histograms_by("x_seconds", &["point", "status"], &[])
                .contains_key("Filter/Success")
        );
        assert_eq!(by.len(), 2);
        assert_eq!(by["Score"].count, 4.0);
        let all = s.histogram("x_seconds", &[]);
        assert_eq!(all.count, 44.0);
        let d = all.since(&f);
        assert_eq!(d.count, 4.0);
        assert!(Histogram::default().quantile(0.5).is_none());
    }

    #[test]
    fn counters() {
        let s = Scrape::parse(TEXT);
        let c = s.counter_by("writes_total", &["resource"], &[]);
        assert_eq!(c["pods/binding"], 7.0);
        let earlier: BTreeMap<String, f64> = [("pods/binding".to_string(), 2.0)].into();
        assert_eq!(counter_delta(&c, &earlier)["pods/binding"], 5.0);
        assert_eq!(s.counter_by("plain", &[], &[])[""], 5.0);
    }
}

//! `--plot FILE.svg`: throughput over time, one panel per workload, one line per mode. Written by
//! hand (a few dozen SVG elements), so no plotting crate is needed.

use std::fmt::Write as _;

use crate::report::{Mode, RunReport};

const WIDTH: f64 = 960.0;
const PANEL: f64 = 230.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 36.0;

fn color(mode: Mode) -> &'static str {
    match mode {
        Mode::Full => "#1f77b4",
        Mode::Limit => "#ff7f0e",
        Mode::Engine => "#2ca02c",
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A "nice" axis maximum and tick step for values up to `max`.
fn nice(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 0.25);
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

/// Renders the chart.
pub fn render(runs: &[RunReport]) -> String {
    let mut workloads: Vec<&str> = Vec::new();
    for r in runs {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    let height = (workloads.len().max(1) as f64) * PANEL;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (i, w) in workloads.iter().enumerate() {
        let y0 = i as f64 * PANEL;
        let series: Vec<&RunReport> = runs
            .iter()
            .filter(|r| r.workload == *w && r.skipped.is_none() && !r.timeline.is_empty())
            .collect();
        let xmax = series
            .iter()
            .flat_map(|r| r.timeline.iter().map(|p| p.0))
            .fold(1.0f64, f64::max);
        let ymax = series
            .iter()
            .flat_map(|r| r.timeline.iter().map(|p| p.1))
            .fold(0.0f64, f64::max);
        let (ymax, ystep) = nice(ymax * 1.05);
        let (xmax, xstep) = nice(xmax);
        let pw = WIDTH - LEFT - RIGHT;
        let ph = PANEL - TOP - BOTTOM;
        let px = |x: f64| LEFT + x / xmax * pw;
        let py = |y: f64| y0 + TOP + ph - y / ymax * ph;
        let _ = writeln!(
            out,
            r#"<text x="{LEFT}" y="{}" font-size="13" font-weight="bold">{}</text>"#,
            y0 + 20.0,
            escape(w)
        );
        // Grid and axes.
        let mut t = 0.0;
        while t <= ymax + ystep / 2.0 {
            let y = py(t);
            let _ = writeln!(
                out,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{t:.0}</text>"##,
                LEFT + pw,
                LEFT - 6.0,
                y + 4.0
            );
            t += ystep;
        }
        let mut t = 0.0;
        while t <= xmax + xstep / 2.0 {
            let x = px(t);
            let _ = writeln!(
                out,
                r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#888"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{t:.0}</text>"##,
                y0 + TOP + ph,
                y0 + TOP + ph + 4.0,
                y0 + TOP + ph + 16.0
            );
            t += xstep;
        }
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#444"/><line x1="{LEFT}" y1="{:.1}" x2="{LEFT}" y2="{:.1}" stroke="#444"/>"##,
            y0 + TOP + ph,
            LEFT + pw,
            y0 + TOP + ph,
            y0 + TOP,
            y0 + TOP + ph
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">seconds into the measured phase</text><text transform="translate(14 {:.1}) rotate(-90)" text-anchor="middle">pods/s</text>"#,
            LEFT + pw / 2.0,
            y0 + PANEL - 4.0,
            y0 + TOP + ph / 2.0
        );
        if series.is_empty() {
            let _ = writeln!(
                out,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#888">no samples</text>"##,
                LEFT + pw / 2.0,
                y0 + TOP + ph / 2.0
            );
        }
        for (k, r) in series.iter().enumerate() {
            let mut pts = format!("{:.1},{:.1}", px(0.0), py(0.0));
            for (x, y) in &r.timeline {
                let _ = write!(pts, " {:.1},{:.1}", px(*x), py(*y));
            }
            let c = color(r.mode);
            let _ = writeln!(
                out,
                r#"<polyline fill="none" stroke="{c}" stroke-width="1.8" points="{pts}"/>"#
            );
            let ly = y0 + TOP + 12.0 + k as f64 * 16.0;
            let lx = LEFT + pw + 12.0;
            let avg = crate::report::headline(r).unwrap_or(0.0);
            let _ = writeln!(
                out,
                r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{c}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{} {avg:.0}/s</text>"#,
                lx + 18.0,
                lx + 24.0,
                ly + 4.0,
                r.mode.as_str()
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_lines_per_mode() {
        let mk = |mode, v: f64| RunReport {
            workload: "A/b<c>".into(),
            mode,
            timeline: vec![(1.0, v), (2.0, v * 2.0), (2.5, v)],
            ..Default::default()
        };
        let svg = render(&[mk(Mode::Full, 100.0), mk(Mode::Limit, 300.0)]);
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("A/b&lt;c&gt;"));
        assert_eq!(nice(0.0), (1.0, 0.25));
        let (m, s) = nice(870.0);
        assert!(m >= 870.0 && s > 0.0);
    }
}

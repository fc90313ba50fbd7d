//! Logging of the unisched binaries (`unisched`, `unisched-bench`): tracing with klog-style `-v`
//! levels, text or JSON, on stderr. One crate, so both binaries log alike and the benchmark's
//! child processes take the same `--v` and `--logging-format` as the scheduler.
//!
//! Operators read these lines with the habits of kube-scheduler's klog output, so the rules follow
//! klog rather than tracing's defaults:
//!
//! - **Verbosity.** `-v 0` and `-v 1` show warnings, errors and the few lines klog prints
//!   unconditionally (startup, serving address, leader lease acquired, shutdown); the per-pod INFO
//!   lines ("unable to schedule pod", preemption) are klog `V(2)` in upstream and appear from `-v 2`
//!   (the default). `-v 4` adds debug, `-v 5` and above trace. `RUST_LOG` overrides all of it.
//! - **JSON** (`--logging-format json`): one object per line with exactly one `message` key, plus
//!   `ts`, `level`, `target` and the event's fields. A field that is itself named `message`
//!   (which tracing would emit as a second `message` key) is renamed `detail`.
//! - **Colour** only when stderr is a terminal.
//! - **Repeats** are rate-limited: the same record (same call site, same field values) is written
//!   at most once per [`REPEAT_WINDOW`]. An unreachable API server therefore yields one line per
//!   distinct error every few seconds, not a stream. Debug and trace records are not limited (they
//!   are asked for explicitly).
//! - **At run time** the verbosity can be changed ([`set_verbosity`]), as klog's can.

use std::{
    collections::HashMap,
    fmt::{self as stdfmt, Write as _},
    hash::{DefaultHasher, Hash, Hasher},
    io::IsTerminal,
    sync::{
        OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::{Map, Value};
use tracing::{Event, Level, Subscriber, field::Field};
use tracing_subscriber::{
    EnvFilter, Layer,
    field::Visit,
    fmt::{
        self, FmtContext, FormatEvent, FormatFields,
        format::Writer,
        time::{FormatTime, SystemTime},
    },
    layer::{Context, SubscriberExt},
    registry::LookupSpan,
    reload,
    util::SubscriberInitExt,
};

/// How long an identical record is suppressed after it was written.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(10);

static JSON: AtomicBool = AtomicBool::new(false);

/// The installed filter, replaceable while running (`PUT /debug/flags/v`).
static FILTER: OnceLock<reload::Handle<EnvFilter, tracing_subscriber::Registry>> = OnceLock::new();

/// Why the verbosity could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum VerbosityError {
    /// [`init`] did not install the subscriber (another one was, or none).
    #[error("logging was not initialised by unisched")]
    NotInitialised,
    /// The subscriber refused the new filter.
    #[error("replacing the log filter: {0}")]
    Reload(#[source] reload::Error),
}

/// Changes the verbosity of the running process to that of `-v verbosity`, as klog's verbosity
/// flag can be changed at run time (kube-scheduler's `PUT /debug/flags/v`). It replaces the whole
/// filter, a `RUST_LOG` one too.
pub fn set_verbosity(verbosity: u8) -> Result<(), VerbosityError> {
    let handle = FILTER.get().ok_or(VerbosityError::NotInitialised)?;
    handle
        .reload(EnvFilter::new(default_filter(verbosity)))
        .map_err(VerbosityError::Reload)
}

/// True when `--logging-format json` is in effect: code that writes to stderr directly (the `[sim]`
/// progress lines) must then stay quiet or write JSON, so the stream stays one object per line.
pub fn json_enabled() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// The process's exit code for a command's result, printing the error first: `error: …` with
/// its whole chain (`{:#}`) on stderr, or one JSON record in JSON mode, where stderr must stay
/// one object per line. Both binaries end this way.
pub fn exit_code<E: std::fmt::Display>(result: Result<u8, E>) -> std::process::ExitCode {
    match result {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            if json_enabled() {
                tracing::error!(error = format!("{e:#}"), "exiting");
            } else {
                eprintln!("error: {e:#}");
            }
            std::process::ExitCode::from(1)
        }
    }
}

/// The default filter for a klog verbosity.
pub fn default_filter(verbosity: u8) -> &'static str {
    match verbosity {
        // klog v0: only what it prints unconditionally.
        0 | 1 => {
            "warn,unisched::run=info,unisched::sim=info,unisched_runtime::leader=info,kube=error,hyper=error,tower=error"
        }
        2 | 3 => "info,kube=warn,hyper=warn,tower=warn",
        // `unisched_simctl` is the front end of `unisched sim`, once a module of the binary.
        4 => {
            "info,unisched=debug,unisched_simctl=debug,unisched_runtime=debug,unisched_framework=debug,unisched_sim=debug,kube=warn"
        }
        _ => {
            "debug,unisched=trace,unisched_simctl=trace,unisched_runtime=trace,kube=info,hyper=info,tower=info"
        }
    }
}

/// Installs the global subscriber. `RUST_LOG` overrides `-v`.
pub fn init(verbosity: u8, format: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter(verbosity)));
    let (filter, handle) = reload::Layer::new(filter);
    let json = format == "json";
    JSON.store(json, Ordering::Relaxed);
    let limiter = RepeatLimiter::default();
    let result = if json {
        let fmt_layer = fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .event_format(JsonLine);
        tracing_subscriber::registry()
            .with(filter)
            .with(limiter)
            .with(fmt_layer)
            .try_init()
    } else {
        let fmt_layer = fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal());
        tracing_subscriber::registry()
            .with(filter)
            .with(limiter)
            .with(fmt_layer)
            .try_init()
    };
    match result {
        Ok(()) => {
            let _ = FILTER.set(handle);
        }
        Err(e) => eprintln!("warning: logging already initialised: {e}"),
    }
}

/// The event's fields as JSON values, `message` separate.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    rest: Map<String, Value>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        if field.name() == "message" {
            let text = match value {
                Value::String(s) => s,
                other => other.to_string(),
            };
            // tracing records the format string's message first: a later `message = …` field is
            // the caller's detail, not the record's message.
            if self.message.is_none() {
                self.message = Some(text);
            } else {
                self.rest.insert("detail".into(), Value::String(text));
            }
            return;
        }
        let name = field.name().strip_prefix("r#").unwrap_or(field.name());
        self.rest.insert(name.to_string(), value);
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn stdfmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }
}

/// The JSON line format: `{"ts":…,"level":…,"target":…,"message":…, fields…}`.
struct JsonLine;

impl<S, N> FormatEvent<S, N> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> stdfmt::Result {
        writeln!(w, "{}", json_record(event))
    }
}

/// One event as a JSON object (a single line: serde_json escapes newlines inside strings).
fn json_record(event: &Event<'_>) -> String {
    let mut fields = Fields::default();
    event.record(&mut fields);
    let mut ts = String::new();
    let _ = SystemTime.format_time(&mut Writer::new(&mut ts));
    let mut obj = Map::new();
    obj.insert("ts".into(), Value::String(ts));
    obj.insert(
        "level".into(),
        Value::String(event.metadata().level().as_str().to_ascii_lowercase()),
    );
    obj.insert(
        "target".into(),
        Value::String(event.metadata().target().to_string()),
    );
    obj.insert(
        "message".into(),
        Value::String(fields.message.unwrap_or_default()),
    );
    for (k, v) in fields.rest {
        // The fixed keys win; a field that collides keeps its value under a prefixed name.
        let key = if obj.contains_key(&k) {
            format!("field.{k}")
        } else {
            k
        };
        obj.insert(key, v);
    }
    Value::Object(obj).to_string()
}

/// A stable fingerprint of an event's call site and field values.
struct Fingerprint(DefaultHasher);

impl Visit for Fingerprint {
    fn record_debug(&mut self, field: &Field, value: &dyn stdfmt::Debug) {
        field.name().hash(&mut self.0);
        let mut s = String::new();
        let _ = write!(s, "{value:?}");
        s.hash(&mut self.0);
    }
}

/// Suppresses repeats of the same record within [`REPEAT_WINDOW`] (INFO and above).
#[derive(Default)]
struct RepeatLimiter {
    seen: parking_lot::Mutex<HashMap<u64, (Instant, u64)>>,
}

impl RepeatLimiter {
    /// Whether to write a record with this fingerprint now.
    fn admit(&self, key: u64, now: Instant) -> bool {
        let mut seen = self.seen.lock();
        if seen.len() > 4096 {
            seen.retain(|_, (at, _)| now.duration_since(*at) < REPEAT_WINDOW);
        }
        match seen.get_mut(&key) {
            Some((at, dropped)) if now.duration_since(*at) < REPEAT_WINDOW => {
                *dropped += 1;
                false
            }
            Some(entry) => {
                *entry = (now, 0);
                true
            }
            None => {
                seen.insert(key, (now, 0));
                true
            }
        }
    }
}

impl<S: Subscriber> Layer<S> for RepeatLimiter {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        if *event.metadata().level() > Level::INFO {
            return true;
        }
        let mut fp = Fingerprint(DefaultHasher::new());
        event.metadata().callsite().hash(&mut fp.0);
        event.record(&mut fp);
        self.admit(fp.0.finish(), Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex as StdMutex;
    use std::sync::Arc;

    #[derive(Clone, Default)]
    struct Buf(Arc<StdMutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn capture(f: impl FnOnce()) -> Vec<Value> {
        let buf = Buf::default();
        let w = buf.clone();
        let subscriber = tracing_subscriber::registry()
            .with(RepeatLimiter::default())
            .with(fmt::layer().with_writer(move || w.clone()).event_format(JsonLine));
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(buf.0.lock().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }

    #[test]
    fn json_has_one_message_and_the_callers_message_field_as_detail() {
        let lines = capture(|| {
            tracing::info!(
                pod = "default/p",
                message = "0/3 nodes are available",
                "unable to schedule pod"
            );
        });
        assert_eq!(lines.len(), 1);
        let l = &lines[0];
        assert_eq!(l["message"], "unable to schedule pod");
        assert_eq!(l["detail"], "0/3 nodes are available");
        assert_eq!(l["pod"], "default/p");
        assert_eq!(l["level"], "info");
        assert!(l["ts"].as_str().is_some_and(|t| t.contains('T')), "{l}");
    }

    #[test]
    fn identical_records_are_rate_limited_but_different_ones_pass() {
        let lines = capture(|| {
            for _ in 0..50 {
                tracing::warn!(error = "connection refused", "watch error; retrying with backoff");
            }
            for p in ["a", "b"] {
                tracing::warn!(pod = p, "patch failed");
            }
            for _ in 0..3 {
                tracing::debug!("debug is not limited");
            }
        });
        let msgs: Vec<&str> = lines.iter().filter_map(|l| l["message"].as_str()).collect();
        assert_eq!(
            msgs,
            [
                "watch error; retrying with backoff",
                "patch failed",
                "patch failed",
                "debug is not limited",
                "debug is not limited",
                "debug is not limited",
            ],
            "{lines:?}"
        );
    }

    #[test]
    fn limiter_readmits_after_the_window() {
        let l = RepeatLimiter::default();
        let t0 = Instant::now();
        assert!(l.admit(7, t0));
        assert!(!l.admit(7, t0 + Duration::from_secs(1)));
        assert!(l.admit(8, t0 + Duration::from_secs(1)));
        assert!(l.admit(7, t0 + REPEAT_WINDOW + Duration::from_millis(1)));
    }

    #[test]
    fn v0_hides_per_pod_info_but_keeps_startup_lines() {
        let f = default_filter(0);
        assert!(f.starts_with("warn,"));
        assert!(f.contains("unisched::run=info"));
        assert!(!f.contains("unisched_runtime=info"));
        assert!(default_filter(2).starts_with("info"));
    }
}

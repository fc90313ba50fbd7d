//! The configured scheduler extenders, set up once at start and shared by every profile (as
//! upstream), their calls reported as `scheduler_extender_request_duration_seconds`.

use std::{sync::Arc, time::Duration};

use unisched_extender::{ExtenderObserver, ExtendersError, build_extenders};
use unisched_framework::{config::Extender, extender::Extenders};

use crate::Metrics;

impl ExtenderObserver for Metrics {
    fn call_finished(&self, extender: &str, verb: &str, success: bool, elapsed: Duration) {
        let result = if success { "success" } else { "error" };
        self.extender_calls
            .with_label_values(&[extender, verb, result])
            .observe(elapsed.as_secs_f64());
    }
}

/// An HTTP client for each configured extender, reporting to `metrics`.
pub(crate) fn extenders(configs: &[Extender], metrics: &Metrics) -> Result<Extenders, ExtendersError> {
    build_extenders(configs, Arc::new(metrics.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_per_extender_verb_and_result() {
        let metrics = Metrics::new().unwrap();
        metrics.call_finished(
            "http://ext:8080/scheduler",
            "filter",
            true,
            Duration::from_millis(3),
        );
        metrics.call_finished(
            "http://ext:8080/scheduler",
            "filter",
            false,
            Duration::from_millis(500),
        );
        metrics.call_finished(
            "http://ext:8080/scheduler",
            "prioritize",
            true,
            Duration::from_millis(1),
        );
        let text = metrics.render();
        for series in [
            "scheduler_extender_request_duration_seconds_count{extender=\"http://ext:8080/scheduler\",result=\"success\",verb=\"filter\"} 1",
            "scheduler_extender_request_duration_seconds_count{extender=\"http://ext:8080/scheduler\",result=\"error\",verb=\"filter\"} 1",
            "scheduler_extender_request_duration_seconds_count{extender=\"http://ext:8080/scheduler\",result=\"success\",verb=\"prioritize\"} 1",
        ] {
            assert!(text.contains(series), "{series} missing from\n{text}");
        }
        // No extenders configured: nothing is set up.
        assert!(extenders(&[], &metrics).unwrap().is_empty());
    }
}

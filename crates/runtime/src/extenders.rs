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

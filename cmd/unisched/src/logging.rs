//! Logging: tracing with klog-style `-v` levels, text or JSON.

use tracing_subscriber::{EnvFilter, fmt};

/// Installs the global subscriber. `RUST_LOG` overrides `-v`.
pub fn init(verbosity: u8, format: &str) {
    let default = match verbosity {
        0..=3 => "info,kube=warn,hyper=warn,tower=warn",
        4 => {
            "info,unisched=debug,unisched_runtime=debug,unisched_framework=debug,unisched_sim=debug,kube=warn"
        }
        _ => "debug,unisched=trace,unisched_runtime=trace,kube=info,hyper=info,tower=info",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let result = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    if let Err(e) = result {
        eprintln!("warning: logging already initialised: {e}");
    }
}

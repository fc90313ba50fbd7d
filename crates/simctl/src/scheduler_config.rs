//! The `KubeSchedulerConfiguration` file of `unisched run` and of the in-process scheduler of
//! `unisched sim` (`--scheduler-config`): one loader, so both read a file the same way.

use std::path::PathBuf;

use anyhow::{Context, Result};
use unisched_framework::config::KubeSchedulerConfiguration;

/// Loads the configuration file (or the defaults when there is none).
pub fn load(path: Option<&PathBuf>) -> Result<KubeSchedulerConfiguration> {
    match path {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            KubeSchedulerConfiguration::from_yaml(&text)
                .with_context(|| format!("invalid configuration {}", p.display()))
        }
        None => Ok(KubeSchedulerConfiguration::defaulted()),
    }
}

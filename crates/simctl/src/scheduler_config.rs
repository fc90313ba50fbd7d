//! The `KubeSchedulerConfiguration` file of `unisched run` and of the in-process scheduler of
//! `unisched sim` (`--scheduler-config`): one loader, so both read a file the same way, and both
//! check every configured plugin's args with the rest of the configuration.

use std::path::PathBuf;

use unisched_framework::config::{ConfigError, KubeSchedulerConfiguration};

/// Why a configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerConfigError {
    /// The file could not be read.
    #[error("reading {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid configuration.
    #[error("invalid configuration {}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: ConfigError,
    },
}

/// Loads the configuration file (or the defaults when there is none).
pub fn load(path: Option<&PathBuf>) -> Result<KubeSchedulerConfiguration, SchedulerConfigError> {
    match path {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|source| SchedulerConfigError::Read {
                path: p.clone(),
                source,
            })?;
            let invalid = |source| SchedulerConfigError::Invalid {
                path: p.clone(),
                source,
            };
            let config = KubeSchedulerConfiguration::from_yaml(&text).map_err(invalid)?;
            // Plugin args are checked now, so a bad one names its field before anything starts.
            unisched_plugins::validate_plugin_args(&config).map_err(invalid)?;
            Ok(config)
        }
        None => Ok(KubeSchedulerConfiguration::defaulted()),
    }
}

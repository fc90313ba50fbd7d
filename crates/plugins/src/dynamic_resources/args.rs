//! `DynamicResourcesArgs`: the plugin's `pluginConfig` args.
//!
//! Upstream field names and defaults: `filterTimeout` bounds the allocator's work per node (10 s;
//! `0s` disables the bound) so that one pathological claim cannot stall the scheduling loop, and
//! `bindingTimeout` bounds how long PreBind waits for device binding conditions (600 s, at least 1 s).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use unisched_framework::config::GoDuration;

use crate::helper::{PluginArgs, PluginArgsError, decode_args};

/// The `kind` of the args object.
pub const ARGS_KIND: &str = "DynamicResourcesArgs";

/// Default `filterTimeout`.
pub const DEFAULT_FILTER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `bindingTimeout`.
pub const DEFAULT_BINDING_TIMEOUT: Duration = Duration::from_secs(600);

/// The plugin's args.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DynamicResourcesArgs {
    /// Must be `DynamicResourcesArgs` when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Must be `kubescheduler.config.k8s.io/v1` when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Time limit for allocating the pod's claims on one node; `0s` means no limit.
    pub filter_timeout: GoDuration,
    /// How long PreBind waits for binding conditions before giving up.
    pub binding_timeout: GoDuration,
}

impl Default for DynamicResourcesArgs {
    fn default() -> Self {
        DynamicResourcesArgs {
            kind: None,
            api_version: None,
            filter_timeout: GoDuration(DEFAULT_FILTER_TIMEOUT),
            binding_timeout: GoDuration(DEFAULT_BINDING_TIMEOUT),
        }
    }
}

impl PluginArgs for DynamicResourcesArgs {
    const KIND: &'static str = ARGS_KIND;
    fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }
    fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }
}

impl DynamicResourcesArgs {
    /// Decodes and validates `pluginConfig[].args` (`null`: the defaults). Errors name the field.
    pub fn from_value(args: &serde_json::Value) -> Result<Self, PluginArgsError> {
        let a: DynamicResourcesArgs = decode_args(args)?;
        a.validate()?;
        Ok(a)
    }

    /// Upstream validation: `bindingTimeout` must be at least one second.
    pub fn validate(&self) -> Result<(), PluginArgsError> {
        if self.binding_timeout.0 < Duration::from_secs(1) {
            return Err(PluginArgsError::Invalid(vec![format!(
                "bindingTimeout: Invalid value: {:?}: must be at least 1s",
                unisched_framework::config::format_go_duration(self.binding_timeout.0)
            )]));
        }
        Ok(())
    }

    /// The filter timeout, `None` when disabled.
    pub fn filter_timeout(&self) -> Option<Duration> {
        (!self.filter_timeout.0.is_zero()).then_some(self.filter_timeout.0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn decode_table() {
        struct Case {
            json: serde_json::Value,
            want: Result<(Duration, Duration), &'static str>,
        }
        let cases = [
            Case {
                json: serde_json::Value::Null,
                want: Ok((DEFAULT_FILTER_TIMEOUT, DEFAULT_BINDING_TIMEOUT)),
            },
            Case {
                json: serde_json::json!({"filterTimeout": "2s", "bindingTimeout": "1m"}),
                want: Ok((Duration::from_secs(2), Duration::from_secs(60))),
            },
            Case {
                json: serde_json::json!({"kind": "DynamicResourcesArgs", "apiVersion": "kubescheduler.config.k8s.io/v1", "filterTimeout": "0s"}),
                want: Ok((Duration::ZERO, DEFAULT_BINDING_TIMEOUT)),
            },
            Case {
                json: serde_json::json!({"bindingTimeout": "500ms"}),
                want: Err("bindingTimeout: Invalid value"),
            },
            Case {
                json: serde_json::json!({"filterTimeout": "soon"}),
                want: Err("invalid duration"),
            },
            Case {
                json: serde_json::json!({"timeout": "1s"}),
                want: Err("unknown field `timeout`"),
            },
            Case {
                json: serde_json::json!({"kind": "Other"}),
                want: Err("kind: Unsupported value"),
            },
        ];
        for c in cases {
            match (
                DynamicResourcesArgs::from_value(&c.json).map_err(|e| e.to_string()),
                c.want,
            ) {
                (Ok(a), Ok((f, b))) => {
                    assert_eq!((a.filter_timeout.0, a.binding_timeout.0), (f, b), "{}", c.json);
                }
                (Err(e), Err(want)) => assert!(e.contains(want), "{}: {e}", c.json),
                (got, want) => panic!("{}: got {got:?}, want {want:?}", c.json),
            }
        }
        assert_eq!(
            DynamicResourcesArgs::from_value(&serde_json::json!({"filterTimeout": "0s"}))
                .unwrap()
                .filter_timeout(),
            None
        );
    }
}

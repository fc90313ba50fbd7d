//! `VolumeBindingArgs`: VolumeBinding's `pluginConfig` args, decoded, defaulted and checked as
//! upstream does, with the one default that depends on a gate (`shape`, for
//! `StorageCapacityScoring`).

use serde::{Deserialize, Serialize};

use super::capacity;
use crate::{
    helper::{PluginArgs, PluginArgsError, decode_args, invalid},
    noderesources::{UtilizationShapePoint, validate_shape},
};

/// Upstream's default `bindTimeoutSeconds`.
pub const DEFAULT_BIND_TIMEOUT_SECONDS: i64 = 600;

/// `VolumeBindingArgs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeBindingArgs {
    /// `VolumeBindingArgs` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `kubescheduler.config.k8s.io/v1` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// How long PreBind waits for the PV controller to bind the pod's claims.
    #[serde(default = "default_bind_timeout")]
    pub bind_timeout_seconds: i64,
    /// How capacity scoring (`StorageCapacityScoring`) maps the utilisation of a node's storage
    /// to a score; defaulted to "emptiest first" when the gate is on, refused when it is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<UtilizationShapePoint>>,
}

fn default_bind_timeout() -> i64 {
    DEFAULT_BIND_TIMEOUT_SECONDS
}

impl Default for VolumeBindingArgs {
    fn default() -> Self {
        VolumeBindingArgs {
            kind: None,
            api_version: None,
            bind_timeout_seconds: DEFAULT_BIND_TIMEOUT_SECONDS,
            shape: None,
        }
    }
}

impl PluginArgs for VolumeBindingArgs {
    const KIND: &'static str = "VolumeBindingArgs";
    fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }
    fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }
}

impl VolumeBindingArgs {
    /// Decodes, defaults and validates `pluginConfig` args (`null`: defaults) with upstream's
    /// default gates (`StorageCapacityScoring` on).
    pub fn from_value(args: &serde_json::Value) -> Result<Self, PluginArgsError> {
        Self::from_value_with(args, true)
    }

    /// Like [`VolumeBindingArgs::from_value`], with `StorageCapacityScoring` as given: on, a
    /// missing `shape` gets the default and a given one is checked; off, a `shape` is an error
    /// (so that it cannot silently start to matter when the gate turns on).
    pub fn from_value_with(
        args: &serde_json::Value,
        storage_capacity_scoring: bool,
    ) -> Result<Self, PluginArgsError> {
        let mut a: VolumeBindingArgs = decode_args(args)?;
        if storage_capacity_scoring && a.shape.as_ref().is_none_or(Vec::is_empty) {
            a.shape = Some(capacity::default_shape());
        }
        let mut errs = Vec::new();
        if a.bind_timeout_seconds < 0 {
            errs.push(invalid(
                "bindTimeoutSeconds",
                a.bind_timeout_seconds,
                "invalid BindTimeoutSeconds, should not be a negative value",
            ));
        }
        match (&a.shape, storage_capacity_scoring) {
            (Some(shape), true) => validate_shape(shape, "shape", &mut errs),
            (Some(shape), false) => errs.push(invalid(
                "shape",
                go_shape(shape),
                "unexpected field `shape`, remove it or turn on the feature gate StorageCapacityScoring",
            )),
            (None, _) => {}
        }
        if errs.is_empty() {
            Ok(a)
        } else {
            Err(PluginArgsError::Invalid(errs))
        }
    }
}

/// A shape as Go's `%#v` prints it in upstream's validation message.
fn go_shape(shape: &[UtilizationShapePoint]) -> String {
    let points: Vec<String> = shape
        .iter()
        .map(|p| {
            format!(
                "config.UtilizationShapePoint{{Utilization:{}, Score:{}}}",
                p.utilization, p.score
            )
        })
        .collect();
    format!("[]config.UtilizationShapePoint{{{}}}", points.join(", "))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn args() {
        assert_eq!(
            VolumeBindingArgs::from_value(&serde_json::Value::Null)
                .unwrap()
                .bind_timeout_seconds,
            600
        );
        assert_eq!(
            VolumeBindingArgs::from_value(&json!({"bindTimeoutSeconds": 30}))
                .unwrap()
                .bind_timeout_seconds,
            30
        );
        assert_eq!(
            VolumeBindingArgs::from_value(&json!({"bindTimeoutSeconds": -1}))
                .unwrap_err()
                .to_string(),
            "bindTimeoutSeconds: Invalid value: -1: invalid BindTimeoutSeconds, should not be a negative value"
        );
    }
}

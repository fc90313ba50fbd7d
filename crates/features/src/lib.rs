//! Feature gates: `--feature-gates` parsed and checked as kube-scheduler 1.37.2 does, and what
//! unisched does with each gate.
//!
//! An operator who swaps kube-scheduler for unisched keeps the flag line, so unisched knows every
//! gate Kubernetes 1.37.2 registers (`known.rs`), with upstream's defaults, stages and locks, and
//! reports the same errors for the same mistakes: an unknown name, a locked gate set against its
//! lock, a value that is not a boolean, a gate enabled while a gate it depends on is disabled.
//!
//! Most gates are read by other components (the kubelet, the API server); kube-scheduler accepts
//! them and does nothing with them, and so does unisched. The gates the scheduler reads are listed
//! in [`SCHEDULER_GATES`] together with the values unisched implements. Setting a scheduler gate
//! to a value unisched does not implement is an error that says which value unisched runs, rather
//! than a flag that is silently ignored. Where unisched's default differs from upstream's on
//! purpose, [`UNISCHED_DEFAULTS`] says so and why; where upstream's default turns on behaviour
//! unisched does not have yet, [`FeatureGates::gaps`] names the gate (logged at start-up, listed
//! in the README).
#![forbid(unsafe_code)]

mod known;

use std::{collections::BTreeMap, fmt};

/// A gate's maturity, as upstream labels it (the `stage` label of `kubernetes_feature_enabled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Not yet available at this version; cannot be set.
    PreAlpha,
    /// Off by default, may change or go away.
    Alpha,
    /// Usually on by default.
    Beta,
    /// Generally available; usually locked on.
    Ga,
    /// On its way out.
    Deprecated,
}

impl Stage {
    /// The label upstream's metric and help text use (`""` for GA).
    pub fn label(self) -> &'static str {
        match self {
            Stage::PreAlpha => "PRE-ALPHA",
            Stage::Alpha => "ALPHA",
            Stage::Beta => "BETA",
            Stage::Ga => "",
            Stage::Deprecated => "DEPRECATED",
        }
    }
}

/// One gate of the upstream table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KnownGate {
    pub(crate) name: &'static str,
    pub(crate) default: bool,
    pub(crate) stage: Stage,
    pub(crate) locked: bool,
}

/// Which values of a scheduler gate unisched implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Implemented {
    /// Both: the code reads the gate.
    Both,
    /// Only this value: the behaviour is built in (on) or not built (off).
    Only(bool),
}

/// The gates kube-scheduler 1.37.2 reads (its plugins' feature set and the scheduler's own), and
/// the values unisched implements.
pub const SCHEDULER_GATES: &[(&str, Implemented)] = &[
    ("DRAAdminAccess", Implemented::Only(true)),
    ("DRAConsumableCapacity", Implemented::Only(true)),
    ("DRADerivedAttributes", Implemented::Only(false)),
    ("DRADeviceBindingConditions", Implemented::Only(true)),
    ("DRADeviceCompatibilityGroups", Implemented::Only(false)),
    ("DRADeviceTaintRules", Implemented::Only(true)),
    ("DRADeviceTaints", Implemented::Only(true)),
    ("DRAExtendedResource", Implemented::Only(true)),
    ("DRAFractionalCapacityRange", Implemented::Only(true)),
    ("DRAListTypeAttributes", Implemented::Only(false)),
    ("DRANodeAllocatableResources", Implemented::Only(true)),
    ("DRAOptionalNodeOperations", Implemented::Only(false)),
    ("DRAPartitionableDevices", Implemented::Only(true)),
    ("DRAPrioritizedList", Implemented::Only(true)),
    ("DRAResourceClaimDeviceStatus", Implemented::Only(true)),
    ("DRASchedulerFilterTimeout", Implemented::Only(true)),
    ("DRAWorkloadResourceClaims", Implemented::Both),
    ("DynamicResourceAllocation", Implemented::Only(true)),
    ("CompositePodGroup", Implemented::Both),
    ("GenericWorkload", Implemented::Both),
    ("InPlacePodLevelResourcesVerticalScaling", Implemented::Only(true)),
    ("InPlacePodVerticalScaling", Implemented::Only(true)),
    (
        "InPlacePodVerticalScalingSchedulerPreemption",
        Implemented::Only(false),
    ),
    ("InterPodAffinityHostnameFastPath", Implemented::Only(false)),
    ("MatchLabelKeysInPodTopologySpread", Implemented::Only(true)),
    ("NodeDeclaredFeatures", Implemented::Only(true)),
    ("NodeInclusionPolicyInPodTopologySpread", Implemented::Only(true)),
    ("NominatedNodeNameForExpectation", Implemented::Both),
    ("OpportunisticBatching", Implemented::Only(false)),
    ("PodGroupPreemptionPolicy", Implemented::Both),
    ("PodLevelResources", Implemented::Only(true)),
    ("SchedulerAsyncAPICalls", Implemented::Only(true)),
    ("SchedulerAsyncPreemption", Implemented::Only(true)),
    ("SchedulerPopFromBackoffQ", Implemented::Only(true)),
    ("SchedulerPreQueueingHints", Implemented::Only(false)),
    ("StorageCapacityScoring", Implemented::Both),
    ("TaintTolerationComparisonOperators", Implemented::Both),
    ("TopologyAwareWorkloadScheduling", Implemented::Both),
    ("VolumeAttributesClass", Implemented::Only(true)),
    ("VolumeLimitScaling", Implemented::Both),
];

/// Gates whose default in unisched differs from upstream's on purpose, and why.
pub const UNISCHED_DEFAULTS: &[(&str, bool, &str)] = &[
    (
        "DRANodeAllocatableResources",
        true,
        "one ledger for node resources and devices (KEP-5517) is what unisched is for",
    ),
    (
        "DRAWorkloadResourceClaims",
        true,
        "a training gang's shared devices (one IMEX channel, one NVLink domain) are claimed for the group",
    ),
    (
        "SchedulerAsyncAPICalls",
        true,
        "every API write goes through unisched's own writer, off the scheduling cycle; there is no synchronous mode",
    ),
    (
        "GenericWorkload",
        true,
        "gangs (all-or-nothing PodGroups) are what GPU training on DRA needs first",
    ),
    (
        "TopologyAwareWorkloadScheduling",
        true,
        "a gang placed in one rack or zone is how multi-node training is run",
    ),
];

/// The two gates that set every unset gate of a stage.
const ALL_ALPHA: &str = "AllAlpha";
const ALL_BETA: &str = "AllBeta";

/// What is wrong with a `--feature-gates` value. The texts are upstream's where upstream has the
/// same check.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FeatureGateError {
    /// `Name` without `=value`.
    #[error("missing bool value for {0}")]
    MissingValue(String),
    /// A value Go's `strconv.ParseBool` refuses.
    #[error("invalid value of {name}={value}, err: strconv.ParseBool: parsing {value:?}: invalid syntax")]
    InvalidValue { name: String, value: String },
    /// A name Kubernetes 1.37.2 does not register.
    #[error("unrecognized feature gate: {0}")]
    Unrecognized(String),
    /// A locked gate set against its lock.
    #[error("cannot set feature gate {name} to {value}, feature is locked to {locked}")]
    Locked { name: String, value: bool, locked: bool },
    /// A gate not yet available at this version.
    #[error(
        "cannot set feature gate {name} to {value}, feature is PreAlpha at emulated version 1.37, min compatibility version 1.36"
    )]
    PreAlpha { name: String, value: bool },
    /// An enabled gate with a disabled dependency.
    #[error("{name} is enabled, but depends on features that are disabled: [{}]", .disabled.join(" "))]
    DisabledDependency { name: String, disabled: Vec<String> },
    /// A scheduler gate at a value unisched does not implement.
    #[error("feature gate {name}={value} is not supported by unisched, which always runs {name}={runs}")]
    NotImplemented { name: String, value: bool, runs: bool },
    /// Several of the above, printed as upstream's aggregate error.
    #[error("[{}]", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Several(Vec<FeatureGateError>),
}

/// The effective gates: every known gate with its value, after defaults and the flag.
#[derive(Clone, Debug)]
pub struct FeatureGates {
    enabled: BTreeMap<&'static str, bool>,
    /// What the flag set, for `/configz`.
    explicit: BTreeMap<String, bool>,
}

impl Default for FeatureGates {
    fn default() -> Self {
        let mut enabled: BTreeMap<&'static str, bool> =
            known::KNOWN.iter().map(|g| (g.name, g.default)).collect();
        for (name, value, _) in UNISCHED_DEFAULTS {
            enabled.insert(name, *value);
        }
        FeatureGates {
            enabled,
            explicit: BTreeMap::new(),
        }
    }
}

fn known_gate(name: &str) -> Option<&'static KnownGate> {
    known::KNOWN.iter().find(|g| g.name == name)
}

/// Go's `strconv.ParseBool`.
fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

impl FeatureGates {
    /// Parses `--feature-gates` (`Name=true,Other=false`) on top of the defaults and checks the
    /// result. An empty value gives the defaults.
    pub fn parse(flag: &str) -> Result<Self, FeatureGateError> {
        let mut settings = BTreeMap::new();
        for item in flag.split(',').filter(|s| !s.is_empty()) {
            let Some((name, value)) = item.split_once('=') else {
                return Err(FeatureGateError::MissingValue(item.trim().to_string()));
            };
            let (name, value) = (name.trim(), value.trim());
            let parsed = parse_bool(value).ok_or_else(|| FeatureGateError::InvalidValue {
                name: name.to_string(),
                value: value.to_string(),
            })?;
            settings.insert(name.to_string(), parsed);
        }
        Self::from_settings(settings)
    }

    /// Applies explicit settings to the defaults and checks them.
    pub fn from_settings(settings: BTreeMap<String, bool>) -> Result<Self, FeatureGateError> {
        let mut gates = FeatureGates::default();
        let mut errors = Vec::new();
        // The gates this flag decides, by name or through AllAlpha / AllBeta.
        let mut touched: Vec<&'static str> = Vec::new();
        for (name, &value) in &settings {
            if name == ALL_ALPHA || name == ALL_BETA {
                continue;
            }
            // Upstream stops at the first unknown name.
            let gate = known_gate(name).ok_or_else(|| FeatureGateError::Unrecognized(name.clone()))?;
            if gate.locked && gate.default != value {
                errors.push(FeatureGateError::Locked {
                    name: name.clone(),
                    value,
                    locked: gate.default,
                });
            } else if gate.stage == Stage::PreAlpha {
                errors.push(FeatureGateError::PreAlpha {
                    name: name.clone(),
                    value,
                });
            } else {
                gates.enabled.insert(gate.name, value);
                touched.push(gate.name);
            }
        }
        // AllAlpha / AllBeta set every gate of their stage that was not set by name.
        for (all, stage) in [(ALL_ALPHA, Stage::Alpha), (ALL_BETA, Stage::Beta)] {
            if let Some(&value) = settings.get(all) {
                for gate in known::KNOWN.iter().filter(|g| g.stage == stage && !g.locked) {
                    if !settings.contains_key(gate.name) {
                        gates.enabled.insert(gate.name, value);
                        touched.push(gate.name);
                    }
                }
            }
        }
        gates.follow_dependencies_of_own_defaults(&touched);
        if errors.is_empty() {
            errors.extend(gates.dependency_errors());
        }
        if errors.is_empty() {
            errors.extend(gates.unimplemented(&touched));
        }
        gates.explicit = settings;
        match errors.len() {
            0 => Ok(gates),
            1 => Err(errors.remove(0)),
            _ => Err(FeatureGateError::Several(errors)),
        }
    }

    /// A gate on only by unisched's default follows its dependencies down: turning
    /// GenericWorkload off must not make the untouched TopologyAwareWorkloadScheduling an
    /// error. A gate the flag set keeps upstream's dependency check.
    fn follow_dependencies_of_own_defaults(&mut self, touched: &[&str]) {
        for (name, value, _) in UNISCHED_DEFAULTS {
            if !*value || touched.contains(name) {
                continue;
            }
            let deps = known::DEPENDENCIES
                .iter()
                .find(|(n, _)| n == name)
                .map_or(&[][..], |(_, d)| *d);
            if deps.iter().any(|d| !self.enabled(d)) {
                self.enabled.insert(name, false);
            }
        }
    }

    fn dependency_errors(&self) -> Vec<FeatureGateError> {
        known::DEPENDENCIES
            .iter()
            .filter(|(name, _)| self.enabled(name))
            .filter_map(|(name, deps)| {
                let disabled: Vec<String> = deps
                    .iter()
                    .filter(|d| !self.enabled(d))
                    .map(|d| d.to_string())
                    .collect();
                (!disabled.is_empty()).then(|| FeatureGateError::DisabledDependency {
                    name: name.to_string(),
                    disabled,
                })
            })
            .collect()
    }

    /// The scheduler gates this flag set to a value unisched does not run.
    fn unimplemented(&self, touched: &[&str]) -> Vec<FeatureGateError> {
        SCHEDULER_GATES
            .iter()
            .filter(|(name, _)| touched.contains(name))
            .filter_map(|(name, implemented)| match implemented {
                Implemented::Only(runs) if self.enabled(name) != *runs => {
                    Some(FeatureGateError::NotImplemented {
                        name: name.to_string(),
                        value: !runs,
                        runs: *runs,
                    })
                }
                _ => None,
            })
            .collect()
    }

    /// Scheduler gates left at a default that turns on behaviour unisched does not implement yet
    /// (name, the value upstream runs), in name order.
    pub fn gaps(&self) -> Vec<(&'static str, bool)> {
        SCHEDULER_GATES
            .iter()
            .filter_map(|(name, implemented)| match implemented {
                Implemented::Only(runs) if self.enabled(name) != *runs => Some((*name, !runs)),
                _ => None,
            })
            .collect()
    }

    /// Whether `gate` is on (false for a name Kubernetes does not know).
    pub fn enabled(&self, gate: &str) -> bool {
        self.enabled.get(gate).copied().unwrap_or(false)
    }

    /// Every known gate: name, stage, whether it is on. In name order.
    pub fn all(&self) -> impl Iterator<Item = (&'static str, Stage, bool)> + '_ {
        known::KNOWN
            .iter()
            .map(|g| (g.name, g.stage, self.enabled(g.name)))
    }

    /// What `--feature-gates` set, by name.
    pub fn explicit(&self) -> &BTreeMap<String, bool> {
        &self.explicit
    }
}

impl fmt::Display for FeatureGates {
    /// `Name=true,Other=false` of the explicit settings, as upstream prints the flag.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pairs: Vec<String> = self.explicit.iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&pairs.join(","))
    }
}

#[cfg(test)]
mod tests;

//! `KubeSchedulerConfiguration` (`kubescheduler.config.k8s.io/v1`): types, defaults, validation.
//!
//! Operators copy configuration between kube-scheduler and unisched, so the field names, defaults
//! and validation messages follow upstream. Unknown fields are errors (a typo must not silently fall
//! back to a default), and every error names the field path.

use std::{collections::BTreeSet, time::Duration};

use serde::{Deserialize, Serialize};

pub use crate::extender::config::{Extender, ExtenderManagedResource, ExtenderTlsConfig};

/// The scheduler name pods use to select unisched when the configuration names none.
pub const DEFAULT_SCHEDULER_NAME: &str = "unisched";
/// The plugin whose `ignoredResources` extenders' `ignoredByScheduler` resources join.
const NODE_RESOURCES_FIT: &str = "NodeResourcesFit";
/// API version accepted.
pub const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";

/// The whole configuration file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeSchedulerConfiguration {
    /// Must be `kubescheduler.config.k8s.io/v1` when set.
    pub api_version: Option<String>,
    /// Must be `KubeSchedulerConfiguration` when set.
    pub kind: Option<String>,
    /// Worker threads for Filter and Score (default 16, capped to the machine by the runtime; a
    /// section is split over them only when its work pays for it, see `SPLIT_MIN_WORK`).
    pub parallelism: i32,
    /// Leader election.
    pub leader_election: LeaderElectionConfiguration,
    /// API client settings.
    pub client_connection: ClientConnectionConfiguration,
    /// Serve `/debug/pprof/` (a CPU profile, the command line) and `/debug/flags/v` (the log
    /// verbosity, changed with `PUT`) on the secure port; off unless set (upstream defaults to on).
    pub enable_profiling: Option<bool>,
    /// Accepted for compatibility.
    pub enable_contention_profiling: Option<bool>,
    /// Percentage of nodes to find feasible before scoring; 0 = adaptive.
    pub percentage_of_nodes_to_score: Option<i32>,
    /// First backoff (seconds).
    pub pod_initial_backoff_seconds: i64,
    /// Backoff cap (seconds).
    pub pod_max_backoff_seconds: i64,
    /// Profiles, one per scheduler name.
    pub profiles: Vec<KubeSchedulerProfile>,
    /// HTTP extenders, called as upstream calls them (see [`crate::extender`]).
    pub extenders: Vec<Extender>,
    /// Accepted for compatibility.
    pub delay_cache_until_active: Option<bool>,
}

impl Default for KubeSchedulerConfiguration {
    fn default() -> Self {
        KubeSchedulerConfiguration {
            api_version: None,
            kind: None,
            parallelism: 16,
            leader_election: LeaderElectionConfiguration::default(),
            client_connection: ClientConnectionConfiguration::default(),
            enable_profiling: None,
            enable_contention_profiling: None,
            percentage_of_nodes_to_score: None,
            pod_initial_backoff_seconds: 1,
            pod_max_backoff_seconds: 10,
            profiles: Vec::new(),
            extenders: Vec::new(),
            delay_cache_until_active: None,
        }
    }
}

/// Leader election settings (`leaderElection`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LeaderElectionConfiguration {
    /// Whether to elect a leader before scheduling.
    pub leader_elect: bool,
    /// How long a lease is valid (`15s`).
    pub lease_duration: GoDuration,
    /// How long the leader retries renewing before giving up (`10s`).
    pub renew_deadline: GoDuration,
    /// How often candidates retry (`2s`).
    pub retry_period: GoDuration,
    /// Only `leases` is supported.
    pub resource_lock: String,
    /// Lease name (`unisched`; never `kube-scheduler`, which belongs to the default scheduler).
    pub resource_name: String,
    /// Lease namespace; empty = the scheduler's own namespace.
    pub resource_namespace: String,
}

impl Default for LeaderElectionConfiguration {
    fn default() -> Self {
        LeaderElectionConfiguration {
            leader_elect: true,
            lease_duration: GoDuration(Duration::from_secs(15)),
            renew_deadline: GoDuration(Duration::from_secs(10)),
            retry_period: GoDuration(Duration::from_secs(2)),
            resource_lock: "leases".into(),
            resource_name: DEFAULT_SCHEDULER_NAME.into(),
            resource_namespace: String::new(),
        }
    }
}

/// API client settings (`clientConnection`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ClientConnectionConfiguration {
    /// Path to a kubeconfig; empty = flags, then in-cluster.
    pub kubeconfig: String,
    /// Sustained writes per second (default 50). Negative disables the limit.
    pub qps: f32,
    /// Burst above qps (default 100).
    pub burst: i32,
    /// Accepted for compatibility; unisched speaks JSON.
    pub content_type: String,
    /// Accepted for compatibility.
    pub accept_content_types: String,
}

impl Default for ClientConnectionConfiguration {
    fn default() -> Self {
        ClientConnectionConfiguration {
            kubeconfig: String::new(),
            qps: 50.0,
            burst: 100,
            content_type: "application/json".into(),
            accept_content_types: String::new(),
        }
    }
}

/// One profile: a scheduler name with its plugins.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeSchedulerProfile {
    /// The `spec.schedulerName` this profile serves.
    pub scheduler_name: Option<String>,
    /// Overrides the global percentage.
    pub percentage_of_nodes_to_score: Option<i32>,
    /// Plugin sets per extension point.
    pub plugins: Option<Plugins>,
    /// Arguments per plugin.
    pub plugin_config: Vec<PluginConfig>,
}

impl KubeSchedulerProfile {
    /// A profile that runs exactly the named plugins, each at every extension point it serves
    /// (`multiPoint`), with every default plugin disabled (`*`).
    pub fn with_only_plugins(names: impl IntoIterator<Item = String>) -> Self {
        let plugin = |name: String| PluginRef { name, weight: None };
        KubeSchedulerProfile {
            plugins: Some(Plugins {
                multi_point: PluginSet {
                    enabled: names.into_iter().map(plugin).collect(),
                    disabled: vec![plugin("*".into())],
                },
                ..Plugins::default()
            }),
            ..KubeSchedulerProfile::default()
        }
    }
}

/// Plugin sets per extension point.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
#[allow(missing_docs)]
pub struct Plugins {
    pub pre_enqueue: PluginSet,
    pub queue_sort: PluginSet,
    pub pre_filter: PluginSet,
    pub filter: PluginSet,
    pub post_filter: PluginSet,
    pub pre_score: PluginSet,
    pub score: PluginSet,
    pub reserve: PluginSet,
    pub permit: PluginSet,
    pub pre_bind: PluginSet,
    pub bind: PluginSet,
    pub post_bind: PluginSet,
    pub placement_generate: PluginSet,
    pub placement_score: PluginSet,
    pub pod_group_post_filter: PluginSet,
    pub multi_point: PluginSet,
}

/// The extension points, in order, with their configuration names. The last three are the
/// pod-group cycle's (a group's candidate placements, their scores, and what to do when the
/// whole group does not fit).
pub const EXTENSION_POINTS: [&str; 15] = [
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
    "placementGenerate",
    "placementScore",
    "podGroupPostFilter",
];

impl Plugins {
    /// The set for an extension point by its configuration name.
    pub fn set(&self, point: &str) -> Option<&PluginSet> {
        Some(match point {
            "preEnqueue" => &self.pre_enqueue,
            "queueSort" => &self.queue_sort,
            "preFilter" => &self.pre_filter,
            "filter" => &self.filter,
            "postFilter" => &self.post_filter,
            "preScore" => &self.pre_score,
            "score" => &self.score,
            "reserve" => &self.reserve,
            "permit" => &self.permit,
            "preBind" => &self.pre_bind,
            "bind" => &self.bind,
            "postBind" => &self.post_bind,
            "placementGenerate" => &self.placement_generate,
            "placementScore" => &self.placement_score,
            "podGroupPostFilter" => &self.pod_group_post_filter,
            "multiPoint" => &self.multi_point,
            _ => return None,
        })
    }
}

/// Enabled and disabled plugins of one extension point.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PluginSet {
    /// Plugins to enable, after the defaults.
    pub enabled: Vec<PluginRef>,
    /// Default plugins to disable; `*` disables all of them.
    pub disabled: Vec<PluginRef>,
}

/// A plugin name with an optional score weight.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginRef {
    /// Plugin name.
    pub name: String,
    /// Score weight (Score and multiPoint only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// Arguments of one plugin.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginConfig {
    /// Plugin name.
    pub name: String,
    /// Arguments (the plugin's `…Args` type; `kind`/`apiVersion` are allowed and ignored).
    #[serde(default)]
    pub args: serde_json::Value,
}

/// A Go-style duration (`15s`, `1m30s`, `500ms`), as `metav1.Duration` serialises.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoDuration(pub Duration);

impl Serialize for GoDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_go_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_go_duration(&s)
            .map(GoDuration)
            .map_err(serde::de::Error::custom)
    }
}

/// Parses `1h2m3.5s`, `500ms`, `10us`, `0`.
pub fn parse_go_duration(s: &str) -> Result<Duration, ConfigError> {
    let bad = || ConfigError::Duration(s.to_string());
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return Err(bad());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if num_len == 0 {
            return Err(bad());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    if !total.is_finite() || total > 1e12 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(total))
}

/// Formats like Go's `time.Duration.String()` for whole seconds and milliseconds.
pub fn format_go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    let (h, m, s, milli) = (ms / 3_600_000, (ms / 60_000) % 60, (ms / 1000) % 60, ms % 1000);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if milli == 0 {
        out.push_str(&format!("{s}s"));
    } else if h == 0 && m == 0 && s == 0 {
        out.push_str(&format!("{milli}ms"));
    } else {
        let frac = format!("{milli:03}");
        out.push_str(&format!("{s}.{}s", frac.trim_end_matches('0')));
    }
    out
}

/// A configuration file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file is not valid YAML/JSON for the schema (unknown field, wrong type); the message
    /// names the field.
    #[error("decoding configuration: {0}")]
    Decode(String),
    /// Values that decode but are invalid, one line per field, upstream style.
    #[error("invalid configuration: {}", .0.join("; "))]
    Invalid(Vec<String>),
    /// A duration that is not Go's `time.ParseDuration` syntax (or negative, or absurdly long).
    #[error("invalid duration {0:?}")]
    Duration(String),
}

/// client-go's `leaderelection.JitterFactor`: retries wait up to this many retry periods.
pub const LEADER_ELECTION_JITTER_FACTOR: f64 = 1.2;

impl KubeSchedulerConfiguration {
    /// Parses YAML or JSON, applies defaults and validates.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        // An empty document (nothing, or only comments) would decode as "all defaults"; a
        // configuration file that says nothing is almost certainly a mistake (a failed template,
        // a wrong path in a ConfigMap), so it is rejected as upstream's decoder does.
        let document: serde_yaml::Value =
            serde_yaml::from_str(text).map_err(|e| ConfigError::Decode(e.to_string()))?;
        if document.is_null() {
            return Err(ConfigError::Decode(
                "the configuration is empty: Object 'Kind' is missing".to_string(),
            ));
        }
        let mut cfg: KubeSchedulerConfiguration =
            serde_yaml::from_str(text).map_err(|e| ConfigError::Decode(e.to_string()))?;
        cfg.complete();
        cfg.validate()?;
        Ok(cfg)
    }

    /// The default configuration, completed.
    pub fn defaulted() -> Self {
        let mut cfg = KubeSchedulerConfiguration::default();
        cfg.complete();
        cfg
    }

    /// Fills defaults that depend on other fields: one default profile when none is given, and
    /// the default scheduler name for a single profile that does not name one. As upstream, an
    /// explicit `schedulerName: ""` is kept (and rejected by [`Self::validate`]), and with several
    /// profiles every one must be named.
    pub fn complete(&mut self) {
        if self.profiles.is_empty() {
            self.profiles.push(KubeSchedulerProfile::default());
        }
        if let [only] = self.profiles.as_mut_slice()
            && only.scheduler_name.is_none()
        {
            only.scheduler_name = Some(DEFAULT_SCHEDULER_NAME.into());
        }
        self.ignore_extender_resources();
    }

    /// As upstream, the managed resources extenders mark `ignoredByScheduler` become every
    /// profile's NodeResourcesFit `ignoredResources` (replacing what the file set there).
    fn ignore_extender_resources(&mut self) {
        let ignored = crate::extender::config::ignored_extended_resources(&self.extenders);
        if ignored.is_empty() {
            return;
        }
        for profile in &mut self.profiles {
            let entry = match profile
                .plugin_config
                .iter_mut()
                .position(|pc| pc.name == NODE_RESOURCES_FIT)
            {
                Some(i) => &mut profile.plugin_config[i],
                None => {
                    profile.plugin_config.push(PluginConfig {
                        name: NODE_RESOURCES_FIT.into(),
                        args: serde_json::Value::Object(serde_json::Map::new()),
                    });
                    let last = profile.plugin_config.len() - 1;
                    &mut profile.plugin_config[last]
                }
            };
            if !entry.args.is_object() {
                entry.args = serde_json::Value::Object(serde_json::Map::new());
            }
            if let Some(args) = entry.args.as_object_mut() {
                args.insert("ignoredResources".into(), serde_json::json!(ignored));
            }
        }
    }

    /// Upstream-style validation. Every problem is reported, not only the first.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut errs = Vec::new();
        if let Some(v) = &self.api_version
            && v != API_VERSION
        {
            errs.push(format!(
                "apiVersion: Unsupported value: {v:?}: supported values: {API_VERSION:?}"
            ));
        }
        if let Some(k) = &self.kind
            && k != "KubeSchedulerConfiguration"
        {
            errs.push(format!(
                "kind: Unsupported value: {k:?}: supported values: \"KubeSchedulerConfiguration\""
            ));
        }
        if self.parallelism <= 0 {
            errs.push(format!(
                "parallelism: Invalid value: {}: should be an integer greater than 0",
                self.parallelism
            ));
        }
        check_percentage(
            &mut errs,
            "percentageOfNodesToScore",
            self.percentage_of_nodes_to_score,
        );
        if self.pod_initial_backoff_seconds <= 0 {
            errs.push(format!(
                "podInitialBackoffSeconds: Invalid value: {}: must be greater than 0",
                self.pod_initial_backoff_seconds
            ));
        }
        if self.pod_max_backoff_seconds < self.pod_initial_backoff_seconds {
            errs.push(format!(
                "podMaxBackoffSeconds: Invalid value: {}: must be greater than or equal to PodInitialBackoffSeconds",
                self.pod_max_backoff_seconds
            ));
        }
        crate::extender::config::validate_extenders(&self.extenders, &mut errs);
        let le = &self.leader_election;
        if le.leader_elect {
            if le.lease_duration.0.is_zero() {
                errs.push(
                    "leaderElection.leaseDuration: Invalid value: 0s: must be greater than zero".into(),
                );
            }
            if le.renew_deadline.0.is_zero() {
                errs.push(
                    "leaderElection.renewDeadline: Invalid value: 0s: must be greater than zero".into(),
                );
            }
            if le.retry_period.0.is_zero() {
                errs.push("leaderElection.retryPeriod: Invalid value: 0s: must be greater than zero".into());
            }
            if le.lease_duration.0 <= le.renew_deadline.0 {
                errs.push(format!(
                    "leaderElection.leaseDuration: Invalid value: {:?}: LeaseDuration must be greater than RenewDeadline",
                    format_go_duration(le.lease_duration.0)
                ));
            }
            // client-go's leader elector refuses to start otherwise (its retries are jittered by
            // up to 1.2 × retryPeriod, which must fit in the renew deadline).
            if !le.retry_period.0.is_zero()
                && le.renew_deadline.0 <= le.retry_period.0.mul_f64(LEADER_ELECTION_JITTER_FACTOR)
            {
                errs.push(format!(
                    "leaderElection.renewDeadline: Invalid value: {:?}: renewDeadline must be greater than retryPeriod*JitterFactor (retryPeriod {:?}, JitterFactor {LEADER_ELECTION_JITTER_FACTOR})",
                    format_go_duration(le.renew_deadline.0),
                    format_go_duration(le.retry_period.0)
                ));
            }
            if le.resource_lock != "leases" {
                errs.push(format!(
                    "leaderElection.resourceLock: Unsupported value: {:?}: supported values: \"leases\"",
                    le.resource_lock
                ));
            }
            if le.resource_name.is_empty() {
                errs.push("leaderElection.resourceName: Required value".into());
            }
        }
        if self.client_connection.burst < 0 {
            errs.push(format!(
                "clientConnection.burst: Invalid value: {}: must be non-negative",
                self.client_connection.burst
            ));
        }
        let mut names = BTreeSet::new();
        let mut queue_sort: Option<Vec<PluginRef>> = None;
        for (i, p) in self.profiles.iter().enumerate() {
            let path = format!("profiles[{i}]");
            match p.scheduler_name.as_deref() {
                None | Some("") => errs.push(format!("{path}.schedulerName: Required value")),
                Some(n) => {
                    if !names.insert(n.to_string()) {
                        errs.push(format!("{path}.schedulerName: Duplicate value: {n:?}"));
                    }
                }
            }
            check_percentage(
                &mut errs,
                &format!("{path}.percentageOfNodesToScore"),
                p.percentage_of_nodes_to_score,
            );
            let mut seen = BTreeSet::new();
            for (j, pc) in p.plugin_config.iter().enumerate() {
                if !seen.insert(pc.name.clone()) {
                    errs.push(format!(
                        "{path}.pluginConfig[{j}]: Duplicate value: {:?}",
                        pc.name
                    ));
                }
            }
            if let Some(plugins) = &p.plugins {
                for point in EXTENSION_POINTS.iter().chain(["multiPoint"].iter()) {
                    let Some(set) = plugins.set(point) else { continue };
                    for (j, e) in set.enabled.iter().enumerate() {
                        if let Some(w) = e.weight
                            && !(0..=100).contains(&w)
                        {
                            errs.push(format!(
                                "{path}.plugins.{point}.enabled[{j}].weight: Invalid value: {w}: must be in the range [0, 100]"
                            ));
                        }
                    }
                }
                let qs = plugins.queue_sort.enabled.clone();
                match &queue_sort {
                    None => queue_sort = Some(qs),
                    Some(first) if *first != qs => errs.push(format!(
                        "{path}.plugins.queueSort: Invalid value: {:?}: queueSort must be the same for all profiles",
                        qs.iter().map(|p| p.name.as_str()).collect::<Vec<_>>()
                    )),
                    _ => {}
                }
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(errs))
        }
    }
}

fn check_percentage(errs: &mut Vec<String>, path: &str, v: Option<i32>) {
    if let Some(v) = v
        && !(0..=100).contains(&v)
    {
        errs.push(format!("{path}: Invalid value: {v}: not in valid range [0-100]"));
    }
}

/// unisched's default multi-point plugins, in upstream order, with upstream weights. Plugins that
/// are not (yet) registered are skipped when a profile is built from defaults.
pub const DEFAULT_MULTI_POINT: &[(&str, i32)] = &[
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeName", 0),
    ("NodeUnschedulable", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("NodeVolumeLimits", 0),
    ("VolumeBinding", 0),
    ("VolumeZone", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DynamicResources", 2),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
    ("NodeDeclaredFeatures", 0),
    // Added by the workload gates (GenericWorkload; TopologyAwareWorkloadScheduling for the
    // last two): the registry leaves them out of the default profile when their gate is off.
    ("GangScheduling", 0),
    ("TopologyPlacementGenerator", 0),
    ("PodGroupPodsCount", 1),
];

/// Merges a default plugin set with a user set, as upstream: user-disabled defaults are dropped
/// (`*` drops all), a default the user re-enables is replaced in place (new weight), other user
/// entries follow the defaults.
pub fn merge_plugin_set(defaults: &[PluginRef], custom: &PluginSet) -> Vec<PluginRef> {
    let disabled: BTreeSet<&str> = custom.disabled.iter().map(|p| p.name.as_str()).collect();
    let all_disabled = disabled.contains("*");
    let mut out = Vec::new();
    let mut replaced = BTreeSet::new();
    for d in defaults {
        if all_disabled || disabled.contains(d.name.as_str()) {
            continue;
        }
        if let Some(c) = custom.enabled.iter().find(|c| c.name == d.name) {
            out.push(c.clone());
            replaced.insert(c.name.clone());
        } else {
            out.push(d.clone());
        }
    }
    for c in &custom.enabled {
        if !replaced.contains(&c.name) {
            out.push(c.clone());
        }
    }
    out
}

/// The plugins one profile runs, by extension point, as [`crate::Framework::plugin_names`] lists them
/// (score entries as `Name=weight`).
pub type ResolvedPlugins = std::collections::BTreeMap<&'static str, Vec<String>>;

impl KubeSchedulerConfiguration {
    /// The configuration as `/configz` serves it: `apiVersion`/`kind` set and every default that
    /// is not already in the struct applied (upstream's v1 defaults for the compatibility fields).
    pub fn effective(&self) -> KubeSchedulerConfiguration {
        let mut cfg = self.clone();
        cfg.complete();
        cfg.api_version = Some(API_VERSION.into());
        cfg.kind = Some("KubeSchedulerConfiguration".into());
        // Off by default, unlike upstream: profiling is an operating surface to ask for.
        cfg.enable_profiling.get_or_insert(false);
        cfg.enable_contention_profiling.get_or_insert(true);
        cfg.percentage_of_nodes_to_score.get_or_insert(0);
        cfg.delay_cache_until_active.get_or_insert(false);
        cfg
    }

    /// [`Self::effective`] as JSON, with each profile's `plugins` replaced by what the profile
    /// actually runs (`resolved`, in profile order): the defaults merged with the file's enabled and
    /// disabled lists, one `enabled` list per extension point, score weights included.
    pub fn effective_json(&self, resolved: &[ResolvedPlugins]) -> serde_json::Value {
        let cfg = self.effective();
        let mut v = serde_json::to_value(&cfg).unwrap_or_default();
        let Some(profiles) = v.get_mut("profiles").and_then(serde_json::Value::as_array_mut) else {
            return v;
        };
        for (p, points) in profiles.iter_mut().zip(resolved) {
            let mut plugins = serde_json::Map::new();
            for (point, names) in points {
                let enabled: Vec<serde_json::Value> = names
                    .iter()
                    .map(|n| match n.split_once('=').map(|(n, w)| (n, w.parse::<i32>())) {
                        Some((name, Ok(weight))) => serde_json::json!({"name": name, "weight": weight}),
                        _ => serde_json::json!({"name": n}),
                    })
                    .collect();
                plugins.insert((*point).to_string(), serde_json::json!({ "enabled": enabled }));
            }
            p["plugins"] = serde_json::Value::Object(plugins);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = KubeSchedulerConfiguration::defaulted();
        assert_eq!(c.parallelism, 16);
        assert_eq!(c.pod_initial_backoff_seconds, 1);
        assert_eq!(c.pod_max_backoff_seconds, 10);
        assert_eq!(c.profiles.len(), 1);
        assert_eq!(c.profiles[0].scheduler_name.as_deref(), Some("unisched"));
        assert_eq!(c.leader_election.resource_name, "unisched");
        assert_eq!(c.leader_election.lease_duration.0, Duration::from_secs(15));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn parse_full_file() {
        let y = r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
parallelism: 4
leaderElection:
  leaderElect: false
  leaseDuration: 1m30s
clientConnection:
  qps: 200
  burst: 400
profiles:
- schedulerName: unisched
  plugins:
    score:
      disabled: [{name: NodeResourcesBalancedAllocation}]
      enabled: [{name: NodeResourcesFit, weight: 5}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
- schedulerName: unisched-batch
"#;
        let c = KubeSchedulerConfiguration::from_yaml(y).unwrap();
        assert_eq!(c.parallelism, 4);
        assert!(!c.leader_election.leader_elect);
        assert_eq!(c.leader_election.lease_duration.0, Duration::from_secs(90));
        assert_eq!(c.client_connection.burst, 400);
        assert_eq!(c.profiles.len(), 2);
        assert_eq!(
            c.profiles[0].plugin_config[0].args["scoringStrategy"]["type"],
            "MostAllocated"
        );
    }

    #[test]
    fn extenders_decode_with_upstream_field_names() {
        let y = r#"
extenders:
- urlPrefix: https://ext.example:8443/scheduler
  filterVerb: filter
  preemptVerb: preempt
  prioritizeVerb: prioritize
  weight: 3
  bindVerb: bind
  enableHTTPS: true
  tlsConfig: {insecure: false, serverName: ext, caData: Zm9v, certFile: /c, keyFile: /k}
  httpTimeout: 2s
  nodeCacheCapable: true
  managedResources: [{name: example.com/gpu, ignoredByScheduler: true}, {name: example.com/fpga}]
  ignorable: true
profiles: [{schedulerName: a}, {schedulerName: b, pluginConfig: [{name: NodeResourcesFit, args: {ignoredResources: [x.io/y]}}]}]
"#;
        let c = KubeSchedulerConfiguration::from_yaml(y).unwrap();
        let e = &c.extenders[0];
        assert_eq!(e.url_prefix, "https://ext.example:8443/scheduler");
        assert_eq!(
            (
                e.filter_verb.as_str(),
                e.preempt_verb.as_str(),
                e.prioritize_verb.as_str(),
                e.bind_verb.as_str()
            ),
            ("filter", "preempt", "prioritize", "bind")
        );
        assert_eq!(e.weight, 3);
        assert!(e.enable_https && e.node_cache_capable && e.ignorable);
        assert_eq!(e.http_timeout.0, Duration::from_secs(2));
        let tls = e.tls_config.as_ref().unwrap();
        assert_eq!((tls.server_name.as_str(), tls.ca_data.as_str()), ("ext", "Zm9v"));
        assert_eq!(e.managed_resources.len(), 2);
        assert!(e.managed_resources[0].ignored_by_scheduler);
        // The ignored resource becomes every profile's NodeResourcesFit ignoredResources,
        // replacing what the file said, as upstream.
        for p in &c.profiles {
            let fit = p
                .plugin_config
                .iter()
                .find(|pc| pc.name == "NodeResourcesFit")
                .unwrap();
            assert_eq!(
                fit.args["ignoredResources"],
                serde_json::json!(["example.com/gpu"])
            );
        }
        // The effective configuration keeps the names and does not add the entry twice.
        let v = c.effective_json(&[]);
        assert_eq!(v["extenders"][0]["enableHTTPS"], true);
        assert_eq!(v["extenders"][0]["httpTimeout"], "2s");
        assert_eq!(c.effective().profiles[1].plugin_config.len(), 1);
    }

    #[test]
    fn validation_errors_name_fields() {
        let cases = [
            ("parallelism: 0", "parallelism: Invalid value: 0"),
            (
                "percentageOfNodesToScore: 120",
                "percentageOfNodesToScore: Invalid value: 120: not in valid range [0-100]",
            ),
            (
                "podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 2",
                "podMaxBackoffSeconds: Invalid value: 2",
            ),
            (
                "profiles: [{schedulerName: a}, {schedulerName: a}]",
                "profiles[1].schedulerName: Duplicate value: \"a\"",
            ),
            (
                "leaderElection: {leaseDuration: 5s, renewDeadline: 10s}",
                "LeaseDuration must be greater than RenewDeadline",
            ),
            (
                "profiles: [{schedulerName: a, pluginConfig: [{name: X}, {name: X}]}]",
                "profiles[0].pluginConfig[1]: Duplicate value: \"X\"",
            ),
            (
                "profiles: [{schedulerName: a, plugins: {queueSort: {enabled: [{name: A}]}}}, {schedulerName: b, plugins: {queueSort: {enabled: [{name: B}]}}}]",
                "queueSort must be the same for all profiles",
            ),
            (
                "profiles: [{schedulerName: \"\"}]",
                "profiles[0].schedulerName: Required value",
            ),
            (
                "profiles: [{schedulerName: a}, {}]",
                "profiles[1].schedulerName: Required value",
            ),
            (
                "leaderElection: {leaseDuration: 15s, renewDeadline: 10s, retryPeriod: 12s}",
                "leaderElection.renewDeadline: Invalid value: \"10s\": renewDeadline must be greater than retryPeriod*JitterFactor",
            ),
            // 1.2 × 9s = 10.8s: still too long for a 10s renew deadline.
            (
                "leaderElection: {retryPeriod: 9s}",
                "renewDeadline must be greater than retryPeriod*JitterFactor",
            ),
            ("", "the configuration is empty"),
            ("# only a comment\n", "the configuration is empty"),
            // Upstream's extender validation.
            (
                "extenders: [{urlPrefix: x, prioritizeVerb: p}]",
                "extenders[0].weight: Invalid value: 0: must have a positive weight applied to it",
            ),
            (
                "extenders: [{urlPrefix: x, prioritizeVerb: p, weight: -1}]",
                "extenders[0].weight: Invalid value: -1: must have a positive weight applied to it",
            ),
            (
                "extenders: [{urlPrefix: x, bindVerb: b}, {urlPrefix: y, bindVerb: b}]",
                "extenders: Invalid value: \"found 2 extenders implementing bind\": only one extender can implement bind",
            ),
            (
                "extenders: [{urlPrefix: x, managedResources: [{name: example.com/a}]}, {urlPrefix: y, managedResources: [{name: example.com/a}]}]",
                "extenders[1].managedResources[0].name: Invalid value: \"example.com/a\": duplicate extender managed resource name",
            ),
            (
                "extenders: [{urlPrefix: x, filterVerbs: f}]",
                "unknown field `filterVerbs`",
            ),
            (
                "extenders: [{urlPrefix: x, httpTimeout: soon}]",
                "invalid duration",
            ),
        ];
        for (yaml, want) in cases {
            let err = KubeSchedulerConfiguration::from_yaml(yaml)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{yaml}: got {err}");
        }
    }

    #[test]
    fn single_unnamed_profile_gets_the_default_name() {
        let c = KubeSchedulerConfiguration::from_yaml("profiles: [{}]").unwrap();
        assert_eq!(
            c.profiles[0].scheduler_name.as_deref(),
            Some(DEFAULT_SCHEDULER_NAME)
        );
        // A retry period just under renewDeadline / 1.2 is accepted.
        let c = KubeSchedulerConfiguration::from_yaml("leaderElection: {retryPeriod: 8s}").unwrap();
        assert_eq!(c.leader_election.retry_period.0, Duration::from_secs(8));
        // Leader election off: its timings are not checked.
        assert!(
            KubeSchedulerConfiguration::from_yaml("leaderElection: {leaderElect: false, retryPeriod: 30s}")
                .is_ok()
        );
    }

    #[test]
    fn unknown_fields_are_errors() {
        let err = KubeSchedulerConfiguration::from_yaml("parallelizm: 3")
            .unwrap_err()
            .to_string();
        assert!(err.contains("parallelizm"), "{err}");
        let err = KubeSchedulerConfiguration::from_yaml("profiles: [{schedulerName: a, plugin: {}}]")
            .unwrap_err()
            .to_string();
        assert!(err.contains("plugin"), "{err}");
    }

    #[test]
    fn go_durations() {
        let cases = [
            ("15s", 15_000),
            ("1m30s", 90_000),
            ("500ms", 500),
            ("1h", 3_600_000),
            ("0", 0),
            ("1.5s", 1500),
        ];
        for (s, ms) in cases {
            assert_eq!(parse_go_duration(s).unwrap().as_millis(), ms, "{s}");
        }
        for bad in ["", "10", "abc", "-1s", "5x"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(format_go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_go_duration(Duration::from_millis(1500)), "1.5s");
    }

    #[test]
    fn merge_table() {
        let r = |n: &str, w: Option<i32>| PluginRef {
            name: n.into(),
            weight: w,
        };
        let defaults = vec![r("A", Some(1)), r("B", Some(2)), r("C", None)];
        let cases = vec![
            (
                PluginSet::default(),
                vec![r("A", Some(1)), r("B", Some(2)), r("C", None)],
            ),
            (
                PluginSet {
                    enabled: vec![],
                    disabled: vec![r("B", None)],
                },
                vec![r("A", Some(1)), r("C", None)],
            ),
            (
                PluginSet {
                    enabled: vec![r("D", None)],
                    disabled: vec![r("*", None)],
                },
                vec![r("D", None)],
            ),
            (
                PluginSet {
                    enabled: vec![r("B", Some(7)), r("D", None)],
                    disabled: vec![],
                },
                vec![r("A", Some(1)), r("B", Some(7)), r("C", None), r("D", None)],
            ),
        ];
        for (custom, want) in cases {
            assert_eq!(merge_plugin_set(&defaults, &custom), want, "{custom:?}");
        }
    }

    #[test]
    fn effective_sets_type_meta_and_defaults_and_resolved_plugins() {
        let cfg = KubeSchedulerConfiguration::from_yaml("profiles: [{schedulerName: a}]").unwrap();
        let mut resolved = ResolvedPlugins::new();
        resolved.insert("filter", vec!["NodeName".into(), "NodeResourcesFit".into()]);
        resolved.insert(
            "score",
            vec!["NodeResourcesFit=1".into(), "ImageLocality=2".into()],
        );
        let v = cfg.effective_json(&[resolved]);
        assert_eq!(v["apiVersion"], API_VERSION);
        assert_eq!(v["kind"], "KubeSchedulerConfiguration");
        assert_eq!(v["parallelism"], 16);
        assert_eq!(v["percentageOfNodesToScore"], 0);
        assert_eq!(v["enableProfiling"], false);
        assert_eq!(v["delayCacheUntilActive"], false);
        assert_eq!(v["podMaxBackoffSeconds"], 10);
        assert_eq!(v["leaderElection"]["leaseDuration"], "15s");
        assert_eq!(v["clientConnection"]["qps"], 50.0);
        let p = &v["profiles"][0];
        assert_eq!(p["schedulerName"], "a");
        assert_eq!(p["plugins"]["filter"]["enabled"][1]["name"], "NodeResourcesFit");
        assert_eq!(
            p["plugins"]["score"]["enabled"][1],
            serde_json::json!({"name": "ImageLocality", "weight": 2})
        );
        // Round trip: what /configz serves is itself a valid configuration file.
        let back = KubeSchedulerConfiguration::from_yaml(&v.to_string()).unwrap();
        assert_eq!(back.api_version.as_deref(), Some(API_VERSION));
    }
}

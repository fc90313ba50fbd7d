//! Building a [`Framework`] from a `KubeSchedulerProfile` and a registry of plugin constructors.
//!
//! Building and running are apart because they change for different reasons: this module follows
//! upstream's configuration rules (which plugins a point gets, in which order, with which weight,
//! and which configurations are refused), the run loops follow its runtime semantics. Everything
//! here happens once per profile, before the first pod.
//!
//! Multi-point entries expand to every point a plugin implements; a plugin listed at a specific
//! point overrides its multi-point entry there, and `disabled` at a specific point removes it from
//! that point only.

use std::{
    collections::{BTreeMap, BTreeSet},
    error::Error,
    sync::Arc,
};

use super::{Framework, WeightedScore, timing::NoObserver};
use crate::{
    BindPlugin, Plugin, QueueSortPlugin,
    config::{
        DEFAULT_MULTI_POINT, DEFAULT_SCHEDULER_NAME, EXTENSION_POINTS, KubeSchedulerProfile, PluginRef,
        PluginSet, Plugins, merge_plugin_set,
    },
    permit::WaitingPods,
};

/// Constructs plugins by name. The plugins crate provides the in-tree registry; tests provide fakes.
pub trait PluginRegistry {
    /// True when a plugin of that name can be built.
    fn contains(&self, name: &str) -> bool;
    /// True when the plugin belongs in the default profile (upstream adds some only when their
    /// feature gate is on); by default, every plugin the registry can build.
    fn in_default_profile(&self, name: &str) -> bool {
        self.contains(name)
    }
    /// Builds the plugin with its `pluginConfig` args (`Null` when none were given).
    fn build(&self, name: &str, args: &serde_json::Value) -> Result<Arc<dyn Plugin>, PluginBuildError>;
}

/// Why a registry could not build a plugin: whatever its constructor reported (typically that
/// the args do not decode or do not validate), shown as the constructor worded it.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct PluginBuildError(Box<dyn Error + Send + Sync>);

impl PluginBuildError {
    /// The constructor's error.
    pub fn new(source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        PluginBuildError(source.into())
    }
}

impl From<String> for PluginBuildError {
    fn from(message: String) -> Self {
        PluginBuildError::new(message)
    }
}

impl From<&str> for PluginBuildError {
    fn from(message: &str) -> Self {
        PluginBuildError::new(message)
    }
}

/// Why a profile could not be built. Messages follow upstream.
#[derive(Debug, thiserror::Error)]
pub enum FrameworkError {
    /// A configured plugin is not in the registry.
    #[error("{point} plugin {name:?} does not exist")]
    UnknownPlugin {
        /// Extension point.
        point: String,
        /// Plugin name.
        name: String,
    },
    /// A plugin listed at a point it does not implement.
    #[error("plugin {name:?} does not extend {point} plugin")]
    DoesNotExtend {
        /// Plugin name.
        name: String,
        /// Extension point.
        point: String,
    },
    /// Not exactly one QueueSort plugin.
    #[error(
        "only one queue sort plugin required for profile with scheduler name {profile:?}, but got {count}"
    )]
    QueueSort {
        /// Profile.
        profile: String,
        /// How many were configured.
        count: usize,
    },
    /// No Bind plugin.
    #[error("at least one bind plugin is needed for profile with scheduler name {0:?}")]
    NoBind(String),
    /// A plugin listed twice at one point.
    #[error("plugin {name:?} already registered as {point:?}")]
    Duplicate {
        /// Plugin name.
        name: String,
        /// Extension point.
        point: String,
    },
    /// The plugin's constructor rejected its args.
    #[error("initializing plugin {name:?}: {source}")]
    Init {
        /// Plugin name.
        name: String,
        /// What was wrong.
        #[source]
        source: PluginBuildError,
    },
    /// `pluginConfig` for a plugin that does not exist.
    #[error("pluginConfig for unknown plugin {0:?}")]
    UnknownPluginConfig(String),
}

/// A point's `(plugin, weight)` list, in the order the point runs them.
type PointPlugins = Vec<(Arc<dyn Plugin>, i64)>;

impl Framework {
    /// Builds a profile. Plugins are constructed once, even when they serve several points.
    pub fn new(
        profile: &KubeSchedulerProfile,
        registry: &dyn PluginRegistry,
    ) -> Result<Framework, FrameworkError> {
        let name = profile
            .scheduler_name
            .clone()
            .unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.into());
        let plugins_cfg = profile.plugins.clone().unwrap_or_default();
        let multi = merge_plugin_set(&default_multi_point(registry), &plugins_cfg.multi_point);
        let needed = configured_plugins(&plugins_cfg, &multi, registry)?;
        for pc in &profile.plugin_config {
            if !registry.contains(&pc.name) {
                return Err(FrameworkError::UnknownPluginConfig(pc.name.clone()));
            }
        }
        let built = build_plugins(profile, registry, &needed)?;
        let mut resolved: BTreeMap<&str, PointPlugins> = BTreeMap::new();
        for point in EXTENSION_POINTS {
            let set = plugins_cfg.set(point).cloned().unwrap_or_default();
            resolved.insert(point, resolve_point(point, &set, &multi, &built)?);
        }
        Framework::assemble(name, profile.percentage_of_nodes_to_score, built, resolved)
    }

    /// The framework of the resolved point lists, checked for upstream's two requirements: one
    /// QueueSort plugin and at least one Bind plugin.
    fn assemble(
        name: String,
        percentage_of_nodes_to_score: Option<i32>,
        built: BTreeMap<String, Arc<dyn Plugin>>,
        mut resolved: BTreeMap<&str, PointPlugins>,
    ) -> Result<Framework, FrameworkError> {
        // Events and assumed-pod hooks come from the plugins some point uses, whichever.
        let used: BTreeSet<String> = resolved
            .values()
            .flatten()
            .map(|(p, _)| p.name().to_string())
            .collect();
        let events = built
            .iter()
            .filter(|(n, _)| used.contains(*n))
            .filter_map(|(n, p)| {
                p.clone()
                    .as_enqueue_extensions()
                    .map(|e| (n.clone(), e.events_to_register()))
            })
            .collect();
        let assumed_pod = built
            .iter()
            .filter(|(n, _)| used.contains(*n))
            .filter_map(|(_, p)| p.clone().as_assumed_pod())
            .collect();
        let mut take = |point: &str| resolved.remove(point).unwrap_or_default().into_iter();
        let queue_sorts: Vec<Arc<dyn QueueSortPlugin>> =
            take("queueSort").filter_map(|(p, _)| p.as_queue_sort()).collect();
        if queue_sorts.len() != 1 {
            return Err(FrameworkError::QueueSort {
                profile: name,
                count: queue_sorts.len(),
            });
        }
        let bind: Vec<Arc<dyn BindPlugin>> = take("bind").filter_map(|(p, _)| p.as_bind()).collect();
        if bind.is_empty() {
            return Err(FrameworkError::NoBind(name));
        }
        let filter: Vec<_> = take("filter").filter_map(|(p, _)| p.as_filter()).collect();
        // The gang's quorum check is not a configured point: any plugin in use that judges
        // placements does (as upstream).
        let placement_feasible = built
            .iter()
            .filter(|(n, _)| used.contains(*n))
            .filter_map(|(_, p)| p.clone().as_placement_feasible())
            .collect();
        Ok(Framework {
            profile_name: name,
            percentage_of_nodes_to_score,
            pre_enqueue: take("preEnqueue")
                .filter_map(|(p, _)| p.as_pre_enqueue())
                .collect(),
            queue_sort: queue_sorts.into_iter().next().ok_or(FrameworkError::QueueSort {
                profile: String::new(),
                count: 0,
            })?,
            pre_filter: take("preFilter").filter_map(|(p, _)| p.as_pre_filter()).collect(),
            filter_names: filter.iter().map(|p| Arc::from(p.name())).collect(),
            filter,
            post_filter: take("postFilter")
                .filter_map(|(p, _)| p.as_post_filter())
                .collect(),
            pre_score: take("preScore").filter_map(|(p, _)| p.as_pre_score()).collect(),
            score: take("score")
                .filter_map(|(p, w)| p.as_score().map(|plugin| WeightedScore { plugin, weight: w }))
                .collect(),
            reserve: take("reserve").filter_map(|(p, _)| p.as_reserve()).collect(),
            permit: take("permit").filter_map(|(p, _)| p.as_permit()).collect(),
            pre_bind: take("preBind").filter_map(|(p, _)| p.as_pre_bind()).collect(),
            bind,
            post_bind: take("postBind").filter_map(|(p, _)| p.as_post_bind()).collect(),
            placement_generate: take("placementGenerate")
                .filter_map(|(p, _)| p.as_placement_generate())
                .collect(),
            placement_score: take("placementScore")
                .filter_map(|(p, w)| p.as_placement_score().map(|p| (p, w)))
                .collect(),
            placement_feasible,
            pod_group_post_filter: take("podGroupPostFilter")
                .filter_map(|(p, _)| p.as_pod_group_post_filter())
                .collect(),
            assumed_pod,
            events,
            plugins: built,
            waiting_pods: WaitingPods::default(),
            observer: Arc::new(NoObserver),
            extenders: crate::extender::Extenders::default(),
        })
    }
}

/// The names of every plugin the profile enables somewhere, each checked to be in the registry:
/// first the points' own entries (in point order), then the multi-point ones.
fn configured_plugins(
    plugins_cfg: &Plugins,
    multi: &[PluginRef],
    registry: &dyn PluginRegistry,
) -> Result<BTreeSet<String>, FrameworkError> {
    let mut needed: BTreeSet<String> = BTreeSet::new();
    for point in EXTENSION_POINTS {
        let Some(set) = plugins_cfg.set(point) else {
            continue;
        };
        for p in &set.enabled {
            if !registry.contains(&p.name) {
                return Err(FrameworkError::UnknownPlugin {
                    point: point_type(point),
                    name: p.name.clone(),
                });
            }
            needed.insert(p.name.clone());
        }
    }
    for p in multi {
        if !registry.contains(&p.name) {
            return Err(FrameworkError::UnknownPlugin {
                point: "MultiPoint".into(),
                name: p.name.clone(),
            });
        }
        needed.insert(p.name.clone());
    }
    Ok(needed)
}

/// Constructs each needed plugin once, with its `pluginConfig` args.
fn build_plugins(
    profile: &KubeSchedulerProfile,
    registry: &dyn PluginRegistry,
    needed: &BTreeSet<String>,
) -> Result<BTreeMap<String, Arc<dyn Plugin>>, FrameworkError> {
    let mut built: BTreeMap<String, Arc<dyn Plugin>> = BTreeMap::new();
    for n in needed {
        let args = profile
            .plugin_config
            .iter()
            .find(|pc| &pc.name == n)
            .map(|pc| pc.args.clone())
            .unwrap_or(serde_json::Value::Null);
        let plugin = registry.build(n, &args).map_err(|source| FrameworkError::Init {
            name: n.clone(),
            source,
        })?;
        built.insert(n.clone(), plugin);
    }
    Ok(built)
}

/// One point's ordered `(plugin, weight)` list from its own `set` and the merged multi-point
/// list: first the multi-point plugins the point's entries override (in the point's order, with
/// the point's weight, else the multi-point one), then the other multi-point plugins that
/// implement the point and are not disabled there, then the point's remaining entries.
fn resolve_point(
    point: &str,
    set: &PluginSet,
    multi: &[PluginRef],
    built: &BTreeMap<String, Arc<dyn Plugin>>,
) -> Result<PointPlugins, FrameworkError> {
    let implements = probe(point);
    let specific = &set.enabled;
    let disabled: BTreeSet<&str> = set.disabled.iter().map(|p| p.name.as_str()).collect();
    let weight_of = |r: &PluginRef, fallback: Option<i32>| -> i64 {
        i64::from(r.weight.or(fallback).filter(|w| *w > 0).unwrap_or(1))
    };
    let mut overrides = Vec::new();
    let mut multi_only = Vec::new();
    let specific_names: BTreeSet<&str> = specific.iter().map(|p| p.name.as_str()).collect();
    if !disabled.contains("*") {
        for m in multi {
            let Some(p) = built.get(&m.name) else { continue };
            if !implements(p) || disabled.contains(m.name.as_str()) {
                continue;
            }
            if specific_names.contains(m.name.as_str()) {
                overrides.push(m.name.clone());
                continue;
            }
            multi_only.push((p.clone(), weight_of(m, None)));
        }
    }
    let mut list: PointPlugins = Vec::new();
    let mut seen = BTreeSet::new();
    for s in specific.iter().filter(|s| overrides.contains(&s.name)) {
        let Some(p) = built.get(&s.name) else { continue };
        let multi_weight = multi.iter().find(|m| m.name == s.name).and_then(|m| m.weight);
        list.push((p.clone(), weight_of(s, multi_weight)));
        seen.insert(s.name.clone());
    }
    for (p, w) in multi_only {
        seen.insert(p.name().to_string());
        list.push((p, w));
    }
    for s in specific.iter().filter(|s| !overrides.contains(&s.name)) {
        let Some(p) = built.get(&s.name) else { continue };
        if !implements(p) {
            return Err(FrameworkError::DoesNotExtend {
                name: s.name.clone(),
                point: point_type(point),
            });
        }
        if !seen.insert(s.name.clone()) {
            return Err(FrameworkError::Duplicate {
                name: s.name.clone(),
                point: point.to_string(),
            });
        }
        list.push((p.clone(), weight_of(s, None)));
    }
    Ok(list)
}

fn default_multi_point(registry: &dyn PluginRegistry) -> Vec<PluginRef> {
    DEFAULT_MULTI_POINT
        .iter()
        .filter(|(n, _)| registry.in_default_profile(n))
        .map(|(n, w)| PluginRef {
            name: (*n).to_string(),
            weight: (*w > 0).then_some(*w),
        })
        .collect()
}

/// Which conversions a point uses, so expansion can test "implements".
type Probe = fn(&Arc<dyn Plugin>) -> bool;

fn probe(point: &str) -> Probe {
    match point {
        "preEnqueue" => |p| p.clone().as_pre_enqueue().is_some(),
        "queueSort" => |p| p.clone().as_queue_sort().is_some(),
        "preFilter" => |p| p.clone().as_pre_filter().is_some(),
        "filter" => |p| p.clone().as_filter().is_some(),
        "postFilter" => |p| p.clone().as_post_filter().is_some(),
        "preScore" => |p| p.clone().as_pre_score().is_some(),
        "score" => |p| p.clone().as_score().is_some(),
        "reserve" => |p| p.clone().as_reserve().is_some(),
        "permit" => |p| p.clone().as_permit().is_some(),
        "preBind" => |p| p.clone().as_pre_bind().is_some(),
        "bind" => |p| p.clone().as_bind().is_some(),
        "placementGenerate" => |p| p.clone().as_placement_generate().is_some(),
        "placementScore" => |p| p.clone().as_placement_score().is_some(),
        "podGroupPostFilter" => |p| p.clone().as_pod_group_post_filter().is_some(),
        _ => |p| p.clone().as_post_bind().is_some(),
    }
}

/// A point's configuration name as upstream's error messages spell its plugin type
/// (`preFilter` → `PreFilterPlugin`).
fn point_type(point: &str) -> String {
    let mut c = point.chars();
    match c.next() {
        Some(f) => format!("{}{}Plugin", f.to_ascii_uppercase(), c.as_str()),
        None => String::new(),
    }
}

//! The registry of plugin constructors: what `Framework::new` uses to build a profile's plugins by
//! name from their `pluginConfig` args.
//!
//! Plugins get what they need from outside the scheduling core (the API binder, the DRA side's
//! extended-resource mapping) through [`PluginContext`], built once by the runtime. Out-of-tree
//! plugins are added with [`Registry::register`].
//!
//! A bad `pluginConfig[].args` is a configuration error, so it is found when the configuration is
//! validated ([`validate_plugin_args`], [`Registry::validate_plugin_args`]), before the scheduler
//! connects to anything, and not only when the runtime builds the profiles. Validation builds each
//! configured plugin and drops it: constructors only decode, check and store their args, so the
//! checks are exactly the ones the real build makes, with no second copy to drift.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::api::core::v1::Pod;
use unisched_cache::{DraCache, VolumeCache};
use unisched_framework::{
    Plugin, PluginRegistry, PodGroupStore,
    config::{ConfigError, KubeSchedulerConfiguration},
};

use crate::{
    Binder, DefaultBinder, DraApi, DynamicResources, DynamicResourcesArgs, ExtendedResourceResolver,
    NodeAffinity, NodeAffinityArgs, NodeDeclaredFeatures, NodeName, NodePorts,
    NodeResourcesBalancedAllocation, NodeResourcesBalancedAllocationArgs, NodeResourcesFit,
    NodeResourcesFitArgs, NodeUnschedulable, PrioritySort, SchedulingGates, TaintToleration,
    default_binder::BindError,
    helper::{PluginArgsError, decode_args},
    names,
};
use crate::{DefaultPreemption, DefaultPreemptionArgs, PdbLister, Preemptor};
use crate::{DeviceResources, DeviceResourcesArgs};
use crate::{GangScheduling, PodGroupPodsCount, TopologyPlacementGenerator};
use crate::{
    ImageLocality, InterPodAffinity, InterPodAffinityArgs, NamespaceLister, PodTopologySpread,
    PodTopologySpreadArgs,
};
use crate::{NodeVolumeLimits, VolumeApi, VolumeBinding, VolumeBindingArgs, VolumeRestrictions, VolumeZone};

/// The feature gates plugins read, copied once from the scheduler's gates (as upstream hands its
/// plugins a feature set), so that plugins do not depend on the gate table. Start from
/// [`Default`] (upstream's defaults) and set fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PluginFeatures {
    /// `TaintTolerationComparisonOperators` (alpha, off by default): the `Gt`/`Lt` toleration
    /// operators in TaintToleration, NodeUnschedulable and PodTopologySpread's taint policy.
    pub taint_toleration_comparison_operators: bool,
    /// `DRAWorkloadResourceClaims` (beta; on in unisched): a PodGroup's ResourceClaims are
    /// shared by its pods, reserved for the group (needs the PodGroups, [`PluginContext::with_pod_groups`]).
    pub workload_resource_claims: bool,
    /// `StorageCapacityScoring` (beta, on by default): VolumeBinding scores nodes by the free
    /// storage (CSIStorageCapacity) left for the claims it would provision there, with its `shape`.
    pub storage_capacity_scoring: bool,
    /// `VolumeLimitScaling` (beta, on by default): NodeVolumeLimits rejects a node whose CSINode
    /// lacks a driver whose CSIDriver sets `preventPodSchedulingIfMissing`.
    pub volume_limit_scaling: bool,
    /// `PodGroupPreemptionPolicy` (alpha, off by default): a PodGroup's own `preemptionPolicy`
    /// decides whether it preempts, rather than its members'.
    pub pod_group_preemption_policy: bool,
}

impl Default for PluginFeatures {
    /// Upstream's defaults.
    fn default() -> Self {
        PluginFeatures {
            taint_toleration_comparison_operators: false,
            workload_resource_claims: false,
            storage_capacity_scoring: true,
            volume_limit_scaling: true,
            pod_group_preemption_policy: false,
        }
    }
}

/// What plugins may use from outside the scheduling core. Construct with [`PluginContext::new`] and
/// the `with_*` methods; fields are added as plugins need them.
#[derive(Clone)]
#[non_exhaustive]
pub struct PluginContext {
    /// Writes bindings (the runtime's API writer; a recording fake in tests).
    pub binder: Arc<dyn Binder>,
    /// Maps extended resources to DeviceClasses (KEP-5004); `None` disables delegation to DRA.
    pub extended_resources: Option<Arc<dyn ExtendedResourceResolver>>,
    /// Namespace labels for `namespaceSelector` in pod affinity terms; `None` limits terms to the
    /// namespaces they list (or their pod's own).
    pub namespaces: Option<Arc<dyn NamespaceLister>>,
    /// The DRA state (slices, classes, claims, in-flight allocations) DynamicResources reads and
    /// updates; `None`: pods with claims are unschedulable.
    pub dra: Option<Arc<DraCache>>,
    /// The DRA API writes of the binding cycle (claim status, extended-resource claims, pod status).
    pub dra_api: Option<Arc<dyn DraApi>>,
    /// PVs, PVCs, StorageClasses and CSINodes for the volume plugins; `None`: pods with claims are
    /// unschedulable.
    pub volumes: Option<Arc<VolumeCache>>,
    /// VolumeBinding's binding-cycle writes (PV `claimRef`, PVC `selected-node`).
    pub volume_api: Option<Arc<dyn VolumeApi>>,
    /// Executes DefaultPreemption's evictions; `None`: candidates are nominated but nobody is evicted.
    pub preemptor: Option<Arc<dyn Preemptor>>,
    /// PodDisruptionBudgets for DefaultPreemption; `None`: no budget is considered.
    pub pdbs: Option<Arc<dyn PdbLister>>,
    /// The PodGroups and their members (GenericWorkload); `None`: pods are scheduled one by one
    /// and the workload plugins are not in the default profile.
    pub pod_groups: Option<Arc<PodGroupStore>>,
    /// Whether the default profile places groups by topology (TopologyAwareWorkloadScheduling).
    pub topology_aware_workloads: bool,
    /// The feature gates plugins read.
    pub features: PluginFeatures,
}

impl std::fmt::Debug for PluginContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginContext")
            .field("extended_resources", &self.extended_resources.is_some())
            .field("namespaces", &self.namespaces.is_some())
            .field("dra", &self.dra.is_some())
            .field("dra_api", &self.dra_api.is_some())
            .field("volumes", &self.volumes.is_some())
            .field("preemptor", &self.preemptor.is_some())
            .field("pdbs", &self.pdbs.is_some())
            .field("pod_groups", &self.pod_groups.is_some())
            .field("features", &self.features)
            .finish_non_exhaustive()
    }
}

impl PluginContext {
    /// A context with a binder and nothing else.
    pub fn new(binder: Arc<dyn Binder>) -> Self {
        PluginContext {
            binder,
            extended_resources: None,
            dra: None,
            dra_api: None,
            namespaces: None,
            volumes: None,
            volume_api: None,
            preemptor: None,
            pdbs: None,
            pod_groups: None,
            topology_aware_workloads: false,
            features: PluginFeatures::default(),
        }
    }

    /// Sets the feature gates plugins read.
    #[must_use]
    pub fn with_features(mut self, features: PluginFeatures) -> Self {
        self.features = features;
        self
    }

    /// Schedules pod groups from `groups` (GenericWorkload), by topology when
    /// `topology_aware` (TopologyAwareWorkloadScheduling).
    #[must_use]
    pub fn with_pod_groups(mut self, groups: Arc<PodGroupStore>, topology_aware: bool) -> Self {
        self.pod_groups = Some(groups);
        self.topology_aware_workloads = topology_aware;
        self
    }

    /// Sets DefaultPreemption's eviction executor and PodDisruptionBudget lister.
    #[must_use]
    pub fn with_preemption(mut self, preemptor: Arc<dyn Preemptor>, pdbs: Arc<dyn PdbLister>) -> Self {
        self.preemptor = Some(preemptor);
        self.pdbs = Some(pdbs);
        self
    }

    /// Sets the volume state and API writer for the volume plugins.
    #[must_use]
    pub fn with_volumes(mut self, volumes: Arc<VolumeCache>, api: Arc<dyn VolumeApi>) -> Self {
        self.volumes = Some(volumes);
        self.volume_api = Some(api);
        self
    }

    /// Sets the namespace lister (InterPodAffinity's `namespaceSelector`).
    #[must_use]
    pub fn with_namespaces(mut self, lister: Arc<dyn NamespaceLister>) -> Self {
        self.namespaces = Some(lister);
        self
    }

    /// Sets the extended-resource resolver.
    #[must_use]
    pub fn with_extended_resources(mut self, resolver: Arc<dyn ExtendedResourceResolver>) -> Self {
        self.extended_resources = Some(resolver);
        self
    }

    /// Sets the DRA state and API writer for DynamicResources. Unless a resolver was set already,
    /// the DRA state also becomes the extended-resource resolver of NodeResourcesFit (KEP-5004).
    #[must_use]
    pub fn with_dra(mut self, dra: Arc<DraCache>, api: Arc<dyn DraApi>) -> Self {
        if self.extended_resources.is_none() {
            self.extended_resources = Some(dra.clone());
        }
        self.dra = Some(dra);
        self.dra_api = Some(api);
        self
    }
}

/// Builds a plugin from its args and the context. It must do nothing but decode, check and keep
/// its args and the context: configuration validation calls it to check args, and drops the plugin.
pub type PluginFactory =
    Arc<dyn Fn(&serde_json::Value, &PluginContext) -> Result<Arc<dyn Plugin>, PluginArgsError> + Send + Sync>;

/// A registry that cannot take a plugin.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The name is taken.
    #[error("a plugin named {0} already exists")]
    Duplicate(String),
}

/// Plugin constructors by name.
#[derive(Clone)]
pub struct Registry {
    context: PluginContext,
    factories: BTreeMap<String, PluginFactory>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("plugins", &self.factories.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Plugins without args accept no args, an empty object, or only `kind`/`apiVersion`.
fn no_args(name: &str, args: &serde_json::Value) -> Result<(), PluginArgsError> {
    match args {
        serde_json::Value::Null => Ok(()),
        serde_json::Value::Object(m) => match m.keys().find(|k| *k != "kind" && *k != "apiVersion") {
            None => Ok(()),
            Some(k) => Err(PluginArgsError::UnexpectedField {
                plugin: name.to_string(),
                field: k.clone(),
            }),
        },
        other => Err(PluginArgsError::NotAnObject {
            plugin: name.to_string(),
            value: other.to_string(),
        }),
    }
}

fn stateless<P: Plugin + Default>(name: &'static str) -> PluginFactory {
    Arc::new(move |args, _ctx| {
        no_args(name, args)?;
        Ok(Arc::new(P::default()) as Arc<dyn Plugin>)
    })
}

impl Registry {
    /// An empty registry.
    pub fn new(context: PluginContext) -> Self {
        Registry {
            context,
            factories: BTreeMap::new(),
        }
    }

    /// The in-tree plugins.
    pub fn in_tree(context: PluginContext) -> Self {
        let mut r = Registry::new(context);
        let entries: Vec<(&'static str, PluginFactory)> = vec![
            (
                names::PRIORITY_SORT,
                stateless::<PrioritySort>(names::PRIORITY_SORT),
            ),
            (
                names::SCHEDULING_GATES,
                stateless::<SchedulingGates>(names::SCHEDULING_GATES),
            ),
            (
                names::NODE_UNSCHEDULABLE,
                Arc::new(|args, ctx| {
                    no_args(names::NODE_UNSCHEDULABLE, args)?;
                    Ok(Arc::new(NodeUnschedulable {
                        enable_comparison_operators: ctx.features.taint_toleration_comparison_operators,
                    }) as Arc<dyn Plugin>)
                }),
            ),
            (names::NODE_NAME, stateless::<NodeName>(names::NODE_NAME)),
            (
                names::TAINT_TOLERATION,
                Arc::new(|args, ctx| {
                    no_args(names::TAINT_TOLERATION, args)?;
                    Ok(Arc::new(TaintToleration {
                        enable_comparison_operators: ctx.features.taint_toleration_comparison_operators,
                    }) as Arc<dyn Plugin>)
                }),
            ),
            (names::NODE_PORTS, stateless::<NodePorts>(names::NODE_PORTS)),
            (
                names::NODE_DECLARED_FEATURES,
                stateless::<NodeDeclaredFeatures>(names::NODE_DECLARED_FEATURES),
            ),
            (
                names::NODE_AFFINITY,
                Arc::new(|args, _ctx| {
                    let a: NodeAffinityArgs = decode_args(args)?;
                    Ok(Arc::new(NodeAffinity::new(&a)?) as Arc<dyn Plugin>)
                }),
            ),
            (
                names::NODE_RESOURCES_FIT,
                Arc::new(|args, ctx| {
                    let a: NodeResourcesFitArgs = decode_args(args)?;
                    Ok(
                        Arc::new(NodeResourcesFit::new(&a, ctx.extended_resources.clone())?)
                            as Arc<dyn Plugin>,
                    )
                }),
            ),
            (
                names::NODE_RESOURCES_BALANCED_ALLOCATION,
                Arc::new(|args, _ctx| {
                    let a: NodeResourcesBalancedAllocationArgs = decode_args(args)?;
                    Ok(Arc::new(NodeResourcesBalancedAllocation::new(&a)?) as Arc<dyn Plugin>)
                }),
            ),
            (
                names::DYNAMIC_RESOURCES,
                Arc::new(|args, ctx| {
                    let a = DynamicResourcesArgs::from_value(args)?;
                    let mut plugin = DynamicResources::new(&a, ctx.dra.clone(), ctx.dra_api.clone());
                    if let (true, Some(groups)) = (ctx.features.workload_resource_claims, &ctx.pod_groups) {
                        plugin = plugin.with_pod_group_claims(groups.clone());
                    }
                    Ok(Arc::new(plugin) as Arc<dyn Plugin>)
                }),
            ),
            (
                names::DEVICE_RESOURCES,
                Arc::new(|args, _ctx| {
                    let a: DeviceResourcesArgs = decode_args(args)?;
                    Ok(Arc::new(DeviceResources::new(&a)?) as Arc<dyn Plugin>)
                }),
            ),
            (
                names::POD_TOPOLOGY_SPREAD,
                Arc::new(|args, ctx| {
                    let a: PodTopologySpreadArgs = decode_args(args)?;
                    let mut plugin = PodTopologySpread::new(&a)?;
                    plugin.enable_comparison_operators = ctx.features.taint_toleration_comparison_operators;
                    Ok(Arc::new(plugin) as Arc<dyn Plugin>)
                }),
            ),
            (
                names::INTER_POD_AFFINITY,
                Arc::new(|args, ctx| {
                    let a: InterPodAffinityArgs = decode_args(args)?;
                    Ok(Arc::new(InterPodAffinity::new(&a, ctx.namespaces.clone())?) as Arc<dyn Plugin>)
                }),
            ),
            (
                names::VOLUME_RESTRICTIONS,
                Arc::new(|args, ctx| {
                    no_args(names::VOLUME_RESTRICTIONS, args)?;
                    Ok(Arc::new(VolumeRestrictions::new(ctx.volumes.clone())) as Arc<dyn Plugin>)
                }),
            ),
            (
                names::NODE_VOLUME_LIMITS,
                Arc::new(|args, ctx| {
                    no_args(names::NODE_VOLUME_LIMITS, args)?;
                    Ok(Arc::new(
                        NodeVolumeLimits::new(ctx.volumes.clone())
                            .with_volume_limit_scaling(ctx.features.volume_limit_scaling),
                    ) as Arc<dyn Plugin>)
                }),
            ),
            (
                names::VOLUME_BINDING,
                Arc::new(|args, ctx| {
                    let a = VolumeBindingArgs::from_value_with(args, ctx.features.storage_capacity_scoring)?;
                    Ok(Arc::new(VolumeBinding::new(
                        &a,
                        ctx.volumes.clone(),
                        ctx.volume_api.clone(),
                    )) as Arc<dyn Plugin>)
                }),
            ),
            (
                names::VOLUME_ZONE,
                Arc::new(|args, ctx| {
                    no_args(names::VOLUME_ZONE, args)?;
                    Ok(Arc::new(VolumeZone::new(ctx.volumes.clone())) as Arc<dyn Plugin>)
                }),
            ),
            (
                names::IMAGE_LOCALITY,
                stateless::<ImageLocality>(names::IMAGE_LOCALITY),
            ),
            (
                names::DEFAULT_PREEMPTION,
                Arc::new(|args, ctx| {
                    let a: DefaultPreemptionArgs = decode_args(args)?;
                    Ok(Arc::new(
                        DefaultPreemption::new(&a, ctx.preemptor.clone(), ctx.pdbs.clone())?
                            .with_pod_groups(ctx.pod_groups.clone())
                            .with_group_preemption_policy(ctx.features.pod_group_preemption_policy),
                    ) as Arc<dyn Plugin>)
                }),
            ),
            (
                names::GANG_SCHEDULING,
                Arc::new(|args, ctx| {
                    no_args(names::GANG_SCHEDULING, args)?;
                    Ok(Arc::new(GangScheduling::new(ctx.pod_groups.clone())) as Arc<dyn Plugin>)
                }),
            ),
            (
                names::TOPOLOGY_PLACEMENT_GENERATOR,
                Arc::new(|args, ctx| {
                    no_args(names::TOPOLOGY_PLACEMENT_GENERATOR, args)?;
                    Ok(Arc::new(
                        TopologyPlacementGenerator::new(ctx.pod_groups.clone()).with_devices(ctx.dra.clone()),
                    ) as Arc<dyn Plugin>)
                }),
            ),
            (
                names::POD_GROUP_PODS_COUNT,
                Arc::new(|args, _ctx| {
                    no_args(names::POD_GROUP_PODS_COUNT, args)?;
                    Ok(Arc::new(PodGroupPodsCount) as Arc<dyn Plugin>)
                }),
            ),
            (
                names::DEFAULT_BINDER,
                Arc::new(|args, ctx| {
                    no_args(names::DEFAULT_BINDER, args)?;
                    Ok(Arc::new(DefaultBinder::new(ctx.binder.clone())) as Arc<dyn Plugin>)
                }),
            ),
        ];
        for (name, f) in entries {
            r.factories.insert(name.to_string(), f);
        }
        r
    }

    /// Adds a plugin constructor; an error when the name is taken.
    pub fn register(&mut self, name: &str, factory: PluginFactory) -> Result<(), RegistryError> {
        if self.factories.contains_key(name) {
            return Err(RegistryError::Duplicate(name.to_string()));
        }
        self.factories.insert(name.to_string(), factory);
        Ok(())
    }

    /// The registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }

    /// The context plugins are built with.
    pub fn context(&self) -> &PluginContext {
        &self.context
    }

    /// Decodes and validates the `pluginConfig[].args` of every profile for the plugins this
    /// registry knows, as building them would; every problem is reported, each under its args'
    /// path (`profiles[0].pluginConfig[1].args.scoringStrategy.type: Unsupported value: …`).
    /// Entries for plugins the registry does not know are left to `Framework::new`, which rejects
    /// them.
    pub fn validate_plugin_args(&self, config: &KubeSchedulerConfiguration) -> Result<(), ConfigError> {
        let mut errs = Vec::new();
        for (i, profile) in config.profiles.iter().enumerate() {
            for (j, entry) in profile.plugin_config.iter().enumerate() {
                let Some(factory) = self.factories.get(&entry.name) else {
                    continue;
                };
                if let Err(e) = factory(&entry.args, &self.context) {
                    errs.extend(e.field_errors_under(&format!("profiles[{i}].pluginConfig[{j}].args")));
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

/// [`Registry::validate_plugin_args`] for the in-tree plugins: what every caller of
/// `KubeSchedulerConfiguration::validate` runs next, so that a bad plugin arg fails the
/// configuration before anything starts.
pub fn validate_plugin_args(config: &KubeSchedulerConfiguration) -> Result<(), ConfigError> {
    let names = crate::extender_resources::managed_resource_name_errors(config);
    let args =
        Registry::in_tree(PluginContext::new(Arc::new(ValidationOnlyBinder))).validate_plugin_args(config);
    match (names.is_empty(), args) {
        (true, args) => args,
        (false, Ok(())) => Err(ConfigError::Invalid(names)),
        (false, Err(ConfigError::Invalid(more))) => {
            Err(ConfigError::Invalid(names.into_iter().chain(more).collect()))
        }
        (false, Err(other)) => Err(other),
    }
}

/// The binder of a registry built only to validate args; its plugins never bind.
struct ValidationOnlyBinder;

impl Binder for ValidationOnlyBinder {
    fn bind(&self, _pod: &Pod, _node: &str) -> Result<(), BindError> {
        Err(BindError::Api(
            "a registry built to validate args does not bind".into(),
        ))
    }
}

impl PluginRegistry for Registry {
    fn contains(&self, name: &str) -> bool {
        self.factories.contains_key(name)
    }

    /// The workload plugins join the default profile only when pod groups are scheduled
    /// (GenericWorkload on and the API served), the placement ones only with topology-aware
    /// placement on, as upstream's gates add them.
    fn in_default_profile(&self, name: &str) -> bool {
        match name {
            names::GANG_SCHEDULING => self.context.pod_groups.is_some(),
            names::TOPOLOGY_PLACEMENT_GENERATOR | names::POD_GROUP_PODS_COUNT => {
                self.context.pod_groups.is_some() && self.context.topology_aware_workloads
            }
            _ => self.contains(name),
        }
    }

    fn build(
        &self,
        name: &str,
        args: &serde_json::Value,
    ) -> Result<Arc<dyn Plugin>, unisched_framework::PluginBuildError> {
        let f = self
            .factories
            .get(name)
            .ok_or_else(|| format!("plugin {name:?} does not exist"))?;
        f(args, &self.context).map_err(unisched_framework::PluginBuildError::new)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use unisched_framework::{
        ActionType, EventResource, Framework, FrameworkError,
        config::{KubeSchedulerConfiguration, KubeSchedulerProfile},
    };

    use super::*;
    use crate::testing::{RecordingBinder, in_tree_registry};

    fn names_at(fwk: &Framework) -> BTreeMap<&'static str, Vec<String>> {
        fwk.plugin_names()
    }

    #[test]
    fn default_profile_has_upstream_order_and_weights() {
        let (registry, _) = in_tree_registry();
        let fwk = Framework::new(&KubeSchedulerProfile::default(), &registry).unwrap();
        let n = names_at(&fwk);
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        struct Case {
            point: &'static str,
            want: Vec<String>,
        }
        let cases = [
            Case {
                point: "preEnqueue",
                want: s(&["SchedulingGates", "DynamicResources", "DefaultPreemption"]),
            },
            Case {
                point: "queueSort",
                want: s(&["PrioritySort"]),
            },
            Case {
                point: "preFilter",
                want: s(&[
                    "NodeName",
                    "NodeAffinity",
                    "NodePorts",
                    "NodeResourcesFit",
                    "VolumeRestrictions",
                    "NodeVolumeLimits",
                    "VolumeBinding",
                    "VolumeZone",
                    "PodTopologySpread",
                    "InterPodAffinity",
                    "DynamicResources",
                    "NodeDeclaredFeatures",
                ]),
            },
            Case {
                point: "filter",
                want: s(&[
                    "NodeName",
                    "NodeUnschedulable",
                    "TaintToleration",
                    "NodeAffinity",
                    "NodePorts",
                    "NodeResourcesFit",
                    "VolumeRestrictions",
                    "NodeVolumeLimits",
                    "VolumeBinding",
                    "VolumeZone",
                    "PodTopologySpread",
                    "InterPodAffinity",
                    "DynamicResources",
                    "NodeDeclaredFeatures",
                ]),
            },
            Case {
                point: "postFilter",
                want: s(&["DynamicResources", "DefaultPreemption"]),
            },
            Case {
                point: "preScore",
                want: s(&[
                    "TaintToleration",
                    "NodeAffinity",
                    "NodeResourcesFit",
                    "VolumeBinding",
                    "PodTopologySpread",
                    "InterPodAffinity",
                    "DynamicResources",
                    "NodeResourcesBalancedAllocation",
                ]),
            },
            Case {
                point: "score",
                want: s(&[
                    "TaintToleration=3",
                    "NodeAffinity=2",
                    "NodeResourcesFit=1",
                    "VolumeBinding=1",
                    "PodTopologySpread=2",
                    "InterPodAffinity=2",
                    "DynamicResources=2",
                    "NodeResourcesBalancedAllocation=1",
                    "ImageLocality=1",
                ]),
            },
            Case {
                point: "reserve",
                want: s(&["VolumeBinding", "DynamicResources"]),
            },
            Case {
                point: "bind",
                want: s(&["DefaultBinder"]),
            },
        ];
        for c in cases {
            assert_eq!(n.get(c.point).cloned().unwrap_or_default(), c.want, "{}", c.point);
        }
        let with_events: Vec<&str> = fwk.events_to_register().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            with_events,
            vec![
                "DefaultPreemption",
                "DynamicResources",
                "InterPodAffinity",
                "NodeAffinity",
                "NodeDeclaredFeatures",
                "NodeName",
                "NodePorts",
                "NodeResourcesFit",
                "NodeUnschedulable",
                "NodeVolumeLimits",
                "PodTopologySpread",
                "SchedulingGates",
                "TaintToleration",
                "VolumeBinding",
                "VolumeRestrictions",
                "VolumeZone"
            ]
        );
        // Which default plugins a node update can requeue for, as upstream 1.37.2 registers them
        // (its Test_UnionedGVKs): only three of them look at taints.
        let node_actions = |plugin: &str| {
            fwk.events_to_register()
                .iter()
                .filter(|(n, _)| n == plugin)
                .flat_map(|(_, events)| events.iter())
                .filter(|e| e.event.resource == EventResource::Node)
                .fold(ActionType(0), |acc, e| acc.or(e.event.action))
        };
        let taint = ActionType::UPDATE_NODE_TAINT;
        let label = ActionType::UPDATE_NODE_LABEL;
        let allocatable = ActionType::UPDATE_NODE_ALLOCATABLE;
        let node_cases = [
            ("TaintToleration", ActionType::ADD.or(taint)),
            ("NodeUnschedulable", ActionType::ADD.or(taint)),
            (
                "PodTopologySpread",
                ActionType::ADD.or(ActionType::DELETE).or(label).or(taint),
            ),
            ("InterPodAffinity", ActionType::ADD.or(label)),
            ("NodeAffinity", ActionType::ADD.or(label)),
            ("VolumeBinding", ActionType::ADD.or(label)),
            ("VolumeZone", ActionType::ADD.or(label)),
            ("DynamicResources", ActionType::ADD.or(label).or(allocatable)),
            ("NodeResourcesFit", ActionType::ADD.or(allocatable)),
            ("NodePorts", ActionType::ADD),
            ("NodeName", ActionType::ADD),
            ("VolumeRestrictions", ActionType::ADD),
        ];
        for (plugin, want) in node_cases {
            assert_eq!(node_actions(plugin), want, "{plugin}'s node events");
        }
    }

    #[test]
    fn plugin_config_errors() {
        struct Case {
            name: &'static str,
            yaml: &'static str,
            want: &'static str,
        }
        let cases = [
            Case {
                name: "unknown strategy",
                yaml: "profiles: [{pluginConfig: [{name: NodeResourcesFit, args: {scoringStrategy: {type: Fancy}}}]}]",
                want: "initializing plugin \"NodeResourcesFit\": scoringStrategy.type: Unsupported value: \"Fancy\"",
            },
            Case {
                name: "unknown args field",
                yaml: "profiles: [{pluginConfig: [{name: NodeResourcesFit, args: {ignoredResource: [a]}}]}]",
                want: "initializing plugin \"NodeResourcesFit\": decoding NodeResourcesFitArgs: unknown field `ignoredResource`",
            },
            Case {
                name: "wrong type",
                yaml: "profiles: [{pluginConfig: [{name: NodeResourcesBalancedAllocation, args: {resources: cpu}}]}]",
                want: "initializing plugin \"NodeResourcesBalancedAllocation\": decoding NodeResourcesBalancedAllocationArgs: invalid type",
            },
            Case {
                name: "bad added affinity",
                yaml: "profiles: [{pluginConfig: [{name: NodeAffinity, args: {addedAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: Near}]}]}}}}]}]",
                want: "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator: Unsupported value: \"Near\"",
            },
            Case {
                name: "args for an argless plugin",
                yaml: "profiles: [{pluginConfig: [{name: NodePorts, args: {ports: 1}}]}]",
                want: "initializing plugin \"NodePorts\": plugin NodePorts takes no args, got field \"ports\"",
            },
            Case {
                name: "unknown plugin",
                yaml: "profiles: [{pluginConfig: [{name: NoSuchPlugin, args: {}}]}]",
                want: "pluginConfig for unknown plugin \"NoSuchPlugin\"",
            },
        ];
        let (registry, _) = in_tree_registry();
        for c in cases {
            let cfg = KubeSchedulerConfiguration::from_yaml(c.yaml).unwrap();
            let err = Framework::new(&cfg.profiles[0], &registry).unwrap_err();
            assert!(err.to_string().contains(c.want), "{}: {err}", c.name);
        }
    }

    #[test]
    fn config_validation_names_the_bad_arg() {
        struct Case {
            plugin: &'static str,
            args: &'static str,
            want: &'static str,
        }
        let cases = [
            Case {
                plugin: "NodeResourcesFit",
                args: "{scoringStrategy: {type: Fancy}}",
                want: "profiles[0].pluginConfig[1].args.scoringStrategy.type: Unsupported value: \"Fancy\"",
            },
            Case {
                plugin: "NodeResourcesBalancedAllocation",
                args: "{resources: cpu}",
                want: "profiles[0].pluginConfig[1].args: decoding NodeResourcesBalancedAllocationArgs: invalid type",
            },
            Case {
                plugin: "NodeAffinity",
                args: "{addedAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: Near}]}]}}}",
                want: "profiles[0].pluginConfig[1].args.addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator: Unsupported value: \"Near\"",
            },
            Case {
                plugin: "DynamicResources",
                args: "{bindingTimeout: 500ms}",
                want: "profiles[0].pluginConfig[1].args.bindingTimeout: Invalid value: \"500ms\": must be at least 1s",
            },
            Case {
                plugin: "DeviceResources",
                args: "{scoringStrategy: {type: Packed}}",
                want: "profiles[0].pluginConfig[1].args.scoringStrategy.type: Unsupported value: \"Packed\"",
            },
            Case {
                plugin: "PodTopologySpread",
                args: "{defaultingType: Other}",
                want: "profiles[0].pluginConfig[1].args.defaultingType: Unsupported value: \"Other\"",
            },
            Case {
                plugin: "InterPodAffinity",
                args: "{hardPodAffinityWeight: -1}",
                want: "profiles[0].pluginConfig[1].args.hardPodAffinityWeight: Invalid value: -1: not in valid range [0, 100]",
            },
            Case {
                plugin: "VolumeBinding",
                args: "{bindTimeoutSeconds: -1}",
                want: "profiles[0].pluginConfig[1].args.bindTimeoutSeconds: Invalid value: -1: invalid BindTimeoutSeconds",
            },
            Case {
                plugin: "DefaultPreemption",
                args: "{minCandidateNodesPercentage: 101}",
                want: "profiles[0].pluginConfig[1].args.minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]",
            },
            Case {
                plugin: "NodePorts",
                args: "{ports: 1}",
                want: "profiles[0].pluginConfig[1].args: plugin NodePorts takes no args, got field \"ports\"",
            },
            Case {
                plugin: "NodeResourcesFit",
                args: "{kind: NodeAffinityArgs}",
                want: "profiles[0].pluginConfig[1].args: decoding NodeResourcesFitArgs: kind: Unsupported value: \"NodeAffinityArgs\"",
            },
        ];
        for c in cases {
            let yaml = format!(
                "profiles: [{{pluginConfig: [{{name: PrioritySort, args: {{}}}}, {{name: {}, args: {}}}]}}]",
                c.plugin, c.args
            );
            let cfg = KubeSchedulerConfiguration::from_yaml(&yaml).unwrap();
            let err = validate_plugin_args(&cfg).unwrap_err().to_string();
            assert!(err.starts_with("invalid configuration: "), "{}: {err}", c.plugin);
            assert!(err.contains(c.want), "{}: {err}", c.plugin);
        }
    }

    #[test]
    fn config_validation_reports_every_profile_and_accepts_good_args() {
        let yaml = r#"
profiles:
- schedulerName: a
  pluginConfig:
  - name: NodeResourcesFit
    args: {scoringStrategy: {type: MostAllocated, resources: [{name: cpu, weight: 1}]}}
  - name: NoSuchPlugin
    args: {anything: 1}
- schedulerName: b
  pluginConfig:
  - name: InterPodAffinity
    args: {hardPodAffinityWeight: 101}
  - name: DefaultPreemption
    args: {minCandidateNodesPercentage: -1, minCandidateNodesAbsolute: -1}
"#;
        let cfg = KubeSchedulerConfiguration::from_yaml(yaml).unwrap();
        let err = validate_plugin_args(&cfg).unwrap_err().to_string();
        for want in [
            "profiles[1].pluginConfig[0].args.hardPodAffinityWeight: Invalid value: 101",
            "profiles[1].pluginConfig[1].args.minCandidateNodesPercentage: Invalid value: -1",
            "profiles[1].pluginConfig[1].args.minCandidateNodesAbsolute: Invalid value: -1",
        ] {
            assert!(err.contains(want), "{want}: {err}");
        }
        assert!(!err.contains("profiles[0]"), "{err}");
        let good = KubeSchedulerConfiguration::from_yaml(
            "profiles: [{pluginConfig: [{name: NodeResourcesFit, args: {scoringStrategy: {type: MostAllocated}}}, {name: DynamicResources, args: {bindingTimeout: 2s}}]}]",
        )
        .unwrap();
        validate_plugin_args(&good).unwrap();
        validate_plugin_args(&KubeSchedulerConfiguration::defaulted()).unwrap();
    }

    #[test]
    fn plugin_config_args_apply() {
        let yaml = r#"
profiles:
- schedulerName: packer
  plugins:
    multiPoint:
      enabled: [{name: NodeResourcesFit, weight: 5}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      kind: NodeResourcesFitArgs
      apiVersion: kubescheduler.config.k8s.io/v1
      scoringStrategy:
        type: MostAllocated
        resources: [{name: cpu, weight: 1}]
"#;
        let cfg = KubeSchedulerConfiguration::from_yaml(yaml).unwrap();
        let (registry, _) = in_tree_registry();
        let fwk = Framework::new(&cfg.profiles[0], &registry).unwrap();
        assert!(fwk.plugin_names()["score"].contains(&"NodeResourcesFit=5".to_string()));
        let dbg = format!(
            "{:?}",
            fwk.plugin("NodeResourcesFit").map(|p| p.name().to_string())
        );
        assert!(dbg.contains("NodeResourcesFit"));
    }

    #[test]
    fn register_and_build() {
        let mut r = Registry::new(PluginContext::new(RecordingBinder::new()));
        assert!(!r.contains(names::NODE_NAME));
        r.register("Mine", stateless::<NodeName>("Mine")).unwrap();
        assert!(
            r.register("Mine", stateless::<NodeName>("Mine")).is_err(),
            "duplicate names are refused"
        );
        assert!(r.contains("Mine"));
        assert_eq!(
            r.build("Mine", &serde_json::Value::Null).unwrap().name(),
            names::NODE_NAME
        );
        assert!(r.build("Nope", &serde_json::Value::Null).is_err());
        let in_tree = Registry::in_tree(PluginContext::new(RecordingBinder::new()));
        assert_eq!(in_tree.names().count(), 24);
        // The workload plugins join the default profile with their gates, as upstream's do.
        let default_has = |registry: &Registry, plugin: &str| {
            Framework::new(&KubeSchedulerProfile::default(), registry)
                .unwrap()
                .plugin(plugin)
                .is_some()
        };
        assert!(!default_has(&in_tree, names::GANG_SCHEDULING));
        let groups = Arc::new(unisched_framework::PodGroupStore::new());
        let gangs_only = Registry::in_tree(
            PluginContext::new(RecordingBinder::new()).with_pod_groups(groups.clone(), false),
        );
        assert!(default_has(&gangs_only, names::GANG_SCHEDULING));
        assert!(!default_has(&gangs_only, names::TOPOLOGY_PLACEMENT_GENERATOR));
        let with_topology =
            Registry::in_tree(PluginContext::new(RecordingBinder::new()).with_pod_groups(groups, true));
        assert!(default_has(&with_topology, names::TOPOLOGY_PLACEMENT_GENERATOR));
        assert!(default_has(&with_topology, names::POD_GROUP_PODS_COUNT));
        assert!(matches!(
            Framework::new(
                &KubeSchedulerProfile::default(),
                &Registry::new(PluginContext::new(RecordingBinder::new()))
            ),
            Err(FrameworkError::QueueSort { .. })
        ));
    }

    #[test]
    fn the_comparison_operator_gate_reaches_taint_toleration() {
        use unisched_framework::CycleState;

        use crate::testing::{NodeBuilder, PodBuilder};

        let pod = PodBuilder::new("p").toleration("sla", "Gt", "900", "").info();
        let tainted = NodeBuilder::new("n").taint("sla", "950", "NoSchedule").info();
        for on in [false, true] {
            let features = PluginFeatures {
                taint_toleration_comparison_operators: on,
                ..PluginFeatures::default()
            };
            let r = Registry::in_tree(PluginContext::new(RecordingBinder::new()).with_features(features));
            let filter = |name: &str| {
                r.build(name, &serde_json::Value::Null)
                    .unwrap()
                    .as_filter()
                    .unwrap()
            };
            let state = CycleState::new();
            let taints = filter(names::TAINT_TOLERATION).filter(&state, &pod, &tainted);
            assert_eq!(taints.is_success(), on, "TaintToleration, gate {on}");
        }
    }

    #[test]
    fn the_storage_gates_reach_the_volume_plugins() {
        use unisched_framework::{Code, CycleState, PodInfo};

        use crate::{
            testing::{NodeBuilder, PodBuilder},
            volume::testing::{FakeVolumeApi, PvBuilder, PvcBuilder, csi_driver, storage_class, with_claims},
        };

        let volumes = Arc::new(VolumeCache::new());
        volumes.apply_class(storage_class(
            "local",
            crate::volume::NO_PROVISIONER,
            "WaitForFirstConsumer",
            None,
        ));
        volumes.apply_pv(
            PvBuilder::new("pv", "", "1Gi")
                .csi("needed.csi.example.com", "h")
                .arc(),
        );
        volumes.apply_pvc(PvcBuilder::new("bound", "", "1Gi").bound_to("pv").arc());
        volumes.apply_pvc(PvcBuilder::new("delayed", "local", "1Gi").arc());
        volumes.apply_csi_driver(csi_driver("needed.csi.example.com", false, true));
        let pod = PodInfo::new(with_claims(PodBuilder::new("p").build(), &["bound", "delayed"]));
        let node = NodeBuilder::new("n").info();
        for on in [false, true] {
            let features = PluginFeatures {
                storage_capacity_scoring: on,
                volume_limit_scaling: on,
                ..PluginFeatures::default()
            };
            let context = PluginContext::new(RecordingBinder::new())
                .with_features(features)
                .with_volumes(volumes.clone(), FakeVolumeApi::new());
            let r = Registry::in_tree(context);
            let binding = r.build(names::VOLUME_BINDING, &serde_json::Value::Null).unwrap();
            let mut state = CycleState::new();
            binding
                .clone()
                .as_pre_filter()
                .unwrap()
                .pre_filter(&mut state, &pod, &[]);
            let pre_score = binding.as_pre_score().unwrap().pre_score(&mut state, &pod, &[]);
            assert_eq!(
                pre_score.code() == Code::Skip,
                !on,
                "VolumeBinding scores with the gate {on}"
            );
            let shaped = serde_json::json!({"shape": [{"utilization": 0, "score": 10}]});
            assert_eq!(
                r.build(names::VOLUME_BINDING, &shaped).is_ok(),
                on,
                "a shape needs StorageCapacityScoring"
            );
            let limits = r
                .build(names::NODE_VOLUME_LIMITS, &serde_json::Value::Null)
                .unwrap();
            let mut state = CycleState::new();
            limits
                .clone()
                .as_pre_filter()
                .unwrap()
                .pre_filter(&mut state, &pod, &[]);
            let s = limits.as_filter().unwrap().filter(&state, &pod, &node);
            assert_eq!(
                s.is_success(),
                !on,
                "NodeVolumeLimits checks drivers with the gate {on}"
            );
        }
    }
}

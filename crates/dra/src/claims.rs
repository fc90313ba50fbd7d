//! Claims prepared once per pod: classes resolved, selectors compiled, requests validated.
//!
//! Everything that is the same on every node is checked here, and problems are
//! [`FatalError`]s: a missing class, an invalid or disabled request shape, a selector that does
//! not compile, a constraint of unknown type, more than 32 devices per claim.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{
    CapacityRequirements, DeviceClass, DeviceSelector as ApiDeviceSelector, DeviceToleration, ResourceClaim,
};
use unisched_resource::Quantity;

use crate::cel::{DeviceSelector, SelectorEngine, SelectorId};
use crate::error::{FatalError, SelectorSource};

/// Maximum number of devices in one allocation result (`AllocationResultsMaxSize`).
pub const ALLOCATION_RESULTS_MAX_SIZE: usize = 32;

/// DRA feature gates that change allocation. The default enables everything (Kubernetes 1.37
/// with all DRA features on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// `DRAAdminAccess`.
    pub admin_access: bool,
    /// `DRAPrioritizedList` (`firstAvailable`).
    pub prioritized_list: bool,
    /// `DRAPartitionableDevices` (shared counters, per-device node selection).
    pub partitionable_devices: bool,
    /// `DRADeviceTaints`.
    pub device_taints: bool,
    /// `DRADeviceBindingConditions` + `DRAResourceClaimDeviceStatus`.
    pub binding_conditions: bool,
    /// `DRAConsumableCapacity`.
    pub consumable_capacity: bool,
    /// `DRAListTypeAttributes` (set semantics in constraints).
    pub list_type_attributes: bool,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            admin_access: true,
            prioritized_list: true,
            partitionable_devices: true,
            device_taints: true,
            binding_conditions: true,
            consumable_capacity: true,
            list_type_attributes: true,
        }
    }
}

/// Where DeviceClasses come from.
pub trait ClassLookup {
    /// The class with this name, if it exists.
    fn class(&self, name: &str) -> Option<Arc<DeviceClass>>;
}

impl<S: BuildHasher> ClassLookup for HashMap<String, Arc<DeviceClass>, S> {
    fn class(&self, name: &str) -> Option<Arc<DeviceClass>> {
        self.get(name).cloned()
    }
}

impl ClassLookup for BTreeMap<String, Arc<DeviceClass>> {
    fn class(&self, name: &str) -> Option<Arc<DeviceClass>> {
        self.get(name).cloned()
    }
}

impl<F: Fn(&str) -> Option<Arc<DeviceClass>>> ClassLookup for F {
    fn class(&self, name: &str) -> Option<Arc<DeviceClass>> {
        self(name)
    }
}

/// How many devices a request wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocationMode {
    /// Exactly this many.
    ExactCount(usize),
    /// All matching devices on the node (at least one).
    All,
}

/// A compiled selector and where it came from.
#[derive(Clone, Debug)]
pub struct PreparedSelector {
    /// The compiled selector.
    pub selector: Arc<dyn DeviceSelector>,
    /// Index in its list.
    pub index: usize,
    /// Class or request.
    pub source: SelectorSource,
}

/// One way to satisfy a request: the request itself (`exactly`) or one subrequest.
#[derive(Clone, Debug)]
pub struct PreparedAlternative {
    /// Name of the request.
    pub request: String,
    /// Name of the subrequest, for `firstAvailable`.
    pub subrequest: Option<String>,
    /// `request` or `request/subrequest`: the name used in results.
    pub full_name: String,
    /// The class.
    pub class: Arc<DeviceClass>,
    /// Class selectors (checked first).
    pub class_selectors: Vec<PreparedSelector>,
    /// Request selectors.
    pub selectors: Vec<PreparedSelector>,
    /// A driver every selected device must have (from a `device.driver == "x"` conjunct).
    pub required_driver: Option<String>,
    /// Count or all.
    pub mode: AllocationMode,
    /// `adminAccess`.
    pub admin_access: bool,
    /// `tolerations`.
    pub tolerations: Vec<DeviceToleration>,
    /// `capacity.requests`, in name order.
    pub capacity: Vec<(String, Quantity)>,
    /// The ids of the class selectors, then the request selectors: the order the allocator
    /// evaluates them in, and the key of a prepared slice's cached selection for this alternative
    /// (built once here rather than on every node the device summary looks at).
    pub selection_key: Box<[SelectorId]>,
}

impl PreparedAlternative {
    /// Minimum number of devices (1 for `All`).
    pub fn min_devices(&self) -> usize {
        match self.mode {
            AllocationMode::ExactCount(n) => n,
            AllocationMode::All => 1,
        }
    }
}

/// One request of a claim.
#[derive(Clone, Debug)]
pub struct PreparedRequest {
    /// Request name.
    pub name: String,
    /// `exactly`: one alternative; `firstAvailable`: one per subrequest, in order.
    pub alternatives: Vec<PreparedAlternative>,
    /// Whether the request uses `firstAvailable`.
    pub has_subrequests: bool,
}

/// A `matchAttribute` or `distinctAttribute` constraint.
#[derive(Clone, Debug)]
pub struct PreparedConstraint {
    /// Fully qualified attribute name.
    pub attribute: String,
    /// `distinctAttribute`.
    pub distinct: bool,
    /// Requests it applies to (`req` or `req/sub`); empty: all.
    pub requests: Vec<String>,
}

/// A claim ready for allocation on any node.
#[derive(Clone, Debug)]
pub struct PreparedClaim {
    claim: Arc<ResourceClaim>,
    key: String,
    requests: Vec<PreparedRequest>,
    constraints: Vec<PreparedConstraint>,
    min_devices: usize,
}

struct RequestShape<'a> {
    name: String,
    class_name: &'a str,
    mode: Option<&'a str>,
    count: Option<i64>,
    selectors: &'a [ApiDeviceSelector],
    admin_access: Option<bool>,
    tolerations: &'a [DeviceToleration],
    capacity: Option<&'a CapacityRequirements>,
}

impl PreparedClaim {
    /// Prepares a claim. See the module documentation for what is checked.
    pub fn new(
        claim: Arc<ResourceClaim>,
        classes: &dyn ClassLookup,
        engine: &dyn SelectorEngine,
        features: &Features,
    ) -> Result<Self, Box<FatalError>> {
        let key = format!(
            "{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or_default(),
            claim.metadata.name.as_deref().unwrap_or_default()
        );
        let devices = claim.spec.as_ref().and_then(|s| s.devices.as_ref());
        let mut requests = Vec::new();
        let mut min_devices = 0usize;
        for request in devices.and_then(|d| d.requests.as_ref()).into_iter().flatten() {
            let invalid = |message: String| FatalError::InvalidRequest {
                claim: key.clone(),
                request: request.name.clone(),
                message,
            };
            let subrequests = request.first_available.as_deref().unwrap_or_default();
            let mut alternatives = Vec::new();
            if !subrequests.is_empty() {
                if !features.prioritized_list {
                    return Err(Box::new(invalid(
                        "has subrequests, but the DRAPrioritizedList feature is disabled".into(),
                    )));
                }
                for sub in subrequests {
                    let shape = RequestShape {
                        name: format!("{}/{}", request.name, sub.name),
                        class_name: &sub.device_class_name,
                        mode: sub.allocation_mode.as_deref(),
                        count: sub.count,
                        selectors: sub.selectors.as_deref().unwrap_or_default(),
                        admin_access: None,
                        tolerations: sub.tolerations.as_deref().unwrap_or_default(),
                        capacity: sub.capacity.as_ref(),
                    };
                    let mut alt = Self::prepare_alternative(&key, shape, classes, engine, features)?;
                    alt.request = request.name.clone();
                    alt.subrequest = Some(sub.name.clone());
                    alternatives.push(alt);
                }
            } else if let Some(exact) = &request.exactly {
                let shape = RequestShape {
                    name: request.name.clone(),
                    class_name: &exact.device_class_name,
                    mode: exact.allocation_mode.as_deref(),
                    count: exact.count,
                    selectors: exact.selectors.as_deref().unwrap_or_default(),
                    admin_access: exact.admin_access,
                    tolerations: exact.tolerations.as_deref().unwrap_or_default(),
                    capacity: exact.capacity.as_ref(),
                };
                alternatives.push(Self::prepare_alternative(&key, shape, classes, engine, features)?);
            } else {
                return Err(Box::new(invalid(
                    "neither exactly nor firstAvailable is set (unsupported request type?)".into(),
                )));
            }
            min_devices += alternatives
                .iter()
                .map(PreparedAlternative::min_devices)
                .min()
                .unwrap_or(0);
            requests.push(PreparedRequest {
                name: request.name.clone(),
                alternatives,
                has_subrequests: !subrequests.is_empty(),
            });
        }
        if min_devices > ALLOCATION_RESULTS_MAX_SIZE {
            return Err(Box::new(FatalError::TooManyDevices {
                claim: key,
                requested: min_devices,
                limit: ALLOCATION_RESULTS_MAX_SIZE,
            }));
        }
        let mut constraints = Vec::new();
        for (index, c) in devices
            .and_then(|d| d.constraints.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
        {
            let (attribute, distinct) = match (&c.match_attribute, &c.distinct_attribute) {
                (Some(a), _) => (a.clone(), false),
                (None, Some(a)) => (a.clone(), true),
                (None, None) => {
                    return Err(Box::new(FatalError::InvalidConstraint {
                        claim: key,
                        index,
                        message: "empty constraint (unsupported constraint type?)".into(),
                    }));
                }
            };
            constraints.push(PreparedConstraint {
                attribute,
                distinct,
                requests: c.requests.clone().unwrap_or_default(),
            });
        }
        Ok(PreparedClaim {
            claim,
            key,
            requests,
            constraints,
            min_devices,
        })
    }

    fn compile_selectors(
        key: &str,
        selectors: &[ApiDeviceSelector],
        source: &SelectorSource,
        request_name: &str,
        engine: &dyn SelectorEngine,
    ) -> Result<Vec<PreparedSelector>, Box<FatalError>> {
        let mut out = Vec::with_capacity(selectors.len());
        for (index, s) in selectors.iter().enumerate() {
            let Some(cel) = &s.cel else {
                return Err(Box::new(FatalError::InvalidRequest {
                    claim: key.to_string(),
                    request: request_name.to_string(),
                    message: format!(
                        "{source}, selector #{index}: CEL expression empty (unsupported selector type?)"
                    ),
                }));
            };
            let selector = engine.compile(&cel.expression).map_err(|e| {
                Box::new(FatalError::CelCompile {
                    claim: key.to_string(),
                    origin: source.clone(),
                    index,
                    expression: cel.expression.clone(),
                    message: e.message,
                })
            })?;
            out.push(PreparedSelector {
                selector,
                index,
                source: source.clone(),
            });
        }
        Ok(out)
    }

    fn prepare_alternative(
        key: &str,
        shape: RequestShape<'_>,
        classes: &dyn ClassLookup,
        engine: &dyn SelectorEngine,
        features: &Features,
    ) -> Result<PreparedAlternative, Box<FatalError>> {
        let invalid = |message: &str| FatalError::InvalidRequest {
            claim: key.to_string(),
            request: shape.name.clone(),
            message: message.to_string(),
        };
        if shape.admin_access.is_some() && !features.admin_access {
            return Err(Box::new(invalid(
                "admin access is requested, but the feature is disabled",
            )));
        }
        if shape.capacity.is_some() && !features.consumable_capacity {
            return Err(Box::new(invalid(
                "has capacity requests, but the DRAConsumableCapacity feature is disabled",
            )));
        }
        if shape.class_name.is_empty() {
            return Err(Box::new(invalid(
                "missing device class name (unsupported request type?)",
            )));
        }
        let class = classes.class(shape.class_name).ok_or_else(|| {
            Box::new(FatalError::ClassNotFound {
                claim: key.to_string(),
                request: shape.name.clone(),
                class: shape.class_name.to_string(),
            })
        })?;
        let mode = match shape.mode.unwrap_or("") {
            "" | "ExactCount" => {
                let count = shape.count.unwrap_or(1);
                if count <= 0 {
                    return Err(Box::new(invalid(&format!(
                        "count must be greater than zero, got {count}"
                    ))));
                }
                AllocationMode::ExactCount(usize::try_from(count).unwrap_or(usize::MAX))
            }
            "All" => AllocationMode::All,
            other => return Err(Box::new(invalid(&format!("unsupported count mode {other}")))),
        };
        let class_name = class
            .metadata
            .name
            .clone()
            .unwrap_or_else(|| shape.class_name.to_string());
        let class_selectors = Self::compile_selectors(
            key,
            class
                .spec
                .as_ref()
                .and_then(|s| s.selectors.as_deref())
                .unwrap_or_default(),
            &SelectorSource::Class(class_name),
            &shape.name,
            engine,
        )?;
        let selectors = Self::compile_selectors(
            key,
            shape.selectors,
            &SelectorSource::Request(shape.name.clone()),
            &shape.name,
            engine,
        )?;
        let required_driver = class_selectors
            .iter()
            .chain(selectors.iter())
            .find_map(|s| s.selector.required_driver().map(str::to_string));
        let mut capacity = Vec::new();
        for (name, q) in shape
            .capacity
            .and_then(|c| c.requests.as_ref())
            .into_iter()
            .flatten()
        {
            let q = Quantity::from_api(q)
                .map_err(|e| Box::new(invalid(&format!("capacity request {name}: {e}"))))?;
            capacity.push((name.clone(), q));
        }
        let selection_key = class_selectors
            .iter()
            .chain(&selectors)
            .map(|s| s.selector.id())
            .collect();
        Ok(PreparedAlternative {
            request: shape.name.clone(),
            subrequest: None,
            full_name: shape.name.clone(),
            class,
            class_selectors,
            selectors,
            required_driver,
            mode,
            admin_access: shape.admin_access == Some(true),
            tolerations: shape.tolerations.to_vec(),
            capacity,
            selection_key,
        })
    }

    /// The API object.
    pub fn claim(&self) -> &Arc<ResourceClaim> {
        &self.claim
    }

    /// `namespace/name`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Requests in claim order.
    pub fn requests(&self) -> &[PreparedRequest] {
        &self.requests
    }

    /// Constraints in claim order.
    pub fn constraints(&self) -> &[PreparedConstraint] {
        &self.constraints
    }

    /// Lower bound of the number of devices the claim needs.
    pub fn min_devices(&self) -> usize {
        self.min_devices
    }
}

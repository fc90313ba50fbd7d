//! Why an allocation did not succeed.
//!
//! * [`Unschedulable`]: the claims cannot be allocated **on this node**; other nodes may work.
//!   The plugin aggregates these across nodes (group by [`UnschedulableReason::kind`] and claim).
//! * [`FatalError`]: something is wrong with the claims, classes or slices themselves (invalid CEL,
//!   a CEL runtime error, a missing class, an unsupported request); retrying on another node does
//!   not help, so the scheduling attempt should end with an error.
//! * [`AllocationError::Aborted`]: the deadline passed or the caller cancelled.

use std::fmt;

use crate::ids::DeviceId;
use crate::nodesel::NodeSelectorError;

/// Where a selector comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectorSource {
    /// A DeviceClass selector.
    Class(String),
    /// A request (or `request/subrequest`) selector.
    Request(String),
}

impl fmt::Display for SelectorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectorSource::Class(c) => write!(f, "class {c}"),
            SelectorSource::Request(r) => write!(f, "request {r}"),
        }
    }
}

/// Errors that end the scheduling attempt. See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FatalError {
    /// The claim references a DeviceClass that does not exist.
    #[error("claim {claim}, request {request}: could not retrieve device class {class}")]
    ClassNotFound {
        /// `namespace/name` of the claim.
        claim: String,
        /// Request or `request/subrequest`.
        request: String,
        /// The missing class.
        class: String,
    },
    /// A request the allocator cannot handle (unknown mode, disabled feature, empty class name, …).
    #[error("claim {claim}, request {request}: {message}")]
    InvalidRequest {
        /// `namespace/name` of the claim.
        claim: String,
        /// Request or `request/subrequest`.
        request: String,
        /// What is wrong.
        message: String,
    },
    /// A constraint the allocator cannot handle.
    #[error("claim {claim}, constraint #{index}: {message}")]
    InvalidConstraint {
        /// `namespace/name` of the claim.
        claim: String,
        /// Index in `spec.devices.constraints`.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// A selector does not compile.
    #[error("claim {claim}: {origin}: selector #{index} {expression:?}: CEL compile error: {message}")]
    CelCompile {
        /// `namespace/name` of the claim.
        claim: String,
        /// Class or request the selector belongs to.
        origin: SelectorSource,
        /// Index of the selector in its list.
        index: usize,
        /// The expression.
        expression: String,
        /// Compiler message.
        message: String,
    },
    /// A selector failed or returned a non-boolean for some device.
    #[error(
        "claim {claim}: {origin}: selector #{index} {expression:?} on device {device}: CEL runtime error: {message}"
    )]
    CelRuntime {
        /// `namespace/name` of the claim.
        claim: String,
        /// Class or request the selector belongs to.
        origin: SelectorSource,
        /// Index of the selector in its list.
        index: usize,
        /// The expression.
        expression: String,
        /// The device being evaluated.
        device: DeviceId,
        /// Interpreter message.
        message: String,
    },
    /// A slice or device node selector is malformed.
    #[error("failed to perform node selection for slice {slice}: {source}")]
    NodeSelector {
        /// Slice name.
        slice: String,
        /// What is wrong.
        #[source]
        source: NodeSelectorError,
    },
    /// Mode `All` must take every matching device, but adding this one would break a claim
    /// constraint: the claim contradicts itself on this node's devices (upstream treats it as an
    /// error, not as the node being unsuitable).
    #[error(
        "claim {claim}, request {request}: cannot add device {device} because a claim constraint would not be satisfied"
    )]
    AllModeConstraint {
        /// `namespace/name` of the claim.
        claim: String,
        /// Request or `request/subrequest`.
        request: String,
        /// The device that could not be added.
        device: DeviceId,
    },
    /// The claim asks for more devices than one allocation result may hold.
    #[error("claim {claim}: number of requested devices {requested} exceeds the claim limit of {limit}")]
    TooManyDevices {
        /// `namespace/name` of the claim.
        claim: String,
        /// Minimum number of devices requested.
        requested: usize,
        /// The limit (32).
        limit: usize,
    },
}

/// Why the claims cannot be allocated on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnschedulableReason {
    /// The node offers no usable device at all for the request.
    NoDevices,
    /// Pools that could provide devices are incomplete (being updated by their driver).
    PoolsIncomplete {
        /// `driver/pool` of the incomplete pools.
        pools: Vec<String>,
    },
    /// Invalid pools were encountered (and nothing else worked).
    InvalidPools {
        /// (`driver/pool`, reason).
        pools: Vec<(String, String)>,
    },
    /// No (or not enough) device matches the class selectors.
    ClassSelectorsUnmatched {
        /// The class.
        class: String,
        /// The selector that rejected the most devices.
        expression: Option<String>,
    },
    /// No (or not enough) device matches the request selectors.
    RequestSelectorsUnmatched {
        /// The selector that rejected the most devices.
        expression: Option<String>,
    },
    /// The matching devices are not reachable from this node (per-device node selection).
    DevicesNotOnNode,
    /// Devices have not enough free capacity for the request, or the request violates their policy.
    CapacityExhausted {
        /// A device that fell short.
        device: Option<String>,
    },
    /// The matching devices are allocated to other claims.
    DevicesInUse,
    /// The matching devices carry taints the request does not tolerate.
    DevicesTainted {
        /// `key=value:effect` of one such taint.
        taint: String,
    },
    /// Shared counters of a pool are used up.
    CountersExhausted {
        /// `driver/pool`.
        pool: String,
    },
    /// Not enough devices pass all checks (several causes).
    NotEnoughDevices {
        /// Devices needed.
        needed: usize,
        /// Devices usable.
        usable: usize,
    },
    /// A `matchAttribute` / `distinctAttribute` constraint cannot be met.
    ConstraintUnsatisfied {
        /// The attribute.
        attribute: String,
        /// `distinctAttribute` (true) or `matchAttribute` (false).
        distinct: bool,
    },
    /// Mode `All` found no matching device on this node.
    AllModeNoDevices,
    /// Mode `All` cannot be served while a pool is incomplete or invalid.
    AllModePoolUnavailable {
        /// `driver/pool`.
        pool: String,
        /// Incomplete (true) or invalid (false).
        incomplete: bool,
    },
    /// The chosen alternatives need more than 32 devices for the claim.
    TooManyDevices,
    /// Every request can be served alone, but no combination serves all of them.
    NoCombination,
}

impl UnschedulableReason {
    /// A stable short key for grouping reasons across nodes.
    pub fn kind(&self) -> &'static str {
        match self {
            UnschedulableReason::NoDevices => "no-devices",
            UnschedulableReason::PoolsIncomplete { .. } => "pools-incomplete",
            UnschedulableReason::InvalidPools { .. } => "invalid-pools",
            UnschedulableReason::ClassSelectorsUnmatched { .. } => "class-selectors",
            UnschedulableReason::RequestSelectorsUnmatched { .. } => "request-selectors",
            UnschedulableReason::DevicesNotOnNode => "not-on-node",
            UnschedulableReason::CapacityExhausted { .. } => "capacity",
            UnschedulableReason::DevicesInUse => "in-use",
            UnschedulableReason::DevicesTainted { .. } => "tainted",
            UnschedulableReason::CountersExhausted { .. } => "counters",
            UnschedulableReason::NotEnoughDevices { .. } => "not-enough-devices",
            UnschedulableReason::ConstraintUnsatisfied { .. } => "constraint",
            UnschedulableReason::AllModeNoDevices => "all-mode-no-devices",
            UnschedulableReason::AllModePoolUnavailable { .. } => "all-mode-pool-unavailable",
            UnschedulableReason::TooManyDevices => "too-many-devices",
            UnschedulableReason::NoCombination => "no-combination",
        }
    }
}

impl fmt::Display for UnschedulableReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnschedulableReason::NoDevices => write!(f, "no devices available"),
            UnschedulableReason::PoolsIncomplete { pools } => {
                write!(f, "resource pools are being updated ({})", pools.join(", "))
            }
            UnschedulableReason::InvalidPools { pools } => {
                write!(f, "invalid resource pools were encountered (")?;
                for (i, (p, why)) in pools.iter().enumerate() {
                    if i > 0 {
                        write!(f, "; ")?;
                    }
                    write!(f, "{p}: {why}")?;
                }
                write!(f, ")")
            }
            UnschedulableReason::ClassSelectorsUnmatched {
                class,
                expression: Some(e),
            } => {
                write!(f, "no device matches the selectors of device class {class} ({e})")
            }
            UnschedulableReason::ClassSelectorsUnmatched {
                class,
                expression: None,
            } => {
                write!(f, "no device matches the selectors of device class {class}")
            }
            UnschedulableReason::RequestSelectorsUnmatched { expression: Some(e) } => {
                write!(f, "no device matches the request selectors ({e})")
            }
            UnschedulableReason::RequestSelectorsUnmatched { expression: None } => {
                write!(f, "no device matches the request selectors")
            }
            UnschedulableReason::DevicesNotOnNode => {
                write!(f, "matching devices are not available on this node")
            }
            UnschedulableReason::CapacityExhausted { device: Some(d) } => {
                write!(f, "insufficient device capacity (e.g. {d})")
            }
            UnschedulableReason::CapacityExhausted { device: None } => {
                write!(f, "insufficient device capacity")
            }
            UnschedulableReason::DevicesInUse => write!(f, "matching devices are already allocated"),
            UnschedulableReason::DevicesTainted { taint } => {
                write!(f, "matching devices have taints that are not tolerated ({taint})")
            }
            UnschedulableReason::CountersExhausted { pool } => {
                write!(f, "shared counters exhausted in pool {pool}")
            }
            UnschedulableReason::NotEnoughDevices { needed, usable } => {
                write!(f, "needs {needed} devices, only {usable} usable")
            }
            UnschedulableReason::ConstraintUnsatisfied {
                attribute,
                distinct: false,
            } => {
                write!(f, "cannot satisfy constraint matchAttribute {attribute}")
            }
            UnschedulableReason::ConstraintUnsatisfied {
                attribute,
                distinct: true,
            } => {
                write!(f, "cannot satisfy constraint distinctAttribute {attribute}")
            }
            UnschedulableReason::AllModeNoDevices => write!(f, "asks for all devices, but no device matches"),
            UnschedulableReason::AllModePoolUnavailable {
                pool,
                incomplete: true,
            } => {
                write!(
                    f,
                    "asks for all devices, but resource pool {pool} is currently being updated"
                )
            }
            UnschedulableReason::AllModePoolUnavailable {
                pool,
                incomplete: false,
            } => {
                write!(
                    f,
                    "asks for all devices, but resource pool {pool} is currently invalid"
                )
            }
            UnschedulableReason::TooManyDevices => write!(f, "would need more than 32 devices for the claim"),
            UnschedulableReason::NoCombination => {
                write!(f, "no combination of devices satisfies all requests")
            }
        }
    }
}

/// The claims cannot be allocated on this node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct Unschedulable {
    /// `namespace/name` of the claim that could not be allocated.
    pub claim: String,
    /// The request (or `request/subrequest`) at fault, when known.
    pub request: Option<String>,
    /// Why.
    pub reason: UnschedulableReason,
}

impl fmt::Display for Unschedulable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.request {
            Some(r) => write!(f, "claim {}, request {r}: {}", self.claim, self.reason),
            None => write!(f, "claim {}: {}", self.claim, self.reason),
        }
    }
}

/// Result of one allocation attempt that did not succeed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    /// Cannot allocate on this node.
    #[error("{0}")]
    Unschedulable(Box<Unschedulable>),
    /// The scheduling attempt must end.
    #[error("{0}")]
    Fatal(Box<FatalError>),
    /// The deadline passed or the caller cancelled.
    #[error("filter operation aborted: {0}")]
    Aborted(String),
}

impl AllocationError {
    /// Whether this is an "unschedulable on this node" outcome.
    pub fn is_unschedulable(&self) -> bool {
        matches!(self, AllocationError::Unschedulable(_))
    }

    /// Whether this is a fatal error.
    pub fn is_fatal(&self) -> bool {
        matches!(self, AllocationError::Fatal(_))
    }
}

impl From<FatalError> for AllocationError {
    fn from(e: FatalError) -> Self {
        AllocationError::Fatal(Box::new(e))
    }
}

impl From<Box<FatalError>> for AllocationError {
    fn from(e: Box<FatalError>) -> Self {
        AllocationError::Fatal(e)
    }
}

impl From<Unschedulable> for AllocationError {
    fn from(e: Unschedulable) -> Self {
        AllocationError::Unschedulable(Box::new(e))
    }
}

//! Device selectors: our own small trait, and the CEL implementation behind it.
//!
//! The allocator only talks to [`SelectorEngine`] and [`DeviceSelector`], so the CEL
//! implementation can be swapped (for example for `cel` 0.15 once kube-cel moves to it).
//!
//! [`CelSelectorEngine`] implements the Kubernetes DRA device-selector environment on top of
//! `cel` 0.13 (through `kube_cel::cel`) and kube-cel 0.8:
//!
//! * the variable `device` with `driver`, `attributes[domain][id]`, `capacity[domain][id]` (as
//!   Kubernetes quantities) and `allowMultipleAllocations`. Attribute and capacity names without a
//!   domain belong to the driver's domain;
//! * looking up an unknown domain yields an empty map. cel-rust has no hook for that, so every
//!   lookup `device.attributes[K]` / `device.capacity[K]` (also through `.field` syntax and through
//!   `cel.bind` aliases of `device`, `device.attributes` or `device.capacity`) is rewritten at
//!   compile time into `K in M ? M[K] : {}`. An unknown id inside a known domain still fails with
//!   "no such key", as in Kubernetes;
//! * `cel.bind(name, init, body)` is rewritten into the equivalent comprehension, as cel-go does;
//! * `includes()` for scalar and list-typed attributes (lists longer than 48 entries are an error);
//! * the kube-cel libraries: quantity, semver, strings, lists, sets, regex, …
//!
//! Every expression is compiled once per engine (cache keyed by the expression text) and gets a
//! process-unique [`SelectorId`]. The per-device CEL value (`device`) is built once per device and
//! stored in the device's [`DeviceValueSlot`], so it is shared by all selectors and all pods.
//!
//! Results that are not booleans, evaluation errors, and panics inside the interpreter are all
//! reported as [`SelectorEvalError`]; the allocator turns them into fatal errors, never into
//! "no match".
//!
//! Known differences from cel-go (the interpreter is dynamically typed): there is no compile-time
//! type check, so a type error shows up at evaluation time; selecting a field of a non-map value
//! yields `false` in cel-rust instead of an error; two-variable comprehensions and the `.?` optional
//! syntax are not supported by cel 0.13 and fail to compile.
//!
//! Cost limits (see [`crate::cost`]): an engine rejects at compile time an expression whose
//! estimated worst-case cost exceeds its [`CostLimits::estimated`] limit, and meters every
//! evaluation against [`CostLimits::runtime`] and the caller's deadline (DynamicResources
//! `filterTimeout`), checked inside comprehension loops. Both limits default to upstream's
//! `CELSelectorExpressionMaxCost`. An exhausted budget is a [`SelectorEvalError`] of kind
//! [`EvalErrorKind::CostBudget`] ("cost budget exceeded"), a passed deadline one of kind
//! [`EvalErrorKind::Deadline`].

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use k8s_openapi::api::resource::v1::{Device, DeviceAttribute};
use kube_cel::KubeCelExt;
use kube_cel::cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, LiteralValue, MapExpr, SelectExpr,
    operators,
};
use kube_cel::cel::common::types::CelString;
use kube_cel::cel::extractors::This;
use kube_cel::cel::objects::{Key, Map};
use kube_cel::cel::parser::Parser;
use kube_cel::cel::{Context, ExecutionError, Value};
use parking_lot::RwLock;

use crate::cost::{self, CostLimits, MeterReport, MeterStop};
use crate::device_maps::DeviceMaps;

/// Maximum number of entries that `includes()` accepts in a list (ResourceSliceMaxAttributeValuesPerDevice).
pub const MAX_INCLUDES_LIST_LEN: usize = 48;

/// Maximum length of a selector expression accepted by the API (10 KiB).
pub const MAX_EXPRESSION_LEN: usize = 10 * 1024;

/// Number of compiled expressions an engine keeps before it starts over.
const COMPILE_CACHE_CAP: usize = 4096;

/// Process-unique identity of a compiled selector; the key of the per-device match caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SelectorId(pub u64);

static NEXT_SELECTOR_ID: AtomicU64 = AtomicU64::new(1);

impl SelectorId {
    /// A fresh identity, never returned before in this process.
    pub fn fresh() -> Self {
        SelectorId(NEXT_SELECTOR_ID.fetch_add(1, Ordering::Relaxed))
    }
}

/// An expression that could not be compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("CEL compile error: {message}")]
pub struct SelectorCompileError {
    /// What was wrong.
    pub message: String,
}

/// An evaluation that did not produce a boolean.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("CEL runtime error: {message}")]
pub struct SelectorEvalError {
    /// What went wrong.
    pub message: String,
    /// Which kind of failure it was.
    pub kind: EvalErrorKind,
}

/// The kinds of [`SelectorEvalError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvalErrorKind {
    /// The expression failed or did not return a boolean for this device.
    Runtime,
    /// The evaluation spent its runtime cost budget and was stopped.
    CostBudget,
    /// The caller's deadline passed during the evaluation.
    Deadline,
}

impl SelectorEvalError {
    /// A plain runtime error.
    pub fn runtime(message: impl Into<String>) -> Self {
        SelectorEvalError {
            message: message.into(),
            kind: EvalErrorKind::Runtime,
        }
    }
}

/// Per-device storage an engine may use for its own representation of the device (for CEL, the
/// `device` value). It is filled at most once and lives as long as the prepared slice.
#[derive(Default)]
pub struct DeviceValueSlot(OnceLock<Arc<dyn Any + Send + Sync>>);

impl fmt::Debug for DeviceValueSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "DeviceValueSlot(set)"
        } else {
            "DeviceValueSlot(empty)"
        })
    }
}

impl DeviceValueSlot {
    /// The stored value, creating it with `init` on first use.
    pub fn get_or_init(
        &self,
        init: impl FnOnce() -> Arc<dyn Any + Send + Sync>,
    ) -> &Arc<dyn Any + Send + Sync> {
        self.0.get_or_init(init)
    }
}

/// What a selector sees of one device.
#[derive(Clone, Copy, Debug)]
pub struct SelectorInput<'a> {
    /// The driver of the slice that publishes the device.
    pub driver: &'a str,
    /// The device as stored: its attribute and capacity maps are in `maps`.
    pub device: &'a Device,
    /// The device's attributes and capacities.
    pub maps: &'a DeviceMaps,
    /// Engine-owned per-device storage.
    pub slot: &'a DeviceValueSlot,
    /// Stop evaluating at this instant (DynamicResources `filterTimeout`); `None`: no deadline.
    pub deadline: Option<Instant>,
}

/// One compiled device selector.
pub trait DeviceSelector: Send + Sync + fmt::Debug {
    /// Identity used for caching match results.
    fn id(&self) -> SelectorId;
    /// The source text.
    fn expression(&self) -> &str;
    /// Evaluates the selector for one device.
    fn matches(&self, input: SelectorInput<'_>) -> Result<bool, SelectorEvalError>;
    /// If the selector can only be true for devices of one driver (a top-level conjunct
    /// `device.driver == "x"`), that driver. Used to skip evaluation for other drivers.
    fn required_driver(&self) -> Option<&str> {
        None
    }
}

/// Compiles selector expressions. Implementations cache compiled selectors.
pub trait SelectorEngine: Send + Sync {
    /// Compiles (or fetches from the cache) one expression.
    fn compile(&self, expression: &str) -> Result<Arc<dyn DeviceSelector>, SelectorCompileError>;
}

type CompileResult = Result<Arc<CelSelector>, SelectorCompileError>;

/// The CEL implementation of [`SelectorEngine`].
pub struct CelSelectorEngine {
    shared: Arc<CelShared>,
    limits: CostLimits,
    cache: RwLock<HashMap<Arc<str>, CompileResult>>,
}

impl fmt::Debug for CelSelectorEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CelSelectorEngine")
            .field("cached", &self.cache.read().len())
            .finish()
    }
}

/// State shared by all selectors of one engine: the root context with every function registered,
/// and the tiny programs used to build quantity and semver values.
struct CelShared {
    root: Context<'static>,
    quantity_ctor: IdedExpr,
    semver_ctor: IdedExpr,
}

impl Default for CelSelectorEngine {
    fn default() -> Self {
        Self::new()
    }
}

impl CelSelectorEngine {
    /// A new engine with an empty compile cache and upstream's cost limits.
    pub fn new() -> Self {
        Self::with_limits(CostLimits::default())
    }

    /// A new engine with an empty compile cache and the given cost limits.
    pub fn with_limits(limits: CostLimits) -> Self {
        let mut root = Context::default().with_all();
        root.add_function("includes", includes);
        root.add_function(cost::METER_FUNCTION, cost::meter_call);
        // The constructor programs are constants; parsing them cannot fail.
        let quantity_ctor = Parser::new().parse("quantity(s)").unwrap_or_default();
        let semver_ctor = Parser::new().parse("semver(s)").unwrap_or_default();
        CelSelectorEngine {
            shared: Arc::new(CelShared {
                root,
                quantity_ctor,
                semver_ctor,
            }),
            limits,
            cache: RwLock::new(HashMap::new()),
        }
    }

    /// The cost limits of this engine.
    pub fn limits(&self) -> CostLimits {
        self.limits
    }

    /// Compiles an expression and returns the concrete CEL selector.
    pub fn compile_cel(&self, expression: &str) -> CompileResult {
        if let Some(hit) = self.cache.read().get(expression) {
            return hit.clone();
        }
        let compiled = compile_expression(expression, self.limits.estimated).map(|c| {
            Arc::new(CelSelector {
                id: SelectorId::fresh(),
                source: Arc::from(expression),
                expr: c.expr,
                required_driver: c.required_driver,
                scalar_only: c.scalar_only,
                static_cost: c.static_cost,
                runtime_limit: self.limits.runtime,
                shared: Arc::clone(&self.shared),
            })
        });
        let mut cache = self.cache.write();
        if let Some(hit) = cache.get(expression) {
            return hit.clone();
        }
        if cache.len() >= COMPILE_CACHE_CAP {
            cache.clear();
        }
        cache.insert(Arc::from(expression), compiled.clone());
        compiled
    }

    /// Number of cached expressions (for tests and metrics).
    pub fn cached_expressions(&self) -> usize {
        self.cache.read().len()
    }
}

impl SelectorEngine for CelSelectorEngine {
    fn compile(&self, expression: &str) -> Result<Arc<dyn DeviceSelector>, SelectorCompileError> {
        self.compile_cel(expression).map(|s| s as Arc<dyn DeviceSelector>)
    }
}

/// A compiled CEL device selector.
pub struct CelSelector {
    id: SelectorId,
    source: Arc<str>,
    expr: IdedExpr,
    required_driver: Option<String>,
    /// The expression reads `device` only through its scalar fields ([`reads_only_scalar_fields`]).
    scalar_only: bool,
    /// Units charged once per evaluation (see [`cost::static_cost`]).
    static_cost: u64,
    /// The runtime cost budget of one evaluation.
    runtime_limit: u64,
    shared: Arc<CelShared>,
}

impl fmt::Debug for CelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CelSelector")
            .field("id", &self.id)
            .field("expression", &self.source)
            .finish()
    }
}

/// The CEL value of a device, or why it could not be built.
type DeviceValue = Result<Value, DeviceValueError>;

/// Why a device's attributes or capacities cannot be turned into CEL values. Every selector
/// then fails for the device with this as its runtime error message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceValueError {
    /// The `quantity(s)` or `semver(s)` constructor failed.
    #[error("{message}")]
    Constructor {
        /// The interpreter's message.
        message: String,
    },
    /// The interpreter panicked while running a constructor.
    #[error("internal error in the CEL interpreter")]
    InterpreterPanic,
    /// A version attribute is not a semantic version.
    #[error("parse semantic version {value:?}: {source}")]
    SemanticVersion {
        /// The attribute's value.
        value: String,
        /// Why the constructor rejected it.
        #[source]
        source: Box<DeviceValueError>,
    },
    /// The attribute sets none of the value fields.
    #[error("unsupported attribute value")]
    UnsupportedAttribute,
    /// An attribute cannot be converted.
    #[error("attribute {name}: {source}")]
    Attribute {
        /// The attribute's name.
        name: String,
        /// Why.
        #[source]
        source: Box<DeviceValueError>,
    },
    /// A capacity is not a valid quantity.
    #[error("capacity {name}: invalid quantity {value:?}: {source}")]
    Capacity {
        /// The capacity's name.
        name: String,
        /// Its value.
        value: String,
        /// Why the constructor rejected it.
        #[source]
        source: Box<DeviceValueError>,
    },
}

impl DeviceSelector for CelSelector {
    fn id(&self) -> SelectorId {
        self.id
    }

    fn expression(&self) -> &str {
        &self.source
    }

    fn required_driver(&self) -> Option<&str> {
        self.required_driver.as_deref()
    }

    fn matches(&self, input: SelectorInput<'_>) -> Result<bool, SelectorEvalError> {
        self.evaluate(input).0
    }
}

impl CelSelector {
    /// Evaluates the selector for one device and reports the cost units it spent (upstream's
    /// "actual cost"). The evaluation is stopped once the runtime budget is spent or the input's
    /// deadline has passed.
    pub fn evaluate(&self, input: SelectorInput<'_>) -> (Result<bool, SelectorEvalError>, MeterReport) {
        let idle = MeterReport {
            spent: 0,
            stopped: None,
        };
        let value = match self.device_value(input) {
            Ok(value) => value,
            Err(error) => return (Err(SelectorEvalError::runtime(error.to_string())), idle),
        };
        let (outcome, report) = cost::metered(self.runtime_limit, self.static_cost, input.deadline, || {
            catch_unwind(AssertUnwindSafe(|| {
                let mut ctx = self.shared.root.new_inner_scope();
                ctx.add_variable_from_value("device", value);
                Value::resolve(&self.expr, &ctx)
            }))
        });
        // A stopped evaluation is reported as such even if CEL's error absorption produced a value.
        let result = match (report.stopped, outcome) {
            (Some(MeterStop::Budget), _) => Err(SelectorEvalError {
                message: format!(
                    "cost budget exceeded: evaluation stopped after {} cost units, the limit is {}",
                    report.spent, self.runtime_limit
                ),
                kind: EvalErrorKind::CostBudget,
            }),
            (Some(MeterStop::Deadline), _) => Err(SelectorEvalError {
                message: format!("deadline exceeded after {} cost units", report.spent),
                kind: EvalErrorKind::Deadline,
            }),
            (None, Ok(Ok(Value::Bool(b)))) => Ok(b),
            (None, Ok(Ok(other))) => Err(SelectorEvalError::runtime(format!(
                "result of type {} could not be converted to bool",
                other.type_of()
            ))),
            (None, Ok(Err(err))) => Err(SelectorEvalError::runtime(describe_execution_error(&err))),
            (None, Err(_)) => Err(SelectorEvalError::runtime(
                "internal error in the CEL interpreter",
            )),
        };
        (result, report)
    }
}

impl CelSelector {
    /// The `device` variable for one evaluation.
    ///
    /// The whole value (attribute and capacity maps) is built once per device and kept in its
    /// slot for every later selector. An expression that reads only `device.driver` and
    /// `device.allowMultipleAllocations` (every class selector of the form `device.driver ==
    /// "..."`) gets a two-field value instead and leaves the slot alone unless it is already
    /// filled: at 40,000 devices the kept whole values were ~100 MB that such selectors never
    /// read. Its result is the same, errors included: the device's attributes and capacities are
    /// still converted (and the conversions dropped), so a device whose whole value cannot be
    /// built fails every selector alike, as upstream, which converts them before evaluating.
    fn device_value(&self, input: SelectorInput<'_>) -> DeviceValue {
        let stored = if self.scalar_only {
            input.slot.0.get()
        } else {
            Some(input.slot.get_or_init(|| {
                let value: DeviceValue =
                    build_device_value(&self.shared, input.driver, input.device, input.maps);
                Arc::new(value)
            }))
        };
        match stored.map(|v| v.downcast_ref::<DeviceValue>()) {
            Some(Some(value)) => value.clone(),
            // Another engine filled the slot: a private copy.
            Some(None) => build_device_value(&self.shared, input.driver, input.device, input.maps),
            None => {
                convert_device_maps(&self.shared, input.driver, input.maps)?;
                Ok(scalar_device_value(input.driver, input.device))
            }
        }
    }
}

fn describe_execution_error(err: &ExecutionError) -> String {
    match err {
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        ExecutionError::UndeclaredReference(name) => format!("undeclared reference to '{name}'"),
        ExecutionError::NoSuchOverload => "no such overload".to_string(),
        other => other.to_string(),
    }
}

/// `<target>.includes(<arg>)`: list membership, or equality for a scalar target.
fn includes(This(target): This<Value>, needle: Value) -> Result<bool, ExecutionError> {
    match target {
        Value::List(items) => {
            if items.len() > MAX_INCLUDES_LIST_LEN {
                return Err(ExecutionError::function_error(
                    "includes",
                    format!(
                        "'includes' function cannot be applied to lists longer than {MAX_INCLUDES_LIST_LEN} values"
                    ),
                ));
            }
            Ok(items.contains(&needle))
        }
        scalar => Ok(scalar == needle),
    }
}

// ------------------------------------------------------------------------------------------------
// Device values
// ------------------------------------------------------------------------------------------------

fn string_value(s: &str) -> Value {
    Value::String(Arc::new(s.to_string()))
}

fn map_value(entries: HashMap<Key, Value>) -> Value {
    Value::Map(Map {
        map: Arc::new(entries),
    })
}

/// Runs one of the constructor programs (`quantity(s)` / `semver(s)`) for a string.
fn construct(shared: &CelShared, ctor: &IdedExpr, s: &str) -> Result<Value, DeviceValueError> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut ctx = shared.root.new_inner_scope();
        ctx.add_variable_from_value("s", string_value(s));
        Value::resolve(ctor, &ctx)
    }));
    match outcome {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(err)) => Err(DeviceValueError::Constructor {
            message: describe_execution_error(&err),
        }),
        Err(_) => Err(DeviceValueError::InterpreterPanic),
    }
}

fn attribute_value(shared: &CelShared, attr: &DeviceAttribute) -> Result<Value, DeviceValueError> {
    let semver = |v: &str| {
        construct(shared, &shared.semver_ctor, v).map_err(|e| DeviceValueError::SemanticVersion {
            value: v.to_string(),
            source: Box::new(e),
        })
    };
    if let Some(values) = &attr.ints {
        return Ok(Value::List(Arc::new(
            values.iter().map(|v| Value::Int(*v)).collect(),
        )));
    }
    if let Some(values) = &attr.bools {
        return Ok(Value::List(Arc::new(
            values.iter().map(|v| Value::Bool(*v)).collect(),
        )));
    }
    if let Some(values) = &attr.strings {
        return Ok(Value::List(Arc::new(
            values.iter().map(|v| string_value(v)).collect(),
        )));
    }
    if let Some(values) = &attr.versions {
        let items = values.iter().map(|v| semver(v)).collect::<Result<Vec<_>, _>>()?;
        return Ok(Value::List(Arc::new(items)));
    }
    if let Some(v) = attr.int {
        return Ok(Value::Int(v));
    }
    if let Some(v) = attr.bool {
        return Ok(Value::Bool(v));
    }
    if let Some(v) = &attr.string {
        return Ok(string_value(v));
    }
    if let Some(v) = &attr.version {
        return semver(v);
    }
    Err(DeviceValueError::UnsupportedAttribute)
}

/// Splits a qualified name into (domain, id), using the driver as the default domain.
pub fn split_qualified_name<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    match name.split_once('/') {
        Some((domain, id)) => (domain, id),
        None => (driver, name),
    }
}

/// Converts every attribute and capacity of `device` into its CEL value, attributes first, each
/// map in name order, and hands each to `sink` as `(is_capacity, domain, id, value)`. The first
/// failing conversion ends it with the error every selector then reports for the device.
fn convert_device_entries(
    shared: &CelShared,
    driver: &str,
    maps: &DeviceMaps,
    sink: &mut dyn FnMut(bool, &str, &str, Value),
) -> Result<(), DeviceValueError> {
    for (name, attr) in maps.attributes() {
        let value = attribute_value(shared, attr).map_err(|e| DeviceValueError::Attribute {
            name: name.clone(),
            source: Box::new(e),
        })?;
        let (domain, id) = split_qualified_name(name, driver);
        sink(false, domain, id, value);
    }
    for (name, cap) in maps.capacity() {
        let value = construct(shared, &shared.quantity_ctor, &cap.value.0).map_err(|e| {
            DeviceValueError::Capacity {
                name: name.clone(),
                value: cap.value.0.clone(),
                source: Box::new(e),
            }
        })?;
        let (domain, id) = split_qualified_name(name, driver);
        sink(true, domain, id, value);
    }
    Ok(())
}

/// [`convert_device_entries`] with the values dropped: only whether (and how) it fails.
fn convert_device_maps(shared: &CelShared, driver: &str, maps: &DeviceMaps) -> Result<(), DeviceValueError> {
    convert_device_entries(shared, driver, maps, &mut |_, _, _, _| {})
}

/// The scalar fields of `device`'s value (`driver`, `allowMultipleAllocations`), with room for
/// `extra` more.
fn scalar_fields(driver: &str, device: &Device, extra: usize) -> HashMap<Key, Value> {
    let mut fields = HashMap::with_capacity(2 + extra);
    fields.insert(Key::String(Arc::new("driver".into())), string_value(driver));
    fields.insert(
        Key::String(Arc::new("allowMultipleAllocations".into())),
        Value::Bool(device.allow_multiple_allocations.unwrap_or(false)),
    );
    fields
}

/// `device` with only its scalar fields: what an expression that never reads the maps sees.
fn scalar_device_value(driver: &str, device: &Device) -> Value {
    map_value(scalar_fields(driver, device, 0))
}

fn build_device_value(shared: &CelShared, driver: &str, device: &Device, maps: &DeviceMaps) -> DeviceValue {
    let mut attributes: HashMap<String, HashMap<Key, Value>> = HashMap::new();
    let mut capacity: HashMap<String, HashMap<Key, Value>> = HashMap::new();
    convert_device_entries(shared, driver, maps, &mut |is_capacity, domain, id, value| {
        let maps = if is_capacity {
            &mut capacity
        } else {
            &mut attributes
        };
        maps.entry(domain.to_string())
            .or_default()
            .insert(Key::String(Arc::new(id.to_string())), value);
    })?;
    let outer = |m: HashMap<String, HashMap<Key, Value>>| {
        map_value(
            m.into_iter()
                .map(|(k, v)| (Key::String(Arc::new(k)), map_value(v)))
                .collect(),
        )
    };
    let mut fields = scalar_fields(driver, device, 2);
    fields.insert(Key::String(Arc::new("attributes".into())), outer(attributes));
    fields.insert(Key::String(Arc::new("capacity".into())), outer(capacity));
    Ok(map_value(fields))
}

// ------------------------------------------------------------------------------------------------
// Compilation: parse, validate, rewrite
// ------------------------------------------------------------------------------------------------

/// A parsed, rewritten and instrumented expression.
struct Compiled {
    expr: IdedExpr,
    /// The driver prefilter, if any.
    required_driver: Option<String>,
    scalar_only: bool,
    static_cost: u64,
}

/// Parses, checks the estimated cost of (against `estimated_limit`), rewrites and instruments
/// an expression.
fn compile_expression(source: &str, estimated_limit: Option<u64>) -> Result<Compiled, SelectorCompileError> {
    if source.trim().is_empty() {
        return Err(SelectorCompileError {
            message: "empty expression".to_string(),
        });
    }
    if source.len() > MAX_EXPRESSION_LEN {
        return Err(SelectorCompileError {
            message: format!(
                "expression is {} bytes long, the limit is {MAX_EXPRESSION_LEN}",
                source.len()
            ),
        });
    }
    let parsed = catch_unwind(AssertUnwindSafe(|| Parser::new().parse(source)))
        .map_err(|_| SelectorCompileError {
            message: "internal error in the CEL parser".to_string(),
        })?
        .map_err(|errs| SelectorCompileError {
            message: errs.to_string().trim().to_string(),
        })?;
    if let Some(limit) = estimated_limit {
        let estimated = cost::estimate(&parsed);
        if estimated > limit {
            return Err(SelectorCompileError {
                message: format!(
                    "too complex, exceeds cost limit: cost budget exceeded: estimated cost {estimated} is above the limit of {limit}"
                ),
            });
        }
    }
    let mut next_id = max_id(&parsed) + 1;
    let mut rewriter = Rewriter {
        next_id: &mut next_id,
    };
    let mut scope = Vec::new();
    let rewritten = rewriter.rewrite(parsed, &mut scope)?;
    let required_driver = required_driver(&rewritten);
    let scalar_only = reads_only_scalar_fields(&rewritten);
    let expr = cost::instrument(rewritten, &mut next_id);
    let static_cost = cost::static_cost(&expr);
    Ok(Compiled {
        expr,
        required_driver,
        scalar_only,
        static_cost,
    })
}

/// Whether every use of the identifier `device` in `expr` selects `driver` or
/// `allowMultipleAllocations` from it (`has()` tests included), so the attribute and capacity
/// maps of the value can never be reached. Any other use (a bare `device`, `device.attributes`,
/// a `cel.bind` alias) needs the whole value. A comprehension variable that happens to be called
/// `device` is treated as the device: at worst that builds the whole value needlessly, it never
/// changes an answer.
fn reads_only_scalar_fields(expr: &IdedExpr) -> bool {
    match &expr.expr {
        Expr::Select(sel) if matches!(&sel.operand.expr, Expr::Ident(n) if n == "device") => {
            matches!(sel.field.as_str(), "driver" | "allowMultipleAllocations")
        }
        Expr::Ident(name) => name != "device",
        _ => {
            let mut only = true;
            visit_children(expr, &mut |child| only &= reads_only_scalar_fields(child));
            only
        }
    }
}

fn max_id(expr: &IdedExpr) -> u64 {
    let mut max = expr.id;
    visit_children(expr, &mut |child| max = max.max(max_id(child)));
    max
}

fn visit_children(expr: &IdedExpr, f: &mut dyn FnMut(&IdedExpr)) {
    match &expr.expr {
        Expr::Call(call) => {
            if let Some(t) = &call.target {
                f(t);
            }
            call.args.iter().for_each(&mut *f);
        }
        Expr::Comprehension(c) => {
            for e in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                f(e);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(&mut *f),
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(e) = &entry.expr {
                    f(&e.key);
                    f(&e.value);
                }
            }
        }
        Expr::Select(s) => f(&s.operand),
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let EntryExpr::StructField(e) = &entry.expr {
                    f(&e.value);
                }
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// What an identifier or sub-expression stands for, as far as the domain-map rewrite cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Alias {
    Device,
    DomainMap,
    /// A name that shadows an alias (comprehension variable or an unrelated binding).
    Other,
}

struct Rewriter<'a> {
    next_id: &'a mut u64,
}

type Scope = Vec<(String, Alias)>;

impl Rewriter<'_> {
    fn id(&mut self) -> u64 {
        let id = *self.next_id;
        *self.next_id += 1;
        id
    }

    fn node(&mut self, expr: Expr) -> IdedExpr {
        IdedExpr { id: self.id(), expr }
    }

    fn classify(expr: &IdedExpr, scope: &Scope) -> Option<Alias> {
        match &expr.expr {
            Expr::Ident(name) => match scope.iter().rev().find(|(n, _)| n == name) {
                Some((_, alias)) => Some(*alias),
                None if name == "device" => Some(Alias::Device),
                None => None,
            },
            Expr::Select(sel)
                if !sel.test
                    && (sel.field == "attributes" || sel.field == "capacity")
                    && Self::classify(&sel.operand, scope) == Some(Alias::Device) =>
            {
                Some(Alias::DomainMap)
            }
            _ => None,
        }
        .filter(|a| *a != Alias::Other)
    }

    /// `key in map ? map[key] : {}`
    fn domain_lookup(&mut self, map: IdedExpr, key: IdedExpr) -> IdedExpr {
        let cond = self.node(Expr::Call(CallExpr {
            func_name: operators::IN.to_string(),
            target: None,
            args: vec![key.clone(), map.clone()],
        }));
        let index = self.node(Expr::Call(CallExpr {
            func_name: operators::INDEX.to_string(),
            target: None,
            args: vec![map, key],
        }));
        let empty = self.node(Expr::Map(MapExpr { entries: Vec::new() }));
        self.node(Expr::Call(CallExpr {
            func_name: operators::CONDITIONAL.to_string(),
            target: None,
            args: vec![cond, index, empty],
        }))
    }

    fn rewrite(&mut self, expr: IdedExpr, scope: &mut Scope) -> Result<IdedExpr, SelectorCompileError> {
        let id = expr.id;
        let out = match expr.expr {
            Expr::Unspecified => {
                return Err(SelectorCompileError {
                    message: "unsupported expression".to_string(),
                });
            }
            Expr::Struct(s) => {
                return Err(SelectorCompileError {
                    message: format!("message construction ({}{{...}}) is not supported", s.type_name),
                });
            }
            Expr::Literal(l) => Expr::Literal(l),
            Expr::Ident(name) => Expr::Ident(name),
            Expr::List(l) => {
                let mut elements = Vec::with_capacity(l.elements.len());
                for e in l.elements {
                    elements.push(self.rewrite(e, scope)?);
                }
                Expr::List(ListExpr {
                    elements,
                    optional_indices: l.optional_indices,
                })
            }
            Expr::Map(m) => {
                let mut entries = Vec::with_capacity(m.entries.len());
                for mut entry in m.entries {
                    match entry.expr {
                        EntryExpr::MapEntry(mut e) => {
                            e.key = self.rewrite(e.key, scope)?;
                            e.value = self.rewrite(e.value, scope)?;
                            entry.expr = EntryExpr::MapEntry(e);
                        }
                        EntryExpr::StructField(_) => {
                            return Err(SelectorCompileError {
                                message: "field initializers are not supported in map literals".to_string(),
                            });
                        }
                    }
                    entries.push(entry);
                }
                Expr::Map(MapExpr { entries })
            }
            Expr::Select(sel) => {
                if !sel.test && Self::classify(&sel.operand, scope) == Some(Alias::DomainMap) {
                    let map = self.rewrite(*sel.operand, scope)?;
                    let key = self.node(Expr::Literal(LiteralValue::String(CelString::from(
                        sel.field.as_str(),
                    ))));
                    return Ok(self.domain_lookup(map, key));
                }
                let operand = self.rewrite(*sel.operand, scope)?;
                Expr::Select(SelectExpr {
                    operand: Box::new(operand),
                    field: sel.field,
                    test: sel.test,
                })
            }
            Expr::Call(call) => return self.rewrite_call(id, call, scope),
            Expr::Comprehension(c) => {
                let c = *c;
                let iter_range = self.rewrite(c.iter_range, scope)?;
                let accu_init = self.rewrite(c.accu_init, scope)?;
                let depth = scope.len();
                scope.push((c.iter_var.clone(), Alias::Other));
                if let Some(v2) = &c.iter_var2 {
                    scope.push((v2.clone(), Alias::Other));
                }
                scope.push((c.accu_var.clone(), Alias::Other));
                let loop_cond = self.rewrite(c.loop_cond, scope);
                let loop_step = self.rewrite(c.loop_step, scope);
                let result = self.rewrite(c.result, scope);
                scope.truncate(depth);
                Expr::Comprehension(Box::new(ComprehensionExpr {
                    iter_range,
                    iter_var: c.iter_var,
                    iter_var2: c.iter_var2,
                    accu_var: c.accu_var,
                    accu_init,
                    loop_cond: loop_cond?,
                    loop_step: loop_step?,
                    result: result?,
                }))
            }
        };
        Ok(IdedExpr { id, expr: out })
    }

    fn rewrite_call(
        &mut self,
        id: u64,
        call: CallExpr,
        scope: &mut Scope,
    ) -> Result<IdedExpr, SelectorCompileError> {
        // cel.bind(name, init, body) -> comprehension over an empty list with `name` as accumulator.
        let is_bind = call.func_name == "bind"
            && call.args.len() == 3
            && matches!(call.target.as_deref(), Some(IdedExpr { expr: Expr::Ident(t), .. }) if t == "cel");
        if is_bind {
            let mut args = call.args.into_iter();
            let (Some(var), Some(init), Some(body)) = (args.next(), args.next(), args.next()) else {
                return Err(SelectorCompileError {
                    message: "cel.bind needs three arguments".to_string(),
                });
            };
            let Expr::Ident(name) = var.expr else {
                return Err(SelectorCompileError {
                    message: "cel.bind: the first argument must be a simple identifier".to_string(),
                });
            };
            let alias = Self::classify(&init, scope).unwrap_or(Alias::Other);
            let init = self.rewrite(init, scope)?;
            scope.push((name.clone(), alias));
            let body = self.rewrite(body, scope);
            scope.pop();
            let body = body?;
            let empty_list = self.node(Expr::List(ListExpr::new(Vec::new())));
            let stop = self.node(Expr::Literal(LiteralValue::Boolean(false.into())));
            let step = self.node(Expr::Ident(name.clone()));
            return Ok(IdedExpr {
                id,
                expr: Expr::Comprehension(Box::new(ComprehensionExpr {
                    iter_range: empty_list,
                    iter_var: "#unused".to_string(),
                    iter_var2: None,
                    accu_var: name,
                    accu_init: init,
                    loop_cond: stop,
                    loop_step: step,
                    result: body,
                })),
            });
        }

        // M[K] where M is device.attributes / device.capacity (or an alias of them).
        if call.target.is_none()
            && call.func_name == operators::INDEX
            && call.args.len() == 2
            && Self::classify(&call.args[0], scope) == Some(Alias::DomainMap)
        {
            let mut args = call.args.into_iter();
            let (Some(map), Some(key)) = (args.next(), args.next()) else {
                return Err(SelectorCompileError {
                    message: "index needs two operands".to_string(),
                });
            };
            let map = self.rewrite(map, scope)?;
            let key = self.rewrite(key, scope)?;
            return Ok(self.domain_lookup(map, key));
        }

        let target = match call.target {
            Some(t) => Some(Box::new(self.rewrite(*t, scope)?)),
            None => None,
        };
        let mut args = Vec::with_capacity(call.args.len());
        for a in call.args {
            args.push(self.rewrite(a, scope)?);
        }
        Ok(IdedExpr {
            id,
            expr: Expr::Call(CallExpr {
                func_name: call.func_name,
                target,
                args,
            }),
        })
    }
}

/// Finds a top-level conjunct `device.driver == "lit"` (either operand order).
fn required_driver(expr: &IdedExpr) -> Option<String> {
    let Expr::Call(call) = &expr.expr else { return None };
    if call.target.is_some() || call.args.len() != 2 {
        return None;
    }
    match call.func_name.as_str() {
        operators::LOGICAL_AND => required_driver(&call.args[0]).or_else(|| required_driver(&call.args[1])),
        operators::EQUALS => {
            let is_driver = |e: &IdedExpr| {
                matches!(&e.expr, Expr::Select(SelectExpr { operand, field, test: false })
                    if field == "driver" && matches!(&operand.expr, Expr::Ident(n) if n == "device"))
            };
            let literal = |e: &IdedExpr| match &e.expr {
                Expr::Literal(LiteralValue::String(s)) => Some(s.inner().to_string()),
                _ => None,
            };
            let (a, b) = (&call.args[0], &call.args[1]);
            if is_driver(a) {
                literal(b)
            } else if is_driver(b) {
                literal(a)
            } else {
                None
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::resource::v1::DeviceCapacity;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

    fn attr_int(v: i64) -> DeviceAttribute {
        DeviceAttribute {
            int: Some(v),
            ..Default::default()
        }
    }
    fn attr_str(v: &str) -> DeviceAttribute {
        DeviceAttribute {
            string: Some(v.into()),
            ..Default::default()
        }
    }

    fn gpu() -> Device {
        let mut attributes = std::collections::BTreeMap::new();
        attributes.insert("model".to_string(), attr_str("a100"));
        attributes.insert("index".to_string(), attr_int(3));
        attributes.insert(
            "driverVersion".to_string(),
            DeviceAttribute {
                version: Some("1.2.3".into()),
                ..Default::default()
            },
        );
        attributes.insert("resource.kubernetes.io/numaNode".to_string(), attr_int(1));
        attributes.insert(
            "models".to_string(),
            DeviceAttribute {
                strings: Some(vec!["x".into(), "y".into()]),
                ..Default::default()
            },
        );
        attributes.insert(
            "someBool".to_string(),
            DeviceAttribute {
                bool: Some(true),
                ..Default::default()
            },
        );
        let mut capacity = std::collections::BTreeMap::new();
        capacity.insert(
            "memory".to_string(),
            DeviceCapacity {
                value: ApiQuantity("80Gi".into()),
                request_policy: None,
            },
        );
        Device {
            name: "gpu-0".into(),
            attributes: Some(attributes),
            capacity: Some(capacity),
            allow_multiple_allocations: Some(true),
            ..Default::default()
        }
    }

    fn eval(engine: &CelSelectorEngine, expr: &str) -> Result<bool, String> {
        let sel = engine.compile(expr).map_err(|e| e.to_string())?;
        let device = gpu();
        let slot = DeviceValueSlot::default();
        sel.matches(SelectorInput {
            driver: "gpu.example.com",
            device: &device,
            maps: &DeviceMaps::of(&device),
            slot: &slot,
            deadline: None,
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn environment_table() {
        let engine = CelSelectorEngine::new();
        let cases: &[(&str, Result<bool, &str>)] = &[
            (r#"device.driver == "gpu.example.com""#, Ok(true)),
            (r#"device.driver == "other""#, Ok(false)),
            (
                r#"device.attributes["gpu.example.com"].model == "a100""#,
                Ok(true),
            ),
            (r#"device.attributes["gpu.example.com"].index == 3"#, Ok(true)),
            (
                r#"device.attributes["resource.kubernetes.io"].numaNode == 1"#,
                Ok(true),
            ),
            (r#"device.attributes["other.com"].size() == 0"#, Ok(true)),
            (
                r#"device.attributes["other.com"].model == "x""#,
                Err("no such key"),
            ),
            (
                r#"device.attributes["gpu.example.com"].nosuch == "x""#,
                Err("no such key"),
            ),
            (r#"has(device.attributes["gpu.example.com"].nosuch)"#, Ok(false)),
            (r#"has(device.attributes["gpu.example.com"].model)"#, Ok(true)),
            (r#"!("other.com" in device.attributes)"#, Ok(true)),
            (
                r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0"#,
                Ok(true),
            ),
            (
                r#"device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("100Gi"))"#,
                Ok(false),
            ),
            (r#"device.capacity["x.com"].size() == 0"#, Ok(true)),
            (
                r#"device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.0.0"))"#,
                Ok(true),
            ),
            (
                r#"device.attributes["gpu.example.com"].driverVersion.isLessThan(semver("v1.0.0", true))"#,
                Ok(false),
            ),
            (r#"isSemver("v1.0.0", true) && !isSemver("v1.0.0")"#, Ok(true)),
            (r#"device.allowMultipleAllocations"#, Ok(true)),
            (
                r#"cel.bind(dra, device.attributes["gpu.example.com"], dra.someBool && dra.model == "a100")"#,
                Ok(true),
            ),
            (
                r#"cel.bind(a, device.attributes, a["nope.com"].size() == 0)"#,
                Ok(true),
            ),
            (
                r#"cel.bind(d, device, d.attributes["nope.com"].size() == 0)"#,
                Ok(true),
            ),
            (r#"cel.bind(x, 1, cel.bind(y, x + 1, y == 2))"#, Ok(true)),
            (
                r#"device.attributes["gpu.example.com"].models.includes("y")"#,
                Ok(true),
            ),
            (
                r#"device.attributes["gpu.example.com"].models.includes("z")"#,
                Ok(false),
            ),
            (
                r#"device.attributes["gpu.example.com"].model.includes("a100")"#,
                Ok(true),
            ),
            (
                r#"device.attributes["gpu.example.com"].models.exists(m, m == "x")"#,
                Ok(true),
            ),
            (
                r#"device.attributes["gpu.example.com"].model.startsWith("a1")"#,
                Ok(true),
            ),
            (
                r#"device.attributes["gpu.example.com"].model"#,
                Err("could not be converted to bool"),
            ),
            (r#"1 +"#, Err("compile error")),
            (r#""#, Err("compile error")),
            (
                r#"!("name" in device.capacity["gpu.example.com"]) || device.capacity["gpu.example.com"].name.isGreaterThan(quantity("1Ki"))"#,
                Ok(true),
            ),
        ];
        for (expr, want) in cases {
            let got = eval(&engine, expr);
            match (want, &got) {
                (Ok(w), Ok(g)) => assert_eq!(w, g, "{expr}"),
                (Err(w), Err(g)) => assert!(g.contains(w), "{expr}: error {g:?} should contain {w:?}"),
                _ => panic!("{expr}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn compile_cache_and_driver_prefilter() {
        let engine = CelSelectorEngine::new();
        let a = engine
            .compile(r#"device.driver == "a.com" && device.attributes["a.com"].x"#)
            .unwrap();
        let b = engine
            .compile(r#"device.driver == "a.com" && device.attributes["a.com"].x"#)
            .unwrap();
        assert_eq!(a.id(), b.id());
        assert_eq!(engine.cached_expressions(), 1);
        assert_eq!(a.required_driver(), Some("a.com"));
        let c = engine.compile(r#""b.com" == device.driver"#).unwrap();
        assert_eq!(c.required_driver(), Some("b.com"));
        let d = engine.compile(r#"device.driver == "a.com" || true"#).unwrap();
        assert_eq!(d.required_driver(), None);
        assert_ne!(a.id(), c.id());
    }

    /// A selector that reads only `device.driver` / `device.allowMultipleAllocations` evaluates
    /// on a two-field value without filling the device's slot, and answers exactly what it
    /// answers on the whole value (kept in a slot by an earlier selector), errors included.
    #[test]
    fn scalar_only_selectors_answer_as_on_the_whole_value() {
        let engine = CelSelectorEngine::new();
        let whole = engine
            .compile_cel(r#"device.attributes["gpu.example.com"].model != """#)
            .unwrap();
        assert!(!whole.scalar_only);
        let mut bad = gpu();
        if let Some(attrs) = bad.attributes.as_mut() {
            attrs.insert(
                "bad".into(),
                DeviceAttribute {
                    version: Some("not-a-version".into()),
                    ..Default::default()
                },
            );
        }
        let cases: &[(&str, bool)] = &[
            (r#"device.driver == "gpu.example.com""#, true),
            (
                r#"device.driver.startsWith("gpu") && device.allowMultipleAllocations"#,
                true,
            ),
            (
                r#"has(device.driver) && !has(device.allowMultipleAllocations) || true"#,
                true,
            ),
            ("true", true),
            (r#"[1, 2].all(x, x > 0) && device.driver != "b""#, true),
            (r#"has(device.attributes)"#, false),
            (
                r#"device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("1Gi"))"#,
                false,
            ),
            (r#"cel.bind(d, device, d.driver == "gpu.example.com")"#, false),
            (r#"device == device"#, false),
            (r#"device.nosuch == 1"#, false),
        ];
        for &(expr, scalar) in cases {
            let sel = engine.compile_cel(expr).unwrap();
            assert_eq!(sel.scalar_only, scalar, "{expr}");
            for device in [gpu(), bad.clone()] {
                let maps = DeviceMaps::of(&device);
                let input = |slot| SelectorInput {
                    driver: "gpu.example.com",
                    device: &device,
                    maps: &maps,
                    slot,
                    deadline: None,
                };
                let fresh = DeviceValueSlot::default();
                let got = sel.matches(input(&fresh)).map_err(|e| e.message);
                assert_eq!(fresh.0.get().is_some(), !scalar, "{expr}: slot filled");
                let filled = DeviceValueSlot::default();
                let _ = whole.matches(input(&filled));
                assert!(filled.0.get().is_some());
                let want = sel.matches(input(&filled)).map_err(|e| e.message);
                assert_eq!(got, want, "{expr}");
            }
        }
    }

    #[test]
    fn invalid_version_attribute_is_an_error() {
        let engine = CelSelectorEngine::new();
        let sel = engine.compile("true").unwrap();
        let mut device = gpu();
        if let Some(attrs) = device.attributes.as_mut() {
            attrs.insert(
                "bad".into(),
                DeviceAttribute {
                    version: Some("not-a-version".into()),
                    ..Default::default()
                },
            );
        }
        let slot = DeviceValueSlot::default();
        let err = sel
            .matches(SelectorInput {
                driver: "d",
                device: &device,
                maps: &DeviceMaps::of(&device),
                slot: &slot,
                deadline: None,
            })
            .unwrap_err();
        assert!(err.message.contains("attribute bad"), "{err}");
    }

    /// About 1.2 KB: three nested `.all()` over a literal list of 100 numbers, a million
    /// iterations in the worst case.
    fn nested_all_selector() -> String {
        let list = format!(
            "[{}]",
            (100..200).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
        );
        let expr = format!("{list}.all(a, {list}.all(b, {list}.all(c, a + b + c > 0 && a != 7)))");
        assert!((1100..1300).contains(&expr.len()), "{}", expr.len());
        expr
    }

    fn evaluate(
        sel: &CelSelector,
        deadline: Option<Instant>,
    ) -> (Result<bool, SelectorEvalError>, MeterReport) {
        let device = gpu();
        let slot = DeviceValueSlot::default();
        sel.evaluate(SelectorInput {
            driver: "gpu.example.com",
            device: &device,
            maps: &DeviceMaps::of(&device),
            slot: &slot,
            deadline,
        })
    }

    #[test]
    fn over_budget_selector_is_rejected_at_compile_time() {
        let engine = CelSelectorEngine::new();
        let err = engine.compile(&nested_all_selector()).unwrap_err();
        assert!(err.message.contains("cost budget exceeded"), "{err}");
        assert!(err.message.contains("too complex, exceeds cost limit"), "{err}");
        // Ordinary selectors stay well below the estimate limit.
        assert!(
            engine
                .compile(r#"device.attributes["gpu.example.com"].models.all(m, m != "z")"#)
                .is_ok()
        );
    }

    #[test]
    fn runtime_budget_stops_evaluation_at_the_limit() {
        // Without the compile-time estimate (as upstream's allocator compiles), the runtime
        // budget is what stops the selector.
        let limit = cost::CEL_SELECTOR_EXPRESSION_MAX_COST;
        let engine = CelSelectorEngine::with_limits(CostLimits {
            estimated: None,
            runtime: limit,
        });
        let sel = engine.compile_cel(&nested_all_selector()).unwrap();
        let (result, report) = evaluate(&sel, None);
        let err = result.unwrap_err();
        assert_eq!(err.kind, EvalErrorKind::CostBudget);
        assert!(err.message.contains("cost budget exceeded"), "{err}");
        assert_eq!(report.stopped, Some(MeterStop::Budget));
        // Stopped by the budget: just past the limit (one loop body's units), far from the
        // roughly ten million units the whole evaluation would cost.
        assert!(
            report.spent > limit && report.spent < limit + 100,
            "{}",
            report.spent
        );

        // Error absorption (`error || true`) does not hide the stop.
        let absorbed = engine
            .compile_cel(&format!("{} || true", nested_all_selector()))
            .unwrap();
        let (result, _) = evaluate(&absorbed, None);
        assert_eq!(result.unwrap_err().kind, EvalErrorKind::CostBudget);

        // A cheap selector spends a few units and is not stopped.
        let cheap = engine
            .compile_cel(r#"device.driver == "gpu.example.com""#)
            .unwrap();
        let (result, report) = evaluate(&cheap, None);
        assert_eq!(result, Ok(true));
        assert_eq!(report.stopped, None);
        assert!((1..10).contains(&report.spent), "{}", report.spent);

        // A loop that fits the budget is charged per iteration and completes.
        let small = engine
            .compile_cel("[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(x, x > 0)")
            .unwrap();
        let (result, report) = evaluate(&small, None);
        assert_eq!(result, Ok(true));
        assert!((10..200).contains(&report.spent), "{}", report.spent);
    }

    #[test]
    fn deadline_stops_evaluation_inside_loops() {
        let engine = CelSelectorEngine::with_limits(CostLimits {
            estimated: None,
            runtime: u64::MAX,
        });
        let sel = engine.compile_cel(&nested_all_selector()).unwrap();
        let (result, report) = evaluate(&sel, Some(Instant::now()));
        let err = result.unwrap_err();
        assert_eq!(err.kind, EvalErrorKind::Deadline);
        assert_eq!(report.stopped, Some(MeterStop::Deadline));
        // Stopped within the first deadline check, not after the million iterations.
        assert!(report.spent < 1_000, "{}", report.spent);
    }
}

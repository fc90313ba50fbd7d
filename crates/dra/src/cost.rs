//! CEL cost limits for device selectors: a worst-case estimate at compile time and a metered
//! budget (plus the Filter deadline) during evaluation.
//!
//! Kubernetes bounds the work of one selector in two places, both with the same constant,
//! `resource.k8s.io/v1` `CELSelectorExpressionMaxCost` (1,000,000 cost units):
//!
//! * the API server rejects a selector whose *estimated* worst-case cost exceeds it ("too complex,
//!   exceeds cost limit");
//! * the allocator gives every evaluation a *runtime* budget of that many units and turns an
//!   exhausted budget into a CEL runtime error for the scheduling attempt.
//!
//! cel-rust has neither, so this module supplies both over the crate's public AST:
//!
//! * [`estimate`] walks the parsed expression with cel-go's kind of size bounds (a device has at
//!   most 32 attributes per domain, a list attribute at most 48 values, a string at most 64
//!   characters, a literal list has the length it is written with) and multiplies the cost of a
//!   comprehension body by the size of the range it iterates. The units are ours, not cel-go's
//!   exact figures: roughly one unit per operation, plus a tenth of the length of the strings
//!   and lists an operation has to walk.
//! * [`instrument`] rewrites every comprehension (`all`, `exists`, `map`, `filter`, …) so that
//!   each iteration first calls a meter function charging the static cost of one iteration;
//!   [`metered`] runs an evaluation with a budget and an optional deadline in a thread-local
//!   meter. Once the budget or the deadline is gone, the meter fails every further iteration, so
//!   the interpreter unwinds at once, and the outcome is reported even when CEL's error
//!   absorption (`error || true`) would have hidden the failure.
//!
//! The interpreter is synchronous, so a thread-local meter belongs to exactly one evaluation at a
//! time; [`metered`] restores whatever meter was installed before it.
//!
//! Estimates use saturating arithmetic on purpose: they are upper bounds compared against a
//! limit, and "more than `u64::MAX`" is just as over the limit.

use std::cell::Cell;
use std::time::Instant;

use kube_cel::cel::ExecutionError;
use kube_cel::cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue, operators};

/// Upstream `CELSelectorExpressionMaxCost`: the estimated-cost limit of the API server and the
/// runtime budget of every selector evaluation in the allocator.
pub const CEL_SELECTOR_EXPRESSION_MAX_COST: u64 = 1_000_000;

/// Name of the meter function [`instrument`] inserts (not a valid CEL identifier, so no user
/// expression can call or shadow it).
pub const METER_FUNCTION: &str = "@unisched_cost";

/// Size bounds of the device-selector environment (upstream API validation limits).
const MAX_ATTRIBUTES: u64 = 32;
const MAX_LIST_VALUES: u64 = 48;
const MAX_STRING_LEN: u64 = 64;
const MAX_DRIVER_NAME_LEN: u64 = 63;

/// The deadline is looked at every this many meter calls (reading the clock costs more than one
/// iteration of a small loop body).
const DEADLINE_CHECK_INTERVAL: u32 = 16;

/// Which limits apply to selectors compiled by an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostLimits {
    /// Reject at compile time an expression whose estimated worst-case cost is higher (`None`:
    /// do not estimate).
    pub estimated: Option<u64>,
    /// Stop an evaluation that has spent more units than this.
    pub runtime: u64,
}

impl Default for CostLimits {
    fn default() -> Self {
        CostLimits {
            estimated: Some(CEL_SELECTOR_EXPRESSION_MAX_COST),
            runtime: CEL_SELECTOR_EXPRESSION_MAX_COST,
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Compile time: worst-case estimate
// ------------------------------------------------------------------------------------------------

/// Worst-case cost and sizes of one sub-expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CostEstimate {
    cost: u64,
    /// Length of the value if it is a string, list or map; 1 otherwise.
    size: u64,
    /// Size bound of the value's elements (lists, maps).
    elem: u64,
}

impl CostEstimate {
    fn scalar(cost: u64) -> Self {
        CostEstimate {
            cost,
            size: 1,
            elem: 1,
        }
    }
}

/// How far a sub-expression is down the `device` value, for its size bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Device,
    /// `device.attributes` / `device.capacity`: domains.
    Domains,
    /// `device.attributes[d]`: attributes of one domain.
    Domain,
    Other,
}

type EstimateScope = Vec<(String, CostEstimate)>;

/// The estimated worst-case cost of a parsed (not yet rewritten) selector.
pub fn estimate(expr: &IdedExpr) -> u64 {
    let mut scope = EstimateScope::new();
    Estimator.estimate(expr, &mut scope).cost
}

struct Estimator;

impl Estimator {
    fn path(expr: &IdedExpr, scope: &EstimateScope) -> Path {
        match &expr.expr {
            Expr::Ident(n) if n == "device" && !scope.iter().any(|(s, _)| s == n) => Path::Device,
            Expr::Select(s) if !s.test => Self::step(Self::path(&s.operand, scope), &s.field),
            Expr::Call(c) if c.func_name == operators::INDEX && c.args.len() == 2 && c.target.is_none() => {
                match Self::path(&c.args[0], scope) {
                    Path::Domains => Path::Domain,
                    _ => Path::Other,
                }
            }
            _ => Path::Other,
        }
    }

    fn step(parent: Path, field: &str) -> Path {
        match (parent, field) {
            (Path::Device, "attributes" | "capacity") => Path::Domains,
            (Path::Domains, _) => Path::Domain,
            _ => Path::Other,
        }
    }

    /// Size bounds of a value selected from something at `parent`.
    fn selected(parent: Path, field: Option<&str>, operand: CostEstimate) -> (u64, u64) {
        match (parent, field) {
            (Path::Device, Some("attributes" | "capacity")) => (MAX_ATTRIBUTES, MAX_ATTRIBUTES),
            (Path::Device, Some("driver")) => (MAX_DRIVER_NAME_LEN, 1),
            (Path::Device, _) => (1, 1),
            (Path::Domains, _) => (MAX_ATTRIBUTES, MAX_LIST_VALUES.max(MAX_STRING_LEN)),
            (Path::Domain, _) => (MAX_LIST_VALUES.max(MAX_STRING_LEN), MAX_STRING_LEN),
            (Path::Other, _) => (operand.elem, MAX_STRING_LEN.max(operand.elem)),
        }
    }

    fn estimate(&self, expr: &IdedExpr, scope: &mut EstimateScope) -> CostEstimate {
        match &expr.expr {
            Expr::Literal(LiteralValue::String(s)) => CostEstimate {
                cost: 0,
                size: s.inner().len() as u64,
                elem: 1,
            },
            Expr::Literal(LiteralValue::Bytes(b)) => CostEstimate {
                cost: 0,
                size: b.len() as u64,
                elem: 1,
            },
            Expr::Literal(_) | Expr::Unspecified => CostEstimate::scalar(0),
            Expr::Ident(name) => match scope.iter().rev().find(|(n, _)| n == name) {
                Some((_, e)) => CostEstimate { cost: 1, ..*e },
                None => CostEstimate::scalar(1),
            },
            Expr::Select(s) => {
                let operand = self.estimate(&s.operand, scope);
                let cost = operand.cost.saturating_add(1);
                if s.test {
                    return CostEstimate::scalar(cost);
                }
                let (size, elem) = Self::selected(Self::path(&s.operand, scope), Some(&s.field), operand);
                CostEstimate { cost, size, elem }
            }
            Expr::List(l) => {
                let mut out = CostEstimate {
                    cost: 1,
                    size: l.elements.len() as u64,
                    elem: 1,
                };
                for e in &l.elements {
                    let e = self.estimate(e, scope);
                    out.cost = out.cost.saturating_add(e.cost);
                    out.elem = out.elem.max(e.size);
                }
                out
            }
            Expr::Map(m) => {
                let mut out = CostEstimate {
                    cost: 1,
                    size: m.entries.len() as u64,
                    elem: 1,
                };
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(e) = &entry.expr {
                        let k = self.estimate(&e.key, scope);
                        let v = self.estimate(&e.value, scope);
                        out.cost = out.cost.saturating_add(k.cost).saturating_add(v.cost);
                        out.elem = out.elem.max(v.size);
                    }
                }
                out
            }
            Expr::Struct(s) => {
                let mut cost = 1u64;
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        cost = cost.saturating_add(self.estimate(&f.value, scope).cost);
                    }
                }
                CostEstimate::scalar(cost)
            }
            Expr::Comprehension(c) => {
                let range = self.estimate(&c.iter_range, scope);
                let init = self.estimate(&c.accu_init, scope);
                let depth = scope.len();
                let item = CostEstimate {
                    cost: 0,
                    size: range.elem,
                    elem: MAX_STRING_LEN.max(range.elem),
                };
                scope.push((c.iter_var.clone(), item));
                if let Some(v2) = &c.iter_var2 {
                    scope.push((v2.clone(), item));
                }
                // A map/filter accumulator grows by (at most) one element per iteration.
                let accu = CostEstimate {
                    cost: 0,
                    size: init.size.max(range.size),
                    elem: init.elem.max(range.elem),
                };
                scope.push((c.accu_var.clone(), accu));
                let cond = self.estimate(&c.loop_cond, scope);
                let step = self.estimate(&c.loop_step, scope);
                let result = self.estimate(&c.result, scope);
                scope.truncate(depth);
                let per_iteration = cond.cost.saturating_add(step.cost).saturating_add(1);
                CostEstimate {
                    cost: range
                        .cost
                        .saturating_add(init.cost)
                        .saturating_add(range.size.saturating_mul(per_iteration))
                        .saturating_add(result.cost),
                    ..result
                }
            }
            Expr::Call(call) => self.call(call, scope),
        }
    }

    fn call(&self, call: &CallExpr, scope: &mut EstimateScope) -> CostEstimate {
        // cel.bind(name, init, body): the body once, with `name` bound to init's sizes.
        if call.func_name == "bind"
            && call.args.len() == 3
            && matches!(call.target.as_deref(), Some(IdedExpr { expr: Expr::Ident(t), .. }) if t == "cel")
            && let Expr::Ident(name) = &call.args[0].expr
        {
            let init = self.estimate(&call.args[1], scope);
            scope.push((name.clone(), CostEstimate { cost: 0, ..init }));
            let body = self.estimate(&call.args[2], scope);
            scope.pop();
            return CostEstimate {
                cost: init.cost.saturating_add(body.cost),
                ..body
            };
        }
        let target = call.target.as_deref().map(|t| self.estimate(t, scope));
        let args: Vec<CostEstimate> = call.args.iter().map(|a| self.estimate(a, scope)).collect();
        let operands = || target.iter().chain(args.iter());
        let sub_cost = operands().fold(1u64, |acc, e| acc.saturating_add(e.cost));
        let max_size = operands().map(|e| e.size).max().unwrap_or(1);
        let max_elem = operands().map(|e| e.elem).max().unwrap_or(1);
        let total_size = operands().fold(0u64, |acc, e| acc.saturating_add(e.size));
        let tenth = |n: u64| n.div_ceil(10);
        match call.func_name.as_str() {
            operators::INDEX if args.len() == 2 => {
                let parent = match Self::path(&call.args[0], scope) {
                    Path::Device => Path::Other,
                    p => p,
                };
                let (size, elem) = Self::selected(parent, None, args[0]);
                CostEstimate {
                    cost: sub_cost,
                    size,
                    elem,
                }
            }
            operators::ADD => CostEstimate {
                cost: sub_cost.saturating_add(tenth(total_size)),
                size: total_size,
                elem: max_elem,
            },
            operators::IN => CostEstimate::scalar(sub_cost.saturating_add(args.get(1).map_or(1, |a| a.size))),
            operators::EQUALS
            | operators::NOT_EQUALS
            | operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS => CostEstimate::scalar(sub_cost.saturating_add(tenth(max_size))),
            operators::CONDITIONAL => CostEstimate {
                cost: sub_cost,
                size: max_size,
                elem: max_elem,
            },
            "size" | "isSorted" => CostEstimate::scalar(sub_cost),
            "includes" | "sum" | "min" | "max" | "indexOf" | "lastIndexOf" | "distinct" | "sort"
            | "flatten" | "reverse" | "slice" | "contains" | "startsWith" | "endsWith" | "matches"
            | "find" | "findAll" | "lowerAscii" | "upperAscii" | "trim" | "replace" | "split"
            | "substring" | "join" | "format" | "charAt" | "quantity" | "semver" | "isSemver"
            | "isQuantity" => {
                let walked = if call.func_name == "flatten" || call.func_name == "join" {
                    total_size.saturating_mul(max_elem)
                } else {
                    total_size
                };
                CostEstimate {
                    cost: sub_cost.saturating_add(tenth(walked).max(1)),
                    size: walked.max(1),
                    elem: max_elem.max(max_size),
                }
            }
            _ => CostEstimate {
                cost: sub_cost,
                size: max_size,
                elem: max_elem,
            },
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Run time: instrumentation and the meter
// ------------------------------------------------------------------------------------------------

/// Units charged once per evaluation: the operations outside any comprehension body.
pub fn static_cost(expr: &IdedExpr) -> u64 {
    let own = match &expr.expr {
        Expr::Literal(_) | Expr::Unspecified => 0,
        _ => 1,
    };
    let mut total: u64 = own;
    match &expr.expr {
        Expr::Comprehension(c) => {
            for e in [&c.iter_range, &c.accu_init, &c.result] {
                total = total.saturating_add(static_cost(e));
            }
        }
        Expr::Call(call) => {
            for e in call.target.iter().map(|t| &**t).chain(call.args.iter()) {
                total = total.saturating_add(static_cost(e));
            }
        }
        Expr::List(l) => {
            for e in &l.elements {
                total = total.saturating_add(static_cost(e));
            }
        }
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(e) = &entry.expr {
                    total = total
                        .saturating_add(static_cost(&e.key))
                        .saturating_add(static_cost(&e.value));
                }
            }
        }
        Expr::Select(s) => total = total.saturating_add(static_cost(&s.operand)),
        Expr::Struct(_) | Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
    total
}

/// Inserts the meter call into the loop condition of every comprehension that iterates
/// (`cel.bind` comprehensions over the empty list never do). `next_id` hands out node ids.
pub fn instrument(expr: IdedExpr, next_id: &mut u64) -> IdedExpr {
    let mut fresh = |e: Expr| {
        let id = *next_id;
        *next_id += 1;
        IdedExpr { id, expr: e }
    };
    instrument_with(expr, &mut fresh)
}

fn instrument_with(expr: IdedExpr, fresh: &mut dyn FnMut(Expr) -> IdedExpr) -> IdedExpr {
    let id = expr.id;
    let out = match expr.expr {
        Expr::Comprehension(c) => {
            let mut c = *c;
            c.iter_range = instrument_with(c.iter_range, fresh);
            c.accu_init = instrument_with(c.accu_init, fresh);
            c.loop_step = instrument_with(c.loop_step, fresh);
            c.result = instrument_with(c.result, fresh);
            let cond = instrument_with(c.loop_cond, fresh);
            let never_iterates = matches!(&c.iter_range.expr, Expr::List(l) if l.elements.is_empty());
            c.loop_cond = if never_iterates {
                cond
            } else {
                let units = static_cost(&cond)
                    .saturating_add(static_cost(&c.loop_step))
                    .max(1);
                let units = fresh(Expr::Literal(LiteralValue::Int(
                    i64::try_from(units).unwrap_or(i64::MAX).into(),
                )));
                let meter = fresh(Expr::Call(CallExpr {
                    func_name: METER_FUNCTION.to_string(),
                    target: None,
                    args: vec![units],
                }));
                fresh(Expr::Call(CallExpr {
                    func_name: operators::LOGICAL_AND.to_string(),
                    target: None,
                    args: vec![meter, cond],
                }))
            };
            Expr::Comprehension(Box::new(c))
        }
        Expr::Call(mut call) => {
            call.target = call.target.map(|t| Box::new(instrument_with(*t, fresh)));
            call.args = call.args.into_iter().map(|a| instrument_with(a, fresh)).collect();
            Expr::Call(call)
        }
        Expr::List(mut l) => {
            l.elements = l
                .elements
                .into_iter()
                .map(|e| instrument_with(e, fresh))
                .collect();
            Expr::List(l)
        }
        Expr::Map(mut m) => {
            for entry in &mut m.entries {
                if let EntryExpr::MapEntry(e) = &mut entry.expr {
                    let key = std::mem::take(&mut e.key);
                    let value = std::mem::take(&mut e.value);
                    e.key = instrument_with(key, fresh);
                    e.value = instrument_with(value, fresh);
                }
            }
            Expr::Map(m)
        }
        Expr::Select(mut s) => {
            s.operand = Box::new(instrument_with(*s.operand, fresh));
            Expr::Select(s)
        }
        other => other,
    };
    IdedExpr { id, expr: out }
}

/// Why a metered evaluation was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MeterStop {
    /// The runtime cost budget is spent.
    Budget,
    /// The deadline (DynamicResources `filterTimeout`) passed.
    Deadline,
}

/// What one metered evaluation spent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeterReport {
    /// Units charged (static cost plus per-iteration charges) until the evaluation ended.
    pub spent: u64,
    /// Set when the evaluation was stopped.
    pub stopped: Option<MeterStop>,
}

#[derive(Clone, Copy, Debug)]
struct Meter {
    limit: u64,
    spent: u64,
    calls: u32,
    deadline: Option<Instant>,
    stopped: Option<MeterStop>,
}

thread_local! {
    static METER: Cell<Option<Meter>> = const { Cell::new(None) };
}

/// Puts the previous meter back when an evaluation ends (also when it unwinds).
struct Restore(Option<Meter>);

impl Drop for Restore {
    fn drop(&mut self) {
        METER.with(|m| m.set(self.0));
    }
}

/// Runs `f` (one evaluation) with a budget of `limit` units, of which `initial` are charged
/// up front, and an optional deadline.
pub fn metered<R>(
    limit: u64,
    initial: u64,
    deadline: Option<Instant>,
    f: impl FnOnce() -> R,
) -> (R, MeterReport) {
    let stopped = (initial > limit).then_some(MeterStop::Budget);
    let meter = Meter {
        limit,
        spent: initial,
        calls: 0,
        deadline,
        stopped,
    };
    let restore = Restore(METER.with(|m| m.replace(Some(meter))));
    let out = f();
    let report = METER.with(|m| m.get()).map_or(
        MeterReport {
            spent: initial,
            stopped,
        },
        |m| MeterReport {
            spent: m.spent,
            stopped: m.stopped,
        },
    );
    drop(restore);
    (out, report)
}

/// The meter function: charges one iteration, fails once the budget or the deadline is gone.
pub fn meter_call(units: i64) -> Result<bool, ExecutionError> {
    let Some(mut m) = METER.with(|m| m.get()) else {
        return Ok(true);
    };
    if m.stopped.is_none() {
        m.spent = m.spent.saturating_add(u64::try_from(units).unwrap_or(0));
        m.calls = m.calls.wrapping_add(1);
        if m.spent > m.limit {
            m.stopped = Some(MeterStop::Budget);
        } else if m.calls.is_multiple_of(DEADLINE_CHECK_INTERVAL)
            && m.deadline.is_some_and(|d| Instant::now() >= d)
        {
            m.stopped = Some(MeterStop::Deadline);
        }
        METER.with(|cell| cell.set(Some(m)));
    }
    match m.stopped {
        None => Ok(true),
        Some(MeterStop::Budget) => Err(ExecutionError::function_error(
            METER_FUNCTION,
            "cost budget exceeded",
        )),
        Some(MeterStop::Deadline) => Err(ExecutionError::function_error(
            METER_FUNCTION,
            "deadline exceeded",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_cel::cel::parser::Parser;

    fn est(src: &str) -> u64 {
        estimate(&Parser::new().parse(src).unwrap_or_default())
    }

    #[test]
    fn estimator_table() {
        // (expression, lower bound, upper bound) of the estimate.
        let long: String = format!(
            "[{}]",
            (0..100).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
        );
        let nested3 = format!("{long}.all(a, {long}.all(b, {long}.all(c, a + b + c > 0)))");
        let cases: Vec<(String, u64, u64)> = vec![
            ("true".into(), 0, 0),
            (r#"device.driver == "gpu.example.com""#.into(), 2, 20),
            (
                r#"device.attributes["gpu.example.com"].model == "a100" && device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0"#.into(),
                5,
                60,
            ),
            // A list attribute has at most 48 values: one loop is cheap.
            (
                r#"device.attributes["d"].models.exists(m, m == "x")"#.into(),
                48,
                2_000,
            ),
            // Two nested loops over list attributes: 48 × 48 iterations.
            (
                r#"device.attributes["d"].a.all(x, device.attributes["d"].b.all(y, x != y))"#.into(),
                48 * 48,
                100_000,
            ),
            // A literal of 100 elements, three levels deep: a million iterations and more.
            (nested3.clone(), CEL_SELECTOR_EXPRESSION_MAX_COST, u64::MAX),
            // cel.bind counts the body once.
            ("cel.bind(x, [1, 2, 3], x.all(i, i > 0))".into(), 3, 100),
            // Growing strings are charged by length.
            (
                r#"cel.bind(a, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", cel.bind(b, a + a + a + a, b + b + b + b == a))"#.into(),
                20,
                1_000,
            ),
        ];
        for (src, lo, hi) in &cases {
            let got = est(src);
            assert!(
                (*lo..=*hi).contains(&got),
                "{src}: estimate {got} not in {lo}..={hi}"
            );
        }
        // Monotone in the nesting depth.
        let one = est(&format!("{long}.all(a, a > 0)"));
        let two = est(&format!("{long}.all(a, {long}.all(b, a + b > 0))"));
        assert!(one < two && two < est(&nested3), "{one} {two}");
    }

    #[test]
    fn meter_stops_at_budget_and_restores_previous() {
        let (calls, report) = metered(10, 4, None, || {
            let mut n = 0;
            while meter_call(3).is_ok() {
                n += 1;
            }
            // Once stopped, it stays stopped.
            assert!(meter_call(1).is_err());
            n
        });
        // 4 + 3 + 3 = 10 is within the budget, the third call goes over.
        assert_eq!(calls, 2);
        assert_eq!(report.stopped, Some(MeterStop::Budget));
        assert_eq!(report.spent, 13);
        // Outside a metered evaluation the meter does not limit anything.
        assert_eq!(meter_call(i64::MAX).ok(), Some(true));
    }

    #[test]
    fn meter_stops_at_deadline() {
        let past = Instant::now();
        let (calls, report) = metered(u64::MAX, 0, Some(past), || {
            let mut n = 0u32;
            while meter_call(1).is_ok() {
                n += 1;
            }
            n
        });
        assert_eq!(calls, DEADLINE_CHECK_INTERVAL - 1);
        assert_eq!(report.stopped, Some(MeterStop::Deadline));
    }
}

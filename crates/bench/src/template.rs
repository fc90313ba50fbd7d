//! Object templates: YAML text with `{{ … }}` placeholders, rendered per object and then parsed.
//!
//! Rendering happens on the text before YAML parsing (as upstream's Go templates do), so
//! `int: {{.Index}}` yields a number and `name: node-{{.Index}}` a string. A placeholder is a
//! variable (`.Index`, `.Node`, …) optionally followed by integer operations evaluated left to
//! right without precedence: `{{.I % 2 * 2 + 1}}` is `((I % 2) * 2) + 1`. `{{DivideInt .a .b}}`
//! is `.a / .b`, the spelling of upstream's templates, so theirs read the same here. An op's
//! `templateParams` become integer variables of its templates. Text without any placeholder is
//! parsed once and cloned.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::BenchError;

/// A variable's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Var {
    /// An integer (arithmetic allowed).
    Int(i64),
    /// A string (substituted as is).
    Str(String),
}

/// Variables for one rendering.
#[derive(Clone, Debug, Default)]
pub struct Vars(BTreeMap<String, Var>);

impl Vars {
    /// No variables.
    pub fn new() -> Self {
        Vars::default()
    }

    /// Adds an integer variable.
    #[must_use]
    pub fn int(mut self, name: &'static str, v: usize) -> Self {
        self.0
            .insert(name.to_string(), Var::Int(i64::try_from(v).unwrap_or(i64::MAX)));
        self
    }

    /// Adds integer variables by name (an op's `templateParams`).
    #[must_use]
    pub fn params(mut self, params: &BTreeMap<String, i64>) -> Self {
        for (name, v) in params {
            self.0.insert(name.clone(), Var::Int(*v));
        }
        self
    }

    /// Adds a string variable.
    #[must_use]
    pub fn str(mut self, name: &'static str, v: &str) -> Self {
        self.0.insert(name.to_string(), Var::Str(v.to_string()));
        self
    }
}

/// A parsed template file.
#[derive(Clone, Debug)]
pub struct Template {
    path: String,
    text: String,
    /// Parsed once when the text has no placeholder.
    fixed: Option<Value>,
}

impl Template {
    /// Parses `text` (from `path`, for messages). Text without placeholders must be valid YAML now.
    pub fn new(path: &str, text: &str) -> Result<Self, BenchError> {
        let fixed = if text.contains("{{") {
            None
        } else {
            Some(parse_yaml(path, text)?)
        };
        Ok(Template {
            path: path.to_string(),
            text: text.to_string(),
            fixed,
        })
    }

    /// The file this template came from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether rendering depends on variables.
    pub fn is_fixed(&self) -> bool {
        self.fixed.is_some()
    }

    /// Renders with `vars` and parses the result.
    pub fn render(&self, vars: &Vars) -> Result<Value, BenchError> {
        if let Some(v) = &self.fixed {
            return Ok(v.clone());
        }
        let text = substitute(&self.path, &self.text, vars)?;
        parse_yaml(&self.path, &text)
    }
}

fn parse_yaml(path: &str, text: &str) -> Result<Value, BenchError> {
    serde_yaml::from_str::<Value>(text).map_err(|e| BenchError::Workload(format!("{path}: {e}")))
}

/// Replaces every `{{ expr }}` in `text`.
pub fn substitute(path: &str, text: &str, vars: &Vars) -> Result<String, BenchError> {
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(BenchError::Workload(format!("{path}: unterminated '{{{{'")));
        };
        let expr = &after[..end];
        match eval(expr, vars) {
            Ok(Var::Int(i)) => out.push_str(&i.to_string()),
            Ok(Var::Str(s)) => out.push_str(&s),
            Err(e) => return Err(BenchError::Workload(format!("{path}: {{{{{expr}}}}}: {e}"))),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Why a `{{ expr }}` placeholder could not be evaluated.
#[derive(Debug, thiserror::Error)]
enum ExpressionError {
    /// The placeholder holds nothing.
    #[error("empty placeholder")]
    Empty,
    /// A `.name` the template's variables do not have.
    #[error("unknown variable .{name} (known: {known})")]
    UnknownVariable {
        /// The variable's name.
        name: String,
        /// The known variables, `.a, .b`.
        known: String,
    },
    /// An operand that is neither `.name` nor an integer.
    #[error("expected a variable or an integer, got {0:?}")]
    BadOperand(String),
    /// An operator at the end of the expression.
    #[error("operator {0} needs an operand")]
    MissingOperand(String),
    /// Arithmetic on a string.
    #[error("operator {0} needs integers")]
    NotIntegers(String),
    /// `/` or `%` by zero.
    #[error("division by zero")]
    DivisionByZero,
    /// A function given more operands than it takes.
    #[error("{0} takes two operands")]
    TrailingOperand(String),
    /// An operator other than `+ - * / %`.
    #[error("unknown operator {0:?} (use + - * / %)")]
    UnknownOperator(String),
}

fn operand(tok: &str, vars: &Vars) -> Result<Var, ExpressionError> {
    if let Some(name) = tok.strip_prefix('.') {
        return vars
            .0
            .get(name)
            .cloned()
            .ok_or_else(|| ExpressionError::UnknownVariable {
                name: name.to_string(),
                known: known(vars),
            });
    }
    tok.parse::<i64>()
        .map(Var::Int)
        .map_err(|_| ExpressionError::BadOperand(tok.to_string()))
}

fn known(vars: &Vars) -> String {
    vars.0
        .keys()
        .map(|k| format!(".{k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn eval(expr: &str, vars: &Vars) -> Result<Var, ExpressionError> {
    let mut toks = expr.split_whitespace();
    let first = toks.next().ok_or(ExpressionError::Empty)?;
    if first == "DivideInt" {
        return divide_int(toks, vars);
    }
    let mut acc = operand(first, vars)?;
    while let Some(op) = toks.next() {
        let rhs = toks
            .next()
            .ok_or_else(|| ExpressionError::MissingOperand(op.to_string()))?;
        let (Var::Int(a), Var::Int(b)) = (&acc, operand(rhs, vars)?) else {
            return Err(ExpressionError::NotIntegers(op.to_string()));
        };
        let a = *a;
        acc = Var::Int(match op {
            "+" => a.saturating_add(b),
            "-" => a.saturating_sub(b),
            "*" => a.saturating_mul(b),
            "/" if b != 0 => a / b,
            "%" if b != 0 => a % b,
            "/" | "%" => return Err(ExpressionError::DivisionByZero),
            other => return Err(ExpressionError::UnknownOperator(other.to_string())),
        });
    }
    Ok(acc)
}

/// `DivideInt a b`: integer division, exactly two operands.
fn divide_int<'a>(mut toks: impl Iterator<Item = &'a str>, vars: &Vars) -> Result<Var, ExpressionError> {
    let mut next = || {
        toks.next()
            .ok_or_else(|| ExpressionError::MissingOperand("DivideInt".into()))
            .and_then(|t| operand(t, vars))
    };
    let (Var::Int(a), Var::Int(b)) = (next()?, next()?) else {
        return Err(ExpressionError::NotIntegers("DivideInt".into()));
    };
    if toks.next().is_some() {
        return Err(ExpressionError::TrailingOperand("DivideInt".into()));
    }
    if b == 0 {
        return Err(ExpressionError::DivisionByZero);
    }
    Ok(Var::Int(a / b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_numbers_and_strings() {
        let v = Vars::new().int("I", 5).str("Node", "n-1");
        let s = substitute("t", "a: {{.I % 2 * 2 + 1}}\nb: x-{{.Node}}-{{ .I }}\n", &v).unwrap();
        assert_eq!(s, "a: 3\nb: x-n-1-5\n");
        let t = Template::new("t", "n: {{.I / 2}}").unwrap();
        assert_eq!(t.render(&v).unwrap(), serde_json::json!({"n": 2}));
        assert!(substitute("t", "{{.Nope}}", &v).is_err());
        assert!(substitute("t", "{{.I / 0}}", &v).is_err());
        assert!(substitute("t", "{{.I", &v).is_err());
        let fixed = Template::new("f", "a: 1").unwrap();
        assert!(fixed.is_fixed());
    }

    #[test]
    fn divide_int_and_template_params() {
        let params = BTreeMap::from([("podsPerGroup".to_string(), 3)]);
        let v = Vars::new().int("Index", 7).params(&params);
        let s = substitute(
            "t",
            "g-{{DivideInt .Index .podsPerGroup}} m: {{.podsPerGroup}}",
            &v,
        )
        .unwrap();
        assert_eq!(s, "g-2 m: 3");
        assert!(substitute("t", "{{DivideInt .Index}}", &v).is_err());
        assert!(substitute("t", "{{DivideInt .Index 0}}", &v).is_err());
        assert!(substitute("t", "{{DivideInt .Index 2 3}}", &v).is_err());
    }
}

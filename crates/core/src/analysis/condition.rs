//! Argo's success and failure conditions: expr-lang expressions with Argo's helpers, compiled
//! once, bounded in size, and evaluated so that no input can crash the process.
//!
//! expr-lang is the language Argo Rollouts uses; the `expr-lang` crate implements it with three
//! traps this wrapper closes (measured in `shared/reference/expr-lang.md`):
//! - a non-boolean result is returned as a value: we require a bool, as Argo does;
//! - an unknown variable is reported only when its branch runs (`result > 0.5 || foo > 1` is
//!   silently true): we scan identifiers at compile time, so lint catches the typo;
//! - long operator chains and deep brackets overflow the stack and abort the process: we cap the
//!   expression's length, depth and operator count, and evaluate with a red zone sized by the
//!   condition's depth and operators: the largest shapes on a stack at least 8 MiB deep, a usual
//!   condition on the caller's own stack (no stack mapped per measurement).

use std::sync::OnceLock;

use expr::{Context, ContextProvider, Environment, Program, Value};
use serde::{Deserialize, Serialize};

/// Longest condition accepted, in bytes.
pub const MAX_CONDITION_BYTES: usize = 4096;
/// Deepest bracket nesting accepted.
pub const MAX_CONDITION_DEPTH: usize = 64;
/// Most operators accepted in one condition.
pub const MAX_CONDITION_OPERATORS: usize = 200;

/// Stack the evaluation runs on when the caller's remaining stack is smaller than the red zone.
const EVAL_STACK_BYTES: usize = 8 * 1024 * 1024;
const EVAL_RED_ZONE_BYTES: usize = 6 * 1024 * 1024;
/// The red zone of a condition: this much, and this much per bracket level and operator (the
/// largest shapes reach [`EVAL_RED_ZONE_BYTES`]).
const RED_ZONE_BASE_BYTES: usize = 128 * 1024;
const RED_ZONE_PER_UNIT_BYTES: usize = 32 * 1024;

/// The variables a condition may read.
const VARIABLES: &[&str] = &["result", "baseline"];

/// Argo's helpers, registered on top of expr's builtins.
const ARGO_FUNCTIONS: &[&str] = &["asInt", "asFloat", "isNaN", "isInf", "isNil", "default"];

/// expr-lang's builtin functions (as registered by the `expr-lang` crate).
const EXPR_FUNCTIONS: &[&str] = &[
    "abs",
    "add",
    "all",
    "any",
    "bitand",
    "bitnand",
    "bitnot",
    "bitor",
    "bitshl",
    "bitshr",
    "bitushr",
    "bitxor",
    "ceil",
    "concat",
    "count",
    "filter",
    "find",
    "findIndex",
    "findLast",
    "findLastIndex",
    "first",
    "flatten",
    "float",
    "floor",
    "fromJSON",
    "fromPairs",
    "get",
    "groupBy",
    "hasPrefix",
    "hasSuffix",
    "indexOf",
    "int",
    "join",
    "keys",
    "last",
    "lastIndexOf",
    "len",
    "lower",
    "map",
    "max",
    "mean",
    "median",
    "min",
    "none",
    "one",
    "reduce",
    "repeat",
    "replace",
    "reverse",
    "round",
    "sort",
    "sortBy",
    "split",
    "splitAfter",
    "string",
    "sum",
    "take",
    "toJSON",
    "toPairs",
    "trim",
    "trimPrefix",
    "trimSuffix",
    "type",
    "uniq",
    "upper",
    "values",
];

/// Words of the language that are not identifiers.
const KEYWORDS: &[&str] = &[
    "true",
    "false",
    "nil",
    "and",
    "or",
    "not",
    "in",
    "matches",
    "contains",
    "startsWith",
    "endsWith",
    "let",
];

/// A metric's result as a condition sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum MetricResult {
    /// No result at all (Argo's nil: a provider with no data).
    Nil,
    /// A single number (Prometheus scalar; `"NaN"`/`"+Inf"` become NaN/∞).
    Scalar(f64),
    /// A list of numbers (Prometheus vector or flattened matrix; possibly empty).
    Vector(Vec<f64>),
    /// Any other JSON value (as the web provider returns it).
    Json(serde_json::Value),
}

impl MetricResult {
    /// Whether the result is evidence: a non-empty, non-NaN value.
    pub fn is_evidence(&self) -> bool {
        match self {
            MetricResult::Nil => false,
            MetricResult::Scalar(v) => !v.is_nan(),
            MetricResult::Vector(values) => {
                !values.is_empty() && values.iter().all(|v| !v.is_nan())
            }
            MetricResult::Json(value) => match value {
                serde_json::Value::Null => false,
                serde_json::Value::Array(a) => !a.is_empty(),
                serde_json::Value::Object(o) => !o.is_empty(),
                serde_json::Value::String(s) => !s.is_empty(),
                _ => true,
            },
        }
    }

    /// The value as Argo stores it in a measurement: `"0.97"`, `"[0.97,0.5]"`, `"NaN"`, `""`.
    pub fn to_argo_string(&self) -> String {
        match self {
            MetricResult::Nil => String::new(),
            MetricResult::Scalar(v) => format_float(*v),
            MetricResult::Vector(values) => {
                // One buffer: this runs once per measurement.
                let mut text = String::with_capacity(2 + values.len() * 8);
                text.push('[');
                for (i, v) in values.iter().enumerate() {
                    if i > 0 {
                        text.push(',');
                    }
                    push_float(&mut text, *v);
                }
                text.push(']');
                text
            }
            MetricResult::Json(value) => match value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            },
        }
    }

    fn to_expr(&self) -> Value {
        match self {
            MetricResult::Nil => Value::Nil,
            MetricResult::Scalar(v) => Value::Float(*v),
            MetricResult::Vector(values) => {
                Value::Array(values.iter().map(|v| Value::Float(*v)).collect())
            }
            MetricResult::Json(value) => json_to_expr(value),
        }
    }
}

/// A fixed threshold a condition compares the result with: `result <op> value`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    /// The comparison, the result on its left: `>`, `>=`, `<`, `<=`, `==` or `!=`.
    pub op: Comparison,
    /// The number.
    pub value: f64,
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Comparison {
    /// `>`
    #[serde(rename = ">")]
    Greater,
    /// `>=`
    #[serde(rename = ">=")]
    GreaterOrEqual,
    /// `<`
    #[serde(rename = "<")]
    Less,
    /// `<=`
    #[serde(rename = "<=")]
    LessOrEqual,
    /// `==`
    #[serde(rename = "==")]
    Equal,
    /// `!=`
    #[serde(rename = "!=")]
    NotEqual,
}

impl Comparison {
    fn parse(text: &str) -> Option<(Comparison, usize)> {
        let two = text.get(..2);
        Some(match (two, text.chars().next()?) {
            (Some(">="), _) => (Comparison::GreaterOrEqual, 2),
            (Some("<="), _) => (Comparison::LessOrEqual, 2),
            (Some("=="), _) => (Comparison::Equal, 2),
            (Some("!="), _) => (Comparison::NotEqual, 2),
            (_, '>') => (Comparison::Greater, 1),
            (_, '<') => (Comparison::Less, 1),
            _ => return None,
        })
    }

    /// The same comparison with its sides swapped (`0.5 < result` is `result > 0.5`).
    fn flipped(self) -> Comparison {
        match self {
            Comparison::Greater => Comparison::Less,
            Comparison::GreaterOrEqual => Comparison::LessOrEqual,
            Comparison::Less => Comparison::Greater,
            Comparison::LessOrEqual => Comparison::GreaterOrEqual,
            other => other,
        }
    }

    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Comparison::Greater => ">",
            Comparison::GreaterOrEqual => ">=",
            Comparison::Less => "<",
            Comparison::LessOrEqual => "<=",
            Comparison::Equal => "==",
            Comparison::NotEqual => "!=",
        }
    }
}

/// The `result`/`result[0]` comparisons with number literals in a condition's text.
fn thresholds_of(source: &str) -> Vec<Threshold> {
    // Tokens: the result operand, operators, numbers; anything else separates.
    #[derive(Debug, PartialEq)]
    enum Token {
        Result,
        Op(Comparison),
        Number(f64),
        Other,
    }
    let mut tokens = Vec::new();
    let bytes = source.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &source[i..];
        let c = bytes[i] as char;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let end = rest
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_' || ch == '.'))
                .unwrap_or(rest.len());
            let word = &rest[..end];
            i += end;
            if word == "result" {
                let after = &source[i..];
                let trimmed = after.trim_start();
                if trimmed.starts_with('[') {
                    // Only `result[0]` is the value drawn.
                    let inner_end = trimmed.find(']').unwrap_or(trimmed.len());
                    let index = trimmed[1..inner_end].trim();
                    i += after.len() - trimmed.len() + (inner_end + 1).min(trimmed.len());
                    tokens.push(if index == "0" {
                        Token::Result
                    } else {
                        Token::Other
                    });
                } else {
                    tokens.push(Token::Result);
                }
            } else {
                tokens.push(Token::Other);
            }
        } else if c.is_ascii_digit()
            || (c == '.' && rest[1..].starts_with(|d: char| d.is_ascii_digit()))
            || (c == '-'
                && rest[1..].starts_with(|d: char| d.is_ascii_digit() || d == '.')
                && !matches!(tokens.last(), Some(Token::Result | Token::Number(_))))
        {
            let end = 1 + rest[1..]
                .find(|ch: char| {
                    !(ch.is_ascii_digit() || ch == '.' || ch == 'e' || ch == 'E' || ch == '_')
                })
                .unwrap_or(rest.len() - 1);
            let text: String = rest[..end].chars().filter(|ch| *ch != '_').collect();
            i += end;
            tokens.push(text.parse().map_or(Token::Other, Token::Number));
        } else if let Some((op, len)) = Comparison::parse(rest) {
            i += len;
            tokens.push(Token::Op(op));
        } else {
            i += c.len_utf8();
            tokens.push(Token::Other);
        }
    }
    let mut out = Vec::new();
    for window in tokens.windows(3) {
        let threshold = match window {
            [Token::Result, Token::Op(op), Token::Number(value)] => Threshold {
                op: *op,
                value: *value,
            },
            [Token::Number(value), Token::Op(op), Token::Result] => Threshold {
                op: op.flipped(),
                value: *value,
            },
            _ => continue,
        };
        if !out.contains(&threshold) {
            out.push(threshold);
        }
    }
    out
}

/// Formats a float as Go's `strconv.FormatFloat(v, 'f', -1, 64)` does (shortest exact form).
pub fn format_float(v: f64) -> String {
    let mut text = String::new();
    push_float(&mut text, v);
    text
}

/// [`format_float`] onto `text`.
fn push_float(text: &mut String, v: f64) {
    use std::fmt::Write;
    if v.is_nan() {
        text.push_str("NaN");
    } else if v.is_infinite() {
        text.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(text, "{v}");
    }
}

fn json_to_expr(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::String(s.clone()),
        serde_json::Value::Array(items) => Value::Array(items.iter().map(json_to_expr).collect()),
        serde_json::Value::Object(map) => Value::Map(
            map.iter()
                .map(|(k, v)| (k.clone(), json_to_expr(v)))
                .collect(),
        ),
    }
}

/// Why a condition could not be compiled or evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConditionError(pub String);

/// A compiled condition.
#[derive(Debug, Clone)]
pub struct Condition {
    source: String,
    program: Program,
    /// The stack its evaluation may need ([`red_zone`]).
    red_zone: usize,
}

/// The two variables a condition reads, `result` and `baseline`: looked up by name without
/// a map (a condition is evaluated once per measurement).
struct Variables {
    result: Value,
    baseline: Value,
}

impl ContextProvider for Variables {
    fn get(&self, key: &str) -> Option<&Value> {
        match key {
            "result" => Some(&self.result),
            "baseline" => Some(&self.baseline),
            _ => None,
        }
    }

    fn to_context(&self) -> Context {
        let mut context = Context::default();
        context.insert("result", self.result.clone());
        context.insert("baseline", self.baseline.clone());
        context
    }
}

fn environment() -> &'static Environment<'static> {
    static ENVIRONMENT: OnceLock<Environment<'static>> = OnceLock::new();
    ENVIRONMENT.get_or_init(|| {
        let mut env = Environment::new();
        env.add_function("asInt", |call| match call.args.as_slice() {
            [Value::Integer(i)] => Ok(Value::Integer(*i)),
            [Value::Float(f)] => Ok(Value::Integer(f.trunc() as i64)),
            [Value::String(s)] => s.trim().parse::<i64>().map(Value::Integer).map_err(|_| {
                expr::Error::ExprError(format!("strconv.ParseInt: parsing {s:?}: invalid syntax"))
            }),
            _ => Err(expr::Error::ExprError(
                "asInt expects one number or numeric string".into(),
            )),
        });
        env.add_function("asFloat", |call| match call.args.as_slice() {
            [Value::Integer(i)] => Ok(Value::Float(*i as f64)),
            [Value::Float(f)] => Ok(Value::Float(*f)),
            [Value::String(s)] => s.trim().parse::<f64>().map(Value::Float).map_err(|_| {
                expr::Error::ExprError(format!("strconv.ParseFloat: parsing {s:?}: invalid syntax"))
            }),
            _ => Err(expr::Error::ExprError(
                "asFloat expects one number or numeric string".into(),
            )),
        });
        env.add_function("isNaN", |call| match call.args.as_slice() {
            [Value::Float(f)] => Ok(Value::Bool(f.is_nan())),
            [Value::Integer(_)] => Ok(Value::Bool(false)),
            _ => Err(expr::Error::ExprError("isNaN expects one number".into())),
        });
        env.add_function("isInf", |call| match call.args.as_slice() {
            [Value::Float(f)] => Ok(Value::Bool(f.is_infinite())),
            [Value::Integer(_)] => Ok(Value::Bool(false)),
            _ => Err(expr::Error::ExprError("isInf expects one number".into())),
        });
        env.add_function("isNil", |call| match call.args.as_slice() {
            [value] => Ok(Value::Bool(matches!(value, Value::Nil))),
            _ => Err(expr::Error::ExprError("isNil expects one argument".into())),
        });
        env.add_function("default", |call| match call.args.as_slice() {
            [Value::Nil, fallback] => Ok(fallback.clone()),
            [value, _] => Ok(value.clone()),
            _ => Err(expr::Error::ExprError(
                "default expects two arguments".into(),
            )),
        });
        env
    })
}

/// Runs `f` on a stack with room for the deepest expression the caps allow.
fn with_big_stack<T>(f: impl FnOnce() -> T) -> T {
    with_stack(EVAL_RED_ZONE_BYTES, f)
}

/// Runs `f` on the caller's stack when `red_zone` bytes of it remain, else on a fresh one.
fn with_stack<T>(red_zone: usize, f: impl FnOnce() -> T) -> T {
    stacker::maybe_grow(red_zone, EVAL_STACK_BYTES, f)
}

/// Checks the caps and that every identifier is a known variable or function.
/// Returns the condition's size: its deepest bracket nesting plus its operators.
fn check_shape(source: &str) -> Result<usize, ConditionError> {
    if source.len() > MAX_CONDITION_BYTES {
        return Err(ConditionError(format!(
            "condition is {} bytes; at most {MAX_CONDITION_BYTES} are accepted",
            source.len()
        )));
    }
    if source.trim().is_empty() {
        return Err(ConditionError("condition is empty".into()));
    }
    let bytes = source.as_bytes();
    let mut depth = 0usize;
    let mut deepest = 0usize;
    let mut operators = 0usize;
    let mut let_bound: Vec<String> = Vec::new();
    let mut i = 0;
    let mut previous_significant: u8 = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'"' | b'\'' | b'`' => {
                // Skip a string literal, honouring backslash escapes.
                let quote = c;
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    if bytes[i] == b'\\' && quote != b'`' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                previous_significant = b'"';
                continue;
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
                if depth > MAX_CONDITION_DEPTH {
                    return Err(ConditionError(format!(
                        "condition nests brackets deeper than {MAX_CONDITION_DEPTH} levels"
                    )));
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'+' | b'-' | b'*' | b'/' | b'%' | b'<' | b'>' | b'=' | b'!' | b'&' | b'|' | b'?'
            | b'^' => {
                let next = bytes.get(i + 1).copied().unwrap_or(0);
                // Count two-character operators once.
                let pair = matches!(
                    (c, next),
                    (b'&', b'&')
                        | (b'|', b'|')
                        | (b'=', b'=')
                        | (b'!', b'=')
                        | (b'<', b'=')
                        | (b'>', b'=')
                        | (b'?', b'?')
                        | (b'*', b'*')
                );
                operators += 1;
                if pair {
                    i += 1;
                }
            }
            _ => {}
        }
        if c.is_ascii_digit() {
            // A number literal, with its fraction, exponent or radix prefix.
            i += 1;
            while i < bytes.len() {
                let b = bytes[i];
                let exponent_sign = matches!(b, b'+' | b'-') && matches!(bytes[i - 1], b'e' | b'E');
                if b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || exponent_sign {
                    i += 1;
                } else {
                    break;
                }
            }
            previous_significant = b'0';
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' || c == b'$' {
            let start = i;
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'$')
            {
                i += 1;
            }
            let word = &source[start..i];
            let after = source[i..].trim_start();
            let is_member = previous_significant == b'.';
            let is_call = after.starts_with('(');
            let is_key = after.starts_with(':') && matches!(previous_significant, b'{' | b',');
            previous_significant = b'a';
            if is_member || is_key {
                continue;
            }
            if matches!(
                word,
                "and" | "or" | "not" | "in" | "matches" | "contains" | "startsWith" | "endsWith"
            ) {
                operators += 1;
            }
            if word == "let" {
                let rest = after;
                let name_len = rest
                    .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                    .unwrap_or(rest.len());
                let_bound.push(rest[..name_len].to_owned());
                continue;
            }
            if KEYWORDS.contains(&word) || let_bound.iter().any(|b| b == word) {
                continue;
            }
            if is_call {
                if !EXPR_FUNCTIONS.contains(&word) && !ARGO_FUNCTIONS.contains(&word) {
                    return Err(ConditionError(format!("unknown function: {word}")));
                }
            } else if !VARIABLES.contains(&word) {
                return Err(ConditionError(format!(
                    "unknown variable: {word} (a condition can read `result`, and `baseline` when the metric is calibrated)"
                )));
            }
            continue;
        }
        if !c.is_ascii_whitespace() {
            previous_significant = c;
        }
        i += 1;
    }
    if operators > MAX_CONDITION_OPERATORS {
        return Err(ConditionError(format!(
            "condition has {operators} operators; at most {MAX_CONDITION_OPERATORS} are accepted"
        )));
    }
    Ok(deepest + operators)
}

/// The stack an evaluation of a condition of this size may need: the caps' largest shapes
/// need the whole red zone; a usual condition (a few operators) a fraction of it, so it runs
/// on the caller's stack instead of a fresh 8 MiB one per measurement.
fn red_zone(size: usize) -> usize {
    (RED_ZONE_BASE_BYTES + RED_ZONE_PER_UNIT_BYTES * size).min(EVAL_RED_ZONE_BYTES)
}

impl Condition {
    /// Compiles a condition, rejecting oversized expressions, unknown names and syntax errors.
    pub fn compile(source: &str) -> Result<Condition, ConditionError> {
        let size = check_shape(source)?;
        let program = with_big_stack(|| expr::compile(source))
            .map_err(|e| ConditionError(format!("invalid condition {source:?}: {e}")))?;
        Ok(Condition {
            source: source.to_owned(),
            program,
            red_zone: red_zone(size),
        })
    }

    /// The condition's text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates the condition against a metric result; a non-boolean result is an error.
    pub fn evaluate(&self, result: &MetricResult) -> Result<bool, ConditionError> {
        self.evaluate_with(result, None)
    }

    /// The fixed thresholds the condition compares the result with, for drawing: each
    /// comparison of `result` or `result[0]` with a number literal (`result[0] > 0.25`,
    /// `0.99 <= result`), written the result's side first. A condition without one (a
    /// `baseline` comparison, a web provider's JSON field) has none.
    pub fn thresholds(&self) -> Vec<Threshold> {
        thresholds_of(&self.source)
    }

    /// Whether the condition reads the `baseline` variable.
    pub fn reads_baseline(&self) -> bool {
        self.source
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .any(|word| word == "baseline" || word.starts_with("baseline."))
    }

    /// [`Condition::evaluate`] with a calibrated metric's `baseline` (a map of numbers).
    pub fn evaluate_with(
        &self,
        result: &MetricResult,
        baseline: Option<&std::collections::BTreeMap<String, f64>>,
    ) -> Result<bool, ConditionError> {
        let baseline = match baseline {
            Some(map) => {
                let object: serde_json::Map<String, serde_json::Value> = map
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::json!(v)))
                    .collect();
                json_to_expr(&serde_json::Value::Object(object))
            }
            None => Value::Nil,
        };
        let variables = Variables {
            result: result.to_expr(),
            baseline,
        };
        let value = with_stack(self.red_zone, || {
            environment().run(&self.program, &variables)
        });
        let value = value.map_err(|e| {
            let detail = e.to_string();
            if matches!(result, MetricResult::Nil)
                || matches!(result, MetricResult::Vector(v) if v.is_empty())
            {
                ConditionError(format!("metric result is nil or empty: {detail}"))
            } else {
                ConditionError(detail)
            }
        })?;
        match value {
            Value::Bool(b) => Ok(b),
            other => Err(ConditionError(format!(
                "expected bool, but got {}",
                go_type_name(&other)
            ))),
        }
    }
}

fn go_type_name(value: &Value) -> &'static str {
    match value {
        Value::Integer(_) => "int",
        Value::Float(_) => "float64",
        Value::String(_) => "string",
        Value::Nil => "nil",
        Value::Array(_) => "[]interface {}",
        Value::Map(_) | Value::KeyedMap(_) => "map[string]interface {}",
        Value::Bytes(_) => "[]uint8",
        Value::Bool(_) => "bool",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_the_result_compared_with_numbers() {
        let t = |source: &str| {
            Condition::compile(source)
                .unwrap()
                .thresholds()
                .iter()
                .map(|t| format!("{} {}", t.op.as_str(), t.value))
                .collect::<Vec<_>>()
        };
        assert_eq!(t("len(result) > 0 && result[0] > 0.25"), ["> 0.25"]);
        assert_eq!(t("result[0] >= 0.03"), [">= 0.03"]);
        assert_eq!(t("0.99 <= result"), [">= 0.99"]);
        assert_eq!(t("result < 1e3 || result > -2"), ["< 1000", "> -2"]);
        assert_eq!(t("result[1] > 4"), Vec::<String>::new());
        assert_eq!(t("result[0] <= baseline.p95 * 1.2"), Vec::<String>::new());
        assert_eq!(t("len(result) == 0"), Vec::<String>::new());
        assert_eq!(t("result[0] - 1 > 4"), Vec::<String>::new());
    }

    fn eval(source: &str, result: MetricResult) -> Result<bool, ConditionError> {
        Condition::compile(source)?.evaluate(&result)
    }

    #[test]
    fn conditions_see_scalars_vectors_and_nil_as_argo_does() {
        assert_eq!(
            eval("result[0] >= 0.95", MetricResult::Vector(vec![0.97])),
            Ok(true)
        );
        assert_eq!(eval("result < 0.05", MetricResult::Scalar(0.01)), Ok(true));
        assert_eq!(
            eval("len(result) == 0", MetricResult::Vector(vec![])),
            Ok(true)
        );
        assert_eq!(
            eval("isNaN(result)", MetricResult::Scalar(f64::NAN)),
            Ok(true)
        );
        assert_eq!(eval("isNil(result)", MetricResult::Nil), Ok(true));
        assert_eq!(eval("default(result, 0) < 5", MetricResult::Nil), Ok(true));
        assert_eq!(
            eval("asInt(\"1\") == 1 && asInt(1.123) == 1", MetricResult::Nil),
            Ok(true)
        );
        assert!(eval("asInt(\"1.1\") == 1", MetricResult::Nil).is_err());
        assert_eq!(eval("asFloat(\"1.5\") > 1", MetricResult::Nil), Ok(true));
    }

    #[test]
    fn default_leaves_an_empty_vector_unchanged() {
        let err = eval("default(result, 0) < 5", MetricResult::Vector(vec![])).unwrap_err();
        assert!(err.0.contains("nil or empty"), "{err}");
    }

    #[test]
    fn a_non_boolean_result_is_an_error_in_argos_words() {
        assert_eq!(
            eval("1", MetricResult::Nil),
            Err(ConditionError("expected bool, but got int".into()))
        );
    }

    #[test]
    fn unknown_variables_fail_at_compile_time_even_in_unevaluated_branches() {
        let err = Condition::compile("result > 0.5 || foo > 1").unwrap_err();
        assert!(err.0.contains("unknown variable: foo"), "{err}");
        let err = Condition::compile("reslt[0] > 1").unwrap_err();
        assert!(err.0.contains("reslt"), "{err}");
        let err = Condition::compile("lenn(result) > 1").unwrap_err();
        assert!(err.0.contains("unknown function: lenn"), "{err}");
    }

    #[test]
    fn members_strings_closures_and_lets_are_not_mistaken_for_variables() {
        for ok in [
            "result.data.ok == true",
            "result == \"foo bar\"",
            "all(result, {# < 10})",
            "let x = result; x > 1",
            "result > 1.5e3 ? true : false",
            "{a: 1}.a == 1",
        ] {
            assert!(
                Condition::compile(ok).is_ok(),
                "{ok}: {:?}",
                Condition::compile(ok)
            );
        }
    }

    #[test]
    fn malformed_expressions_are_errors_not_panics() {
        for bad in ["result[0] >= 0.99 ||", "((", "result[", "", "\0"] {
            assert!(Condition::compile(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn expressions_over_the_caps_are_refused_and_those_under_them_run() {
        let long_chain = vec!["result > 1"; 250].join(" || ");
        assert!(
            Condition::compile(&long_chain)
                .unwrap_err()
                .0
                .contains("operators")
        );
        let deep = format!("{}result > 1{}", "(".repeat(70), ")".repeat(70));
        assert!(Condition::compile(&deep).unwrap_err().0.contains("deeper"));
        assert!(
            Condition::compile(&"1".repeat(5000))
                .unwrap_err()
                .0
                .contains("bytes")
        );

        // The largest shapes the caps allow must evaluate without overflowing the stack, on a
        // test thread whose own stack is small.
        let chain = vec!["result > 1"; 66].join(" || ");
        assert_eq!(eval(&chain, MetricResult::Scalar(0.0)), Ok(false));
        let deep = format!("{}result > 1{}", "(".repeat(63), ")".repeat(63));
        assert_eq!(eval(&deep, MetricResult::Scalar(2.0)), Ok(true));
        let sums = format!("{} > 1", vec!["result"; 199].join(" + "));
        assert_eq!(eval(&sums, MetricResult::Scalar(1.0)), Ok(true));
    }

    /// A condition smaller than the caps runs on the caller's stack when its red zone remains:
    /// shapes of every size evaluate on a thread whose whole stack is just that red zone (this
    /// test build is unoptimised, whose frames are the largest), without overflowing.
    #[test]
    fn a_condition_runs_on_the_callers_stack_within_its_red_zone() {
        let mut shapes = vec!["result >= 0.99 && result < 3".to_owned()];
        for n in [4, 16, 48, 96] {
            shapes.push(vec!["result > 1"; n].join(" || "));
            shapes.push(format!("{} > 1", vec!["result"; n].join(" + ")));
            shapes.push(format!(
                "{}result > 1{}",
                "(".repeat(n.min(60)),
                ")".repeat(n.min(60))
            ));
        }
        for shape in shapes {
            let condition = Condition::compile(&shape).unwrap();
            let stack = condition.red_zone + 64 * 1024;
            let result = std::thread::Builder::new()
                .stack_size(stack)
                .spawn(move || condition.evaluate(&MetricResult::Scalar(2.0)))
                .unwrap()
                .join()
                .expect("evaluated without overflowing");
            assert!(result.is_ok(), "{shape}: {result:?}");
        }
    }

    #[test]
    fn evidence_means_a_non_empty_non_nan_value() {
        assert!(MetricResult::Scalar(0.0).is_evidence());
        assert!(!MetricResult::Scalar(f64::NAN).is_evidence());
        assert!(!MetricResult::Vector(vec![]).is_evidence());
        assert!(!MetricResult::Nil.is_evidence());
        assert!(MetricResult::Vector(vec![0.5]).is_evidence());
    }

    #[test]
    fn values_are_stored_as_argo_formats_them() {
        assert_eq!(MetricResult::Scalar(0.97).to_argo_string(), "0.97");
        assert_eq!(
            MetricResult::Vector(vec![0.97, 0.5]).to_argo_string(),
            "[0.97,0.5]"
        );
        assert_eq!(MetricResult::Scalar(f64::NAN).to_argo_string(), "NaN");
        assert_eq!(MetricResult::Scalar(1.0).to_argo_string(), "1");
    }
}

//! A trigger's `when` (and `oncePer`): an expr-lang expression, as notifications-engine compiles
//! it, bounded like the analysis conditions (at most 4 KiB, 64 brackets deep, 200 operators)
//! and evaluated on a stack deep enough for the largest shape the bounds allow.

use std::sync::OnceLock;

use expr::{Context, Environment, Program, Value};

/// Longest expression accepted, in bytes.
const MAX_BYTES: usize = 4096;
/// Deepest bracket nesting accepted.
const MAX_DEPTH: usize = 64;
/// Most operators accepted.
const MAX_OPERATORS: usize = 200;
/// The stack an evaluation runs on when the caller's is short of the red zone.
const STACK_BYTES: usize = 8 * 1024 * 1024;
const RED_ZONE_MAX: usize = 6 * 1024 * 1024;
const RED_ZONE_BASE: usize = 128 * 1024;
const RED_ZONE_PER_UNIT: usize = 32 * 1024;

/// A compiled `when`.
#[derive(Debug)]
pub(super) struct When {
    source: String,
    program: Program,
    red_zone: usize,
}

/// The expression's size (deepest nesting plus operators), or why it is refused.
fn shape(source: &str) -> Result<usize, String> {
    if source.len() > MAX_BYTES {
        return Err(format!(
            "the expression is {} bytes; at most {MAX_BYTES} are accepted",
            source.len()
        ));
    }
    let bytes = source.as_bytes();
    let (mut depth, mut deepest, mut operators) = (0usize, 0usize, 0usize);
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'"' | b'\'' | b'`' => {
                i += 1;
                while i < bytes.len() && bytes[i] != c {
                    if bytes[i] == b'\\' && c != b'`' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
                if depth > MAX_DEPTH {
                    return Err(format!(
                        "the expression nests brackets deeper than {MAX_DEPTH} levels"
                    ));
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'+' | b'-' | b'*' | b'/' | b'%' | b'<' | b'>' | b'=' | b'!' | b'&' | b'|' | b'?'
            | b'^' => {
                operators += 1;
                let next = bytes.get(i + 1).copied().unwrap_or(0);
                if matches!(next, b'=' | b'&' | b'|' | b'?' | b'*') {
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    for word in source.split(|c: char| !c.is_ascii_alphanumeric()) {
        if matches!(word, "and" | "or" | "not" | "in" | "matches" | "contains") {
            operators += 1;
        }
    }
    if operators > MAX_OPERATORS {
        return Err(format!(
            "the expression has {operators} operators; at most {MAX_OPERATORS} are accepted"
        ));
    }
    Ok(deepest + operators)
}

fn compile(source: &str) -> Result<(Program, usize), String> {
    let size = shape(source)?;
    let program = stacker::maybe_grow(RED_ZONE_MAX, STACK_BYTES, || expr::compile(source))
        .map_err(|e| format!("{source:?} does not compile: {}", one_line(&e.to_string())))?;
    Ok((
        program,
        (RED_ZONE_BASE + RED_ZONE_PER_UNIT * size).min(RED_ZONE_MAX),
    ))
}

/// A parser's report on one line: `at 1:25: expected …` rather than the drawn excerpt.
fn one_line(report: &str) -> String {
    let lines: Vec<&str> = report.lines().map(str::trim).collect();
    let at = lines.iter().find_map(|l| l.strip_prefix("--> "));
    let causes: Vec<&str> = lines.iter().filter_map(|l| l.strip_prefix("= ")).collect();
    match (at, causes.is_empty()) {
        (_, true) => lines.join(" ").trim().to_owned(),
        (Some(at), false) => format!("at {at}: {}", causes.join("; ")),
        (None, false) => causes.join("; "),
    }
}

impl When {
    /// Compiles a `when`.
    pub fn compile(source: &str) -> Result<When, String> {
        let (program, red_zone) = compile(source)?;
        Ok(When {
            source: source.to_owned(),
            program,
            red_zone,
        })
    }

    /// Compiles an expression whose value is not a condition (`oncePer`).
    pub fn compile_value(source: &str) -> Result<(), String> {
        compile(source).map(|_| ())
    }

    /// Whether it holds for `vars` (notifications-engine: a non-boolean result is false; an
    /// evaluation error is reported and is false).
    pub fn holds(&self, vars: &serde_json::Value) -> Result<bool, String> {
        let mut context = Context::default();
        if let serde_json::Value::Object(map) = vars {
            for (name, value) in map {
                context.insert(name.clone(), to_expr(value));
            }
        }
        let value = stacker::maybe_grow(self.red_zone, STACK_BYTES, || {
            environment().run(&self.program, &context)
        })
        .map_err(|e| format!("when {:?}: {e}", self.source))?;
        Ok(matches!(value, Value::Bool(true)))
    }
}

/// expr's builtins (no functions of Argo's analysis: notifications-engine registers none).
fn environment() -> &'static Environment<'static> {
    static ENVIRONMENT: OnceLock<Environment<'static>> = OnceLock::new();
    ENVIRONMENT.get_or_init(Environment::new)
}

/// A JSON value as expr sees Go's `map[string]any` of it (numbers are float64).
fn to_expr(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => Value::String(s.clone()),
        serde_json::Value::Array(items) => Value::Array(items.iter().map(to_expr).collect()),
        serde_json::Value::Object(map) => {
            Value::Map(map.iter().map(|(k, v)| (k.clone(), to_expr(v))).collect())
        }
    }
}

//! The templates' Go `text/template` (the `gotmpl` crate) with the part of sprig that Flotilla
//! implements, functions checked when a template is parsed (as Go's parser does), and data
//! from JSON as Go's `map[string]any` holds it (numbers are float64).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use gotmpl::parse::{Expr, ListNode, Node, PipeNode};
use gotmpl::{FuncMap, Template, TemplateError, Value, ValueFunc};

/// Go's builtin functions (as `gotmpl` registers them).
const BUILTINS: &[&str] = &[
    "and", "call", "eq", "ge", "gt", "html", "index", "js", "le", "len", "lt", "ne", "not", "or",
    "print", "printf", "println", "slice", "urlquery",
];

/// The sprig functions Flotilla implements (sprig's argument order and results).
pub const SPRIG: &[&str] = &[
    "coalesce",
    "contains",
    "default",
    "dict",
    "empty",
    "hasPrefix",
    "hasSuffix",
    "indent",
    "join",
    "list",
    "lower",
    "nindent",
    "quote",
    "repeat",
    "replace",
    "splitList",
    "squote",
    "ternary",
    "toJson",
    "toPrettyJson",
    "toString",
    "trim",
    "trimPrefix",
    "trimSuffix",
    "trunc",
    "upper",
];

/// Range iterations one rendering may run (Go has no bound; this keeps a template's cost
/// bounded).
const MAX_RANGE_ITERATIONS: u64 = 100_000;

/// One parsed template (an empty source renders empty).
pub(super) struct Tmpl {
    template: Option<Template>,
}

impl std::fmt::Debug for Tmpl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.template {
            None => f.write_str("Tmpl(empty)"),
            Some(t) => write!(f, "Tmpl({})", t.name()),
        }
    }
}

impl Tmpl {
    /// Parses a template; a function neither Go nor Flotilla's sprig has is an error here, as
    /// Go's parser reports it.
    pub fn parse(name: &str, source: &str) -> Result<Tmpl, String> {
        if source.is_empty() {
            return Ok(Tmpl { template: None });
        }
        let template = Template::new(name)
            .funcs(functions().clone())
            .max_range_iters(MAX_RANGE_ITERATIONS)
            .parse(source)
            .map_err(|e| e.to_string())?;
        for defined in template.templates() {
            if let Some(body) = template.lookup(defined) {
                check_list(name, body)?;
            }
        }
        Ok(Tmpl {
            template: Some(template),
        })
    }

    /// Renders the template with `data`.
    pub fn render(&self, data: &Value) -> Result<String, String> {
        match &self.template {
            None => Ok(String::new()),
            Some(t) => t.execute_to_string(data).map_err(|e| match e {
                TemplateError::Exec(m) => format!("template: {}: {m}", t.name()),
                other => format!("template: {}: {other}", t.name()),
            }),
        }
    }
}

fn check_list(name: &str, list: &ListNode) -> Result<(), String> {
    list.nodes.iter().try_for_each(|n| check_node(name, n))
}

fn check_node(name: &str, node: &Node) -> Result<(), String> {
    match node {
        Node::List(list) => check_list(name, list),
        Node::Action(action) => check_pipe(name, &action.pipe),
        Node::If(branch) | Node::Range(branch) | Node::With(branch) => {
            check_pipe(name, &branch.pipe)?;
            check_list(name, &branch.body)?;
            branch
                .else_body
                .as_ref()
                .map_or(Ok(()), |b| check_list(name, b))
        }
        Node::Template(t) => t.pipe.as_ref().map_or(Ok(()), |p| check_pipe(name, p)),
        Node::Define(d) => check_list(name, &d.body),
        Node::Text(_) | Node::Break(_) | Node::Continue(_) => Ok(()),
    }
}

fn check_pipe(name: &str, pipe: &PipeNode) -> Result<(), String> {
    for command in &pipe.commands {
        for arg in &command.args {
            check_expr(name, arg)?;
        }
    }
    Ok(())
}

fn check_expr(name: &str, expr: &Expr) -> Result<(), String> {
    match expr {
        Expr::Identifier(pos, function) => {
            if BUILTINS.contains(&function.as_str()) || SPRIG.contains(&function.as_str()) {
                Ok(())
            } else {
                Err(format!(
                    "template: {name}:{}: function {:?} not defined (Flotilla's templates have Go's builtins and these sprig functions: {})",
                    pos.line,
                    function.as_str(),
                    SPRIG.join(", ")
                ))
            }
        }
        Expr::Pipe(_, pipe) => check_pipe(name, pipe),
        Expr::Chain(_, inner, _) => check_expr(name, inner),
        _ => Ok(()),
    }
}

/// JSON as Go's `encoding/json` decodes it into `any` (numbers are float64).
pub(super) fn from_json(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => Value::String(Arc::from(s.as_str())),
        serde_json::Value::Array(items) => {
            Value::List(items.iter().map(from_json).collect::<Vec<_>>().into())
        }
        serde_json::Value::Object(map) => Value::Map(Arc::new(
            map.iter()
                .map(|(k, v)| (Arc::from(k.as_str()), from_json(v)))
                .collect(),
        )),
    }
}

/// A value as Go's `encoding/json` encodes it.
fn to_json(value: &Value) -> Result<serde_json::Value, String> {
    Ok(match value {
        Value::Nil => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(i) => serde_json::Value::from(*i),
        Value::Uint(u) => serde_json::Value::from(*u),
        Value::Float(f) => {
            if !f.is_finite() {
                return Err(format!("json: unsupported value: {f}"));
            }
            if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
                serde_json::Value::from(*f as i64)
            } else {
                serde_json::Value::from(*f)
            }
        }
        Value::String(s) => serde_json::Value::String(s.to_string()),
        Value::List(items) => {
            serde_json::Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?)
        }
        Value::Map(map) => serde_json::Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.to_string(), to_json(v)?)))
                .collect::<Result<_, String>>()?,
        ),
        Value::Function(_) => return Err("json: unsupported type: func".into()),
    })
}

/// sprig's `strval`: strings as they are, anything else as Go's `%v`.
fn strval(value: &Value) -> String {
    match value {
        Value::String(s) => s.to_string(),
        other => other.to_string(),
    }
}

/// sprig's `empty`: nil, false, zero, and empty strings, lists and maps.
fn empty(value: &Value) -> bool {
    match value {
        Value::Nil => true,
        Value::Bool(b) => !b,
        Value::Int(i) => *i == 0,
        Value::Uint(u) => *u == 0,
        Value::Float(f) => *f == 0.0,
        Value::String(s) => s.is_empty(),
        Value::List(items) => items.is_empty(),
        Value::Map(map) => map.is_empty(),
        Value::Function(_) => false,
    }
}

fn string(s: String) -> Value {
    Value::String(Arc::from(s.as_str()))
}

fn int_arg(name: &str, value: &Value) -> gotmpl::Result<i64> {
    match value {
        Value::Int(i) => Ok(*i),
        Value::Uint(u) => Ok(i64::try_from(*u).unwrap_or(i64::MAX)),
        Value::Float(f) => Ok(*f as i64),
        Value::String(s) => s
            .trim()
            .parse()
            .map_err(|_| TemplateError::Exec(format!("{name}: {s:?} is not a number"))),
        other => Err(TemplateError::Exec(format!(
            "{name}: {other} is not a number"
        ))),
    }
}

fn arity(name: &str, args: &[Value], n: usize) -> gotmpl::Result<()> {
    if args.len() == n {
        Ok(())
    } else {
        Err(TemplateError::Exec(format!(
            "wrong number of args for {name}: want {n} got {}",
            args.len()
        )))
    }
}

/// Go's `strconv.Quote` for the characters templates meet.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn indent(spaces: i64, s: &str) -> String {
    let pad = " ".repeat(spaces.clamp(0, 1024) as usize);
    format!("{pad}{}", s.replace('\n', &format!("\n{pad}")))
}

fn functions() -> &'static FuncMap {
    static FUNCTIONS: OnceLock<FuncMap> = OnceLock::new();
    FUNCTIONS.get_or_init(|| {
        let mut m: BTreeMap<String, ValueFunc> = BTreeMap::new();
        let mut add = |name: &str, f: ValueFunc| {
            m.insert(name.to_owned(), f);
        };
        add(
            "upper",
            Arc::new(|a| {
                arity("upper", a, 1)?;
                Ok(string(strval(&a[0]).to_uppercase()))
            }),
        );
        add(
            "lower",
            Arc::new(|a| {
                arity("lower", a, 1)?;
                Ok(string(strval(&a[0]).to_lowercase()))
            }),
        );
        add(
            "trim",
            Arc::new(|a| {
                arity("trim", a, 1)?;
                Ok(string(strval(&a[0]).trim().to_owned()))
            }),
        );
        add(
            "trimPrefix",
            Arc::new(|a| {
                arity("trimPrefix", a, 2)?;
                let (prefix, s) = (strval(&a[0]), strval(&a[1]));
                Ok(string(s.strip_prefix(&prefix).unwrap_or(&s).to_owned()))
            }),
        );
        add(
            "trimSuffix",
            Arc::new(|a| {
                arity("trimSuffix", a, 2)?;
                let (suffix, s) = (strval(&a[0]), strval(&a[1]));
                Ok(string(s.strip_suffix(&suffix).unwrap_or(&s).to_owned()))
            }),
        );
        add(
            "replace",
            Arc::new(|a| {
                arity("replace", a, 3)?;
                Ok(string(
                    strval(&a[2]).replace(&strval(&a[0]), &strval(&a[1])),
                ))
            }),
        );
        add(
            "contains",
            Arc::new(|a| {
                arity("contains", a, 2)?;
                Ok(Value::Bool(strval(&a[1]).contains(&strval(&a[0]))))
            }),
        );
        add(
            "hasPrefix",
            Arc::new(|a| {
                arity("hasPrefix", a, 2)?;
                Ok(Value::Bool(strval(&a[1]).starts_with(&strval(&a[0]))))
            }),
        );
        add(
            "hasSuffix",
            Arc::new(|a| {
                arity("hasSuffix", a, 2)?;
                Ok(Value::Bool(strval(&a[1]).ends_with(&strval(&a[0]))))
            }),
        );
        add(
            "quote",
            Arc::new(|a| {
                let quoted: Vec<String> = a
                    .iter()
                    .filter(|v| !matches!(v, Value::Nil))
                    .map(|v| go_quote(&strval(v)))
                    .collect();
                Ok(string(quoted.join(" ")))
            }),
        );
        add(
            "squote",
            Arc::new(|a| {
                let quoted: Vec<String> = a
                    .iter()
                    .filter(|v| !matches!(v, Value::Nil))
                    .map(|v| format!("'{}'", strval(v)))
                    .collect();
                Ok(string(quoted.join(" ")))
            }),
        );
        add(
            "default",
            Arc::new(|a| match a {
                [fallback] => Ok(fallback.clone()),
                [fallback, given, ..] => Ok(if empty(given) {
                    fallback.clone()
                } else {
                    given.clone()
                }),
                [] => Err(TemplateError::Exec(
                    "wrong number of args for default: want at least 1 got 0".into(),
                )),
            }),
        );
        add(
            "empty",
            Arc::new(|a| {
                arity("empty", a, 1)?;
                Ok(Value::Bool(empty(&a[0])))
            }),
        );
        add(
            "coalesce",
            Arc::new(|a| Ok(a.iter().find(|v| !empty(v)).cloned().unwrap_or(Value::Nil))),
        );
        add(
            "ternary",
            Arc::new(|a| {
                arity("ternary", a, 3)?;
                Ok(if matches!(a[2], Value::Bool(true)) {
                    a[0].clone()
                } else {
                    a[1].clone()
                })
            }),
        );
        add(
            "toJson",
            Arc::new(|a| {
                arity("toJson", a, 1)?;
                let json = to_json(&a[0]).map_err(TemplateError::Exec)?;
                Ok(string(json.to_string()))
            }),
        );
        add(
            "toPrettyJson",
            Arc::new(|a| {
                arity("toPrettyJson", a, 1)?;
                let json = to_json(&a[0]).map_err(TemplateError::Exec)?;
                Ok(string(
                    serde_json::to_string_pretty(&json).unwrap_or_default(),
                ))
            }),
        );
        add(
            "toString",
            Arc::new(|a| {
                arity("toString", a, 1)?;
                Ok(string(strval(&a[0])))
            }),
        );
        add(
            "join",
            Arc::new(|a| {
                arity("join", a, 2)?;
                let parts: Vec<String> = match &a[1] {
                    Value::List(items) => items
                        .iter()
                        .filter(|v| !matches!(v, Value::Nil))
                        .map(strval)
                        .collect(),
                    Value::Nil => Vec::new(),
                    other => vec![strval(other)],
                };
                Ok(string(parts.join(&strval(&a[0]))))
            }),
        );
        add(
            "splitList",
            Arc::new(|a| {
                arity("splitList", a, 2)?;
                let (sep, s) = (strval(&a[0]), strval(&a[1]));
                let parts: Vec<Value> = if sep.is_empty() {
                    s.chars().map(|c| string(c.to_string())).collect()
                } else {
                    s.split(sep.as_str())
                        .map(|p| string(p.to_owned()))
                        .collect()
                };
                Ok(Value::List(parts.into()))
            }),
        );
        add(
            "trunc",
            Arc::new(|a| {
                arity("trunc", a, 2)?;
                let n = int_arg("trunc", &a[0])?;
                let chars: Vec<char> = strval(&a[1]).chars().collect();
                let len = chars.len() as i64;
                let kept: String = if n < 0 && len + n > 0 {
                    chars[(len + n) as usize..].iter().collect()
                } else if n >= 0 && len > n {
                    chars[..n as usize].iter().collect()
                } else {
                    chars.iter().collect()
                };
                Ok(string(kept))
            }),
        );
        add(
            "repeat",
            Arc::new(|a| {
                arity("repeat", a, 2)?;
                let n = int_arg("repeat", &a[0])?.clamp(0, 10_000) as usize;
                Ok(string(strval(&a[1]).repeat(n)))
            }),
        );
        add(
            "indent",
            Arc::new(|a| {
                arity("indent", a, 2)?;
                Ok(string(indent(int_arg("indent", &a[0])?, &strval(&a[1]))))
            }),
        );
        add(
            "nindent",
            Arc::new(|a| {
                arity("nindent", a, 2)?;
                Ok(string(format!(
                    "\n{}",
                    indent(int_arg("nindent", &a[0])?, &strval(&a[1]))
                )))
            }),
        );
        add("list", Arc::new(|a| Ok(Value::List(a.to_vec().into()))));
        add(
            "dict",
            Arc::new(|a| {
                let mut map = BTreeMap::new();
                for pair in a.chunks(2) {
                    let value = pair.get(1).cloned().unwrap_or(Value::String(Arc::from("")));
                    map.insert(Arc::from(strval(&pair[0]).as_str()), value);
                }
                Ok(Value::Map(Arc::new(map)))
            }),
        );
        m
    })
}

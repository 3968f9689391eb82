//! YAML (and JSON, its subset) text to JSON values, with the source location of every field.
//!
//! The loader is built on saphyr-parser's event stream rather than a serde YAML crate because lint
//! needs more than a value: the line and column of each field path, duplicate keys reported as
//! errors, and hard budgets so that hostile input (a billion-laughs alias bomb, pathological
//! nesting) fails fast with one clear error instead of exhausting memory or the stack.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde_json::{Map, Number, Value};

/// Where something is in a source file: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord, Hash)]
pub struct Location {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

impl Location {
    fn from_span(span: &Span) -> Self {
        Location {
            line: span.start.line() as u32,
            column: span.start.col() as u32 + 1,
        }
    }
}

/// A YAML syntax error or a budget violation, with where it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// Where the parser stopped.
    pub location: Location,
    /// What went wrong.
    pub message: String,
}

/// The field locations of one document, keyed by field path (`spec.steps[2].setWeight`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Locations {
    by_path: HashMap<String, Location>,
    /// Where the document starts.
    pub start: Location,
}

impl Locations {
    /// The location of a path, or of its nearest ancestor that has one.
    pub fn find(&self, path: &str) -> Location {
        let mut path = path;
        loop {
            if let Some(location) = self.by_path.get(path) {
                return *location;
            }
            match parent_path(path) {
                Some(parent) => path = parent,
                None => return self.start,
            }
        }
    }

    /// The location of exactly this path, if it exists in the source.
    pub fn get(&self, path: &str) -> Option<Location> {
        self.by_path.get(path).copied()
    }
}

/// The parent of a field path: `a.b[2].c` → `a.b[2]` → `a.b` → `a` → none.
pub fn parent_path(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    match path.rfind(['.', '[']) {
        Some(cut) => Some(&path[..cut]),
        None => Some(""),
    }
}

/// One YAML document: its value and the location of each of its fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// The document's position in its file, from 0.
    pub index: usize,
    /// The parsed value.
    pub value: Value,
    /// Where each field path is.
    pub locations: Locations,
}

/// Hard limits that keep parsing bounded in time and memory whatever the input.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Maximum nesting depth of sequences and mappings.
    pub max_depth: usize,
    /// Maximum number of values in one file, counting every copy an alias expands to.
    pub max_nodes: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_depth: 100,
            max_nodes: 2_000_000,
        }
    }
}

enum Frame {
    Seq {
        items: Vec<Value>,
        anchor: usize,
        path: String,
        nodes_at_start: usize,
    },
    Map {
        map: Map<String, Value>,
        key_locations: HashMap<String, Location>,
        pending_key: Option<(String, Location)>,
        anchor: usize,
        path: String,
        nodes_at_start: usize,
    },
}

struct Builder {
    budget: Budget,
    stack: Vec<Frame>,
    anchors: HashMap<usize, (Value, usize)>,
    nodes: usize,
    documents: Vec<Document>,
    current_locations: Locations,
    current_root: Option<Value>,
}

fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

impl Builder {
    fn err(location: Location, message: impl Into<String>) -> YamlError {
        YamlError {
            location,
            message: message.into(),
        }
    }

    /// The path the next value will have, given the innermost open collection.
    fn next_path(&self) -> Result<String, String> {
        match self.stack.last() {
            None => Ok(String::new()),
            Some(Frame::Seq { items, path, .. }) => Ok(format!("{path}[{}]", items.len())),
            Some(Frame::Map {
                pending_key: Some((key, _)),
                path,
                ..
            }) => Ok(child_path(path, key)),
            Some(Frame::Map { path, .. }) => Ok(path.clone()),
        }
    }

    fn expecting_key(&self) -> bool {
        matches!(
            self.stack.last(),
            Some(Frame::Map {
                pending_key: None,
                ..
            })
        )
    }

    fn bump_nodes(&mut self, count: usize, location: Location) -> Result<(), YamlError> {
        self.nodes = self.nodes.saturating_add(count);
        if self.nodes > self.budget.max_nodes {
            return Err(Self::err(
                location,
                format!(
                    "document expands to more than {} values (an alias bomb such as \"billion laughs\"?); refused",
                    self.budget.max_nodes
                ),
            ));
        }
        Ok(())
    }

    /// Places a finished value into its parent (or makes it the document root).
    fn place(&mut self, value: Value) -> Result<(), YamlError> {
        match self.stack.last_mut() {
            None => {
                self.current_root = Some(value);
                Ok(())
            }
            Some(Frame::Seq { items, .. }) => {
                items.push(value);
                Ok(())
            }
            Some(Frame::Map {
                map,
                pending_key,
                key_locations,
                ..
            }) => {
                let (key, key_location) = pending_key.take().expect("a value follows its key");
                if key == "<<" {
                    // A merge key: copy in the entries of the merged mapping(s) the mapping lacks.
                    let sources = match value {
                        Value::Object(source) => vec![source],
                        Value::Array(items) => items
                            .into_iter()
                            .filter_map(|item| match item {
                                Value::Object(source) => Some(source),
                                _ => None,
                            })
                            .collect(),
                        _ => {
                            return Err(Self::err(
                                key_location,
                                "a merge key (<<) must refer to a mapping",
                            ));
                        }
                    };
                    for source in sources {
                        for (k, v) in source {
                            map.entry(k).or_insert(v);
                        }
                    }
                    return Ok(());
                }
                if let Some(first) = key_locations.get(&key) {
                    return Err(Self::err(
                        key_location,
                        format!(
                            "duplicate key {key:?} (first defined at line {}, column {})",
                            first.line, first.column
                        ),
                    ));
                }
                key_locations.insert(key.clone(), key_location);
                map.insert(key, value);
                Ok(())
            }
        }
    }

    fn record(&mut self, path: String, location: Location) {
        self.current_locations
            .by_path
            .entry(path)
            .or_insert(location);
    }

    fn on_scalar(
        &mut self,
        text: &str,
        style: ScalarStyle,
        anchor: usize,
        tag: Option<&saphyr_parser::Tag>,
        location: Location,
    ) -> Result<(), YamlError> {
        self.bump_nodes(1, location)?;
        if self.expecting_key() {
            let path = match self.stack.last() {
                Some(Frame::Map { path, .. }) => child_path(path, text),
                _ => unreachable!("expecting_key implies a map frame"),
            };
            self.record(path, location);
            if let Some(Frame::Map { pending_key, .. }) = self.stack.last_mut() {
                *pending_key = Some((text.to_owned(), location));
            }
            if anchor > 0 {
                self.anchors
                    .insert(anchor, (Value::String(text.to_owned()), 1));
            }
            return Ok(());
        }
        let path = self.next_path().map_err(|m| Self::err(location, m))?;
        self.record(path, location);
        let value = resolve_scalar(text, style, tag);
        if anchor > 0 {
            self.anchors.insert(anchor, (value.clone(), 1));
        }
        self.place(value)
    }

    fn on_event(&mut self, event: Event<'_>, span: Span) -> Result<(), YamlError> {
        let location = Location::from_span(&span);
        match event {
            Event::Nothing | Event::StreamStart | Event::StreamEnd => Ok(()),
            Event::DocumentStart(_) => {
                self.current_locations = Locations {
                    by_path: HashMap::new(),
                    start: location,
                };
                self.current_root = None;
                Ok(())
            }
            Event::DocumentEnd => {
                let value = self.current_root.take().unwrap_or(Value::Null);
                let locations = std::mem::take(&mut self.current_locations);
                let index = self.documents.len();
                self.documents.push(Document {
                    index,
                    value,
                    locations,
                });
                Ok(())
            }
            Event::Alias(id) => {
                let (value, nodes) = self
                    .anchors
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| Self::err(location, "alias refers to an unknown anchor"))?;
                self.bump_nodes(nodes, location)?;
                if self.expecting_key() {
                    let key = match value {
                        Value::String(s) => s,
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        _ => return Err(Self::err(location, "a mapping key must be a scalar")),
                    };
                    return self.on_scalar(&key, ScalarStyle::Plain, 0, None, location);
                }
                let path = self.next_path().map_err(|m| Self::err(location, m))?;
                self.record(path, location);
                self.place(value)
            }
            Event::Scalar(text, style, anchor, tag) => {
                self.on_scalar(&text, style, anchor, tag.as_deref(), location)
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if self.expecting_key() {
                    return Err(Self::err(
                        location,
                        "a mapping key must be a scalar, not a sequence or mapping",
                    ));
                }
                if self.stack.len() >= self.budget.max_depth {
                    return Err(Self::err(
                        location,
                        format!(
                            "nesting deeper than {} levels; refused",
                            self.budget.max_depth
                        ),
                    ));
                }
                self.bump_nodes(1, location)?;
                let path = self.next_path().map_err(|m| Self::err(location, m))?;
                self.record(path.clone(), location);
                let frame = if matches!(event, Event::SequenceStart(..)) {
                    Frame::Seq {
                        items: Vec::new(),
                        anchor,
                        path,
                        nodes_at_start: self.nodes,
                    }
                } else {
                    Frame::Map {
                        map: Map::new(),
                        key_locations: HashMap::new(),
                        pending_key: None,
                        anchor,
                        path,
                        nodes_at_start: self.nodes,
                    }
                };
                self.stack.push(frame);
                Ok(())
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let frame = self
                    .stack
                    .pop()
                    .ok_or_else(|| Self::err(location, "unbalanced collection end"))?;
                let (value, anchor, nodes_at_start) = match frame {
                    Frame::Seq {
                        items,
                        anchor,
                        nodes_at_start,
                        ..
                    } => (Value::Array(items), anchor, nodes_at_start),
                    Frame::Map {
                        map,
                        anchor,
                        nodes_at_start,
                        ..
                    } => (Value::Object(map), anchor, nodes_at_start),
                };
                if anchor > 0 {
                    let nodes = self.nodes - nodes_at_start + 1;
                    self.anchors.insert(anchor, (value.clone(), nodes));
                }
                self.place(value)
            }
        }
    }
}

/// Resolves a scalar per the YAML 1.2 core schema (what Kubernetes manifests rely on).
fn resolve_scalar(text: &str, style: ScalarStyle, tag: Option<&saphyr_parser::Tag>) -> Value {
    if let Some(tag) = tag
        && tag.is_yaml_core_schema()
        && tag.suffix == "str"
    {
        return Value::String(text.to_owned());
    }
    if style != ScalarStyle::Plain {
        return Value::String(text.to_owned());
    }
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Some(number) = resolve_number(text) {
        return Value::Number(number);
    }
    Value::String(text.to_owned())
}

fn resolve_number(text: &str) -> Option<Number> {
    let bytes = text.as_bytes();
    let first = *bytes.first()?;
    if !(first.is_ascii_digit() || first == b'-' || first == b'+' || first == b'.') {
        return None;
    }
    if let Some(hex) = text.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok().map(Number::from);
    }
    if let Some(oct) = text.strip_prefix("0o") {
        return i64::from_str_radix(oct, 8).ok().map(Number::from);
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(v) = text.parse::<i64>() {
            return Some(Number::from(v));
        }
        if let Ok(v) = text.trim_start_matches('+').parse::<u64>() {
            return Some(Number::from(v));
        }
    }
    // Floats: digits with a dot and/or an exponent; YAML's .inf and .nan have no JSON form and
    // stay strings.
    let float_shape = digits.bytes().any(|b| b.is_ascii_digit())
        && digits
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'));
    if float_shape && let Ok(v) = text.parse::<f64>() {
        return Number::from_f64(v);
    }
    None
}

/// Quotes a bare `{{args.x}}` placeholder standing as a whole value (`key: {{args.x}}` or
/// `- {{args.x}}`).
///
/// YAML reads such a value as a mapping nested in a mapping, which no Kubernetes API accepts,
/// yet upstream Argo examples write it that way expecting argument substitution. Reading it as
/// the string it stands for keeps those manifests usable; lines and earlier columns are unchanged.
fn quote_bare_placeholders(text: &str) -> std::borrow::Cow<'_, str> {
    static BARE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    if !text.contains("{{") {
        return std::borrow::Cow::Borrowed(text);
    }
    let bare = BARE.get_or_init(|| {
        regex::Regex::new(r"(?m)^(\s*(?:-\s+)?(?:[^\s#'\x22{][^#'\x22]*?:\s+)?)(\{\{\s*[A-Za-z0-9_.\-]+\s*\}\})(\s*(?:#.*)?)$")
            .expect("valid regex")
    });
    bare.replace_all(text, "$1\"$2\"$3")
}

/// Parses every document of a YAML (or JSON) text, within `budget`.
///
/// Empty documents (a stray `---` at the end of a file) are dropped. An input with no document
/// at all is not an error here; the caller decides what an empty file means.
pub fn parse_documents(text: &str, budget: Budget) -> Result<Vec<Document>, YamlError> {
    let mut builder = Builder {
        budget,
        stack: Vec::new(),
        anchors: HashMap::new(),
        nodes: 0,
        documents: Vec::new(),
        current_locations: Locations::default(),
        current_root: None,
    };
    let text = quote_bare_placeholders(text);
    let mut parser = Parser::new_from_str(&text);
    while let Some(event) = parser.next_event() {
        match event {
            Ok((event, span)) => builder.on_event(event, span)?,
            Err(error) => {
                let marker = error.marker();
                let location = Location {
                    line: marker.line() as u32,
                    column: marker.col() as u32 + 1,
                };
                let mut message = error.info().to_owned();
                let line_text = text.lines().nth(location.line.saturating_sub(1) as usize);
                if line_text.is_some_and(|l| l.trim_start_matches(' ').starts_with('\t')) {
                    message.push_str(" (tabs are not allowed for indentation in YAML; use spaces)");
                }
                return Err(YamlError { location, message });
            }
        }
    }
    let mut documents: Vec<Document> = builder
        .documents
        .into_iter()
        .filter(|d| !d.value.is_null())
        .collect();
    for (index, document) in documents.iter_mut().enumerate() {
        document.index = index;
    }
    Ok(documents)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> Result<Vec<Document>, YamlError> {
        parse_documents(text, Budget::default())
    }

    #[test]
    fn scalars_resolve_like_the_core_schema() {
        let docs =
            parse("a: 1\nb: 1.5\nc: true\nd: ~\ne: '1'\nf: 25%\ng: 0x10\nh: -3\ni: 1e3\nj: .inf\n")
                .unwrap();
        assert_eq!(
            docs[0].value,
            json!({"a": 1, "b": 1.5, "c": true, "d": null, "e": "1", "f": "25%", "g": 16, "h": -3, "i": 1000.0, "j": ".inf"})
        );
    }

    #[test]
    fn field_paths_carry_their_lines() {
        let docs = parse("spec:\n  steps:\n  - setWeight: 20\n  - pause: {}\n").unwrap();
        let locations = &docs[0].locations;
        assert_eq!(locations.find("spec.steps[1].pause").line, 4);
        assert_eq!(
            locations.find("spec.steps[0].setWeight"),
            Location { line: 3, column: 5 }
        );
        assert_eq!(locations.find("spec.steps[0].setWeight.nothing").line, 3);
    }

    #[test]
    fn multiple_documents_are_split_and_empty_ones_dropped() {
        let docs = parse("---\na: 1\n---\n---\nb: 2\n---\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1].value, json!({"b": 2}));
        assert_eq!(docs[1].locations.find("b").line, 5);
    }

    #[test]
    fn duplicate_keys_are_errors_naming_both_places() {
        let err = parse("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(err.location.line, 3);
        assert!(
            err.message.contains("duplicate key \"a\""),
            "{}",
            err.message
        );
        assert!(err.message.contains("line 1"), "{}", err.message);
    }

    #[test]
    fn anchors_aliases_and_merge_keys_work() {
        let docs = parse("base: &b {x: 1, y: 2}\nuse: *b\nmerged:\n  <<: *b\n  y: 3\n").unwrap();
        assert_eq!(docs[0].value["use"], json!({"x": 1, "y": 2}));
        assert_eq!(docs[0].value["merged"], json!({"x": 1, "y": 3}));
    }

    #[test]
    fn a_billion_laughs_is_refused_quickly() {
        let mut text = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..10 {
            let prev = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let err = parse(&text).unwrap_err();
        assert!(err.message.contains("billion laughs"), "{}", err.message);
    }

    #[test]
    fn deep_nesting_is_refused() {
        let text = "[".repeat(5000);
        assert!(parse(&text).is_err());
    }

    #[test]
    fn tab_indentation_gets_a_hint() {
        let err = parse("a:\n\tb: 1\n").unwrap_err();
        assert_eq!(err.location.line, 2);
        assert!(err.message.contains("tabs"), "{}", err.message);
    }

    #[test]
    fn bare_placeholders_are_read_as_strings() {
        let docs = parse(
            "a:\n  b: {{args.linkerd-enabled}}\n  c:\n  - {{ args.x }} # note\n  d: {x: 1}\n",
        )
        .unwrap();
        assert_eq!(
            docs[0].value,
            json!({"a": {"b": "{{args.linkerd-enabled}}", "c": ["{{ args.x }}"], "d": {"x": 1}}})
        );
    }

    #[test]
    fn json_is_yaml() {
        let docs = parse("{\"a\": [1, 2, {\"b\": null}]}").unwrap();
        assert_eq!(docs[0].value, json!({"a": [1, 2, {"b": null}]}));
    }
}

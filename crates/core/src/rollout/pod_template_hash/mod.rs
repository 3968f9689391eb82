//! Argo Rollouts' pod-template hash (`utils/hash.ComputePodTemplateHash`), bit for bit: FNV-32a
//! over Go's `encoding/json` encoding of the Rollout's `spec.template` as a
//! `corev1.PodTemplateSpec`, then the collision count (8 bytes, little-endian), the sum printed
//! in decimal and each digit mapped through apimachinery's `rand.SafeEncodeString`.
//!
//! Go's encoding is not JSON in general: it follows the Go structs' field order (not the
//! alphabetical order of the OpenAPI schema), writes the zero value of every field without
//! `omitempty` (`"resources":{}`), drops what the structs do not know, sorts map keys, escapes
//! `<`, `>`, `&`, U+2028 and U+2029, and writes each quantity in its canonical form (`0.5` is
//! `500m`, `1024Mi` is `1Gi`). [`go_json`] reproduces it from the type graph Go's reflection gives
//! (`go-types.json`, written by `tools/k8s-testenv/podhash schema` from the k8s.io/api that Argo
//! Rollouts v1.10 is built with: there `creationTimestamp` is `omitzero`, so a template without
//! one hashes without `"creationTimestamp":null`, unlike Argo releases built before Kubernetes
//! 1.33). `vectors.json` holds what Argo's own function computes for the templates of
//! `cases.json` (`podhash vectors`); the tests check both against them.

mod quantity;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;

/// Why a template cannot be encoded as Go would (Go's decoder would refuse it too).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct HashError {
    /// Where in the template, as a field path (`spec.containers[0].resources.limits.cpu`).
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

/// Argo's pod-template hash of `template` (a Rollout's `spec.template`), with the Rollout's
/// `status.collisionCount` when it has one.
pub fn pod_template_hash(
    template: &Value,
    collision_count: Option<i32>,
) -> Result<String, HashError> {
    let encoded = go_json(template)?;
    let mut hash = Fnv32a::new();
    hash.write(encoded.as_bytes());
    if let Some(count) = collision_count {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&(count as u32).to_le_bytes());
        hash.write(&bytes);
    }
    Ok(safe_encode(&hash.0.to_string()))
}

/// Go's `json.Marshal` of `template` decoded into a `corev1.PodTemplateSpec`.
pub fn go_json(template: &Value) -> Result<String, HashError> {
    let schema = schema();
    let mut out = String::with_capacity(1024);
    let mut path = String::new();
    encode(schema, &schema.root, Some(template), &mut path, &mut out)?;
    Ok(out)
}

/// FNV-1a, 32 bits (Go's `hash/fnv.New32a`).
struct Fnv32a(u32);

impl Fnv32a {
    fn new() -> Fnv32a {
        Fnv32a(2_166_136_261)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u32::from(*b);
            self.0 = self.0.wrapping_mul(16_777_619);
        }
    }
}

/// apimachinery's `rand.SafeEncodeString`: each character to one of 27 that spell no words.
fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.chars()
        .map(|c| ALPHANUMS[c as usize % ALPHANUMS.len()] as char)
        .collect()
}

/// A Go type as `encoding/json` sees it.
#[derive(Debug, Clone, PartialEq)]
enum Ty {
    String,
    Bool,
    Int,
    /// A type with its own `MarshalJSON`.
    Custom(Custom),
    Struct(String),
    Ptr(Box<Ty>),
    Slice(Box<Ty>),
    /// With string keys.
    Map(Box<Ty>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Custom {
    Time,
    Quantity,
    IntOrString,
    FieldsV1,
}

#[derive(Debug)]
struct Field {
    name: String,
    omit_empty: bool,
    omit_zero: bool,
    ty: Ty,
}

#[derive(Debug)]
struct Schema {
    root: Ty,
    structs: HashMap<String, Vec<Field>>,
}

fn parse_ty(text: &str) -> Ty {
    let (head, rest) = text.split_once(':').unwrap_or((text, ""));
    match head {
        "string" => Ty::String,
        "bool" => Ty::Bool,
        "int" => Ty::Int,
        "ptr" => Ty::Ptr(Box::new(parse_ty(rest))),
        "slice" => Ty::Slice(Box::new(parse_ty(rest))),
        "map" => Ty::Map(Box::new(parse_ty(rest))),
        "struct" => Ty::Struct(rest.to_owned()),
        "custom" => Ty::Custom(match rest {
            "Time" => Custom::Time,
            "Quantity" => Custom::Quantity,
            "IntOrString" => Custom::IntOrString,
            "FieldsV1" => Custom::FieldsV1,
            other => panic!("go-types.json: no encoding for the Go type {other}"),
        }),
        other => panic!("go-types.json: no encoding for the Go kind {other}"),
    }
}

/// The type graph, read once from `go-types.json` (a file of this crate: a bad one is a bug
/// the tests catch, hence the panics).
fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct RawField {
            name: String,
            omit_empty: bool,
            omit_zero: bool,
            #[serde(rename = "type")]
            ty: String,
        }
        #[derive(Deserialize)]
        struct RawStruct {
            #[serde(rename = "type")]
            name: String,
            fields: Option<Vec<RawField>>,
        }
        #[derive(Deserialize)]
        struct Raw {
            root: String,
            structs: Vec<RawStruct>,
        }
        let raw: Raw = serde_json::from_str(include_str!("go-types.json"))
            .expect("go-types.json is the podhash helper's output");
        Schema {
            root: parse_ty(&raw.root),
            structs: raw
                .structs
                .into_iter()
                .map(|s| {
                    let fields = s
                        .fields
                        .unwrap_or_default()
                        .into_iter()
                        .map(|f| Field {
                            ty: parse_ty(&f.ty),
                            name: f.name,
                            omit_empty: f.omit_empty,
                            omit_zero: f.omit_zero,
                        })
                        .collect();
                    (s.name, fields)
                })
                .collect(),
        }
    })
}

/// A JSON `null` decodes to Go's zero value, as an absent member does.
fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}

/// Whether Go's `omitempty` drops the value: false, 0, "", a nil pointer, an empty or nil slice
/// or map (a struct is never empty).
fn is_empty(ty: &Ty, value: Option<&Value>) -> bool {
    let Some(value) = present(value) else {
        return !matches!(ty, Ty::Struct(_) | Ty::Custom(_));
    };
    match ty {
        Ty::String => value.as_str() == Some(""),
        Ty::Bool => value.as_bool() == Some(false),
        Ty::Int => value.as_i64() == Some(0),
        Ty::Slice(_) => value.as_array().is_some_and(Vec::is_empty),
        Ty::Map(_) => value.as_object().is_some_and(serde_json::Map::is_empty),
        Ty::Ptr(_) | Ty::Struct(_) | Ty::Custom(_) => false,
    }
}

/// Whether Go's `omitzero` drops the value (its zero value, or `IsZero()` for a time).
fn is_zero(ty: &Ty, value: Option<&Value>) -> bool {
    match present(value) {
        None => true,
        Some(value) => match ty {
            Ty::Custom(Custom::Time) => false,
            _ => is_empty(ty, Some(value)) && !matches!(ty, Ty::Slice(_) | Ty::Map(_)),
        },
    }
}

fn error(path: &str, message: impl Into<String>) -> HashError {
    HashError {
        path: if path.is_empty() {
            "template".into()
        } else {
            path.to_owned()
        },
        message: message.into(),
    }
}

fn encode(
    schema: &Schema,
    ty: &Ty,
    value: Option<&Value>,
    path: &mut String,
    out: &mut String,
) -> Result<(), HashError> {
    let value = present(value);
    match ty {
        Ty::String => match value {
            None => out.push_str("\"\""),
            Some(Value::String(s)) => go_string(s, out),
            Some(other) => return Err(error(path, format!("{other} is not a string"))),
        },
        Ty::Bool => match value {
            None => out.push_str("false"),
            Some(Value::Bool(b)) => out.push_str(if *b { "true" } else { "false" }),
            Some(other) => return Err(error(path, format!("{other} is not a boolean"))),
        },
        Ty::Int => match value {
            None => out.push('0'),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => {
                let _ = write!(out, "{n}");
            }
            Some(other) => return Err(error(path, format!("{other} is not an integer"))),
        },
        Ty::Ptr(inner) => match value {
            None => out.push_str("null"),
            Some(_) => encode(schema, inner, value, path, out)?,
        },
        Ty::Slice(inner) => match value {
            None => out.push_str("null"),
            Some(Value::Array(items)) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let len = path.len();
                    let _ = write!(path, "[{i}]");
                    encode(schema, inner, Some(item), path, out)?;
                    path.truncate(len);
                }
                out.push(']');
            }
            Some(other) => return Err(error(path, format!("{other} is not a list"))),
        },
        Ty::Map(inner) => match value {
            None => out.push_str("null"),
            Some(Value::Object(members)) => {
                let mut keys: Vec<&String> = members.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    go_string(key, out);
                    out.push(':');
                    let len = path.len();
                    let _ = write!(path, "[{key:?}]");
                    encode(schema, inner, members.get(key), path, out)?;
                    path.truncate(len);
                }
                out.push('}');
            }
            Some(other) => return Err(error(path, format!("{other} is not a map"))),
        },
        Ty::Struct(name) => {
            let members = match value {
                None => None,
                Some(Value::Object(members)) => Some(members),
                Some(other) => return Err(error(path, format!("{other} is not an object"))),
            };
            let fields = schema
                .structs
                .get(name)
                .unwrap_or_else(|| panic!("go-types.json has no struct {name}"));
            out.push('{');
            let mut first = true;
            for field in fields {
                let member = members.and_then(|m| m.get(&field.name));
                if (field.omit_empty && is_empty(&field.ty, member))
                    || (field.omit_zero && is_zero(&field.ty, member))
                {
                    continue;
                }
                if !first {
                    out.push(',');
                }
                first = false;
                go_string(&field.name, out);
                out.push(':');
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&field.name);
                encode(schema, &field.ty, member, path, out)?;
                path.truncate(len);
            }
            out.push('}');
        }
        Ty::Custom(Custom::Time) => match value {
            None => out.push_str("null"),
            // The API server stores times in RFC 3339 (UTC, seconds), which is how Go writes
            // them back.
            Some(Value::String(s)) => go_string(s, out),
            Some(other) => return Err(error(path, format!("{other} is not a time"))),
        },
        Ty::Custom(Custom::Quantity) => {
            let text = match value {
                None => "0".to_owned(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                Some(other) => return Err(error(path, format!("{other} is not a quantity"))),
            };
            let canonical = quantity::canonical(&text)
                .map_err(|e| error(path, format!("quantity {text:?}: {e}")))?;
            go_string(&canonical, out);
        }
        Ty::Custom(Custom::IntOrString) => match value {
            None => out.push('0'),
            Some(Value::Number(n)) if n.is_i64() => {
                let _ = write!(out, "{n}");
            }
            Some(Value::String(s)) => go_string(s, out),
            Some(other) => {
                return Err(error(
                    path,
                    format!("{other} is neither an integer nor a string"),
                ));
            }
        },
        Ty::Custom(Custom::FieldsV1) => match value {
            None => out.push_str("null"),
            Some(raw) => {
                let _ = write!(out, "{raw}");
            }
        },
    }
    Ok(())
}

/// A string as Go's `encoding/json` writes it (HTML-safe escaping).
fn go_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Vector {
        name: String,
        template: Value,
        go_json: String,
        hash: String,
        collided: std::collections::BTreeMap<String, String>,
    }

    fn vectors() -> Vec<Vector> {
        serde_json::from_str(include_str!("vectors.json")).unwrap()
    }

    /// Every template of `cases.json` encodes as Go encoded it and hashes as Argo hashed it,
    /// with and without a collision count.
    #[test]
    fn templates_hash_as_argo_rollouts_hashes_them() {
        let vectors = vectors();
        assert!(vectors.len() >= 6);
        for v in &vectors {
            assert_eq!(go_json(&v.template).unwrap(), v.go_json, "{}", v.name);
            assert_eq!(
                pod_template_hash(&v.template, None).unwrap(),
                v.hash,
                "{}",
                v.name
            );
            for (count, hash) in &v.collided {
                let count: i32 = count.parse().unwrap();
                assert_eq!(
                    &pod_template_hash(&v.template, Some(count)).unwrap(),
                    hash,
                    "{} with collision count {count}",
                    v.name
                );
            }
        }
    }

    /// The vectors come from the cases (the helper was run on this file).
    #[test]
    fn the_vectors_cover_every_case() {
        let cases: Vec<Value> = serde_json::from_str(include_str!("cases.json")).unwrap();
        let names: Vec<String> = vectors().into_iter().map(|v| v.name).collect();
        let expected: Vec<String> = cases
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, expected);
    }

    #[test]
    fn a_field_of_the_wrong_type_is_named() {
        let template = serde_json::json!({
            "spec": {"containers": [{"name": "a", "ports": [{"containerPort": "eighty"}]}]}
        });
        let e = go_json(&template).unwrap_err();
        assert_eq!(e.path, "spec.containers[0].ports[0].containerPort");
        assert!(e.message.contains("not an integer"), "{e}");
        let bad_quantity = serde_json::json!({
            "spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "lots"}}}]}
        });
        let e = go_json(&bad_quantity).unwrap_err();
        assert_eq!(e.path, "spec.containers[0].resources.limits[\"cpu\"]");
    }

    #[test]
    fn strings_are_escaped_as_go_escapes_them() {
        let mut out = String::new();
        go_string("a<b>&\"\\\n\u{1}\u{2028}é", &mut out);
        assert_eq!(out, r#""a\u003cb\u003e\u0026\"\\\n\u0001\u2028é""#);
    }
}

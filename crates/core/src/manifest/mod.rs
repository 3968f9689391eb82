//! From file contents to typed manifests: input checks, YAML, kind dispatch, strict decoding, and
//! precise errors (file, line, column, field path) for everything that does not fit.

pub mod located;
pub mod yaml;

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::diagnostic::{Diagnostic, Severity};
use crate::spec::{self, Manifest};
pub use yaml::{Budget, Document, Location, Locations};

/// The largest manifest file Flotilla reads. Kubernetes itself refuses objects over 1.5 MiB; this
/// leaves room for files holding many objects while keeping memory bounded.
pub const MAX_FILE_BYTES: usize = 16 * 1024 * 1024;

/// One manifest decoded from a file, with what lint needs to point back into the source.
#[derive(Debug, Clone)]
pub struct LoadedManifest {
    /// The file, as the user named it.
    pub file: String,
    /// The document's position in its file, from 0.
    pub index: usize,
    /// The typed manifest.
    pub manifest: Manifest,
    /// Where each field path is in the source.
    pub locations: Locations,
}

impl LoadedManifest {
    /// A diagnostic about `path` in this manifest, located from the source.
    pub fn diagnostic(
        &self,
        severity: Severity,
        rule: &'static str,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Diagnostic {
        let path = path.into();
        let location = self.locations.find(&path);
        Diagnostic {
            severity,
            rule,
            file: self.file.clone(),
            line: location.line,
            column: location.column,
            kind: self.manifest.kind().to_owned(),
            name: self.manifest.name().to_owned(),
            path,
            message: message.into(),
        }
    }
}

/// What reading one file produced: the manifests that decoded, and every problem found.
#[derive(Debug, Clone, Default)]
pub struct FileLoad {
    /// Manifests that decoded cleanly.
    pub manifests: Vec<LoadedManifest>,
    /// Errors (the file or a document could not be decoded) and notes (ignored kinds).
    pub diagnostics: Vec<Diagnostic>,
    /// The file's ConfigMaps (`apiVersion: v1`, `kind: ConfigMap`), as read: no kind Flotilla
    /// checks (lint notes them as ignored), kept for a caller that reads one of its own (the
    /// daemon's Argo Rollouts notification configuration).
    pub config_maps: Vec<ConfigMapDocument>,
}

/// A ConfigMap document as read, with where each of its fields is.
#[derive(Debug, Clone)]
pub struct ConfigMapDocument {
    /// The file, as the user named it.
    pub file: String,
    /// The document (its value and field locations).
    pub document: Document,
}

impl ConfigMapDocument {
    /// Whether a document is a ConfigMap (core group `v1`).
    fn of(file: &str, document: &Document) -> Option<ConfigMapDocument> {
        let is = document.value["kind"] == "ConfigMap" && document.value["apiVersion"] == "v1";
        is.then(|| ConfigMapDocument {
            file: file.to_owned(),
            document: document.clone(),
        })
    }

    /// `metadata.name`, or empty.
    pub fn name(&self) -> &str {
        self.document.value["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
    }
}

fn file_diagnostic(
    file: &str,
    location: Location,
    rule: &'static str,
    message: String,
) -> Diagnostic {
    Diagnostic {
        severity: Severity::Error,
        rule,
        file: file.to_owned(),
        line: location.line,
        column: location.column,
        kind: String::new(),
        name: String::new(),
        path: String::new(),
        message,
    }
}

/// Decodes the contents of one file (YAML with any number of documents, or JSON).
///
/// Never panics and stays within [`MAX_FILE_BYTES`] and the YAML [`Budget`], whatever the bytes.
/// A file that cannot be read as text, or whose YAML is malformed, yields one error and no
/// manifests: nothing from a broken file is ever half-used.
pub fn load_bytes(file: &str, bytes: &[u8]) -> FileLoad {
    let mut load = FileLoad::default();
    let start = Location { line: 1, column: 1 };
    if bytes.len() > MAX_FILE_BYTES {
        load.diagnostics.push(file_diagnostic(
            file,
            start,
            "input",
            format!(
                "file is {:.1} MiB; Flotilla reads manifest files of at most {} MiB (Kubernetes objects are limited to 1.5 MiB each)",
                bytes.len() as f64 / (1024.0 * 1024.0),
                MAX_FILE_BYTES / (1024 * 1024)
            ),
        ));
        return load;
    }
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if let Some(offset) = bytes.iter().position(|b| *b == 0) {
        let line = bytes[..offset].iter().filter(|b| **b == b'\n').count() as u32 + 1;
        load.diagnostics.push(file_diagnostic(
            file,
            Location { line, column: 1 },
            "input",
            "file is binary (it contains a NUL byte), not YAML or JSON".into(),
        ));
        return load;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(error) => {
            let offset = error.valid_up_to();
            let line = bytes[..offset].iter().filter(|b| **b == b'\n').count() as u32 + 1;
            load.diagnostics.push(file_diagnostic(
                file,
                Location { line, column: 1 },
                "input",
                format!("file is not UTF-8 text (invalid byte at offset {offset}); manifests must be UTF-8 YAML or JSON"),
            ));
            return load;
        }
    };
    let documents = match yaml::parse_documents(text, Budget::default()) {
        Ok(documents) => documents,
        Err(error) => {
            load.diagnostics.push(file_diagnostic(
                file,
                error.location,
                "yaml",
                format!("invalid YAML: {}", error.message),
            ));
            return load;
        }
    };
    if documents.is_empty() {
        load.diagnostics.push(file_diagnostic(
            file,
            start,
            "input",
            "file is empty: it holds no YAML document".into(),
        ));
        return load;
    }
    for document in documents {
        load.config_maps
            .extend(ConfigMapDocument::of(file, &document));
        match decode_document(file, document) {
            Decoded::Manifest(manifest, notes) => {
                load.diagnostics.extend(notes);
                load.manifests.push(*manifest);
            }
            Decoded::Skipped(diagnostic) => load.diagnostics.push(diagnostic),
        }
    }
    load
}

enum Decoded {
    Manifest(Box<LoadedManifest>, Vec<Diagnostic>),
    Skipped(Diagnostic),
}

fn document_diagnostic(
    file: &str,
    document: &Document,
    severity: Severity,
    rule: &'static str,
    kind: &str,
    path: String,
    message: String,
) -> Diagnostic {
    let location = document.locations.find(&path);
    let name = document.value["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Diagnostic {
        severity,
        rule,
        file: file.to_owned(),
        line: location.line,
        column: location.column,
        kind: kind.to_owned(),
        name,
        path,
        message,
    }
}

fn decode_document(file: &str, document: Document) -> Decoded {
    let error = |kind: &str, path: String, message: String| {
        Decoded::Skipped(document_diagnostic(
            file,
            &document,
            Severity::Error,
            "schema",
            kind,
            path,
            message,
        ))
    };
    let Some(object) = document.value.as_object() else {
        return error(
            "",
            String::new(),
            "a manifest must be a mapping with apiVersion, kind, metadata and spec".into(),
        );
    };
    let kind = match object.get("kind") {
        Some(Value::String(kind)) => kind.clone(),
        Some(_) => return error("", "kind".into(), "kind must be a string".into()),
        None => return error("", "kind".into(), "missing field `kind`".into()),
    };
    let api_version = match object.get("apiVersion") {
        Some(Value::String(v)) => v.clone(),
        Some(_) => {
            return error(
                &kind,
                "apiVersion".into(),
                "apiVersion must be a string".into(),
            );
        }
        None => {
            return error(
                &kind,
                "apiVersion".into(),
                "missing field `apiVersion`".into(),
            );
        }
    };
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    let decoded: Result<Manifest, (String, String)> = match (group, kind.as_str()) {
        (
            "argoproj.io",
            "Rollout"
            | "AnalysisTemplate"
            | "ClusterAnalysisTemplate"
            | "AnalysisRun"
            | "Experiment",
        )
        | ("flotilla.dev", "Fleet" | "FleetRollout" | "Scenario")
            if api_version != spec::ARGO_API_VERSION
                && api_version != spec::FLOTILLA_API_VERSION =>
        {
            return error(
                &kind,
                "apiVersion".into(),
                format!("unsupported apiVersion {api_version:?} for kind {kind}"),
            );
        }
        ("argoproj.io", "Rollout") => decode(&document).map(|m| Manifest::Rollout(Box::new(m))),
        ("argoproj.io", "AnalysisTemplate") => {
            decode(&document).map(|m| Manifest::AnalysisTemplate(Box::new(m)))
        }
        ("argoproj.io", "ClusterAnalysisTemplate") => {
            decode(&document).map(|m| Manifest::ClusterAnalysisTemplate(Box::new(m)))
        }
        ("argoproj.io", "AnalysisRun") => {
            decode(&document).map(|m| Manifest::AnalysisRun(Box::new(m)))
        }
        ("argoproj.io", "Experiment") => {
            decode(&document).map(|m| Manifest::Experiment(Box::new(m)))
        }
        ("flotilla.dev", "Fleet") => decode(&document).map(|m| Manifest::Fleet(Box::new(m))),
        ("flotilla.dev", "Scenario") => decode(&document).map(|m| Manifest::Scenario(Box::new(m))),
        ("flotilla.dev", "FleetRollout") => {
            decode(&document).map(|m| Manifest::FleetRollout(Box::new(m)))
        }
        ("", "Service") => decode_lenient(&document).map(|m| Manifest::Service(Box::new(m))),
        ("networking.k8s.io", "Ingress") => {
            decode_lenient(&document).map(|m| Manifest::Ingress(Box::new(m)))
        }
        _ => {
            return Decoded::Skipped(document_diagnostic(
                file,
                &document,
                Severity::Note,
                "ignored-kind",
                &kind,
                String::new(),
                format!("{kind} ({api_version}) is not a kind Flotilla checks; ignored"),
            ));
        }
    };
    match decoded {
        Ok(manifest) => {
            let mut notes = Vec::new();
            if matches!(manifest, Manifest::Experiment(_)) {
                notes.push(document_diagnostic(
                    file,
                    &document,
                    Severity::Note,
                    "experiment-not-executed",
                    &kind,
                    String::new(),
                    "Experiment parsed and validated; Flotilla does not execute experiments yet"
                        .into(),
                ));
            }
            let Document {
                index, locations, ..
            } = document;
            Decoded::Manifest(
                Box::new(LoadedManifest {
                    file: file.to_owned(),
                    index,
                    manifest,
                    locations,
                }),
                notes,
            )
        }
        Err((path, message)) => error(&kind, path, message),
    }
}

/// Decodes strictly: unknown fields anywhere are errors, including inside the Kubernetes types
/// (pod templates, Job specs, metadata) whose own deserializers would silently drop them, and
/// resource quantities must parse.
fn decode<T: DeserializeOwned + Serialize>(document: &Document) -> Result<T, (String, String)> {
    let typed: T = decode_lenient(document)?;
    let reencoded = serde_json::to_value(&typed).map_err(|e| (String::new(), e.to_string()))?;
    if let Some(path) = first_dropped_field(&document.value, &reencoded, String::new()) {
        let field = path.rsplit(['.', '[']).next().unwrap_or(&path).to_owned();
        return Err((path, format!("unknown field `{field}`")));
    }
    if let Some((path, message)) = first_bad_quantity(&document.value, String::new()) {
        return Err((path, message));
    }
    Ok(typed)
}

/// Decodes with serde, turning the first error into a field path and a message.
fn decode_lenient<T: DeserializeOwned>(document: &Document) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize::<_, T>(&document.value).map_err(|error| {
        let mut path = error.path().to_string();
        if path == "." || path == "?" {
            path.clear();
        }
        let message = error.inner().to_string();
        // serde reports an unknown or missing field at its parent; point at the field itself.
        for prefix in ["unknown field `", "missing field `"] {
            if let Some(rest) = message.strip_prefix(prefix)
                && let Some(field) = rest.split('`').next()
            {
                let last = path.rsplit(['.', '[']).next().unwrap_or("");
                if last == field {
                    continue;
                }
                path = if path.is_empty() {
                    field.to_owned()
                } else {
                    format!("{path}.{field}")
                };
            }
        }
        (path, message)
    })
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// The first field present in the input with a non-empty value that the typed model did not keep.
fn first_dropped_field(input: &Value, output: &Value, path: String) -> Option<String> {
    match (input, output) {
        (Value::Object(input), Value::Object(output)) => {
            for (key, value) in input {
                let child = join(&path, key);
                let empty = match value {
                    Value::Null => true,
                    Value::Array(a) => a.is_empty(),
                    Value::Object(o) => o.is_empty(),
                    _ => false,
                };
                match output.get(key) {
                    None if !empty => return Some(child),
                    None => {}
                    Some(kept) => {
                        if let Some(found) = first_dropped_field(value, kept, child) {
                            return Some(found);
                        }
                    }
                }
            }
            None
        }
        (Value::Array(input), Value::Array(output)) => input
            .iter()
            .zip(output)
            .enumerate()
            .find_map(|(i, (a, b))| first_dropped_field(a, b, format!("{path}[{i}]"))),
        _ => None,
    }
}

/// The first unparsable resource quantity under any `resources.{limits,requests}`.
fn first_bad_quantity(value: &Value, path: String) -> Option<(String, String)> {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let child_path = join(&path, key);
                if (key == "limits" || key == "requests")
                    && path.ends_with("resources")
                    && let Value::Object(quantities) = child
                {
                    for (resource, quantity) in quantities {
                        let text = match quantity {
                            Value::String(s) => s.clone(),
                            Value::Number(n) => n.to_string(),
                            _ => String::new(),
                        };
                        if let Err(message) = spec::common::validate_quantity(&text) {
                            return Some((join(&child_path, resource), message));
                        }
                    }
                }
                if let Some(found) = first_bad_quantity(child, child_path) {
                    return Some(found);
                }
            }
            None
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| first_bad_quantity(item, format!("{path}[{i}]"))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(load: &FileLoad) -> Vec<&Diagnostic> {
        load.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .collect()
    }

    #[test]
    fn empty_binary_and_oversized_files_get_one_clear_error() {
        for (bytes, needle) in [
            (Vec::new(), "empty"),
            (b"   \n# only a comment\n".to_vec(), "empty"),
            (vec![0x7f, b'E', b'L', b'F', 0, 1, 2], "binary"),
            (vec![0xff, 0xfe, b'a'], "UTF-8"),
            (vec![b'a'; MAX_FILE_BYTES + 1], "MiB"),
        ] {
            let load = load_bytes("f.yaml", &bytes);
            assert!(load.manifests.is_empty());
            assert_eq!(load.diagnostics.len(), 1, "{:?}", load.diagnostics);
            assert!(
                load.diagnostics[0].message.contains(needle),
                "{}",
                load.diagnostics[0]
            );
        }
    }

    #[test]
    fn unknown_kinds_are_noted_not_failed() {
        let load = load_bytes(
            "f.yaml",
            b"apiVersion: networking.istio.io/v1alpha3\nkind: VirtualService\nmetadata: {name: vs}\nspec: {}\n",
        );
        assert!(errors(&load).is_empty());
        assert_eq!(load.diagnostics[0].severity, Severity::Note);
        assert_eq!(load.diagnostics[0].kind, "VirtualService");
    }

    #[test]
    fn config_maps_are_kept_as_read_and_still_noted_as_ignored() {
        let load = load_bytes(
            "f.yaml",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata:\n  a.b: |\n    x\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
        );
        assert!(errors(&load).is_empty());
        assert_eq!(load.diagnostics.len(), 2, "both noted as ignored kinds");
        assert_eq!(load.config_maps.len(), 1, "only the ConfigMap is kept");
        let cm = &load.config_maps[0];
        assert_eq!((cm.file.as_str(), cm.name()), ("f.yaml", "cm"));
        assert_eq!(cm.document.value["data"]["a.b"], "x\n");
        assert_eq!(cm.document.locations.find("data.a.b").line, 5);
    }

    #[test]
    fn missing_kind_is_an_error_at_the_document() {
        let load = load_bytes("f.yaml", b"---\na: 1\n---\napiVersion: v1\n");
        assert_eq!(errors(&load).len(), 2);
        assert_eq!(load.diagnostics[1].line, 4);
    }

    #[test]
    fn dropped_fields_are_found_below_lenient_kubernetes_types() {
        let input = serde_json::json!({"a": {"b": [{"c": 1, "d": 2, "e": null}]}});
        let output = serde_json::json!({"a": {"b": [{"c": 1}]}});
        assert_eq!(
            first_dropped_field(&input, &output, String::new()),
            Some("a.b[0].d".into())
        );
    }

    #[test]
    fn bad_quantities_are_found_with_their_path() {
        let input = serde_json::json!({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1GB"}}}]});
        let (path, _) = first_bad_quantity(&input, String::new()).unwrap();
        assert_eq!(path, "containers[0].resources.limits.memory");
    }
}

#[cfg(test)]
mod property_tests;

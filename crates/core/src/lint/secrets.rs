//! Literal secrets in manifests (`flotilla/literal-secret`, a warning): Git is the desired state
//! and everyone who can read the repository reads it, so tokens and passwords belong in Secrets
//! (`valueFrom.secretKeyRef`, `{{args.…}}` with a secret), never as literal values.

use serde_json::Value;

use super::Sink;
use crate::manifest::LoadedManifest;
use crate::spec::Manifest;

/// Names of fields or entries whose literal value is a secret.
const SECRET_NAMES: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "api_key",
    "api-key",
    "authorization",
    "credential",
    "private_key",
    "privatekey",
];

/// Prefixes of well-known token formats.
const TOKEN_PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghs_",
    "ghu_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "sk_live_",
    "AKIA",
];

/// Checks one manifest.
pub(crate) fn check(sink: &mut Sink, loaded: &LoadedManifest) {
    let value = match &loaded.manifest {
        Manifest::Rollout(r) => serde_json::to_value(r),
        Manifest::AnalysisTemplate(t) | Manifest::ClusterAnalysisTemplate(t) => {
            serde_json::to_value(t)
        }
        Manifest::AnalysisRun(r) => serde_json::to_value(r),
        Manifest::Experiment(e) => serde_json::to_value(e),
        Manifest::Fleet(f) => serde_json::to_value(f),
        Manifest::FleetRollout(f) => serde_json::to_value(f),
        _ => return,
    };
    let Ok(value) = value else { return };
    let mut found = Vec::new();
    walk(&value, String::new(), None, &mut found);
    for (path, why) in found {
        sink.warn(
            loaded,
            "flotilla/literal-secret",
            path,
            format!("{why}: a literal secret in a manifest is readable by everyone who can read the repository; use a Secret (valueFrom.secretKeyRef, or a template argument from a secret)"),
        );
    }
}

fn secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_NAMES.iter().any(|s| lower.contains(s))
}

/// Whether a string is a literal (not a placeholder or a reference).
fn literal(text: &str) -> bool {
    let t = text.trim();
    !t.is_empty() && !t.contains("{{") && !t.contains("$(") && !t.starts_with("${")
}

/// What makes a string look like a token by itself, if it does.
fn looks_like_token(text: &str) -> Option<String> {
    let t = text.trim();
    if let Some(rest) = t
        .strip_prefix("Bearer ")
        .or_else(|| t.strip_prefix("bearer "))
        && literal(rest)
        && rest.len() >= 8
    {
        return Some("a literal bearer token".into());
    }
    TOKEN_PREFIXES
        .iter()
        .find(|p| t.starts_with(**p) && t.len() >= p.len() + 12 && !t.contains(' '))
        .map(|p| format!("a string shaped like a {p}… token"))
}

/// Walks a value: a string that looks like a token, a field named like a secret with a literal
/// value, or a `{name|key: <secret-like>, value: <literal>}` entry (env vars, headers).
fn walk(value: &Value, path: String, key: Option<&str>, found: &mut Vec<(String, String)>) {
    match value {
        Value::String(text) => {
            if let Some(why) = looks_like_token(text) {
                found.push((path, why));
            } else if let Some(key) = key
                && key != "value"
                && secret_name(key)
                && literal(text)
            {
                found.push((path, format!("field {key:?} has a literal value")));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, format!("{path}[{i}]"), key, found);
            }
        }
        Value::Object(map) => {
            let entry_name = map
                .get("name")
                .or_else(|| map.get("key"))
                .and_then(Value::as_str);
            if let (Some(name), Some(Value::String(v))) = (entry_name, map.get("value"))
                && secret_name(name)
                && literal(v)
                && looks_like_token(v).is_none()
            {
                let at = if path.is_empty() {
                    "value".to_owned()
                } else {
                    format!("{path}.value")
                };
                found.push((at, format!("{name:?} has a literal value")));
            }
            for (k, v) in map {
                // Names and keys are not values; metadata is not a secret.
                if matches!(k.as_str(), "name" | "key" | "metadata" | "secretKeyRef") {
                    continue;
                }
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(v, child, Some(k), found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use crate::lint::{Options, lint};
    use crate::manifest::load_bytes;

    const TEXT: &str = r#"apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: app}
spec:
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers:
        - name: app
          image: app:1
          env:
            - {name: LOG_LEVEL, value: debug}
            - {name: DB_PASSWORD, value: hunter2hunter2}
            - name: API_TOKEN
              valueFrom: {secretKeyRef: {name: app, key: token}}
            - {name: GH, value: ghp_0123456789abcdefghijklmnopqrstuvwxyz}
  strategy:
    canary:
      steps: [{setWeight: 20}]
---
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {name: web}
spec:
  args: [{name: token, valueFrom: {secretKeyRef: {name: s, key: t}}}]
  metrics:
    - name: m
      successCondition: result == 1
      provider:
        web:
          url: http://example.test/
          headers:
            - {key: Authorization, value: "Bearer abcdef0123456789"}
            - {key: X-Token, value: "{{args.token}}"}
"#;

    #[test]
    fn literal_tokens_and_passwords_are_warned_about_references_are_not() {
        let load = load_bytes("m.yaml", TEXT.as_bytes());
        assert!(load.diagnostics.is_empty(), "{:?}", load.diagnostics);
        let found: Vec<String> = lint(&load.manifests, Options::default())
            .into_iter()
            .filter(|d| d.rule == "flotilla/literal-secret")
            .map(|d| format!("{}:{} {}", d.line, d.path, d.message))
            .collect();
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(
            found[0].starts_with("14:spec.template.spec.containers[0].env[1].value")
                && found[0].contains("\"DB_PASSWORD\" has a literal value"),
            "{found:#?}"
        );
        assert!(
            found[1].starts_with("17:spec.template.spec.containers[0].env[3].value")
                && found[1].contains("ghp_"),
            "{found:#?}"
        );
        assert!(
            found[2].starts_with("34:spec.metrics[0].provider.web.headers[0].value")
                && found[2].contains("bearer token"),
            "{found:#?}"
        );
    }
}

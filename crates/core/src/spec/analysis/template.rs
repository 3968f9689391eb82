//! An AnalysisTemplate's spec and its building blocks: the metrics it lists, the arguments it
//! declares (and where their values come from), dry-run and retention rules, and references to
//! other templates merged in.

use serde::{Deserialize, Serialize};

use super::metric::Metric;

/// The body of an AnalysisTemplate or ClusterAnalysisTemplate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisTemplateSpec {
    /// Metrics measured by runs created from this template (may be empty when `templates` is set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<Metric>,
    /// Parameters the template declares; substituted as `{{args.<name>}}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Argument>,
    /// Metrics evaluated in dry-run mode: measured and reported, never deciding the run's phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<DryRun>,
    /// Per-metric caps on how many measurements are kept in the run's status (upstream default 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurement_retention: Vec<MeasurementRetention>,
    /// Other templates whose metrics, args and settings are merged into this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<AnalysisTemplateRef>,
}

/// A reference from one template to another, to be merged in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisTemplateRef {
    /// Name of the referenced template (upstream's schema leaves it optional, but an empty name
    /// can never resolve, so it is required here).
    pub template_name: String,
    /// Look the name up among ClusterAnalysisTemplates instead of namespaced ones (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_scope: Option<bool>,
}

/// Selects metrics to run in dry-run mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DryRun {
    /// Metric name pattern (an unanchored regular expression; `*` or `.*` selects every metric).
    pub metric_name: String,
}

/// Caps the number of measurements kept for matching metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MeasurementRetention {
    /// Metric name pattern the cap applies to (an unanchored regular expression).
    pub metric_name: String,
    /// Number of most recent measurements to keep (upstream default without a rule: 10).
    pub limit: i32,
}

/// A template or run argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Argument {
    /// Name used in `{{args.<name>}}` placeholders.
    pub name: String,
    /// Literal value; when neither this nor `valueFrom` is set the caller must supply one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Where to read the value from instead of a literal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ValueFrom>,
}

impl Argument {
    /// The Secret key the argument's value comes from (`valueFrom.secretKeyRef`), if it does.
    pub fn secret_key_ref(&self) -> Option<&SecretKeyRef> {
        self.value_from.as_ref()?.secret_key_ref.as_ref()
    }
}

/// Source of an argument's value: exactly one of the fields is expected.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValueFrom {
    /// A key of a Secret in the run's namespace (the value is redacted in status and logs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
    /// A field of the owning object, e.g. `metadata.labels['app']`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<FieldRef>,
}

/// A key inside a Kubernetes Secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyRef {
    /// The Secret's name.
    pub name: String,
    /// The key within the Secret's data.
    pub key: String,
}

/// A path to a field of the owning object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FieldRef {
    /// Dotted path of the field, e.g. `metadata.name`.
    pub field_path: String,
}

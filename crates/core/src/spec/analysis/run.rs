//! An AnalysisRun's spec and status: the analysis phases, and the metric results and
//! measurements the controller records.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::metric::Metric;
use super::template::{Argument, DryRun, MeasurementRetention};

/// The phase of an AnalysisRun, one of its metrics, one measurement, or an Experiment.
///
/// Serialized exactly as `Pending`, `Running`, `Successful`, `Failed`, `Error`, `Inconclusive`.
/// Pending and Running are in progress; the other four are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum AnalysisPhase {
    /// Not started yet (no measurement taken).
    #[default]
    Pending,
    /// In progress.
    Running,
    /// Completed and passed.
    Successful,
    /// Completed and failed its criteria.
    Failed,
    /// Could not be measured (provider, query or expression error).
    Error,
    /// Completed without a clear pass or fail.
    Inconclusive,
}

impl AnalysisPhase {
    /// Rank in Argo's "worst wins" order, Successful (0) < Running < Pending < Inconclusive <
    /// Error < Failed (5): a run's phase is the highest-ranked phase among its metrics.
    pub fn severity(self) -> u8 {
        match self {
            AnalysisPhase::Successful => 0,
            AnalysisPhase::Running => 1,
            AnalysisPhase::Pending => 2,
            AnalysisPhase::Inconclusive => 3,
            AnalysisPhase::Error => 4,
            AnalysisPhase::Failed => 5,
        }
    }

    /// Whether the phase is final (Successful, Failed, Error or Inconclusive).
    pub fn is_completed(self) -> bool {
        !matches!(self, AnalysisPhase::Pending | AnalysisPhase::Running)
    }

    /// The phase's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            AnalysisPhase::Pending => "Pending",
            AnalysisPhase::Running => "Running",
            AnalysisPhase::Successful => "Successful",
            AnalysisPhase::Failed => "Failed",
            AnalysisPhase::Error => "Error",
            AnalysisPhase::Inconclusive => "Inconclusive",
        }
    }
}

/// Reads an optional phase where Go clients may write the empty string for "not set yet".
pub(super) fn blank_phase_as_none<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<AnalysisPhase>, D::Error> {
    let text: Option<String> = Option::deserialize(deserializer)?;
    match text.as_deref() {
        None | Some("") => Ok(None),
        Some(name) => {
            AnalysisPhase::deserialize(serde::de::value::StrDeserializer::<D::Error>::new(name))
                .map(Some)
        }
    }
}

/// The body of an AnalysisRun: the resolved metrics and arguments of one analysis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisRunSpec {
    /// Metrics to measure (required).
    pub metrics: Vec<Metric>,
    /// Argument values for the run's placeholders.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Argument>,
    /// Stop the run early; in-flight measurements are terminated (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminate: Option<bool>,
    /// Metrics evaluated in dry-run mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<DryRun>,
    /// Per-metric caps on retained measurements (default 10 each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurement_retention: Vec<MeasurementRetention>,
    /// When to garbage-collect the finished run (default: kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_strategy: Option<TtlStrategy>,
}

/// Time-to-live of a finished AnalysisRun.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TtlStrategy {
    /// Seconds to keep the run after it completes, whatever the outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_after_completion: Option<i32>,
    /// Seconds to keep the run after it fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_after_failure: Option<i32>,
    /// Seconds to keep the run after it succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_after_success: Option<i32>,
}

/// The observed state of an AnalysisRun.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisRunStatus {
    /// Overall phase; Go clients write `""` before the first reconcile, read here as `None`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "blank_phase_as_none"
    )]
    pub phase: Option<AnalysisPhase>,
    /// Why the run is in its phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Per-metric results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metric_results: Vec<MetricResult>,
    /// When the run started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When the run completed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// Tally of the wet (non-dry-run) metrics' final phases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_summary: Option<RunSummary>,
    /// Tally of the dry-run metrics' final phases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run_summary: Option<RunSummary>,
}

/// Counts of metrics by final phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunSummary {
    /// Number of metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// Metrics that ended Successful.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successful: Option<i32>,
    /// Metrics that ended Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    /// Metrics that ended Inconclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inconclusive: Option<i32>,
    /// Metrics that ended in Error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<i32>,
}

/// The state and recent measurements of one metric in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetricResult {
    /// The metric's name.
    pub name: String,
    /// The metric's aggregate phase.
    pub phase: AnalysisPhase,
    /// Most recent measurements, oldest first (capped by measurement retention, default 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurements: Vec<Measurement>,
    /// Why the metric is in its phase (e.g. the last error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Measurements that did not error (successful + failed + inconclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// Successful measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successful: Option<i32>,
    /// Failed measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    /// Inconclusive measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inconclusive: Option<i32>,
    /// Errored measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<i32>,
    /// Errors in a row; reset by any non-error measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_error: Option<i32>,
    /// Successes in a row; reset by any other outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_success: Option<i32>,
    /// Whether the metric runs in dry-run mode (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// Provider state for the metric, e.g. the resolved Prometheus query.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// One measurement of a metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Measurement {
    /// The measurement's verdict (Running while in flight).
    pub phase: AnalysisPhase,
    /// Explanation, e.g. a provider error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the measurement started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When the value was collected (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// The measured value, as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Provider state for the measurement, e.g. a Job name or Kayenta run id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// When an in-flight measurement should next be polled (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_at: Option<String>,
}

//! Offline evaluation of recorded results on a virtual clock: what-if questions, tests, and the
//! `flotilla analysis replay` command. Pure: JSON text in, a run out.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;
use serde_json::Value;

use super::condition::MetricResult;
use super::plan::RunPlan;
use super::provider::Outcome;
use super::run::{Run, Summary, value};
use crate::spec::analysis::AnalysisPhase;
use crate::time::Millis;

/// Recorded results to replay, per metric, in order.
#[derive(Debug, Clone, Default)]
pub struct ReplayInput {
    /// Results per metric name.
    pub measurements: BTreeMap<String, VecDeque<Value>>,
    /// Terminate the run once the results are used up (as when a rollout is promoted).
    pub terminate: bool,
}

/// Why a replay input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ReplayError(pub String);

impl ReplayInput {
    /// Parses `{"measurements": {"<metric>": [<result>, ...]}, "terminate": false}`.
    pub fn parse(text: &str) -> Result<ReplayInput, ReplayError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| ReplayError(format!("invalid JSON: {e}")))?;
        let Value::Object(mut top) = value else {
            return Err(ReplayError(
                "the input must be an object with a \"measurements\" field".into(),
            ));
        };
        for key in top.keys() {
            if key != "measurements" && key != "terminate" {
                return Err(ReplayError(format!(
                    "unknown field {key:?} (expected \"measurements\" and \"terminate\")"
                )));
            }
        }
        let terminate = match top.remove("terminate") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => b,
            Some(other) => {
                return Err(ReplayError(format!(
                    "\"terminate\" must be true or false, not {other}"
                )));
            }
        };
        let Some(Value::Object(map)) = top.remove("measurements") else {
            return Err(ReplayError(
                "\"measurements\" must be an object of metric name → list of results".into(),
            ));
        };
        let mut measurements = BTreeMap::new();
        for (name, results) in map {
            let Value::Array(results) = results else {
                return Err(ReplayError(format!(
                    "measurements.{name} must be a list of results"
                )));
            };
            measurements.insert(name, results.into_iter().collect());
        }
        Ok(ReplayInput {
            measurements,
            terminate,
        })
    }
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "+Inf" | "Inf" => Some(f64::INFINITY),
            "-Inf" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// Turns one recorded result into a provider outcome. For a Job metric, a number is the exit
/// code (0: Successful, otherwise Failed).
pub fn outcome_of(recorded: &Value, is_job: bool) -> Outcome {
    if let Value::Object(map) = recorded
        && map.len() == 1
        && let Some(error) = map.get("error")
    {
        return Outcome::Error(
            error
                .as_str()
                .map_or_else(|| error.to_string(), str::to_owned),
        );
    }
    if is_job && let Some(code) = number(recorded) {
        let phase = if code == 0.0 {
            AnalysisPhase::Successful
        } else {
            AnalysisPhase::Failed
        };
        return Outcome::Decided {
            phase,
            value: format!("{code}"),
            message: String::new(),
            metadata: BTreeMap::new(),
        };
    }
    let result = match recorded {
        Value::Null => MetricResult::Nil,
        Value::Array(items) => match items.iter().map(number).collect::<Option<Vec<f64>>>() {
            Some(values) => MetricResult::Vector(values),
            None => MetricResult::Json(recorded.clone()),
        },
        other => match number(other) {
            Some(v) => MetricResult::Scalar(v),
            None => MetricResult::Json(other.clone()),
        },
    };
    value(result)
}

/// Replays recorded results through the run machine on a virtual clock starting at 0.
///
/// At each instant every due metric is measured, then the run is assessed; the replay stops
/// before an instant at which a due metric has no result left. With `terminate`, the run is then
/// terminated as when a rollout is promoted.
pub fn replay(plan: &RunPlan, mut input: ReplayInput) -> Result<Run, ReplayError> {
    for name in input.measurements.keys() {
        if !plan.metrics.iter().any(|m| &m.name == name) {
            return Err(ReplayError(format!(
                "measurements for unknown metric {name:?}"
            )));
        }
    }
    let mut now: Millis = 0;
    let mut run = Run::new(plan, now);
    loop {
        let due = run.due(plan, now);
        let starved = due.iter().any(|&i| {
            input
                .measurements
                .get(&plan.metrics[i].name)
                .is_none_or(|q| q.is_empty())
        });
        if due.is_empty() || starved {
            break;
        }
        for request in run.poll_due(plan, now) {
            let metric = &plan.metrics[request.metric_index];
            let recorded = input
                .measurements
                .get_mut(&metric.name)
                .and_then(|q| q.pop_front())
                .expect("checked above: every due metric has a result");
            run.handle_outcome(
                plan,
                request.metric_index,
                now,
                outcome_of(&recorded, metric.provider.job.is_some()),
            );
        }
        run.assess(plan, now);
        match run.next_due(plan) {
            Some(next) => now = next.max(now),
            None => break,
        }
    }
    if input.terminate && !run.is_completed() {
        run.terminate();
        for index in run.to_cancel() {
            run.handle_outcome(plan, index, now, Outcome::Terminated);
        }
        run.assess(plan, now);
    }
    Ok(run)
}

/// A run as `flotilla analysis replay` and `analysis run` print it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunReport {
    /// The run's phase.
    pub phase: AnalysisPhase,
    /// The run's message.
    pub message: String,
    /// Each metric.
    pub metrics: Vec<MetricReport>,
    /// Verdicts of the dry-run metrics.
    pub dry_run_summary: Summary,
    /// Whether the verdict rests on evidence (see [`Run::has_evidence`]).
    pub evidence: bool,
}

/// One metric of a [`RunReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricReport {
    /// The metric's name.
    pub name: String,
    /// Its phase.
    pub phase: AnalysisPhase,
    /// Its message.
    pub message: String,
    /// Counted measurements.
    pub count: u32,
    /// Successful measurements.
    pub successful: u32,
    /// Failed measurements.
    pub failed: u32,
    /// Inconclusive measurements.
    pub inconclusive: u32,
    /// Error measurements.
    pub error: u32,
    /// Errors in a row.
    pub consecutive_error: u32,
    /// Successes in a row.
    pub consecutive_success: u32,
    /// Whether the metric is dry-run.
    pub dry_run: bool,
    /// The retained measurements.
    pub measurements: Vec<MeasurementReport>,
}

/// One measurement of a [`MetricReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasurementReport {
    /// Its phase.
    pub phase: AnalysisPhase,
    /// Its value, as Argo stores it.
    pub value: String,
}

impl RunReport {
    /// The report of a run.
    pub fn of(run: &Run, plan: &RunPlan) -> RunReport {
        RunReport {
            phase: run.phase,
            message: run.message.clone(),
            metrics: run
                .metrics
                .iter()
                .map(|m| MetricReport {
                    name: m.name.clone(),
                    phase: m.phase,
                    message: m.message.clone(),
                    count: m.count,
                    successful: m.successful,
                    failed: m.failed,
                    inconclusive: m.inconclusive,
                    error: m.error,
                    consecutive_error: m.consecutive_error,
                    consecutive_success: m.consecutive_success,
                    dry_run: m.dry_run,
                    measurements: m
                        .measurements
                        .iter()
                        .map(|x| MeasurementReport {
                            phase: x.phase,
                            value: x.value.clone(),
                        })
                        .collect(),
                })
                .collect(),
            dry_run_summary: run.dry_run_summary,
            evidence: run.has_evidence(plan),
        }
    }

    /// The exit code `flotilla analysis` commands use: 0 Successful, 1 Failed, 2 Inconclusive
    /// (or no verdict yet), 3 Error.
    pub fn exit_code(&self) -> u8 {
        match self.phase {
            AnalysisPhase::Successful => 0,
            AnalysisPhase::Failed => 1,
            AnalysisPhase::Error => 3,
            AnalysisPhase::Inconclusive | AnalysisPhase::Running | AnalysisPhase::Pending => 2,
        }
    }
}

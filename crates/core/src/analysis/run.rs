//! The AnalysisRun state machine, with Argo Rollouts' semantics (`analysis/analysis.go`), driven
//! by `now` and free of I/O.
//!
//! A driver calls [`Run::poll_due`] to learn which measurements are due (the machine marks them
//! in flight), takes them through a [`super::Measurer`], feeds each outcome back with
//! [`Run::handle_outcome`], then calls [`Run::assess`]. [`Run::next_due`] says when to call
//! again. The same machine serves replay, backtest, simulation and the live runtime.
//!
//! Time: a measurement is due at `lastFinishedAt + interval` (10 s after an Error, whatever the
//! interval), the first at `startedAt + initialDelay`. Argo compares with a strict "after" on a
//! wall clock that has always moved on by the time it looks; on a virtual clock the machine
//! treats the due instant itself as due.
//!
//! This module holds the run's state and its schedule; `record` (an outcome into its metric),
//! `verdict` (the run's phase from its metrics) and `evidence` (what the verdict rests on) are
//! child modules adding to [`Run`].

mod evidence;
mod record;
mod verdict;

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::condition::MetricResult;
use super::plan::{MetricPlan, RunPlan};
use super::provider::{MeasureRequest, Outcome};
use crate::spec::analysis::{AnalysisPhase, OnInconclusive};
use crate::time::Millis;

/// Argo's retry interval after an Error measurement, in milliseconds.
pub const ERROR_RETRY_INTERVAL: u64 = 10_000;

/// One measurement, as recorded in the run's status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Measurement {
    /// Running while in flight, then Successful, Failed, Inconclusive or Error.
    pub phase: AnalysisPhase,
    /// The value as Argo stores it (`"0.97"`, `"[0.97,0.5]"`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Why (an error, a job's output).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When it started.
    pub started_at: Millis,
    /// When it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Millis>,
    /// Provider details (Argo's `metadata`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Whether the result carried evidence: a non-empty, non-NaN value.
    pub evidence: bool,
}

/// One metric's progress and counters.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricState {
    /// The metric's name.
    pub name: String,
    /// Pending until measured, Running, then a completed phase.
    pub phase: AnalysisPhase,
    /// The last measurement's message (or the dry-run assessment).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The retained measurements, oldest first.
    pub measurements: VecDeque<Measurement>,
    /// Measurements counted (Successful, Failed or Inconclusive).
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
    /// Failures in a row (for the Flotilla extension `consecutiveFailureLimit`).
    pub consecutive_failure: u32,
    /// Successful measurements whose result carried no evidence.
    pub successful_without_evidence: u32,
    /// Polls that recorded no measurement because the evidence was still too thin (a Flotilla
    /// composite metric deferring); they count toward `count`.
    #[serde(default)]
    pub deferred: u32,
    /// Why the last poll recorded nothing (cleared by the next measurement).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub waiting: String,
    /// When the last measurement finished, and with which phase (kept apart from
    /// `measurements`, which retention may empty).
    pub last_finished: Option<(Millis, AnalysisPhase)>,
    /// A calibrated metric's reference (`baseline.*`: the values and where they came from),
    /// kept from the first measurement that found one and reused by every later one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub calibration: BTreeMap<String, String>,
    /// Whether a measurement is in flight.
    pub in_flight: bool,
    /// Whether the metric is dry-run.
    pub dry_run: bool,
}

/// Counts of metric verdicts (Argo's `runSummary` / `dryRunSummary`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Summary {
    /// Metrics counted.
    pub count: u32,
    /// Completed Successful.
    pub successful: u32,
    /// Completed Failed.
    pub failed: u32,
    /// Completed Inconclusive.
    pub inconclusive: u32,
    /// Completed Error.
    pub error: u32,
}

/// The state of one analysis run. Serializable: persisting it and restoring it with the same
/// plan continues with the same outputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// The run's phase.
    pub phase: AnalysisPhase,
    /// The run's message (Argo's form).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the run started.
    pub started_at: Millis,
    /// When the run completed.
    pub completed_at: Option<Millis>,
    /// Whether termination was requested (`spec.terminate`).
    pub terminate: bool,
    /// Per-metric state, in plan order.
    pub metrics: Vec<MetricState>,
    /// Verdicts of the wet metrics.
    pub run_summary: Summary,
    /// Verdicts of the dry-run metrics.
    pub dry_run_summary: Summary,
}

impl Run {
    /// A new run, started at `now`.
    pub fn new(plan: &RunPlan, now: Millis) -> Run {
        Run {
            phase: AnalysisPhase::Pending,
            message: String::new(),
            started_at: now,
            completed_at: None,
            terminate: false,
            metrics: plan
                .metrics
                .iter()
                .map(|m| MetricState {
                    name: m.name.clone(),
                    dry_run: m.dry_run,
                    ..MetricState::default()
                })
                .collect(),
            run_summary: Summary::default(),
            dry_run_summary: Summary::default(),
        }
    }

    /// A run that could not start (unresolvable arguments, an invalid spec): Error at once.
    pub fn failed_to_start(message: impl Into<String>, now: Millis) -> Run {
        Run {
            phase: AnalysisPhase::Error,
            message: message.into(),
            started_at: now,
            completed_at: Some(now),
            terminate: false,
            metrics: Vec::new(),
            run_summary: Summary::default(),
            dry_run_summary: Summary::default(),
        }
    }

    /// Whether the run has reached a final phase.
    pub fn is_completed(&self) -> bool {
        self.phase.is_completed()
    }

    /// Argo's `IsTerminating`: termination was requested, or a wet metric has failed, errored or
    /// gone inconclusive (which stops its siblings).
    pub fn is_terminating(&self) -> bool {
        self.terminate
            || self.metrics.iter().any(|m| {
                !m.dry_run
                    && matches!(
                        m.phase,
                        AnalysisPhase::Failed | AnalysisPhase::Error | AnalysisPhase::Inconclusive
                    )
            })
    }

    /// Requests termination (as when the rollout is promoted or aborted).
    pub fn terminate(&mut self) {
        self.terminate = true;
    }

    fn metric_completed(&self, index: usize) -> bool {
        self.metrics[index].phase.is_completed()
    }

    /// When metric `index` is next due, if it will ever be (None: never, or in flight).
    fn due_at(&self, plan: &MetricPlan, index: usize) -> Option<Millis> {
        let state = &self.metrics[index];
        if self.metric_completed(index) || state.in_flight {
            return None;
        }
        match state.last_finished {
            None => Some(self.started_at + plan.initial_delay.unwrap_or(0) as Millis),
            Some((finished_at, last_phase)) => {
                if plan
                    .effective_count()
                    .is_some_and(|count| i64::from(state.count + state.deferred) >= count)
                {
                    return None;
                }
                let interval = if last_phase == AnalysisPhase::Error {
                    ERROR_RETRY_INTERVAL
                } else {
                    plan.interval?
                };
                Some(finished_at + interval as Millis)
            }
        }
    }

    /// The metrics due at `now`, without starting them.
    pub fn due(&self, plan: &RunPlan, now: Millis) -> Vec<usize> {
        if self.is_completed() || self.is_terminating() {
            return Vec::new();
        }
        plan.metrics
            .iter()
            .enumerate()
            .filter(|(index, metric)| self.due_at(metric, *index).is_some_and(|due| due <= now))
            .map(|(index, _)| index)
            .collect()
    }

    /// Measurements due at `now`, each marked in flight. Nothing is due once the run completed
    /// or while it is terminating.
    pub fn poll_due(&mut self, plan: &RunPlan, now: Millis) -> Vec<MeasureRequest> {
        if self.is_completed() || self.is_terminating() {
            return Vec::new();
        }
        let mut requests = Vec::new();
        for (index, metric) in plan.metrics.iter().enumerate() {
            if self.due_at(metric, index).is_some_and(|due| due <= now) {
                let state = &mut self.metrics[index];
                state.in_flight = true;
                // Grown one at a time: retention bounds the list, and in a large fleet a
                // doubled capacity would cost more than the measurements kept.
                if state.measurements.len() == state.measurements.capacity() {
                    state.measurements.reserve_exact(1);
                }
                state.measurements.push_back(Measurement {
                    phase: AnalysisPhase::Running,
                    value: String::new(),
                    message: String::new(),
                    started_at: now,
                    finished_at: None,
                    metadata: BTreeMap::new(),
                    evidence: false,
                });
                let polls = i64::from(state.count + state.deferred) + 1;
                requests.push(MeasureRequest {
                    metric_index: index,
                    metric: metric.name.clone(),
                    provider: metric.provider.clone(),
                    at: now,
                    window: None,
                    not_before: Some(self.started_at),
                    step: None,
                    baseline: metric.baseline.clone(),
                    reference: (!state.calibration.is_empty()).then(|| state.calibration.clone()),
                    last: metric.effective_count().is_some_and(|count| polls >= count),
                });
            }
        }
        if self.phase == AnalysisPhase::Pending && !requests.is_empty() {
            self.phase = AnalysisPhase::Running;
        }
        requests
    }

    /// Forgets the measurements in flight (their answers will never come: the process that
    /// asked is gone), so that they are due again at once. Used when resuming persisted state.
    pub fn abandon_in_flight(&mut self) {
        for metric in self.metrics.iter_mut().filter(|m| m.in_flight) {
            metric.in_flight = false;
            if metric
                .measurements
                .back()
                .is_some_and(|m| m.phase == AnalysisPhase::Running)
            {
                metric.measurements.pop_back();
            }
        }
    }

    /// Metrics whose in-flight measurement must be cancelled because the run is terminating.
    pub fn to_cancel(&self) -> Vec<usize> {
        if !self.is_terminating() {
            return Vec::new();
        }
        self.metrics
            .iter()
            .enumerate()
            .filter(|(_, m)| m.in_flight)
            .map(|(i, _)| i)
            .collect()
    }

    /// When the driver should call again: the earliest due measurement (None: nothing is
    /// scheduled; the run waits on in-flight measurements or is complete).
    pub fn next_due(&self, plan: &RunPlan) -> Option<Millis> {
        if self.is_completed() || self.is_terminating() {
            return None;
        }
        plan.metrics
            .iter()
            .enumerate()
            .filter_map(|(index, metric)| self.due_at(metric, index))
            .min()
    }

    /// What the rollout should do about an Inconclusive run: abort if any wet metric that went
    /// Inconclusive asks for it (`onInconclusive: abort`), pause otherwise.
    pub fn inconclusive_action(&self, plan: &RunPlan) -> OnInconclusive {
        let abort = plan
            .metrics
            .iter()
            .zip(&self.metrics)
            .any(|(metric, state)| {
                !metric.dry_run
                    && state.phase == AnalysisPhase::Inconclusive
                    && metric.on_inconclusive == OnInconclusive::Abort
            });
        if abort {
            OnInconclusive::Abort
        } else {
            OnInconclusive::Pause
        }
    }

    /// The latest finished measurement of each metric, for reports: (metric, measurement).
    pub fn latest(&self) -> impl Iterator<Item = (&str, &Measurement)> {
        self.metrics.iter().filter_map(|m| {
            m.measurements
                .iter()
                .rev()
                .find(|x| x.finished_at.is_some())
                .map(|x| (m.name.as_str(), x))
        })
    }
}

/// Convenience for drivers and tests: a Value outcome with no metadata.
pub fn value(result: MetricResult) -> Outcome {
    Outcome::Value {
        result,
        metadata: BTreeMap::new(),
    }
}

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

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::condition::MetricResult;
use super::measurement_verdict;
use super::plan::{MetricPlan, RunPlan};
use super::provider::{MeasureRequest, Outcome};
use crate::spec::analysis::{AnalysisPhase, OnInconclusive};
use crate::time::{Millis, time_of_day};

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

impl MetricState {
    /// Whether the metric's verdict rests on evidence: it took at least one measurement with a
    /// non-empty, non-NaN value, and passed none without one.
    pub fn has_evidence(&self) -> bool {
        self.successful_without_evidence == 0 && self.measurements.iter().any(|m| m.evidence)
    }
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

/// Argo's "worse" order: Successful < Running < Pending < Inconclusive < Error < Failed.
fn is_worse(current: AnalysisPhase, new: AnalysisPhase) -> bool {
    new.severity() > current.severity()
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

    /// Records the outcome of metric `index`'s in-flight measurement. An outcome for a metric
    /// with nothing in flight is ignored (a late answer after a restart or cancellation).
    pub fn handle_outcome(&mut self, plan: &RunPlan, index: usize, now: Millis, outcome: Outcome) {
        let Some(metric) = plan.metrics.get(index) else {
            return;
        };
        let Some(state) = self.metrics.get_mut(index) else {
            return;
        };
        if !state.in_flight {
            return;
        }
        let last = metric
            .effective_count()
            .is_some_and(|count| i64::from(state.count + state.deferred) + 1 >= count);
        let (phase, value, message, metadata, evidence) = match outcome {
            Outcome::Deferred(reason) if !last => {
                // Nothing recorded: the metric stays Running and is asked again after its
                // interval.
                state.measurements.pop_back();
                state.in_flight = false;
                state.deferred += 1;
                state.waiting = reason;
                state.last_finished = Some((now, AnalysisPhase::Running));
                return;
            }
            Outcome::Deferred(reason) => (
                AnalysisPhase::Inconclusive,
                String::new(),
                reason,
                BTreeMap::new(),
                false,
            ),
            Outcome::Value { result, metadata } => {
                let (phase, error) = if metric.baseline.is_some() {
                    let baseline = super::compare::baseline_variables(&metadata);
                    super::measurement_verdict_with(
                        metric.success.as_ref(),
                        metric.failure.as_ref(),
                        &result,
                        Some(&baseline),
                    )
                } else {
                    measurement_verdict(metric.success.as_ref(), metric.failure.as_ref(), &result)
                };
                let evidence = result.is_evidence();
                let message = match error {
                    Some(error) => error,
                    // A calibrated verdict records the reference it was judged against.
                    None if metric.baseline.is_some() => {
                        super::compare::baseline_summary(&metadata)
                    }
                    None => String::new(),
                };
                (phase, result.to_argo_string(), message, metadata, evidence)
            }
            Outcome::Decided {
                phase,
                value,
                message,
                metadata,
            } => {
                let phase = if phase.is_completed() {
                    phase
                } else {
                    AnalysisPhase::Error
                };
                (
                    phase,
                    value,
                    message,
                    metadata,
                    phase != AnalysisPhase::Error,
                )
            }
            Outcome::Error(message) => (
                AnalysisPhase::Error,
                String::new(),
                message,
                BTreeMap::new(),
                false,
            ),
            Outcome::Terminated => {
                // A terminated Job is Inconclusive (it never reached a verdict); other providers
                // answer instantly, and Argo records their terminated measurement as Successful.
                let phase = if metric.provider.job.is_some() {
                    AnalysisPhase::Inconclusive
                } else {
                    AnalysisPhase::Successful
                };
                (
                    phase,
                    String::new(),
                    "Metric Terminated".to_owned(),
                    BTreeMap::new(),
                    false,
                )
            }
        };
        if metric.baseline.is_some()
            && state.calibration.is_empty()
            && metadata.contains_key("baseline.value")
        {
            state.calibration = metadata
                .iter()
                .filter(|(k, _)| k.starts_with("baseline."))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
        }
        let (mut message, mut value) = (message, value);
        plan.redact_in_place(&mut message);
        plan.redact_in_place(&mut value);
        match phase {
            AnalysisPhase::Successful => {
                state.successful += 1;
                state.count += 1;
                state.consecutive_error = 0;
                state.consecutive_success += 1;
                state.consecutive_failure = 0;
                if !evidence {
                    state.successful_without_evidence += 1;
                }
            }
            AnalysisPhase::Failed => {
                state.failed += 1;
                state.count += 1;
                state.consecutive_error = 0;
                state.consecutive_success = 0;
                state.consecutive_failure += 1;
            }
            AnalysisPhase::Inconclusive => {
                state.inconclusive += 1;
                state.count += 1;
                state.consecutive_error = 0;
                state.consecutive_success = 0;
                state.consecutive_failure = 0;
            }
            _ => {
                state.error += 1;
                state.consecutive_error += 1;
                state.consecutive_success = 0;
            }
        }
        state.in_flight = false;
        state.waiting.clear();
        state.last_finished = Some((now, phase));
        if let Some(last) = state.measurements.back_mut() {
            last.phase = phase;
            last.value = value;
            last.message = message;
            last.finished_at = Some(now);
            last.metadata = metadata;
            last.evidence = evidence;
        }
        while state.measurements.len() > metric.retention.max(1) {
            state.measurements.pop_front();
        }
    }

    /// Argo's `assessRunStatus`: updates every metric's phase and the run's phase and message.
    /// Returns the run's phase.
    ///
    /// When this assessment is what makes the run terminate (a metric just failed), the run is
    /// assessed once more at once, as Argo requeues it: siblings without a measurement in flight
    /// then complete, and the run takes its final phase.
    pub fn assess(&mut self, plan: &RunPlan, now: Millis) -> AnalysisPhase {
        let was_terminating = self.is_terminating();
        let phase = self.assess_once(plan, now);
        if !was_terminating && self.is_terminating() && !self.is_completed() {
            return self.assess_once(plan, now);
        }
        phase
    }

    fn assess_once(&mut self, plan: &RunPlan, now: Millis) -> AnalysisPhase {
        if self.is_completed() {
            // A measurement cancelled after the verdict still settles its metric.
            for (metric, state) in plan.metrics.iter().zip(self.metrics.iter_mut()) {
                if !state.phase.is_completed() && !state.measurements.is_empty() {
                    state.phase = assess_metric(metric, state, true);
                    if let Some(last) = state.measurements.back() {
                        state.message = last.message.clone();
                    }
                }
            }
            return self.phase;
        }
        let terminating = self.is_terminating();
        let mut worst: Option<AnalysisPhase> = None;
        let mut worst_message = if self.terminate {
            "Run Terminated".to_owned()
        } else {
            String::new()
        };
        let mut everything_completed = true;
        let mut run_summary = Summary::default();
        let mut dry_run_summary = Summary::default();
        for (index, metric) in plan.metrics.iter().enumerate() {
            let dry_run = metric.dry_run;
            if dry_run {
                dry_run_summary.count += 1;
            } else {
                run_summary.count += 1;
            }
            let state = &mut self.metrics[index];
            if state.measurements.is_empty() && state.last_finished.is_none() {
                // Not started (e.g. waiting for its initial delay): Argo has no result for it yet.
                everything_completed = false;
                continue;
            }
            let phase = assess_metric(metric, state, terminating);
            if phase != state.phase {
                if let Some(last) = state.measurements.back() {
                    state.message = last.message.clone();
                }
                state.phase = phase;
            }
            if !phase.is_completed() {
                everything_completed = false;
                continue;
            }
            let (limit_phase, limit_message) = failure_inconclusive_or_error(metric, state);
            let summary = if dry_run {
                &mut dry_run_summary
            } else {
                &mut run_summary
            };
            match limit_phase {
                Some(AnalysisPhase::Error) => summary.error += 1,
                Some(AnalysisPhase::Failed) => summary.failed += 1,
                Some(AnalysisPhase::Inconclusive) => summary.inconclusive += 1,
                _ => summary.successful += 1,
            }
            if dry_run {
                if worst.is_none() {
                    worst = Some(AnalysisPhase::Successful);
                }
                if let Some(message) = &limit_message {
                    state.message = format!("Metric assessed {phase:?} due to {message}");
                }
            } else if worst.is_none_or(|w| is_worse(w, phase)) {
                worst = Some(phase);
                if let Some(message) = limit_message {
                    worst_message = format!(
                        "Metric \"{}\" assessed {phase:?} due to {message}",
                        metric.name
                    );
                    if !state.message.is_empty() {
                        worst_message.push_str(&format!(": \"Error Message: {}\"", state.message));
                    }
                }
            }
        }
        self.run_summary = run_summary;
        self.dry_run_summary = dry_run_summary;
        let worst_message = worst_message.trim().to_owned();
        let (phase, message) = if terminating {
            (worst.unwrap_or(AnalysisPhase::Successful), worst_message)
        } else if !everything_completed || worst.is_none() {
            (AnalysisPhase::Running, String::new())
        } else {
            (worst.unwrap_or(AnalysisPhase::Successful), worst_message)
        };
        if phase != self.phase {
            self.phase = phase;
            self.message = message;
            if phase.is_completed() && self.completed_at.is_none() {
                self.completed_at = Some(now);
            }
        }
        self.phase
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

    /// Whether the run's verdict rests on evidence: every wet metric took at least one
    /// measurement with a non-empty, non-NaN value, and none passed a measurement without one.
    /// A Successful run without evidence must not validate anything.
    pub fn has_evidence(&self, plan: &RunPlan) -> bool {
        plan.metrics
            .iter()
            .zip(&self.metrics)
            .filter(|(m, _)| !m.dry_run)
            .all(|(_, state)| state.has_evidence())
    }

    /// The first wet metric without evidence (see [`MetricState::has_evidence`]), if one: what
    /// a Successful run without evidence names.
    pub fn without_evidence(&self) -> Option<&MetricState> {
        self.metrics
            .iter()
            .find(|m| !m.dry_run && !m.has_evidence())
    }

    /// Why the run, still measuring, has no current evidence at `now`, if it has none: a wet
    /// metric still measuring whose latest measurement with evidence (Successful, or Failed
    /// within its failureLimit) finished longer ago than [`MetricPlan::fresh_for`] (its interval
    /// plus its provider's timeout), or that never had one. A completed run, and a completed metric, is the
    /// evidence of its own (it is not re-checked).
    pub fn stale(&self, plan: &RunPlan, now: Millis) -> Option<String> {
        if self.is_completed() {
            return None;
        }
        for (metric, state) in plan.metrics.iter().zip(&self.metrics) {
            if metric.dry_run || state.phase.is_completed() {
                continue;
            }
            let fresh_for = metric.fresh_for().map_or(Millis::MAX, |ms| ms as Millis);
            let latest = state.measurements.iter().rev().find(|m| {
                m.evidence
                    && matches!(m.phase, AnalysisPhase::Successful | AnalysisPhase::Failed)
                    && m.finished_at.is_some()
            });
            if let Some(at) = latest.and_then(|m| m.finished_at)
                && now.saturating_sub(at) <= fresh_for
            {
                continue;
            }
            let last = state
                .measurements
                .iter()
                .rev()
                .find(|m| m.finished_at.is_some());
            let why = match last {
                Some(m) if m.phase == AnalysisPhase::Error => format!(
                    "it errored at {}: {}",
                    time_of_day(m.finished_at.unwrap_or(0)),
                    m.message
                ),
                Some(m) if !m.evidence => "its last measurement had no data".to_owned(),
                Some(m) => format!(
                    "its last measurement with evidence is {} s old",
                    now.saturating_sub(m.finished_at.unwrap_or(0)) / 1000
                ),
                None => "no measurement has finished yet".to_owned(),
            };
            return Some(format!("metric {:?}: {why}", metric.name));
        }
        None
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

/// Argo's `assessMetricStatus`, plus the Flotilla streak limit.
fn assess_metric(metric: &MetricPlan, state: &MetricState, terminating: bool) -> AnalysisPhase {
    if state.phase.is_completed() {
        return state.phase;
    }
    if state.measurements.is_empty() && state.last_finished.is_none() {
        return if terminating {
            AnalysisPhase::Successful
        } else {
            AnalysisPhase::Pending
        };
    }
    if state.in_flight {
        return AnalysisPhase::Running;
    }
    if let (Some(phase), _) = failure_inconclusive_or_error(metric, state) {
        return phase;
    }
    if metric.consecutive_success_limit > 0
        && i64::from(state.consecutive_success) >= metric.consecutive_success_limit
    {
        return AnalysisPhase::Successful;
    }
    if let Some(count) = metric.effective_count()
        && i64::from(state.count + state.deferred) >= count
    {
        let failure_applicable = metric.failure_applicable();
        let success_applicable = metric.consecutive_success_limit > 0;
        return match (failure_applicable, success_applicable) {
            (true, true) => AnalysisPhase::Inconclusive,
            (false, true) => AnalysisPhase::Failed,
            _ => AnalysisPhase::Successful,
        };
    }
    if terminating {
        AnalysisPhase::Successful
    } else {
        AnalysisPhase::Running
    }
}

/// Argo's `assessMetricFailureInconclusiveOrError`: later checks win, as upstream's do.
fn failure_inconclusive_or_error(
    metric: &MetricPlan,
    state: &MetricState,
) -> (Option<AnalysisPhase>, Option<String>) {
    let mut result = (None, None);
    if metric.failure_limit >= 0 && i64::from(state.failed) > metric.failure_limit {
        result = (
            Some(AnalysisPhase::Failed),
            Some(format!(
                "failed ({}) > failureLimit ({})",
                state.failed, metric.failure_limit
            )),
        );
    }
    if let Some(limit) = metric.consecutive_failure_limit
        && i64::from(state.consecutive_failure) >= limit
    {
        result = (
            Some(AnalysisPhase::Failed),
            Some(format!(
                "consecutiveFailures ({}) >= consecutiveFailureLimit ({limit})",
                state.consecutive_failure
            )),
        );
    }
    if i64::from(state.inconclusive) > metric.inconclusive_limit {
        result = (
            Some(AnalysisPhase::Inconclusive),
            Some(format!(
                "inconclusive ({}) > inconclusiveLimit ({})",
                state.inconclusive, metric.inconclusive_limit
            )),
        );
    }
    if i64::from(state.consecutive_error) > metric.consecutive_error_limit {
        result = (
            Some(AnalysisPhase::Error),
            Some(format!(
                "consecutiveErrors ({}) > consecutiveErrorLimit ({})",
                state.consecutive_error, metric.consecutive_error_limit
            )),
        );
    }
    result
}

/// Convenience for drivers and tests: a Value outcome with no metadata.
pub fn value(result: MetricResult) -> Outcome {
    Outcome::Value {
        result,
        metadata: BTreeMap::new(),
    }
}

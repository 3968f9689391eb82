//! A measurement's outcome recorded in its metric: the measurement's phase by the metric's
//! conditions (a calibrated metric's against its reference), the counters, retention, and a
//! composite's deferral.

use std::collections::BTreeMap;

use super::Run;
use crate::analysis::compare::{baseline_summary, baseline_variables};
use crate::analysis::plan::RunPlan;
use crate::analysis::provider::Outcome;
use crate::analysis::{measurement_verdict, measurement_verdict_with};
use crate::spec::analysis::AnalysisPhase;
use crate::time::Millis;

impl Run {
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
                    let baseline = baseline_variables(&metadata);
                    measurement_verdict_with(
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
                    None if metric.baseline.is_some() => baseline_summary(&metadata),
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
}

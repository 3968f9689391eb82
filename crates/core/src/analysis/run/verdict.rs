//! The run's verdict from its metrics: each metric's phase by its limits (Argo's
//! `assessMetricStatus`), the worst one winning, the summaries, and the run's message.

use super::{MetricState, Run, Summary};
use crate::analysis::plan::{MetricPlan, RunPlan};
use crate::spec::analysis::AnalysisPhase;
use crate::time::Millis;

impl Run {
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
}

/// Argo's "worse" order: Successful < Running < Pending < Inconclusive < Error < Failed.
fn is_worse(current: AnalysisPhase, new: AnalysisPhase) -> bool {
    new.severity() > current.severity()
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

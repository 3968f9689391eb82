//! Whether a run's verdict rests on evidence: a metric's measurements with a value, the first
//! wet metric without one, and how fresh the latest evidence is.

use super::{MetricState, Run};
use crate::analysis::plan::RunPlan;
use crate::spec::analysis::AnalysisPhase;
use crate::time::{Millis, time_of_day};

impl MetricState {
    /// Whether the metric's verdict rests on evidence: it took at least one measurement with a
    /// non-empty, non-NaN value, and passed none without one.
    pub fn has_evidence(&self) -> bool {
        self.successful_without_evidence == 0 && self.measurements.iter().any(|m| m.evidence)
    }
}

impl Run {
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
    /// within its failureLimit) finished longer ago than [`MetricPlan::fresh_for`](crate::analysis::plan::MetricPlan::fresh_for) (its interval
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
}

//! What one tick of the fleet machine takes and hands back: what each cluster reports, the
//! specs of the revision in flight, the measurements the driver must take and their outcomes,
//! and the tick's output.

use std::sync::Arc;

use super::event::FleetEvent;
use crate::analysis::plan::RunPlan;
use crate::analysis::{MeasureRequest, Outcome, measurement_phase};
use crate::rollout::{Action, AnalysisSlot, Observed, RunKey};
use crate::spec::analysis::AnalysisPhase;
use crate::spec::rollout::Rollout;

/// What a cluster reports at one tick.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterObservation {
    /// Whether the cluster answered.
    pub reachable: bool,
    /// What its workloads and router report (analysis is filled by the machine).
    pub observed: Observed,
    /// What it runs differs from what the machine last decided for it (a restarted data plane,
    /// a change by hand), and the driver is re-applying the decision: the cluster is held (no
    /// step advances, nothing is judged) until it matches again.
    pub diverged: bool,
}

/// A measurement the driver must take for a cluster's run, or for a wave-level analysis.
///
/// A wave-level analysis is keyed by its run's slot, `AnalysisSlot::Wave(n)` (n the 1-based
/// wave), and has no cluster: `cluster` is empty, and [`ClusterMeasurement::wave`] gives the
/// wave. The driver measures it over the wave (docs/simulate.md: the simulator aggregates the
/// wave's validated clusters' traffic).
#[derive(Debug, Clone)]
pub struct ClusterMeasurement {
    /// The cluster (empty for a wave-level analysis).
    pub cluster: String,
    /// The run (slot `AnalysisSlot::Wave(n)` for wave n's analysis).
    pub run: RunKey,
    /// The measurement.
    pub request: MeasureRequest,
    /// The run's plan (shared, not copied), by which [`ClusterMeasurement::is_urgent`] tells
    /// an answer that may change a decision from a routine one.
    pub plan: Option<Arc<RunPlan>>,
}

/// Two measurements are the same when they measure the same thing: the plan is how the answer
/// is judged, derived from the run, and is not compared.
impl PartialEq for ClusterMeasurement {
    fn eq(&self, other: &Self) -> bool {
        (&self.cluster, self.run, &self.request) == (&other.cluster, other.run, &other.request)
    }
}

impl ClusterMeasurement {
    /// The 0-based wave whose wave-level analysis this measurement is for, if it is one.
    pub fn wave(&self) -> Option<usize> {
        wave_of_key(self.run)
    }

    /// Whether `outcome` may change a decision before the driver's next regular tick, so that
    /// it should tick at once: a value its metric's conditions do not pass (Failed,
    /// Inconclusive, or an evaluation Error), a provider's own verdict other than Successful,
    /// an Error, and any value of a metric whose verdict reads more than the value (a
    /// calibrated one). A passing value, a deferred answer, a dry-run metric's answer and a
    /// cancelled measurement wait for the next tick. The tick decides either way (with the
    /// same rule); this only says when.
    pub fn is_urgent(&self, outcome: &Outcome) -> bool {
        let Some(metric) = self
            .plan
            .as_ref()
            .and_then(|p| p.metrics.get(self.request.metric_index))
        else {
            return true;
        };
        if metric.dry_run {
            return false;
        }
        match outcome {
            Outcome::Value { result, .. } => {
                metric.baseline.is_some()
                    || measurement_phase(metric.success.as_ref(), metric.failure.as_ref(), result)
                        != AnalysisPhase::Successful
            }
            Outcome::Decided { phase, .. } => *phase != AnalysisPhase::Successful,
            Outcome::Error(_) => true,
            Outcome::Deferred(_) | Outcome::Terminated => false,
        }
    }
}

/// The 0-based wave of a wave-level analysis run's key.
pub(super) fn wave_of_key(run: RunKey) -> Option<usize> {
    match run.slot {
        AnalysisSlot::Wave(n) => (n as usize).checked_sub(1),
        _ => None,
    }
}

/// A measurement's outcome, fed back to the machine (with the `cluster` and `run` of its
/// [`ClusterMeasurement`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterOutcome {
    /// The cluster (empty for a wave-level analysis).
    pub cluster: String,
    /// The run.
    pub run: RunKey,
    /// Which metric of the run.
    pub metric_index: usize,
    /// What the provider answered.
    pub outcome: Outcome,
}

/// What one tick decided.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FleetOutput {
    /// Actions per cluster, in order.
    pub actions: Vec<(String, Action)>,
    /// Measurements to take.
    pub measurements: Vec<ClusterMeasurement>,
    /// What was decided, in order (with what was decided between ticks first).
    pub events: Vec<FleetEvent>,
}

/// The specs one fleet revision runs: the new Rollout and the one it replaces.
#[derive(Debug, Clone)]
pub struct Revisions<'a> {
    /// The Rollout as before this fleet revision (what clusters run until their wave starts).
    pub previous: &'a Rollout,
    /// The Rollout of this fleet revision.
    pub next: &'a Rollout,
}

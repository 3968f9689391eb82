//! Composite measurements, the Flotilla extensions that judge a cluster against its own
//! reference: a `compare` metric (the canary's series against a baseline series, by the rank-sum
//! judge), a `sequential` metric (Wald's test of canary versus stable error rates since the run
//! started), and a calibrated metric (`baseline:`: its conditions read the cluster's reference).
//!
//! Sans-I/O: [`reads`] says which plain measurements a composite needs, [`decide`] turns their
//! outcomes into the metric's outcome, and [`measure`] runs both over any [`Measurer`]. The
//! simulator and the controller share them, so a template judges the same way in both.
//!
//! Each composite is a child module with its reads, its decision and its configuration checks:
//! `comparison`, `sequential` and `calibration`, over `reading` (the reads they build and the
//! answers they read back).

mod calibration;
mod comparison;
mod reading;
mod sequential;

use crate::analysis::provider::{MeasureRequest, Measurer, Outcome};
use crate::spec::analysis::MetricProvider;

pub use calibration::{baseline_summary, baseline_variables};
pub use comparison::{DEFAULT_COMPARE_STEP_MS, DEFAULT_COMPARE_WINDOW_MS, DEFAULT_MIN_POINTS};
pub use sequential::DEFAULT_SEQUENTIAL_STEP_MS;

/// Why a composite metric's configuration cannot run; lint and planning report these.
pub fn problems(provider: &MetricProvider) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(compare) = &provider.compare {
        comparison::problems(compare, &mut out);
    }
    if let Some(sequential) = &provider.sequential {
        sequential::problems(sequential, &mut out);
    }
    out
}

/// The plain measurements a composite metric needs, or None for a plain metric (measure the
/// request itself).
pub fn reads(request: &MeasureRequest) -> Option<Vec<MeasureRequest>> {
    let provider = &request.provider;
    if let Some(compare) = &provider.compare {
        return Some(comparison::reads(request, compare));
    }
    if let Some(sequential) = &provider.sequential {
        return Some(sequential::reads(request, sequential));
    }
    if let Some(calibration) = &request.baseline {
        return Some(calibration::reads(request, calibration));
    }
    None
}

/// The metric's outcome from the outcomes of its [`reads`], in the same order.
pub fn decide(request: &MeasureRequest, outcomes: Vec<Outcome>) -> Outcome {
    let provider = &request.provider;
    if let Some(compare) = &provider.compare {
        return comparison::decide(request, compare, outcomes);
    }
    if let Some(sequential) = &provider.sequential {
        return sequential::decide(request, sequential, outcomes);
    }
    if request.baseline.is_some() {
        return calibration::decide(request, outcomes);
    }
    outcomes
        .into_iter()
        .next()
        .unwrap_or_else(|| Outcome::Error("no measurement was taken".into()))
}

/// One measurement in the making: the plain reads it needs ([`reads`], or the request itself
/// for a plain metric), answered one at a time. A composite stops at its first read that is no
/// value (an error, a deferral, a termination): [`decide`] concludes on what it has then, and
/// the reads after it are never taken.
#[derive(Debug)]
pub struct Composition<'r> {
    request: &'r MeasureRequest,
    reads: Option<Vec<MeasureRequest>>,
    outcomes: Vec<Outcome>,
}

impl<'r> Composition<'r> {
    /// The measurement of `request`, with no read answered yet.
    pub fn new(request: &'r MeasureRequest) -> Composition<'r> {
        let reads = reads(request);
        let outcomes = Vec::with_capacity(reads.as_ref().map_or(1, Vec::len));
        Composition {
            request,
            reads,
            outcomes,
        }
    }

    /// The next read to take, or None once the measurement can be decided.
    pub fn next_read(&self) -> Option<&MeasureRequest> {
        match &self.reads {
            None => self.outcomes.is_empty().then_some(self.request),
            Some(_) if self.stopped() => None,
            Some(reads) => reads.get(self.outcomes.len()),
        }
    }

    /// The answer to the read [`Self::next_read`] gave.
    pub fn answer(&mut self, outcome: Outcome) {
        self.outcomes.push(outcome);
    }

    /// The metric's outcome from the answers so far.
    pub fn decide(mut self) -> Outcome {
        match self.reads {
            None => self
                .outcomes
                .pop()
                .unwrap_or_else(|| Outcome::Error("no measurement was taken".into())),
            Some(_) => decide(self.request, self.outcomes),
        }
    }

    /// Whether the last answer was no value.
    fn stopped(&self) -> bool {
        self.outcomes
            .last()
            .is_some_and(|o| !matches!(o, Outcome::Value { .. }))
    }
}

/// Takes one measurement through `measurer`, composing the reads of a composite metric.
pub async fn measure<M: Measurer>(measurer: &M, request: &MeasureRequest) -> Outcome {
    let mut measurement = Composition::new(request);
    while let Some(read) = measurement.next_read() {
        let outcome = measurer.measure(read).await;
        measurement.answer(outcome);
    }
    measurement.decide()
}

/// [`measure`] with a synchronous `answer` to each plain read (the simulator's synthetic
/// traffic).
pub fn measure_with(
    request: &MeasureRequest,
    mut answer: impl FnMut(&MeasureRequest) -> Outcome,
) -> Outcome {
    let mut measurement = Composition::new(request);
    while let Some(read) = measurement.next_read() {
        let outcome = answer(read);
        measurement.answer(outcome);
    }
    measurement.decide()
}

#[cfg(test)]
#[path = "compare_tests.rs"]
mod tests;

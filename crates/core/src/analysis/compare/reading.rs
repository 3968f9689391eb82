//! The plain reads a composite metric asks for, and its answers read back: a read of another
//! provider or statistic, a series' points, the first answer that is no value, a decided
//! outcome, and durations in words.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::analysis::condition::MetricResult;
use crate::analysis::provider::{MeasureRequest, Outcome};
use crate::spec::analysis::{
    AnalysisPhase, BuiltinMetric, BuiltinStatistic, MetricProvider, TrafficSubset,
};
use crate::spec::common::Duration;
use crate::time::Millis;

pub(super) fn millis(duration: &Option<Duration>, default: u64) -> u64 {
    duration
        .as_ref()
        .and_then(|d| d.as_millis())
        .unwrap_or(default)
}

/// A builtin read of `subset` with another statistic (counts read with no minimum).
pub(super) fn builtin(
    base: &BuiltinMetric,
    statistic: BuiltinStatistic,
    quantile: Option<f64>,
    subset: TrafficSubset,
) -> MetricProvider {
    let counts = matches!(
        statistic,
        BuiltinStatistic::Requests | BuiltinStatistic::Errors
    );
    MetricProvider {
        builtin: Some(BuiltinMetric {
            metric: statistic,
            quantile: quantile.or(base.quantile),
            subset: Some(subset),
            window: base.window.clone(),
            min_requests: if counts { Some(0) } else { base.min_requests },
        }),
        ..MetricProvider::default()
    }
}

pub(super) fn read(
    request: &MeasureRequest,
    suffix: &str,
    provider: MetricProvider,
    at: Millis,
    window: Option<u64>,
    not_before: Option<Millis>,
    step: Option<u64>,
) -> MeasureRequest {
    MeasureRequest {
        metric_index: request.metric_index,
        metric: format!("{}/{suffix}", request.metric),
        provider: Arc::new(provider),
        at,
        window,
        not_before,
        step,
        baseline: None,
        reference: None,
        last: request.last,
    }
}

/// The points of a series answer (NaN kept: the judge's NaN strategy decides).
pub(super) fn points(result: &MetricResult) -> Vec<f64> {
    match result {
        MetricResult::Nil => Vec::new(),
        MetricResult::Scalar(v) => vec![*v],
        MetricResult::Vector(v) => v.clone(),
        MetricResult::Json(_) => vec![f64::NAN],
    }
}

/// The first non-value among `outcomes` (an error names which read failed), else the values.
pub(super) fn values(
    request: &MeasureRequest,
    outcomes: Vec<Outcome>,
    names: &[&str],
) -> Result<Vec<MetricResult>, Outcome> {
    let mut out = Vec::with_capacity(outcomes.len());
    for (i, outcome) in outcomes.into_iter().enumerate() {
        let name = names.get(i).copied().unwrap_or("read");
        match outcome {
            Outcome::Value { result, .. } => out.push(result),
            Outcome::Error(e) => return Err(Outcome::Error(format!("{name}: {e}"))),
            Outcome::Terminated => return Err(Outcome::Terminated),
            Outcome::Deferred(reason) => return Err(Outcome::Deferred(reason)),
            Outcome::Decided { message, .. } => {
                return Err(Outcome::Error(format!(
                    "{name}: the provider decided instead of answering a series ({message}) in metric {:?}",
                    request.metric
                )));
            }
        }
    }
    Ok(out)
}

pub(super) fn decided(
    phase: AnalysisPhase,
    value: impl Into<String>,
    message: impl Into<String>,
    metadata: BTreeMap<String, String>,
) -> Outcome {
    Outcome::Decided {
        phase,
        value: value.into(),
        message: message.into(),
        metadata,
    }
}

pub(super) fn show(duration: &Duration) -> String {
    match duration.as_millis() {
        Some(ms) if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        Some(ms) if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        Some(ms) => format!("{}s", ms as f64 / 1000.0),
        None => "?".into(),
    }
}

//! The `sequential` metric: Wald's test of the canary's error rate against the stable's, on the
//! counts since the run started.

use std::collections::BTreeMap;

use super::reading::{builtin, decided, millis, points, read, values};
use crate::analysis::condition::format_float;
use crate::analysis::provider::{MeasureRequest, Outcome};
use crate::judge::sequential::{Decision, ErrorCounts, ErrorRateTest};
use crate::spec::analysis::{
    AnalysisPhase, BuiltinMetric, BuiltinStatistic, SequentialMetric, TrafficSubset,
};
use crate::spec::judge::SequentialConfig;

/// Default window of the sequential test's counts.
pub const DEFAULT_SEQUENTIAL_STEP_MS: u64 = 10_000;

/// Why a `sequential` block cannot run.
pub(super) fn problems(sequential: &SequentialMetric, out: &mut Vec<(String, String)>) {
    let config = sequential_config(sequential);
    if let Err(e) = ErrorRateTest::new(config) {
        out.push(("sequential".into(), e.to_string()));
    }
    if sequential
        .step
        .as_ref()
        .is_some_and(|d| d.as_millis().is_some_and(|ms| ms < 1000))
    {
        out.push(("sequential.step".into(), "must be at least 1s".into()));
    }
}

fn sequential_config(metric: &SequentialMetric) -> SequentialConfig {
    let defaults = SequentialConfig::default();
    SequentialConfig {
        alpha: metric.alpha.unwrap_or(defaults.alpha),
        beta: metric.beta.unwrap_or(defaults.beta),
        ratio: metric.ratio.unwrap_or(defaults.ratio),
        min_requests: metric.min_requests.unwrap_or(defaults.min_requests),
    }
}

/// The canary's and the stable's request and error counts since the run started.
pub(super) fn reads(
    request: &MeasureRequest,
    sequential: &SequentialMetric,
) -> Vec<MeasureRequest> {
    let step = millis(&sequential.step, DEFAULT_SEQUENTIAL_STEP_MS);
    let start = request.not_before.unwrap_or(request.at);
    let window = (request.at - start).max(0) as u64;
    let base = BuiltinMetric {
        metric: BuiltinStatistic::Errors,
        quantile: None,
        subset: None,
        window: None,
        min_requests: Some(0),
    };
    let mut out = Vec::with_capacity(4);
    for (suffix, statistic, subset) in [
        (
            "canary-requests",
            BuiltinStatistic::Requests,
            TrafficSubset::Canary,
        ),
        (
            "canary-errors",
            BuiltinStatistic::Errors,
            TrafficSubset::Canary,
        ),
        (
            "stable-requests",
            BuiltinStatistic::Requests,
            TrafficSubset::Stable,
        ),
        (
            "stable-errors",
            BuiltinStatistic::Errors,
            TrafficSubset::Stable,
        ),
    ] {
        out.push(read(
            request,
            suffix,
            builtin(&base, statistic, None, subset),
            request.at,
            Some(window),
            request.not_before,
            Some(step),
        ));
    }
    out
}

pub(super) fn decide(
    request: &MeasureRequest,
    sequential: &SequentialMetric,
    outcomes: Vec<Outcome>,
) -> Outcome {
    let answers = match values(
        request,
        outcomes,
        &[
            "canary requests",
            "canary errors",
            "stable requests",
            "stable errors",
        ],
    ) {
        Ok(v) => v,
        Err(outcome) => return outcome,
    };
    let series: Vec<Vec<f64>> = answers.iter().map(points).collect();
    let mut test = match ErrorRateTest::new(sequential_config(sequential)) {
        Ok(t) => t,
        Err(e) => return Outcome::Error(e.to_string()),
    };
    let count = |s: &Vec<f64>, i: usize| {
        s.get(i)
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
            .map_or(0, |v| v.round() as u64)
    };
    let steps = series.iter().map(Vec::len).max().unwrap_or(0);
    let mut verdict = test.verdict();
    for i in 0..steps {
        let canary_requests = count(&series[0], i);
        let baseline_requests = count(&series[2], i);
        let window = ErrorCounts {
            canary_requests,
            canary_errors: count(&series[1], i).min(canary_requests),
            baseline_requests,
            baseline_errors: count(&series[3], i).min(baseline_requests),
        };
        verdict = match test.observe(window) {
            Ok(v) => v,
            Err(e) => return Outcome::Error(e.to_string()),
        };
    }
    if request.last
        && matches!(
            verdict.decision,
            Decision::NoMeasurement | Decision::Continue
        )
    {
        verdict = test.conclude();
    }
    let totals = verdict.totals;
    let metadata = BTreeMap::from([
        ("judge".to_owned(), "sprt".to_owned()),
        (
            "reference".to_owned(),
            "the stable subset, concurrent".to_owned(),
        ),
        (
            "logLikelihoodRatio".to_owned(),
            format_float(verdict.log_likelihood_ratio),
        ),
        (
            "upperBoundary".to_owned(),
            format_float(test.upper_boundary()),
        ),
        (
            "lowerBoundary".to_owned(),
            format_float(test.lower_boundary()),
        ),
        (
            "canary".to_owned(),
            format!("{}/{}", totals.canary_errors, totals.canary_requests),
        ),
        (
            "stable".to_owned(),
            format!("{}/{}", totals.baseline_errors, totals.baseline_requests),
        ),
    ]);
    let rate = |e: u64, n: u64| {
        if n == 0 {
            "NaN".to_owned()
        } else {
            format_float(e as f64 / n as f64)
        }
    };
    let value = rate(totals.canary_errors, totals.canary_requests);
    match verdict.decision {
        Decision::NoMeasurement | Decision::Continue => Outcome::Deferred(verdict.message),
        Decision::Fail => decided(AnalysisPhase::Failed, value, verdict.message, metadata),
        Decision::Pass => decided(AnalysisPhase::Successful, value, verdict.message, metadata),
        Decision::Inconclusive => decided(
            AnalysisPhase::Inconclusive,
            value,
            verdict.message,
            metadata,
        ),
    }
}

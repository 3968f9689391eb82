//! Composite measurements, the Flotilla extensions that judge a cluster against its own
//! reference: a `compare` metric (the canary's series against a baseline series, by the rank-sum
//! judge), a `sequential` metric (Wald's test of canary versus stable error rates since the run
//! started), and a calibrated metric (`baseline:`: its conditions read the cluster's reference).
//!
//! Sans-I/O: [`reads`] says which plain measurements a composite needs, [`decide`] turns their
//! outcomes into the metric's outcome, and [`measure`] runs both over any [`Measurer`]. The
//! simulator and the controller share them, so a template judges the same way in both.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::condition::{MetricResult, format_float};
use super::provider::{MeasureRequest, Measurer, Outcome};
use crate::judge::sequential::{Decision, ErrorCounts, ErrorRateTest};
use crate::judge::{Classification, classify};
use crate::spec::analysis::{
    AnalysisPhase, BuiltinMetric, BuiltinStatistic, Calibration, CompareMetric, MetricProvider,
    SequentialMetric, TrafficSubset,
};
use crate::spec::common::Duration;
use crate::spec::judge::{Comparison, Direction, EffectSize, EffectSizeMeasure, SequentialConfig};
use crate::time::Millis;

/// Default span of a comparison's series.
pub const DEFAULT_COMPARE_WINDOW_MS: u64 = 5 * 60_000;
/// Default resolution of a comparison's series.
pub const DEFAULT_COMPARE_STEP_MS: u64 = 30_000;
/// Default fewest points on each side of a comparison.
pub const DEFAULT_MIN_POINTS: u64 = 3;
/// Default window of the sequential test's counts.
pub const DEFAULT_SEQUENTIAL_STEP_MS: u64 = 10_000;
/// Share of zero points on both sides from which a rank-sum comparison is not trusted.
const ZERO_INFLATED_SHARE: f64 = 0.5;

/// Why a composite metric's configuration cannot run; lint and planning report these.
pub fn problems(provider: &MetricProvider) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(compare) = &provider.compare {
        let canary_kinds = compare.canary.kinds();
        if canary_kinds.len() != 1 || !["builtin", "prometheus"].contains(&canary_kinds[0]) {
            out.push((
                "compare.canary".into(),
                "give one series provider: builtin or prometheus".into(),
            ));
        }
        match &compare.baseline {
            None if compare.canary.builtin.is_none() => out.push((
                "compare.baseline".into(),
                "required unless the canary's provider is builtin (whose baseline defaults to the stable subset)".into(),
            )),
            Some(b) => {
                let kinds = b.kinds();
                if kinds.len() != 1 || !["builtin", "prometheus"].contains(&kinds[0]) {
                    out.push((
                        "compare.baseline".into(),
                        "give one series provider: builtin or prometheus".into(),
                    ));
                }
            }
            None => {}
        }
        if let Some(reference) = &compare.reference
            && reference.offset.is_some() == reference.before_start.is_some()
        {
            out.push((
                "compare.reference".into(),
                "set exactly one of offset and beforeStart".into(),
            ));
        }
        if let Some(c) = compare.confidence
            && !(c > 0.0 && c < 1.0)
        {
            out.push((
                "compare.confidence".into(),
                format!("a confidence level is between 0 and 1 (exclusive), got {c}"),
            ));
        }
        if let Some(t) = compare.tolerance
            && !(t.is_finite() && t >= 0.0)
        {
            out.push((
                "compare.tolerance".into(),
                format!("a tolerance is a number ≥ 0, got {t}"),
            ));
        }
        if let Some(f) = compare.outliers.as_ref().and_then(|o| o.factor)
            && !(f.is_finite() && f > 0.0)
        {
            out.push((
                "compare.outliers.factor".into(),
                format!("the IQR factor must be greater than 0, got {f}"),
            ));
        }
        for (field, duration) in [
            ("compare.step", &compare.step),
            ("compare.window", &compare.window),
        ] {
            if duration
                .as_ref()
                .is_some_and(|d| d.as_millis().is_some_and(|ms| ms < 1000))
            {
                out.push((field.into(), "must be at least 1s".into()));
            }
        }
    }
    if let Some(sequential) = &provider.sequential {
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
    out
}

fn millis(duration: &Option<Duration>, default: u64) -> u64 {
    duration
        .as_ref()
        .and_then(|d| d.as_millis())
        .unwrap_or(default)
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

fn comparison(compare: &CompareMetric, seed: u64) -> Comparison {
    let defaults = Comparison::default();
    let measure = compare
        .effect_size
        .as_ref()
        .and_then(|e| e.measure)
        .unwrap_or(EffectSizeMeasure::MeanRatio);
    let mut effect_size = EffectSize::neutral(measure);
    if let Some(e) = &compare.effect_size {
        effect_size.allowed_increase = e.allowed_increase.unwrap_or(effect_size.allowed_increase);
        effect_size.allowed_decrease = e.allowed_decrease.unwrap_or(effect_size.allowed_decrease);
    }
    Comparison {
        direction: compare.direction.unwrap_or(Direction::Increase),
        confidence: compare.confidence.unwrap_or(defaults.confidence),
        tolerance: compare.tolerance.unwrap_or(defaults.tolerance),
        effect_size,
        critical: false,
        must_have_data: compare.must_have_data.unwrap_or(false),
        nan_strategy: compare.nan_strategy.unwrap_or(defaults.nan_strategy),
        outliers: compare
            .outliers
            .as_ref()
            .and_then(|o| o.strategy)
            .unwrap_or(defaults.outliers),
        outlier_factor: compare
            .outliers
            .as_ref()
            .and_then(|o| o.factor)
            .unwrap_or(defaults.outlier_factor),
        seed,
    }
}

/// A builtin read of `subset` with another statistic (counts read with no minimum).
fn builtin(
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

fn read(
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

/// The reference window of a calibrated metric: (at, window) ending when the run started.
fn calibration_window(request: &MeasureRequest, calibration: &Calibration) -> (Millis, u64) {
    let (window, _) = calibration.resolved();
    (request.not_before.unwrap_or(request.at), window)
}

/// The statistics a calibrated builtin metric's conditions may read as `baseline.<name>`.
const CALIBRATION_STATISTICS: &[(&str, BuiltinStatistic, Option<f64>)] = &[
    ("p50", BuiltinStatistic::Latency, Some(0.5)),
    ("p95", BuiltinStatistic::Latency, Some(0.95)),
    ("p99", BuiltinStatistic::Latency, Some(0.99)),
    ("errorRate", BuiltinStatistic::ErrorRate, None),
    ("requestRate", BuiltinStatistic::RequestRate, None),
    ("requests", BuiltinStatistic::Requests, None),
];

/// The plain measurements a composite metric needs, or None for a plain metric (measure the
/// request itself).
pub fn reads(request: &MeasureRequest) -> Option<Vec<MeasureRequest>> {
    let provider = &request.provider;
    if let Some(compare) = &provider.compare {
        let window = millis(&compare.window, DEFAULT_COMPARE_WINDOW_MS);
        let step = millis(&compare.step, DEFAULT_COMPARE_STEP_MS);
        let canary = read(
            request,
            "canary",
            (*compare.canary).clone(),
            request.at,
            Some(window),
            request.not_before,
            Some(step),
        );
        let baseline_provider = match (&compare.baseline, &compare.canary.builtin) {
            (Some(b), _) => (**b).clone(),
            (None, Some(b)) => {
                let mut stable = b.clone();
                stable.subset = Some(TrafficSubset::Stable);
                MetricProvider {
                    builtin: Some(stable),
                    ..MetricProvider::default()
                }
            }
            (None, None) => MetricProvider::default(),
        };
        let (at, window, not_before) = match &compare.reference {
            None => (request.at, window, request.not_before),
            Some(reference) => match (&reference.offset, &reference.before_start) {
                (Some(offset), _) => (
                    request.at - offset.as_millis().unwrap_or(0) as Millis,
                    window,
                    None,
                ),
                (None, Some(length)) => (
                    request.not_before.unwrap_or(request.at),
                    length.as_millis().unwrap_or(window),
                    None,
                ),
                (None, None) => (request.at, window, request.not_before),
            },
        };
        let baseline = read(
            request,
            "baseline",
            baseline_provider,
            at,
            Some(window),
            not_before,
            Some(step),
        );
        return Some(vec![canary, baseline]);
    }
    if let Some(sequential) = &provider.sequential {
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
        return Some(out);
    }
    if let Some(calibration) = &request.baseline {
        let mut plain = request.clone();
        plain.baseline = None;
        plain.reference = None;
        if request.reference.is_some() {
            // The run already read its reference: only the metric itself is measured.
            return Some(vec![plain]);
        }
        let (at, window) = calibration_window(request, calibration);
        let mut out = vec![plain];
        match &provider.builtin {
            Some(base) => {
                let (statistic, quantile, ..) = base.resolved();
                let (_, min_requests) = calibration.resolved();
                let mut value = builtin(base, statistic, Some(quantile), TrafficSubset::Stable);
                if let Some(b) = value.builtin.as_mut() {
                    b.min_requests = Some(min_requests);
                }
                out.push(read(
                    request,
                    "reference",
                    value,
                    at,
                    Some(window),
                    None,
                    None,
                ));
                for (name, statistic, quantile) in CALIBRATION_STATISTICS {
                    let mut provider = builtin(base, *statistic, *quantile, TrafficSubset::Stable);
                    if let Some(b) = provider.builtin.as_mut()
                        && !matches!(statistic, BuiltinStatistic::Requests)
                    {
                        b.min_requests = Some(min_requests);
                    }
                    out.push(read(
                        request,
                        &format!("reference-{name}"),
                        provider,
                        at,
                        Some(window),
                        None,
                        None,
                    ));
                }
            }
            None => out.push(read(
                request,
                "reference",
                (**provider).clone(),
                at,
                Some(window),
                None,
                None,
            )),
        }
        return Some(out);
    }
    None
}

/// The points of a series answer (NaN kept: the judge's NaN strategy decides).
fn points(result: &MetricResult) -> Vec<f64> {
    match result {
        MetricResult::Nil => Vec::new(),
        MetricResult::Scalar(v) => vec![*v],
        MetricResult::Vector(v) => v.clone(),
        MetricResult::Json(_) => vec![f64::NAN],
    }
}

/// The first non-value among `outcomes` (an error names which read failed), else the values.
fn values(
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

fn decided(
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

/// Describes what a comparison compared against.
fn reference_label(compare: &CompareMetric) -> String {
    let of = if compare.baseline.is_some() {
        "the baseline query"
    } else {
        "the stable subset"
    };
    match &compare.reference {
        None => format!("{of}, concurrent"),
        Some(r) => match (&r.offset, &r.before_start) {
            (Some(offset), _) => format!("{of}, {} earlier", show(offset)),
            (None, Some(length)) => format!("{of}, the {} before the run started", show(length)),
            (None, None) => format!("{of}, concurrent"),
        },
    }
}

fn show(duration: &Duration) -> String {
    match duration.as_millis() {
        Some(ms) if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        Some(ms) if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        Some(ms) => format!("{}s", ms as f64 / 1000.0),
        None => "?".into(),
    }
}

/// The metric's outcome from the outcomes of its [`reads`], in the same order.
pub fn decide(request: &MeasureRequest, outcomes: Vec<Outcome>) -> Outcome {
    let provider = &request.provider;
    if let Some(compare) = &provider.compare {
        return decide_compare(request, compare, outcomes);
    }
    if let Some(sequential) = &provider.sequential {
        return decide_sequential(request, sequential, outcomes);
    }
    if request.baseline.is_some() {
        return decide_calibrated(request, outcomes);
    }
    outcomes
        .into_iter()
        .next()
        .unwrap_or_else(|| Outcome::Error("no measurement was taken".into()))
}

fn decide_compare(
    request: &MeasureRequest,
    compare: &CompareMetric,
    outcomes: Vec<Outcome>,
) -> Outcome {
    let answers = match values(request, outcomes, &["canary series", "baseline series"]) {
        Ok(v) => v,
        Err(outcome) => return outcome,
    };
    let [canary, baseline] = answers.as_slice() else {
        return Outcome::Error("a comparison needs two series".into());
    };
    let (canary, baseline) = (points(canary), points(baseline));
    let finite = |s: &[f64]| s.iter().filter(|v| v.is_finite()).count();
    let (nc, nb) = (finite(&canary), finite(&baseline));
    let reference = reference_label(compare);
    let mut metadata = BTreeMap::from([
        ("judge".to_owned(), "mann-whitney".to_owned()),
        ("reference".to_owned(), reference.clone()),
        ("canaryPoints".to_owned(), nc.to_string()),
        ("baselinePoints".to_owned(), nb.to_string()),
    ]);
    let min_points = compare.min_points.unwrap_or(DEFAULT_MIN_POINTS) as usize;
    if nc < min_points || nb < min_points {
        let reason = format!(
            "insufficient samples: n={nc} canary and {nb} baseline points ({reference}), the minimum is {min_points}"
        );
        if !request.last {
            return Outcome::Deferred(reason);
        }
        let phase = if compare.must_have_data.unwrap_or(false) {
            AnalysisPhase::Failed
        } else {
            AnalysisPhase::Inconclusive
        };
        return decided(phase, "NoData", reason, metadata);
    }
    let zeros = |s: &[f64]| s.iter().filter(|v| **v == 0.0).count() as f64;
    let (zc, zb) = (zeros(&canary) / nc as f64, zeros(&baseline) / nb as f64);
    if zc >= ZERO_INFLATED_SHARE && zb >= ZERO_INFLATED_SHARE {
        return decided(
            AnalysisPhase::Inconclusive,
            "ZeroInflated",
            format!(
                "zero-inflated series: {:.0}% of canary and {:.0}% of baseline points are 0, so ranks are mostly ties and a rank-sum comparison cannot tell them apart; judge error rates with the `sequential` provider",
                zc * 100.0,
                zb * 100.0
            ),
            metadata,
        );
    }
    let judgement = classify(&canary, &baseline, &comparison(compare, request.at as u64));
    if let Some([lo, hi]) = judgement.ci {
        metadata.insert(
            "ci".into(),
            format!("[{}, {}]", format_float(lo), format_float(hi)),
        );
    }
    if let Some(estimate) = judgement.estimate {
        metadata.insert("estimate".into(), format_float(estimate));
    }
    if let Some(effect) = judgement.effect_size {
        metadata.insert("effectSize".into(), format_float(effect));
    }
    let phase = match judgement.classification {
        Classification::Pass => AnalysisPhase::Successful,
        Classification::High | Classification::Low | Classification::NoDataFail => {
            AnalysisPhase::Failed
        }
        Classification::NoData => AnalysisPhase::Inconclusive,
        Classification::Error => AnalysisPhase::Error,
    };
    let reason = judgement.reason.unwrap_or_default();
    decided(
        phase,
        judgement.classification.to_string(),
        format!(
            "{reason} (canary n={}, baseline n={}: {reference})",
            judgement.canary_count.unwrap_or(0),
            judgement.baseline_count.unwrap_or(0)
        ),
        metadata,
    )
}

fn decide_sequential(
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

fn decide_calibrated(request: &MeasureRequest, outcomes: Vec<Outcome>) -> Outcome {
    let mut outcomes = outcomes.into_iter();
    let Some(first) = outcomes.next() else {
        return Outcome::Error("no measurement was taken".into());
    };
    let (result, mut metadata) = match first {
        Outcome::Value { result, metadata } => (result, metadata),
        other => return other,
    };
    if let Some(reference) = &request.reference {
        metadata.extend(reference.iter().map(|(k, v)| (k.clone(), v.clone())));
        return Outcome::Value { result, metadata };
    }
    let mut names = vec!["value"];
    if request.provider.builtin.is_some() {
        names.extend(CALIBRATION_STATISTICS.iter().map(|(n, ..)| *n));
    }
    let (window, min_requests) = request
        .baseline
        .as_ref()
        .map(Calibration::resolved)
        .unwrap_or((0, 0));
    let source = if request.provider.builtin.is_some() {
        format!(
            "the stable subset in the {} before the run started",
            show(&Duration::Millis(window))
        )
    } else {
        "the same query when the run started".to_owned()
    };
    metadata.insert("baseline.source".into(), source.clone());
    for (name, outcome) in names.iter().zip(outcomes) {
        match outcome {
            Outcome::Value {
                result: reference,
                metadata: read,
            } => {
                let value = match &reference {
                    MetricResult::Scalar(v) => Some(*v),
                    MetricResult::Vector(v) if v.len() == 1 => Some(v[0]),
                    _ => None,
                };
                match value {
                    Some(v) if v.is_finite() => {
                        metadata.insert(format!("baseline.{name}"), format_float(v));
                    }
                    _ if *name == "value" => {
                        let why = read.get("reason").cloned().unwrap_or_else(|| {
                            format!("it answered {:?}", reference.to_argo_string())
                        });
                        return decided(
                            AnalysisPhase::Inconclusive,
                            result.to_argo_string(),
                            format!(
                                "no reference for this cluster: {source} gives no value ({why}; the minimum is {min_requests} requests)"
                            ),
                            metadata,
                        );
                    }
                    _ => {}
                }
            }
            Outcome::Error(e) => {
                return Outcome::Error(format!("reference ({source}): {e}"));
            }
            Outcome::Terminated => return Outcome::Terminated,
            Outcome::Deferred(reason) => return Outcome::Deferred(reason),
            Outcome::Decided { message, .. } => {
                return Outcome::Error(format!("reference ({source}): {message}"));
            }
        }
    }
    Outcome::Value { result, metadata }
}

/// The `baseline` a calibrated metric's conditions read, from a measurement's metadata.
pub fn baseline_variables(metadata: &BTreeMap<String, String>) -> BTreeMap<String, f64> {
    metadata
        .iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix("baseline.")?;
            let value = v.parse::<f64>().ok()?;
            Some((name.to_owned(), value))
        })
        .collect()
}

/// The reference a calibrated measurement was judged against, in words, for its message (and
/// so for the audit log): where it came from and the values the conditions could read (shown
/// to four decimals; the metadata keeps them whole).
pub fn baseline_summary(metadata: &BTreeMap<String, String>) -> String {
    let values: Vec<String> = metadata
        .iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix("baseline.")?;
            let shown = v
                .parse::<f64>()
                .map_or_else(|_| v.clone(), crate::judge::classify::number);
            (name != "source").then(|| format!("{name}={shown}"))
        })
        .collect();
    format!(
        "baseline from {}: {}",
        metadata
            .get("baseline.source")
            .map_or("the reference", String::as_str),
        values.join(", ")
    )
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

//! The `compare` metric: the canary's series against a baseline series (concurrent, or a past
//! window of its own), judged by the rank-sum judge.

use std::collections::BTreeMap;

use super::reading::{decided, millis, points, read, show, values};
use crate::analysis::condition::format_float;
use crate::analysis::provider::{MeasureRequest, Outcome};
use crate::judge::{Classification, classify};
use crate::spec::analysis::{AnalysisPhase, CompareMetric, MetricProvider, TrafficSubset};
use crate::spec::judge::{Comparison, Direction, EffectSize, EffectSizeMeasure};
use crate::time::Millis;

/// Default span of a comparison's series.
pub const DEFAULT_COMPARE_WINDOW_MS: u64 = 5 * 60_000;

/// Default resolution of a comparison's series.
pub const DEFAULT_COMPARE_STEP_MS: u64 = 30_000;

/// Default fewest points on each side of a comparison.
pub const DEFAULT_MIN_POINTS: u64 = 3;

/// Share of zero points on both sides from which a rank-sum comparison is not trusted.
const ZERO_INFLATED_SHARE: f64 = 0.5;

/// Why a `compare` block cannot run.
pub(super) fn problems(compare: &CompareMetric, out: &mut Vec<(String, String)>) {
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

/// The canary's and the baseline's series.
pub(super) fn reads(request: &MeasureRequest, compare: &CompareMetric) -> Vec<MeasureRequest> {
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
    vec![canary, baseline]
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

pub(super) fn decide(
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

//! One metric's classification, step by step as Kayenta's NetflixACAJudge does it: NaN handling,
//! IQR outlier removal, the no-data and identical-data shortcuts, seeded noise for two constant
//! series, the Mann-Whitney shift interval against a tolerance band on the estimate, the
//! effect-size gates, and the critical gates. Every answer carries its reason.

use serde::Serialize;

use super::Classification;
use super::rank_sum::shift_interval;
use crate::rng::Rng;
use crate::spec::judge::{Comparison, Direction, EffectSizeMeasure, NanStrategy, OutlierStrategy};

/// The relative standard deviation of the noise added to a constant series.
const NOISE_SCALE: f64 = 1e-5;

/// The answer for one metric (the single-comparison JSON of `flotilla judge`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Judgement {
    /// The classification.
    pub classification: Classification,
    /// Whether this result fails a critical metric (zeroes the score unless it is `Pass`).
    pub critical: bool,
    /// The confidence interval of the shift (canary − baseline), when a test ran.
    pub ci: Option<[f64; 2]>,
    /// The Hodges–Lehmann shift estimate, when a test ran.
    pub estimate: Option<f64>,
    /// The effect size in the configured measure; null when it cannot be computed (a mean of 0).
    pub effect_size: Option<f64>,
    /// Values left in the canary after NaN and outlier handling (null for a precomputed result).
    pub canary_count: Option<usize>,
    /// Values left in the baseline after NaN and outlier handling.
    pub baseline_count: Option<usize>,
    /// Why, in words.
    pub reason: Option<String>,
    /// mean(canary)/mean(baseline), Kayenta's reported "ratio" (NaN when a mean is 0).
    #[serde(skip)]
    pub deviation: f64,
}

/// Classifies the canary against the baseline.
pub fn classify(canary: &[f64], baseline: &[f64], comparison: &Comparison) -> Judgement {
    let canary = prepare(canary, comparison);
    let baseline = prepare(baseline, comparison);
    let neutral = comparison.effect_size.measure.neutral();
    let early = |classification, critical, reason: String| Judgement {
        classification,
        critical,
        ci: None,
        estimate: None,
        effect_size: (classification == Classification::Pass).then_some(neutral),
        canary_count: Some(canary.len()),
        baseline_count: Some(baseline.len()),
        reason: Some(reason),
        deviation: 1.0,
    };
    if canary.is_empty() || baseline.is_empty() {
        let missing = match (canary.is_empty(), baseline.is_empty()) {
            (true, true) => "canary and baseline have",
            (true, false) => "the canary has",
            _ => "the baseline has",
        };
        let reason = format!("missing data: {missing} no values after NaN and outlier handling");
        return match comparison.nan_strategy {
            NanStrategy::Replace => early(
                Classification::Pass,
                false,
                format!("{reason}; passed because nanStrategy is replace"),
            ),
            NanStrategy::Remove if comparison.must_have_data && !comparison.critical => {
                early(Classification::NoDataFail, false, reason)
            }
            NanStrategy::Remove => early(Classification::NoData, comparison.critical, reason),
        };
    }
    if sorted(&canary) == sorted(&baseline) {
        return early(
            Classification::Pass,
            false,
            "the canary and baseline data are identical".to_owned(),
        );
    }
    if canary.len() == 1 && baseline.len() == 1 {
        // The rank-sum test has no power here (its smallest two-sided p-value is 1), and its
        // normal approximation degenerates (zero spread at the interval's end).
        let reason = "one value on each side is too little data for the rank-sum test".to_owned();
        return if comparison.must_have_data && !comparison.critical {
            early(Classification::NoDataFail, false, reason)
        } else {
            early(Classification::NoData, comparison.critical, reason)
        };
    }
    let first = canary[0];
    if canary.iter().chain(&baseline).all(|v| *v == first) {
        return early(
            Classification::Pass,
            false,
            format!("every canary and baseline value is {}", number(first)),
        );
    }
    let constant = |s: &[f64]| s.iter().all(|v| *v == s[0]);
    let (canary, baseline, noise) = if constant(&canary) && constant(&baseline) {
        let mut rng = Rng::new(comparison.seed);
        (
            with_noise(&canary, &mut rng),
            with_noise(&baseline, &mut rng),
            true,
        )
    } else {
        (canary, baseline, false)
    };
    compare(&canary, &baseline, comparison, noise)
}

/// The test and the gates, on prepared series.
fn compare(canary: &[f64], baseline: &[f64], c: &Comparison, noise: bool) -> Judgement {
    let (m, n) = (canary.len(), baseline.len());
    let deviation = mean_ratio(canary, baseline);
    let interval = match shift_interval(canary, baseline, c.confidence) {
        Ok(interval) => interval,
        Err(error) => {
            return Judgement {
                classification: Classification::Error,
                critical: false,
                ci: None,
                estimate: None,
                effect_size: None,
                canary_count: Some(m),
                baseline_count: Some(n),
                reason: Some(format!("metric classification failed: {error}")),
                deviation,
            };
        }
    };
    let effect = match c.effect_size.measure {
        EffectSizeMeasure::MeanRatio => deviation,
        EffectSizeMeasure::Cles => cles(canary, baseline),
    };
    let gates = &c.effect_size;
    let bound = c.tolerance * interval.estimate.abs();
    let reaches = |limit: f64| effect.is_nan() || effect >= limit;
    let stays_under = |limit: f64| effect.is_nan() || effect <= limit;
    let above = interval.low > bound;
    let below = interval.high < -bound;
    let watches_increase = c.direction != Direction::Decrease;
    let watches_decrease = c.direction != Direction::Increase;
    let (classification, critical) = if watches_increase && above && reaches(gates.allowed_increase)
    {
        (
            Classification::High,
            c.critical && reaches(gates.critical_increase),
        )
    } else if watches_decrease && below && stays_under(gates.allowed_decrease) {
        (
            Classification::Low,
            c.critical && stays_under(gates.critical_decrease),
        )
    } else {
        (Classification::Pass, false)
    };

    let ci = format!(
        "{}% interval of the shift [{}, {}]",
        number(c.confidence * 100.0),
        number(interval.low),
        number(interval.high)
    );
    let band = format!(
        "±{} (tolerance {} × |estimate {}|)",
        number(bound),
        number(c.tolerance),
        number(interval.estimate)
    );
    let measure = match gates.measure {
        EffectSizeMeasure::MeanRatio => "mean ratio",
        EffectSizeMeasure::Cles => "CLES",
    };
    // "mean ratio 12.04 ≥ allowedIncrease 1", or why the gate was skipped.
    let gate = |relation: &str, name: &str, limit: f64| {
        if effect.is_nan() {
            format!("{measure} undefined (a mean is 0), so the effect-size gate is skipped")
        } else {
            format!(
                "{measure} {} {relation} {name} {}",
                number(effect),
                number(limit)
            )
        }
    };
    let mut reason = match classification {
        Classification::High => format!(
            "canary higher: {ci} lies above {band}; {}",
            gate("≥", "allowedIncrease", gates.allowed_increase)
        ),
        Classification::Low => format!(
            "canary lower: {ci} lies below {band}; {}",
            gate("≤", "allowedDecrease", gates.allowed_decrease)
        ),
        _ if above && !watches_increase => {
            format!("canary higher ({ci} above {band}) but direction is decrease")
        }
        _ if below && !watches_decrease => {
            format!("canary lower ({ci} below {band}) but direction is increase")
        }
        _ if above => format!(
            "{ci} lies above {band}, but {}",
            gate("<", "allowedIncrease", gates.allowed_increase)
        ),
        _ if below => format!(
            "{ci} lies below {band}, but {}",
            gate(">", "allowedDecrease", gates.allowed_decrease)
        ),
        _ => format!("no significant change: {ci} does not clear {band}"),
    };
    if c.critical && classification != Classification::Pass {
        let (verb, limit) = match classification {
            Classification::High => ("reaches", gates.critical_increase),
            _ => ("is within", gates.critical_decrease),
        };
        reason.push_str(&if critical {
            format!(
                "; critical: the effect size {verb} the critical limit {}",
                number(limit)
            )
        } else {
            format!(
                "; not critical: the effect size stays short of the critical limit {}",
                number(limit)
            )
        });
    }
    if noise {
        reason.push_str("; both series were constant, so seeded noise (sd 1e-5 × value) was added");
    }
    Judgement {
        classification,
        critical,
        ci: Some([interval.low, interval.high]),
        estimate: Some(interval.estimate),
        effect_size: (!effect.is_nan()).then_some(effect),
        canary_count: Some(m),
        baseline_count: Some(n),
        reason: Some(reason),
        deviation,
    }
}

/// NaN handling, then (if configured) outlier removal, on one series.
fn prepare(values: &[f64], c: &Comparison) -> Vec<f64> {
    let values: Vec<f64> = match c.nan_strategy {
        NanStrategy::Remove => values.iter().copied().filter(|v| !v.is_nan()).collect(),
        NanStrategy::Replace => values
            .iter()
            .map(|v| if v.is_nan() { 0.0 } else { *v })
            .collect(),
    };
    match c.outliers {
        OutlierStrategy::Keep => values,
        OutlierStrategy::Remove => {
            let (low, high) = outlier_fences(&values, c.outlier_factor, true);
            values
                .into_iter()
                .filter(|v| !(*v < low || *v > high))
                .collect()
        }
    }
}

/// Tukey's fences `[Q1 − factor·IQR, Q3 + factor·IQR]` (R-7 percentiles). With
/// `reduced_sensitivity` (what the judge uses) they widen to at least `[P1, P99]`. NaN for an
/// empty series (nothing is an outlier).
pub fn outlier_fences(values: &[f64], factor: f64, reduced_sensitivity: bool) -> (f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let q1 = percentile(&sorted, 25.0);
    let q3 = percentile(&sorted, 75.0);
    let (low, high) = (q1 - factor * (q3 - q1), q3 + factor * (q3 - q1));
    if reduced_sensitivity {
        (
            low.min(percentile(&sorted, 1.0)),
            high.max(percentile(&sorted, 99.0)),
        )
    } else {
        (low, high)
    }
}

/// The `p`-th percentile (0–100) of sorted values, R-7 (linear interpolation between order
/// statistics); NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let h = (n - 1) as f64 * p / 100.0;
            let below = (h.floor() as usize).min(n - 1);
            let above = (below + 1).min(n - 1);
            sorted[below] + (h - below as f64) * (sorted[above] - sorted[below])
        }
    }
}

/// mean(canary) / mean(baseline); NaN when either mean is 0.
pub fn mean_ratio(canary: &[f64], baseline: &[f64]) -> f64 {
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    let (c, b) = (mean(canary), mean(baseline));
    if c == 0.0 || b == 0.0 {
        f64::NAN
    } else {
        c / b
    }
}

/// The common-language effect size: `(2·R₁ − m(m+1)) / (2mn)`, with `R₁` the canary's rank sum in
/// the pooled sample (average ranks for ties).
pub fn cles(canary: &[f64], baseline: &[f64]) -> f64 {
    let (m, n) = (canary.len() as f64, baseline.len() as f64);
    let mut pooled: Vec<(f64, bool)> = canary
        .iter()
        .map(|v| (v + 0.0, true))
        .chain(baseline.iter().map(|v| (v + 0.0, false)))
        .collect();
    pooled.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut rank_sum = 0.0;
    let mut start = 0;
    while start < pooled.len() {
        let end = start
            + pooled[start..]
                .iter()
                .take_while(|p| p.0 == pooled[start].0)
                .count();
        let rank = (start + 1 + end) as f64 / 2.0;
        rank_sum += rank * pooled[start..end].iter().filter(|p| p.1).count() as f64;
        start = end;
    }
    (2.0 * rank_sum - m * (m + 1.0)) / (2.0 * m * n)
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// Adds N(0, (v·1e-5)²) noise to a constant series of value `v`.
fn with_noise(values: &[f64], rng: &mut Rng) -> Vec<f64> {
    let sd = values[0] * NOISE_SCALE;
    values.iter().map(|v| v + sd * rng.normal()).collect()
}

/// A number for a reason: at most four decimals, scientific when tiny.
pub(crate) fn number(v: f64) -> String {
    if v != 0.0 && v.abs() < 1e-3 {
        return format!("{v:.3e}");
    }
    let text = format!("{v:.4}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;

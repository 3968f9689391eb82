//! The statistical judge's settings, as manifests (a `compare` or `sequential` metric) and the
//! inputs of `flotilla judge` give them: which change fails, NaN and outlier handling, the
//! effect-size gates, a comparison's parameters, and the sequential test's rates. The judge reads
//! them; none of its computations live here.

use serde::{Deserialize, Serialize};

/// Which change of the canary counts as a regression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Direction {
    /// Only a higher canary fails (latency, errors).
    Increase,
    /// Only a lower canary fails (throughput, success rate).
    Decrease,
    /// Either way fails (Kayenta's default).
    #[default]
    Either,
}

/// What to do with NaN values (missing points) in a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NanStrategy {
    /// Drop them (Kayenta's default); a series left empty is `NoData`.
    #[default]
    Remove,
    /// Replace them with 0; an empty series then passes.
    Replace,
}

/// Whether outliers are removed before the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OutlierStrategy {
    /// Keep every value (Kayenta's default).
    #[default]
    Keep,
    /// Drop values outside the IQR fences, with reduced sensitivity (see the judge's `outlier_fences`).
    Remove,
}

/// How the size of a change is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EffectSizeMeasure {
    /// mean(canary) / mean(baseline); NaN when either mean is 0. No effect = 1.
    #[default]
    MeanRatio,
    /// Common-language effect size: the share of (canary, baseline) pairs where the canary is
    /// higher, ties counting half. No effect = 0.5.
    Cles,
}

impl EffectSizeMeasure {
    /// The value that means "no effect", and Kayenta's default for every limit.
    pub fn neutral(self) -> f64 {
        match self {
            EffectSizeMeasure::MeanRatio => 1.0,
            EffectSizeMeasure::Cles => 0.5,
        }
    }
}

/// The effect-size gates: a change is `High` only if its effect size reaches `allowed_increase`
/// (`Low`: at most `allowed_decrease`), and a critical metric's `High` is critical only if it
/// reaches `critical_increase` (`Low`: at most `critical_decrease`). A NaN effect size passes
/// every gate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EffectSize {
    /// The measure.
    pub measure: EffectSizeMeasure,
    /// Least effect size for `High`.
    pub allowed_increase: f64,
    /// Greatest effect size for `Low`.
    pub allowed_decrease: f64,
    /// Least effect size for a critical `High`.
    pub critical_increase: f64,
    /// Greatest effect size for a critical `Low`.
    pub critical_decrease: f64,
}

impl EffectSize {
    /// Every limit at the measure's neutral value (Kayenta's defaults).
    pub fn neutral(measure: EffectSizeMeasure) -> EffectSize {
        let v = measure.neutral();
        EffectSize {
            measure,
            allowed_increase: v,
            allowed_decrease: v,
            critical_increase: v,
            critical_decrease: v,
        }
    }
}

/// The parameters of one canary-versus-baseline comparison. [`Default`] gives Kayenta's judge
/// (tolerance 0.25, confidence 0.98, direction either, mean ratio with neutral limits, NaN removed,
/// outliers kept with factor 3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// Which change fails.
    pub direction: Direction,
    /// Confidence level of the shift interval, in (0, 1).
    pub confidence: f64,
    /// The interval must clear ±`tolerance`·|estimate| to count as a change.
    pub tolerance: f64,
    /// The effect-size gates.
    pub effect_size: EffectSize,
    /// A critical metric that fails (beyond the critical gates) zeroes the score.
    pub critical: bool,
    /// Missing data classifies as `NoDataFail` instead of `NoData` (ignored for critical metrics).
    pub must_have_data: bool,
    /// NaN handling.
    pub nan_strategy: NanStrategy,
    /// Outlier handling.
    pub outliers: OutlierStrategy,
    /// The IQR factor of outlier removal.
    pub outlier_factor: f64,
    /// Seed of the noise added to two constant series.
    pub seed: u64,
}

impl Default for Comparison {
    fn default() -> Comparison {
        Comparison {
            direction: Direction::Either,
            confidence: 0.98,
            tolerance: 0.25,
            effect_size: EffectSize::neutral(EffectSizeMeasure::MeanRatio),
            critical: false,
            must_have_data: false,
            nan_strategy: NanStrategy::Remove,
            outliers: OutlierStrategy::Keep,
            outlier_factor: 3.0,
            seed: 0,
        }
    }
}

/// The settings of the test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SequentialConfig {
    /// False-alarm rate (failing a canary as good as the baseline), default 0.01.
    pub alpha: f64,
    /// Miss rate at `ratio`, default 0.05.
    pub beta: f64,
    /// The error-rate ratio (canary / baseline) to detect, default 2.
    pub ratio: f64,
    /// Canary requests before any decision, default 100; fewer record no measurement.
    pub min_requests: u64,
}

impl Default for SequentialConfig {
    fn default() -> SequentialConfig {
        SequentialConfig {
            alpha: 0.01,
            beta: 0.05,
            ratio: 2.0,
            min_requests: 100,
        }
    }
}

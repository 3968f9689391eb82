//! The statistical judge: canary-versus-baseline comparison of metric series with Kayenta's
//! NetflixACAJudge method (Mann-Whitney shift interval, effect size, per-metric classification,
//! weighted group scoring), and a sequential test of error rates. Pure: no I/O, no clock; the only
//! randomness (the tiny noise Kayenta adds to two constant series) comes from a seeded generator.
//!
//! - [`rank_sum`]: the rank-sum statistic, its shift interval and estimate; [`zeroin`]: Brent's
//!   root finder they use.
//! - [`classify`]: one metric's classification (NaN handling, IQR outliers, directions, effect
//!   sizes, critical and must-have-data metrics).
//! - [`score`]: groups, weights, thresholds and the verdict of a set of metrics.
//! - [`input`]: the JSON documents `flotilla judge` reads and writes.
//! - [`sequential`]: the sequential probability ratio test of canary versus baseline error rates.
//!
//! Its settings (directions, NaN and outlier strategies, effect sizes, a comparison's and the
//! sequential test's parameters) are spec types, [`crate::spec::judge`], re-exported here.

pub mod classify;
pub mod input;
pub mod rank_sum;
pub mod score;
pub mod sequential;
pub mod zeroin;

use serde::{Deserialize, Serialize};

pub use crate::spec::judge::{
    Comparison, Direction, EffectSize, EffectSizeMeasure, NanStrategy, OutlierStrategy,
};
pub use classify::{Judgement, classify};
pub use score::{Scorecard, ScoredMetric, Thresholds, Verdict, score};

/// Why a comparison could not be computed (the classifier turns these into `Error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JudgeError {
    /// Every pooled observation has the same rank: the statistic has no spread.
    #[error("cannot compute a confidence interval when all observations are tied")]
    AllTied,
    /// A series is empty.
    #[error("a series is empty")]
    Empty,
}

/// A metric's classification (Kayenta's labels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Classification {
    /// No significant change (or none in the failing direction).
    Pass,
    /// The canary is significantly higher.
    High,
    /// The canary is significantly lower.
    Low,
    /// A series is empty after NaN and outlier handling; excluded from the group scores.
    NoData,
    /// A series is empty and the metric must have data: counts as a failure.
    NoDataFail,
    /// The comparison could not be computed; excluded from the group scores.
    Error,
}

impl std::fmt::Display for Classification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

//! The JSON documents of `flotilla judge`: a single comparison (two series and Kayenta's
//! per-metric settings) or a scored set (metrics with groups, group weights and thresholds), and
//! their answers. Strict: unknown fields, wrong types and out-of-range settings are errors that
//! name the field path; a NaN point may be written `"NaN"` or `null`.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use super::{Classification, Judgement, ScoredMetric, Thresholds, Verdict, classify, score};
use crate::spec::judge::{
    Comparison, Direction, EffectSize, EffectSizeMeasure, NanStrategy, OutlierStrategy,
};

/// The largest input read (as for manifests).
pub const MAX_INPUT_BYTES: usize = 16 * 1024 * 1024;

/// Why an input document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// Larger than [`MAX_INPUT_BYTES`].
    #[error("input is {0} bytes, more than the limit of 16 MiB")]
    TooLarge(usize),
    /// Not JSON.
    #[error("not valid JSON: {0}")]
    Syntax(String),
    /// A field is missing, unknown, mistyped or out of range.
    #[error("{path}: {message}")]
    Field {
        /// Where, e.g. `metrics[1].canary[3]`.
        path: String,
        /// What is wrong.
        message: String,
    },
}

fn field(path: impl Into<String>, message: impl Into<String>) -> InputError {
    InputError::Field {
        path: path.into(),
        message: message.into(),
    }
}

/// The answer of `flotilla judge`: one judgement, or a scored set.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Answer {
    /// For a single comparison.
    Single(Judgement),
    /// For a scored set.
    Scored(ScoredAnswer),
}

/// The answer for a scored set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoredAnswer {
    /// Each metric's judgement, in input order (muted ones included).
    pub metrics: Vec<NamedJudgement>,
    /// The score, 0–100.
    pub score: f64,
    /// The verdict.
    pub verdict: Verdict,
}

/// A metric's name and judgement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NamedJudgement {
    /// The metric's name.
    pub name: String,
    /// Its judgement.
    #[serde(flatten)]
    pub judgement: Judgement,
}

/// One point of a series: a number, or NaN written `"NaN"` or `null`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Point(f64);

impl<'de> Deserialize<'de> for Point {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Point, D::Error> {
        struct PointVisitor;
        impl Visitor<'_> for PointVisitor {
            type Value = Point;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number, \"NaN\" or null")
            }
            fn visit_f64<E>(self, v: f64) -> Result<Point, E> {
                Ok(Point(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Point, E> {
                Ok(Point(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Point, E> {
                Ok(Point(v as f64))
            }
            fn visit_unit<E>(self) -> Result<Point, E> {
                Ok(Point(f64::NAN))
            }
            fn visit_none<E>(self) -> Result<Point, E> {
                Ok(Point(f64::NAN))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Point, E> {
                if v == "NaN" {
                    Ok(Point(f64::NAN))
                } else {
                    Err(E::invalid_value(de::Unexpected::Str(v), &self))
                }
            }
        }
        deserializer.deserialize_any(PointVisitor)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EffectSizeInput {
    #[serde(default)]
    measure: EffectSizeMeasure,
    allowed_increase: Option<f64>,
    allowed_decrease: Option<f64>,
    critical_increase: Option<f64>,
    critical_decrease: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutliersInput {
    #[serde(default)]
    strategy: OutlierStrategy,
    factor: Option<f64>,
}

/// A metric of a scored set, or (without name, groups, muted and classification) a single
/// comparison.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MetricInput {
    name: Option<String>,
    groups: Option<Vec<String>>,
    muted: Option<bool>,
    classification: Option<Classification>,
    canary: Option<Vec<Point>>,
    baseline: Option<Vec<Point>>,
    direction: Option<Direction>,
    confidence: Option<f64>,
    tolerance: Option<f64>,
    effect_size: Option<EffectSizeInput>,
    critical: Option<bool>,
    must_have_data: Option<bool>,
    nan_strategy: Option<NanStrategy>,
    outliers: Option<OutliersInput>,
    seed: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ThresholdsInput {
    pass: f64,
    marginal: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SetInput {
    metrics: Vec<MetricInput>,
    #[serde(default)]
    group_weights: BTreeMap<String, f64>,
    thresholds: ThresholdsInput,
}

/// Reads a `flotilla judge` document and judges it.
pub fn judge_json(text: &str) -> Result<Answer, InputError> {
    if text.len() > MAX_INPUT_BYTES {
        return Err(InputError::TooLarge(text.len()));
    }
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| InputError::Syntax(e.to_string()))?;
    let Some(object) = value.as_object() else {
        return Err(field(
            "(document)",
            "expected an object: a comparison or a scored set",
        ));
    };
    if object.contains_key("metrics") {
        let set: SetInput = decode(&value)?;
        judge_set(set).map(Answer::Scored)
    } else {
        let metric: MetricInput = decode(&value)?;
        for (present, name) in [
            (metric.name.is_some(), "name"),
            (metric.groups.is_some(), "groups"),
            (metric.muted.is_some(), "muted"),
            (metric.classification.is_some(), "classification"),
        ] {
            if present {
                return Err(field(
                    name,
                    "only metrics of a scored set (`metrics`) take this field",
                ));
            }
        }
        let (canary, baseline) = series(&metric, "")?;
        let comparison = comparison(&metric, "")?;
        Ok(Answer::Single(classify(&canary, &baseline, &comparison)))
    }
}

fn judge_set(set: SetInput) -> Result<ScoredAnswer, InputError> {
    let mut names = BTreeSet::new();
    let mut judged = Vec::with_capacity(set.metrics.len());
    let mut scored = Vec::with_capacity(set.metrics.len());
    for (i, metric) in set.metrics.iter().enumerate() {
        let at = format!("metrics[{i}].");
        let name = metric
            .name
            .clone()
            .ok_or_else(|| field(format!("{at}name"), "missing field `name`"))?;
        if !names.insert(name.clone()) {
            return Err(field(
                format!("{at}name"),
                format!("duplicate metric name `{name}`"),
            ));
        }
        let judgement = match metric.classification {
            Some(classification) => {
                for (present, key) in [
                    (metric.canary.is_some(), "canary"),
                    (metric.baseline.is_some(), "baseline"),
                ] {
                    if present {
                        return Err(field(
                            format!("{at}{key}"),
                            "give either a precomputed `classification` or the two series, not both",
                        ));
                    }
                }
                Judgement {
                    classification,
                    critical: metric.critical.unwrap_or(false),
                    ci: None,
                    estimate: None,
                    effect_size: None,
                    canary_count: None,
                    baseline_count: None,
                    reason: Some("precomputed classification".to_owned()),
                    deviation: f64::NAN,
                }
            }
            None => {
                let (canary, baseline) = series(metric, &at)?;
                classify(&canary, &baseline, &comparison(metric, &at)?)
            }
        };
        scored.push(ScoredMetric {
            name: name.clone(),
            classification: judgement.classification,
            critical: judgement.critical,
            muted: metric.muted.unwrap_or(false),
            groups: metric
                .groups
                .clone()
                .unwrap_or_else(|| vec!["default".to_owned()]),
        });
        judged.push(NamedJudgement { name, judgement });
    }
    for (group, weight) in &set.group_weights {
        if !weight.is_finite() || *weight < 0.0 {
            return Err(field(
                format!("groupWeights.{group}"),
                format!("a weight is a percentage ≥ 0, got {weight}"),
            ));
        }
    }
    let thresholds = Thresholds {
        pass: set.thresholds.pass,
        marginal: set.thresholds.marginal,
    };
    if !thresholds.pass.is_finite() || !thresholds.marginal.is_finite() {
        return Err(field("thresholds", "thresholds must be finite numbers"));
    }
    if thresholds.marginal > thresholds.pass {
        return Err(field(
            "thresholds.marginal",
            format!(
                "marginal ({}) must not exceed pass ({})",
                thresholds.marginal, thresholds.pass
            ),
        ));
    }
    let card = score(&scored, &set.group_weights, thresholds);
    Ok(ScoredAnswer {
        metrics: judged,
        score: card.score,
        verdict: card.verdict,
    })
}

/// The two series of a metric; both are required.
fn series(metric: &MetricInput, at: &str) -> Result<(Vec<f64>, Vec<f64>), InputError> {
    let take = |points: &Option<Vec<Point>>, key: &str| {
        points
            .as_ref()
            .map(|p| p.iter().map(|p| p.0).collect::<Vec<f64>>())
            .ok_or_else(|| {
                let hint = if at.is_empty() {
                    ""
                } else {
                    " (or a precomputed `classification`)"
                };
                field(format!("{at}{key}"), format!("missing field `{key}`{hint}"))
            })
    };
    Ok((
        take(&metric.canary, "canary")?,
        take(&metric.baseline, "baseline")?,
    ))
}

/// The comparison settings of a metric, with Kayenta's defaults, checked.
fn comparison(metric: &MetricInput, at: &str) -> Result<Comparison, InputError> {
    let defaults = Comparison::default();
    let confidence = metric.confidence.unwrap_or(defaults.confidence);
    if !(confidence > 0.0 && confidence < 1.0) {
        return Err(field(
            format!("{at}confidence"),
            format!("a confidence level is between 0 and 1 (exclusive), got {confidence}"),
        ));
    }
    let tolerance = metric.tolerance.unwrap_or(defaults.tolerance);
    if !(tolerance.is_finite() && tolerance >= 0.0) {
        return Err(field(
            format!("{at}tolerance"),
            format!("a tolerance is a number ≥ 0, got {tolerance}"),
        ));
    }
    let effect_size = match &metric.effect_size {
        None => defaults.effect_size,
        Some(input) => {
            let neutral = input.measure.neutral();
            let limit = |value: Option<f64>, key: &str| {
                let value = value.unwrap_or(neutral);
                if value.is_finite() {
                    Ok(value)
                } else {
                    Err(field(
                        format!("{at}effectSize.{key}"),
                        "must be a finite number",
                    ))
                }
            };
            EffectSize {
                measure: input.measure,
                allowed_increase: limit(input.allowed_increase, "allowedIncrease")?,
                allowed_decrease: limit(input.allowed_decrease, "allowedDecrease")?,
                critical_increase: limit(input.critical_increase, "criticalIncrease")?,
                critical_decrease: limit(input.critical_decrease, "criticalDecrease")?,
            }
        }
    };
    let (outliers, outlier_factor) = match &metric.outliers {
        None => (defaults.outliers, defaults.outlier_factor),
        Some(input) => {
            let factor = input.factor.unwrap_or(defaults.outlier_factor);
            if !(factor.is_finite() && factor > 0.0) {
                return Err(field(
                    format!("{at}outliers.factor"),
                    format!("the IQR factor must be greater than 0, got {factor}"),
                ));
            }
            (input.strategy, factor)
        }
    };
    Ok(Comparison {
        direction: metric.direction.unwrap_or(defaults.direction),
        confidence,
        tolerance,
        effect_size,
        critical: metric.critical.unwrap_or(false),
        must_have_data: metric.must_have_data.unwrap_or(false),
        nan_strategy: metric.nan_strategy.unwrap_or(defaults.nan_strategy),
        outliers,
        outlier_factor,
        seed: metric.seed.unwrap_or(defaults.seed),
    })
}

/// Decodes with serde, turning the first error into a field path and a message.
fn decode<T: DeserializeOwned>(value: &serde_json::Value) -> Result<T, InputError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|error| {
        let mut path = error.path().to_string();
        if path == "." || path == "?" {
            path.clear();
        }
        let message = error.inner().to_string();
        // serde reports a missing field at its parent; point at the field itself.
        if let Some(rest) = message.strip_prefix("missing field `")
            && let Some(name) = rest.split('`').next()
        {
            path = if path.is_empty() {
                name.to_owned()
            } else {
                format!("{path}.{name}")
            };
        }
        if path.is_empty() {
            path = "(document)".to_owned();
        }
        field(path, message)
    })
}

#[cfg(test)]
#[path = "input_tests.rs"]
mod tests;

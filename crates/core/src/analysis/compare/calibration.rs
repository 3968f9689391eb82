//! A calibrated metric (`baseline:`): its conditions read the cluster's own reference, the
//! stable subset (or the same query) over a window before the run started, read once and kept.

use std::collections::BTreeMap;

use super::reading::{builtin, decided, read, show};
use crate::analysis::condition::{MetricResult, format_float};
use crate::analysis::provider::{MeasureRequest, Outcome};
use crate::spec::analysis::{AnalysisPhase, BuiltinStatistic, Calibration, TrafficSubset};
use crate::spec::common::Duration;
use crate::time::Millis;

/// The statistics a calibrated builtin metric's conditions may read as `baseline.<name>`.
pub(super) const CALIBRATION_STATISTICS: &[(&str, BuiltinStatistic, Option<f64>)] = &[
    ("p50", BuiltinStatistic::Latency, Some(0.5)),
    ("p95", BuiltinStatistic::Latency, Some(0.95)),
    ("p99", BuiltinStatistic::Latency, Some(0.99)),
    ("errorRate", BuiltinStatistic::ErrorRate, None),
    ("requestRate", BuiltinStatistic::RequestRate, None),
    ("requests", BuiltinStatistic::Requests, None),
];

/// The reference window of a calibrated metric: (at, window) ending when the run started.
fn calibration_window(request: &MeasureRequest, calibration: &Calibration) -> (Millis, u64) {
    let (window, _) = calibration.resolved();
    (request.not_before.unwrap_or(request.at), window)
}

/// The metric itself and, until the run has read it, its reference.
pub(super) fn reads(request: &MeasureRequest, calibration: &Calibration) -> Vec<MeasureRequest> {
    let provider = &request.provider;
    let mut plain = request.clone();
    plain.baseline = None;
    plain.reference = None;
    if request.reference.is_some() {
        // The run already read its reference: only the metric itself is measured.
        return vec![plain];
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
    out
}

pub(super) fn decide(request: &MeasureRequest, outcomes: Vec<Outcome>) -> Outcome {
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

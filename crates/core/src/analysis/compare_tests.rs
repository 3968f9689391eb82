//! Tests of the composite measurements: which reads each asks for, how their answers become a
//! verdict with its explanation, and how a run treats a deferred (too thin) measurement.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::calibration::CALIBRATION_STATISTICS;
use super::*;
use crate::analysis::condition::MetricResult;
use crate::analysis::plan::resolve;
use crate::analysis::provider::{MeasureRequest, Outcome};
use crate::analysis::run::Run;
use crate::spec::analysis::{
    AnalysisPhase, AnalysisTemplateSpec, Calibration, Metric, MetricProvider, TrafficSubset,
};

fn provider(value: serde_json::Value) -> MetricProvider {
    serde_json::from_value(value).unwrap()
}

fn request(provider: MetricProvider, last: bool) -> MeasureRequest {
    MeasureRequest {
        metric_index: 0,
        metric: "m".into(),
        provider: Arc::new(provider),
        at: 10_000_000,
        window: None,
        not_before: Some(9_000_000),
        step: None,
        baseline: None,
        reference: None,
        last,
    }
}

fn series(values: &[f64]) -> Outcome {
    Outcome::Value {
        result: MetricResult::Vector(values.to_vec()),
        metadata: BTreeMap::new(),
    }
}

/// A deterministic wobble around `level` (±2%).
fn around(level: f64, n: usize, phase: usize) -> Vec<f64> {
    (0..n)
        .map(|i| level * (1.0 + 0.02 * (((i * 7 + phase * 3) % 11) as f64 / 5.0 - 1.0)))
        .collect()
}

#[test]
fn a_builtin_comparison_reads_the_canary_and_the_concurrent_stable_subset() {
    let p = provider(
        json!({"compare": {"canary": {"builtin": {"metric": "latency", "quantile": 0.95}}, "step": "20s", "window": "4m"}}),
    );
    let reads = reads(&request(p, false)).unwrap();
    assert_eq!(reads.len(), 2);
    let (canary, baseline) = (&reads[0], &reads[1]);
    assert_eq!(canary.provider.builtin.as_ref().unwrap().subset, None);
    assert_eq!(
        baseline.provider.builtin.as_ref().unwrap().subset,
        Some(TrafficSubset::Stable)
    );
    assert_eq!(
        (canary.at, canary.window, canary.step),
        (10_000_000, Some(240_000), Some(20_000))
    );
    assert_eq!((baseline.at, baseline.window), (10_000_000, Some(240_000)));
    assert_eq!(
        baseline.not_before,
        Some(9_000_000),
        "concurrent: this run's traffic only"
    );
}

#[test]
fn a_reference_window_reads_the_past_without_the_run_bound() {
    let day = provider(
        json!({"compare": {"canary": {"builtin": {"metric": "latency"}}, "reference": {"offset": "24h"}}}),
    );
    let r = reads(&request(day, false)).unwrap();
    assert_eq!(r[1].at, 10_000_000 - 86_400_000);
    assert_eq!(r[1].not_before, None);
    let before = provider(
        json!({"compare": {"canary": {"builtin": {"metric": "latency"}}, "reference": {"beforeStart": "30m"}}}),
    );
    let r = reads(&request(before, false)).unwrap();
    assert_eq!((r[1].at, r[1].window), (9_000_000, Some(1_800_000)));
}

#[test]
fn a_slower_canary_fails_with_its_statistics_and_reference() {
    let p = provider(json!({"compare": {"canary": {"builtin": {"metric": "latency"}}}}));
    let r = request(p, false);
    let outcome = decide(
        &r,
        vec![series(&around(0.25, 10, 1)), series(&around(0.20, 10, 2))],
    );
    let Outcome::Decided {
        phase,
        value,
        message,
        metadata,
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(phase, AnalysisPhase::Failed);
    assert_eq!(value, "High");
    assert!(message.contains("canary n=10, baseline n=10"), "{message}");
    assert!(
        message.contains("the stable subset, concurrent"),
        "{message}"
    );
    for key in ["ci", "estimate", "effectSize", "reference", "judge"] {
        assert!(metadata.contains_key(key), "{key} missing: {metadata:?}");
    }
    // The same traffic on both sides passes.
    let same = decide(
        &r,
        vec![series(&around(0.20, 10, 1)), series(&around(0.20, 10, 2))],
    );
    assert!(
        matches!(&same, Outcome::Decided { phase: AnalysisPhase::Successful, value, .. } if value == "Pass"),
        "{same:?}"
    );
}

#[test]
fn thin_series_defer_and_conclude_inconclusive_only_at_the_last_measurement() {
    let p = provider(json!({"compare": {"canary": {"builtin": {"metric": "latency"}}}}));
    let thin = || vec![series(&[0.2, f64::NAN]), series(&around(0.2, 10, 0))];
    let early = decide(&request(p.clone(), false), thin());
    assert!(
        matches!(&early, Outcome::Deferred(r) if r.starts_with("insufficient samples: n=1 canary")),
        "{early:?}"
    );
    let last = decide(&request(p, true), thin());
    assert!(
        matches!(&last, Outcome::Decided { phase: AnalysisPhase::Inconclusive, message, .. } if message.starts_with("insufficient samples")),
        "{last:?}"
    );
}

#[test]
fn zero_inflated_error_counts_are_not_judged_by_ranks() {
    let p = provider(json!({"compare": {"canary": {"builtin": {"metric": "error-rate"}}}}));
    let mostly_zero = |hit: usize| {
        let mut v = vec![0.0; 12];
        v[hit] = 0.01;
        v
    };
    let outcome = decide(
        &request(p, false),
        vec![series(&mostly_zero(3)), series(&mostly_zero(7))],
    );
    assert!(
        matches!(&outcome, Outcome::Decided { phase: AnalysisPhase::Inconclusive, value, message, .. } if value == "ZeroInflated" && message.contains("sequential")),
        "{outcome:?}"
    );
}

#[test]
fn the_sequential_test_defers_below_its_minimum_and_fails_a_doubled_error_rate() {
    let p = provider(json!({"sequential": {"minRequests": 1000}}));
    let r = request(p.clone(), false);
    let reads = reads(&r).unwrap();
    assert_eq!(reads.len(), 4);
    assert!(
        reads
            .iter()
            .all(|x| x.window == Some(1_000_000) && x.step == Some(10_000))
    );
    // 60 windows: canary 100 requests, stable 400; canary errors 2%, stable 1%.
    let counts = |n: f64, rate: f64| {
        let requests = vec![n; 60];
        let errors = vec![n * rate; 60];
        (series(&requests), series(&errors))
    };
    let (cr, ce) = counts(100.0, 0.02);
    let (sr, se) = counts(400.0, 0.01);
    let outcome = decide(&r, vec![cr, ce, sr, se]);
    let Outcome::Decided {
        phase,
        message,
        metadata,
        ..
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(phase, AnalysisPhase::Failed, "{message}");
    // It stopped as soon as the evidence sufficed, long before the 60th window.
    assert_eq!(metadata["canary"], "32/1600");
    assert_eq!(metadata["judge"], "sprt");
    // Below the minimum sample: nothing yet; at the last measurement, insufficient samples.
    let (cr, ce) = counts(10.0, 0.0);
    let (sr, se) = counts(40.0, 0.0);
    let few = vec![cr, ce, sr, se];
    assert!(matches!(decide(&r, few.clone()), Outcome::Deferred(_)));
    let last = decide(&request(p, true), few);
    assert!(
        matches!(&last, Outcome::Decided { phase: AnalysisPhase::Inconclusive, message, .. } if message.starts_with("insufficient samples: n=600")),
        "{last:?}"
    );
}

#[test]
fn a_calibrated_metric_reads_its_own_reference_before_the_run() {
    let p = provider(json!({"builtin": {"metric": "latency", "quantile": 0.95}}));
    let mut r = request(p, false);
    r.baseline = Some(Calibration::default());
    let reads = reads(&r).unwrap();
    assert_eq!(reads.len(), 2 + CALIBRATION_STATISTICS.len());
    assert!(reads[1..].iter().all(|x| x.at == 9_000_000
        && x.window == Some(1_800_000)
        && x.provider.builtin.as_ref().unwrap().subset == Some(TrafficSubset::Stable)));
    let mut answers = vec![series(&[0.3]), series(&[0.2])];
    answers.extend((0..CALIBRATION_STATISTICS.len()).map(|i| series(&[i as f64 + 0.5])));
    let Outcome::Value { metadata, .. } = decide(&r, answers) else {
        panic!()
    };
    let baseline = baseline_variables(&metadata);
    assert_eq!(baseline["value"], 0.2);
    assert_eq!(baseline["p95"], 1.5);
    assert!(metadata["baseline.source"].contains("30m before the run started"));
    // No reference traffic: inconclusive, never validated.
    let nil = Outcome::Value {
        result: MetricResult::Nil,
        metadata: BTreeMap::from([("reason".to_owned(), "12 requests".to_owned())]),
    };
    let outcome = decide(&r, vec![series(&[0.3]), nil]);
    assert!(
        matches!(&outcome, Outcome::Decided { phase: AnalysisPhase::Inconclusive, message, .. } if message.contains("no reference") && message.contains("12 requests")),
        "{outcome:?}"
    );
}

fn metric(value: serde_json::Value) -> AnalysisTemplateSpec {
    let metric: Metric = serde_json::from_value(value).unwrap();
    AnalysisTemplateSpec {
        metrics: vec![metric],
        ..serde_json::from_value(json!({"metrics": []})).unwrap()
    }
}

#[test]
fn conditions_read_the_baseline_only_when_calibrated() {
    let calibrated = metric(json!({"name": "p95", "baseline": {"window": "10m"},
        "successCondition": "result[0] <= baseline.p95 * 1.2",
        "provider": {"builtin": {"metric": "latency"}}}));
    let plan = resolve(&calibrated, &BTreeMap::new()).unwrap();
    let verdict = |value: f64| {
        let mut run = Run::new(&plan, 0);
        let requests = run.poll_due(&plan, 0);
        assert_eq!(requests[0].baseline, plan.metrics[0].baseline);
        run.handle_outcome(
            &plan,
            0,
            1,
            Outcome::Value {
                result: MetricResult::Vector(vec![value]),
                metadata: BTreeMap::from([("baseline.p95".to_owned(), "0.2".to_owned())]),
            },
        );
        run.assess(&plan, 1)
    };
    assert_eq!(verdict(0.23), AnalysisPhase::Successful);
    let mut run = Run::new(&plan, 0);
    run.poll_due(&plan, 0);
    run.handle_outcome(
        &plan,
        0,
        1,
        Outcome::Value {
            result: MetricResult::Vector(vec![0.21]),
            metadata: BTreeMap::from([
                ("baseline.p95".to_owned(), "0.2".to_owned()),
                ("baseline.source".to_owned(), "the stable subset".to_owned()),
            ]),
        },
    );
    assert_eq!(
        run.metrics[0].measurements[0].message, "baseline from the stable subset: p95=0.2",
        "the verdict records its reference"
    );
    assert_eq!(verdict(0.25), AnalysisPhase::Failed);
    let uncalibrated = metric(json!({"name": "p95",
        "successCondition": "result[0] <= baseline.p95 * 1.2",
        "provider": {"builtin": {"metric": "latency"}}}));
    let error = resolve(&uncalibrated, &BTreeMap::new()).unwrap_err();
    assert!(
        error.to_string().contains("no `baseline:` calibration"),
        "{error}"
    );
}

#[test]
fn a_deferred_poll_records_nothing_and_the_last_one_is_inconclusive() {
    let spec = metric(json!({"name": "errors", "interval": "10s", "count": 3,
        "provider": {"sequential": {}}}));
    let plan = resolve(&spec, &BTreeMap::new()).unwrap();
    let mut run = Run::new(&plan, 0);
    let mut now = 0;
    for poll in 0..3 {
        let requests = run.poll_due(&plan, now);
        assert_eq!(requests.len(), 1, "poll {poll} at {now}");
        assert_eq!(requests[0].last, poll == 2);
        run.handle_outcome(
            &plan,
            0,
            now,
            Outcome::Deferred("insufficient samples: n=12 canary requests".into()),
        );
        let phase = run.assess(&plan, now);
        if poll < 2 {
            assert_eq!(phase, AnalysisPhase::Running);
            assert!(run.metrics[0].measurements.is_empty());
            assert!(
                run.poll_due(&plan, now + 9_999).is_empty(),
                "waits its interval"
            );
        } else {
            assert_eq!(phase, AnalysisPhase::Inconclusive);
            assert_eq!(run.metrics[0].measurements.len(), 1);
            assert!(run.metrics[0].measurements[0].message.contains("n=12"));
        }
        now += 10_000;
    }
}

#[test]
fn bad_composite_settings_are_named() {
    let p = provider(
        json!({"compare": {"canary": {"web": {"url": "http://127.0.0.1/"}}, "confidence": 1.5, "reference": {}}}),
    );
    let fields: Vec<String> = problems(&p).into_iter().map(|(f, _)| f).collect();
    assert_eq!(
        fields,
        [
            "compare.canary",
            "compare.baseline",
            "compare.reference",
            "compare.confidence"
        ]
    );
    let p = provider(json!({"sequential": {"alpha": 0.6, "beta": 0.5}}));
    assert_eq!(problems(&p)[0].0, "sequential");
}

#[test]
fn a_run_reads_its_reference_once_and_judges_every_measurement_against_it() {
    let spec = metric(
        json!({"name": "p95", "interval": "1m", "baseline": {"window": "30m"},
        "successCondition": "result[0] <= baseline.p95 * 1.2",
        "provider": {"builtin": {"metric": "latency", "quantile": 0.95}}}),
    );
    let plan = resolve(&spec, &BTreeMap::new()).unwrap();
    let mut run = Run::new(&plan, 9_000_000);
    // First measurement: the metric and its reference (value + the six statistics).
    let first = run.poll_due(&plan, 9_000_000).remove(0);
    assert_eq!(first.reference, None);
    let reads_first = reads(&first).unwrap();
    assert_eq!(reads_first.len(), 2 + CALIBRATION_STATISTICS.len());
    let mut answers = vec![series(&[0.21]), series(&[0.2])];
    answers.extend(
        CALIBRATION_STATISTICS
            .iter()
            .map(|(name, ..)| series(&[if *name == "p95" { 0.2 } else { 1.0 }])),
    );
    run.handle_outcome(&plan, 0, 9_000_001, decide(&first, answers));
    assert_eq!(run.assess(&plan, 9_000_001), AnalysisPhase::Running);
    let calibration = run.metrics[0].calibration.clone();
    assert_eq!(calibration["baseline.p95"], "0.2");
    assert!(calibration["baseline.source"].contains("30m before the run started"));
    // The run survives a restart with its reference.
    let restored: Run = serde_json::from_str(&serde_json::to_string(&run).unwrap()).unwrap();
    assert_eq!(restored.metrics[0].calibration, calibration);
    // Later measurements read only the metric and are judged against the same reference, even
    // when the reference window has since left the provider's retention.
    let mut run = restored;
    let second = run.poll_due(&plan, 9_060_001).remove(0);
    assert_eq!(second.reference.as_ref(), Some(&calibration));
    let reads_second = reads(&second).unwrap();
    assert_eq!(reads_second.len(), 1);
    assert_eq!(reads_second[0].reference, None);
    assert_eq!(reads_second[0].baseline, None);
    run.handle_outcome(&plan, 0, 9_060_002, decide(&second, vec![series(&[0.25])]));
    assert_eq!(run.assess(&plan, 9_060_002), AnalysisPhase::Failed);
    let last = run.metrics[0].measurements.back().unwrap();
    assert_eq!(last.metadata["baseline.p95"], "0.2");
    assert!(last.message.contains("p95=0.2"), "{}", last.message);
}

//! The sequential error-rate test: minimum sample size, inconclusive endings, boundaries, and a
//! seeded Monte Carlo check of its sample cost against Wald's expected sample number and of its
//! false-alarm rate.

use super::*;
use crate::rng::Rng;

fn counts(canary: (u64, u64), baseline: (u64, u64)) -> ErrorCounts {
    ErrorCounts {
        canary_requests: canary.0,
        canary_errors: canary.1,
        baseline_requests: baseline.0,
        baseline_errors: baseline.1,
    }
}

fn test() -> ErrorRateTest {
    ErrorRateTest::new(SequentialConfig::default()).unwrap()
}

#[test]
fn below_the_minimum_sample_size_nothing_is_measured() {
    let mut t = test();
    // A burst of canary errors, but only 60 canary requests.
    let v = t.observe(counts((60, 30), (540, 0))).unwrap();
    assert_eq!(v.decision, Decision::NoMeasurement, "{v:?}");
    assert!(v.log_likelihood_ratio > t.upper_boundary());
    let end = t.conclude();
    assert_eq!(end.decision, Decision::Inconclusive);
    assert_eq!(
        end.message,
        "insufficient samples: n=60 canary requests, the minimum is 100"
    );
    // Once the minimum is reached the accumulated evidence decides at once.
    let v = t.observe(counts((40, 0), (360, 2))).unwrap();
    assert_eq!(v.decision, Decision::Fail, "{v:?}");
    assert!(
        v.message
            .starts_with("canary error rate higher: log-likelihood ratio")
    );
}

#[test]
fn a_decision_is_final() {
    let mut t = test();
    t.observe(counts((2000, 60), (18000, 0))).unwrap();
    assert_eq!(t.verdict().decision, Decision::Fail);
    let v = t.observe(counts((100_000, 0), (900_000, 9000))).unwrap();
    assert_eq!(v.decision, Decision::Fail);
    assert_eq!(v.totals.canary_requests, 2000);
    assert_eq!(t.conclude().decision, Decision::Fail);
}

#[test]
fn a_healthy_canary_passes_at_the_lower_boundary() {
    let mut t = test();
    // Equal rates (1%), 10% canary traffic.
    let v = t.observe(counts((5000, 50), (45000, 450))).unwrap();
    assert_eq!(v.decision, Decision::Pass, "{v:?}");
    assert!(v.log_likelihood_ratio <= t.lower_boundary());
}

#[test]
fn the_end_of_the_run_with_enough_samples_is_a_pass_never_with_too_few() {
    let mut t = test();
    let v = t.observe(counts((150, 0), (150, 0))).unwrap();
    assert_eq!(v.decision, Decision::Continue);
    let end = t.conclude();
    assert_eq!(end.decision, Decision::Pass);
    assert!(
        end.message.starts_with("no significant evidence"),
        "{end:?}"
    );
    let mut t = test();
    t.observe(counts((99, 0), (99, 0))).unwrap();
    assert_eq!(t.conclude().decision, Decision::Inconclusive);
}

#[test]
fn zero_inflated_error_counts_are_detected() {
    // kayenta#426's shape: most windows have no errors at all. Canary at 0.6%, baseline at 0.1%.
    let mut rng = Rng::new(426);
    let mut t = test();
    let mut windows = 0;
    let decision = loop {
        windows += 1;
        let errors = |rng: &mut Rng, n: u64, p: f64| (0..n).filter(|_| rng.uniform() < p).count();
        let canary = errors(&mut rng, 50, 0.006) as u64;
        let baseline = errors(&mut rng, 450, 0.001) as u64;
        let v = t.observe(counts((50, canary), (450, baseline))).unwrap();
        if v.decision != Decision::Continue && v.decision != Decision::NoMeasurement {
            break v.decision;
        }
        assert!(windows < 2000, "no decision: {v:?}");
    };
    assert_eq!(decision, Decision::Fail);
}

#[test]
fn bad_settings_and_counts_are_errors() {
    let bad = |config| ErrorRateTest::new(config).unwrap_err();
    let d = SequentialConfig::default();
    assert!(matches!(
        bad(SequentialConfig { alpha: 0.0, ..d }),
        SequentialError::Rates { .. }
    ));
    assert!(matches!(
        bad(SequentialConfig { beta: 1.0, ..d }),
        SequentialError::Rates { .. }
    ));
    assert_eq!(
        bad(SequentialConfig { ratio: 1.0, ..d }),
        SequentialError::Ratio(1.0)
    );
    assert_eq!(
        test().observe(counts((5, 6), (5, 0))),
        Err(SequentialError::Counts {
            errors: 6,
            requests: 5
        })
    );
}

#[test]
fn the_test_survives_a_restart() {
    let mut t = test();
    t.observe(counts((700, 9), (6300, 30))).unwrap();
    let json = serde_json::to_string(&t).unwrap();
    let mut back: ErrorRateTest = serde_json::from_str(&json).unwrap();
    assert_eq!(back, t);
    let w = counts((700, 9), (6300, 30));
    assert_eq!(back.observe(w).unwrap(), t.observe(w).unwrap());
}

/// Runs the test one canary request (and `baseline_per_canary` baseline requests) at a time
/// until it decides; returns the decision and the canary requests used.
fn run(rng: &mut Rng, p0: f64, ratio: f64, baseline_per_canary: u64) -> (Decision, u64) {
    let mut t = test();
    let p_canary = p0 * ratio;
    loop {
        let canary = u64::from(rng.uniform() <= p_canary);
        let baseline = (0..baseline_per_canary)
            .filter(|_| rng.uniform() <= p0)
            .count() as u64;
        let v = t
            .observe(counts((1, canary), (baseline_per_canary, baseline)))
            .unwrap();
        match v.decision {
            Decision::Fail | Decision::Pass => return (v.decision, v.totals.canary_requests),
            _ if v.totals.canary_requests > 200_000 => return (v.decision, 200_000),
            _ => {}
        }
    }
}

/// Runs `runs` tests on a canary at twice the baseline's error rate `p0`; returns the share
/// detected and the mean canary requests of the detections, with Wald's expected sample number.
fn detection(seed: u64, p0: f64, baseline_per_canary: u64, runs: u32) -> (f64, f64, f64) {
    let mut rng = Rng::new(seed);
    let (mut detected, mut requests) = (0u32, 0u64);
    for _ in 0..runs {
        let (decision, n) = run(&mut rng, p0, 2.0, baseline_per_canary);
        if decision == Decision::Fail {
            detected += 1;
            requests += n;
        }
    }
    let wald = wald_expected_samples(p0, 2.0 * p0, 0.01, 0.05);
    (
        f64::from(detected) / f64::from(runs),
        requests as f64 / f64::from(detected),
        wald,
    )
}

#[test]
fn mean_canary_requests_to_detection_are_within_twice_walds_expected_sample_number() {
    // p1 = 2·p0, α = 0.01, β = 0.05, a 10% canary (nine baseline requests per canary request).
    for (p0, expected_wald) in [(0.005, 2149.0), (0.05, 202.0)] {
        let (power, mean, wald) = detection(8, p0, 9, 200);
        assert!((wald - expected_wald).abs() < 1.0, "{wald}");
        assert!(power >= 0.9, "p0 {p0}: power {power}");
        assert!(mean <= 2.0 * wald, "p0 {p0}: mean {mean} vs Wald {wald}");
        // And it is not a free lunch: the baseline must be estimated too.
        assert!(mean >= 0.8 * wald, "p0 {p0}: mean {mean} vs Wald {wald}");
    }
}

#[test]
fn an_equal_split_costs_more_but_stays_within_three_times_wald() {
    let (power, mean, wald) = detection(9, 0.01, 1, 100);
    assert!(power >= 0.9, "power {power}");
    assert!(
        mean <= 3.0 * wald && mean > 1.5 * wald,
        "mean {mean} vs Wald {wald}"
    );
}

#[test]
fn false_alarms_stay_near_alpha() {
    let (p0, runs) = (0.01, 1000);
    let mut rng = Rng::new(10);
    let false_alarms = (0..runs)
        .filter(|_| run(&mut rng, p0, 1.0, 9).0 == Decision::Fail)
        .count();
    // α = 0.01: expect about 10 of 1000; 2α is the acceptance bound.
    assert!(false_alarms <= 20, "{false_alarms} false alarms in {runs}");
}

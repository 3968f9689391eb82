//! Analysis: how a metric's result becomes a verdict: conditions (expr-lang with Argo's helpers),
//! the measurement rule, run plans, the AnalysisRun state machine, and the composite (comparison,
//! sequential, calibrated) measurements of Flotilla's per-cluster judgement.

pub mod compare;
pub mod condition;
pub mod plan;
pub mod provider;
pub mod provider_checks;
pub mod replay;
pub mod run;

pub use condition::{Condition, ConditionError, MetricResult};
pub use provider::{
    MeasureRequest, Measurer, Millis, Outcome, ProxyError, SecretStore, ServiceProxy,
    ServiceRequest, ServiceResponse,
};

use crate::spec::analysis::AnalysisPhase;

/// The phase of one measurement, by Argo's rule (`utils/evaluate`):
/// no condition → Successful; success only → Failed unless it holds; failure only → Successful
/// unless it holds; both → Failed if failure holds (even when success holds too), Successful if
/// only success holds, Inconclusive if neither does. Any evaluation error → Error.
pub fn measurement_phase(
    success: Option<&Condition>,
    failure: Option<&Condition>,
    result: &MetricResult,
) -> AnalysisPhase {
    measurement_verdict(success, failure, result).0
}

/// [`measurement_phase`] with the error message, when there was one.
pub fn measurement_verdict(
    success: Option<&Condition>,
    failure: Option<&Condition>,
    result: &MetricResult,
) -> (AnalysisPhase, Option<String>) {
    measurement_verdict_with(success, failure, result, None)
}

/// [`measurement_verdict`] for a calibrated metric: its conditions also read `baseline`.
pub fn measurement_verdict_with(
    success: Option<&Condition>,
    failure: Option<&Condition>,
    result: &MetricResult,
    baseline: Option<&std::collections::BTreeMap<String, f64>>,
) -> (AnalysisPhase, Option<String>) {
    let success = match success
        .map(|c| c.evaluate_with(result, baseline))
        .transpose()
    {
        Ok(v) => v,
        Err(e) => return (AnalysisPhase::Error, Some(e.to_string())),
    };
    let failure = match failure
        .map(|c| c.evaluate_with(result, baseline))
        .transpose()
    {
        Ok(v) => v,
        Err(e) => return (AnalysisPhase::Error, Some(e.to_string())),
    };
    let phase = match (success, failure) {
        (None, None) => AnalysisPhase::Successful,
        (Some(true), None) => AnalysisPhase::Successful,
        (Some(false), None) => AnalysisPhase::Failed,
        (None, Some(true)) => AnalysisPhase::Failed,
        (None, Some(false)) => AnalysisPhase::Successful,
        (Some(_), Some(true)) => AnalysisPhase::Failed,
        (Some(true), Some(false)) => AnalysisPhase::Successful,
        (Some(false), Some(false)) => AnalysisPhase::Inconclusive,
    };
    (phase, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(success: Option<&str>, failure: Option<&str>, result: MetricResult) -> AnalysisPhase {
        let s = success.map(|s| Condition::compile(s).unwrap());
        let f = failure.map(|s| Condition::compile(s).unwrap());
        measurement_phase(s.as_ref(), f.as_ref(), &result)
    }

    // Facts from argo-rollouts utils/evaluate/evaluate_test.go (see shared/reference).
    #[test]
    fn measurement_rules_match_argo() {
        let r = || MetricResult::Scalar(1.0);
        assert_eq!(
            phase(Some("result == 1"), Some("result != 1"), r()),
            AnalysisPhase::Successful
        );
        assert_eq!(
            phase(Some("result == 1"), Some("result == 1"), r()),
            AnalysisPhase::Failed
        );
        assert_eq!(
            phase(Some("result != 1"), Some("result != 1"), r()),
            AnalysisPhase::Inconclusive
        );
        assert_eq!(
            phase(None, Some("result != 1"), r()),
            AnalysisPhase::Successful
        );
        assert_eq!(phase(Some("result != 1"), None, r()), AnalysisPhase::Failed);
        assert_eq!(phase(None, None, r()), AnalysisPhase::Successful);
        assert_eq!(
            phase(Some("result[0] > 1"), None, MetricResult::Vector(vec![])),
            AnalysisPhase::Error
        );
        // Argo's quirk: a failure-only condition passes on NaN.
        assert_eq!(
            phase(None, Some("result > 0.01"), MetricResult::Scalar(f64::NAN)),
            AnalysisPhase::Successful
        );
    }
}

#[cfg(test)]
mod run_tests;

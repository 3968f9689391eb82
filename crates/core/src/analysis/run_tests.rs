//! Table tests of the AnalysisRun machine against Argo Rollouts' verdict semantics. The facts
//! come from argo-rollouts' `analysis/analysis_test.go`, `utils/analysis/*_test.go` and
//! `utils/evaluate/evaluate_test.go` (summarised in `shared/reference/argo-rollouts.md` §3.2).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::plan::{ArgValue, PlanError, RunPlan, resolve};
use super::provider::Outcome;
use super::replay::{ReplayInput, RunReport, replay};
use super::run::Run;
use crate::spec::analysis::{AnalysisPhase, AnalysisTemplateSpec, OnInconclusive};

use AnalysisPhase::{Error, Failed, Inconclusive, Pending, Running, Successful};

/// A template spec from metric JSON (a web provider unless one is given).
fn spec(metrics: Value, extra: Value) -> AnalysisTemplateSpec {
    let metrics: Vec<Value> = metrics
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if m.get("provider").is_none() {
                m["provider"] = json!({"web": {"url": "http://127.0.0.1:1/metric"}});
            }
            m
        })
        .collect();
    let mut value = json!({"metrics": metrics});
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            value[k] = v;
        }
    }
    serde_json::from_value(value).unwrap()
}

fn plan(metrics: Value) -> RunPlan {
    resolve(&spec(metrics, json!({})), &BTreeMap::new()).unwrap()
}

fn run(plan: &RunPlan, measurements: Value, terminate: bool) -> RunReport {
    let input = ReplayInput::parse(
        &json!({"measurements": measurements, "terminate": terminate}).to_string(),
    )
    .unwrap();
    RunReport::of(&replay(plan, input).unwrap(), plan)
}

struct Case {
    name: &'static str,
    metrics: Value,
    measurements: Value,
    terminate: bool,
    phase: AnalysisPhase,
    message: &'static str,
}

fn check(cases: Vec<Case>) {
    for case in cases {
        let plan = plan(case.metrics.clone());
        let report = run(&plan, case.measurements.clone(), case.terminate);
        assert_eq!(report.phase, case.phase, "{}: {report:#?}", case.name);
        assert!(
            report.message.contains(case.message),
            "{}: message {:?} lacks {:?}",
            case.name,
            report.message,
            case.message
        );
    }
}

const OK: &str = "result == 1";

#[test]
fn metric_and_run_phases_follow_argo() {
    check(vec![
        Case {
            name: "no conditions: one measurement succeeds",
            metrics: json!([{"name": "m"}]),
            measurements: json!({"m": [5]}),
            terminate: false,
            phase: Successful,
            message: "",
        },
        Case {
            name: "failed 3 > failureLimit 2",
            metrics: json!([{"name": "m", "interval": "1m", "count": 3, "failureLimit": 2, "successCondition": OK}]),
            measurements: json!({"m": [0, 0, 0]}),
            terminate: false,
            phase: Failed,
            message: "Metric \"m\" assessed Failed due to failed (3) > failureLimit (2)",
        },
        Case {
            name: "failed 3 with failureLimit 3 and no count runs on",
            metrics: json!([{"name": "m", "interval": "1m", "failureLimit": 3, "successCondition": OK}]),
            measurements: json!({"m": [0, 0, 0]}),
            terminate: false,
            phase: Running,
            message: "",
        },
        Case {
            name: "failed 3 with failureLimit 3, terminated: Successful",
            metrics: json!([{"name": "m", "interval": "1m", "failureLimit": 3, "successCondition": OK}]),
            measurements: json!({"m": [0, 0, 0]}),
            terminate: true,
            phase: Successful,
            message: "Run Terminated",
        },
        Case {
            name: "count reached with failures under the limit: Successful",
            metrics: json!([{"name": "m", "interval": "1m", "count": 3, "failureLimit": 2, "successCondition": OK}]),
            measurements: json!({"m": [0, 1, 0]}),
            terminate: false,
            phase: Successful,
            message: "",
        },
        Case {
            name: "inconclusive 3 > inconclusiveLimit 2",
            metrics: json!([{"name": "m", "interval": "1m", "inconclusiveLimit": 2, "successCondition": "result > 5", "failureCondition": "result < 0"}]),
            measurements: json!({"m": [1, 1, 1]}),
            terminate: false,
            phase: Inconclusive,
            message: "inconclusive (3) > inconclusiveLimit (2)",
        },
        Case {
            name: "inconclusive 3 with inconclusiveLimit 3 runs on",
            metrics: json!([{"name": "m", "interval": "1m", "inconclusiveLimit": 3, "successCondition": "result > 5", "failureCondition": "result < 0"}]),
            measurements: json!({"m": [1, 1, 1]}),
            terminate: false,
            phase: Running,
            message: "",
        },
        Case {
            name: "5 consecutive errors > default limit 4",
            metrics: json!([{"name": "m", "interval": "1m", "successCondition": OK}]),
            measurements: json!({"m": [{"error": "boom"}, {"error": "boom"}, {"error": "boom"}, {"error": "boom"}, {"error": "boom"}]}),
            terminate: false,
            phase: Error,
            message: "consecutiveErrors (5) > consecutiveErrorLimit (4): \"Error Message: boom\"",
        },
        Case {
            name: "4 consecutive errors run on",
            metrics: json!([{"name": "m", "interval": "1m", "successCondition": OK}]),
            measurements: json!({"m": [{"error": "e"}, {"error": "e"}, {"error": "e"}, {"error": "e"}]}),
            terminate: false,
            phase: Running,
            message: "",
        },
        Case {
            name: "consecutiveErrorLimit 1: the second error fails the run",
            metrics: json!([{"name": "m", "interval": "1m", "consecutiveErrorLimit": 1, "successCondition": OK}]),
            measurements: json!({"m": [{"error": "e"}, {"error": "e"}]}),
            terminate: false,
            phase: Error,
            message: "consecutiveErrors (2) > consecutiveErrorLimit (1)",
        },
        Case {
            name: "count 10 all successful",
            metrics: json!([{"name": "m", "interval": "1m", "count": 10, "successCondition": OK}]),
            measurements: json!({"m": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]}),
            terminate: false,
            phase: Successful,
            message: "",
        },
        Case {
            name: "5 successful + 5 inconclusive over inconclusiveLimit 4",
            metrics: json!([{"name": "m", "interval": "1m", "count": 10, "inconclusiveLimit": 4, "successCondition": "result == 1", "failureCondition": "result < 0"}]),
            measurements: json!({"m": [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]}),
            terminate: false,
            phase: Inconclusive,
            message: "inconclusive (5) > inconclusiveLimit (4)",
        },
        Case {
            name: "failureLimit -1, consecutiveSuccessLimit 3 reached",
            metrics: json!([{"name": "m", "interval": "1m", "failureLimit": -1, "consecutiveSuccessLimit": 3, "successCondition": OK}]),
            measurements: json!({"m": [0, 0, 1, 1, 1]}),
            terminate: false,
            phase: Successful,
            message: "",
        },
        Case {
            name: "failureLimit -1, consecutiveSuccessLimit 5 not reached",
            metrics: json!([{"name": "m", "interval": "1m", "count": 7, "failureLimit": -1, "consecutiveSuccessLimit": 5, "successCondition": OK}]),
            measurements: json!({"m": [0, 1, 1, 1]}),
            terminate: false,
            phase: Running,
            message: "",
        },
        Case {
            name: "failureLimit -1, count 7 reached without the streak: Failed",
            metrics: json!([{"name": "m", "interval": "1m", "count": 7, "failureLimit": -1, "consecutiveSuccessLimit": 5, "successCondition": OK}]),
            measurements: json!({"m": [0, 0, 0, 0, 1, 1, 1]}),
            terminate: false,
            phase: Failed,
            message: "",
        },
        Case {
            name: "both limits 4, count 10 reached, failed 4, streak 3: Inconclusive",
            metrics: json!([{"name": "m", "interval": "1m", "count": 10, "failureLimit": 4, "consecutiveSuccessLimit": 4, "successCondition": OK}]),
            measurements: json!({"m": [1, 0, 1, 0, 1, 0, 0, 1, 1, 1]}),
            terminate: false,
            phase: Inconclusive,
            message: "",
        },
        Case {
            name: "both limits 4, failed 5: Failed",
            metrics: json!([{"name": "m", "interval": "1m", "count": 10, "failureLimit": 4, "consecutiveSuccessLimit": 4, "successCondition": OK}]),
            measurements: json!({"m": [0, 0, 0, 0, 0]}),
            terminate: false,
            phase: Failed,
            message: "failed (5) > failureLimit (4)",
        },
        Case {
            name: "both limits 4, failed 4 then streak 4: Successful",
            metrics: json!([{"name": "m", "interval": "1m", "count": 10, "failureLimit": 4, "consecutiveSuccessLimit": 4, "successCondition": OK}]),
            measurements: json!({"m": [0, 0, 0, 0, 1, 1, 1, 1]}),
            terminate: false,
            phase: Successful,
            message: "",
        },
        Case {
            name: "both limits 4, count not reached, failed 3 streak 3: Running",
            metrics: json!([{"name": "m", "interval": "1m", "count": 10, "failureLimit": 4, "consecutiveSuccessLimit": 4, "successCondition": OK}]),
            measurements: json!({"m": [0, 0, 0, 1, 1, 1]}),
            terminate: false,
            phase: Running,
            message: "",
        },
        Case {
            name: "Successful + Running metric: Running with no message",
            metrics: json!([{"name": "a"}, {"name": "b", "interval": "1m", "count": 3}]),
            measurements: json!({"a": [1], "b": [1]}),
            terminate: false,
            phase: Running,
            message: "",
        },
        Case {
            name: "Successful + Failed: Failed",
            metrics: json!([{"name": "a", "successCondition": OK}, {"name": "b", "successCondition": OK}]),
            measurements: json!({"a": [1], "b": [0]}),
            terminate: false,
            phase: Failed,
            message: "Metric \"b\" assessed Failed due to failed (1) > failureLimit (0)",
        },
        Case {
            name: "a failing metric terminates an indefinite sibling",
            metrics: json!([{"name": "a", "successCondition": OK}, {"name": "b", "interval": "1m", "successCondition": OK}]),
            measurements: json!({"a": [0], "b": [1, 1, 1]}),
            terminate: false,
            phase: Failed,
            message: "Metric \"a\"",
        },
        Case {
            name: "an inconclusive metric makes the run Inconclusive",
            metrics: json!([{"name": "a", "successCondition": "result > 5", "failureCondition": "result < 0"}, {"name": "b", "successCondition": OK}]),
            measurements: json!({"a": [1], "b": [1]}),
            terminate: false,
            phase: Inconclusive,
            message: "inconclusive (1) > inconclusiveLimit (0)",
        },
        Case {
            name: "Error is worse than Inconclusive",
            metrics: json!([{"name": "a", "successCondition": "result > 5", "failureCondition": "result < 0"}, {"name": "b", "consecutiveErrorLimit": 0, "successCondition": OK}]),
            measurements: json!({"a": [1], "b": [{"error": "down"}]}),
            terminate: false,
            phase: Error,
            message: "Metric \"b\" assessed Error",
        },
        Case {
            name: "Failed is worse than Error",
            metrics: json!([{"name": "a", "consecutiveErrorLimit": 0, "successCondition": OK}, {"name": "b", "successCondition": OK}]),
            measurements: json!({"a": [{"error": "down"}], "b": [0]}),
            terminate: false,
            phase: Failed,
            message: "Metric \"b\" assessed Failed",
        },
        Case {
            name: "interval 60s, no count, one success: Running",
            metrics: json!([{"name": "m", "interval": "60s"}]),
            measurements: json!({"m": [1]}),
            terminate: false,
            phase: Running,
            message: "",
        },
        Case {
            name: "count 1: Successful after one",
            metrics: json!([{"name": "m", "interval": "60s", "count": 1}]),
            measurements: json!({"m": [1]}),
            terminate: false,
            phase: Successful,
            message: "",
        },
        Case {
            name: "count 0 and no interval: Successful after one",
            metrics: json!([{"name": "m", "count": 0}]),
            measurements: json!({"m": [1]}),
            terminate: false,
            phase: Successful,
            message: "",
        },
        Case {
            name: "terminate before any measurement: Successful, Run Terminated",
            metrics: json!([{"name": "m", "successCondition": OK}]),
            measurements: json!({}),
            terminate: true,
            phase: Successful,
            message: "Run Terminated",
        },
        Case {
            name: "empty vector with result[0]: Error measurement",
            metrics: json!([{"name": "m", "consecutiveErrorLimit": 0, "successCondition": "result[0] > 1"}]),
            measurements: json!({"m": [[]]}),
            terminate: false,
            phase: Error,
            message: "nil or empty",
        },
        Case {
            name: "non-boolean condition: Error",
            metrics: json!([{"name": "m", "consecutiveErrorLimit": 0, "successCondition": "result"}]),
            measurements: json!({"m": [1]}),
            terminate: false,
            phase: Error,
            message: "expected bool",
        },
        Case {
            name: "failure-only condition passes on NaN (Argo's quirk)",
            metrics: json!([{"name": "m", "failureCondition": "result > 0.01"}]),
            measurements: json!({"m": ["NaN"]}),
            terminate: false,
            phase: Successful,
            message: "",
        },
        Case {
            name: "job exit code 1 fails",
            metrics: json!([{"name": "m", "provider": {"job": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i", "command": ["false"]}]}}}}}}]),
            measurements: json!({"m": [1]}),
            terminate: false,
            phase: Failed,
            message: "failed (1) > failureLimit (0)",
        },
    ]);
}

#[test]
fn consecutive_failure_limit_tolerates_blips_and_fails_on_a_streak() {
    let metrics = json!([{"name": "m", "interval": "1m", "consecutiveFailureLimit": 3, "successCondition": OK}]);
    let plan = plan(metrics);
    let report = run(&plan, json!({"m": [0, 0, 1, 0, 0, 1, 1]}), false);
    assert_eq!(report.phase, Running, "two-failure blips are tolerated");
    let report = run(&plan, json!({"m": [0, 0, 1, 0, 0, 0]}), false);
    assert_eq!(report.phase, Failed);
    assert!(
        report
            .message
            .contains("consecutiveFailures (3) >= consecutiveFailureLimit (3)"),
        "{}",
        report.message
    );
    // With failureLimit set as well, either trips.
    let plan = super::plan::resolve(&spec(json!([{"name": "m", "interval": "1m", "failureLimit": 1, "consecutiveFailureLimit": 3, "successCondition": OK}]), json!({})), &BTreeMap::new()).unwrap();
    assert_eq!(run(&plan, json!({"m": [0, 1, 0]}), false).phase, Failed);
}

#[test]
fn dry_run_metrics_are_reported_apart_and_never_decide() {
    let extra = json!({"dryRun": [{"metricName": "d.*"}]});
    let plan = resolve(
        &spec(
            json!([{"name": "d1", "successCondition": OK}, {"name": "d2", "successCondition": OK}]),
            extra.clone(),
        ),
        &BTreeMap::new(),
    )
    .unwrap();
    let report = run(&plan, json!({"d1": [0], "d2": [0]}), false);
    assert_eq!(report.phase, Successful);
    assert_eq!(report.dry_run_summary.count, 2);
    assert_eq!(report.dry_run_summary.failed, 2);
    assert!(report.metrics[0].dry_run);
    assert_eq!(
        report.metrics[0].message,
        "Metric assessed Failed due to failed (1) > failureLimit (0)"
    );

    let plan = resolve(
        &spec(json!([{"name": "d1", "successCondition": OK}, {"name": "wet", "successCondition": "result > 5", "failureCondition": "result < 0"}]), extra),
        &BTreeMap::new(),
    )
    .unwrap();
    let report = run(&plan, json!({"d1": [0], "wet": [1]}), false);
    assert_eq!(report.phase, Inconclusive);
    assert!(report.message.contains("\"wet\""), "{}", report.message);
}

#[test]
fn an_unmatched_dry_run_or_retention_rule_is_an_error() {
    for extra in [
        json!({"dryRun": [{"metricName": "nope"}]}),
        json!({"measurementRetention": [{"metricName": "nope", "limit": 2}]}),
    ] {
        let err = resolve(&spec(json!([{"name": "m"}]), extra), &BTreeMap::new()).unwrap_err();
        assert!(matches!(err, PlanError::InvalidRule(_)), "{err}");
    }
}

#[test]
fn measurements_are_retained_up_to_the_limit() {
    let plan = plan(json!([{"name": "m", "interval": "1m", "count": 12}]));
    let report = run(
        &plan,
        json!({"m": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]}),
        false,
    );
    assert_eq!(report.metrics[0].measurements.len(), 10);
    assert_eq!(report.metrics[0].count, 12);
    let plan = resolve(
        &spec(
            json!([{"name": "m", "interval": "1m", "count": 5}]),
            json!({"measurementRetention": [{"metricName": ".*", "limit": 2}]}),
        ),
        &BTreeMap::new(),
    )
    .unwrap();
    assert_eq!(
        run(&plan, json!({"m": [1, 1, 1, 1, 1]}), false).metrics[0]
            .measurements
            .len(),
        2
    );
}

#[test]
fn scheduling_follows_interval_initial_delay_and_error_retry() {
    let plan = plan(json!([{"name": "m", "interval": "60s", "successCondition": OK}]));
    let mut run = Run::new(&plan, 0);
    assert_eq!(
        run.poll_due(&plan, 0).len(),
        1,
        "first measurement at start"
    );
    run.handle_outcome(
        &plan,
        0,
        0,
        super::run::value(super::MetricResult::Scalar(1.0)),
    );
    run.assess(&plan, 0);
    assert!(
        run.poll_due(&plan, 50_000).is_empty(),
        "50 s after: not due"
    );
    assert_eq!(run.next_due(&plan), Some(60_000));
    assert_eq!(run.poll_due(&plan, 61_000).len(), 1, "61 s after: due");
    // After an Error, the retry comes 10 s later whatever the interval.
    run.handle_outcome(&plan, 0, 61_000, Outcome::Error("down".into()));
    run.assess(&plan, 61_000);
    assert_eq!(run.next_due(&plan), Some(71_000));

    let plan = super::plan::resolve(
        &spec(json!([{"name": "m", "initialDelay": "20s"}]), json!({})),
        &BTreeMap::new(),
    )
    .unwrap();
    let mut run = Run::new(&plan, 1_000);
    assert!(
        run.poll_due(&plan, 20_000).is_empty(),
        "nothing before startedAt + initialDelay"
    );
    assert_eq!(
        run.assess(&plan, 20_000),
        Running,
        "a delayed metric keeps the run Running"
    );
    assert_eq!(run.next_due(&plan), Some(21_000));
    assert_eq!(run.poll_due(&plan, 21_000).len(), 1);

    let plan = plan_of(json!([{"name": "a", "interval": "60s"}, {"name": "b", "interval": "90s"}]));
    let mut run = Run::new(&plan, 0);
    for request in run.poll_due(&plan, 0) {
        run.handle_outcome(
            &plan,
            request.metric_index,
            0,
            super::run::value(super::MetricResult::Scalar(1.0)),
        );
    }
    assert_eq!(
        run.next_due(&plan),
        Some(60_000),
        "the earliest due metric decides"
    );
}

fn plan_of(metrics: Value) -> RunPlan {
    plan(metrics)
}

#[test]
fn in_flight_measurements_keep_a_metric_running_and_are_cancelled_on_termination() {
    let job = json!({"job": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i", "command": ["sleep", "60"]}]}}}}});
    let plan =
        plan(json!([{"name": "load", "provider": job}, {"name": "rate", "successCondition": OK}]));
    let mut run = Run::new(&plan, 0);
    let requests = run.poll_due(&plan, 0);
    assert_eq!(requests.len(), 2);
    run.handle_outcome(
        &plan,
        1,
        0,
        super::run::value(super::MetricResult::Scalar(0.0)),
    );
    // Argo: the pass that sees the failure still says Running; its immediate requeue terminates
    // the job and takes the worst phase. The machine does both passes in one assessment.
    assert_eq!(run.assess(&plan, 0), Failed, "the failing sibling decides");
    assert_eq!(
        run.metrics[0].phase, Running,
        "the in-flight job keeps its metric Running"
    );
    assert_eq!(run.to_cancel(), vec![0]);
    run.handle_outcome(&plan, 0, 5_000, Outcome::Terminated);
    run.assess(&plan, 5_000);
    assert_eq!(
        run.metrics[0].phase, Inconclusive,
        "a terminated job is Inconclusive"
    );
    assert_eq!(run.phase, Failed);
    assert_eq!(run.metrics[0].measurements[0].phase, Inconclusive);
    assert_eq!(run.metrics[0].measurements[0].message, "Metric Terminated");
    assert!(
        run.poll_due(&plan, 100_000).is_empty(),
        "nothing new once terminating"
    );
}

#[test]
fn inconclusive_metrics_pause_unless_they_ask_to_abort() {
    let plan = plan(
        json!([{"name": "m", "onInconclusive": "abort", "successCondition": "result > 5", "failureCondition": "result < 0"}]),
    );
    let input = ReplayInput::parse(&json!({"measurements": {"m": [1]}}).to_string()).unwrap();
    let run = replay(&plan, input).unwrap();
    assert_eq!(run.phase, Inconclusive);
    assert_eq!(run.inconclusive_action(&plan), OnInconclusive::Abort);
    let plan = plan_of(
        json!([{"name": "m", "successCondition": "result > 5", "failureCondition": "result < 0"}]),
    );
    let run = replay(
        &plan,
        ReplayInput::parse(r#"{"measurements": {"m": [1]}}"#).unwrap(),
    )
    .unwrap();
    assert_eq!(run.inconclusive_action(&plan), OnInconclusive::Pause);
}

#[test]
fn a_pass_without_evidence_is_recorded_as_such() {
    let plan =
        plan(json!([{"name": "m", "failureCondition": "len(result) > 0 && result[0] > 0.01"}]));
    let report = run(&plan, json!({"m": [[]]}), false);
    assert_eq!(report.phase, Successful, "Argo's verdict stays");
    assert!(!report.evidence, "but it is not evidence");
    let report = run(&plan, json!({"m": [[0.001]]}), false);
    assert!(report.evidence);
}

#[test]
fn arguments_are_substituted_and_secrets_redacted() {
    let template = spec(
        json!([{"name": "m", "interval": "{{args.every}}", "count": "{{args.n}}", "successCondition": "result < {{args.max}}",
                "provider": {"web": {"url": "http://127.0.0.1:1/?token={{args.token}}"}}}]),
        json!({"args": [{"name": "every", "value": "30s"}, {"name": "n"}, {"name": "max", "value": "0.5"}, {"name": "token"}]}),
    );
    let mut args = BTreeMap::new();
    args.insert("n".to_owned(), ArgValue::plain("2"));
    args.insert(
        "token".to_owned(),
        ArgValue {
            value: "s3cr3t".into(),
            secret: true,
        },
    );
    let plan = resolve(&template, &args).unwrap();
    assert_eq!(plan.metrics[0].interval, Some(30_000));
    assert_eq!(plan.metrics[0].count, Some(2));
    assert_eq!(
        plan.metrics[0].success.as_ref().unwrap().source(),
        "result < 0.5"
    );
    let mut run = Run::new(&plan, 0);
    run.poll_due(&plan, 0);
    run.handle_outcome(
        &plan,
        0,
        0,
        Outcome::Error("GET http://127.0.0.1:1/?token=s3cr3t: connection refused".into()),
    );
    assert!(!run.metrics[0].measurements[0].message.contains("s3cr3t"));
    assert!(run.metrics[0].measurements[0].message.contains("*****"));

    let err = resolve(&template, &BTreeMap::new()).unwrap_err();
    assert_eq!(err, PlanError::Unresolved("n".into()));
    let undeclared = spec(
        json!([{"name": "m", "successCondition": "result < {{args.nope}}"}]),
        json!({}),
    );
    assert_eq!(
        resolve(&undeclared, &BTreeMap::new()).unwrap_err(),
        PlanError::Undeclared("nope".into())
    );
}

#[test]
fn invalid_metrics_are_refused_as_argo_refuses_them() {
    for (metric, needle) in [
        (json!({"name": "m", "count": 2}), "no interval"),
        (
            json!({"name": "m", "interval": "1m", "count": 1, "failureLimit": 2}),
            "count",
        ),
        (json!({"name": "m", "failureLimit": -2}), "failureLimit"),
        (
            json!({"name": "m", "failureLimit": -1}),
            "consecutiveSuccessLimit",
        ),
        (
            json!({"name": "m", "successCondition": "result >"}),
            "successCondition",
        ),
    ] {
        let err = resolve(&spec(json!([metric]), json!({})), &BTreeMap::new()).unwrap_err();
        assert!(err.to_string().contains(needle), "{err}");
    }
    let err = resolve(
        &spec(json!([{"name": "m"}, {"name": "m"}]), json!({})),
        &BTreeMap::new(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("duplicate"));
    let none: AnalysisTemplateSpec =
        serde_json::from_value(json!({"metrics": [{"name": "m", "provider": {}}]})).unwrap();
    assert!(
        resolve(&none, &BTreeMap::new())
            .unwrap_err()
            .to_string()
            .contains("no provider")
    );
}

#[test]
fn errors_reset_by_a_success_and_counted_apart() {
    let plan = plan(json!([{"name": "m", "interval": "1m", "count": 3, "successCondition": OK}]));
    let report = run(
        &plan,
        json!({"m": [{"error": "a"}, {"error": "b"}, 1, {"error": "c"}, 1, 1]}),
        false,
    );
    let m = &report.metrics[0];
    assert_eq!(
        (m.count, m.error, m.consecutive_error, m.successful),
        (3, 3, 0, 3)
    );
    assert_eq!(report.phase, Successful);
}

#[test]
fn the_run_state_round_trips_through_serialization_mid_run() {
    let plan = plan(
        json!([{"name": "m", "interval": "1m", "count": 4, "failureLimit": 1, "successCondition": OK}]),
    );
    let mut run = Run::new(&plan, 0);
    let mut now = 0;
    for value in [1.0, 0.0] {
        for request in run.poll_due(&plan, now) {
            run.handle_outcome(
                &plan,
                request.metric_index,
                now,
                super::run::value(super::MetricResult::Scalar(value)),
            );
        }
        run.assess(&plan, now);
        now = run.next_due(&plan).unwrap();
    }
    let saved = serde_json::to_string(&run).unwrap();
    let mut restored: Run = serde_json::from_str(&saved).unwrap();
    assert_eq!(restored, run);
    for machine in [&mut run, &mut restored] {
        let mut t = now;
        for value in [0.0, 1.0] {
            for request in machine.poll_due(&plan, t) {
                machine.handle_outcome(
                    &plan,
                    request.metric_index,
                    t,
                    super::run::value(super::MetricResult::Scalar(value)),
                );
            }
            machine.assess(&plan, t);
            t = machine.next_due(&plan).unwrap_or(t);
        }
    }
    assert_eq!(restored, run);
    assert_eq!(run.phase, Failed);
}

#[test]
fn a_pending_run_reports_pending_metrics() {
    let plan = plan(json!([{"name": "m", "initialDelay": "1m"}]));
    let report = run(&plan, json!({}), false);
    assert_eq!(report.phase, Pending);
    assert_eq!(report.metrics[0].phase, Pending);
}

#[test]
fn the_cluster_metrics_address_replaces_a_fixed_prometheus_address() {
    let template = spec(
        json!([
            {"name": "fixed", "provider": {"prometheus": {"address": "http://prometheus.monitoring:9090", "query": "up"}}},
            {"name": "placed", "provider": {"prometheus": {"address": "{{args.metrics-address}}/prefix", "query": "up"}}},
            {"name": "absent", "provider": {"prometheus": {"query": "up"}}}
        ]),
        json!({}),
    );
    let mut args = BTreeMap::new();
    args.insert(
        "metrics-address".to_owned(),
        ArgValue::plain("http://127.0.0.1:9101"),
    );
    let plan = resolve(&template, &args).unwrap();
    let address = |i: usize| {
        plan.metrics[i]
            .provider
            .prometheus
            .as_ref()
            .unwrap()
            .address
            .clone()
            .unwrap()
    };
    assert_eq!(address(0), "http://127.0.0.1:9101");
    assert_eq!(address(1), "http://127.0.0.1:9101/prefix");
    assert_eq!(address(2), "http://127.0.0.1:9101");
    // Without the argument, the template's own address stands.
    let plan = resolve(&template.clone(), &BTreeMap::new());
    assert!(plan.is_err(), "the placed placeholder needs the argument");
}

#[test]
fn abandoned_measurements_are_due_again_at_once() {
    let plan = plan(json!([{"name": "rate", "interval": "1m", "successCondition": OK}]));
    let mut run = Run::new(&plan, 0);
    assert_eq!(run.poll_due(&plan, 0).len(), 1);
    assert!(run.poll_due(&plan, 1_000).is_empty(), "in flight: not due");
    // The process that asked died; the persisted run is resumed.
    let mut resumed: Run = serde_json::from_value(serde_json::to_value(&run).unwrap()).unwrap();
    resumed.abandon_in_flight();
    assert!(
        resumed.metrics[0].measurements.is_empty(),
        "the unanswered measurement is gone"
    );
    let again = resumed.poll_due(&plan, 2_000);
    assert_eq!(again.len(), 1, "taken again at once");
    resumed.handle_outcome(
        &plan,
        0,
        2_500,
        super::run::value(super::MetricResult::Scalar(0.0)),
    );
    assert_eq!(resumed.metrics[0].count, 1, "counted once");
}

//! Tests of the analysis kinds: strict parsing of templates, runs and experiments, their
//! defaults, and the round trip of the typed model.

use serde_json::json;

use super::*;
use crate::spec::common::{Duration, IntOrString};

fn template(value: serde_json::Value) -> AnalysisTemplate {
    serde_json::from_value(value).expect("template parses")
}

fn prometheus_template() -> serde_json::Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AnalysisTemplate",
        "metadata": {"name": "success-rate"},
        "spec": {
            "args": [
                {"name": "service-name"},
                {"name": "prometheus-port", "value": "9090"},
                {"name": "token", "valueFrom": {"secretKeyRef": {"name": "prom", "key": "token"}}},
                {"name": "app", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}}
            ],
            "dryRun": [{"metricName": "latency"}],
            "measurementRetention": [{"metricName": ".*", "limit": 20}],
            "metrics": [{
                "name": "success-rate",
                "interval": "5m",
                "initialDelay": "30s",
                "count": 3,
                "successCondition": "result[0] >= 0.95",
                "failureLimit": 2,
                "consecutiveErrorLimit": 4,
                "provider": {"prometheus": {
                    "address": "http://prometheus.example.com:{{args.prometheus-port}}",
                    "query": "sum(irate(istio_requests_total{reporter=\"source\",destination_service=~\"{{args.service-name}}\",response_code!~\"5.*\"}[5m]))",
                    "timeout": 20,
                    "insecure": true,
                    "headers": [{"key": "Authorization", "value": "Bearer {{args.token}}"}],
                    "authentication": {
                        "sigv4": {"region": "us-east-1", "profile": "default", "roleArn": "arn:aws:iam::1:role/x"},
                        "oauth2": {"tokenUrl": "https://idp/token", "clientId": "c", "clientSecret": "s", "scopes": ["a", "b"]},
                        "basicAuth": {"username": "u", "password": "{{args.token}}"}
                    },
                    "rangeQuery": {"start": "now() - duration(\"1h\")", "end": "now()", "step": "1m"}
                }}
            }],
            "templates": [{"templateName": "base", "clusterScope": true}]
        }
    })
}

#[test]
fn realistic_prometheus_template_parses() {
    let t = template(prometheus_template());
    let metric = &t.spec.metrics[0];
    assert_eq!(metric.interval, Some(Duration::from_secs(300)));
    assert_eq!(metric.initial_delay, Some(Duration::from_secs(30)));
    assert_eq!(metric.count, Some(IntOrString::Int(3)));
    assert_eq!(metric.provider.kinds(), vec!["prometheus"]);
    let prom = metric.provider.prometheus.as_ref().unwrap();
    assert_eq!(prom.timeout, Some(20));
    let auth = prom.authentication.as_ref().unwrap();
    assert_eq!(
        auth.sigv4.as_ref().unwrap().role_arn.as_deref(),
        Some("arn:aws:iam::1:role/x")
    );
    assert_eq!(auth.oauth2.as_ref().unwrap().scopes, vec!["a", "b"]);
    assert_eq!(
        prom.range_query.as_ref().unwrap().step,
        Some(Duration::from_secs(60))
    );
    assert_eq!(t.spec.args.len(), 4);
    assert_eq!(t.spec.measurement_retention[0].limit, 20);
    assert_eq!(t.spec.templates[0].cluster_scope, Some(true));
}

#[test]
fn web_and_job_metrics_parse() {
    let t = template(json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ClusterAnalysisTemplate",
        "metadata": {"name": "checks"},
        "spec": {"metrics": [
            {
                "name": "webmetric",
                "successCondition": "result.ok == true",
                "provider": {"web": {
                    "method": "POST",
                    "url": "http://svc.{{args.namespace}}/check",
                    "headers": [{"key": "Content-Type", "value": "application/json"}],
                    "jsonBody": {"service": "{{args.service}}", "window": 5},
                    "timeoutSeconds": 20,
                    "jsonPath": "{$.data}",
                    "authentication": {"oauth2": {"tokenUrl": "https://idp/token"}}
                }}
            },
            {
                "name": "load-test",
                "provider": {"job": {
                    "metadata": {"labels": {"team": "a"}},
                    "spec": {
                        "backoffLimit": 1,
                        "template": {"spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "t", "image": "busybox", "command": ["sh", "-c", "true"]}]
                        }}
                    }
                }}
            }
        ]}
    }));
    let web = t.spec.metrics[0].provider.web.as_ref().unwrap();
    assert_eq!(web.method.as_deref(), Some("POST"));
    assert_eq!(
        web.json_body,
        Some(json!({"service": "{{args.service}}", "window": 5}))
    );
    assert_eq!(web.timeout_seconds, Some(20));
    let job = t.spec.metrics[1].provider.job.as_ref().unwrap();
    assert_eq!(job.spec.backoff_limit, Some(1));
    assert_eq!(t.spec.metrics[1].provider.kinds(), vec!["job"]);
}

#[test]
fn other_providers_parse() {
    let provider: MetricProvider = serde_json::from_value(json!({
            "datadog": {"apiVersion": "v2", "interval": "5m", "queries": {"a": "sum:x{*}"},
                        "formula": "a", "aggregator": "avg", "secretRef": {"name": "dd", "namespaced": true}},
            "cloudWatch": {"interval": "10m", "metricDataQueries": [{
                "id": "rate", "expression": "errors / requests", "returnData": true, "period": "{{args.p}}",
                "metricStat": {"metric": {"namespace": "AWS/ELB", "metricName": "x",
                               "dimensions": [{"name": "LB", "value": "y"}]}, "period": 300, "stat": "Sum", "unit": "Count"}
            }]},
            "kayenta": {"address": "http://k", "application": "a", "canaryConfigName": "c",
                        "metricsAccountName": "m", "configurationAccountName": "c", "storageAccountName": "s",
                        "threshold": {"pass": 90, "marginal": 75},
                        "scopes": [{"name": "default",
                                    "controlScope": {"scope": "app=a", "region": "us", "step": 60, "start": "2020-01-01T00:00:00Z"},
                                    "experimentScope": {"scope": "app=b", "region": "us", "step": 60}}]},
            "newRelic": {"profile": "nr", "query": "SELECT 1", "timeout": 10},
            "wavefront": {"address": "w", "query": "ts(x)"},
            "graphite": {"address": "g", "query": "target"},
            "influxdb": {"profile": "i", "query": "from(bucket: \"b\")"},
            "skywalking": {"address": "s", "query": "q", "interval": "3m"},
            "plugin": {"argoproj-labs/sample": {"address": "x", "n": 3}}
        }))
        .unwrap();
    assert_eq!(
        provider.kinds(),
        vec![
            "kayenta",
            "datadog",
            "wavefront",
            "newRelic",
            "cloudWatch",
            "graphite",
            "influxdb",
            "skywalking",
            "plugin"
        ]
    );
    let cw = provider.cloud_watch.as_ref().unwrap();
    assert!(
        cw.metric_data_queries[0]
            .period
            .as_ref()
            .unwrap()
            .is_templated()
    );
}

#[test]
fn analysis_run_with_status_parses() {
    let run: AnalysisRun = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "AnalysisRun",
            "metadata": {"name": "guestbook-6c54544bf9-2-1", "namespace": "default"},
            "spec": {
                "args": [{"name": "service-name", "value": "guestbook"}],
                "terminate": true,
                "ttlStrategy": {"secondsAfterCompletion": 3600, "secondsAfterFailure": 60, "secondsAfterSuccess": 30},
                "metrics": [{"name": "sleep", "interval": "{{args.interval}}", "provider": {"web": {"url": "http://x"}}}]
            },
            "status": {
                "phase": "Failed",
                "message": "Metric \"sleep\" assessed Failed due to failed (1) > failureLimit (0)",
                "startedAt": "2024-01-01T00:00:00Z",
                "completedAt": "2024-01-01T00:05:00Z",
                "runSummary": {"count": 1, "failed": 1},
                "dryRunSummary": {},
                "metricResults": [{
                    "name": "sleep",
                    "phase": "Failed",
                    "count": 1,
                    "failed": 1,
                    "consecutiveError": 0,
                    "consecutiveSuccess": 0,
                    "dryRun": false,
                    "metadata": {"ResolvedPrometheusQuery": "up"},
                    "measurements": [{
                        "phase": "Failed",
                        "startedAt": "2024-01-01T00:00:00Z",
                        "finishedAt": "2024-01-01T00:00:05Z",
                        "value": "[0.5]",
                        "metadata": {"job-name": "x"},
                        "resumeAt": "2024-01-01T00:00:10Z"
                    }]
                }]
            }
        }))
        .unwrap();
    assert_eq!(
        run.spec.metrics[0].interval,
        Some(Duration::Templated("{{args.interval}}".into()))
    );
    let status = run.status.as_ref().unwrap();
    assert_eq!(status.phase, Some(AnalysisPhase::Failed));
    assert_eq!(
        status.metric_results[0].measurements[0].value.as_deref(),
        Some("[0.5]")
    );
    assert_eq!(status.run_summary.as_ref().unwrap().failed, Some(1));
    assert_eq!(
        run.spec
            .ttl_strategy
            .as_ref()
            .unwrap()
            .seconds_after_success,
        Some(30)
    );
}

#[test]
fn blank_run_phase_reads_as_unset() {
    let status: AnalysisRunStatus =
        serde_json::from_value(json!({"phase": "", "runSummary": {}})).unwrap();
    assert_eq!(status.phase, None);
    assert!(serde_json::from_value::<AnalysisRunStatus>(json!({"phase": "Done"})).is_err());
}

#[test]
fn unknown_field_inside_metric_is_rejected() {
    let mut value = prometheus_template();
    value["spec"]["metrics"][0]["failureLimt"] = json!(3);
    let err = serde_json::from_value::<AnalysisTemplate>(value).unwrap_err();
    assert!(err.to_string().contains("failureLimt"), "{err}");

    let mut value = prometheus_template();
    value["spec"]["metrics"][0]["provider"]["prometheus"]["querry"] = json!("up");
    assert!(serde_json::from_value::<AnalysisTemplate>(value).is_err());
}

#[test]
fn round_trip_is_identity() {
    let t = template(prometheus_template());
    let back: AnalysisTemplate = serde_json::from_value(serde_json::to_value(&t).unwrap()).unwrap();
    assert_eq!(t, back);
}

#[test]
fn templated_count_parses() {
    let metric: Metric = serde_json::from_value(json!({
        "name": "m",
        "interval": "{{args.interval}}",
        "count": "{{args.count}}",
        "failureLimit": "{{args.failures}}",
        "inconclusiveLimit": "1",
        "consecutiveSuccessLimit": 2,
        "provider": {"plugin": {"org/name": {}}}
    }))
    .unwrap();
    assert_eq!(
        metric.count,
        Some(IntOrString::String("{{args.count}}".into()))
    );
    assert!(metric.count.as_ref().unwrap().is_templated());
    assert_eq!(
        metric.inconclusive_limit.as_ref().unwrap().as_int(),
        Some(1)
    );
    assert_eq!(metric.provider.kinds(), vec!["plugin"]);
}

#[test]
fn experiment_with_status_parses_and_round_trips() {
    let exp: Experiment = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Experiment",
            "metadata": {"name": "exp"},
            "spec": {
                "duration": "5m",
                "progressDeadlineSeconds": 30,
                "scaleDownDelaySeconds": 10,
                "templates": [{
                    "name": "baseline",
                    "replicas": 1,
                    "minReadySeconds": 5,
                    "selector": {"matchLabels": {"app": "x"}},
                    "template": {"metadata": {"labels": {"app": "x"}},
                                 "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
                    "service": {"name": "baseline-svc"}
                }],
                "analyses": [{"name": "a", "templateName": "t", "clusterScope": false,
                              "args": [{"name": "x", "value": "y"}], "requiredForCompletion": true}],
                "dryRun": [{"metricName": "m"}],
                "measurementRetention": [{"metricName": "m", "limit": 5}],
                "analysisRunMetadata": {"labels": {"l": "v"}, "annotations": {"a": "v"}}
            },
            "status": {
                "phase": "Running",
                "availableAt": "2024-01-01T00:00:00Z",
                "templateStatuses": [{"name": "baseline", "replicas": 1, "updatedReplicas": 1,
                                      "readyReplicas": 1, "availableReplicas": 1, "status": "Running",
                                      "lastTransitionTime": "2024-01-01T00:00:00Z", "podTemplateHash": "abc"}],
                "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                                "message": "ok", "lastUpdateTime": "2024-01-01T00:00:00Z",
                                "lastTransitionTime": null}],
                "analysisRuns": [{"name": "a", "analysisRun": "exp-a", "phase": "Running"}]
            }
        }))
        .unwrap();
    let status = exp.status.as_ref().unwrap();
    assert_eq!(
        status.template_statuses[0].status,
        Some(TemplateStatusCode::Running)
    );
    assert_eq!(
        status.conditions[0].condition_type,
        ExperimentConditionType::Progressing
    );
    let back: Experiment = serde_json::from_value(serde_json::to_value(&exp).unwrap()).unwrap();
    assert_eq!(exp, back);
}

#[test]
fn severity_follows_worst_wins_order() {
    use AnalysisPhase::*;
    let order = [Successful, Running, Pending, Inconclusive, Error, Failed];
    for pair in order.windows(2) {
        assert!(pair[0].severity() < pair[1].severity(), "{pair:?}");
    }
    assert_eq!(
        serde_json::to_value(Inconclusive).unwrap(),
        json!("Inconclusive")
    );
    assert!(Error.is_completed() && !Pending.is_completed());
}

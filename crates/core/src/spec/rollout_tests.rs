//! Tests of the Rollout kind: canary and blue-green rollouts with routing and status parse,
//! unknown fields are refused, a missing spec reads as empty, and the model round-trips.

use serde_json::json;

use super::*;
use crate::spec::common::{Duration, IntOrPercent};

fn canary_steps() -> serde_json::Value {
    json!([
        {"setWeight": 10},
        {"pause": {"duration": "5m"}},
        {"setHeaderRoute": {
            "name": "beta-users",
            "match": [{"headerName": "x-beta", "headerValue": {"exact": "1"}}]
        }},
        {"setMirrorRoute": {
            "name": "mirror",
            "percentage": 50,
            "match": [{"method": {"exact": "GET"}, "path": {"prefix": "/api"},
                       "headers": {"x-debug": {"regex": "on|yes"}}}]
        }},
        {"analysis": {
            "templates": [{"templateName": "success-rate"}],
            "args": [
                {"name": "canary-hash", "valueFrom": {"podTemplateHashValue": "Latest"}},
                {"name": "region", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['region']"}}}
            ],
            "dryRun": [{"metricName": "latency"}],
            "measurementRetention": [{"metricName": ".*", "limit": 20}],
            "analysisRunMetadata": {"labels": {"team": "shop"}}
        }},
        {"experiment": {
            "duration": "10m",
            "templates": [
                {"name": "baseline", "specRef": "stable", "replicas": 1, "weight": 5,
                 "service": {"name": "baseline-svc"}},
                {"name": "candidate", "specRef": "canary", "replicas": 1, "weight": 5,
                 "metadata": {"labels": {"exp": "candidate"}}}
            ],
            "analyses": [{"name": "compare", "templateName": "mann-whitney",
                          "requiredForCompletion": true,
                          "args": [{"name": "baseline-hash",
                                    "value": "{{templates.baseline.podTemplateHash}}"}]}]
        }},
        {"setCanaryScale": {"replicas": 2}},
        {"setWeight": 50},
        {"pause": {"duration": 30}},
        {"setCanaryScale": {"matchTrafficWeight": true}},
        {"plugin": {"name": "argoproj-labs/sample", "config": {"message": "hi"}}},
        {"pause": {}}
    ])
}

fn canary_rollout() -> serde_json::Value {
    let steps = canary_steps();
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": "checkout", "namespace": "shop"},
        "spec": {
            "replicas": 5,
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": 900,
            "progressDeadlineAbort": true,
            "rollbackWindow": {"revisions": 2},
            "analysis": {"successfulRunHistoryLimit": 2, "unsuccessfulRunHistoryLimit": 4},
            "selector": {"matchLabels": {"app": "checkout"}},
            "template": {
                "metadata": {"labels": {"app": "checkout"}},
                "spec": {"containers": [{"name": "checkout", "image": "shop/checkout:1.2.3"}]}
            },
            "strategy": {
                "canary": {
                    "canaryService": "checkout-canary",
                    "stableService": "checkout-stable",
                    "maxSurge": "25%",
                    "maxUnavailable": 0,
                    "abortScaleDownDelaySeconds": 60,
                    "dynamicStableScale": true,
                    "canaryMetadata": {"labels": {"role": "canary"}},
                    "analysis": {
                        "templates": [{"templateName": "success-rate", "clusterScope": true}],
                        "startingStep": 2,
                        "args": [{"name": "service", "value": "checkout"}]
                    },
                    "trafficRouting": {
                        "istio": {
                            "virtualService": {"name": "checkout-vs", "routes": ["primary"]},
                            "destinationRule": {
                                "name": "checkout-dr",
                                "canarySubsetName": "canary",
                                "stableSubsetName": "stable"
                            }
                        },
                        "managedRoutes": [{"name": "beta-users"}, {"name": "mirror"}]
                    },
                    "steps": steps
                }
            }
        }
    })
}

fn blue_green_rollout() -> serde_json::Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "web:2"}]}
            },
            "strategy": {
                "blueGreen": {
                    "activeService": "web-active",
                    "previewService": "web-preview",
                    "previewReplicaCount": 1,
                    "autoPromotionEnabled": false,
                    "scaleDownDelaySeconds": 60,
                    "maxUnavailable": "10%",
                    "antiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": {"weight": 50}
                    },
                    "prePromotionAnalysis": {
                        "templates": [{"templateName": "smoke"}],
                        "args": [{"name": "host", "value": "web-preview"}]
                    },
                    "postPromotionAnalysis": {"templates": [{"templateName": "success-rate"}]},
                    "previewMetadata": {"labels": {"role": "preview"}},
                    "activeMetadata": {"annotations": {"role": "active"}}
                }
            }
        },
        "status": {
            "phase": "Paused",
            "message": "BlueGreenPause",
            "pauseConditions": [{"reason": "BlueGreenPause", "startTime": "2024-05-01T10:00:00Z"}],
            "controllerPause": true,
            "currentPodHash": "6b7f9c",
            "stableRS": "5d4c8a",
            "observedGeneration": "4",
            "replicas": 4,
            "updatedReplicas": 1,
            "readyReplicas": 4,
            "availableReplicas": 4,
            "HPAReplicas": 3,
            "selector": "app=web,rollouts-pod-template-hash=5d4c8a",
            "conditions": [{
                "type": "Paused", "status": "True",
                "lastUpdateTime": "2024-05-01T10:00:00Z",
                "lastTransitionTime": "2024-05-01T10:00:00Z",
                "reason": "RolloutPaused", "message": "Rollout is paused"
            }],
            "canary": {},
            "blueGreen": {
                "activeSelector": "5d4c8a",
                "previewSelector": "6b7f9c",
                "prePromotionAnalysisRunStatus": {"name": "web-6b7f9c-4-pre", "status": "Successful"}
            }
        }
    })
}

#[test]
fn parses_a_canary_rollout_with_istio_routing() {
    let rollout: Rollout = serde_json::from_value(canary_rollout()).unwrap();
    assert_eq!(rollout.spec.replicas, Some(5));
    assert!(rollout.blue_green().is_none());
    let canary = rollout.canary().unwrap();
    assert_eq!(canary.max_surge, Some(IntOrPercent::Percent(25)));
    assert_eq!(canary.max_unavailable, Some(IntOrPercent::Int(0)));
    assert_eq!(canary.analysis.as_ref().unwrap().starting_step, Some(2));
    assert!(canary.analysis.as_ref().unwrap().analysis().templates[0].is_cluster_scope());

    let routing = canary.traffic_routing.as_ref().unwrap();
    assert_eq!(routing.providers(), vec!["istio"]);
    assert_eq!(routing.max_traffic_weight(), 100);
    assert_eq!(
        routing
            .istio
            .as_ref()
            .unwrap()
            .destination_rule
            .as_ref()
            .unwrap()
            .canary_subset_name,
        "canary"
    );

    let kinds: Vec<_> = rollout
        .steps()
        .iter()
        .map(|s| s.kind_name().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "setWeight",
            "pause",
            "setHeaderRoute",
            "setMirrorRoute",
            "analysis",
            "experiment",
            "setCanaryScale",
            "setWeight",
            "pause",
            "setCanaryScale",
            "plugin",
            "pause"
        ]
    );
    let steps = rollout.steps();
    assert_eq!(
        steps[1].pause.as_ref().unwrap().duration,
        Some(Duration::from_secs(300))
    );
    assert_eq!(
        steps[8].pause.as_ref().unwrap().duration,
        Some(Duration::from_secs(30))
    );
    assert_eq!(steps[11].pause.as_ref().unwrap().duration, None);
    let analysis = steps[4].analysis.as_ref().unwrap();
    assert_eq!(
        analysis.args[0]
            .value_from
            .as_ref()
            .unwrap()
            .pod_template_hash_value,
        Some(PodTemplateHashValue::Latest)
    );
    assert_eq!(analysis.measurement_retention[0].limit, 20);
    let experiment = steps[5].experiment.as_ref().unwrap();
    assert_eq!(experiment.duration, Some(Duration::from_secs(600)));
    assert_eq!(experiment.templates[0].spec_ref, ReplicaSetSpecRef::Stable);
    assert_eq!(experiment.analyses[0].required_for_completion, Some(true));
    let mirror = steps[3].set_mirror_route.as_ref().unwrap();
    assert_eq!(
        mirror.r#match[0].headers["x-debug"].regex.as_deref(),
        Some("on|yes")
    );
    assert_eq!(
        steps[10].plugin.as_ref().unwrap().config,
        Some(json!({"message": "hi"}))
    );
    assert!(rollout.status.is_none());
}

#[test]
fn parses_a_blue_green_rollout_with_status() {
    let rollout: Rollout = serde_json::from_value(blue_green_rollout()).unwrap();
    assert!(rollout.canary().is_none());
    assert!(rollout.steps().is_empty());
    let bg = rollout.blue_green().unwrap();
    assert_eq!(bg.active_service, "web-active");
    assert_eq!(bg.auto_promotion_enabled, Some(false));
    assert_eq!(bg.max_unavailable, Some(IntOrPercent::Percent(10)));
    assert_eq!(
        bg.anti_affinity
            .as_ref()
            .unwrap()
            .preferred_during_scheduling_ignored_during_execution,
        Some(PreferredAntiAffinity { weight: 50 })
    );
    let status = rollout.status.as_ref().unwrap();
    assert_eq!(status.phase, Some(RolloutPhase::Paused));
    assert_eq!(
        status.pause_conditions[0].reason,
        PauseReason::BlueGreenPause
    );
    assert_eq!(status.hpa_replicas, Some(3));
    assert_eq!(status.conditions[0].type_, RolloutConditionType::Paused);
    assert_eq!(status.conditions[0].status, ConditionStatus::True);
    assert_eq!(status.canary, Some(CanaryStatus::default()));
    assert_eq!(
        status
            .blue_green
            .as_ref()
            .unwrap()
            .pre_promotion_analysis_run_status
            .as_ref()
            .unwrap()
            .status,
        AnalysisPhase::Successful
    );
}

#[test]
fn parses_canary_status() {
    let status: RolloutStatus = serde_json::from_value(json!({
        "currentStepIndex": 3,
        "currentStepHash": "abc",
        "abort": true,
        "abortedAt": "2024-05-01T10:00:00Z",
        "promoteFull": false,
        "canary": {
            "currentStepAnalysisRunStatus": {"name": "r-1", "status": "Failed", "message": "boom"},
            "currentExperiment": "exp-1",
            "stablePingPong": "pong",
            "weights": {
                "canary": {"weight": 20, "serviceName": "c", "podTemplateHash": "h1"},
                "stable": {"weight": 80, "serviceName": "s", "podTemplateHash": "h0"},
                "additional": [{"weight": 0}],
                "verified": true
            },
            "stepPluginStatuses": [{
                "index": 2, "name": "sample", "operation": "Run", "phase": "Running",
                "backoff": "30s", "executions": 3, "status": {"anything": [1, 2]}
            }]
        },
        "alb": {"loadBalancer": {"name": "lb", "arn": "arn:aws:x", "fullName": "app/lb/1"},
                "ingress": "web"}
    }))
    .unwrap();
    let canary = status.canary.as_ref().unwrap();
    assert_eq!(canary.stable_ping_pong, Some(PingPongType::Pong));
    assert_eq!(canary.weights.as_ref().unwrap().stable.weight, 80);
    assert_eq!(
        canary.step_plugin_statuses[0].operation,
        StepPluginOperation::Run
    );
    assert_eq!(
        canary.step_plugin_statuses[0].backoff,
        Some(Duration::from_secs(30))
    );
    let back: RolloutStatus =
        serde_json::from_value(serde_json::to_value(&status).unwrap()).unwrap();
    assert_eq!(back, status);
}

#[test]
fn rejects_an_unknown_field_under_the_canary_strategy() {
    let mut value = canary_rollout();
    value["spec"]["strategy"]["canary"]["stableServices"] = json!("typo");
    let err = serde_json::from_value::<Rollout>(value)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `stableServices`"), "{err}");
}

#[test]
fn rejects_an_unknown_strategy_and_unknown_step_fields() {
    let mut value = canary_rollout();
    value["spec"]["strategy"]["unknown-strategy"] = json!({});
    let err = serde_json::from_value::<Rollout>(value)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `unknown-strategy`"), "{err}");

    let mut value = canary_rollout();
    value["spec"]["strategy"]["canary"]["steps"][0] = json!({"setWeigth": 10});
    assert!(serde_json::from_value::<Rollout>(value).is_err());

    let mut value = canary_rollout();
    value["spec"]["strategy"]["canary"]["trafficRouting"]["linkerd"] = json!({});
    assert!(serde_json::from_value::<Rollout>(value).is_err());
}

#[test]
fn a_missing_spec_reads_as_empty_so_lint_can_name_what_is_missing() {
    let rollout: Rollout = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout"
    }))
    .unwrap();
    assert_eq!(rollout.spec, RolloutSpec::default());
    assert!(rollout.spec.selector.is_none());
    assert!(rollout.canary().is_none() && rollout.blue_green().is_none());
}

#[test]
fn round_trips_through_json() {
    for value in [canary_rollout(), blue_green_rollout()] {
        let parsed: Rollout = serde_json::from_value(value).unwrap();
        let written = serde_json::to_value(&parsed).unwrap();
        let reparsed: Rollout = serde_json::from_value(written).unwrap();
        assert_eq!(reparsed, parsed);
    }
}

#[test]
fn step_and_routing_helpers() {
    let empty = CanaryStep::default();
    assert_eq!(empty.kind_name(), None);
    assert!(empty.set_fields().is_empty());
    let double = CanaryStep {
        set_weight: Some(10),
        pause: Some(RolloutPause::default()),
        ..CanaryStep::default()
    };
    assert_eq!(double.kind_name(), Some("setWeight"));
    assert_eq!(double.set_fields(), vec!["setWeight", "pause"]);

    let routing: TrafficRouting = serde_json::from_value(json!({
            "nginx": {"stableIngress": "web", "additionalIngressAnnotations": {"canary-by-header": "x"}},
            "smi": {},
            "plugins": {"argoproj-labs/gatewayAPI": {"httpRoute": "web", "namespace": "default"}},
            "maxTrafficWeight": 1000
        }))
        .unwrap();
    assert_eq!(routing.providers(), vec!["nginx", "smi", "plugins"]);
    assert_eq!(
        routing.plugin_names().collect::<Vec<_>>(),
        vec!["argoproj-labs/gatewayAPI"]
    );
    assert_eq!(routing.max_traffic_weight(), 1000);
}

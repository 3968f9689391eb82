//! Property tests of the manifest loader: typed round trips, and no panic on any input.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::load_bytes;
use crate::spec::Manifest;

fn duration() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0u64..100_000).prop_map(|s| json!(s)),
        (1u64..600).prop_map(|s| json!(format!("{s}s"))),
        (1u64..90).prop_map(|m| json!(format!("{m}m"))),
        (1u64..5, 1u64..59).prop_map(|(h, m)| json!(format!("{h}h{m}m"))),
    ]
}

fn int_or_percent() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0i64..10).prop_map(|v| json!(v)),
        (0i64..100).prop_map(|p| json!(format!("{p}%")))
    ]
}

fn analysis() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec("[a-z]{1,8}", 1..3),
        prop::collection::vec(("[a-z-]{1,10}", "[a-z0-9.]{0,6}"), 0..3),
        any::<bool>(),
    )
        .prop_map(|(templates, args, cluster_scope)| {
            let templates: Vec<Value> = templates
                .into_iter()
                .map(|t| {
                    if cluster_scope {
                        json!({"templateName": t, "clusterScope": true})
                    } else {
                        json!({"templateName": t})
                    }
                })
                .collect();
            let args: Vec<Value> = args
                .into_iter()
                .map(|(n, v)| json!({"name": n, "value": v}))
                .collect();
            json!({"templates": templates, "args": args})
        })
}

fn step() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0i32..=100).prop_map(|w| json!({"setWeight": w})),
        Just(json!({"pause": {}})),
        duration().prop_map(|d| json!({"pause": {"duration": d}})),
        analysis().prop_map(|a| json!({"analysis": a})),
        (0i32..=100).prop_map(|w| json!({"setCanaryScale": {"weight": w}})),
        "[a-z]{1,6}".prop_map(|n| json!({"setHeaderRoute": {"name": n, "match": [{"headerName": "x-canary", "headerValue": {"exact": "true"}}]}})),
        ("[a-z]{1,6}", 0i32..=100).prop_map(|(n, p)| json!({"setMirrorRoute": {"name": n, "percentage": p, "match": [{"method": {"exact": "GET"}}]}})),
    ]
}

fn traffic_routing() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(
            json!({"istio": {"virtualService": {"name": "vs", "routes": ["primary"]}}})
        )),
        Just(Some(
            json!({"nginx": {"stableIngress": "ing"}, "maxTrafficWeight": 1000})
        )),
        Just(Some(json!({"smi": {"rootService": "root"}}))),
        Just(Some(
            json!({"plugins": {"flotilla/agent": {"x": 1}}, "managedRoutes": [{"name": "h"}]})
        )),
    ]
}

fn rollout() -> impl Strategy<Value = Value> {
    let canary = (
        prop::collection::vec(step(), 0..8),
        traffic_routing(),
        proptest::option::of(int_or_percent()),
        proptest::option::of(int_or_percent()),
        proptest::option::of(analysis()),
    )
        .prop_map(|(steps, routing, surge, unavailable, background)| {
            let mut canary = json!({"steps": steps, "canaryService": "c", "stableService": "s"});
            if let Some(r) = routing {
                canary["trafficRouting"] = r;
            }
            if let Some(v) = surge {
                canary["maxSurge"] = v;
            }
            if let Some(v) = unavailable {
                canary["maxUnavailable"] = v;
            }
            if let Some(b) = background {
                canary["analysis"] = b;
            }
            json!({"canary": canary})
        });
    let blue_green = (any::<bool>(), 0i32..600, proptest::option::of(analysis())).prop_map(|(auto, secs, pre)| {
        let mut bg = json!({"activeService": "active", "previewService": "preview", "autoPromotionEnabled": auto, "autoPromotionSeconds": secs});
        if let Some(pre) = pre {
            bg["prePromotionAnalysis"] = pre;
        }
        json!({"blueGreen": bg})
    });
    (prop_oneof![canary, blue_green], 0i32..20, "[a-z][a-z0-9-]{0,10}", proptest::option::of(1i32..10)).prop_map(
        |(strategy, replicas, name, window)| {
            let mut spec = json!({
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "app", "image": format!("{name}:1.0"), "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}}]}},
                "strategy": strategy,
            });
            if let Some(w) = window {
                spec["rollbackWindow"] = json!({"revisions": w});
            }
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": name}, "spec": spec})
        },
    )
}

fn decode_one(bytes: &[u8]) -> Manifest {
    let load = load_bytes("gen.yaml", bytes);
    assert!(
        load.diagnostics
            .iter()
            .all(|d| d.severity != crate::diagnostic::Severity::Error),
        "{:?}",
        load.diagnostics
    );
    assert_eq!(load.manifests.len(), 1);
    load.manifests.into_iter().next().unwrap().manifest
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// parse → serialize → parse gives the same typed Rollout.
    #[test]
    fn rollouts_round_trip(value in rollout()) {
        let first = decode_one(serde_json::to_string_pretty(&value).unwrap().as_bytes());
        let Manifest::Rollout(first) = first else { panic!("not a rollout") };
        let reserialized = serde_json::to_string(&first).unwrap();
        let second = decode_one(reserialized.as_bytes());
        let Manifest::Rollout(second) = second else { panic!("not a rollout") };
        prop_assert_eq!(first, second);
    }

    /// Arbitrary bytes never panic the loader or lint.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let load = load_bytes("fuzz.yaml", &bytes);
        let _ = crate::lint::lint(&load.manifests, crate::lint::Options::default());
    }

    /// Arbitrary YAML-shaped text (keys, indentation, anchors, tags, flow and block collections)
    /// never panics the loader or lint.
    #[test]
    fn arbitrary_yaml_never_panics(tokens in prop::collection::vec(prop_oneof![
        Just("apiVersion: argoproj.io/v1alpha1\n"), Just("kind: Rollout\n"), Just("kind: AnalysisTemplate\n"),
        Just("kind: FleetRollout\n"), Just("apiVersion: flotilla.dev/v1alpha1\n"), Just("spec:\n"),
        Just("  strategy:\n"), Just("    canary:\n"), Just("      steps:\n"), Just("      - setWeight: 10\n"),
        Just("  metrics:\n"), Just("  - name: m\n"), Just("    successCondition: result[0] > 1\n"),
        Just("metadata: {name: x}\n"), Just("---\n"), Just("- "), Just(": "), Just("{"), Just("}"), Just("["),
        Just("]"), Just(", "), Just("&a "), Just("*a"), Just("!!str "), Just("<<: *a\n"), Just("|\n"), Just(">\n"),
        Just("\t"), Just("  "), Just("\n"), Just("'"), Just("\""), Just("#"), Just("? "), Just("%YAML 1.2\n"),
        Just("{{args.x}}"), Just("12"), Just("-1"), Just("null"), Just("true"), Just("1e400"),
    ], 0..60)) {
        let text: String = tokens.concat();
        let load = load_bytes("fuzz.yaml", text.as_bytes());
        let _ = crate::lint::lint(&load.manifests, crate::lint::Options::default());
    }
}

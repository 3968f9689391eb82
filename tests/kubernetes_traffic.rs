//! Traffic routing on Kubernetes, end to end: Rollouts whose canary's weight goes through a
//! Gateway API HTTPRoute and GRPCRoute (`trafficRouting.plugins["argoproj-labs/gatewayAPI"]`,
//! as Argo's users configure the plugin), in clusters of the test environment with Gateway
//! API's own CRDs (from its Go module, so the API server's schema and CEL rules check every
//! write Flotilla makes).
//! The weights are read back from the routes after every step.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::k8s::{
    ANALYSED_STEPS, Cluster, Series, Serve, V1, V2, a_reverter_is_named, argo_hash,
    cluster0_condition, decision_to_weight_zero, exporter, healthy_on_v1, managers, manifests,
    one_at_a_time, regressing_in, set_image, start_env_with, status_of, wait_rollout,
    write_serve_config,
};
use common::runtime;
use flotilla_runtime::demo;
use flotilla_testenv::{TestEnv, gateway_api_crds};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

const CANARY_LABEL: &str = "rollouts.argoproj.io/gatewayapi-canary";

/// A test environment of `clusters` clusters with Argo Rollouts' and Gateway API's CRDs.
fn start_env(clusters: usize) -> TestEnv {
    start_env_with(clusters, gateway_api_crds().expect("Gateway API's CRDs"))
}

/// The manifests of the fleet story with the Rollout's canary routed through HTTPRoute
/// `payments` (Flotilla applies the Rollout).
fn routed_manifests(env: &TestEnv, prometheus: Option<&str>, steps: &str) -> String {
    manifests(env, prometheus, steps).replace(
        "      steps:\n",
        "      trafficRouting:\n        plugins:\n          argoproj-labs/gatewayAPI: {httpRoute: payments, namespace: default}\n      steps:\n",
    )
}

fn routes(cluster: &Cluster) -> Api<DynamicObject> {
    routes_of(cluster, "HTTPRoute")
}

fn routes_of(cluster: &Cluster, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        cluster.client.clone(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "gateway.networking.k8s.io",
            "v1",
            kind,
        )),
    )
}

/// GRPCRoute `payments-grpc` beside the HTTPRoute: the payments gRPC service, all on stable.
fn grpc_route_manifest() -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GRPCRoute",
        "metadata": {"name": "payments-grpc", "namespace": "default"},
        "spec": {
            "parentRefs": [{"name": "shop"}],
            "rules": [
                {"matches": [{"method": {"service": "shop.v1.Payments"}}],
                 "backendRefs": [
                    {"name": "payments-stable", "port": 9090, "weight": 100},
                    {"name": "payments-canary", "port": 9090, "weight": 0}]}
            ]
        }
    })
}

/// The (canary, stable) weights of GRPCRoute `payments-grpc`'s rule.
async fn grpc_weights(cluster: &Cluster) -> (i64, i64) {
    let route = routes_of(cluster, "GRPCRoute")
        .get("payments-grpc")
        .await
        .unwrap();
    weights(&serde_json::to_value(route).unwrap())
}

/// HTTPRoute `payments` as Argo CD would sync it from Git: all traffic on the stable Service,
/// and a second rule (static files) that is not the Rollout's.
fn route_manifest() -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "payments", "namespace": "default"},
        "spec": {
            "parentRefs": [{"name": "shop"}],
            "rules": [
                {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                 "backendRefs": [
                    {"name": "payments-stable", "port": 80, "weight": 100},
                    {"name": "payments-canary", "port": 80, "weight": 0}]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/static"}}],
                 "backendRefs": [{"name": "payments-stable", "port": 80}]}
            ]
        }
    })
}

/// Creates the route `manifest` describes, of its kind.
async fn create(cluster: &Cluster, manifest: Value) {
    let kind = manifest["kind"].as_str().unwrap().to_owned();
    let route: DynamicObject = serde_json::from_value(manifest).unwrap();
    routes_of(cluster, &kind)
        .create(&PostParams::default(), &route)
        .await
        .unwrap_or_else(|e| panic!("the {kind}: {e}"));
}

async fn create_route(cluster: &Cluster) {
    create(cluster, route_manifest()).await;
}

async fn route(cluster: &Cluster) -> Option<Value> {
    routes(cluster)
        .get_opt("payments")
        .await
        .unwrap()
        .map(|r| serde_json::to_value(r).unwrap())
}

/// The (canary, stable) weights of the route's first rule.
fn weights(route: &Value) -> (i64, i64) {
    let refs = route["spec"]["rules"][0]["backendRefs"].as_array().unwrap();
    let of = |name: &str| {
        refs.iter()
            .find(|b| b["name"] == name)
            .and_then(|b| b["weight"].as_i64())
            .unwrap_or(1)
    };
    (of("payments-canary"), of("payments-stable"))
}

/// Three clusters in three waves, each routing through its own HTTPRoute and GRPCRoute: the
/// first completes with the routes' weights read back after every step (34, 67, then all on the
/// new stable); the second regresses and its canary's weight is 0 within one reconcile of the
/// decision; the third is held with its routes untouched.
#[test]
fn gateway_api_weights_follow_the_steps_and_a_regression_zeroes_its_cluster_alone() {
    let _one = one_at_a_time();
    let env = start_env(3);
    let dir = tempfile::tempdir().unwrap();
    let series: Series = Arc::default();
    let exporter = exporter(series.clone());
    let prometheus = demo::Prometheus::start_new(dir.path().join("prometheus"), &exporter)
        .expect("prometheus (apt-get install prometheus)");
    // An HTTPRoute and a GRPCRoute carry the canary's weight together.
    let text = routed_manifests(&env, Some(&prometheus.address()), ANALYSED_STEPS).replace(
        "{httpRoute: payments, namespace: default}",
        "{httpRoute: payments, grpcRoute: payments-grpc, namespace: default}",
    );
    std::fs::write(dir.path().join("manifests.yaml"), &text).unwrap();
    write_serve_config(dir.path());
    let (h1, h2) = (argo_hash(V1), argo_hash(V2));
    regressing_in(&series, &env, 1);
    let runtime = runtime();
    runtime.block_on(async {
        let mut clusters = Vec::new();
        for cluster in env.clusters() {
            let cluster = Cluster::prepare(cluster).await;
            create_route(&cluster).await;
            create(&cluster, grpc_route_manifest()).await;
            clusters.push(cluster);
        }
        let serve = Serve::start(dir.path());
        serve
            .wait_for("1.0 everywhere", Duration::from_secs(120), |v| {
                v.phase == "Completed"
            })
            .await;
        for cluster in &clusters {
            healthy_on_v1(cluster, &serve, Duration::from_secs(60)).await;
            // A first deployment asks no weight of the route: Git's stand.
            assert_eq!(weights(&route(cluster).await.unwrap()), (0, 100));
        }

        set_image(&serve, V2).await;
        // cluster-0: the route read back at every step, beside the Rollout's status.
        let mut seen: Vec<(i64, (i64, i64), bool)> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let rollout = clusters[0].rollout().await.unwrap();
            let route = route(&clusters[0]).await.unwrap();
            let step = rollout["status"]["currentStepIndex"].as_i64().unwrap_or(-1);
            let labelled = route["metadata"]["labels"][CANARY_LABEL] == "in-progress";
            if rollout["status"]["currentPodHash"] == h2.as_str() {
                let now = (step, weights(&route), labelled);
                if seen.last() != Some(&now) {
                    seen.push(now);
                }
                // The status says the weight the route has, once the step is past it.
                if (1..=2).contains(&step) {
                    assert_eq!(weights(&route), (34, 66), "step {step}");
                    assert_eq!(grpc_weights(&clusters[0]).await, (34, 66), "step {step}");
                    assert_eq!(
                        rollout["status"]["canary"]["weights"]["canary"]["weight"],
                        34
                    );
                }
                if rollout["status"]["stableRS"] == h2.as_str()
                    && rollout["status"]["phase"] == "Healthy"
                    && weights(&route) == (0, 100)
                {
                    assert!(
                        !labelled,
                        "the in-progress label outlived the canary: {route}"
                    );
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "cluster-0 did not complete 2.0: seen {seen:?}, {}\n{}",
                rollout["status"],
                serve.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for weight in [(34, 66), (67, 33)] {
            assert!(
                seen.iter()
                    .any(|(_, w, labelled)| *w == weight && *labelled),
                "weight {weight:?} not read back with the label: {seen:?}"
            );
        }
        // The rule that is not the Rollout's is as Git has it.
        let r0 = route(&clusters[0]).await.unwrap();
        let (theirs, git) = (
            &r0["spec"]["rules"][1],
            &route_manifest()["spec"]["rules"][1],
        );
        assert_eq!(theirs["matches"], git["matches"]);
        assert_eq!(theirs["backendRefs"].as_array().unwrap().len(), 1);
        assert_eq!(theirs["backendRefs"][0]["name"], "payments-stable");
        assert_eq!(
            theirs["backendRefs"][0]["weight"], 1,
            "the API server's default, untouched"
        );
        // Every write went through the API server's own validation: the route is v1 and its
        // rules keep the schema's defaults.
        assert_eq!(r0["spec"]["rules"][0]["backendRefs"][0]["kind"], "Service");

        // cluster-1 regresses: its route's canary weight drops to 0 right after the decision.
        let view = decision_to_weight_zero(&serve, "cluster-1", "HTTPRoute", async || {
            weights(&route(&clusters[1]).await.unwrap()).0
        })
        .await;
        assert_eq!(status_of(&view, "cluster-0"), "Validated", "{view:#?}");
        assert_eq!(status_of(&view, "cluster-2"), "Held", "{view:#?}");
        let r1 = wait_rollout(
            &clusters[1],
            &serve,
            "cluster-1 aborted",
            Duration::from_secs(30),
            |r, _| r["status"]["abort"] == true && r["status"]["phase"] == "Degraded",
        )
        .await;
        assert_eq!(r1["status"]["stableRS"], h1.as_str());
        let route1 = route(&clusters[1]).await.unwrap();
        assert_eq!(weights(&route1), (0, 100));
        assert_eq!(grpc_weights(&clusters[1]).await, (0, 100));
        assert!(
            route1["metadata"]["labels"].get(CANARY_LABEL).is_none(),
            "{route1}"
        );
        // The validated cluster keeps the new version, all its traffic on it; the held one's
        // route was never written.
        assert_eq!(
            clusters[0].selector("payments-stable").await.as_deref(),
            Some(h2.as_str())
        );
        assert_eq!(weights(&route(&clusters[0]).await.unwrap()), (0, 100));
        assert_eq!(grpc_weights(&clusters[0]).await, (0, 100));
        assert_eq!(
            grpc_weights(&clusters[2]).await,
            (0, 100),
            "held: as Git has it"
        );
        let route2 = route(&clusters[2]).await.unwrap();
        assert!(
            !managers(&route2).iter().any(|m| m == "flotilla"),
            "{route2}"
        );
        let events = clusters[0].events().await;
        assert!(
            events.iter().any(|e| e
                .starts_with("Normal TrafficWeightUpdated: Traffic weight updated from 0 to 34")),
            "{events:#?}"
        );
        drop(serve);
    });
    drop(prometheus);
}

/// One HTTPRoute, three other writers: one edits another rule all through the canary (neither
/// its changes nor Flotilla's weights are lost), one deletes the route mid-rollout (the cluster
/// is held with a condition naming it, the canary not advanced, until it is back), and one keeps
/// reverting the weights as Argo CD's self-heal would (named in a `TrafficRoutingConflict`
/// after a bounded number of attempts, with its field manager).
#[test]
fn a_route_shared_with_other_writers_keeps_their_changes_and_names_a_fighter() {
    let _one = one_at_a_time();
    let env = start_env(1);
    let dir = tempfile::tempdir().unwrap();
    let steps = "        - setWeight: 10\n        - setHeaderRoute:\n            name: beta\n            match: [{headerName: x-beta, headerValue: {exact: \"1\"}}]\n        - pause: {duration: 1s}\n        - setWeight: 20\n        - pause: {duration: 1s}\n        - setWeight: 30\n        - pause: {duration: 1s}\n        - setWeight: 40\n        - pause: {duration: 2s}\n        - setWeight: 50\n        - pause: {}\n";
    let text = routed_manifests(&env, None, steps).replace(
        "{httpRoute: payments, namespace: default}\n",
        "{httpRoute: payments, namespace: default}\n        managedRoutes: [{name: beta}]\n",
    );
    std::fs::write(dir.path().join("manifests.yaml"), text).unwrap();
    write_serve_config(dir.path());
    let runtime = runtime();
    runtime.block_on(async {
        let cluster = Cluster::prepare(env.cluster(0)).await;
        create_route(&cluster).await;
        let serve = Serve::start(dir.path());
        healthy_on_v1(&cluster, &serve, Duration::from_secs(90)).await;
        set_image(&serve, V2).await;

        // Another writer edits the static rule's path all through the canary (Get, then
        // Update with the resourceVersion read, again on a conflict), as another team's
        // controller would.
        let api = routes(&cluster);
        let mut edits = 0;
        let mut conflicts = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut read = serde_json::to_value(api.get("payments").await.unwrap()).unwrap();
            read["spec"]["rules"][1]["matches"][0]["path"]["value"] =
                json!(format!("/static-{edits}"));
            let object: DynamicObject = serde_json::from_value(read).unwrap();
            let params = PostParams {
                field_manager: Some("static-team".to_owned()),
                ..PostParams::default()
            };
            match api.replace("payments", &params, &object).await {
                Ok(_) => edits += 1,
                Err(kube::Error::Api(status)) if status.code == 409 => conflicts += 1,
                Err(e) => panic!("the other writer: {e}"),
            }
            let rollout = cluster.rollout().await.unwrap();
            if rollout["status"]["currentStepIndex"] == 8 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "step 8 (pause 2s) not reached: {}",
                serve.log()
            );
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        eprintln!("the other writer: {edits} edits, {conflicts} conflicts");
        let read = route(&cluster).await.unwrap();
        assert_eq!(
            read["spec"]["rules"][1]["matches"][0]["path"]["value"],
            format!("/static-{}", edits - 1)
        );
        assert_eq!(weights(&read), (40, 60), "{read}");
        // The header route, as a rule of its own: the weighted rule's match narrowed by the
        // header, to the canary only (the API server's CEL rules accepted its name).
        let beta = read["spec"]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "beta")
            .unwrap_or_else(|| panic!("no header route rule: {read}"))
            .clone();
        assert_eq!(beta["matches"][0]["path"]["value"], "/");
        assert_eq!(
            beta["matches"][0]["headers"][0],
            json!({"type": "Exact", "name": "x-beta", "value": "1"})
        );
        assert_eq!(beta["backendRefs"].as_array().unwrap().len(), 1);
        assert_eq!(beta["backendRefs"][0]["name"], "payments-canary");

        // The route deleted mid-rollout (in step 9's 2 s pause): the next weight cannot be
        // set or verified, so the canary is held at step 10 (setWeight 50) and the cluster's condition names
        // the route; once the route is back, the rollout goes on.
        api.delete("payments", &Default::default()).await.unwrap();
        let condition = cluster0_condition(
            &serve,
            "the missing route named",
            Duration::from_secs(30),
            |c| c.contains("HTTPRoute default/payments not found"),
        )
        .await;
        assert!(
            condition.contains("plugins[argoproj-labs/gatewayAPI].httpRoute"),
            "{condition}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rollout = cluster.rollout().await.unwrap();
        let step = rollout["status"]["currentStepIndex"].as_i64();
        assert!(
            matches!(step, Some(8 | 9)),
            "the canary went on without its route: {}",
            rollout["status"]
        );
        create_route(&cluster).await;
        wait_rollout(
            &cluster,
            &serve,
            "step 11 (after weight 50) once the route is back",
            Duration::from_secs(30),
            |r, _| r["status"]["currentStepIndex"] == 10,
        )
        .await;
        assert_eq!(weights(&route(&cluster).await.unwrap()), (50, 50));

        // A writer that reverts the weights each time (Argo CD's self-heal without
        // ignoreDifferences), by a merge patch of the rules as Git has them.
        a_reverter_is_named(
            &serve,
            &api,
            "HTTPRoute default/payments",
            |read| weights(read) != (0, 100),
            json!({"spec": {"rules": route_manifest()["spec"]["rules"]}}),
        )
        .await;
        assert_eq!(weights(&route(&cluster).await.unwrap()), (0, 100));
        drop(serve);
    });
}

//! Istio routing on Kubernetes, end to end: a Rollout whose canary's weight goes through an
//! Istio VirtualService's http and tcp routes by DestinationRule subsets
//! (`trafficRouting.istio`, as Argo's users configure it), with a header route and a mirror route
//! from `managedRoutes`, in three clusters of one multi-primary mesh (each cluster's subsets
//! select its own `topology.istio.io/cluster`). The test environment's clusters have Istio's
//! own CRDs (from its Go module), so the API server's schema checks every write Flotilla makes.
//! The weights are read back from the VirtualService after every step.

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
use flotilla_testenv::{TestEnv, istio_crds};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

/// A header route and a mirror route first (Argo's order: before any weight); then the
/// analysed canary of the Kubernetes stories ([`ANALYSED_STEPS`]).
const MANAGED_STEPS: &str = r#"        - setHeaderRoute:
            name: beta
            match: [{headerName: x-beta, headerValue: {exact: "1"}}]
        - setMirrorRoute:
            name: shadow
            percentage: 50
            match: [{method: {exact: GET}, path: {prefix: /pay}}]
"#;

/// The index of the last step (the second pause).
const LAST_STEP: i64 = 6;

fn start_env(clusters: usize) -> TestEnv {
    start_env_with(clusters, istio_crds().expect("Istio's CRDs"))
}

/// The fleet story's manifests with the canary routed through VirtualService `payments` by
/// the subsets of DestinationRule `payments`, each cluster in mesh `shop` under its own name.
fn istio_manifests(env: &TestEnv, prometheus: &str) -> String {
    let mut text = manifests(env, Some(prometheus), &[MANAGED_STEPS, ANALYSED_STEPS].concat()).replace(
        "      steps:\n",
        "      trafficRouting:\n        managedRoutes: [{name: beta}, {name: shadow}]\n        istio:\n          virtualService: {name: payments}\n          destinationRule: {name: payments, canarySubsetName: canary, stableSubsetName: stable}\n      steps:\n",
    );
    for cluster in env.clusters() {
        let endpoint = format!("{}\", namespace: default}}", cluster.kubeconfig.display());
        assert!(text.contains(&endpoint), "{text}");
        text = text.replace(
            &endpoint,
            &format!(
                "{}\", namespace: default, istio: {{meshId: shop, cluster: {}}}}}",
                cluster.kubeconfig.display(),
                cluster.name
            ),
        );
    }
    text
}

fn istio_api(cluster: &Cluster, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        cluster.client.clone(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("networking.istio.io", "v1", kind)),
    )
}

/// VirtualService `payments` as Argo CD would sync it from Git: the http route and a tcp route
/// (port 9000) all on the stable subset, and an http route to another service first.
fn virtual_service() -> Value {
    let split = |port: i64| {
        json!([
            {"destination": {"host": "payments", "subset": "stable", "port": {"number": port}}, "weight": 100},
            {"destination": {"host": "payments", "subset": "canary", "port": {"number": port}}, "weight": 0}])
    };
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "payments", "namespace": "default"},
        "spec": {
            "hosts": ["payments"],
            "http": [{"name": "primary", "route": split(80)}],
            "tcp": [{"match": [{"port": 9000}], "route": split(9000)}]
        }
    })
}

/// DestinationRule `payments` as Git has it: the two subsets, no labels yet, and a third that
/// is not the Rollout's.
fn destination_rule() -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "DestinationRule",
        "metadata": {"name": "payments", "namespace": "default"},
        "spec": {
            "host": "payments",
            "subsets": [
                {"name": "canary", "labels": {"app": "payments"}},
                {"name": "stable", "labels": {"app": "payments"}},
                {"name": "legacy", "labels": {"version": "0.9"}}
            ]
        }
    })
}

async fn create(cluster: &Cluster, manifest: Value) {
    let kind = manifest["kind"].as_str().unwrap().to_owned();
    let object: DynamicObject = serde_json::from_value(manifest).unwrap();
    istio_api(cluster, &kind)
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("the {kind}: {e}"));
}

async fn read(cluster: &Cluster, kind: &str) -> Value {
    serde_json::to_value(istio_api(cluster, kind).get("payments").await.unwrap()).unwrap()
}

/// The (canary, stable) weights of a route's destinations.
fn split(route: &Value) -> (i64, i64) {
    let of = |subset: &str| {
        route["route"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["destination"]["subset"] == subset)
            .and_then(|d| d["weight"].as_i64())
            .unwrap_or(0)
    };
    (of("canary"), of("stable"))
}

/// The (canary, stable) weights of the weighted http route and of the tls or tcp route.
type RouteWeights = ((i64, i64), (i64, i64));

/// The weighted http route (`primary`) and the tcp route's weights.
fn weights(vs: &Value) -> RouteWeights {
    let primary = vs["spec"]["http"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "primary")
        .unwrap_or_else(|| panic!("no primary route: {vs}"));
    (split(primary), split(&vs["spec"]["tcp"][0]))
}

fn http_names(vs: &Value) -> Vec<String> {
    vs["spec"]["http"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The labels of the DestinationRule's subset `name`.
fn subset(dr: &Value, name: &str) -> Value {
    dr["spec"]["subsets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .map(|s| s["labels"].clone())
        .unwrap_or_default()
}

/// Three clusters of one mesh in three waves, each routing through its own VirtualService by
/// its DestinationRule's subsets: the first completes with the weights read back after every
/// step (header and mirror routes first while the canary runs, 34 then 67 on both the http and
/// the tcp route, then all on the new stable and the managed routes gone), each subset selecting
/// its revision's hash and its own cluster; the second regresses and its canary's weight is 0
/// within one reconcile of the decision; the third is held with its objects untouched.
#[test]
fn istio_subsets_follow_the_steps_per_cluster_and_a_regression_zeroes_its_cluster_alone() {
    let _one = one_at_a_time();
    let env = start_env(3);
    let dir = tempfile::tempdir().unwrap();
    let series: Series = Arc::default();
    let exporter = exporter(series.clone());
    let prometheus = demo::Prometheus::start_new(dir.path().join("prometheus"), &exporter)
        .expect("prometheus (apt-get install prometheus)");
    let text = istio_manifests(&env, &prometheus.address());
    std::fs::write(dir.path().join("manifests.yaml"), &text).unwrap();
    write_serve_config(dir.path());
    let (h1, h2) = (argo_hash(V1), argo_hash(V2));
    regressing_in(&series, &env, 1);
    let runtime = runtime();
    runtime.block_on(async {
        let mut clusters = Vec::new();
        for cluster in env.clusters() {
            let cluster = Cluster::prepare(cluster).await;
            create(&cluster, destination_rule()).await;
            create(&cluster, virtual_service()).await;
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
            // A first deployment asks no weight: Git's stand.
            assert_eq!(weights(&read(cluster, "VirtualService").await), ((0, 100), (0, 100)));
        }

        set_image(&serve, V2).await;
        // cluster-0: the VirtualService and DestinationRule read back at every step.
        let mut seen: Vec<(i64, RouteWeights, Vec<String>)> = Vec::new();
        // The VirtualService's versions during the analysis step (a few seconds, nothing asked
        // of it changing): one, or Flotilla writes it when it already holds what is asked.
        let mut versions = std::collections::BTreeSet::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let rollout = clusters[0].rollout().await.unwrap();
            let vs = read(&clusters[0], "VirtualService").await;
            let dr = read(&clusters[0], "DestinationRule").await;
            let step = rollout["status"]["currentStepIndex"].as_i64().unwrap_or(-1);
            if rollout["status"]["currentPodHash"] == h2.as_str() {
                let now = (step, weights(&vs), http_names(&vs));
                if seen.last() != Some(&now) {
                    seen.push(now);
                }
                if step == 4 {
                    versions.insert(vs["metadata"]["resourceVersion"].as_str().unwrap().to_owned());
                }
                if (3..=4).contains(&step) {
                    assert_eq!(weights(&vs), ((34, 66), (34, 66)), "step {step}: {vs}");
                    assert_eq!(http_names(&vs), ["beta", "shadow", "primary"], "{vs}");
                    // Each subset selects its revision, in this cluster only.
                    assert_eq!(
                        subset(&dr, "canary"),
                        json!({"app": "payments", "rollouts-pod-template-hash": h2, "topology.istio.io/cluster": "cluster-0"})
                    );
                    assert_eq!(
                        subset(&dr, "stable"),
                        json!({"app": "payments", "rollouts-pod-template-hash": h1, "topology.istio.io/cluster": "cluster-0"})
                    );
                    assert_eq!(subset(&dr, "legacy"), json!({"version": "0.9"}));
                    let http = vs["spec"]["http"].as_array().unwrap();
                    assert_eq!(http[0]["match"][0]["headers"]["x-beta"]["exact"], "1");
                    assert_eq!(
                        http[0]["route"],
                        json!([{"destination": {"host": "payments", "subset": "canary", "port": {"number": 80}}, "weight": 100}])
                    );
                    assert_eq!(http[1]["match"][0]["method"]["exact"], "GET");
                    assert_eq!(http[1]["match"][0]["uri"]["prefix"], "/pay");
                    assert_eq!(http[1]["mirror"]["subset"], "canary");
                    assert_eq!(http[1]["mirrorPercentage"]["value"], 50.0);
                    assert_eq!(http[1]["route"], http[2]["route"]);
                    assert_eq!(
                        rollout["status"]["canary"]["weights"]["canary"]["weight"],
                        34
                    );
                }
                if rollout["status"]["stableRS"] == h2.as_str()
                    && rollout["status"]["phase"] == "Healthy"
                    && weights(&vs) == ((0, 100), (0, 100))
                    && http_names(&vs) == ["primary"]
                {
                    assert_eq!(subset(&dr, "stable")["rollouts-pod-template-hash"], h2.as_str());
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
        eprintln!("cluster-0, (step, (http, tcp) weights, http routes) as read: {seen:?}");
        assert!(
            seen.iter().any(|(step, _, _)| (3..=4).contains(step)),
            "the analysed steps were never read: {seen:?}"
        );
        assert_eq!(
            versions.len(),
            1,
            "the VirtualService was written during the analysis step: {versions:?}"
        );
        for weight in [(34, 66), (67, 33)] {
            assert!(
                seen.iter().any(|(_, w, _)| *w == (weight, weight)),
                "weight {weight:?} not read back on both routes: {seen:?}"
            );
        }
        assert!(seen.iter().all(|(step, _, _)| *step <= LAST_STEP + 1), "{seen:?}");

        // cluster-1 regresses: its canary's weight drops to 0 right after the decision.
        let view = decision_to_weight_zero(&serve, "cluster-1", "VirtualService", async || {
            weights(&read(&clusters[1], "VirtualService").await).0.0
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
        let vs1 = read(&clusters[1], "VirtualService").await;
        assert_eq!(weights(&vs1), ((0, 100), (0, 100)), "{vs1}");
        assert_eq!(http_names(&vs1), ["primary"], "aborted: the managed routes go");
        let dr1 = read(&clusters[1], "DestinationRule").await;
        assert_eq!(
            subset(&dr1, "stable")["topology.istio.io/cluster"],
            "cluster-1"
        );
        // The validated cluster keeps the new version; the held one's objects were never
        // written.
        assert_eq!(
            weights(&read(&clusters[0], "VirtualService").await),
            ((0, 100), (0, 100))
        );
        let vs2 = read(&clusters[2], "VirtualService").await;
        assert!(
            !managers(&vs2).iter().any(|m| m == "flotilla"),
            "held cluster-2's VirtualService: {vs2}"
        );
        // Its subsets select the stable revision, as since its first deployment.
        let dr2 = read(&clusters[2], "DestinationRule").await;
        for name in ["canary", "stable"] {
            assert_eq!(subset(&dr2, name)["rollouts-pod-template-hash"], h1.as_str(), "{dr2}");
        }
        let events = clusters[0].events().await;
        assert!(
            events.iter().any(|e| e
                .starts_with("Normal TrafficWeightUpdated: Traffic weight updated from 0 to 34")),
            "{events:#?}"
        );
        assert!(
            events
                .iter()
                .any(|e| e.contains("DestinationRule payments subset updated")),
            "{events:#?}"
        );
        drop(serve);
    });
    drop(prometheus);
}

/// A host-based VirtualService (canaryService and stableService as destinations, no
/// DestinationRule) with an http route that is not the Rollout's, the named one that is, and a
/// tls route: each weighted one gets the weights, the other is as Git has it.
fn host_based_virtual_service() -> Value {
    let split = |port: i64| {
        json!([
            {"destination": {"host": "payments-stable", "port": {"number": port}}, "weight": 100},
            {"destination": {"host": "payments-canary.default.svc.cluster.local", "port": {"number": port}}, "weight": 0}])
    };
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "payments", "namespace": "default"},
        "spec": {
            "hosts": ["payments", "payments.example"],
            "http": [
                {"name": "static", "match": [{"uri": {"prefix": "/static"}}],
                 "route": [{"destination": {"host": "cdn"}}]},
                {"name": "primary", "route": split(80)}],
            "tls": [{"match": [{"port": 443, "sniHosts": ["payments.example"]}], "route": split(443)}]
        }
    })
}

/// The weights of http route `primary` and of the tls route.
fn host_weights(vs: &Value) -> RouteWeights {
    let of = |route: &Value| {
        let weight = |host: &str| {
            route["route"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["destination"]["host"].as_str().unwrap().starts_with(host))
                .and_then(|d| d["weight"].as_i64())
                .unwrap_or(0)
        };
        (weight("payments-canary"), weight("payments-stable"))
    };
    (of(&vs["spec"]["http"][1]), of(&vs["spec"]["tls"][0]))
}

/// One cluster, host-based routing through the named http route and a tls route of a shared
/// VirtualService: the weights reach both and nothing else; the VirtualService deleted
/// mid-rollout holds the canary with a condition naming it until it is back; a writer that
/// keeps reverting the weights (Argo CD's self-heal) is named in a `TrafficRoutingConflict`
/// after a bounded number of attempts, with its field manager.
#[test]
fn istio_host_based_weights_reach_the_named_routes_and_a_fighter_is_named() {
    let _one = one_at_a_time();
    let env = start_env(1);
    let dir = tempfile::tempdir().unwrap();
    let steps = "        - setWeight: 20\n        - pause: {duration: 1s}\n        - setWeight: 40\n        - pause: {duration: 2s}\n        - setWeight: 50\n        - pause: {}\n";
    let text = manifests(&env, None, steps).replace(
        "      steps:\n",
        "      trafficRouting:\n        istio:\n          virtualServices:\n            - name: payments.default\n              routes: [primary]\n              tlsRoutes: [{port: 443, sniHosts: [payments.example]}]\n      steps:\n",
    );
    std::fs::write(dir.path().join("manifests.yaml"), text).unwrap();
    write_serve_config(dir.path());
    let runtime = runtime();
    runtime.block_on(async {
        let cluster = Cluster::prepare(env.cluster(0)).await;
        create(&cluster, host_based_virtual_service()).await;
        let serve = Serve::start(dir.path());
        healthy_on_v1(&cluster, &serve, Duration::from_secs(90)).await;
        set_image(&serve, V2).await;
        wait_rollout(
            &cluster,
            &serve,
            "step 3 (the 2 s pause after weight 40)",
            Duration::from_secs(60),
            |r, _| r["status"]["currentStepIndex"] == 3,
        )
        .await;
        let vs = read(&cluster, "VirtualService").await;
        assert_eq!(host_weights(&vs), ((40, 60), (40, 60)), "{vs}");
        assert_eq!(
            vs["spec"]["http"][0],
            host_based_virtual_service()["spec"]["http"][0],
            "the route that is not the Rollout's"
        );

        // Deleted mid-rollout: the next weight cannot be set, the canary is held.
        let api = istio_api(&cluster, "VirtualService");
        api.delete("payments", &Default::default()).await.unwrap();
        let condition = cluster0_condition(
            &serve,
            "the missing VirtualService named",
            Duration::from_secs(30),
            |c| c.contains("VirtualService default/payments not found"),
        )
        .await;
        assert!(
            condition.contains("trafficRouting.istio.virtualServices[0]"),
            "{condition}"
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        let rollout = cluster.rollout().await.unwrap();
        assert!(
            matches!(rollout["status"]["currentStepIndex"].as_i64(), Some(3 | 4)),
            "the canary went on without its VirtualService: {}",
            rollout["status"]
        );
        create(&cluster, host_based_virtual_service()).await;
        wait_rollout(
            &cluster,
            &serve,
            "step 5 (after weight 50) once the VirtualService is back",
            Duration::from_secs(30),
            |r, _| r["status"]["currentStepIndex"] == 5,
        )
        .await;
        assert_eq!(
            host_weights(&read(&cluster, "VirtualService").await),
            ((50, 50), (50, 50))
        );

        // A writer that reverts the weights each time, by a merge patch of the routes as Git
        // has them.
        let git = host_based_virtual_service();
        let condition = a_reverter_is_named(
            &serve,
            &api,
            "VirtualService default/payments",
            |read| host_weights(read) != ((0, 100), (0, 100)),
            json!({"spec": {"http": git["spec"]["http"], "tls": git["spec"]["tls"]}}),
        )
        .await;
        assert!(
            condition.contains(".spec.http[].route[].weight"),
            "{condition}"
        );
        drop(serve);
    });
}

//! The reference run of the incumbent: Argo Rollouts' own controller, started against one test
//! cluster with Argo's CRDs, drives a plain canary Rollout (no traffic routing) through its
//! steps on kwok's fake nodes, and `kubectl-argo-rollouts get rollout` prints it.

use std::time::{Duration, Instant};

use flotilla_testenv::{Options, Process, TestEnv, argo_rollouts_crds};
use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::Api;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

const STEPS: usize = 4;

fn rollout(image: &str) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "demo"}},
            "template": {
                "metadata": {"labels": {"app": "demo"}},
                "spec": {"containers": [{"name": "app", "image": image}]}
            },
            "strategy": {"canary": {"steps": [
                {"setWeight": 33},
                {"pause": {}},
                {"setWeight": 66},
                {"pause": {"duration": "2s"}}
            ]}}
        }
    })
}

fn field<'a>(obj: &'a DynamicObject, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(&obj.data, |v, k| v.get(k))
}

/// Polls the Rollout until `done` holds, recording every (step index, phase) it passes.
async fn wait_for(
    rollouts: &Api<DynamicObject>,
    controller: &mut Process,
    seen: &mut Vec<(i64, String)>,
    what: &str,
    done: impl Fn(&DynamicObject) -> bool,
) -> DynamicObject {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = rollouts.get("demo").await.expect("reading the Rollout");
        let state = (
            field(&r, &["status", "currentStepIndex"])
                .and_then(Value::as_i64)
                .unwrap_or(-1),
            field(&r, &["status", "phase"])
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        );
        if seen.last() != Some(&state) {
            eprintln!("rollout demo: step {} phase {:?}", state.0, state.1);
            seen.push(state);
        }
        if done(&r) {
            return r;
        }
        assert!(
            controller.running(),
            "rollouts-controller exited:\n{}",
            controller.log()
        );
        assert!(
            Instant::now() < deadline,
            "waiting for {what}: status {}\ncontroller log:\n{}",
            field(&r, &["status"]).cloned().unwrap_or(Value::Null),
            controller.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn phase(r: &DynamicObject) -> &str {
    field(r, &["status", "phase"])
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn step(r: &DynamicObject) -> i64 {
    field(r, &["status", "currentStepIndex"])
        .and_then(Value::as_i64)
        .unwrap_or(-1)
}

fn hash<'a>(r: &'a DynamicObject, key: &str) -> &'a str {
    field(r, &["status", key])
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The pod-template hash Flotilla computes for the Rollout's template and collision count.
fn flotilla_hash(r: &DynamicObject) -> String {
    let collisions = field(r, &["status", "collisionCount"])
        .and_then(Value::as_i64)
        .map(|n| n as i32);
    flotilla_kube::pod_template_hash(&r.data["spec"]["template"], collisions)
        .expect("a template Go could decode")
}

#[tokio::test(flavor = "current_thread")]
async fn argo_controller_drives_a_plain_canary_through_its_steps() {
    let options = Options {
        clusters: 1,
        crds: argo_rollouts_crds().expect("Argo Rollouts' CRDs from the module cache"),
        ..Options::default()
    };
    let env = TestEnv::start(&options).expect("the environment starts");
    let cluster = env.cluster(0);
    let kubeconfig = cluster
        .kubeconfig
        .to_str()
        .expect("a UTF-8 path")
        .to_string();
    let mut controller = env
        .spawn_argo_controller(0)
        .expect("rollouts-controller starts");

    let client = cluster.client().await.expect("a kube client");
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout"),
        "rollouts",
    );
    let rollouts: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let initial: DynamicObject =
        serde_json::from_value(rollout("registry.invalid/demo:1")).expect("a Rollout");
    rollouts
        .create(&PostParams::default(), &initial)
        .await
        .expect("creating the Rollout");
    let mut seen = Vec::new();

    // The first revision goes straight to Healthy, all steps done.
    let r = wait_for(
        &rollouts,
        &mut controller,
        &mut seen,
        "the first revision Healthy",
        |r| phase(r) == "Healthy" && step(r) == STEPS as i64,
    )
    .await;
    let stable = hash(&r, "stableRS").to_string();
    assert!(!stable.is_empty(), "a stable ReplicaSet: {:?}", r.data);
    // Flotilla names ReplicaSets as Argo's controller does: the same hash of the template as
    // the API server returns it.
    assert_eq!(
        stable,
        flotilla_hash(&r),
        "the first revision's pod-template hash"
    );

    // A new image starts a canary: setWeight 33 (1 of 3 Pods), then an indefinite pause.
    let before_update = seen.len();
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "registry.invalid/demo:2"}
    ]}}}});
    rollouts
        .patch("demo", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("updating the image");
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let r = wait_for(
        &rollouts,
        &mut controller,
        &mut seen,
        "the canary paused at step 1",
        |r| phase(r) == "Paused" && step(r) == 1,
    )
    .await;
    let canary = hash(&r, "currentPodHash").to_string();
    assert_ne!(canary, stable, "the canary has its own ReplicaSet");
    assert_eq!(canary, flotilla_hash(&r), "the canary's pod-template hash");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = replica_sets
            .list(&ListParams::default().labels(&format!("rollouts-pod-template-hash={canary}")))
            .await
            .expect("listing ReplicaSets");
        let ready = list
            .items
            .iter()
            .filter_map(|rs| rs.status.as_ref()?.ready_replicas)
            .sum::<i32>();
        if ready == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "canary ReplicaSet ready {ready}, wanted 1"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let get = |env: &TestEnv| {
        env.run(
            "kubectl-argo-rollouts",
            &[
                "get",
                "rollout",
                "demo",
                "-n",
                "default",
                "--kubeconfig",
                &kubeconfig,
            ],
        )
        .expect("kubectl-argo-rollouts get rollout")
    };
    let paused = get(&env);
    eprintln!("{paused}");
    assert!(
        paused.contains("demo") && paused.contains("Paused"),
        "{paused}"
    );
    assert!(paused.contains("1/4"), "step 1/4 shown: {paused}");

    // The plugin promotes; the controller runs setWeight 66 and the timed pause to the end.
    env.run(
        "kubectl-argo-rollouts",
        &[
            "promote",
            "demo",
            "-n",
            "default",
            "--kubeconfig",
            &kubeconfig,
        ],
    )
    .expect("kubectl-argo-rollouts promote");
    let r = wait_for(
        &rollouts,
        &mut controller,
        &mut seen,
        "the canary promoted to Healthy",
        |r| phase(r) == "Healthy" && step(r) == STEPS as i64 && hash(r, "stableRS") == canary,
    )
    .await;
    assert_eq!(hash(&r, "currentPodHash"), canary);
    // After the update the step index only moves forward, through the pause at step 1.
    let steps: Vec<i64> = seen[before_update..].iter().map(|(s, _)| *s).collect();
    assert!(
        steps.windows(2).all(|w| w[0] <= w[1]),
        "steps move forward: {seen:?}"
    );
    assert!(
        steps.first() <= Some(&1) && steps.contains(&1) && steps.last() == Some(&(STEPS as i64)),
        "the canary went through step 1 to the end: {seen:?}"
    );

    let healthy = get(&env);
    eprintln!("{healthy}");
    assert!(
        healthy.contains("Healthy") && healthy.contains("4/4"),
        "{healthy}"
    );
    assert!(healthy.contains("registry.invalid/demo:2"), "{healthy}");
}

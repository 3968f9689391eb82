//! Kubernetes clusters in a Fleet, end to end: three real API servers (the test environment of
//! `flotilla-testenv`: kube-apiserver, etcd, controller-manager, scheduler, and kwok as the fake
//! kubelet) in three waves, `flotilla serve` driving an Argo-labelled Rollout in each with its
//! ReplicaSets, Services and status, judged by a real Prometheus scraping an exporter this test
//! controls (the canary's and the stable's series by `rollouts_pod_template_hash`).

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::k8s::*;
use common::{flotilla, runtime};
use flotilla_runtime::controller::record::OperatorCommand;
use flotilla_runtime::demo;
use flotilla_testenv::{Options, TestEnv, argo_rollouts_crds};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{Value, json};

const CLUSTERS: usize = 3;

/// Who owns the Rollout's spec in the story's clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Argo CD (played by the test, with its field manager): `rolloutSource: cluster`.
    Cluster,
    /// Flotilla: `rolloutSource: flotilla`.
    Flotilla,
}

/// The Rollout of the manifests with `image`, as Argo CD applies it to a cluster: labelled for
/// Flotilla, server-side applied by Argo CD's field manager.
async fn argocd_apply(cluster: &Cluster, manifests: &str, image: &str) {
    let load = flotilla_core::manifest::load_bytes("manifests.yaml", manifests.as_bytes());
    let rollout = load
        .manifests
        .iter()
        .find_map(|m| match &m.manifest {
            flotilla_core::spec::Manifest::Rollout(r) => Some(r.clone()),
            _ => None,
        })
        .expect("the manifests hold the Rollout");
    let mut rollout = serde_json::to_value(&rollout).unwrap();
    rollout["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
    rollout["metadata"]["namespace"] = json!("default");
    rollout["metadata"]["labels"] = json!({
        "argo-rollouts.argoproj.io/controller-instance-id": "flotilla",
        "app.kubernetes.io/instance": "payments",
    });
    cluster
        .rollouts
        .patch(
            "payments",
            &kube::api::PatchParams::apply("argocd-controller").force(),
            &kube::api::Patch::Apply(&rollout),
        )
        .await
        .expect("Argo CD's apply");
}

#[test]
fn three_clusters_in_three_waves_with_argo_cd_owning_the_spec() {
    regression_story(Source::Cluster);
}

#[test]
fn three_clusters_in_three_waves_with_flotilla_applying_the_spec() {
    regression_story(Source::Flotilla);
}

/// Three clusters in three waves: a healthy release reaches the first, a regression in the
/// second aborts it alone (its metrics from a real Prometheus), the third is held on its stable
/// revision; ReplicaSets, Services and the Rollout status read back from each API server.
fn regression_story(source: Source) {
    let _one = one_at_a_time();
    let env = start_env(CLUSTERS);
    let dir = tempfile::tempdir().unwrap();
    let series: Series = Arc::default();
    let exporter = exporter(series.clone());
    let prometheus = demo::Prometheus::start_new(dir.path().join("prometheus"), &exporter)
        .expect("prometheus (apt-get install prometheus)");
    let mut text = manifests(&env, Some(&prometheus.address()), ANALYSED_STEPS);
    if source == Source::Cluster {
        // The default: the spec is Argo CD's.
        text = text.replace("  rolloutSource: flotilla\n", "");
    }
    std::fs::write(dir.path().join("manifests.yaml"), &text).unwrap();
    write_serve_config(dir.path());
    let (h1, h2) = (argo_hash(V1), argo_hash(V2));
    regressing_in(&series, &env, 1);
    let runtime = runtime();
    runtime.block_on(async {
        let mut clusters = Vec::new();
        for cluster in env.clusters() {
            clusters.push(Cluster::prepare(cluster).await);
        }
        if source == Source::Cluster {
            for cluster in &clusters {
                argocd_apply(cluster, &text, V1).await;
            }
        }

        // First start: the clusters run nothing, so 1.0 is deployed directly everywhere.
        let serve = Serve::start(dir.path());
        serve
            .wait_for("1.0 everywhere", Duration::from_secs(120), |v| {
                v.phase == "Completed"
            })
            .await;
        for cluster in &clusters {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let sets = cluster.replica_sets().await;
                let rollout = cluster.rollout().await.unwrap();
                let ready = sets.get(&h1) == Some(&(3, 3))
                    && rollout["status"]["stableRS"] == h1.as_str()
                    && rollout["status"]["phase"] == "Healthy"
                    && rollout["status"]["availableReplicas"] == 3;
                if ready {
                    assert_eq!(
                        rollout["metadata"]["labels"]["argo-rollouts.argoproj.io/controller-instance-id"],
                        "flotilla"
                    );
                    assert_eq!(
                        rollout["status"]["observedGeneration"],
                        rollout["metadata"]["generation"].as_i64().unwrap().to_string()
                    );
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{}: 1.0 not settled: {sets:?} {}\n{}",
                    cluster.name,
                    rollout["status"],
                    serve.log()
                );
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            assert_eq!(cluster.selector("payments-stable").await.as_deref(), Some(h1.as_str()));
            assert_eq!(cluster.selector("payments-canary").await.as_deref(), Some(h1.as_str()));
        }

        // The release: 2.0 through the waves. cluster-0's objects are read back at every step.
        match source {
            Source::Flotilla => {
                set_image(&serve, V2).await;
            }
            Source::Cluster => {
                // Argo CD syncs cluster-0 first: the specs disagree, nothing starts, and the
                // fleet names who holds what.
                argocd_apply(&clusters[0], &text, V2).await;
                let view = serve
                    .wait_for("the disagreement named", Duration::from_secs(30), |v| {
                        v.errors.iter().any(|e| e.contains("disagree"))
                    })
                    .await;
                let said = view.errors.join("\n");
                assert!(
                    said.contains(&format!("cluster-0 holds {V2}"))
                        && said.contains(&format!("cluster-1, cluster-2 hold {V1}")),
                    "{said}"
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
                for cluster in &clusters {
                    assert!(
                        !cluster.replica_sets().await.contains_key(&h2),
                        "{}: a revision started while the specs disagree",
                        cluster.name
                    );
                }
                for cluster in &clusters[1..] {
                    argocd_apply(cluster, &text, V2).await;
                }
                // cluster-2 is held by its wave (3), with Flotilla's pause; a promote issued
                // there with Argo's plugin is refused, and an Event on its Rollout says why.
                wait_rollout(
                    &clusters[2],
                    &serve,
                    "the FleetWave pause",
                    Duration::from_secs(30),
                    |r, _| r["status"]["pauseConditions"][0]["reason"] == "FleetWave",
                )
                .await;
                env.run(
                    "kubectl-argo-rollouts",
                    &["promote", "payments", "-n", "default", "--kubeconfig", &clusters[2].kubeconfig],
                )
                .expect("kubectl-argo-rollouts promote");
            }
        }
        let mut steps_seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let rollout = clusters[0].rollout().await.unwrap();
            let step = rollout["status"]["currentStepIndex"].as_i64();
            let sets = clusters[0].replica_sets().await;
            if rollout["status"]["currentPodHash"] == h2.as_str() {
                if steps_seen.last() != Some(&step) {
                    steps_seen.push(step);
                    // While the canary runs, both revisions run and each Service selects its own.
                    if step.is_some_and(|s| (1..5).contains(&s)) {
                        let canary = sets.get(&h2).copied().unwrap_or_default();
                        let stable = sets.get(&h1).copied().unwrap_or_default();
                        assert!(canary.0 >= 1 && stable.0 >= 1, "step {step:?}: {sets:?}");
                        assert_eq!(rollout["status"]["stableRS"], h1.as_str());
                    }
                }
                if rollout["status"]["stableRS"] == h2.as_str() && rollout["status"]["phase"] == "Healthy" {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "cluster-0 did not complete 2.0: steps {steps_seen:?}, {}\n{}",
                rollout["status"],
                serve.log()
            );
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        assert!(
            steps_seen.len() >= 3,
            "cluster-0's steps were read back one by one: {steps_seen:?}"
        );

        let view = serve
            .wait_for("cluster-1 rolled back", Duration::from_secs(120), |v| {
                status_of(v, "cluster-1") == "RolledBack"
                    && matches!(v.phase.as_str(), "Halted" | "Aborted")
            })
            .await;
        assert_eq!(status_of(&view, "cluster-0"), "Validated", "{view:#?}");
        assert_eq!(status_of(&view, "cluster-2"), "Held", "{view:#?}");

        // What each cluster runs, read back from its API server.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let c0 = clusters[0].replica_sets().await;
            let c1 = clusters[1].replica_sets().await;
            let c2 = clusters[2].replica_sets().await;
            let r1 = clusters[1].rollout().await.unwrap();
            let settled = c0.get(&h2) == Some(&(3, 3))
                && c0.get(&h1).is_some_and(|s| s.0 == 0)
                && c1.get(&h1) == Some(&(3, 3))
                && c1.get(&h2).is_some_and(|s| s.0 == 0)
                && c2.get(&h1) == Some(&(3, 3))
                && !c2.contains_key(&h2)
                && r1["status"]["abort"] == true
                && r1["status"]["phase"] == "Degraded";
            if settled {
                assert_eq!(r1["status"]["stableRS"], h1.as_str());
                let r2 = clusters[2].rollout().await.unwrap();
                match source {
                    // Argo CD synced 2.0 there too: held by its wave, with Flotilla's pause.
                    Source::Cluster => {
                        assert_eq!(r2["status"]["phase"], "Paused", "{}", r2["status"]);
                        assert_eq!(
                            r2["status"]["pauseConditions"][0]["reason"], "FleetWave",
                            "{}",
                            r2["status"]
                        );
                        assert_eq!(r2["spec"]["template"]["spec"]["containers"][0]["image"], V2);
                        // The aborted cluster keeps Argo CD's spec: Flotilla never wrote it.
                        assert_eq!(r1["spec"]["template"]["spec"]["containers"][0]["image"], V2);
                        let ours: Vec<&Value> = r1["metadata"]["managedFields"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .filter(|f| f["manager"] == "flotilla")
                            .collect();
                        assert!(
                            ours.iter().all(|f| f["fieldsV1"].get("f:spec").is_none()),
                            "Flotilla wrote the spec Argo CD owns: {ours:?}"
                        );
                    }
                    Source::Flotilla => {
                        assert_eq!(r2["status"]["phase"], "Healthy", "{}", r2["status"]);
                        assert_eq!(r2["spec"]["template"]["spec"]["containers"][0]["image"], V1);
                    }
                }
                let progressing = r1["status"]["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["type"] == "Progressing")
                    .cloned()
                    .unwrap();
                assert_eq!(progressing["reason"], "RolloutAborted", "{progressing}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "clusters not as decided: c0 {c0:?} c1 {c1:?} c2 {c2:?} r1 {}\n{}",
                r1["status"],
                serve.log()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // Settled clusters cost their API servers no reads: Flotilla polls its watches' copies
        // (the test reads nothing meanwhile).
        let before = clusters[0].reads_served().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = clusters[0].reads_served().await;
        assert_eq!(
            after, before,
            "Rollout GETs and ReplicaSet LISTs while cluster-0 is settled (a poll each 300 ms tick)"
        );
        // The analysis as Argo's tools read it: AnalysisRun objects with their measurements,
        // and the plugin's tree.
        for (cluster, phase) in [(&clusters[0], "Successful"), (&clusters[1], "Failed")] {
            let runs = cluster.step_runs(&h2).await;
            assert_eq!(runs.len(), 1, "{}: {runs:?}", cluster.name);
            let run = &runs[0];
            assert_eq!(run["status"]["phase"], phase, "{}: {}", cluster.name, run["status"]);
            assert_eq!(run["metadata"]["name"], format!("payments-{h2}-2-2"));
            assert_eq!(run["metadata"]["labels"]["argo-rollouts.argoproj.io/controller-instance-id"], "flotilla");
            assert_eq!(run["metadata"]["ownerReferences"][0]["name"], "payments");
            let metric = &run["status"]["metricResults"][0];
            assert_eq!(metric["name"], "error-rate");
            assert!(
                !metric["measurements"].as_array().unwrap().is_empty()
                    && metric["measurements"][0]["value"].is_string(),
                "{metric}"
            );
            assert!(run["spec"]["metrics"][0]["provider"]["prometheus"]["query"].is_string());
        }
        let kubeconfig = env.cluster(0).kubeconfig.display().to_string();
        let shown = env
            .run(
                "kubectl-argo-rollouts",
                &["get", "rollout", "payments", "-n", "default", "--kubeconfig", &kubeconfig],
            )
            .expect("kubectl-argo-rollouts get rollout");
        assert!(
            shown.contains(&format!("payments-{h2}-2-2")) && shown.contains("AnalysisRun"),
            "{shown}"
        );
        // Old AnalysisRuns were looked for after each new one (none is old enough to go here),
        // and nothing refused it (a slow API server only postpones it, at debug level).
        assert!(
            !serve
                .log()
                .lines()
                .any(|l| l.contains("WARN") && l.contains("cannot delete old AnalysisRuns")),
            "{}",
            serve.log()
        );
        // The decisions as Events on each Rollout, with Argo's reasons and messages.
        let e0 = clusters[0]
            .wait_event("Normal RolloutCompleted", Duration::from_secs(10))
            .await;
        for expected in [
            format!("Normal NewReplicaSetCreated: Created ReplicaSet payments-{h2} (revision 2)"),
            format!("Normal ScalingReplicaSet: Scaled up ReplicaSet payments-{h2} (revision 2) from 0 to 1"),
            "Normal RolloutStepCompleted: Rollout step 1/5 completed (setWeight: 34)".to_owned(),
            "Normal RolloutStepCompleted: Rollout step 2/5 completed (pause: 1s)".to_owned(),
            "Normal RolloutStepCompleted: Rollout step 3/5 completed (analysis)".to_owned(),
            format!("Normal AnalysisRunSuccessful: Step Analysis Run 'payments-{h2}-2-2' Status New: 'Successful'"),
            format!("Normal RolloutCompleted: Rollout completed update to revision 2 ({h2}): Completed all 5 canary steps"),
        ] {
            assert!(e0.iter().any(|e| e.starts_with(&expected)), "{expected:?} not in {e0:#?}");
        }
        let e1 = clusters[1]
            .wait_event("Warning RolloutAborted", Duration::from_secs(10))
            .await;
        assert!(
            e1.iter().any(|e| e.starts_with(&format!("Warning AnalysisRunFailed: Step Analysis Run 'payments-{h2}-2-2' Status New: 'Failed'"))),
            "{e1:#?}"
        );
        if source == Source::Cluster {
            let e2 = clusters[2]
                .wait_event("Warning FleetCommandRefused", Duration::from_secs(10))
                .await;
            assert!(
                e2.iter().any(|e| e.starts_with("Normal RolloutPaused: Rollout is paused (FleetWave)")),
                "{e2:#?}"
            );
            let refused = e2.iter().find(|e| e.contains("FleetCommandRefused")).unwrap();
            assert!(
                refused.contains("promote cluster-2 (issued in cluster cluster-2): refused: cluster-2 is held by its wave: wave 3 has not started"),
                "{refused}"
            );
        }
        assert_eq!(clusters[0].selector("payments-stable").await.as_deref(), Some(h2.as_str()));
        assert_eq!(clusters[1].selector("payments-stable").await.as_deref(), Some(h1.as_str()));
        assert_eq!(clusters[1].selector("payments-canary").await.as_deref(), Some(h1.as_str()));
        assert_eq!(clusters[2].selector("payments-stable").await.as_deref(), Some(h1.as_str()));
        // `kubectl argo rollouts retry rollout` on the aborted cluster: the fleet's retry (its
        // failed clusters start again), with the plugin as its origin.
        // Argo's abort is durable: seconds later the cluster is still aborted on the spec it
        // aborted (not returned to the stable template), whoever owns that spec.
        let r1 = clusters[1].rollout().await.unwrap();
        assert_eq!(r1["status"]["abort"], true, "{}", r1["status"]);
        assert_eq!(r1["status"]["phase"], "Degraded", "{}", r1["status"]);
        assert_eq!(r1["spec"]["template"]["spec"]["containers"][0]["image"], V2);
        if source == Source::Cluster {
            env.run(
                "kubectl-argo-rollouts",
                &["retry", "rollout", "payments", "-n", "default", "--kubeconfig", &clusters[1].kubeconfig],
            )
            .expect("kubectl-argo-rollouts retry rollout");
            serve
                .wait_for("the retry heard", Duration::from_secs(30), |v| {
                    status_of(v, "cluster-1") != "RolledBack"
                })
                .await;
            let history = serve.client().history("payments").await.unwrap();
            let retry = history
                .iter()
                .find(|e| e.message.starts_with("retry (issued in cluster cluster-1)"))
                .unwrap_or_else(|| panic!("no retry in {history:#?}"));
            assert_eq!(retry.message, "retry (issued in cluster cluster-1)");
            assert!(
                retry.operator.as_deref().is_some_and(|o| o.contains("kubectl-argo-rollouts")),
                "{retry:?}"
            );
        }
        drop(serve);
    });
    drop(prometheus);
}

/// Argo's own tools beside Flotilla in one cluster: `kubectl-argo-rollouts get rollout` shows
/// the step and the ReplicaSets of a Rollout Flotilla drives, its `promote` and `abort` become
/// Flotilla's commands (with the plugin named as their origin), and Argo's controller, running
/// in the same cluster, drives an unlabelled Rollout while neither touches the other's objects.
#[test]
fn argos_plugin_reads_and_commands_a_flotilla_rollout_beside_argos_controller() {
    let _one = one_at_a_time();
    let env = start_env(1);
    let kubeconfig = env.cluster(0).kubeconfig.display().to_string();
    let mut argo = env
        .spawn_argo_controller(0)
        .expect("Argo's rollouts-controller starts");
    let dir = tempfile::tempdir().unwrap();
    let steps = "        - setWeight: 34\n        - pause: {}\n        - setWeight: 67\n        - pause: {}\n";
    std::fs::write(
        dir.path().join("manifests.yaml"),
        manifests(&env, None, steps),
    )
    .unwrap();
    write_serve_config(dir.path());
    let plugin = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["-n", "default", "--kubeconfig", &kubeconfig]);
        env.run("kubectl-argo-rollouts", &all)
            .expect("kubectl-argo-rollouts runs")
    };
    let (h1, h2) = (argo_hash(V1), argo_hash(V2));
    let runtime = runtime();
    runtime.block_on(async {
        let cluster = Cluster::prepare(env.cluster(0)).await;
        // An unlabelled Rollout: Argo's.
        let other: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Rollout",
            "metadata": {"name": "other", "namespace": "default"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "other"}},
                "template": {
                    "metadata": {"labels": {"app": "other"}},
                    "spec": {"containers": [{"name": "app", "image": "registry.example/other:1"}]}
                },
                "strategy": {"canary": {"steps": [{"setWeight": 50}, {"pause": {}}]}}
            }
        }))
        .unwrap();
        cluster
            .rollouts
            .create(&PostParams::default(), &other)
            .await
            .unwrap();

        let mut serve = Serve::start(dir.path());
        serve
            .wait_for("1.0 deployed", Duration::from_secs(120), |v| {
                v.phase == "Completed"
            })
            .await;
        healthy_on_v1(&cluster, &serve, Duration::from_secs(60)).await;
        set_image(&serve, V2).await;
        wait_rollout(
            &cluster,
            &serve,
            "the pause at step 1",
            Duration::from_secs(60),
            |r, sets| {
                r["status"]["currentStepIndex"] == 1
                    && r["status"]["pauseConditions"][0]["reason"] == "CanaryPauseStep"
                    && sets.get(&h2).is_some_and(|s| s.1 >= 1)
            },
        )
        .await;
        let shown = plugin(&["get", "rollout", "payments"]);
        eprintln!("{shown}");
        for expected in [
            "Paused",
            "1/4",
            "SetWeight:",
            &format!("payments-{h2}"),
            "canary",
            "stable",
            V2,
        ] {
            assert!(shown.contains(expected), "{expected:?} not shown:\n{shown}");
        }

        // pause (`spec.paused: true`): the cluster's update is paused by its operator, said in
        // the audit log with the plugin as origin, and the status says "manually paused".
        plugin(&["pause", "payments"]);
        let paused = wait_rollout(
            &cluster,
            &serve,
            "manually paused",
            Duration::from_secs(30),
            |r, _| r["status"]["message"] == "manually paused",
        )
        .await;
        assert_eq!(paused["status"]["currentStepIndex"], 1);
        let history = serve.client().history("payments").await.unwrap();
        let pause = history
            .iter()
            .find(|e| e.message.starts_with("pause cluster-0"))
            .unwrap_or_else(|| panic!("no pause in {history:#?}"));
        assert_eq!(
            pause.message,
            "pause cluster-0 (issued in cluster cluster-0)"
        );
        assert_eq!(
            pause.operator.as_deref(),
            Some("cluster-0: kubectl-argo-rollouts (Rollout spec.paused)")
        );

        // promote: unpaused (`spec.paused: false`, a resume), the pause step is over, the next
        // one is reached.
        plugin(&["promote", "payments"]);
        wait_rollout(
            &cluster,
            &serve,
            "promoted to step 3",
            Duration::from_secs(60),
            |r, _| {
                r["status"]["currentStepIndex"] == 3 && r["status"]["pauseConditions"].is_array()
            },
        )
        .await;
        let shown = plugin(&["get", "rollout", "payments"]);
        assert!(shown.contains("3/4"), "{shown}");
        let history = serve.client().history("payments").await.unwrap();
        assert!(
            history
                .iter()
                .any(|e| e.message == "resume cluster-0 (issued in cluster cluster-0)"),
            "{history:#?}"
        );

        // abort, issued while Flotilla is down (killed): heard once it is back, told apart from
        // its own last write by what the Rollout remembers of it. The canary goes to zero, the
        // stable serves, the Rollout is Degraded.
        serve.child.kill().unwrap();
        serve.child.wait().unwrap();
        plugin(&["abort", "payments"]);
        let serve = Serve::start(dir.path());
        let aborted = wait_rollout(
            &cluster,
            &serve,
            "aborted",
            Duration::from_secs(60),
            |r, sets| {
                r["status"]["abort"] == true
                    && r["status"]["phase"] == "Degraded"
                    && sets.get(&h2).is_some_and(|s| s.0 == 0)
                    && sets.get(&h1) == Some(&(3, 3))
            },
        )
        .await;
        assert_eq!(aborted["status"]["stableRS"], h1.as_str());
        assert_eq!(
            cluster.selector("payments-canary").await.as_deref(),
            Some(h1.as_str())
        );
        let view = serve
            .wait_for("the cluster rolled back", Duration::from_secs(30), |v| {
                status_of(v, "cluster-0") == "RolledBack"
            })
            .await;

        let history =
            serde_json::to_string(&serve.client().history("payments").await.unwrap()).unwrap();
        assert!(
            history.contains("kubectl-argo-rollouts"),
            "the plugin is named as the commands' origin: {history}\n{view:#?}"
        );
        let shown = plugin(&["get", "rollout", "payments"]);
        let r = cluster.rollout().await.unwrap();
        assert!(
            shown.contains("Degraded"),
            "{shown}\ngeneration {} spec {} status {}",
            r["metadata"]["generation"],
            r["spec"]["template"],
            r["status"]
        );

        // restart (`spec.restartAt`): each Pod of the Rollout older than it is evicted, one at
        // a time (3 replicas: maxUnavailable 25% is 0, so one), the ReplicaSet makes a new one,
        // and the status says `restartedAt` once none is left.
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(env.cluster(0).client().await.unwrap(), "default");
        let before: Vec<String> = pods
            .list(&ListParams::default().labels("app=payments"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        assert_eq!(before.len(), 3, "{before:?}");
        // Times have whole seconds, and a Pod created in restartAt's second counts as restarted
        // (as Argo counts it): the Pods the abort just made are given a second to be older.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        plugin(&["restart", "payments"]);
        let restarted = wait_rollout(
            &cluster,
            &serve,
            "restarted",
            Duration::from_secs(90),
            |r, sets| {
                r["status"]["restartedAt"].is_string()
                    && r["status"]["restartedAt"] == r["spec"]["restartAt"]
                    && sets.get(&h1) == Some(&(3, 3))
            },
        )
        .await;
        let at = restarted["spec"]["restartAt"].as_str().unwrap().to_owned();
        let after = pods
            .list(&ListParams::default().labels("app=payments"))
            .await
            .unwrap()
            .items;
        let live: Vec<_> = after
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        assert_eq!(live.len(), 3, "{after:#?}");
        for pod in live {
            let name = pod.metadata.name.clone().unwrap();
            assert!(!before.contains(&name), "{name} was not restarted");
            let created = pod.metadata.creation_timestamp.as_ref().unwrap().0;
            assert!(
                created.to_string() >= at,
                "{name} created {created} before {at}"
            );
        }
        // Argo drove its own Rollout and never wrote Flotilla's; Flotilla never wrote Argo's.
        let deadline = Instant::now() + Duration::from_secs(60);
        let other = loop {
            let other = serde_json::to_value(cluster.rollouts.get("other").await.unwrap()).unwrap();
            if other["status"]["phase"] == "Healthy" {
                break other;
            }
            assert!(
                Instant::now() < deadline,
                "{}\n{}",
                other["status"],
                argo.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert!(argo.running(), "{}", argo.log());
        let ours = serde_json::to_value(cluster.rollouts.get("payments").await.unwrap()).unwrap();
        assert!(
            managers(&ours)
                .iter()
                .all(|m| !m.contains("rollouts-controller")),
            "Argo's controller wrote Flotilla's Rollout: {:?}",
            managers(&ours)
        );
        assert!(
            !managers(&other).iter().any(|m| m == "flotilla"),
            "Flotilla wrote Argo's Rollout: {:?}",
            managers(&other)
        );
        for rs in cluster
            .replica_sets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
        {
            let rs = serde_json::to_value(rs).unwrap();
            let owner = rs["metadata"]["ownerReferences"][0]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let managers = managers(&rs);
            if owner == "payments" {
                assert!(
                    !managers.iter().any(|m| m.contains("rollouts-controller")),
                    "{managers:?}"
                );
            } else {
                assert!(!managers.iter().any(|m| m == "flotilla"), "{managers:?}");
            }
        }
        drop(serve);
    });
}

/// Faults: the controller killed (SIGKILL) in the middle of a step resumes at that step with the
/// ReplicaSets it made (none made twice) and reaches the same outcome; a cluster whose
/// kubeconfig cannot be used and one whose server does not answer are each named with what is
/// wrong, and never stall the healthy cluster.
#[test]
fn a_killed_controller_resumes_its_step_and_broken_clusters_are_named() {
    let _one = one_at_a_time();
    let env = start_env(2);
    let dir = tempfile::tempdir().unwrap();
    let steps = "        - setWeight: 34\n        - pause: {duration: 6s}\n        - setWeight: 67\n        - pause: {duration: 1s}\n";
    // Two broken clusters in the last waves: a kubeconfig that is not YAML, and a good
    // kubeconfig whose server nobody serves.
    let garbled = dir.path().join("garbled.kubeconfig");
    std::fs::write(&garbled, "clusters: [this is: not: a kubeconfig\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut manifests = manifests(&env, None, steps);
    manifests = manifests.replace(
        "---\napiVersion: flotilla.dev/v1alpha1\nkind: FleetRollout",
        &format!(
            "    - name: garbled\n      endpoint: {{kubernetes: {{kubeconfig: \"{}\"}}}}\n    - name: silent\n      endpoint: {{kubernetes: {{kubeconfig: \"{}\", server: \"https://127.0.0.1:{port}\"}}}}\n---\napiVersion: flotilla.dev/v1alpha1\nkind: FleetRollout",
            garbled.display(),
            env.cluster(0).kubeconfig.display()
        ),
    );
    manifests = manifests.replace(
        "        - {cluster: cluster-1, wave: 2}\n",
        "        - {cluster: cluster-1, wave: 2}\n        - {cluster: garbled, wave: 3}\n        - {cluster: silent, wave: 4}\n",
    );
    std::fs::write(dir.path().join("manifests.yaml"), manifests).unwrap();
    write_serve_config(dir.path());
    let (h1, h2) = (argo_hash(V1), argo_hash(V2));
    let runtime = runtime();
    runtime.block_on(async {
        let cluster = Cluster::prepare(env.cluster(0)).await;
        // cluster-1 lacks Argo's Rollout CRD (never installed there, or removed).
        let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
            Api::all(env.cluster(1).client().await.unwrap());
        crds.delete("rollouts.argoproj.io", &Default::default()).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while crds.get_opt("rollouts.argoproj.io").await.unwrap().is_some() {
            assert!(Instant::now() < deadline, "the CRD is not deleted");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut serve = Serve::start(dir.path());
        healthy_on_v1(&cluster, &serve, Duration::from_secs(90)).await;
        let view = serve
            .wait_for("the broken clusters named", Duration::from_secs(30), |v| {
                cluster_view(v, "garbled").condition.is_some()
                    && cluster_view(v, "silent").condition.is_some()
                    && cluster_view(v, "cluster-1").condition.is_some()
            })
            .await;
        let no_crds = cluster_view(&view, "cluster-1").condition.clone().unwrap();
        assert!(
            no_crds.contains("\"cluster-1\"") && no_crds.contains("rollouts, rollouts/status") && no_crds.contains("Argo Rollouts' CRDs"),
            "{no_crds}"
        );
        let garbled_condition = cluster_view(&view, "garbled").condition.clone().unwrap();
        assert!(
            garbled_condition.contains("\"garbled\"")
                && garbled_condition.contains("endpoint.kubernetes.kubeconfig")
                && garbled_condition.contains("garbled.kubeconfig"),
            "{garbled_condition}"
        );
        let silent_condition = cluster_view(&view, "silent").condition.clone().unwrap();
        assert!(
            silent_condition.starts_with("Unreachable")
                && silent_condition.contains("\"silent\"")
                && silent_condition.contains("Connection refused"),
            "{silent_condition}"
        );
        assert!(!cluster_view(&view, "silent").reachable);
        let history =
            serde_json::to_string(&serve.client().history("payments").await.unwrap()).unwrap();
        assert!(
            history.contains("garbled.kubeconfig"),
            "the unusable kubeconfig is in the audit log: {history}"
        );

        // The release; the controller is killed in the middle of the 6 s pause.
        set_image(&serve, V2).await;
        let paused = wait_rollout(
            &cluster,
            &serve,
            "the timed pause",
            Duration::from_secs(60),
            |r, sets| {
                r["status"]["currentStepIndex"] == 1 && sets.get(&h2).is_some_and(|s| s.1 >= 1)
            },
        )
        .await;
        let canary_uid = cluster
            .replica_sets
            .get(&format!("payments-{h2}"))
            .await
            .unwrap()
            .metadata
            .uid;
        serve.child.kill().unwrap(); // SIGKILL
        serve.child.wait().unwrap();
        let serve = Serve::start(dir.path());
        let resumed = wait_rollout(
            &cluster,
            &serve,
            "the restarted controller's status",
            Duration::from_secs(30),
            |r, _| r["status"]["currentStepIndex"].as_i64().is_some(),
        )
        .await;
        assert!(
            resumed["status"]["currentStepIndex"].as_i64()
                >= paused["status"]["currentStepIndex"].as_i64(),
            "the restarted controller went back: {} after {}",
            resumed["status"],
            paused["status"]
        );
        wait_rollout(
            &cluster,
            &serve,
            "2.0 healthy",
            Duration::from_secs(90),
            |r, sets| {
                r["status"]["stableRS"] == h2.as_str()
                    && r["status"]["phase"] == "Healthy"
                    && sets.get(&h2) == Some(&(3, 3))
            },
        )
        .await;
        let sets = cluster.replica_sets().await;
        assert_eq!(
            sets.keys().cloned().collect::<Vec<_>>(),
            {
                let mut both = vec![h1.clone(), h2.clone()];
                both.sort();
                both
            },
            "one ReplicaSet per revision, none made twice"
        );
        let canary_after = cluster
            .replica_sets
            .get(&format!("payments-{h2}"))
            .await
            .unwrap()
            .metadata
            .uid;
        assert_eq!(
            canary_uid, canary_after,
            "the canary's ReplicaSet was kept, not remade"
        );
        let view = serve.client().fleet("payments").await.unwrap();
        // Healthy on 2.0, yet not validated: this Rollout has no analysis, and a cluster is
        // only validated on evidence.
        let ours = cluster_view(&view, "cluster-0");
        assert_eq!(ours.status, "Paused", "{view:#?}");
        assert!(ours.reason.contains("no analysis"), "{view:#?}");
        assert!(cluster_view(&view, "garbled").condition.is_some());
    });
}

/// A cluster's API server killed (SIGKILL) in the middle of its canary: the cluster waits,
/// shown unreachable with its condition, nothing of it is promoted and the next wave does not
/// start; once the server is back, the cluster resumes where it was and the release completes.
#[test]
fn a_killed_api_server_holds_its_cluster_until_it_is_back() {
    let _one = one_at_a_time();
    let env = start_env(2);
    let dir = tempfile::tempdir().unwrap();
    let series: Series = Arc::default();
    let exporter = exporter(series.clone());
    let prometheus = demo::Prometheus::start_new(dir.path().join("prometheus"), &exporter)
        .expect("prometheus (apt-get install prometheus)");
    std::fs::write(
        dir.path().join("manifests.yaml"),
        manifests(&env, Some(&prometheus.address()), ANALYSED_STEPS),
    )
    .unwrap();
    write_serve_config(dir.path());
    let (h1, h2) = (argo_hash(V1), argo_hash(V2));
    for cluster in env.clusters() {
        let mut series = series.lock().unwrap();
        series.insert((cluster.name.clone(), h1.clone()), 0.0);
        series.insert((cluster.name.clone(), h2.clone()), 0.0);
    }
    let runtime = runtime();
    runtime.block_on(async {
        let mut clusters = Vec::new();
        for cluster in env.clusters() {
            clusters.push(Cluster::prepare(cluster).await);
        }
        let serve = Serve::start(dir.path());
        serve
            .wait_for("1.0 everywhere", Duration::from_secs(120), |v| {
                v.phase == "Completed"
            })
            .await;
        set_image(&serve, V2).await;
        let before = wait_rollout(
            &clusters[0],
            &serve,
            "cluster-0's canary",
            Duration::from_secs(60),
            |r, sets| {
                r["status"]["currentPodHash"] == h2.as_str()
                    && r["status"]["currentStepIndex"]
                        .as_i64()
                        .is_some_and(|s| s >= 1)
                    && sets.get(&h2).is_some_and(|s| s.0 >= 1)
            },
        )
        .await;
        env.kill_apiserver(0)
            .expect("kill -9 cluster-0's API server");
        let down = Instant::now();
        let view = serve
            .wait_for("cluster-0 unreachable", Duration::from_secs(30), |v| {
                let c = cluster_view(v, "cluster-0");
                !c.reachable
                    && c.condition
                        .as_deref()
                        .is_some_and(|t| t.starts_with("Unreachable"))
            })
            .await;
        assert_ne!(status_of(&view, "cluster-0"), "Validated", "{view:#?}");
        // Down for a while: nothing of cluster-0 is decided, the next wave does not start.
        tokio::time::sleep(Duration::from_secs(6).saturating_sub(down.elapsed())).await;
        let view = serve.client().fleet("payments").await.unwrap();
        assert_ne!(status_of(&view, "cluster-0"), "Validated", "{view:#?}");
        assert!(
            !clusters[1].replica_sets().await.contains_key(&h2),
            "the next wave started while cluster-0 could not be read"
        );
        env.restore_apiserver(0)
            .expect("cluster-0's API server comes back");
        let after = wait_rollout(
            &clusters[0],
            &serve,
            "cluster-0 read again",
            Duration::from_secs(60),
            |r, _| r["status"]["currentPodHash"] == h2.as_str(),
        )
        .await;
        assert!(
            after["status"]["currentStepIndex"].as_i64()
                >= before["status"]["currentStepIndex"].as_i64(),
            "cluster-0 went back a step: {} then {}",
            before["status"],
            after["status"]
        );
        serve
            .wait_for("the release completed", Duration::from_secs(120), |v| {
                v.phase == "Completed"
                    && status_of(v, "cluster-0") == "Validated"
                    && status_of(v, "cluster-1") == "Validated"
            })
            .await;
        for cluster in &clusters {
            wait_rollout(
                cluster,
                &serve,
                "2.0 healthy",
                Duration::from_secs(60),
                |r, sets| {
                    r["status"]["stableRS"] == h2.as_str()
                        && sets.get(&h2) == Some(&(3, 3))
                        && sets.len() == 2
                },
            )
            .await;
        }
    });
    drop(prometheus);
}

/// Posts each document of `yaml` (ServiceAccounts, Roles, RoleBindings in `default`) to cluster
/// `i` as its admin, verbatim: the API server reads YAML itself.
fn post_yaml(env: &TestEnv, i: usize, yaml: &str) {
    let cluster = env.cluster(i);
    for document in yaml.split("\n---\n") {
        let kind = document
            .lines()
            .find_map(|l| l.strip_prefix("kind: "))
            .expect("each document has a kind")
            .trim();
        let path = match kind {
            "ServiceAccount" => "/api/v1/namespaces/default/serviceaccounts",
            "Role" => "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
            "RoleBinding" => "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
            other => panic!("unexpected kind {other}"),
        };
        let out = Command::new("curl")
            .args(["-sS", "-f", "--cacert"])
            .arg(env.dir().join("pki/ca.crt"))
            .args(["-H", &format!("Authorization: Bearer {}", cluster.token)])
            .args([
                "-H",
                "Content-Type: application/yaml",
                "--data-binary",
                document,
            ])
            .arg(format!("{}{path}", cluster.server))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "posting a {kind}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// docs/kubernetes-rbac.yaml, applied verbatim, is all Flotilla needs in a cluster: a fleet
/// driven with that ServiceAccount's token deploys; the same Role without `create` on
/// ReplicaSets holds its cluster with a condition naming the cluster, the verb and the resource.
#[test]
fn the_documented_role_is_enough_and_a_missing_permission_is_named() {
    let _one = one_at_a_time();
    let env = start_env(2);
    let dir = tempfile::tempdir().unwrap();
    let rbac = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/kubernetes-rbac.yaml"),
    )
    .unwrap();
    let lacking = rbac.replace(
        "    resources: [\"replicasets\"]\n    verbs: [\"list\", \"watch\", \"create\", \"patch\"]",
        "    resources: [\"replicasets\"]\n    verbs: [\"list\", \"watch\", \"patch\"]",
    );
    assert_ne!(lacking, rbac, "the Role grants create on replicasets");
    post_yaml(&env, 0, &rbac);
    post_yaml(&env, 1, &lacking);
    let (h1, runtime) = (
        argo_hash(V1),
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
    );
    runtime.block_on(async {
        let mut text = manifests(&env, None, "        - setWeight: 50\n        - pause: {}\n");
        for i in 0..2 {
            let restricted = service_account_kubeconfig(&env, i, "default", dir.path()).await;
            text = text.replace(
                &env.cluster(i).kubeconfig.display().to_string(),
                &restricted.display().to_string(),
            );
        }
        std::fs::write(dir.path().join("manifests.yaml"), &text).unwrap();
        write_serve_config(dir.path());
        let clusters = [
            Cluster::prepare(env.cluster(0)).await,
            Cluster::prepare(env.cluster(1)).await,
        ];
        let serve = Serve::start(dir.path());
        wait_rollout(
            &clusters[0],
            &serve,
            "1.0 healthy with the documented Role",
            Duration::from_secs(90),
            |r, sets| {
                sets.get(&h1) == Some(&(3, 3))
                    && r["status"]["phase"] == "Healthy"
                    && r["metadata"]["annotations"]["flotilla.dev/last-status"].is_string()
            },
        )
        .await;
        assert_eq!(
            clusters[0].selector("payments-stable").await.as_deref(),
            Some(h1.as_str())
        );
        // The Role lets Flotilla post its Events too.
        clusters[0]
            .wait_event("Normal RolloutCompleted", Duration::from_secs(10))
            .await;
        assert!(
            !serve.log().contains("cannot post an Event"),
            "{}",
            serve.log()
        );
        let view = serve
            .wait_for(
                "cluster-1's missing permission named",
                Duration::from_secs(60),
                |v| cluster_view(v, "cluster-1").condition.is_some(),
            )
            .await;
        let condition = cluster_view(&view, "cluster-1").condition.clone().unwrap();
        assert!(
            condition.starts_with("Forbidden: cannot create replicasets.apps")
                && condition.contains("\"cluster-1\"")
                && condition.contains("system:serviceaccount:default:flotilla"),
            "{condition}"
        );
        assert!(clusters[1].replica_sets().await.is_empty());
    });
}

/// One test cluster and a directory with `flotilla serve`'s config and manifests of a
/// `rolloutSource: flotilla` canary whose steps are `setWeight: 50` then an indefinite pause.
fn one_cluster_half_and_pause() -> (TestEnv, tempfile::TempDir) {
    let env = start_env(1);
    let dir = tempfile::tempdir().unwrap();
    let text = manifests(&env, None, "        - setWeight: 50\n        - pause: {}\n");
    std::fs::write(dir.path().join("manifests.yaml"), &text).unwrap();
    write_serve_config(dir.path());
    (env, dir)
}

/// `rolloutSource: flotilla` never fights another writer: when someone else took the image of
/// the Rollout's template (server-side apply with force), Flotilla's next apply is refused and
/// the cluster is held with an `OwnershipConflict` naming the field and the other manager.
#[test]
fn another_writer_of_the_template_is_an_ownership_conflict() {
    let _one = one_at_a_time();
    let (env, dir) = one_cluster_half_and_pause();
    let runtime = runtime();
    runtime.block_on(async {
        let cluster = Cluster::prepare(env.cluster(0)).await;
        let serve = Serve::start(dir.path());
        healthy_on_v1(&cluster, &serve, Duration::from_secs(90)).await;
        // A hand edit that takes the image (as `kubectl apply --server-side --force-conflicts`).
        let edit = json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Rollout",
            "metadata": {"name": "payments", "namespace": "default"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": "registry.example/payments:hotfix"}
            ]}}}
        });
        cluster
            .rollouts
            .patch(
                "payments",
                &kube::api::PatchParams::apply("hand-edit").force(),
                &kube::api::Patch::Apply(&edit),
            )
            .await
            .unwrap();
        set_image(&serve, V2).await;
        let view = serve
            .wait_for(
                "the ownership conflict named",
                Duration::from_secs(60),
                |v| {
                    cluster_view(v, "cluster-0")
                        .condition
                        .as_deref()
                        .is_some_and(|c| c.starts_with("OwnershipConflict"))
                },
            )
            .await;
        let condition = cluster_view(&view, "cluster-0").condition.clone().unwrap();
        assert!(
            condition.contains("hand-edit") && condition.contains(".image"),
            "{condition}"
        );
        // Nothing was forced: the other writer's image stands, and no canary was made of 2.0.
        let rollout = cluster.rollout().await.unwrap();
        assert_eq!(
            rollout["spec"]["template"]["spec"]["containers"][0]["image"],
            "registry.example/payments:hotfix"
        );
        assert!(!cluster.replica_sets().await.contains_key(&argo_hash(V2)));
    });
}

/// `flotilla lint --live FILE` run in `dir`: its exit code and stdout.
fn lint_live(dir: &Path) -> (i32, String) {
    let output = flotilla()
        .args(["lint", "--live", "manifests.yaml"])
        .current_dir(dir)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// A lockstep wave of two clusters whose Rollouts (Argo CD's, read in each cluster) have
/// different step counts: `flotilla lint --live` names the FleetRollout's line and field and
/// each cluster's steps; the daemon starts no revision and says why; once Argo CD syncs the same
/// steps everywhere, both agree and the revision starts.
#[test]
fn a_lockstep_wave_needs_the_same_steps_in_every_cluster() {
    let _one = one_at_a_time();
    let env = start_env(2);
    let dir = tempfile::tempdir().unwrap();
    let two = "        - setWeight: 50\n        - pause: {}\n";
    let three = "        - setWeight: 25\n        - pause: {}\n        - setWeight: 75\n";
    let text = manifests(&env, None, two)
        .replace("  rolloutSource: flotilla\n", "")
        .replace("wave: 2}", "wave: 1}")
        .replace("    list:\n", "    lockstep: true\n    list:\n");
    let other = manifests(&env, None, three);
    std::fs::write(dir.path().join("manifests.yaml"), &text).unwrap();
    write_serve_config(dir.path());
    let lockstep_line = text
        .lines()
        .position(|l| l.trim() == "lockstep: true")
        .unwrap()
        + 1;
    let h2 = argo_hash(V2);
    let runtime = runtime();
    runtime.block_on(async {
        let clusters = [
            Cluster::prepare(env.cluster(0)).await,
            Cluster::prepare(env.cluster(1)).await,
        ];
        argocd_apply(&clusters[0], &text, V1).await;
        argocd_apply(&clusters[1], &other, V1).await;

        let (code, out) = lint_live(dir.path());
        assert_eq!(code, 1, "{out}");
        let line = out
            .lines()
            .find(|l| l.contains("fleet/lockstep-steps"))
            .unwrap_or_else(|| panic!("no lockstep-steps finding:\n{out}"));
        assert!(
            line.starts_with(&format!("manifests.yaml:{lockstep_line}:"))
                && line.contains("spec.waves.lockstep")
                && line.contains("error")
                && line.contains("cluster-0: 2 canary steps; cluster-1: 3 canary steps"),
            "{line}"
        );

        let serve = Serve::start(dir.path());
        serve
            .wait_for("1.0 everywhere", Duration::from_secs(120), |v| {
                v.phase == "Completed"
            })
            .await;
        // Argo CD syncs 2.0 everywhere, with the steps still different: nothing starts.
        argocd_apply(&clusters[0], &text, V2).await;
        argocd_apply(&clusters[1], &other, V2).await;
        let view = serve
            .wait_for("the steps named", Duration::from_secs(30), |v| {
                v.errors.iter().any(|e| e.contains("lockstep"))
            })
            .await;
        let error = view.errors.iter().find(|e| e.contains("lockstep")).unwrap();
        assert!(
            error.contains("spec.waves.lockstep")
                && error.contains("cluster-0: 2 canary steps; cluster-1: 3 canary steps"),
            "{error}"
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        for cluster in &clusters {
            assert!(
                !cluster.replica_sets().await.contains_key(&h2),
                "{}: a canary was made while the steps disagree\n{}",
                cluster.name,
                serve.log()
            );
        }
        let view = serve.client().fleet("payments").await.unwrap();
        assert_ne!(view.image, V2);

        // Argo CD syncs the same steps to cluster-1: the revision starts in both, together.
        argocd_apply(&clusters[1], &text, V2).await;
        for cluster in &clusters {
            wait_rollout(
                cluster,
                &serve,
                "the canary of 2.0",
                Duration::from_secs(60),
                |_, sets| sets.contains_key(&h2),
            )
            .await;
        }
        let view = serve.client().fleet("payments").await.unwrap();
        assert!(view.errors.is_empty(), "{:?}", view.errors);
        let (code, out) = lint_live(dir.path());
        assert!(!out.contains("lockstep-steps"), "{out}");
        assert_ne!(code, 2, "{out}");

        // `kubectl argo rollouts promote --full` on cluster-0: every remaining step skipped,
        // the lockstep barrier too (`--full` is the operator's word for the whole cluster).
        wait_rollout(
            &clusters[0],
            &serve,
            "the pause of step 1",
            Duration::from_secs(30),
            |r, _| r["status"]["pauseConditions"][0]["reason"] == "CanaryPauseStep",
        )
        .await;
        env.run(
            "kubectl-argo-rollouts",
            &[
                "promote",
                "--full",
                "payments",
                "-n",
                "default",
                "--kubeconfig",
                &clusters[0].kubeconfig,
            ],
        )
        .expect("kubectl-argo-rollouts promote --full");
        wait_rollout(
            &clusters[0],
            &serve,
            "2.0 promoted in full",
            Duration::from_secs(60),
            |r, _| r["status"]["stableRS"] == h2.as_str() && r["status"]["phase"] == "Healthy",
        )
        .await;
        let history = serve.client().history("payments").await.unwrap();
        let full = history
            .iter()
            .find(|e| e.message.starts_with("promote cluster-0 --full"))
            .unwrap_or_else(|| panic!("no promote --full in {history:#?}"));
        assert_eq!(
            full.message,
            "promote cluster-0 --full (issued in cluster cluster-0)"
        );
    });
}

/// `flotilla crds`: the CustomResourceDefinitions of Fleet and FleetRollout (and of a hub's
/// FleetCommand and FleetRolloutRecord), installed in a real
/// API server beside Argo's, which takes them as structural schemas; the shipped examples then
/// apply under strict field validation, and a misspelt field or a wrong type is refused by the
/// API server, naming the field.
#[test]
fn flotillas_crds_install_and_validate_fleets_and_fleet_rollouts() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let output = flotilla().arg("crds").output().unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let mut crds = argo_rollouts_crds().expect("Argo Rollouts' CRDs");
    for (i, document) in text
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .enumerate()
    {
        let path = dir.path().join(format!("flotilla-{i}.yaml"));
        std::fs::write(&path, document).unwrap();
        crds.push(path);
    }
    // Fleet, FleetRollout, and a hub's FleetCommand and FleetRolloutRecord.
    assert_eq!(
        crds.iter().filter(|p| p.starts_with(dir.path())).count(),
        4,
        "{text}"
    );
    let env = TestEnv::start(&Options {
        clusters: 1,
        nodes: 1,
        crds,
        ..Options::default()
    })
    .expect("the test environment starts with Flotilla's CRDs");
    let runtime = runtime();
    runtime.block_on(async {
        let client = env.cluster(0).client().await.unwrap();
        let api = |kind: &str| -> Api<DynamicObject> {
            Api::namespaced_with(
                client.clone(),
                "default",
                &ApiResource::from_gvk(&GroupVersionKind::gvk("flotilla.dev", "v1alpha1", kind)),
            )
        };
        let apply = |object: Value| {
            let kind = object["kind"].as_str().unwrap().to_owned();
            let name = object["metadata"]["name"].as_str().unwrap().to_owned();
            let api = api(&kind);
            async move {
                api.patch(
                    &name,
                    &kube::api::PatchParams::apply("test").validation_strict(),
                    &kube::api::Patch::Apply(&object),
                )
                .await
            }
        };
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut applied = 0;
        for file in [
            "examples/fleet/fleet.yaml",
            "examples/fleet/fleet-rollout.yaml",
        ] {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            for object in serde_saphyr::from_multiple::<Value>(&text).unwrap() {
                if object["apiVersion"] != "flotilla.dev/v1alpha1" {
                    continue;
                }
                apply(object.clone()).await.unwrap_or_else(|e| {
                    panic!("{file}: {} refused: {e}", object["metadata"]["name"])
                });
                applied += 1;
            }
        }
        assert!(applied >= 2, "the examples hold a Fleet and a FleetRollout");
        let stored = api("FleetRollout").get("payment-api").await.unwrap();
        let stored = serde_json::to_value(stored).unwrap();
        assert_eq!(
            stored["spec"]["waves"]["list"][0]["cluster"],
            "canary-eu-west"
        );
        assert_eq!(stored["spec"]["bakeTime"], "2m");

        let bad = |spec: Value| {
            json!({
                "apiVersion": "flotilla.dev/v1alpha1",
                "kind": "FleetRollout",
                "metadata": {"name": "bad", "namespace": "default"},
                "spec": spec,
            })
        };
        let misspelt = apply(bad(json!({
            "fleet": "payments", "rollout": "payment-api",
            "waves": {"list": [{"cluster": "a", "wave": 1}]},
            "bakeTimee": "2m",
        })))
        .await
        .expect_err("a misspelt field is refused");
        assert!(misspelt.to_string().contains("bakeTimee"), "{misspelt}");
        let wrong = apply(bad(json!({
            "fleet": "payments", "rollout": "payment-api",
            "waves": {"list": [{"cluster": "a", "wave": "first"}]},
        })))
        .await
        .expect_err("a wave that is not a number is refused");
        assert!(
            wrong.to_string().contains("spec.waves.list[0].wave"),
            "{wrong}"
        );
        let missing = apply(bad(json!({"fleet": "payments"})))
            .await
            .expect_err("a FleetRollout without its rollout is refused");
        assert!(missing.to_string().contains("spec.rollout"), "{missing}");
    });
}

/// Starts `flotilla serve` in `dir`, waits for 1.0 deployed, sets 2.0 and waits until the
/// cluster is Healthy on it (its analysis step passed).
async fn release_through_the_analysis(cluster: &Cluster, dir: &Path) -> Serve {
    let h2 = argo_hash(V2);
    let serve = Serve::start(dir);
    serve
        .wait_for("1.0 deployed", Duration::from_secs(120), |v| {
            v.phase == "Completed"
        })
        .await;
    set_image(&serve, V2).await;
    wait_rollout(
        cluster,
        &serve,
        "2.0 healthy after its analysis",
        Duration::from_secs(90),
        |r, sets| {
            r["status"]["stableRS"] == h2.as_str()
                && r["status"]["phase"] == "Healthy"
                && sets.get(&h2) == Some(&(3, 3))
        },
    )
    .await;
    serve
}

/// A template's `valueFrom.secretKeyRef` is read in the cluster, from its Secret (as Argo reads
/// it where the AnalysisRun runs), not from the controller's environment: a `web` metric sends
/// the token the cluster's Secret holds, the step passes, and the AnalysisRun object written
/// there carries the argument without its value.
#[test]
fn an_analysis_secret_is_read_in_the_cluster() {
    let _one = one_at_a_time();
    let env = start_env(1);
    let dir = tempfile::tempdir().unwrap();
    // The metric's endpoint: `{"ok": true}` only with the cluster's token.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap().to_string();
    {
        let seen = seen.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let app = axum::Router::new().route(
                    "/check",
                    axum::routing::get(move |headers: axum::http::HeaderMap| {
                        let seen = seen.clone();
                        async move {
                            let auth = headers
                                .get("authorization")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_owned();
                            let ok = auth == "Bearer s3cret-from-the-cluster";
                            seen.lock().unwrap().push(auth);
                            axum::Json(json!({"ok": ok}))
                        }
                    }),
                );
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
    }
    let steps = "        - setWeight: 50\n        - analysis:\n            templates: [{templateName: token-check}]\n";
    let text = format!(
        r#"{}---
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {{name: token-check}}
spec:
  args: [{{name: token, valueFrom: {{secretKeyRef: {{name: metrics-api, key: token}}}}}}]
  metrics:
    - name: authorised
      count: 1
      successCondition: result == true
      provider:
        web:
          url: "http://{address}/check"
          headers: [{{key: Authorization, value: "Bearer {{{{args.token}}}}"}}]
          jsonPath: "{{$.ok}}"
"#,
        manifests(&env, None, steps)
    );
    std::fs::write(dir.path().join("manifests.yaml"), &text).unwrap();
    write_serve_config(dir.path());
    let h2 = argo_hash(V2);
    let runtime = runtime();
    runtime.block_on(async {
        let cluster = Cluster::prepare(env.cluster(0)).await;
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(env.cluster(0).client().await.unwrap(), "default");
        let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
            "metadata": {"name": "metrics-api"},
            "stringData": {"token": "s3cret-from-the-cluster"},
        }))
        .unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let serve = release_through_the_analysis(&cluster, dir.path()).await;
        assert!(
            seen.lock()
                .unwrap()
                .iter()
                .any(|a| a == "Bearer s3cret-from-the-cluster"),
            "{:?}",
            seen.lock().unwrap()
        );
        let runs = cluster.step_runs(&h2).await;
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(
            runs[0]["status"]["phase"], "Successful",
            "{}",
            runs[0]["status"]
        );
        let written = runs[0].to_string();
        assert!(
            !written.contains("s3cret"),
            "the secret's value was written: {written}"
        );
        assert!(
            !serve.log().contains("s3cret"),
            "the secret's value was logged"
        );
    });
}

/// `metrics.via: apiserver`: a template written for an in-cluster address
/// (`http://prometheus.monitoring:9090`, as Argo's users write them) runs unchanged from outside
/// the cluster. The controller reaches that Service through the cluster's API server's service
/// proxy with the cluster's credentials; the API server goes to the Service's Pod over the
/// cluster network (here the test environment's pod network, which carries it to the real
/// Prometheus on loopback). The step passes on the values read that way.
#[test]
fn metrics_via_the_api_server_reach_the_templates_in_cluster_address() {
    let _one = one_at_a_time();
    let env = TestEnv::start(&Options {
        clusters: 1,
        nodes: 2,
        crds: argo_rollouts_crds().expect("Argo Rollouts' CRDs"),
        pod_network: true,
        ..Options::default()
    })
    .expect("the Kubernetes test environment starts");
    let dir = tempfile::tempdir().unwrap();
    let series: Series = Arc::default();
    let exporter = exporter(series.clone());
    let prometheus = demo::Prometheus::start_new(dir.path().join("prometheus"), &exporter)
        .expect("prometheus (apt-get install prometheus)");
    let port: u16 = prometheus
        .address()
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("Prometheus' port");
    // Healthy everywhere: the step passes only on values read through the proxy.
    regressing_in(&series, &env, usize::MAX);
    let text = manifests(&env, None, ANALYSED_STEPS)
        .replace(
            "namespace: default}}\n",
            "namespace: default}}\n      metrics: {via: apiserver}\n",
        )
        .replace(
            "address: \"{{args.metrics-address}}\"",
            "address: \"http://prometheus.monitoring:9090\"",
        )
        .replace(", {name: metrics-address}]", "]");
    assert!(text.contains("metrics: {via: apiserver}"), "{text}");
    assert!(!text.contains("metrics-address"), "{text}");
    std::fs::write(dir.path().join("manifests.yaml"), &text).unwrap();
    write_serve_config(dir.path());
    let h2 = argo_hash(V2);
    let runtime = runtime();
    runtime.block_on(async {
        let cluster = Cluster::prepare(env.cluster(0)).await;
        // Prometheus as it runs in a cluster: a Pod in `monitoring` behind Service `prometheus`
        // (port 9090, its Pod's port the one the real Prometheus listens on).
        let client = env.cluster(0).client().await.unwrap();
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        create(&namespaces, json!({"metadata": {"name": "monitoring"}})).await;
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(client.clone(), "monitoring");
        create(
            &pods,
            json!({
                "metadata": {"name": "prometheus-0", "labels": {"app": "prometheus"}},
                "spec": {"containers": [{"name": "prometheus", "image": "prom/prometheus", "ports": [{"containerPort": port}]}]}
            }),
        )
        .await;
        let services: Api<k8s_openapi::api::core::v1::Service> =
            Api::namespaced(client.clone(), "monitoring");
        create(
            &services,
            json!({
                "metadata": {"name": "prometheus"},
                "spec": {"selector": {"app": "prometheus"}, "ports": [{"name": "web", "port": 9090, "targetPort": port}]}
            }),
        )
        .await;
        let endpoints: Api<k8s_openapi::api::core::v1::Endpoints> =
            Api::namespaced(client.clone(), "monitoring");
        let deadline = Instant::now() + Duration::from_secs(60);
        let pod_ip = loop {
            let ready = endpoints.get_opt("prometheus").await.unwrap().and_then(|e| {
                e.subsets?
                    .into_iter()
                    .flat_map(|s| s.addresses.unwrap_or_default())
                    .map(|a| a.ip)
                    .next()
            });
            if let Some(ip) = ready {
                break ip;
            }
            assert!(Instant::now() < deadline, "the Service has no ready endpoint");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert!(pod_ip.starts_with("10.64."), "{pod_ip}");
        // Prometheus has scraped the series (asked directly), so that every measurement through
        // the proxy has a value to read.
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer = http
                .get(format!(
                    "{}/api/v1/query?query=payments_error_ratio",
                    prometheus.address()
                ))
                .send()
                .await;
            let text = match answer {
                Ok(answer) => answer.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if text.contains(&h2) {
                break;
            }
            assert!(Instant::now() < deadline, "Prometheus has no series: {text}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let serve = release_through_the_analysis(&cluster, dir.path()).await;
        let runs = cluster.step_runs(&h2).await;
        assert_eq!(runs.len(), 1, "{runs:?}");
        let run = &runs[0];
        assert_eq!(run["status"]["phase"], "Successful", "{}", run["status"]);
        assert_eq!(
            run["spec"]["metrics"][0]["provider"]["prometheus"]["address"],
            "http://prometheus.monitoring:9090",
            "the template's address runs unchanged"
        );
        let measurements = run["status"]["metricResults"][0]["measurements"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(!measurements.is_empty(), "{}", run["status"]);
        for m in &measurements {
            assert_eq!(m["phase"], "Successful", "{m}");
            assert_eq!(m["value"], "[0]", "{m}");
        }
        let dials = env.pod_network_dials();
        assert!(
            dials.contains(&format!("{pod_ip}:{port}")),
            "the API server went to the Pod: {dials:?}"
        );
        // The proxy's own answers, through the backend as the controller uses it. With the
        // documented least-privilege rule (`get` on `services/proxy` named
        // `http:prometheus:9090` in `monitoring`), a query passes and a POST is refused naming
        // the verb and the name; with the admin's rights, a Service that does not exist is
        // `NoService` (looked up outside the cluster next) and one without endpoints fails at
        // once with the API server's words (never retried into a timeout).
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), "default");
        create(&accounts, json!({"metadata": {"name": "flotilla"}})).await;
        let roles: Api<k8s_openapi::api::rbac::v1::Role> =
            Api::namespaced(client.clone(), "monitoring");
        create(
            &roles,
            json!({
                "metadata": {"name": "flotilla-metrics"},
                "rules": [{"apiGroups": [""], "resources": ["services/proxy"],
                 "resourceNames": ["http:prometheus:9090"], "verbs": ["get"]}]
            }),
        )
        .await;
        let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
            Api::namespaced(client.clone(), "monitoring");
        create(
            &bindings,
            json!({
                "metadata": {"name": "flotilla-metrics"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "flotilla-metrics"},
                "subjects": [{"kind": "ServiceAccount", "name": "flotilla", "namespace": "default"}]
            }),
        )
        .await;
        create(
            &services,
            json!({
                "metadata": {"name": "empty"},
                "spec": {"selector": {"app": "nothing"}, "ports": [{"port": 9090}]}
            }),
        )
        .await;
        let restricted = service_account_kubeconfig(&env, 0, "default", dir.path()).await;
        let backend = |kubeconfig: &Path| {
            flotilla_kube::KubeBackend::new(
                "cluster-0",
                flotilla_core::spec::fleet::KubernetesEndpoint {
                    kubeconfig: Some(kubeconfig.display().to_string()),
                    ..Default::default()
                },
                flotilla_core::spec::fleet::RolloutSource::Cluster,
                "payments",
                || 0,
                &flotilla_kube::KubeClients::default(),
            )
            .with_metrics_via_apiserver(true)
        };
        let request = |service: &str, method: &str| flotilla_core::analysis::ServiceRequest {
            method: method.into(),
            scheme: "http".into(),
            service: service.into(),
            namespace: Some("monitoring".into()),
            port: 9090,
            path_and_query: "/api/v1/query?query=vector(1)".into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: Duration::from_secs(10),
            max_body: 1 << 20,
        };
        use flotilla_core::analysis::ProxyError;
        use flotilla_core::backend::ClusterBackend;
        let least = backend(&restricted);
        let proxy = least.service_proxy().expect("via apiserver");
        let answer = proxy.send(request("prometheus", "GET")).await.unwrap();
        assert_eq!(answer.status, 200);
        assert!(
            String::from_utf8_lossy(&answer.body).contains("\"status\":\"success\""),
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        match proxy.send(request("prometheus", "POST")).await {
            Err(ProxyError::Failed(e)) => assert!(
                e.contains("HTTP 403")
                    && e.contains("`create` on `services/proxy` named `http:prometheus:9090`"),
                "{e}"
            ),
            other => panic!("a POST without `create` is refused: {other:?}"),
        }
        let admin = backend(&env.cluster(0).kubeconfig);
        let proxy = admin.service_proxy().expect("via apiserver");
        match proxy.send(request("nosuch", "GET")).await {
            Err(ProxyError::NoService(e)) => assert!(e.contains("HTTP 404"), "{e}"),
            other => panic!("a missing Service is NoService: {other:?}"),
        }
        let began = Instant::now();
        match proxy.send(request("empty", "GET")).await {
            Err(ProxyError::Failed(e)) => assert!(
                e.contains("HTTP 503") && e.contains("no endpoints available"),
                "{e}"
            ),
            other => panic!("a Service without endpoints fails: {other:?}"),
        }
        assert!(
            began.elapsed() < Duration::from_secs(3),
            "not retried: {:?}",
            began.elapsed()
        );
        drop(serve);
    });
    drop(prometheus);
}

/// Creates `object` with `api` (the test's admin client).
async fn create<K>(api: &Api<K>, object: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .unwrap();
}

/// A `job` metric on a Kubernetes cluster is a Job made in that cluster, as Argo's `job`
/// provider makes it, not a process beside the controller: its command exists only in the
/// cluster's image (here, a path no local process could run; kwok completes the Job's Pod),
/// the step passes on the Job's completion, and the measurement names the Job.
#[test]
fn a_job_metric_runs_as_a_job_in_the_cluster() {
    let _one = one_at_a_time();
    let env = start_env(1);
    let dir = tempfile::tempdir().unwrap();
    let steps = "        - setWeight: 50\n        - analysis:\n            templates: [{templateName: smoke}]\n";
    let text = format!(
        r#"{}---
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {{name: smoke}}
spec:
  metrics:
    - name: smoke-test
      count: 1
      provider:
        job:
          metadata:
            labels: {{purpose: smoke}}
          spec:
            backoffLimit: 0
            template:
              spec:
                restartPolicy: Never
                containers:
                  - name: smoke
                    image: registry.example/smoke:1
                    command: ["/only/in/the/image/smoke-test"]
"#,
        manifests(&env, None, steps)
    );
    std::fs::write(dir.path().join("manifests.yaml"), &text).unwrap();
    write_serve_config(dir.path());
    let h2 = argo_hash(V2);
    let runtime = runtime();
    runtime.block_on(async {
        let cluster = Cluster::prepare(env.cluster(0)).await;
        let _serve = release_through_the_analysis(&cluster, dir.path()).await;
        let jobs: Api<k8s_openapi::api::batch::v1::Job> =
            Api::namespaced(env.cluster(0).client().await.unwrap(), "default");
        let made = jobs
            .list(&ListParams::default().labels("purpose=smoke,flotilla.dev/rollout=payments"))
            .await
            .unwrap()
            .items;
        assert_eq!(made.len(), 1, "{made:#?}");
        let job = serde_json::to_value(&made[0]).unwrap();
        let name = job["metadata"]["name"].as_str().unwrap().to_owned();
        assert!(name.starts_with("payments-smoke-test-"), "{name}");
        assert!(
            job["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == "Complete" && c["status"] == "True"),
            "{}",
            job["status"]
        );
        let runs = cluster.step_runs(&h2).await;
        assert_eq!(runs.len(), 1, "{runs:?}");
        let measurement = &runs[0]["status"]["metricResults"][0]["measurements"][0];
        assert_eq!(measurement["phase"], "Successful", "{}", runs[0]["status"]);
        assert_eq!(runs[0]["status"]["phase"], "Successful");
        assert_eq!(
            measurement["metadata"]["job-name"],
            name.as_str(),
            "{measurement}"
        );
        assert_eq!(measurement["metadata"]["job-namespace"], "default");
    });
}

/// Whether `manager`'s entry in an object's `managedFields` owns `spec.<field>`.
fn owns_spec_field(object: &Value, manager: &str, field: &str) -> bool {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry["manager"] == manager)
        .any(|entry| {
            entry["fieldsV1"]["f:spec"]
                .get(format!("f:{field}"))
                .is_some()
        })
}

/// A HorizontalPodAutoscaler (the controller-manager's own controller) scales a Rollout
/// Flotilla applies (`rolloutSource: flotilla`): the Rollout is made with the manifest's count,
/// the HPA then owns `spec.replicas` (Flotilla's later applies leave it out, and a new revision
/// does not take it back), and the ReplicaSets are sized by the HPA's count at every step, also
/// when it scales mid-step, as Argo's controller sizes them.
#[test]
fn an_hpa_owns_the_count_and_the_replica_sets_follow_it() {
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    let _one = one_at_a_time();
    let (env, dir) = one_cluster_half_and_pause();
    let (h1, h2) = (argo_hash(V1), argo_hash(V2));
    runtime().block_on(async {
        let cluster = Cluster::prepare(env.cluster(0)).await;
        // The HPA is there before the Rollout (as an Argo CD sync makes both at once).
        let hpas: Api<HorizontalPodAutoscaler> =
            Api::namespaced(cluster.client.clone(), "default");
        let hpa = |min: i32| {
            serde_json::from_value::<HorizontalPodAutoscaler>(json!({
                "metadata": {"name": "payments"},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "payments"},
                    "minReplicas": min,
                    "maxReplicas": 10,
                    "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]
                }
            }))
            .unwrap()
        };
        hpas.create(&PostParams::default(), &hpa(6)).await.unwrap();
        let serve = Serve::start(dir.path());
        let rollout = wait_rollout(
            &cluster,
            &serve,
            "1.0 healthy at the HPA's 6 (the manifest says 3)",
            Duration::from_secs(120),
            |r, sets| {
                r["spec"]["replicas"] == 6
                    && sets.get(&h1) == Some(&(6, 6))
                    && r["status"]["phase"] == "Healthy"
            },
        )
        .await;
        assert!(
            !owns_spec_field(&rollout, "flotilla", "replicas"),
            "the HPA's count is not Flotilla's: {}",
            rollout["metadata"]["managedFields"]
        );
        assert!(owns_spec_field(&rollout, "flotilla", "template"));
        // A new revision: its apply leaves the count alone, the canary is half of 6.
        set_image(&serve, V2).await;
        wait_rollout(
            &cluster,
            &serve,
            "the canary at 50% of 6",
            Duration::from_secs(90),
            |r, sets| {
                sets.get(&h2) == Some(&(3, 3))
                    && sets.get(&h1) == Some(&(3, 3))
                    && r["status"]["currentStepIndex"] == 1
            },
        )
        .await;
        // The HPA scales up mid-pause: both ReplicaSets follow, still half and half.
        let mut scaled = hpas.get("payments").await.unwrap();
        scaled.spec.as_mut().unwrap().min_replicas = Some(8);
        hpas.replace("payments", &PostParams::default(), &scaled)
            .await
            .unwrap();
        let rollout = wait_rollout(
            &cluster,
            &serve,
            "the canary at 50% of the HPA's 8",
            Duration::from_secs(90),
            |r, sets| {
                r["spec"]["replicas"] == 8
                    && sets.get(&h2) == Some(&(4, 4))
                    && sets.get(&h1) == Some(&(4, 4))
            },
        )
        .await;
        assert_eq!(rollout["status"]["currentStepIndex"], 1, "still paused");
        assert_eq!(
            rollout["spec"]["template"]["spec"]["containers"][0]["image"],
            V2
        );
        serve
            .client()
            .command(
                "payments",
                &OperatorCommand::Promote {
                    wave: None,
                    full: false,
                },
            )
            .await
            .unwrap();
        let rollout = wait_rollout(
            &cluster,
            &serve,
            "2.0 healthy at 8",
            Duration::from_secs(90),
            |r, sets| {
                sets.get(&h2) == Some(&(8, 8))
                    && sets.get(&h1).is_none_or(|(n, _)| *n == 0)
                    && r["status"]["phase"] == "Healthy"
                    && r["status"]["stableRS"] == h2.as_str()
            },
        )
        .await;
        assert_eq!(rollout["spec"]["replicas"], 8);
        assert!(!owns_spec_field(&rollout, "flotilla", "replicas"));
    });
}

//! Flotilla in a hub, end to end on real API servers: the test environment's cluster 0 is the hub
//! (Flotilla's and Argo's CRDs; the Fleet, FleetRollout, Rollout and AnalysisTemplate as custom
//! resources, as Argo CD would sync them from Git), clusters 1–3 are spokes registered in the
//! hub's `argocd` namespace as Argo CD registers clusters (a cluster Secret with a bearer token
//! and the CA, one whose token comes from an allowed exec credential plugin, one kubeconfig
//! Secret). `flotilla serve` runs as a hub's Pod would (its in-cluster
//! configuration: the Pod's environment and mounted ServiceAccount token, with the rights
//! `flotilla install` gives it only) and reads everything from the hub: the
//! spokes join the Fleet by label and the waves select them by the Secrets' labels. A
//! regression in one spoke (its metrics from a real Prometheus) rolls that spoke back alone; the
//! hub's FleetRollout status, the hub Rollout's aggregate status and the history say so. Secrets
//! that cannot be used (a garbled config, an unreachable server, an unlisted credential plugin,
//! a kubeconfig naming the controller's token file, a token lacking the permissions) are
//! clusters with conditions
//! naming them, in a fleet of their own, never skipped in silence. The hub's API server killed
//! mid-rollout: the fleet waits until it answers again, then resumes. The controller keeps its
//! state in the hub (`hub.state: hub`): killed with SIGKILL mid-step, mid-bake and right after
//! the failure decision, each time started again as a new Pod with nothing local, it goes on as
//! an uninterrupted run would, makes nothing twice, and applies the operator's `FleetCommand`
//! accepted while no controller ran, once.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::k8s::{
    ANALYSED_STEPS, Cluster, Series, Serve, V1, V2, argo_hash, exporter, manifests, one_at_a_time,
    regressing_in, service_account_token, start_env_with, status_of,
};
use common::{flotilla, runtime};
use flotilla_runtime::demo;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn hub_resource(group: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1alpha1", kind))
}

/// Flotilla's CRDs as files, from `flotilla crds`.
fn flotilla_crds(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let output = flotilla().arg("crds").output().unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    text.split("---\n")
        .filter(|d| !d.trim().is_empty())
        .enumerate()
        .map(|(i, document)| {
            let path = dir.join(format!("flotilla-crd-{i}.yaml"));
            std::fs::write(&path, document).unwrap();
            path
        })
        .collect()
}

/// Applies `object` to the hub as Argo CD's controller would (server-side apply, its manager).
async fn argocd_apply(hub: &kube::Client, object: &Value) {
    let kind = object["kind"].as_str().unwrap();
    let group = object["apiVersion"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    let name = object["metadata"]["name"].as_str().unwrap();
    let api: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), "flotilla", &hub_resource(group, kind));
    api.patch(
        name,
        &PatchParams::apply("argocd-controller").force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {kind} {name} to the hub: {e}"));
}

/// The hub's desired state: Fleets `shop` (the spokes labelled `env: prod`) and `lab` (those
/// labelled `env: lab`), FleetRollouts `payments` (waves by the Secrets' `ring` label) and
/// `lab-payments`, the Rollout (a template: the instance-id label) and the analysis template.
fn hub_objects(env: &flotilla_testenv::TestEnv, image: &str) -> Vec<Value> {
    // The analysed steps with a longer first pause: a controller killed mid-step finds the
    // cluster still in it after its restart.
    let steps = ANALYSED_STEPS.replacen("pause: {duration: 1s}", "pause: {duration: 12s}", 1);
    let text = manifests(env, None, &steps);
    let load = flotilla_core::manifest::load_bytes("manifests.yaml", text.as_bytes());
    let mut rollout = None;
    let mut template = None;
    for m in &load.manifests {
        match &m.manifest {
            flotilla_core::spec::Manifest::Rollout(r) => {
                rollout = Some(serde_json::to_value(r).unwrap())
            }
            flotilla_core::spec::Manifest::AnalysisTemplate(t) => {
                template = Some(serde_json::to_value(t).unwrap())
            }
            _ => {}
        }
    }
    let mut rollout = rollout.unwrap();
    rollout["metadata"]["labels"] =
        json!({"argo-rollouts.argoproj.io/controller-instance-id": "flotilla"});
    rollout["metadata"]["annotations"] = json!({
        "argocd.argoproj.io/tracking-id": "hub-app:argoproj.io/Rollout:flotilla/payments",
        // Argo Rollouts' notifications, subscribed as with Argo's controller.
        "notifications.argoproj.io/subscribe.on-rollout-aborted.hub-hook": ""
    });
    rollout["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
    let spokes = |env_label: &str| {
        json!({
            "selector": {"matchLabels": {"env": env_label}},
            "namespace": "default",
            "rolloutSource": "flotilla"
        })
    };
    vec![
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Fleet",
               "metadata": {"name": "shop"}, "spec": {"spokes": spokes("prod")}}),
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Fleet",
               "metadata": {"name": "lab"}, "spec": {"spokes": spokes("lab")}}),
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "FleetRollout",
        "metadata": {"name": "payments"},
        "spec": {"fleet": "shop", "rollout": "payments", "bakeTime": "15s", "waves": {"steps": [
            {"matchLabels": {"ring": "canary"}},
            {"matchLabels": {"ring": "early"}},
            {"matchLabels": {"ring": "late"}}
        ]}}}),
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "FleetRollout",
               "metadata": {"name": "lab-payments"},
               "spec": {"fleet": "lab", "rollout": "payments",
                        "waves": {"steps": [{"matchLabels": {"env": "lab"}}]}}}),
        rollout,
        template.unwrap(),
    ]
}

/// Applies what `flotilla install` prints to the hub (the CRDs, the ServiceAccount and RBAC of
/// docs/kubernetes-hub-rbac.yaml, the configuration, the store's volume, the Deployment and the
/// Service, all accepted by the API server) and mounts that ServiceAccount's credentials as the
/// kubelet mounts them in a Pod (`token` from a TokenRequest, the hub's `ca.crt`, `namespace`)
/// in `dir/serviceaccount`, which it returns: the controller runs with those rights only, by
/// its in-cluster configuration.
async fn hub_service_account(
    env: &flotilla_testenv::TestEnv,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    let hub = env.cluster(0).client().await.unwrap();
    for object in common::installed(&["--namespace", "flotilla", "--image", "flotilla:e2e"]) {
        let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (String::new(), "v1".to_owned()),
        };
        let kind = object["kind"].as_str().unwrap();
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(&group, &version, kind));
        let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(hub.clone(), ns, &resource),
            None => Api::all_with(hub.clone(), &resource),
        };
        api.patch(
            object["metadata"]["name"].as_str().unwrap(),
            &PatchParams::apply("test").force(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {kind}: {e}"));
    }
    // The Deployment's Pod runs as the ServiceAccount (kwok's fake kubelet runs no container).
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(hub.clone(), "flotilla");
    let deployment = deployments.get("flotilla").await.unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("flotilla"));
    let mount = dir.join("serviceaccount");
    std::fs::create_dir_all(&mount).unwrap();
    let token = service_account_token(env, 0, "flotilla").await;
    std::fs::write(mount.join("token"), token).unwrap();
    let admin = kube::config::Kubeconfig::read_from(&env.cluster(0).kubeconfig).unwrap();
    let cluster = admin.clusters[0].cluster.as_ref().unwrap();
    let ca = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .unwrap()
        }
        (None, Some(path)) => std::fs::read(path).unwrap(),
        (None, None) => panic!("the hub's kubeconfig has no CA"),
    };
    std::fs::write(mount.join("ca.crt"), ca).unwrap();
    std::fs::write(mount.join("namespace"), "flotilla").unwrap();
    mount
}

/// A new Pod of the controller: `flotilla serve` in an empty directory `dir/pod-N` with the
/// ConfigMap's `serve.yaml`; the state is read from the hub, nothing from a disk.
fn start_pod(dir: &std::path::Path, n: usize, env: &[(&str, &str)]) -> Serve {
    let pod = dir.join(format!("pod-{n}"));
    std::fs::create_dir_all(&pod).unwrap();
    std::fs::copy(dir.join("serve.yaml"), pod.join("serve.yaml")).unwrap();
    Serve::start_with(&pod, env)
}

/// SIGKILL: no shutdown of any kind.
fn kill_9(serve: &Serve) {
    let pid = serve.child.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    // Reaped when the Serve is dropped; wait until it is gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{pid}/stat")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z")
    {
        assert!(Instant::now() < deadline, "the controller outlived kill -9");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_hub_drives_its_spokes_from_custom_resources_and_argo_cd_cluster_secrets() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let env = start_env_with(4, flotilla_crds(dir.path()));
    let series: Series = Arc::default();
    let exporter = exporter(series.clone());
    let prometheus = demo::Prometheus::start_new(dir.path().join("prometheus"), &exporter)
        .expect("prometheus (apt-get install prometheus)");
    // cluster-2 (the second wave) regresses on 2.0.
    regressing_in(&series, &env, 2);
    let (h1, h2) = (argo_hash(V1), argo_hash(V2));
    let runtime = runtime();
    runtime.block_on(async {
        let hub = env.cluster(0).client().await.unwrap();
        for name in ["flotilla", "argocd"] {
            Api::<Namespace>::all(hub.clone())
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
                )
                .await
                .unwrap();
        }
        let mut spokes = Vec::new();
        for cluster in &env.clusters()[1..] {
            spokes.push(Cluster::prepare(cluster).await);
        }
        // The spokes, as Argo CD registers them: a cluster Secret with a bearer token and the
        // CA, one whose credentials come from an exec plugin (on the controller's allowlist; it
        // says in `exec-runs` that it ran), and one kubeconfig Secret; their labels are what the
        // waves select.
        let secrets = Api::<Secret>::namespaced(hub.clone(), "argocd");
        let plugin = dir.path().join("argocd-k8s-auth");
        std::fs::write(
            &plugin,
            format!(
                "#!/bin/sh\necho run >> {}\nprintf '{{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"%s\"}}}}' \"$SPOKE_TOKEN\"\n",
                dir.path().join("exec-runs").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let metrics = json!({"flotilla.dev/metrics-address": prometheus.address()});
        for (i, ring) in [(1, "canary"), (2, "early"), (3, "late")] {
            let cluster = env.cluster(i);
            let kubeconfig = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
            let secret = if i == 3 {
                json!({
                    "metadata": {"name": format!("spoke-{i}"), "annotations": metrics,
                                 "labels": {"flotilla.dev/cluster": cluster.name, "env": "prod", "ring": ring}},
                    "stringData": {"kubeconfig": kubeconfig}
                })
            } else {
                let ca = kubeconfig
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
                    .unwrap()
                    .to_owned();
                let config = if i == 2 {
                    json!({
                        "execProviderConfig": {
                            "command": plugin.display().to_string(),
                            "env": {"SPOKE_TOKEN": cluster.token},
                            "apiVersion": "client.authentication.k8s.io/v1beta1"
                        },
                        "tlsClientConfig": {"caData": ca}
                    })
                } else {
                    json!({"bearerToken": cluster.token, "tlsClientConfig": {"caData": ca}})
                };
                json!({
                    "metadata": {"name": format!("spoke-{i}"), "annotations": metrics,
                                 "labels": {"argocd.argoproj.io/secret-type": "cluster", "env": "prod", "ring": ring}},
                    "stringData": {
                        "name": cluster.name, "server": cluster.server,
                        "config": config.to_string()
                    }
                })
            };
            secrets
                .create(&PostParams::default(), &serde_json::from_value(secret).unwrap())
                .await
                .unwrap();
        }
        // Secrets Flotilla cannot use, in the lab fleet: a garbled config, an unreachable
        // server, a credential plugin not on the allowlist, and (as an attacker who may write
        // Secrets there would) a kubeconfig that sends the controller's own token elsewhere.
        for (name, config, server) in [
            ("garbled", "{not json".to_owned(), "https://127.0.0.1:6443".to_owned()),
            (
                "gone",
                json!({"bearerToken": "x", "tlsClientConfig": {"insecure": true}}).to_string(),
                "https://127.0.0.1:1".to_owned(),
            ),
            (
                "unlisted",
                json!({"execProviderConfig": {"command": "/bin/sh", "args": ["-c", "id"]}})
                    .to_string(),
                env.cluster(1).server.clone(),
            ),
        ] {
            let secret = json!({
                "metadata": {"name": name, "annotations": metrics,
                             "labels": {"argocd.argoproj.io/secret-type": "cluster", "env": "lab"}},
                "stringData": {"name": format!("lab-{name}"), "server": server, "config": config}
            });
            secrets
                .create(&PostParams::default(), &serde_json::from_value(secret).unwrap())
                .await
                .unwrap();
        }
        // A spoke whose token lacks the permissions: a ServiceAccount of cluster-1 with no Role.
        let one = env.cluster(1).client().await.unwrap();
        Api::<Namespace>::all(one.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "nobody"}})).unwrap(),
            )
            .await
            .unwrap();
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(one, "nobody")
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "flotilla"}})).unwrap(),
            )
            .await
            .unwrap();
        let powerless = service_account_token(&env, 1, "nobody").await;
        let ca = std::fs::read_to_string(&env.cluster(1).kubeconfig)
            .unwrap()
            .lines()
            .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
            .unwrap()
            .to_owned();
        let forbidden = json!({
            "metadata": {"name": "forbidden", "annotations": metrics,
                         "labels": {"argocd.argoproj.io/secret-type": "cluster", "env": "lab"}},
            "stringData": {
                "name": "lab-forbidden", "server": env.cluster(1).server,
                "config": json!({"bearerToken": powerless, "tlsClientConfig": {"caData": ca}}).to_string()
            }
        });
        secrets
            .create(&PostParams::default(), &serde_json::from_value(forbidden).unwrap())
            .await
            .unwrap();
        let stolen = json!({
            "metadata": {"name": "stolen", "annotations": metrics,
                         "labels": {"flotilla.dev/cluster": "lab-stolen", "env": "lab"}},
            "stringData": {"kubeconfig": format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts: [{{name: c, context: {{cluster: k, user: u}}}}]\nclusters: [{{name: k, cluster: {{server: \"https://127.0.0.1:1\", insecure-skip-tls-verify: true}}}}]\nusers: [{{name: u, user: {{tokenFile: {}}}}}]\n",
                dir.path().join("serviceaccount/token").display()
            )}
        });
        secrets
            .create(&PostParams::default(), &serde_json::from_value(stolen).unwrap())
            .await
            .unwrap();
        // The controller runs as a Pod of the hub would: no kubeconfig, the in-cluster
        // configuration from the Pod's environment and its mounted ServiceAccount (that of
        // `flotilla install`: those rights are enough).
        let mount = hub_service_account(&env, dir.path()).await;
        // The previous release kept the state in a file (`state: store`, on a volume); this one
        // in the hub. The first Pod runs as the previous release would.
        for (file, state) in [("serve-store.yaml", "store"), ("serve.yaml", "hub")] {
            std::fs::write(
                dir.path().join(file),
                format!(
                    "listen: \"127.0.0.1:0\"\nstore: state.redb\ntick: 300ms\nhub: {{serviceAccountDir: \"{}\", execAllowlist: [\"{}\"], namespace: flotilla, spokeNamespace: argocd, state: {state}}}\n",
                    mount.display(),
                    plugin.display()
                ),
            )
            .unwrap();
        }
        let port = env.cluster(0).server.rsplit(':').next().unwrap().to_owned();
        let pod_env = [
            ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
            ("KUBERNETES_SERVICE_PORT", port.as_str()),
        ];
        let pod = dir.path().join("pod-0");
        std::fs::create_dir_all(&pod).unwrap();
        std::fs::copy(dir.path().join("serve-store.yaml"), pod.join("serve.yaml")).unwrap();
        let serve = Serve::start_with(&pod, &pod_env);
        // A fresh install: the controller started with no FleetRollout in the hub; those Argo CD
        // syncs now start without a restart.
        for object in hub_objects(&env, V1) {
            argocd_apply(&hub, &object).await;
        }
        serve
            .wait_for("1.0 on every spoke", Duration::from_secs(120), |v| {
                v.phase == "Completed"
            })
            .await;
        // cluster-2 was reached with the allowed plugin's credentials.
        let runs = std::fs::read_to_string(dir.path().join("exec-runs")).unwrap_or_default();
        assert!(runs.starts_with("run"), "the exec plugin never ran: {}", serve.log());
        for spoke in &spokes {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let sets = spoke.replica_sets().await;
                let rollout = spoke.rollout().await;
                let ok = sets.get(&h1) == Some(&(3, 3))
                    && rollout
                        .as_ref()
                        .is_some_and(|r| r["status"]["phase"] == "Healthy");
                if ok {
                    let r = rollout.unwrap();
                    // The hub's Argo CD tracking stays in the hub.
                    assert!(
                        r["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"].is_null(),
                        "{}",
                        r["metadata"]
                    );
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{}: 1.0 not settled: {sets:?}\n{}",
                    spoke.name,
                    serve.log()
                );
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
        // Nothing of the hub's Rollout runs in the hub: it is a template (the only ReplicaSet
        // there is the installed Deployment's).
        let hub_sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
            Api::namespaced(hub.clone(), "flotilla");
        let names: Vec<String> = hub_sets
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect();
        assert!(names.iter().all(|n| n.starts_with("flotilla-")), "{names:?}");

        // The lab fleet: each unusable Secret is a cluster with a condition naming it.
        let condition = |lab: &flotilla_runtime::controller::record::FleetView, name: &str| {
            lab.waves
                .iter()
                .flat_map(|w| w.clusters.iter())
                .find(|c| c.name == name)
                .and_then(|c| c.condition.clone())
                .unwrap_or_default()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let lab = serve.client().fleet("lab-payments").await.unwrap();
            let garbled = condition(&lab, "lab-garbled");
            let (unlisted, stolen) = (condition(&lab, "lab-unlisted"), condition(&lab, "lab-stolen"));
            let forbidden = condition(&lab, "lab-forbidden");
            if garbled.contains("Secret argocd/garbled")
                && !condition(&lab, "lab-gone").is_empty()
                && !unlisted.is_empty()
                && !stolen.is_empty()
                && !forbidden.is_empty()
            {
                assert!(
                    forbidden.contains("Forbidden: cannot ")
                        && forbidden.contains("rollouts.argoproj.io")
                        && forbidden.contains("system:serviceaccount:nobody:flotilla"),
                    "{forbidden}"
                );
                assert!(garbled.contains("config"), "{garbled}");
                assert!(
                    unlisted.contains("Secret argocd/unlisted: config.execProviderConfig:")
                        && unlisted.contains("/bin/sh")
                        && unlisted.contains("execAllowlist"),
                    "{unlisted}"
                );
                assert!(
                    stolen.contains("Secret argocd/stolen: kubeconfig: users[u].user.tokenFile"),
                    "{stolen}"
                );
                break;
            }
            assert!(Instant::now() < deadline, "lab: {lab:#?}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }

        // The upgrade: the new release keeps the state in the hub. Its first Pod still has the
        // volume with the store file: it imports it once (renamed after), and the fleets go on
        // with their history instead of starting over.
        let adopted = serve.client().history("payments").await.unwrap();
        kill_9(&serve);
        drop(serve);
        let pod = dir.path().join("pod-1");
        std::fs::create_dir_all(&pod).unwrap();
        std::fs::copy(dir.path().join("pod-0/state.redb"), pod.join("state.redb")).unwrap();
        let serve = start_pod(dir.path(), 1, &pod_env);
        assert!(pod.join("state.redb.imported").exists(), "{}", serve.log());
        assert!(!pod.join("state.redb").exists());
        assert!(serve.log().contains("imported the store into the hub"), "{}", serve.log());
        let kept = serve.client().history("payments").await.unwrap();
        let messages = |h: &[flotilla_runtime::controller::record::AuditEntry]| {
            h.iter().map(|e| e.message.clone()).collect::<Vec<_>>()
        };
        assert!(
            messages(&adopted).iter().all(|m| messages(&kept).contains(m)),
            "{adopted:#?}\n{kept:#?}"
        );
        assert_eq!(serve.client().fleet("payments").await.unwrap().phase, "Completed");

        // Argo Rollouts' notification ConfigMap in the hub's namespace, as for Argo's
        // controller: a webhook to a receiver of the test's.
        let hooked: Arc<std::sync::Mutex<Vec<Value>>> = Arc::default();
        let receiver = {
            let hooked = hooked.clone();
            axum::Router::new().route(
                "/hook",
                axum::routing::post(move |body: String| {
                    let hooked = hooked.clone();
                    async move {
                        hooked
                            .lock()
                            .unwrap()
                            .push(serde_json::from_str(&body).unwrap_or(Value::String(body)));
                        "ok"
                    }
                }),
            )
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let hook = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, receiver).await.unwrap() });
        let config_map: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "argo-rollouts-notification-configmap"},
            "data": {
                "service.webhook.hub-hook": format!("url: http://{hook}/hook\n"),
                "template.rollout-aborted": "webhook:\n  hub-hook:\n    method: POST\n    body: |\n      {\"rollout\": \"{{.rollout.metadata.name}}\", \"cluster\": \"{{.flotilla.cluster}}\"}\n",
                "trigger.on-rollout-aborted": "- send: [rollout-aborted]\n"
            }
        }))
        .unwrap();
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(hub.clone(), "flotilla")
            .create(&PostParams::default(), &config_map)
            .await
            .unwrap();

        // The release: Argo CD syncs 2.0 to the hub's Rollout.
        let mut objects = hub_objects(&env, V2);
        argocd_apply(&hub, &objects.remove(4)).await;

        let step = |v: &flotilla_runtime::controller::record::FleetView| {
            v.waves[0].clusters[0].step.clone()
        };
        // kill -9 of the controller mid-step, and a start of a new Pod with nothing local: it
        // reads the fleet's state from the hub and goes on from the same step.
        let before = serve
            .wait_for("cluster-1 on 2.0", Duration::from_secs(60), |v| {
                status_of(v, "cluster-1") == "Progressing" && step(v).is_some()
            })
            .await;
        kill_9(&serve);
        let spoke_step = spokes[0].rollout().await.unwrap()["status"]["currentStepIndex"].clone();
        let serve = start_pod(dir.path(), 2, &pod_env);
        let after = serve.client().fleet("payments").await.unwrap();
        assert_eq!(status_of(&after, "cluster-1"), "Progressing", "{after:#?}");
        assert!(step(&after) >= step(&before), "{before:#?}\n{after:#?}");
        assert!(
            spoke_step.as_i64().unwrap() >= 1,
            "the step was not reached before the kill: {spoke_step}"
        );

        // The hub's API server is killed mid-rollout: every fleet waits (nothing promoted,
        // rolled back or consumed while its intent cannot be seen), then resumes.
        env.kill_apiserver(0).unwrap();
        let down = serve
            .wait_for("the fleet waits for the hub", Duration::from_secs(20), |v| {
                v.errors.iter().any(|e| e.contains("hub's API server does not answer"))
            })
            .await;
        let spoke_step = spokes[0].rollout().await.unwrap()["status"]["currentStepIndex"].clone();
        tokio::time::sleep(Duration::from_secs(6)).await;
        let still = serve.client().fleet("payments").await.unwrap();
        assert_eq!(step(&still), step(&down), "{still:#?}");
        assert_eq!(status_of(&still, "cluster-1"), "Progressing", "{still:#?}");
        assert_eq!(status_of(&still, "cluster-2"), "NotStarted", "{still:#?}");
        assert_eq!(
            spokes[0].rollout().await.unwrap()["status"]["currentStepIndex"],
            spoke_step
        );
        env.restore_apiserver(0).unwrap();
        serve
            .wait_for("the fleet goes on", Duration::from_secs(30), |v| v.errors.is_empty())
            .await;

        // kill -9 mid-bake (cluster-1 validated, the wave's bake running); while no controller
        // runs, an operator pauses the fleet with a FleetCommand: accepted by the hub, applied by
        // the next controller, once.
        serve
            .wait_for("wave 1 bakes", Duration::from_secs(90), |v| {
                status_of(v, "cluster-1") == "Validated"
            })
            .await;
        kill_9(&serve);
        let serve_was = serve;
        let commands: Api<DynamicObject> = Api::namespaced_with(
            hub.clone(),
            "flotilla",
            &hub_resource("flotilla.dev", "FleetCommand"),
        );
        let pause: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "FleetCommand",
            "metadata": {"name": "pause-for-the-night"},
            "spec": {"fleetRollout": "payments", "command": {"command": "pause"}, "operator": "night-shift"}
        }))
        .unwrap();
        commands.create(&PostParams::default(), &pause).await.unwrap();
        let serve = start_pod(dir.path(), 3, &pod_env);
        drop(serve_was);
        let consumed = |name: &str| {
            let commands = commands.clone();
            let name = name.to_owned();
            async move {
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    let object = serde_json::to_value(commands.get(&name).await.unwrap()).unwrap();
                    if object["status"]["phase"] == "Consumed" {
                        return;
                    }
                    assert!(Instant::now() < deadline, "{name} not consumed: {object:#}");
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        };
        consumed("pause-for-the-night").await;
        let paused = serve
            .wait_for("the fleet paused", Duration::from_secs(30), |v| v.paused)
            .await;
        assert_eq!(status_of(&paused, "cluster-2"), "NotStarted", "{paused:#?}");
        // Resumed through the HTTP API: in a hub it is a FleetCommand too.
        serve
            .client()
            .command(
                "payments",
                &flotilla_runtime::controller::record::OperatorCommand::Resume,
            )
            .await
            .unwrap();
        serve
            .wait_for("the fleet resumed", Duration::from_secs(30), |v| !v.paused)
            .await;
        let listed = commands.list(&Default::default()).await.unwrap().items;
        assert_eq!(listed.len(), 2, "{listed:#?}");
        for object in &listed {
            consumed(object.metadata.name.as_deref().unwrap()).await;
        }

        // kill -9 right after the failure decision: the next controller keeps it.
        serve
            .wait_for("cluster-2 rolled back", Duration::from_secs(180), |v| {
                status_of(v, "cluster-2") == "RolledBack"
            })
            .await;
        kill_9(&serve);
        let serve_was = serve;
        let serve = start_pod(dir.path(), 4, &pod_env);
        drop(serve_was);
        let view = serve
            .wait_for("cluster-2 rolled back", Duration::from_secs(180), |v| {
                status_of(v, "cluster-2") == "RolledBack"
                    && matches!(v.phase.as_str(), "Halted" | "Aborted")
            })
            .await;
        assert_eq!(status_of(&view, "cluster-1"), "Validated", "{view:#?}");
        assert_eq!(status_of(&view, "cluster-3"), "Held", "{view:#?}");
        assert_eq!(view.waves.len(), 3);
        assert_eq!(view.waves[0].clusters[0].name, "cluster-1");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let c1 = spokes[0].replica_sets().await;
            let c2 = spokes[1].replica_sets().await;
            let c3 = spokes[2].replica_sets().await;
            let settled = c1.get(&h2) == Some(&(3, 3))
                && c2.get(&h1) == Some(&(3, 3))
                && c2.get(&h2).is_none_or(|s| s.0 == 0)
                && c3.get(&h1) == Some(&(3, 3))
                && !c3.contains_key(&h2);
            if settled {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "spokes not as decided: {c1:?} {c2:?} {c3:?}\n{}",
                serve.log()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert_eq!(spokes[1].selector("payments-stable").await.as_deref(), Some(h1.as_str()));
        // Nothing was made twice across the restarts: one analysis run per analysed step (the
        // rolled-back cluster's may already be cleaned up with its canary), none where held.
        for (spoke, most) in [(&spokes[0], 1), (&spokes[1], 1), (&spokes[2], 0)] {
            let made = spoke.step_runs(&h2).await;
            assert!(made.len() <= most, "{}: {made:#?}", spoke.name);
        }
        assert_eq!(spokes[0].step_runs(&h2).await.len(), 1);

        // The hub tells it: the FleetRollout's status (bounded summary), the hub Rollout's
        // aggregate status in Argo's shape.
        let fleet_rollouts: Api<DynamicObject> = Api::namespaced_with(
            hub.clone(),
            "flotilla",
            &hub_resource("flotilla.dev", "FleetRollout"),
        );
        let rollouts: Api<DynamicObject> = Api::namespaced_with(
            hub.clone(),
            "flotilla",
            &hub_resource("argoproj.io", "Rollout"),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let fr = serde_json::to_value(fleet_rollouts.get("payments").await.unwrap()).unwrap();
            let r = serde_json::to_value(rollouts.get("payments").await.unwrap()).unwrap();
            let status = &fr["status"];
            let told = matches!(status["phase"].as_str(), Some("Halted" | "Aborted"))
                && status["clusters"]["counts"]["RolledBack"] == 1
                && r["status"]["phase"] == "Degraded";
            if told {
                assert_eq!(status["clusters"]["total"], 3, "{status:#}");
                assert_eq!(status["clusters"]["counts"]["Validated"], 1, "{status:#}");
                let named = status["clusters"]["named"].as_array().unwrap();
                assert_eq!(named[0]["name"], "cluster-2", "{status:#}");
                assert_eq!(named[0]["failure"]["metric"], "error-rate", "{status:#}");
                assert_eq!(status["wave"], "2/3", "{status:#}");
                assert_eq!(
                    status["observedGeneration"], fr["metadata"]["generation"],
                    "{status:#}"
                );
                assert_eq!(
                    r["status"]["observedGeneration"],
                    r["metadata"]["generation"].as_i64().unwrap().to_string()
                );
                let message = r["status"]["message"].as_str().unwrap();
                assert!(message.contains("1 RolledBack"), "{message}");
                // The writes came from Flotilla's own field manager, on the status only.
                let managers: Vec<&str> = r["metadata"]["managedFields"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|f| f["manager"] == "flotilla-hub")
                    .map(|f| f["subresource"].as_str().unwrap_or(""))
                    .collect();
                assert_eq!(managers, ["status"], "{:#}", r["metadata"]["managedFields"]);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the hub does not tell it: {:#} {:#}\n{}",
                fr["status"],
                r["status"],
                serve.log()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // A spoke leaves (its Secret deleted) and comes back, without a restart: the fleet is
        // re-planned each time, and the returning spoke, held by its wave, runs what it ran.
        let spoke3 = serde_json::to_value(secrets.get("spoke-3").await.unwrap()).unwrap();
        secrets
            .delete("spoke-3", &Default::default())
            .await
            .unwrap();
        let view = serve
            .wait_for("cluster-3 gone", Duration::from_secs(30), |v| {
                v.waves.iter().all(|w| w.clusters.iter().all(|c| c.name != "cluster-3"))
            })
            .await;
        assert_eq!(status_of(&view, "cluster-2"), "RolledBack", "{view:#?}");
        let mut back: Secret = serde_json::from_value(json!({
            "metadata": {"name": "spoke-3", "labels": spoke3["metadata"]["labels"],
                         "annotations": spoke3["metadata"]["annotations"]},
            "data": spoke3["data"]
        }))
        .unwrap();
        back.metadata.resource_version = None;
        secrets.create(&PostParams::default(), &back).await.unwrap();
        let view = serve
            .wait_for("cluster-3 back", Duration::from_secs(30), |v| {
                !status_of(v, "cluster-3").is_empty()
            })
            .await;
        assert!(
            !matches!(status_of(&view, "cluster-3"), "Validated" | "RolledBack" | "Progressing"),
            "{view:#?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let c3 = spokes[2].replica_sets().await;
        assert!(c3.get(&h1) == Some(&(3, 3)) && !c3.contains_key(&h2), "{c3:?}");
        let history = serve.client().history("payments").await.unwrap();
        for said in [
            "cluster cluster-3 left the fleet",
            "cluster cluster-3 joined the fleet",
            "the hub's API server does not answer",
            "the hub's API server answers again",
        ] {
            assert!(
                history.iter().any(|e| e.message.starts_with(said)),
                "{said:?} not in {history:#?}"
            );
        }

        // Argo CD deletes the FleetRollout and syncs it again (a prune, an Application made
        // anew): the record is Flotilla's, owned by no FleetRollout, so the fleet keeps its
        // progress and cluster-2 its rollback; nothing starts over, nothing is deployed again.
        fleet_rollouts
            .delete("payments", &Default::default())
            .await
            .unwrap();
        serve
            .wait_for("the FleetRollout gone", Duration::from_secs(30), |v| {
                v.errors.iter().any(|e| e.contains("gone from the desired state"))
            })
            .await;
        argocd_apply(&hub, &hub_objects(&env, V2)[2]).await;
        let view = serve
            .wait_for("the FleetRollout back", Duration::from_secs(30), |v| {
                v.errors.is_empty()
            })
            .await;
        assert_eq!(status_of(&view, "cluster-1"), "Validated", "{view:#?}");
        assert_eq!(status_of(&view, "cluster-2"), "RolledBack", "{view:#?}");
        assert!(
            matches!(view.phase.as_str(), "Halted" | "Aborted"),
            "{view:#?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let c1 = spokes[0].replica_sets().await;
        let c2 = spokes[1].replica_sets().await;
        assert!(
            c1.get(&h2) == Some(&(3, 3))
                && c2.get(&h1) == Some(&(3, 3))
                && c2.get(&h2).is_none_or(|s| s.0 == 0),
            "{c1:?} {c2:?}"
        );

        // Each command was applied once (pause and resume: two), with who sent it.
        let applied: Vec<_> = history
            .iter()
            .filter(|e| e.kind == flotilla_runtime::controller::record::AuditKind::Command)
            .collect();
        assert_eq!(applied.len(), 2, "{applied:#?}");
        assert_eq!(
            applied[0].operator.as_deref(),
            Some("night-shift"),
            "{applied:#?}"
        );
        // Nothing of the state was kept by the Pods: the hub holds it, one record per fleet and
        // per cluster.
        for n in 1..5 {
            assert!(!dir.path().join(format!("pod-{n}/state.redb")).exists());
        }
        let records: Api<DynamicObject> = Api::namespaced_with(
            hub.clone(),
            "flotilla",
            &hub_resource("flotilla.dev", "FleetRolloutRecord"),
        );
        let mut names: Vec<String> = records
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|r| r.metadata.name)
            .filter(|n| n.starts_with("payments"))
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["payments", "payments.cluster-1", "payments.cluster-2", "payments.cluster-3"]
        );

        // The webhook of the hub's notification ConfigMap was sent for cluster-2's abort (at
        // least once: a controller killed between sending and recording it sends it again).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = hooked.lock().unwrap().clone();
            if got.iter().any(|b| b["cluster"] == "cluster-2" && b["rollout"] == "payments") {
                break;
            }
            assert!(Instant::now() < deadline, "no webhook: {got:#?}\n{}", serve.log());
            tokio::time::sleep(Duration::from_millis(300)).await;
        }

        // The CLI against the hub itself (no HTTP API): a verb is a FleetCommand the
        // controller consumes; the progress and the history are read from the hub.
        let cli = |args: &[&str]| {
            let out = flotilla()
                .args(args)
                .args(["--kubeconfig", env.cluster(0).kubeconfig.to_str().unwrap()])
                .env_remove("FLOTILLA_SERVER")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "flotilla {args:?}: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            text
        };
        let listed: Vec<Value> =
            serde_json::from_str(&cli(&["list", "-o", "json"])).unwrap();
        let payments = listed.iter().find(|f| f["name"] == "payments").unwrap();
        assert!(matches!(payments["phase"].as_str(), Some("Halted" | "Aborted")), "{listed:#?}");
        assert_eq!(payments["wave"], 2, "{listed:#?}");
        let shown = cli(&["get", "fleet", "payments"]);
        assert!(shown.contains("cluster-2") && shown.contains("RolledBack"), "{shown}");
        let paused = cli(&["pause", "payments"]);
        assert!(paused.contains("created") && paused.contains("Consumed"), "{paused}");
        let told: Vec<Value> =
            serde_json::from_str(&cli(&["history", "payments", "-o", "json"])).unwrap();
        assert_eq!(
            told.iter().filter(|e| e["kind"] == "command").count(),
            3,
            "{told:#?}"
        );
        let refused = flotilla()
            .args(["get", "rollout", "payments", "--cluster", "cluster-1", "--kubeconfig"])
            .arg(&env.cluster(0).kubeconfig)
            .output()
            .unwrap();
        assert!(!refused.status.success());
        assert!(String::from_utf8_lossy(&refused.stderr).contains("in its spoke"));

        // A status write is not a change of the desired state: nothing was synced again.
        let history = serve.client().history("payments").await.unwrap();
        let syncs = history
            .iter()
            .filter(|e| e.message.contains("new desired revision"))
            .count();
        assert_eq!(syncs, 1, "{history:#?}");
        assert!(
            history
                .iter()
                .any(|e| e.message.contains("cluster-2") && e.message.contains("error-rate")),
            "{history:#?}"
        );
        drop(serve);
    });
    drop(prometheus);
}

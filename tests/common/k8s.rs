//! What the Kubernetes end-to-end tests share: the test environment's clusters with the
//! Rollout's Services, `flotilla serve` driving them, the fleet's manifests (a Rollout
//! `payments` with an analysed canary), an exporter of the metrics the analysis reads, and
//! reading back what each cluster runs.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_core::rollout::pod_template_hash::pod_template_hash;
use flotilla_runtime::controller::client::ApiClient;
use flotilla_runtime::controller::record::{FleetView, OperatorCommand};
use flotilla_testenv::{Options, TestEnv, argo_rollouts_crds};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{Value, json};

use super::{first_line, flotilla, json_field};

pub const V1: &str = "registry.example/payments:1.0";

pub const V2: &str = "registry.example/payments:2.0";

/// One environment at a time: each runs an API server, a controller-manager, a scheduler and
/// kwok per cluster, which is the machine's two cores' worth.
pub static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn template(image: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": "payments"}},
        "spec": {"containers": [{"name": "app", "image": image}]}
    })
}

pub fn argo_hash(image: &str) -> String {
    pod_template_hash(&template(image), None).unwrap()
}

/// The canary's error ratio per cluster and hash, served as Prometheus text on `/metrics`.
pub type Series = Arc<Mutex<BTreeMap<(String, String), f64>>>;

/// Sets the error ratio `series` serves for every cluster of `env`: 0 on 1.0 and 2.0, but 0.4 on
/// 2.0 in cluster `regressing` (it regresses on the new version; the others do not).
pub fn regressing_in(series: &Series, env: &TestEnv, regressing: usize) {
    let mut series = series.lock().unwrap();
    for (i, cluster) in env.clusters().iter().enumerate() {
        series.insert((cluster.name.clone(), argo_hash(V1)), 0.0);
        let canary = if i == regressing { 0.4 } else { 0.0 };
        series.insert((cluster.name.clone(), argo_hash(V2)), canary);
    }
}

pub fn exporter(series: Series) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let app = axum::Router::new().route(
                "/metrics",
                axum::routing::get(move || {
                    let series = series.clone();
                    async move {
                        let mut text = String::from("# TYPE payments_error_ratio gauge\n");
                        for ((cluster, hash), value) in series.lock().unwrap().iter() {
                            text.push_str(&format!(
                                "payments_error_ratio{{cluster=\"{cluster}\",rollouts_pod_template_hash=\"{hash}\"}} {value}\n"
                            ));
                        }
                        text
                    }
                }),
            );
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    address
}

/// The steps of the analysed canary.
pub const ANALYSED_STEPS: &str = r#"        - setWeight: 34
        - pause: {duration: 1s}
        - analysis:
            templates: [{templateName: error-rate}]
            args:
              - name: canary-hash
                valueFrom: {podTemplateHashValue: Latest}
        - setWeight: 67
        - pause: {duration: 1s}
"#;

/// Fleet `shop` (every cluster of `env` in its own wave, with `prometheus` as its metrics
/// address when there is one), FleetRollout `payments` and its Rollout with `steps`, and the
/// analysis template `error-rate`.
pub fn manifests(env: &TestEnv, prometheus: Option<&str>, steps: &str) -> String {
    let mut clusters = String::new();
    let mut waves = String::new();
    for (i, cluster) in env.clusters().iter().enumerate() {
        clusters.push_str(&format!(
            "    - name: {name}\n      endpoint: {{kubernetes: {{kubeconfig: \"{kubeconfig}\", namespace: default}}}}\n{metrics}",
            name = cluster.name,
            kubeconfig = cluster.kubeconfig.display(),
            metrics = prometheus.map_or(String::new(), |p| format!("      metrics: {{address: \"{p}\"}}\n")),
        ));
        waves.push_str(&format!(
            "        - {{cluster: {}, wave: {}}}\n",
            cluster.name,
            i + 1
        ));
    }
    format!(
        r#"apiVersion: flotilla.dev/v1alpha1
kind: Fleet
metadata: {{name: shop}}
spec:
  clusters:
{clusters}---
apiVersion: flotilla.dev/v1alpha1
kind: FleetRollout
metadata: {{name: payments}}
spec:
  fleet: shop
  rollout: payments
  rolloutSource: flotilla
  waves:
    list:
{waves}---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {{name: payments}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: payments}}}}
  template:
    metadata: {{labels: {{app: payments}}}}
    spec:
      containers: [{{name: app, image: "{V1}"}}]
  strategy:
    canary:
      canaryService: payments-canary
      stableService: payments-stable
      steps:
{steps}---
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {{name: error-rate}}
spec:
  args: [{{name: cluster}}, {{name: canary-hash}}, {{name: metrics-address}}]
  metrics:
    - name: error-rate
      interval: 1s
      count: 3
      failureLimit: 0
      successCondition: result[0] < 0.05
      provider:
        prometheus:
          address: "{{{{args.metrics-address}}}}"
          query: 'max(payments_error_ratio{{cluster="{{{{args.cluster}}}}",rollouts_pod_template_hash="{{{{args.canary-hash}}}}"}})'
"#
    )
}

pub fn rollout_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout"))
}

/// One cluster's objects as the test reads them back.
pub struct Cluster {
    pub name: String,
    pub kubeconfig: String,
    pub client: kube::Client,
    pub events: Api<k8s_openapi::api::core::v1::Event>,
    pub rollouts: Api<DynamicObject>,
    pub analysis_runs: Api<DynamicObject>,
    pub replica_sets: Api<ReplicaSet>,
    pub services: Api<Service>,
}

impl Cluster {
    /// The cluster's APIs, with the Rollout's Services created (as Argo CD would sync them).
    pub async fn prepare(cluster: &flotilla_testenv::Cluster) -> Cluster {
        let client = cluster.client().await.unwrap();
        let services: Api<Service> = Api::namespaced(client.clone(), "default");
        for name in ["payments-stable", "payments-canary"] {
            let service: Service = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"selector": {"app": "payments"}, "ports": [{"port": 80, "targetPort": 8080}]}
            }))
            .unwrap();
            services
                .create(&PostParams::default(), &service)
                .await
                .unwrap();
        }
        Cluster {
            name: cluster.name.clone(),
            kubeconfig: cluster.kubeconfig.display().to_string(),
            client: client.clone(),
            events: Api::namespaced(client.clone(), "default"),
            rollouts: Api::namespaced_with(client.clone(), "default", &rollout_resource()),
            analysis_runs: Api::namespaced_with(
                client.clone(),
                "default",
                &ApiResource::from_gvk(&GroupVersionKind::gvk(
                    "argoproj.io",
                    "v1alpha1",
                    "AnalysisRun",
                )),
            ),
            replica_sets: Api::namespaced(client.clone(), "default"),
            services,
        }
    }

    /// How many reads of Rollouts (GET) and of ReplicaSets (LIST) the API server has answered,
    /// from its own `apiserver_request_total`.
    pub async fn reads_served(&self) -> u64 {
        let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = self.client.request_text(request).await.unwrap();
        text.lines()
            .filter(|line| line.starts_with("apiserver_request_total{"))
            .filter(|line| {
                (line.contains("verb=\"GET\"") && line.contains("resource=\"rollouts\""))
                    || (line.contains("verb=\"LIST\"") && line.contains("resource=\"replicasets\""))
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|n| n as u64)
            .sum()
    }

    pub async fn rollout(&self) -> Option<Value> {
        self.rollouts
            .get_opt("payments")
            .await
            .unwrap()
            .map(|r| serde_json::to_value(r).unwrap())
    }

    /// Each ReplicaSet of the Rollout `payments`: hash -> (spec replicas, ready replicas).
    pub async fn replica_sets(&self) -> BTreeMap<String, (i32, i32)> {
        self.replica_sets
            .list(&ListParams::default().labels("rollouts-pod-template-hash"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|rs| {
                rs.metadata
                    .owner_references
                    .as_ref()
                    .is_some_and(|o| o[0].name == "payments")
            })
            .map(|rs| {
                let hash =
                    rs.metadata.labels.as_ref().unwrap()["rollouts-pod-template-hash"].clone();
                assert_eq!(
                    rs.metadata.name.as_deref(),
                    Some(format!("payments-{hash}").as_str()),
                    "a ReplicaSet is named <rollout>-<hash>"
                );
                let owner = &rs.metadata.owner_references.as_ref().unwrap()[0];
                assert_eq!(
                    (owner.kind.as_str(), owner.name.as_str()),
                    ("Rollout", "payments")
                );
                let spec = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
                let ready = rs
                    .status
                    .as_ref()
                    .and_then(|s| s.ready_replicas)
                    .unwrap_or(0);
                (hash, (spec, ready))
            })
            .collect()
    }

    /// The AnalysisRun objects of revision `hash`'s step analyses.
    pub async fn step_runs(&self, hash: &str) -> Vec<Value> {
        self.analysis_runs
            .list(&ListParams::default().labels(&format!(
                "rollouts-pod-template-hash={hash},rollout-type=Step"
            )))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|r| serde_json::to_value(r).unwrap())
            .collect()
    }

    /// The Events on the Rollout `payments`, oldest first, each as `Type Reason: message`
    /// (`kubectl describe rollout`'s list).
    pub async fn events(&self) -> Vec<String> {
        let mut events = self
            .events
            .list(&ListParams::default().fields("involvedObject.name=payments"))
            .await
            .unwrap()
            .items;
        events.sort_by_key(|e| e.metadata.name.clone());
        events
            .into_iter()
            .filter(|e| e.involved_object.kind.as_deref() == Some("Rollout"))
            .map(|e| {
                format!(
                    "{} {}: {}",
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default()
                )
            })
            .collect()
    }

    /// Waits until an Event of the Rollout contains `text` (at most `limit`); returns them all.
    pub async fn wait_event(&self, text: &str, limit: Duration) -> Vec<String> {
        let deadline = Instant::now() + limit;
        loop {
            let events = self.events().await;
            if events.iter().any(|e| e.contains(text)) {
                return events;
            }
            assert!(
                Instant::now() < deadline,
                "{}: no Event with {text:?}: {events:#?}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub async fn selector(&self, service: &str) -> Option<String> {
        let service = self.services.get(service).await.unwrap();
        service
            .spec?
            .selector?
            .get("rollouts-pod-template-hash")
            .cloned()
    }
}

pub struct Serve {
    pub child: Child,
    pub api: String,
    pub dir: std::path::PathBuf,
}

impl Serve {
    pub fn start(dir: &Path) -> Serve {
        Serve::start_with(dir, &[])
    }

    /// `flotilla serve` with more environment variables (e.g. a Pod's `KUBERNETES_SERVICE_*`).
    pub fn start_with(dir: &Path, envs: &[(&str, &str)]) -> Serve {
        let mut child = flotilla()
            .args(["serve", "--config"])
            .arg(dir.join("serve.yaml"))
            .envs(envs.iter().copied())
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
            .spawn()
            .unwrap();
        let line = first_line(&mut child);
        let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
        assert!(!line.is_empty(), "serve did not start: {log}");
        Serve {
            child,
            api: format!("http://{}", json_field(&line, "api")),
            dir: dir.to_owned(),
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("serve.log")).unwrap_or_default()
    }

    pub fn client(&self) -> ApiClient {
        let token = std::fs::read_to_string(self.dir.join("state.redb.token")).unwrap();
        ApiClient::new(&self.api, Some(token.trim().to_owned()))
    }

    pub async fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&FleetView) -> bool,
    ) -> FleetView {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(view) = self.client().fleet("payments").await {
                if done(&view) {
                    return view;
                }
                assert!(
                    Instant::now() < deadline,
                    "timed out waiting for {what}: {view:#?}\n{}",
                    self.log()
                );
            } else {
                assert!(Instant::now() < deadline, "no fleet view: {}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn status_of<'a>(view: &'a FleetView, cluster: &str) -> &'a str {
    view.waves
        .iter()
        .flat_map(|w| w.clusters.iter())
        .find(|c| c.name == cluster)
        .map_or("", |c| c.status.as_str())
}

/// A test environment of `clusters` clusters with Argo Rollouts' CRDs.
pub fn start_env(clusters: usize) -> TestEnv {
    start_env_with(clusters, Vec::new())
}

/// A test environment of `clusters` clusters with Argo Rollouts' CRDs and `more`.
pub fn start_env_with(clusters: usize, more: Vec<std::path::PathBuf>) -> TestEnv {
    let mut crds = argo_rollouts_crds().expect("Argo Rollouts' CRDs");
    crds.extend(more);
    TestEnv::start(&Options {
        clusters,
        nodes: 2,
        crds,
        ..Options::default()
    })
    .expect("the Kubernetes test environment starts")
}

/// `serve.yaml` in `dir`: the manifests of `manifests.yaml`, a store, a 300 ms tick.
pub fn write_serve_config(dir: &Path) {
    std::fs::write(
        dir.join("serve.yaml"),
        "listen: \"127.0.0.1:0\"\nstore: state.redb\nmanifests: manifests.yaml\ntick: 300ms\n",
    )
    .unwrap();
}

/// `flotilla set image` through the API: a new fleet revision.
pub async fn set_image(serve: &Serve, image: &str) {
    serve
        .client()
        .command(
            "payments",
            &OperatorCommand::SetImage {
                container: None,
                image: image.to_owned(),
            },
        )
        .await
        .unwrap();
}

/// Waits until `cluster`'s Rollout is Healthy on 1.0 with its 3 Pods ready.
pub async fn healthy_on_v1(cluster: &Cluster, serve: &Serve, limit: Duration) -> Value {
    let h1 = argo_hash(V1);
    wait_rollout(cluster, serve, "1.0 healthy", limit, |r, sets| {
        sets.get(&h1) == Some(&(3, 3)) && r["status"]["phase"] == "Healthy"
    })
    .await
}
/// Polls one cluster's Rollout until `done` holds (at most `limit`).
pub async fn wait_rollout(
    cluster: &Cluster,
    serve: &Serve,
    what: &str,
    limit: Duration,
    done: impl Fn(&Value, &BTreeMap<String, (i32, i32)>) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let rollout = cluster.rollout().await.unwrap_or_default();
        let sets = cluster.replica_sets().await;
        if done(&rollout, &sets) {
            return rollout;
        }
        assert!(
            Instant::now() < deadline,
            "{}: timed out waiting for {what}: {sets:?} {}\n{}",
            cluster.name,
            rollout["status"],
            serve.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The time from the fleet's decision to roll cluster `name` back to its canary's routed weight
/// reading 0: `canary` (the weight as the cluster's route says) is read every 10 ms until it has
/// been above 0 and is 0, then the fleet's view is awaited until it says `RolledBack`. Returns
/// the milliseconds (printed, and asserted within one 300 ms tick, with 100 ms of slack for
/// the reads) and that view.
pub async fn decision_to_weight_zero(
    serve: &Serve,
    name: &str,
    what: &str,
    mut canary: impl AsyncFnMut() -> i64,
) -> FleetView {
    let mut zeroed = None;
    let mut had_weight = false;
    let deadline = Instant::now() + Duration::from_secs(120);
    while zeroed.is_none() {
        let weight = canary().await;
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        if weight > 0 {
            had_weight = true;
        } else if had_weight {
            zeroed = Some(at);
        }
        assert!(
            Instant::now() < deadline,
            "{name}'s {what}: {}",
            serve.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let view = serve
        .wait_for(
            &format!("{name} rolled back"),
            Duration::from_secs(60),
            |v| status_of(v, name) == "RolledBack",
        )
        .await;
    let decided = cluster_view(&view, name).decided_at.expect("decided at") as i64;
    let took = zeroed.unwrap() - decided;
    eprintln!("decision to weight 0 in {name}'s {what}: {took} ms (tick 300 ms)");
    assert!(
        took <= 300 + 100,
        "the weight went to 0 {took} ms after the decision (more than one 300 ms tick)"
    );
    view
}

/// A writer that reverts Flotilla's change to object `payments` of `api` each time it sees it
/// (`changed` says so; every 50 ms), as Argo CD's self-heal would without `ignoreDifferences`:
/// a merge patch of `git` with field manager `argocd-controller`. Once the fleet names it in a
/// `TrafficRoutingConflict` on cluster-0 (the condition must contain `key`), Flotilla must stop
/// writing: the writer runs 3 s more, then the number of its reverts is checked against
/// Waits (up to `limit`) until the fleet's view of cluster-0 has a condition that `holds`;
/// returns it.
pub async fn cluster0_condition(
    serve: &Serve,
    what: &str,
    limit: Duration,
    holds: impl Fn(&str) -> bool,
) -> String {
    let view = serve
        .wait_for(what, limit, |v| {
            cluster_view(v, "cluster-0")
                .condition
                .as_deref()
                .is_some_and(&holds)
        })
        .await;
    cluster_view(&view, "cluster-0").condition.clone().unwrap()
}

/// [`flotilla_kube::backend::routes::REVERTS`]. Returns the condition.
pub async fn a_reverter_is_named(
    serve: &Serve,
    api: &Api<DynamicObject>,
    key: &str,
    changed: fn(&Value) -> bool,
    git: Value,
) -> String {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reverter = {
        let (api, stop) = (api.clone(), stop.clone());
        tokio::spawn(async move {
            let mut reverts = 0u32;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let read = serde_json::to_value(api.get("payments").await.unwrap()).unwrap();
                if changed(&read) {
                    let params = kube::api::PatchParams {
                        field_manager: Some("argocd-controller".into()),
                        ..Default::default()
                    };
                    api.patch("payments", &params, &kube::api::Patch::Merge(&git))
                        .await
                        .unwrap();
                    reverts += 1;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            reverts
        })
    };
    let condition = cluster0_condition(
        serve,
        "the traffic routing conflict",
        Duration::from_secs(60),
        |c| c.starts_with("TrafficRoutingConflict"),
    )
    .await;
    assert!(
        condition.contains(key) && condition.contains("argocd-controller"),
        "{condition}"
    );
    // Flotilla stopped writing: the reverter has nothing left to revert.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let reverts = reverter.await.unwrap();
    eprintln!("the reverter reverted {reverts} times before Flotilla named it");
    assert!(
        reverts <= flotilla_kube::backend::routes::REVERTS + 1,
        "Flotilla wrote the weights {reverts} times against the reverter"
    );
    condition
}

/// The managers that wrote an object, from its `managedFields`.
pub fn managers(object: &Value) -> Vec<String> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter_map(|f| f["manager"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The view of one cluster.
pub fn cluster_view<'a>(
    view: &'a FleetView,
    cluster: &str,
) -> &'a flotilla_runtime::controller::record::ClusterView {
    view.waves
        .iter()
        .flat_map(|w| w.clusters.iter())
        .find(|c| c.name == cluster)
        .expect("the cluster is in the view")
}

/// A token of the ServiceAccount `flotilla` in `namespace` of cluster `i` (a TokenRequest, one
/// hour), as a Pod of that account is given.
pub async fn service_account_token(env: &TestEnv, i: usize, namespace: &str) -> String {
    let client = env.cluster(i).client().await.unwrap();
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client, namespace);
    let request: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    accounts
        .create_token_request("flotilla", &PostParams::default(), &request)
        .await
        .expect("a token for the ServiceAccount")
        .status
        .unwrap()
        .token
}

/// A kubeconfig for cluster `i` with the ServiceAccount `flotilla`'s token (of `namespace`).
pub async fn service_account_kubeconfig(
    env: &TestEnv,
    i: usize,
    namespace: &str,
    dir: &Path,
) -> std::path::PathBuf {
    let token = service_account_token(env, i, namespace).await;
    let cluster = env.cluster(i);
    let admin = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
    let path = dir.join(format!("flotilla-{i}.kubeconfig"));
    std::fs::write(&path, admin.replace(&cluster.token, &token)).unwrap();
    path
}

//! N Rollouts on one test cluster, each driven through a whole canary, by Flotilla and by Argo
//! Rollouts' own controller in the same environment, one after the other.
//!
//! The cluster is the test environment's (`flotilla-testenv`: a real kube-apiserver, etcd,
//! controller-manager, scheduler; kwok as the fake kubelet). Each Rollout has 1 replica and the
//! steps `setWeight: 50, pause: 1s`. Flotilla (`flotilla serve`, release build) drives N of them
//! in namespace `flotilla` (one FleetRollout each, `rolloutSource: flotilla`, on a one-cluster
//! Fleet); Argo's controller (built from Argo's module by the test environment) drives N
//! unlabelled ones in namespace `argo`. For each: the first revision is deployed, then every
//! Rollout gets a new image at once; the bench reads the Rollouts every 500 ms and notes when
//! each is Healthy on its new ReplicaSet. It reports the time for all N, the p50/p99 of each
//! Rollout's update-to-Healthy latency, and the controller's peak resident memory (VmHWM).
//! These are whole-system latencies (a poll and a tick included), not a reconcile histogram.
//!
//! Run with `cargo bench --bench kubernetes_rollouts`; `K8S_BENCH_N` (default 100) sets N,
//! `K8S_BENCH_ONLY=flotilla|argo` runs one side, `K8S_BENCH_TIMEOUT` (seconds, default 600)
//! bounds each phase, `K8S_BENCH_HEAPTRACK=FILE` profiles Flotilla's heap with heaptrack,
//! `K8S_BENCH_FLOTILLA_ENV="K=V ..."` sets variables for Flotilla's controller alone.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use flotilla_core::rollout::pod_template_hash::pod_template_hash;
use flotilla_runtime::controller::client::ApiClient;
use flotilla_runtime::controller::record::OperatorCommand;
use flotilla_testenv::{Options, TestEnv, argo_rollouts_crds};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const V1: &str = "registry.example/bench:1";
const V2: &str = "registry.example/bench:2";

fn template(i: usize, image: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": format!("r-{i}")}},
        "spec": {"containers": [{"name": "app", "image": image}]}
    })
}

fn rollout(i: usize, namespace: &str, image: &str, labelled: bool) -> Value {
    let mut labels = json!({});
    if labelled {
        labels["argo-rollouts.argoproj.io/controller-instance-id"] = json!("flotilla");
    }
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": format!("r-{i}"), "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": format!("r-{i}")}},
            "template": template(i, image),
            "strategy": {"canary": {"steps": [{"setWeight": 50}, {"pause": {"duration": "1s"}}]}}
        }
    })
}

fn rollouts_api(client: kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client,
        namespace,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout")),
    )
}

/// Peak resident memory of a process, in MiB (VmHWM).
fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Waits until every Rollout `r-<i>` of `namespace` is Healthy on the ReplicaSet of `image`,
/// noting when each first was; returns those instants.
async fn healthy_on(
    api: &Api<DynamicObject>,
    n: usize,
    image: &str,
    limit: Duration,
) -> Result<BTreeMap<usize, Instant>> {
    let hashes: Vec<String> = (0..n)
        .map(|i| pod_template_hash(&template(i, image), None).expect("a template Go decodes"))
        .collect();
    let deadline = Instant::now() + limit;
    let mut done = BTreeMap::new();
    while done.len() < n {
        if Instant::now() > deadline {
            bail!(
                "{} of {n} Rollouts Healthy on {image} after {limit:?}",
                done.len()
            );
        }
        for r in api.list(&ListParams::default()).await?.items {
            let name = r.metadata.name.clone().unwrap_or_default();
            let Some(i) = name
                .strip_prefix("r-")
                .and_then(|i| i.parse::<usize>().ok())
            else {
                continue;
            };
            let status = &r.data["status"];
            if i < n
                && !done.contains_key(&i)
                && status["phase"] == "Healthy"
                && status["stableRS"] == hashes[i].as_str()
            {
                done.insert(i, Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(done)
}

/// Latencies from `start` to each instant: (all, p50, p99), in seconds.
fn latencies(start: Instant, done: &BTreeMap<usize, Instant>) -> (f64, f64, f64) {
    let mut each: Vec<f64> = done
        .values()
        .map(|t| t.duration_since(start).as_secs_f64())
        .collect();
    each.sort_by(f64::total_cmp);
    let at = |q: f64| each[((each.len() as f64 * q).ceil() as usize).clamp(1, each.len()) - 1];
    (each[each.len() - 1], at(0.50), at(0.99))
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn flotilla(env: &TestEnv, n: usize, limit: Duration) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let client = env.cluster(0).client().await?;
    create_namespace(&client, "flotilla").await?;
    let mut text = format!(
        "apiVersion: flotilla.dev/v1alpha1\nkind: Fleet\nmetadata: {{name: bench}}\nspec:\n  clusters:\n    - name: c\n      endpoint: {{kubernetes: {{kubeconfig: \"{}\", namespace: flotilla, rolloutSource: flotilla}}}}\n",
        env.cluster(0).kubeconfig.display()
    );
    for i in 0..n {
        text.push_str(&format!(
            "---\napiVersion: flotilla.dev/v1alpha1\nkind: FleetRollout\nmetadata: {{name: r-{i}}}\nspec: {{fleet: bench, rollout: r-{i}, waves: {{list: [{{cluster: c, wave: 1}}]}}}}\n---\n{}\n",
            serde_json::to_string(&rollout(i, "flotilla", V1, true))?
        ));
    }
    std::fs::write(dir.path().join("manifests.yaml"), text)?;
    std::fs::write(
        dir.path().join("serve.yaml"),
        "listen: \"127.0.0.1:0\"\nstore: state.redb\nmanifests: manifests.yaml\ntick: 1s\n",
    )?;
    let exe = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/flotilla");
    if !exe.exists() {
        bail!(
            "{} is missing: `cargo build --release` first",
            exe.display()
        );
    }
    // `K8S_BENCH_HEAPTRACK=FILE`: the controller runs under heaptrack (Debian's), which
    // writes its heap profile to FILE (read it with `heaptrack_print FILE.zst`); the peak RSS
    // printed is then heaptrack's wrapper's, not the controller's.
    let heaptrack = std::env::var("K8S_BENCH_HEAPTRACK").ok();
    let mut command = match &heaptrack {
        Some(file) => {
            let mut c = Command::new("heaptrack");
            // `flotilla serve` runs itself again with `MALLOC_ARENA_MAX` when the environment
            // has none, and heaptrack would profile only the process before that `exec`.
            c.args(["-o", file]).arg(&exe).env("MALLOC_ARENA_MAX", "2");
            c
        }
        None => Command::new(&exe),
    };
    // `K8S_BENCH_FLOTILLA_ENV="K=V K2=V2"`: variables for the controller alone (an allocator's
    // settings, or `LD_PRELOAD` of another allocator, measured without touching the rest).
    if let Ok(vars) = std::env::var("K8S_BENCH_FLOTILLA_ENV") {
        for pair in vars.split_whitespace() {
            let (k, v) = pair
                .split_once('=')
                .with_context(|| format!("K8S_BENCH_FLOTILLA_ENV: {pair:?} is not KEY=VALUE"))?;
            command.env(k, v);
        }
    }
    let mut child = command
        .args(["serve", "--config", "serve.yaml"])
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("serve.log"))?)
        .spawn()?;
    // The first JSON line (heaptrack prints its own lines first).
    let mut reader = BufReader::new(child.stdout.take().context("stdout")?);
    let mut line = String::new();
    while reader.read_line(&mut line)? > 0 && !line.trim_start().starts_with('{') {
        line.clear();
    }
    let pid = child.id();
    eprintln!(
        "flotilla: serve pid {pid}, log {}",
        dir.path().join("serve.log").display()
    );
    let _serve = Serve(child);
    let first: Value = serde_json::from_str(&line).context("serve's first line")?;
    let api_address = format!("http://{}", first["api"].as_str().context("api")?);
    let token = std::fs::read_to_string(dir.path().join("state.redb.token"))?;
    let api = ApiClient::new(&api_address, Some(token.trim().to_owned()));
    let rollouts = rollouts_api(client, "flotilla");
    let started = Instant::now();
    healthy_on(&rollouts, n, V1, limit).await?;
    eprintln!(
        "flotilla: {n} first revisions Healthy in {:?}",
        started.elapsed()
    );
    let start = Instant::now();
    for i in 0..n {
        api.command(
            &format!("r-{i}"),
            &OperatorCommand::SetImage {
                container: None,
                image: V2.to_owned(),
            },
        )
        .await?;
    }
    eprintln!("flotilla: {n} commands accepted in {:?}", start.elapsed());
    let done = healthy_on(&rollouts, n, V2, limit).await?;
    report("flotilla", n, start, &done, peak_rss_mib(pid));
    Ok(())
}

async fn argo(env: &TestEnv, n: usize, limit: Duration) -> Result<()> {
    let client = env.cluster(0).client().await?;
    create_namespace(&client, "argo").await?;
    let controller = env.spawn_argo_controller(0)?;
    let rollouts = rollouts_api(client, "argo");
    let apply = PatchParams::apply("bench").force();
    for i in 0..n {
        rollouts
            .patch(
                &format!("r-{i}"),
                &apply,
                &Patch::Apply(rollout(i, "argo", V1, false)),
            )
            .await?;
    }
    let started = Instant::now();
    healthy_on(&rollouts, n, V1, limit).await?;
    eprintln!(
        "argo: {n} first revisions Healthy in {:?}",
        started.elapsed()
    );
    let start = Instant::now();
    for i in 0..n {
        rollouts
            .patch(
                &format!("r-{i}"),
                &apply,
                &Patch::Apply(rollout(i, "argo", V2, false)),
            )
            .await?;
    }
    let done = healthy_on(&rollouts, n, V2, limit).await?;
    report("argo", n, start, &done, peak_rss_mib(controller.id()));
    Ok(())
}

async fn create_namespace(client: &kube::Client, name: &str) -> Result<()> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            name,
            &PatchParams::apply("bench"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
            ),
        )
        .await?;
    Ok(())
}

fn report(who: &str, n: usize, start: Instant, done: &BTreeMap<usize, Instant>, rss: Option<f64>) {
    let (all, p50, p99) = latencies(start, done);
    println!(
        "{who}: N={n}: all Healthy on the new revision {all:.1} s after the update; each: p50 {p50:.1} s, p99 {p99:.1} s; controller peak RSS {} MiB",
        rss.map_or("?".to_owned(), |r| format!("{r:.1}"))
    );
}

fn main() -> Result<()> {
    let n: usize = std::env::var("K8S_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let limit = Duration::from_secs(
        std::env::var("K8S_BENCH_TIMEOUT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(600),
    );
    let only = std::env::var("K8S_BENCH_ONLY").ok();
    let status = Command::new("cargo")
        .args(["build", "--release", "--bin", "flotilla"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()?;
    if !status.success() {
        bail!("cargo build --release failed");
    }
    let env = TestEnv::start(&Options {
        clusters: 1,
        nodes: 4,
        crds: argo_rollouts_crds()?,
        ..Options::default()
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        if only.as_deref() != Some("argo") {
            flotilla(&env, n, limit).await?;
        }
        if only.as_deref() != Some("flotilla") {
            argo(&env, n, limit).await?;
        }
        Ok(())
    })
}

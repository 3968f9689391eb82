//! From a failing measurement to a router serving 0% canary, through real processes.
//!
//! One agent (`flotilla agent`, the demo's process workloads) and one daemon (`flotilla serve`)
//! run a one-cluster fleet whose canary holds at 50% with background analysis: one `web` metric,
//! measured every second from an HTTP server in this process, that fails on its first failing
//! answer (`failureLimit: 0`). Each round waits for the canary at 50%, lets a random fraction of
//! a second pass (so the failure lands anywhere in the daemon's tick), then turns the metric's
//! answer to failing. The server notes when it sent the first failing answer; the bench polls
//! the agent's router weights (`GET /v1/weights`, every millisecond) until the canary's weight
//! is 0 and reports the time between the two, with the daemon's tick beside it. Then `retry`
//! puts the canary back for the next round.
//!
//! The path measured: the answer reaches the daemon's measurement task, which finds it urgent
//! (`ClusterMeasurement::is_urgent`: it fails its condition) and wakes the loop; the tick decides,
//! the decision is persisted (one store transaction), and the cluster's worker sends the desired
//! state to the agent, whose router
//! swaps its table. Run with `cargo bench --bench decision_to_weight_zero`; set
//! `DECISION_BENCH_TICK` (default `1s`) and `DECISION_BENCH_ROUNDS` (default 20).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use flotilla_runtime::controller::client::ApiClient;
use flotilla_runtime::controller::record::OperatorCommand;
use flotilla_runtime::demo::{self, SITES, Scenario};
use rand::{RngExt, SeedableRng};

/// The metric's server: what it answers, and when it first answered failing.
#[derive(Default)]
struct Metric {
    failing: AtomicBool,
    first_failing_answer: Mutex<Option<Instant>>,
}

/// Child processes, killed and reaped on drop.
#[derive(Default)]
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn first_line(child: &mut Child) -> Result<String> {
    let stdout = child.stdout.take().context("no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    if line.is_empty() {
        bail!("the process exited before saying where it listens");
    }
    Ok(line)
}

fn field(line: &str, name: &str) -> Result<String> {
    let value: serde_json::Value = serde_json::from_str(line)?;
    value[name]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no {name:?} in {line}"))
}

fn manifests(control: &str, metric: &str) -> String {
    let cluster = SITES[0].name;
    format!(
        r#"apiVersion: flotilla.dev/v1alpha1
kind: Fleet
metadata: {{name: bench}}
spec:
  clusters:
    - {{name: {cluster}, region: eu-west, endpoint: {{agent: "{control}"}}}}
---
apiVersion: flotilla.dev/v1alpha1
kind: FleetRollout
metadata: {{name: payment-api}}
spec:
  fleet: bench
  rollout: payment-api
  waves:
    list:
      - {{cluster: {cluster}, wave: 1}}
  failurePolicy: {{rollbackScope: failed}}
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {{name: payment-api}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: payment-api}}}}
  template:
    metadata: {{labels: {{app: payment-api}}}}
    spec:
      containers: [{{name: payment-api, image: "payment-api:{new}"}}]
  strategy:
    canary:
      trafficRouting: {{plugins: {{flotilla/agent: {{}}}}}}
      analysis:
        templates: [{{templateName: health}}]
      steps:
        - setWeight: 50
        - pause: {{}}
---
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {{name: health}}
spec:
  metrics:
    - name: health
      interval: 1s
      failureLimit: 0
      successCondition: result < 0.5
      provider:
        web:
          url: "{metric}/value"
          jsonPath: "{{$.value}}"
"#,
        new = demo::NEW,
    )
}

/// The canary's weight at the agent's router.
async fn canary_weight(http: &reqwest::Client, control: &str) -> Result<u64> {
    let weights: serde_json::Value = http
        .get(format!("{control}/v1/weights"))
        .send()
        .await?
        .json()
        .await?;
    weights["canary"]
        .as_u64()
        .with_context(|| format!("no canary weight in {weights}"))
}

async fn wait_weight(
    http: &reqwest::Client,
    control: &str,
    weight: u64,
    limit: Duration,
    poll: Duration,
) -> Result<Instant> {
    let deadline = Instant::now() + limit;
    loop {
        if canary_weight(http, control).await? == weight {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            bail!("the canary's weight did not become {weight} within {limit:?}");
        }
        tokio::time::sleep(poll).await;
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() -> Result<()> {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        // `cargo test --benches` and `cargo bench -- --list` probe bench binaries.
        return Ok(());
    }
    let tick = std::env::var("DECISION_BENCH_TICK").unwrap_or_else(|_| "1s".into());
    let rounds: usize = std::env::var("DECISION_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(bench(&tick, rounds))
}

async fn bench(tick: &str, rounds: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_flotilla"));
    let mut children = Children::default();

    // The metric's server.
    let metric = Arc::new(Metric::default());
    let served = metric.clone();
    let app = axum::Router::new().route(
        "/value",
        axum::routing::get(move || {
            let metric = served.clone();
            async move {
                let failing = metric.failing.load(Ordering::SeqCst);
                if failing {
                    let mut first = metric.first_failing_answer.lock().expect("lock");
                    first.get_or_insert_with(Instant::now);
                }
                axum::Json(serde_json::json!({"value": if failing { 1.0 } else { 0.0 }}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let metric_url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    // The agent.
    demo::write_agent_token(dir.path())?;
    let agent_config = dir.path().join("agent.yaml");
    std::fs::write(
        &agent_config,
        demo::agent_config(&SITES[0], Scenario::Healthy, &exe, 7, 0.0),
    )?;
    let mut agent = Command::new(&exe)
        .args(["agent", "--config"])
        .arg(&agent_config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let line = first_line(&mut agent)?;
    children.0.push(agent);
    let control = format!("http://{}", field(&line, "control")?);

    // The daemon.
    std::fs::write(
        dir.path().join("manifests.yaml"),
        manifests(&control, &metric_url),
    )?;
    std::fs::write(
        dir.path().join("serve.yaml"),
        format!(
            "listen: \"127.0.0.1:0\"\nstore: state.redb\nmanifests: manifests.yaml\ntick: {tick}\nagentTokenFile: {}\n",
            demo::AGENT_TOKEN_FILE
        ),
    )?;
    let mut serve = Command::new(&exe)
        .args(["serve", "--config"])
        .arg(dir.path().join("serve.yaml"))
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("serve.log"))?)
        .spawn()?;
    let line = first_line(&mut serve)?;
    children.0.push(serve);
    let api = format!("http://{}", field(&line, "api")?);
    let token = std::fs::read_to_string(dir.path().join("state.redb.token"))?;
    let client = ApiClient::new(&api, Some(token.trim().to_owned()));
    let http = reqwest::Client::new();

    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut latencies = Vec::new();
    for round in 0..rounds {
        metric.failing.store(false, Ordering::SeqCst);
        *metric.first_failing_answer.lock().expect("lock") = None;
        if round > 0 {
            client
                .command("payment-api", &OperatorCommand::Retry)
                .await
                .context("retry")?;
        }
        // The canary up, with the replicas ready and a passing measurement behind it.
        wait_weight(
            &http,
            &control,
            50,
            Duration::from_secs(120),
            Duration::from_millis(50),
        )
        .await
        .with_context(|| {
            format!(
                "round {round}: {}",
                std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default()
            )
        })?;
        tokio::time::sleep(Duration::from_millis(rng.random_range(1000..2000))).await;
        metric.failing.store(true, Ordering::SeqCst);
        let zero = wait_weight(
            &http,
            &control,
            0,
            Duration::from_secs(30),
            Duration::from_millis(1),
        )
        .await
        .with_context(|| format!("round {round}"))?;
        let failed = metric
            .first_failing_answer
            .lock()
            .expect("lock")
            .context("weight 0 before any failing answer")?;
        let ms = zero.duration_since(failed).as_secs_f64() * 1000.0;
        eprintln!("round {round}: {ms:.1} ms");
        latencies.push(ms);
    }
    latencies.sort_by(|a, b| a.total_cmp(b));
    println!(
        "failing measurement -> router at 0% canary, {rounds} rounds, daemon tick {tick}: p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms, min {:.1} ms",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.9),
        percentile(&latencies, 1.0),
        percentile(&latencies, 0.0),
    );
    Ok(())
}
